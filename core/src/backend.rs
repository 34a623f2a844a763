//! The `CmBackend` trait: librdmacm's calls, one method each, same names without `rdma_`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{
    AddrInfo, AddrInfoHints, AsyncEvent, Call, ChannelHandle, CmError, CmEvent, CmOption,
    ConnParam, EventInfo, EventKind, IdHandle, JoinFlags, PortSpace, QpInitAttr, Result, Wait,
};

/// The RDMA connection manager, as a backend: the real librdmacm or the simulated fabric.
///
/// Every method mirrors the librdmacm call of the same name (`create_id` is `rdma_create_id`,
/// ...), so protocol code written for C ports line by line, and one test asserts the same thing
/// on both backends. Methods take `&self`: a backend value may be shared between threads.
///
/// * Errors carry the call's name and the errno the kernel or librdmacm gives for the misuse;
///   each method lists its errnos below. Section numbers (§) are those of the project's
///   CM-SEMANTICS.md; the conformance suite (`tests/src/conformance/`) asserts each listed
///   errno on both backends unless a line says otherwise.
/// * Handles are checked: a stale or foreign handle is an error, never undefined behaviour.
///   Every method taking an id fails with **ENOENT** for an id that is not live in this
///   backend (destroyed, never created, or another backend's), and every method taking a
///   channel with **EBADF** for such a channel; these two are not repeated below.
/// * After DEVICE_REMOVAL, calls on the id that reach the kernel fail with **ENXIO**.
/// * Events are owned values, acknowledged exactly once: by `ack_cm_event`, or by their drop.
/// * Synchronous ids (created without a channel) block in the call itself until the id's next
///   event arrives, and keep it as their current event (`sync_event`); such a call then also
///   fails with the errno its completing event carries (REJECTED: ECONNREFUSED; UNREACHABLE:
///   ETIMEDOUT; ...). A blocking call on the simulator advances virtual time instead of
///   sleeping, and fails with **EDEADLK** when nothing left in the simulation could complete it
///   (and with **EPERM** on a thread that is not one of the fabric's processes while
///   `Fabric::run` is in progress).
/// * Time goes through the backend (`now`, `sleep`), so that protocol code using time is
///   deterministic on the simulator.
///
/// The verbs data path (PDs, regions, CQs, work requests) is the companion trait
/// [`crate::verbs::DataPath`]; QP creation is here so that connections reach ESTABLISHED as
/// real applications do.
pub trait CmBackend: Send + Sync {
    /// `rdma_create_event_channel`.
    ///
    /// * ENODEV: no RDMA device on the machine (cmtwin-verbs; librdmacm needs one).
    /// * ENFILE: the process used up every handle value (never in practice).
    fn create_event_channel(&self) -> Result<ChannelHandle>;

    /// `rdma_destroy_event_channel`.
    ///
    /// * EBUSY: ids still use the channel (librdmacm would leave them dangling, §12.3), or
    ///   (cmtwin-verbs) another thread is inside a call on it, e.g. a waiting `get_cm_event`.
    fn destroy_event_channel(&self, channel: ChannelHandle) -> Result<()>;

    /// `rdma_create_id`. Without a channel the id is synchronous. `context` is returned by
    /// `context` and inherited by children of a listener.
    ///
    /// * EINVAL: a port space the kernel does not know (§4.2).
    /// * ENODEV: no RDMA device (cmtwin-verbs).
    fn create_id(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle>;

    /// `rdma_destroy_id` (destroying the id's QP too, if the application did not).
    ///
    /// * EBUSY: events of this id (or, for a listener, CONNECT_REQUESTs it delivered) are
    ///   fetched and not yet acknowledged, naming them: librdmacm blocks until they are
    ///   (§4.15, §16.7), for ever if nobody else will. As librdmacm, the call first waits for
    ///   other threads to acknowledge them: on the simulator while another process of the run
    ///   could (EBUSY once none can: a deadlock), on cmtwin-verbs for at most
    ///   `cmtwin_verbs::ACK_WAIT` (2 s). Drop or acknowledge them first. cmtwin-verbs: also
    ///   while another thread is inside a call on the id.
    fn destroy_id(&self, id: IdHandle) -> Result<()>;

    /// `rdma_bind_addr`.
    ///
    /// * EINVAL: the id is already bound, resolving, listening or connected (§4.3), or the
    ///   address is IPv6 link-local (fe80::/10) without a scope id (`cma_check_linklocal`).
    ///   The simulator has no interface indexes: any non-zero scope id names the link of the
    ///   device holding the address, where the kernel would look the index up.
    /// * EADDRINUSE: the port is taken in the id's port space (REUSEADDR on both ids shares
    ///   it); EADDRNOTAVAIL: a wildcard bind over a specific one of the same port (§4.3).
    /// * EADDRNOTAVAIL: the address is configured on no interface of the host (measured on
    ///   Linux 6.1 and 6.12, rxe and siw; the conformance suite's
    ///   `bind_unconfigured_address_fails`). ENODEV: its interface has no RDMA device (e.g. the
    ///   device was removed; the ENODEV that §19 records).
    fn bind_addr(&self, id: IdHandle, addr: SocketAddr) -> Result<()>;

    /// `rdma_resolve_addr`: starts address resolution; ADDR_RESOLVED or ADDR_ERROR follows.
    /// `timeout` counts in whole milliseconds (truncated, as librdmacm takes an `int`); it is
    /// not validated, and one under 1 ms gives up at the first look (ADDR_ERROR -ETIMEDOUT
    /// unless no neighbour resolution is needed).
    ///
    /// * EINVAL: already resolving or resolved, listening, or the families of source, bound
    ///   address and destination differ (§4.4).
    /// * ENETUNREACH: no route to the destination, at once (§14.2, §19).
    /// * ENODEV: no RDMA device can reach it.
    fn resolve_addr(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()>;

    /// `rdma_resolve_route`: ROUTE_RESOLVED or ROUTE_ERROR follows.
    ///
    /// * EINVAL: the address is not resolved (the id has no device; librdmacm would crash,
    ///   §16; librdmacm attaches the device as it processes ADDR_RESOLVED, so this holds until
    ///   that event is fetched), the route is already resolved or resolving, or a timeout under 1 ms (whole
    ///   milliseconds, truncated: 0 ms, §4.5).
    /// * ENODEV: the bound netdev has no RoCE port (loopback, §14.3).
    fn resolve_route(&self, id: IdHandle, timeout: Duration) -> Result<()>;

    /// `rdma_listen`. A backlog of 0 or less means the system maximum. An unbound id is bound
    /// to the wildcard address first.
    ///
    /// * EINVAL: already listening, or resolving/connected (§4.6).
    /// * EADDRINUSE, EADDRNOTAVAIL: the id was bound with REUSEADDR and shares its port with
    ///   another id (listening or not) that a bind without REUSEADDR would conflict with: the
    ///   same address (EADDRINUSE), or a wildcard on either side (EADDRNOTAVAIL); a listener
    ///   may not share its port (`rdma_listen` re-checks it with `cma_check_port`, then clears
    ///   the id's REUSEADDR). The id stays bound.
    fn listen(&self, id: IdHandle, backlog: i32) -> Result<()>;

    /// `rdma_get_request`: on a synchronous listener, waits for the next connection request and
    /// returns its new (synchronous) id, which holds the CONNECT_REQUEST as its `sync_event`;
    /// a listener made by `create_ep` (or `DataPath::create_ep_ex`) with QP attributes gives
    /// the id a QP of them, in the PD and with the CQs and SRQ they name (a failure to create
    /// it, e.g. a PD of another device than the request's, destroys the id, where librdmacm
    /// leaves it allocated and unreachable).
    ///
    /// * EINVAL: the listener is not synchronous, or does not listen (librdmacm would block
    ///   forever, §11).
    /// * Otherwise the errno of the event that came instead (ECONNREFUSED for REJECTED), or
    ///   of `create_qp`.
    fn get_request(&self, listen: IdHandle) -> Result<IdHandle>;

    /// `rdma_create_ep(&id, res, NULL, qp_init)`: a synchronous id of `info`'s port space,
    /// its QP (if any) in the device's default PD with CQs the backend makes. A passive
    /// `info` (`rai::PASSIVE`) binds it to the source, ready for `listen`, and keeps a copy
    /// of `qp_init` (with `info`'s QP type), leaving `qp_init` as it is: `get_request` gives
    /// each new id a QP of those attributes. Otherwise it resolves the destination's address
    /// and route (2000 ms each, waiting as a synchronous id does) and creates a QP of
    /// `qp_init`, if given, then writes back into `qp_init`, as librdmacm does into C's
    /// `qp_init_attr`, `info`'s QP type and the capacities `ibv_create_qp` writes back into
    /// C's `attr->cap`: the entries and inline room the QP has (`DataPath::query_qp_cap`'s),
    /// and on rxe of Linux 6.1 the queue depths as asked where `query_qp_cap` reads the
    /// depths the queues hold (later kernels write those back; the simulator follows its
    /// kernel profile, tests/BEDS.md). Composed from the calls above, as in
    /// librdmacm ([`crate::ep`]). A PD, CQs or an SRQ of the program's own are
    /// [`crate::verbs::DataPath::create_ep_ex`]'s.
    ///
    /// * EINVAL: a passive `info` without a source, an active one without a destination.
    /// * Otherwise the error of the step that failed (`rdma_bind_addr`, `rdma_resolve_addr`,
    ///   ...), after destroying what was made.
    fn create_ep(&self, info: &AddrInfo, qp_init: Option<&mut QpInitAttr>) -> Result<IdHandle>;

    /// `rdma_destroy_ep`: destroys the id's QP, if it has one, then the id.
    ///
    /// * The errors of `destroy_qp` and `destroy_id`.
    fn destroy_ep(&self, id: IdHandle) -> Result<()> {
        crate::ep::destroy_ep(self, id)
    }

    /// `rdma_connect`. `None` uses librdmacm's defaults.
    ///
    /// * EINVAL: the route is not resolved, already connecting or connected, RDMA_PS_TCP
    ///   without QP and without parameters, responder resources or initiator depth above the
    ///   device's maximum, or more private data than the transport allows (56 bytes on
    ///   IB/RoCE RC, 180 UD; never truncated, §6.1). On iWARP an id without QP names the QP
    ///   the connection uses in `qp_num` (one made by `DataPath::create_external_qp`; the
    ///   iWARP CM moves it to RTS when MPA completes): EINVAL when no QP of the id's device
    ///   has that number (iwcm.c `iw_cm_connect`'s `iw_get_qp`), before any TCP connection.
    /// * ECONNREFUSED, ETIMEDOUT, ...: on a synchronous id, the errno of the completing event.
    fn connect(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()>;

    /// `rdma_accept` on a passive id.
    ///
    /// * EINVAL: on a listener, on an id whose request is gone or already answered, no QP and
    ///   no parameters (librdmacm would crash, §16), on iWARP an id without QP whose
    ///   `qp_num` names no QP of its device (`iw_cm_accept`; the request is then rejected) or
    ///   a QP the application moved past RTR (siw_accept; siw drops the TCP connection),
    ///   resources above the device's maximum, or too much private data (196 bytes RC, 136
    ///   UD, §6.1). Where
    ///   librdmacm itself fails (the resources; on IB and RoCE a QP past INIT, e.g. a second
    ///   accept, or a UC QP on the id, see `create_qp`) nothing is sent; where the kernel refuses the private data it rejects the
    ///   request (REJ 28), and librdmacm leaves the QP in ERROR.
    /// * EINVAL on an active id: librdmacm always passes parameters, so the kernel tries a REP
    ///   and the IB CM refuses it; as after any failed accept, the kernel then rejects the
    ///   connection where it still can (REJ 28: the peer gets REJECTED). The RTU of a QP-less
    ///   active id is `establish`'s.
    fn accept(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()>;

    /// `rdma_reject` with private data.
    ///
    /// * EINVAL: on a listener, nothing to reject (no request pending, or already answered),
    ///   or too much private data (148 bytes RC, 136 UD, §6.1).
    fn reject(&self, id: IdHandle, private_data: &[u8]) -> Result<()>;

    /// `rdma_disconnect`. A second disconnect is harmless (0), and so is one on an IB or RoCE
    /// listener bound to a device. On a synchronous id (also one made so by `migrate_id`)
    /// the call returns with the id's next event, as librdmacm's does: one already queued at
    /// once (e.g. the peer's DISCONNECTED), else the next to come (TIMEWAIT_EXIT on IB and
    /// RoCE: 2.2 s on rxe of Linux 6.1, 0.5 s on 6.12). On iWARP, once DISCONNECTED was
    /// taken, none comes: librdmacm blocks for ever (measured on siw), the simulator fails
    /// with EDEADLK when nothing else can run. On an iWARP initiator whose MPA request is unanswered the
    /// call waits for the reply (or the MPA timeout), then closes the connection it made.
    ///
    /// * EINVAL: the id has no device, or no connection (idle, resolving), or is an iWARP
    ///   listener (`iw_cm_disconnect` refuses a listening CM id); without a connection, on IB
    ///   and RoCE, its QP is in ERROR all the same (librdmacm moves it there before asking the
    ///   kernel).
    fn disconnect(&self, id: IdHandle) -> Result<()>;

    /// `rdma_notify`: tell the CM about a QP's asynchronous event (COMM_EST, PATH_MIG).
    ///
    /// * EISCONN: COMM_EST on a connection already established (§9).
    /// * EINVAL: the id has no connection, the event does not apply in the CM's state, or an
    ///   event other than COMM_EST and PATH_MIG; on IB and RoCE also a listener (its IB CM id
    ///   is in LISTEN).
    /// * On iWARP the kernel returns 0 for any event once the id has an iWARP CM id: a
    ///   connection (requested, established or ended), or a listener bound to a device.
    fn notify(&self, id: IdHandle, event: AsyncEvent) -> Result<()>;

    /// `rdma_establish`: on an active id without QP, after CONNECT_RESPONSE, sends the RTU.
    ///
    /// * EINVAL: the id has a QP (librdmacm establishes it itself), or is not awaiting an RTU.
    ///   In the latter case the kernel's `rdma_accept` without parameters failed, and it
    ///   rejects the connection where it still can: REJ 28 for a request the id sent or holds
    ///   unanswered, or a REP it sent (the peer gets REJECTED); on iWARP an MPA reject of a
    ///   request the id holds.
    /// * On a passive UD id holding a SIDR request (no QP), the kernel's `rdma_accept` without
    ///   parameters answers it: a SIDR REP with status 0, QP number 0 (none was given) and
    ///   the id's qkey; the call succeeds.
    fn establish(&self, id: IdHandle) -> Result<()>;

    /// `rdma_write_cm_event`: queue an event of `kind` (only USER is accepted) on the id's
    /// channel.
    ///
    /// * EINVAL: a kind other than USER (§10.1); a kernel without the command also answers
    ///   EINVAL, which cmtwin-verbs replaces by delivering the event itself.
    /// * EOPNOTSUPP: a synchronous id where the kernel cannot queue USER events (before Linux
    ///   6.18).
    fn write_cm_event(&self, id: IdHandle, kind: EventKind, status: i32, arg: u64) -> Result<()>;

    /// `rdma_get_cm_event`: the head of the channel's queue.
    ///
    /// * EAGAIN: `Wait::NonBlocking` and no event (§12.1).
    /// * ETIMEDOUT: `Wait::Timeout` passed without an event.
    /// * EDEADLK (simulator): a blocking wait nothing can end.
    fn get_cm_event(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent>;

    /// `rdma_ack_cm_event`: consumes the event. Dropping an event does the same without
    /// reporting errors.
    ///
    /// * EINVAL: the event is not an outstanding one of this backend (made up, another
    ///   backend's, or, on the simulator, another host's); such an event is then released by
    ///   its drop at the backend that issued it.
    fn ack_cm_event(&self, event: CmEvent) -> Result<()>;

    /// `rdma_get_cm_event` on whichever of `channels` has an event first: the `poll(2)` on
    /// several channel fds that a program with several channels writes, then the fetch.
    /// Returns the channel the event came from. When several are ready, the first in the
    /// order given wins (rotate the slice to be fair).
    ///
    /// * EINVAL: no channel given. EBADF: any of them is not a live channel.
    /// * EAGAIN, ETIMEDOUT, EDEADLK: as `get_cm_event`.
    fn get_cm_event_any(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)>;

    /// The first event queued on any of `channels`, or `None`, never waiting: the fetch of a
    /// program whose channel fds are non-blocking, after its own `poll(2)` said they were
    /// readable (the async helpers of [`crate::task`] fetch this way). Unlike a
    /// `Wait::NonBlocking` get, an empty look is no unproductive poll: the simulator does not
    /// let other processes run or time pass for it, and traces nothing for it.
    ///
    /// * EINVAL: no channel given. EBADF: any of them is not a live channel.
    fn try_get_cm_event(
        &self,
        channels: &[ChannelHandle],
    ) -> Result<Option<(ChannelHandle, CmEvent)>> {
        match self.get_cm_event_any(channels, Wait::NonBlocking) {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.errno == crate::Errno::EAGAIN => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Which of `channels` have an event to fetch, without taking any (`poll(2)` on their fds).
    /// Waits as `wait` says for at least one; at the end of the wait, an empty list (as
    /// `poll(2)` returns 0), never EAGAIN or ETIMEDOUT. On cmtwin-verbs a channel is ready when
    /// its fd is readable, and librdmacm may still discard that event (§5.4), so a fetch can
    /// then find nothing; on the simulator readiness is exact.
    ///
    /// * EINVAL: no channel given. EBADF: any of them is not a live channel.
    /// * EDEADLK (simulator): a blocking wait nothing can end.
    fn poll_channels(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>>;

    /// `rdma_join_multicast`: MULTICAST_JOIN or MULTICAST_ERROR follows, carrying `context`.
    ///
    /// * EINVAL: the id is not a UD id (e.g. RDMA_PS_TCP), has no device (bind or resolve
    ///   first), is not in ADDR_BOUND or ADDR_RESOLVED, or the group is the all-zero address
    ///   on RoCE (§13.3).
    /// * ENOTSUPP (524, the kernel's own): an IPv6 group on RoCE (the port's default GID type
    ///   is RoCE v2, §13.3).
    /// * ENOSYS: the port has no multicast (iWARP).
    fn join_multicast(&self, id: IdHandle, addr: SocketAddr, context: u64) -> Result<()>;

    /// `rdma_join_multicast_ex` with `flags` (`join_multicast` is `FullMember`). A send-only
    /// full member sends to the group without receiving from it: librdmacm attaches no QP, the
    /// kernel sends no IGMP join on RoCE and asks the SA for send-only membership on IB.
    ///
    /// * The errnos of `join_multicast`, naming `rdma_join_multicast_ex`.
    /// * EOPNOTSUPP (IB, real backend): the subnet manager does not support send-only
    ///   membership.
    fn join_multicast_ex(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()>;

    /// `rdma_leave_multicast`.
    ///
    /// * EADDRNOTAVAIL: the group was never joined, or already left (§13.3).
    /// * EBUSY: fetched events of the membership are not acknowledged (librdmacm would block
    ///   forever).
    fn leave_multicast(&self, id: IdHandle, addr: SocketAddr) -> Result<()>;

    /// `rdma_resolve_addrinfo`: ADDRINFO_RESOLVED or ADDRINFO_ERROR follows; on a synchronous
    /// id the call returns with that event (failing with the error's errno), so that with
    /// `query_addrinfo` it serves as `rdma_getaddrinfo` (the guide's section 7).
    ///
    /// * ENOENT: the name or service does not resolve (DNS mode fails at once, with no event,
    ///   §10.3).
    /// * EBUSY: a resolution is pending, or resolved and not yet queried.
    /// * EOPNOTSUPP: RAI_SA with RAI_DNS, SA mode with a node, SA mode off InfiniBand, or SA
    ///   mode where the librdmacm in use lacks the call.
    /// * EINVAL: SA mode without a service, on an unbound id, or before Linux 6.18.
    fn resolve_addrinfo(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()>;

    /// `rdma_query_addrinfo`: takes the results of a completed `resolve_addrinfo`.
    ///
    /// * ENOENT: nothing resolved, or already queried.
    fn query_addrinfo(&self, id: IdHandle) -> Result<Vec<AddrInfo>>;

    /// `rdma_getaddrinfo(node, service, hints)` without an id: what `create_ep` takes, as a C
    /// program gets it before it has an id. The same lookup as `resolve_addrinfo`'s DNS mode
    /// (librdmacm 44 over glibc's `getaddrinfo`: one result, made from glibc's first answer;
    /// a passive result names the source, an active one the destination). On the simulator
    /// names are the fabric's host names; on cmtwin-verbs the system's resolver answers.
    /// Numbers are glibc's on both: a numeric service's low 16 bits are the port (`"65536"`
    /// is port 0; an empty service is port 0), and a host may be any form `inet_aton` takes
    /// (`"10.1"` is 10.0.0.1). The simulator knows no service names (`"echo"`: ENOENT).
    ///
    /// * EINVAL: no node, no service and no hints; a NUL byte inside a string.
    /// * ENOENT: the name or service does not resolve (glibc's `EAI_*` failures).
    fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>>;

    /// `rdma_migrate_id`: move the id (and its queued events) to another channel; `None` makes
    /// it synchronous.
    ///
    /// * EBUSY: fetched events of the id are not acknowledged (librdmacm would block forever).
    ///   A CONNECT_REQUEST counts against its listener (§4.15): the new id it names may move
    ///   before it is acknowledged, the listener may not.
    /// * EINVAL: `None` for an id that is already synchronous.
    fn migrate_id(&self, id: IdHandle, channel: Option<ChannelHandle>) -> Result<()>;

    /// `rdma_set_option`.
    ///
    /// * EINVAL: the option is not allowed in the id's state (REUSEADDR once listening,
    ///   AFONLY once resolving, ACK_TIMEOUT on a UD id, IB_PATH before ADDR_RESOLVED, not a
    ///   whole number of 72-byte records or without a record flagged
    ///   [`crate::IB_PATH_PRIMARY_FLAGS`], §4.5, §4.13).
    /// * ENOSYS: an option this backend does not know.
    fn set_option(&self, id: IdHandle, option: &CmOption) -> Result<()>;

    /// `rdma_create_qp` (with CQs created by the backend); returns the QP number.
    ///
    /// * EINVAL: the id has no device (librdmacm would crash, §16; a resolving id has one
    ///   once its ADDR_RESOLVED is fetched, a bound id from the bind), already has a QP, the
    ///   QP type does not suit the port space, or a capacity above the device's maximum
    ///   (`max_qp_wr` requests, `max_sge` entries of `query_device`; on the simulator 256
    ///   inline bytes; an empty queue is allowed), or a queue deeper than the device's
    ///   `max_cqe` (librdmacm makes the QP's CQs one entry a request: on rxe 32767); a
    ///   connected QP on a listener bound to a device (its IB or iWARP CM id is in LISTEN,
    ///   where `rdma_init_qp_attr` fails; create the QPs on the ids of the requests, or
    ///   before `listen`); on IB and RoCE also a connected QP for an id whose IB CM id gives
    ///   no QP attributes any more (its request abandoned by the initiator, its connection
    ///   over).
    /// * EOPNOTSUPP: a QP type the transport lacks (on iWARP every type but RC: siw makes RC
    ///   QPs only).
    ///
    /// A UC QP is made on IB and RoCE, but the CM cannot connect it: every connected id's
    /// connection is RC (the kernel's type for RDMA_PS_TCP, and `rdma_create_id`'s for
    /// RDMA_PS_IB), whose RTR attributes (max_dest_rd_atomic, min_rnr_timer) a UC QP refuses,
    /// so `accept` fails with EINVAL and a client's CONNECT_RESPONSE becomes CONNECT_ERROR
    /// (measured on rxe). A UC connection takes QPs made apart from the ids
    /// (`DataPath::create_external_qp`) moved with `init_qp_attr`, whose attributes
    /// `modify_qp` narrows to UC's, and named in `connect` and `accept`.
    fn create_qp(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32>;

    /// `rdma_destroy_qp`.
    ///
    /// * EINVAL: the id has no QP.
    fn destroy_qp(&self, id: IdHandle) -> Result<()>;

    /// The current event of a synchronous id (`id->event`): what its last blocking call
    /// received, or the CONNECT_REQUEST of an id returned by `get_request`. Only ENOENT.
    fn sync_event(&self, id: IdHandle) -> Result<Option<EventInfo>>;

    /// `rdma_get_local_addr`: the id's source address as librdmacm last copied it from the
    /// kernel (after `bind_addr` and `listen`, and as ADDR_RESOLVED or a CONNECT_REQUEST is
    /// fetched): none on an id that was never refreshed, even once `resolve_addr` bound it,
    /// and a resolution's source only once its ADDR_RESOLVED is fetched (§4.20). Only ENOENT.
    fn local_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>>;

    /// `rdma_get_peer_addr`: the id's destination address as librdmacm holds it: the one
    /// `resolve_addr` was given, from the call on (kept after ADDR_ERROR), a request's
    /// source on its new id, and after a bind or listen without one the bound family's
    /// unspecified address with port 0 (§4.20). Only ENOENT.
    fn peer_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>>;

    /// `rdma_get_src_port` (in host byte order): the port of the address `local_addr`
    /// returns, 0 where librdmacm holds none (its `ucma_get_port` of an address of no
    /// family). After `listen` on port 0, the port the kernel picked. Only ENOENT.
    fn src_port(&self, id: IdHandle) -> Result<u16> {
        let addr = self.local_addr(id).map_err(|e| CmError {
            call: Call::SrcPort,
            ..e
        })?;
        Ok(addr.map_or(0, |a| a.port()))
    }

    /// `rdma_get_dst_port` (in host byte order): the port of the address `peer_addr`
    /// returns, 0 where librdmacm holds none. Only ENOENT.
    fn dst_port(&self, id: IdHandle) -> Result<u16> {
        let addr = self.peer_addr(id).map_err(|e| CmError {
            call: Call::DstPort,
            ..e
        })?;
        Ok(addr.map_or(0, |a| a.port()))
    }

    /// `rdma_get_devices`: the RDMA devices of the host, in the order librdmacm lists them
    /// (the kernel's order of registration; on the simulator the topology's order of the
    /// host's present devices). Each names its device for
    /// [`crate::verbs::DataPath::query_device`] and [`crate::verbs::DataPath::query_port`]:
    /// a program can look at the devices before it has an id. (cmtwin-verbs frees the list
    /// with `rdma_free_devices` before returning.)
    ///
    /// * ENODEV: no RDMA device on the host (librdmacm's `ucma_init` finds none).
    fn devices(&self) -> Result<Vec<crate::DeviceInfo>>;

    /// The device and port the id is attached to: `id->verbs->device` (its name,
    /// `ibv_get_device_name`, and GUID, `ibv_get_device_guid`) and `id->port_num`. `None`
    /// while `id->verbs` is NULL: before a bind to a device's address, and from
    /// `rdma_resolve_addr` until its ADDR_RESOLVED is fetched (librdmacm's `ucma_get_device`
    /// attaches the device as it processes that event, a wildcard bind attaches none); a new
    /// passive id has the device its connection request arrived on. (C's `port_num` is 0 while there is no
    /// device.)
    fn id_device(&self, id: IdHandle) -> Result<Option<crate::IdDevice>>;

    /// The id's context (`id->context`). Only ENOENT.
    fn context(&self, id: IdHandle) -> Result<u64>;

    /// Sets the id's context (`id->context = context`): what `context` returns from now on,
    /// and what children of a listener inherit from the requests fetched afterwards (librdmacm
    /// copies the listener's context when it processes a request, at fetch). Only ENOENT.
    fn set_context(&self, id: IdHandle, context: u64) -> Result<()>;

    /// The QP number of the id's QP, if it has one (`id->qp->qp_num`). Only ENOENT.
    fn qp_num(&self, id: IdHandle) -> Result<Option<u32>>;

    /// The backend's clock: time since the backend was created (virtual on the simulator).
    fn now(&self) -> Duration;

    /// Sleeps for `duration` (advancing virtual time on the simulator). Never fails, except
    /// on the simulator: with EPERM as above, and with EDEADLK for a sleep that never ends
    /// (`Duration::MAX`, beyond the end of virtual time) when nothing else in the simulation
    /// could still run.
    fn sleep(&self, duration: Duration) -> Result<()>;

    /// A spin of the caller (e.g. an executor whose tasks keep waking themselves while one of
    /// them waits for `until`, a time of [`CmBackend::now`]'s clock): gives way, and lets time
    /// move as a spinning CPU would. On librdmacm a spin takes real time: this yields the
    /// thread. On the simulator it is a poll in vain: another process that can run goes
    /// first; when none can, virtual time moves to the earlier of the fabric's next action and
    /// `until`. Fails as `sleep` does, and with EDEADLK when the run is livelocked.
    fn spin(&self, until: Option<Duration>) -> Result<()> {
        let _ = until;
        std::thread::yield_now();
        Ok(())
    }
}
