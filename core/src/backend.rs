//! The `CmBackend` trait: librdmacm's calls, one method each, same names without `rdma_`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{
    AddrInfo, AddrInfoHints, AsyncEvent, ChannelHandle, CmEvent, CmOption, ConnParam, EventInfo,
    EventKind, IdHandle, JoinFlags, PortSpace, QpInitAttr, Result, Wait,
};

/// The RDMA connection manager, as a backend: the real librdmacm or the simulated fabric.
///
/// Every method mirrors the librdmacm call of the same name (`create_id` is `rdma_create_id`,
/// ...), so protocol code written for C ports line by line, and one test asserts the same thing
/// on both backends. Methods take `&self`: a backend value may be shared between threads.
///
/// * Errors carry the call's name and the errno the kernel or librdmacm gives for the misuse.
/// * Handles are checked: a stale or foreign handle is an error (ENOENT for an unknown id,
///   EBADF for an unknown channel), never undefined behaviour.
/// * Events are owned values; `ack_cm_event` consumes them.
/// * Synchronous ids (created without a channel) block in the call itself until the id's next
///   event arrives, and keep it as their current event (`sync_event`); a blocking call on the
///   simulator advances virtual time instead of sleeping.
/// * Time goes through the backend (`now`, `sleep`), so that protocol code using time is
///   deterministic on the simulator.
///
/// The message data path (post send/receive, poll completions) will extend this trait; QP
/// creation is already here so that connections reach ESTABLISHED as real applications do.
pub trait CmBackend: Send + Sync {
    /// `rdma_create_event_channel`.
    fn create_event_channel(&self) -> Result<ChannelHandle>;

    /// `rdma_destroy_event_channel`. Refused with EBUSY while ids still use the channel
    /// (librdmacm would leave those ids dangling).
    fn destroy_event_channel(&self, channel: ChannelHandle) -> Result<()>;

    /// `rdma_create_id`. Without a channel the id is synchronous. `context` is returned by
    /// `context` and inherited by children of a listener.
    fn create_id(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle>;

    /// `rdma_destroy_id`. Fails with EBUSY, naming them, while events of this id (or, for a
    /// listener, CONNECT_REQUESTs it delivered) are unacknowledged: librdmacm would block forever.
    fn destroy_id(&self, id: IdHandle) -> Result<()>;

    /// `rdma_bind_addr`.
    fn bind_addr(&self, id: IdHandle, addr: SocketAddr) -> Result<()>;

    /// `rdma_resolve_addr`: starts address resolution; ADDR_RESOLVED or ADDR_ERROR follows.
    fn resolve_addr(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()>;

    /// `rdma_resolve_route`: ROUTE_RESOLVED or ROUTE_ERROR follows.
    fn resolve_route(&self, id: IdHandle, timeout: Duration) -> Result<()>;

    /// `rdma_listen`. A backlog of 0 or less means the system maximum.
    fn listen(&self, id: IdHandle, backlog: i32) -> Result<()>;

    /// `rdma_get_request`: on a synchronous listener, waits for the next connection request and
    /// returns its new (synchronous) id, which holds the CONNECT_REQUEST as its `sync_event`.
    fn get_request(&self, listen: IdHandle) -> Result<IdHandle>;

    /// `rdma_connect`. `None` uses librdmacm's defaults (and is EINVAL for an RC id without QP).
    fn connect(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()>;

    /// `rdma_accept` on a passive id (or, on an active id without QP, sends the RTU).
    fn accept(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()>;

    /// `rdma_reject` with private data.
    fn reject(&self, id: IdHandle, private_data: &[u8]) -> Result<()>;

    /// `rdma_disconnect`.
    fn disconnect(&self, id: IdHandle) -> Result<()>;

    /// `rdma_notify`: tell the CM about a QP's asynchronous event (COMM_EST, PATH_MIG).
    fn notify(&self, id: IdHandle, event: AsyncEvent) -> Result<()>;

    /// `rdma_establish`: on an active id without QP, after CONNECT_RESPONSE, sends the RTU.
    fn establish(&self, id: IdHandle) -> Result<()>;

    /// `rdma_write_cm_event`: queue an event of `kind` (only USER is accepted) on the id's channel.
    fn write_cm_event(&self, id: IdHandle, kind: EventKind, status: i32, arg: u64) -> Result<()>;

    /// `rdma_get_cm_event`: the head of the channel's queue.
    fn get_cm_event(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent>;

    /// `rdma_ack_cm_event`: consumes the event.
    fn ack_cm_event(&self, event: CmEvent) -> Result<()>;

    /// `rdma_get_cm_event` on whichever of `channels` has an event first: the `poll(2)` on
    /// several channel fds that a program with several channels writes, then the fetch.
    /// Returns the channel the event came from. When several are ready, the first in the
    /// order given wins (rotate the slice to be fair).
    fn get_cm_event_any(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)>;

    /// Which of `channels` have an event to fetch, without taking any (`poll(2)` on their fds).
    /// Waits as `wait` says for at least one; at the end of the wait, an empty list (as
    /// `poll(2)` returns 0), never EAGAIN or ETIMEDOUT.
    fn poll_channels(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>>;

    /// `rdma_join_multicast`: MULTICAST_JOIN or MULTICAST_ERROR follows, carrying `context`.
    fn join_multicast(&self, id: IdHandle, addr: SocketAddr, context: u64) -> Result<()>;

    /// `rdma_join_multicast_ex` with `flags` (`join_multicast` is `FullMember`).
    fn join_multicast_ex(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()>;

    /// `rdma_leave_multicast`.
    fn leave_multicast(&self, id: IdHandle, addr: SocketAddr) -> Result<()>;

    /// `rdma_resolve_addrinfo`: ADDRINFO_RESOLVED or ADDRINFO_ERROR follows.
    fn resolve_addrinfo(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()>;

    /// `rdma_query_addrinfo`: takes the results of a completed `resolve_addrinfo`.
    fn query_addrinfo(&self, id: IdHandle) -> Result<Vec<AddrInfo>>;

    /// `rdma_migrate_id`: move the id (and its queued events) to another channel; `None` makes
    /// it synchronous.
    fn migrate_id(&self, id: IdHandle, channel: Option<ChannelHandle>) -> Result<()>;

    /// `rdma_set_option`.
    fn set_option(&self, id: IdHandle, option: &CmOption) -> Result<()>;

    /// `rdma_create_qp` (with CQs created by the backend); returns the QP number.
    fn create_qp(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32>;

    /// `rdma_destroy_qp`.
    fn destroy_qp(&self, id: IdHandle) -> Result<()>;

    /// The current event of a synchronous id (`id->event`): what its last blocking call
    /// received, or the CONNECT_REQUEST of an id returned by `get_request`.
    fn sync_event(&self, id: IdHandle) -> Result<Option<EventInfo>>;

    /// `rdma_get_local_addr`: the id's source address, once bound.
    fn local_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>>;

    /// `rdma_get_peer_addr`: the id's destination address, once known.
    fn peer_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>>;

    /// The context given to `create_id` (`id->context`).
    fn context(&self, id: IdHandle) -> Result<u64>;

    /// Sets the id's context (`id->context = context`): what `context` returns from now on,
    /// and what children of a listener inherit from the requests fetched afterwards.
    fn set_context(&self, id: IdHandle, context: u64) -> Result<()>;

    /// The QP number of the id's QP, if it has one (`id->qp->qp_num`).
    fn qp_num(&self, id: IdHandle) -> Result<Option<u32>>;

    /// The backend's clock: time since the backend was created (virtual on the simulator).
    fn now(&self) -> Duration;

    /// Sleeps for `duration` (advancing virtual time on the simulator).
    fn sleep(&self, duration: Duration) -> Result<()>;
}
