//! cmtwin-verbs: the real backend of [`cmtwin::CmBackend`], over librdmacm through `rdma-sys`.
//!
//! It runs wherever librdmacm does: on RDMA hardware, and on Soft-RoCE (`rdma_rxe`). It adds what
//! librdmacm lacks for a safe API:
//!
//! * **Checked handles.** Ids and channels are registered objects (see `registry.rs`); a
//!   stale or foreign handle is ENOENT (ids) or EBADF (channels), never a dangling pointer.
//! * **Refusals before C.** Calls that crash librdmacm (CM-SEMANTICS §16, §19) are refused with
//!   the errno the kernel gives for them: resolve_route/connect/accept/create_qp on an id
//!   without a device, accept without parameters on an id without QP, accept/reject on a
//!   listener, oversize private data — all EINVAL.
//! * **Owned events.** Each event is copied into a [`cmtwin::CmEvent`] and acked in C at once;
//!   the backend tracks the Rust event instead, so `destroy_id` with unacknowledged events is
//!   EBUSY (naming them) rather than a deadlock, and a bad ack is EINVAL. Dropping an event
//!   releases its ticket (on any thread; nothing once the backend is gone: the event holds
//!   only a weak reference to the registry).
//! * **Waiting** with [`cmtwin::Wait`]: blocking, non-blocking (EAGAIN) and timed (ETIMEDOUT),
//!   on one channel or several at once (one `poll` on all their fds);
//!   [`VerbsBackend::channel_fd`] exposes the channel fd for poll/epoll/tokio users.
//! * **Portability across librdmacm versions.** `rdma_write_cm_event` and
//!   `rdma_resolve_addrinfo` (rdma-core v60, kernel 6.18) are looked up at run time; where they
//!   are missing or the kernel refuses them, USER and ADDRINFO_* events are delivered through
//!   the backend's own per-channel queue, which the waits poll together with the channel fd.
//!
//! ```no_run
//! use std::time::Duration;
//! use cmtwin::{CmBackend, ConnParam, EventKind, PortSpace, QpInitAttr, QpType, Wait};
//! use cmtwin_verbs::VerbsBackend;
//!
//! # fn main() -> cmtwin::Result<()> {
//! let cm = VerbsBackend::new();
//! let ch = cm.create_event_channel()?; // ENODEV on a machine without RDMA devices
//! let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
//! cm.resolve_addr(id, None, "192.168.77.1:7471".parse().unwrap(), Duration::from_secs(2))?;
//! let ev = cm.get_cm_event(ch, Wait::Timeout(Duration::from_secs(5)))?;
//! assert_eq!(ev.kind(), EventKind::AddrResolved);
//! cm.ack_cm_event(ev)?;
//! cm.resolve_route(id, Duration::from_secs(2))?;
//! let ev = cm.get_cm_event(ch, Wait::Block)?;
//! cm.ack_cm_event(ev)?;
//! cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
//! cm.connect(id, Some(&ConnParam::with_private_data(b"hello")))?;
//! let ev = cm.get_cm_event(ch, Wait::Block)?; // ESTABLISHED, REJECTED, ...
//! println!("{} status {}", ev.kind(), ev.status());
//! cm.ack_cm_event(ev)?;
//! cm.destroy_id(id)?; // also destroys the QP
//! cm.destroy_event_channel(ch)?;
//! # Ok(())
//! # }
//! ```
//!
//! Where each librdmacm call is wrapped:
//!
//! | Area | File |
//! |---|---|
//! | every `unsafe` (librdmacm, libibverbs, eventfd, poll, dlsym) | `ffi.rs`, `ffi/verbs.rs`, `ffi/devices.rs` |
//! | handles, live objects, outstanding events | `registry.rs` |
//! | handle and ticket values (64-bit, never reused) | `keys.rs` |
//! | `rdma_create/destroy_event_channel`, `rdma_get_cm_event` (on one or several channels, readiness), `rdma_ack_cm_event` | `channel.rs` |
//! | translation of `struct rdma_cm_event` into [`cmtwin::CmEvent`] | `events.rs` |
//! | `rdma_create/destroy_id`, bind, resolve, listen, connect, accept, reject, disconnect, notify, establish, migrate, set_option, addresses | `id.rs` |
//! | private-data limits | `private_data.rs` |
//! | `rdma_get_request`, synchronous ids' current event, `rdma_create_ep` (composed as librdmacm composes it: `cmtwin::ep`) | `sync_ids.rs` |
//! | `rdma_create_qp`, `rdma_destroy_qp` | `qp.rs` |
//! | `rdma_join_multicast(_ex)`, `rdma_leave_multicast` | `multicast.rs` |
//! | `rdma_write_cm_event` (native or emulated) | `user_events.rs` |
//! | `rdma_get_devices`, `id->verbs`/`port_num`; `ibv_query_device`, `ibv_query_port` | `ffi/devices.rs` (called from this file and `verbs/datapath.rs`) |
//! | `rdma_resolve_addrinfo`, `rdma_query_addrinfo` (native or emulated over `rdma_getaddrinfo`) | `addrinfo.rs` |
//! | the data path ([`cmtwin::verbs::DataPath`]): PDs, regions, completion channels, CQs, QPs with chosen CQs, the external-QP path, posts, polls, asynchronous events | `verbs/` (its unsafe half in `ffi/verbs.rs`) |
//!
//! Choices where librdmacm has no safe answer of its own:
//!
//! * `destroy_id` also destroys the id's QP (and the CQs librdmacm created for it) when the
//!   application did not call `destroy_qp`; dropping the backend destroys every id and channel
//!   still registered. Nothing leaks.
//! * `destroy_id`, `migrate_id` with unacknowledged events of the id (CONNECT_REQUESTs count
//!   against the listener; a `get_request` child holding its request counts too): EBUSY naming
//!   them. `destroy_id`/`destroy_event_channel` while another thread is inside a call on the
//!   object (e.g. blocked in `get_cm_event` or a synchronous call): EBUSY. A channel with ids:
//!   EBUSY.
//! * `destroy_id` of an id that got DEVICE_REMOVAL makes librdmacm release the removed device
//!   ([`VerbsBackend::release_removed_devices`]); otherwise rxe could never finish removing it.
//! * `write_cm_event` on a request's id that was not accepted succeeds and the event is never
//!   seen (as the kernel does, §10.1). Without kernel support it is delivered by the backend;
//!   on a synchronous id that is impossible: EOPNOTSUPP.
//! * Emulated `resolve_addrinfo` (DNS mode): a resolution failure is returned at once (the
//!   errno, or ENOENT for getaddrinfo's "not found" codes), with no event, as librdmacm does;
//!   SA mode needs the real call: EOPNOTSUPP.
//! * `get_request` on a listener that is not synchronous or not listening: EINVAL (librdmacm
//!   would block forever on the latter). `destroy_qp` without a QP: EINVAL. When the QP that
//!   `create_ep` asked for cannot be made on the new id, the id is destroyed (librdmacm leaves
//!   it allocated, out of the application's reach).
//! * `destroy_id` with fetched events unacknowledged waits up to [`ACK_WAIT`] for other threads
//!   to acknowledge them (librdmacm waits without bound, for ever if the caller holds them),
//!   then fails with EBUSY naming them; the simulator waits while another of its processes
//!   could acknowledge them, which it knows exactly.
//! * Calls on one id are serialised: while a thread blocks in a call on a synchronous id, other
//!   calls on that id (even `local_addr`) wait; `write_cm_event` does not. Every call on an id
//!   of a channel (queries such as `local_addr` and `qp_num` included, `resolve_addrinfo`
//!   excepted) also waits for a `get_cm_event` that is inside librdmacm on that channel, never
//!   for one that is waiting for an event: librdmacm writes the id's addresses, device and QP
//!   state while it processes an event (see `registry.rs`), and librdmacm 44 crashes when an
//!   id is destroyed while its event is being processed and its kernel handle is reused at
//!   once (found by the concurrency test).
//! * The channel fd is in O_NONBLOCK mode. Backend-injected events are delivered after the
//!   kernel events already queued when `get_cm_event` looks.
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod addrinfo;
mod channel;
mod deadline;
mod events;
#[allow(unsafe_code)] // the crate's only unsafe code, each block with a SAFETY comment
mod ffi;
mod id;
mod keys;
mod multicast;
mod private_data;
mod qp;
mod registry;
mod sync_ids;
#[cfg(feature = "tokio")]
mod tokio_channel;
mod user_events;
mod verbs;

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use cmtwin::{
    AckTicket, AddrInfo, AddrInfoHints, AsyncEvent, Call, ChannelHandle, CmBackend, CmError,
    CmEvent, CmOption, ConnParam, Errno, EventInfo, EventKind, EventRelease, IdHandle, JoinFlags,
    PortSpace, QpInitAttr, Result, Wait,
};

use registry::{lock, ChannelObj, IdObj, Registry};
#[cfg(feature = "tokio")]
pub use tokio_channel::AsyncChannel;

/// The real RDMA connection manager: librdmacm, with checked handles and owned events.
///
/// One value is one independent set of channels and ids; its handles are foreign to any other
/// value. It may be shared between threads (`&self` methods) and cloned (a clone is the same
/// set: threads of a program hold clones, as with the simulator's `SimBackend`). Dropping the
/// last clone destroys what is left (QPs, ids, then channels), so a test that fails half-way
/// leaks nothing.
#[derive(Clone)]
pub struct VerbsBackend {
    shared: Arc<Shared>,
    start: Instant,
}

/// The registry, behind an `Arc` so that events can hold a weak reference to it: an event
/// dropped unacknowledged releases its ticket here, if the backend still exists.
struct Shared {
    registry: Mutex<Registry>,
    /// Signalled at every acknowledgement (a `destroy_id` waiting for another thread's acks).
    acked: std::sync::Condvar,
    /// The asynchronous events of this backend's QPs and CQs.
    inbox: Arc<verbs::AsyncInbox>,
}

/// How long `destroy_id` waits for other threads to acknowledge the id's fetched events before
/// it fails with EBUSY (librdmacm would wait forever: for ever, if the caller holds them).
pub const ACK_WAIT: Duration = Duration::from_secs(2);

/// An event dropped unacknowledged: its C event was acked when it was fetched, so only the
/// backend's ticket is left to release (any thread, any time; a ticket already released or
/// foreign is ignored).
impl EventRelease for Shared {
    fn release_dropped(&self, _info: &EventInfo, ticket: AckTicket) {
        lock(&self.registry).ack(ticket);
        self.acked.notify_all();
    }
}

impl Default for VerbsBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let (ids, channels, mut verbs) = {
            let mut reg = lock(&self.registry);
            let (ids, channels) = reg.drain();
            (ids, channels, std::mem::take(&mut reg.verbs))
        };
        // Groups still joined are left first: that detaches the ids' QPs, which could not be
        // destroyed while attached. Then QPs made apart from ids; the ids' QPs and librdmacm's
        // CQs go with the ids; then the CQs, channels, regions and PDs the backend made.
        for obj in &ids {
            let groups = std::mem::take(&mut lock(&obj.state).groups);
            for group in groups {
                let _ = obj.raw.leave_multicast(&group);
            }
        }
        verbs.teardown_qps();
        // The last clone of the backend is gone and `&mut self`: no call is in progress, so
        // every Arc is the registry's only one, except that each id holds its channel (dropped
        // with the id, before the channels below).
        for obj in ids {
            if let Ok(obj) = Arc::try_unwrap(obj) {
                let state = obj.state.into_inner().unwrap_or_else(|p| p.into_inner());
                let _fetch = state.channel.as_ref().map(|c| lock(&c.fetch));
                let _ = obj.raw.destroy();
            }
        }
        verbs.teardown_srqs();
        verbs.teardown_rest();
        for ch in channels {
            if let Ok(ch) = Arc::try_unwrap(ch) {
                ch.raw.destroy();
            }
        }
    }
}

impl std::fmt::Debug for VerbsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsBackend").finish_non_exhaustive()
    }
}

impl VerbsBackend {
    /// A backend with no objects yet. Creating it never fails; the first call that needs an
    /// RDMA device reports ENODEV when there is none.
    pub fn new() -> Self {
        VerbsBackend {
            shared: Arc::new(Shared {
                registry: Mutex::new(Registry::new()),
                acked: std::sync::Condvar::new(),
                inbox: verbs::AsyncInbox::new(),
            }),
            start: Instant::now(),
        }
    }

    /// The file descriptor of an event channel (`channel->fd`), for programs that wait in
    /// their own `poll`/`epoll`/event loop (tokio's `AsyncFd`, mio) instead of in
    /// `get_cm_event`.
    ///
    /// * It is in O_NONBLOCK mode and becomes readable when the kernel queued an event.
    ///   librdmacm may still discard that event when it is fetched (§5.4), so on readiness
    ///   call `get_cm_event(.., Wait::NonBlocking)` until it returns EAGAIN, and treat EAGAIN
    ///   as "nothing after all".
    /// * Events the backend injects itself (USER events on kernels without
    ///   `rdma_write_cm_event`, emulated ADDRINFO_* events) signal [`Self::injected_fd`]
    ///   instead: register both fds.
    /// * The fd belongs to the channel: never read, write or close it; it is valid until
    ///   `destroy_event_channel`, which a registration must not outlive.
    /// * Within the trait, [`CmBackend::poll_channels`] and [`CmBackend::get_cm_event_any`]
    ///   do this `poll` on both fds of every channel given.
    ///
    /// EBADF for a channel that is not live in this backend.
    pub fn channel_fd(&self, channel: ChannelHandle) -> Result<RawFd> {
        Ok(self.channel_obj(Call::GetCmEvent, channel)?.raw.fd())
    }

    /// The eventfd that is readable while backend-injected events are queued on `channel`;
    /// poll it together with [`Self::channel_fd`].
    pub fn injected_fd(&self, channel: ChannelHandle) -> Result<RawFd> {
        Ok(self.channel_obj(Call::GetCmEvent, channel)?.wake.fd())
    }

    /// Whether this librdmacm exports `rdma_write_cm_event` (rdma-core v60+). Without it, USER
    /// events are always delivered through the backend's own queue.
    pub fn has_native_write_cm_event() -> bool {
        ffi::has_native_write_cm_event()
    }

    /// Whether this librdmacm exports `rdma_resolve_addrinfo` (rdma-core v60+). Without it,
    /// DNS-mode resolution is emulated over `rdma_getaddrinfo`.
    pub fn has_native_resolve_addrinfo() -> bool {
        ffi::has_native_resolve_addrinfo()
    }

    /// Makes librdmacm re-read the device list (`rdma_get_devices`), so that it closes its
    /// context of a removed device that no id uses any more; returns the number of devices.
    ///
    /// librdmacm 44 otherwise keeps a removed device open, and drivers that cannot
    /// disassociate user contexts (rxe) then cannot finish unregistering it. `destroy_id` of an
    /// id that got DEVICE_REMOVAL calls this itself. It cannot help when the removed device was
    /// the last one (librdmacm stops at "no devices" before releasing anything).
    pub fn release_removed_devices() -> usize {
        ffi::refresh_device_list()
    }

    /// How events this backend returns reach it when dropped unacknowledged.
    fn release_path(&self) -> Weak<dyn EventRelease> {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        weak
    }

    fn reg(&self) -> MutexGuard<'_, Registry> {
        lock(&self.shared.registry)
    }

    /// Wakes the calls waiting for an acknowledgement (`destroy_id`).
    fn notify_acked(&self) {
        self.shared.acked.notify_all();
    }

    /// Waits, the registry unlocked, until an acknowledgement or until `at_most` passes.
    fn wait_acked<'a>(
        &'a self,
        reg: MutexGuard<'a, Registry>,
        at_most: Duration,
    ) -> MutexGuard<'a, Registry> {
        let (reg, _) = self
            .shared
            .acked
            .wait_timeout(reg, at_most)
            .unwrap_or_else(|e| e.into_inner());
        reg
    }

    /// The live id `h`, or ENOENT (unknown, destroyed, or issued by another backend value).
    fn id_obj(&self, call: Call, h: IdHandle) -> Result<Arc<IdObj>> {
        let reg = self.reg();
        reg.id(h).ok_or_else(|| {
            let why = if reg.is_mine(h.raw()) {
                "no live id has this handle (destroyed, or never created)"
            } else {
                "the handle was issued by another backend value"
            };
            CmError::new(call, Errno::ENOENT, format!("{h}: {why}"))
        })
    }

    /// The live channel `h`, or EBADF.
    fn channel_obj(&self, call: Call, h: ChannelHandle) -> Result<Arc<ChannelObj>> {
        let reg = self.reg();
        reg.channel(h).ok_or_else(|| {
            let why = if reg.is_mine(h.raw()) {
                "no live event channel has this handle (destroyed, or never created)"
            } else {
                "the handle was issued by another backend value"
            };
            CmError::new(call, Errno::EBADF, format!("{h}: {why}"))
        })
    }
}

/// An error for `call` with `errno`.
pub(crate) fn err(call: Call, errno: i32, detail: impl Into<String>) -> CmError {
    CmError::new(call, Errno(errno), detail)
}

/// ENFILE for `call`: the process used up every handle and ticket value (see `keys.rs`).
pub(crate) fn keys_exhausted(call: Call) -> CmError {
    err(
        call,
        libc::ENFILE,
        "this process has used up all 2^64 handle and ticket values",
    )
}

/// An error reported by librdmacm itself for `call`.
pub(crate) fn c_err(call: Call, errno: i32) -> CmError {
    let text = std::io::Error::from_raw_os_error(errno);
    CmError::new(
        call,
        Errno(errno),
        format!("librdmacm {} failed: {text}", call.name()),
    )
}

impl CmBackend for VerbsBackend {
    fn create_event_channel(&self) -> Result<ChannelHandle> {
        self.create_event_channel_impl()
    }

    fn destroy_event_channel(&self, channel: ChannelHandle) -> Result<()> {
        self.destroy_event_channel_impl(channel)
    }

    fn create_id(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle> {
        self.create_id_impl(channel, context, port_space)
    }

    fn destroy_id(&self, id: IdHandle) -> Result<()> {
        self.destroy_id_impl(id)
    }

    fn bind_addr(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        self.bind_addr_impl(id, addr)
    }

    fn resolve_addr(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.resolve_addr_impl(id, src, dst, timeout)
    }

    fn resolve_route(&self, id: IdHandle, timeout: Duration) -> Result<()> {
        self.resolve_route_impl(id, timeout)
    }

    fn listen(&self, id: IdHandle, backlog: i32) -> Result<()> {
        self.listen_impl(id, backlog)
    }

    fn get_request(&self, listen: IdHandle) -> Result<IdHandle> {
        self.get_request_impl(listen)
    }

    fn create_ep(
        &self,
        info: &cmtwin::AddrInfo,
        qp_init: Option<&mut QpInitAttr>,
    ) -> Result<IdHandle> {
        cmtwin::ep::with_cm_attr(qp_init, |ep| self.create_ep_of(info, ep))
    }

    fn connect(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        self.connect_impl(id, param)
    }

    fn accept(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        self.accept_impl(id, param)
    }

    fn reject(&self, id: IdHandle, private_data: &[u8]) -> Result<()> {
        self.reject_impl(id, private_data)
    }

    fn disconnect(&self, id: IdHandle) -> Result<()> {
        self.disconnect_impl(id)
    }

    fn notify(&self, id: IdHandle, event: AsyncEvent) -> Result<()> {
        self.notify_impl(id, event)
    }

    fn establish(&self, id: IdHandle) -> Result<()> {
        self.establish_impl(id)
    }

    fn write_cm_event(&self, id: IdHandle, kind: EventKind, status: i32, arg: u64) -> Result<()> {
        self.write_cm_event_impl(id, kind, status, arg)
    }

    fn get_cm_event(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent> {
        self.get_cm_event_any_impl(&[channel], wait).map(|(_, e)| e)
    }

    fn get_cm_event_any(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)> {
        self.get_cm_event_any_impl(channels, wait)
    }

    fn poll_channels(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>> {
        self.poll_channels_impl(channels, wait)
    }

    fn ack_cm_event(&self, event: CmEvent) -> Result<()> {
        self.ack_cm_event_impl(event)
    }

    fn join_multicast(&self, id: IdHandle, addr: SocketAddr, context: u64) -> Result<()> {
        self.join_multicast_impl(id, addr, None, context)
    }

    fn join_multicast_ex(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()> {
        self.join_multicast_impl(id, addr, Some(flags), context)
    }

    fn leave_multicast(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        self.leave_multicast_impl(id, addr)
    }

    fn resolve_addrinfo(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()> {
        self.resolve_addrinfo_impl(id, node, service, hints)
    }

    fn query_addrinfo(&self, id: IdHandle) -> Result<Vec<AddrInfo>> {
        self.query_addrinfo_impl(id)
    }

    fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>> {
        self.getaddrinfo_impl(node, service, hints)
    }

    fn migrate_id(&self, id: IdHandle, channel: Option<ChannelHandle>) -> Result<()> {
        self.migrate_id_impl(id, channel)
    }

    fn set_option(&self, id: IdHandle, option: &CmOption) -> Result<()> {
        self.set_option_impl(id, option)
    }

    fn create_qp(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32> {
        self.create_qp_impl(id, attr)
    }

    fn destroy_qp(&self, id: IdHandle) -> Result<()> {
        self.destroy_qp_impl(id)
    }

    fn sync_event(&self, id: IdHandle) -> Result<Option<EventInfo>> {
        self.sync_event_impl(id)
    }

    fn local_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.local_addr_impl(id)
    }

    fn peer_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.peer_addr_impl(id)
    }

    fn context(&self, id: IdHandle) -> Result<u64> {
        Ok(self.id_obj(Call::Context, id)?.raw.context())
    }

    fn set_context(&self, id: IdHandle, context: u64) -> Result<()> {
        // Under the id's locks: librdmacm reads a listener's context while it processes a
        // request on the listener's channel.
        self.on_id(Call::SetContext, id, |o| {
            o.raw.set_context(context);
            Ok(())
        })
    }

    fn qp_num(&self, id: IdHandle) -> Result<Option<u32>> {
        self.qp_num_impl(id)
    }

    fn devices(&self) -> Result<Vec<cmtwin::DeviceInfo>> {
        ffi::devices().map_err(|e| err(Call::GetDevices, e, "librdmacm lists no device"))
    }

    fn id_device(&self, id: IdHandle) -> Result<Option<cmtwin::IdDevice>> {
        // Under the id's locks: librdmacm sets `id->verbs` as it processes the id's events.
        self.on_id(Call::IdDevice, id, |o| Ok(o.raw.device()))
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Result<()> {
        std::thread::sleep(duration);
        Ok(())
    }
}
