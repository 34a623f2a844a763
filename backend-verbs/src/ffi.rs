//! Every `unsafe` of the crate: thin wrappers over librdmacm (through `rdma-sys`), and the few
//! libc calls the backend needs (eventfd, poll, fcntl, dlsym); the libibverbs objects of the
//! data path are in the submodule `ffi/verbs.rs`, the device queries in `ffi/devices.rs`.
//!
//! # The ownership invariant that makes these wrappers sound
//!
//! [`RawChannel`], [`RawId`] and [`RawEvent`] each own one live librdmacm object. They are not
//! `Clone`, are created only by this module (from a successful librdmacm call), and the C object
//! is freed only by a method that consumes the wrapper (`destroy`, `ack`). So as long as a
//! wrapper exists, its pointer is valid. The rest of the crate keeps each `RawId`/`RawChannel`
//! inside an `Arc` in the registry and destroys it only after `Arc::try_unwrap` proved that no
//! other thread is using it. An id also holds an `Arc` of its channel, so a channel is never
//! destroyed before its ids.
//!
//! Calls that librdmacm does not check and that would crash (CM-SEMANTICS §16: resolve_route,
//! connect, accept, create_qp on an id without a device; accept/reject on a listener; oversize
//! private data) are refused by the callers of these wrappers, before they get here.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::OnceLock;

use rdma_sys as sys;

mod devices;
mod srq;
mod verbs;
pub(crate) use devices::{devices, query_device, query_port};
pub(crate) use srq::{RawSrq, SrqAttrC};
pub(crate) use verbs::*;

/// Result of a C call: the errno on failure.
pub(crate) type CResult<T> = std::result::Result<T, i32>;

/// The calling thread's errno.
fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// librdmacm's convention: 0 is success, -1 sets errno; very old versions return -errno.
fn check(ret: c_int) -> CResult<()> {
    match ret {
        0 => Ok(()),
        r if r < -1 => Err(-r),
        _ => Err(last_errno()),
    }
}

/// libibverbs' conventions: 0 is success; most calls return an errno, some -1 with errno set,
/// a few -errno.
fn check_ibv(ret: c_int) -> CResult<()> {
    match ret {
        0 => Ok(()),
        r if r > 0 => Err(r),
        r if r < -1 => Err(-r),
        _ => Err(last_errno()),
    }
}

// ---------------------------------------------------------------------------------------------
// Declarations that rdma-sys lacks or types unsuitably.
// ---------------------------------------------------------------------------------------------

extern "C" {
    /// `rdma_notify`, declared with a plain `int`: rdma-sys types the event as a Rust enum, and
    /// an out-of-range value in a Rust enum would be undefined behaviour.
    #[link_name = "rdma_notify"]
    fn rdma_notify_int(id: *mut sys::rdma_cm_id, event: c_int) -> c_int;
}

/// `int rdma_write_cm_event(struct rdma_cm_id *, enum rdma_cm_event_type, int, uint64_t)`
/// (librdmacm RDMACM_1.4, rdma-core v60+).
type WriteCmEventFn = unsafe extern "C" fn(*mut sys::rdma_cm_id, c_uint, c_int, u64) -> c_int;
/// `int rdma_resolve_addrinfo(struct rdma_cm_id *, const char *, const char *,
/// const struct rdma_addrinfo *)` (RDMACM_1.4).
type ResolveAddrinfoFn = unsafe extern "C" fn(
    *mut sys::rdma_cm_id,
    *const libc::c_char,
    *const libc::c_char,
    *const sys::rdma_addrinfo,
) -> c_int;
/// `int rdma_query_addrinfo(struct rdma_cm_id *, struct rdma_addrinfo **)` (RDMACM_1.4).
type QueryAddrinfoFn =
    unsafe extern "C" fn(*mut sys::rdma_cm_id, *mut *mut sys::rdma_addrinfo) -> c_int;

/// Looks `name` up among the loaded libraries (librdmacm is linked, hence loaded).
fn lookup_symbol(name: &CStr) -> Option<NonNull<c_void>> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the name.
    NonNull::new(unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
}

fn write_cm_event_fn() -> Option<WriteCmEventFn> {
    static F: OnceLock<Option<WriteCmEventFn>> = OnceLock::new();
    *F.get_or_init(|| {
        lookup_symbol(c"rdma_write_cm_event").map(|p| {
            // SAFETY: the symbol exported under this name by librdmacm has this C signature
            // (rdma_cma.h of rdma-core v60+); a function pointer has the size of a data pointer.
            unsafe { mem::transmute::<*mut c_void, WriteCmEventFn>(p.as_ptr()) }
        })
    })
}

fn resolve_addrinfo_fn() -> Option<(ResolveAddrinfoFn, QueryAddrinfoFn)> {
    static F: OnceLock<Option<(ResolveAddrinfoFn, QueryAddrinfoFn)>> = OnceLock::new();
    *F.get_or_init(|| {
        let resolve = lookup_symbol(c"rdma_resolve_addrinfo")?;
        let query = lookup_symbol(c"rdma_query_addrinfo")?;
        // SAFETY: as in `write_cm_event_fn`: the exported symbols have these C signatures.
        unsafe {
            Some((
                mem::transmute::<*mut c_void, ResolveAddrinfoFn>(resolve.as_ptr()),
                mem::transmute::<*mut c_void, QueryAddrinfoFn>(query.as_ptr()),
            ))
        }
    })
}

/// Whether this librdmacm exports `rdma_write_cm_event`.
pub(crate) fn has_native_write_cm_event() -> bool {
    write_cm_event_fn().is_some()
}

/// Whether this librdmacm exports `rdma_resolve_addrinfo` and `rdma_query_addrinfo`.
pub(crate) fn has_native_resolve_addrinfo() -> bool {
    resolve_addrinfo_fn().is_some()
}

// ---------------------------------------------------------------------------------------------
// Socket addresses.
// ---------------------------------------------------------------------------------------------

/// A `sockaddr_storage` holding `addr`.
fn to_storage(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast(), sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast(), sin6) };
        }
    }
    storage
}

/// Reads an IPv4/IPv6 socket address; `None` for a null pointer or another family.
///
/// # Safety
/// `sa` is null or points to a readable sockaddr of at least the size its family implies.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: (whole function) guaranteed by the caller; unaligned reads tolerate any alignment.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = ptr::read_unaligned(sa.cast::<libc::sockaddr_in>());
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 = ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>());
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Event channels.
// ---------------------------------------------------------------------------------------------

/// An owned `struct rdma_event_channel` (see the module's ownership invariant).
pub(crate) struct RawChannel(NonNull<sys::rdma_event_channel>);

// SAFETY: librdmacm channels may be used from any thread (its calls are thread-safe; the
// struct is only an fd).
unsafe impl Send for RawChannel {}
// SAFETY: as above; concurrent `rdma_get_cm_event` on one channel is supported by librdmacm.
unsafe impl Sync for RawChannel {}

impl RawChannel {
    /// `rdma_create_event_channel`, with O_NONBLOCK set on its fd (the backend waits with poll).
    pub(crate) fn create() -> CResult<RawChannel> {
        // SAFETY: no arguments; returns an owned channel or NULL with errno.
        let ptr = unsafe { sys::rdma_create_event_channel() };
        let ch = RawChannel(NonNull::new(ptr).ok_or_else(last_errno)?);
        if let Err(e) = set_nonblocking(ch.fd()) {
            ch.destroy();
            return Err(e);
        }
        Ok(ch)
    }

    fn as_ptr(&self) -> *mut sys::rdma_event_channel {
        self.0.as_ptr()
    }

    /// The channel's file descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live (ownership invariant); `fd` is a plain int.
        unsafe { (*self.as_ptr()).fd }
    }

    /// `rdma_get_cm_event` on the (non-blocking) channel: EAGAIN when the queue is empty.
    pub(crate) fn get_event(&self) -> CResult<RawEvent> {
        let mut event: *mut sys::rdma_cm_event = ptr::null_mut();
        // SAFETY: the channel is live; `event` is a valid out-pointer.
        check(unsafe { sys::rdma_get_cm_event(self.as_ptr(), &mut event) })?;
        NonNull::new(event)
            .map(|e| RawEvent {
                ptr: e,
                child_taken: false,
            })
            .ok_or(libc::EIO)
    }

    /// `rdma_destroy_event_channel`.
    pub(crate) fn destroy(self) {
        // SAFETY: consumes the only owner of a live channel; its ids are gone (each id holds an
        // Arc of its channel, so none can remain when the registry gets here).
        unsafe { sys::rdma_destroy_event_channel(self.as_ptr()) }
    }
}

// ---------------------------------------------------------------------------------------------
// Events.
// ---------------------------------------------------------------------------------------------

/// Connection data as found in `event->param.conn`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawConn {
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// Datagram data as found in `event->param.ud` (the address handle's fields flattened).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawUd {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub qp_num: u32,
    pub qkey: u32,
}

/// A copy of everything a `struct rdma_cm_event` says, safe to keep after the ack.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventSnapshot {
    /// `event->event`.
    pub kind: i32,
    /// `event->status`.
    pub status: i32,
    /// Address of `event->id` (a lookup key only; never dereferenced through this value).
    pub id: usize,
    /// Address of `event->listen_id`, or 0.
    pub listen_id: usize,
    /// `param.conn`.
    pub conn: RawConn,
    /// `param.ud`.
    pub ud: RawUd,
    /// The first 8 bytes of `param`: `param.arg` of a USER event, the join context of a
    /// multicast event (`param.ud.private_data`).
    pub word0: u64,
    /// The private data, exactly `private_data_len` bytes (connection-related kinds only).
    pub private_data: Vec<u8>,
}

/// Event kinds whose `param.*.private_data` points to private data (0..=11, 14, 15); for
/// multicast events it is the user's context, for USER the raw argument.
fn carries_private_data(kind: i32) -> bool {
    matches!(kind, 0..=11 | 14 | 15)
}

/// Copies an event.
///
/// # Safety
/// `event` points to a live `rdma_cm_event` (returned and not yet acked, or a sync id's
/// current event).
unsafe fn snapshot(event: *const sys::rdma_cm_event) -> EventSnapshot {
    // SAFETY: (whole function) the event is live; every field read is plain data; the union's
    // members are all plain data, so reading either is defined. Private data is read only for
    // kinds where librdmacm makes it point into the event's own buffer of `private_data_len`
    // bytes.
    unsafe {
        let e = &*event;
        let conn = e.param.conn;
        let ud = e.param.ud;
        let kind = e.event as i32;
        let word0 = conn.private_data as usize as u64;
        let private_data = if carries_private_data(kind)
            && !conn.private_data.is_null()
            && conn.private_data_len > 0
        {
            std::slice::from_raw_parts(
                conn.private_data.cast::<u8>(),
                usize::from(conn.private_data_len),
            )
            .to_vec()
        } else {
            Vec::new()
        };
        let grh = ud.ah_attr.grh;
        EventSnapshot {
            kind,
            status: e.status,
            id: e.id as usize,
            listen_id: e.listen_id as usize,
            conn: RawConn {
                responder_resources: conn.responder_resources,
                initiator_depth: conn.initiator_depth,
                flow_control: conn.flow_control,
                retry_count: conn.retry_count,
                rnr_retry_count: conn.rnr_retry_count,
                srq: conn.srq,
                qp_num: conn.qp_num,
            },
            ud: RawUd {
                dgid: grh.dgid.raw,
                flow_label: grh.flow_label,
                sgid_index: grh.sgid_index,
                hop_limit: grh.hop_limit,
                traffic_class: grh.traffic_class,
                dlid: ud.ah_attr.dlid,
                sl: ud.ah_attr.sl,
                src_path_bits: ud.ah_attr.src_path_bits,
                static_rate: ud.ah_attr.static_rate,
                is_global: ud.ah_attr.is_global,
                port_num: ud.ah_attr.port_num,
                qp_num: ud.qp_num,
                qkey: ud.qkey,
            },
            word0,
            private_data,
        }
    }
}

/// An event returned by `rdma_get_cm_event`, not yet acked.
pub(crate) struct RawEvent {
    ptr: NonNull<sys::rdma_cm_event>,
    child_taken: bool,
}

impl RawEvent {
    /// A copy of the event.
    pub(crate) fn snapshot(&self) -> EventSnapshot {
        // SAFETY: the event is live until `ack` consumes `self`.
        unsafe { snapshot(self.ptr.as_ptr()) }
    }

    /// For a CONNECT_REQUEST: the new id librdmacm created for the request, whose ownership
    /// passes to the caller. Returns `None` for other kinds and on a second call.
    pub(crate) fn take_child(&mut self) -> Option<RawId> {
        if self.child_taken || self.snapshot_kind() != 4 {
            return None;
        }
        self.child_taken = true;
        // SAFETY: the event is live; for CONNECT_REQUEST `event->id` is a new id owned by the
        // application from now on; `child_taken` makes sure only one owner is created.
        NonNull::new(unsafe { (*self.ptr.as_ptr()).id }).map(RawId)
    }

    fn snapshot_kind(&self) -> i32 {
        // SAFETY: the event is live.
        unsafe { (*self.ptr.as_ptr()).event as i32 }
    }

    /// `rdma_ack_cm_event`.
    pub(crate) fn ack(self) {
        // SAFETY: consumes the only handle to an event that was returned and not yet acked.
        // The return value is 0 for a non-NULL event.
        unsafe { sys::rdma_ack_cm_event(self.ptr.as_ptr()) };
    }
}

// SAFETY: an event is a heap object owned by whoever holds it; librdmacm's ack is thread-safe.
unsafe impl Send for RawEvent {}

// ---------------------------------------------------------------------------------------------
// Ids.
// ---------------------------------------------------------------------------------------------

/// Connection parameters in C form, borrowing the private data.
pub(crate) struct ConnParamIn<'a> {
    pub private_data: &'a [u8],
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

impl ConnParamIn<'_> {
    fn to_c(&self) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            // Callers have checked the length against the transport limit (< 256).
            private_data_len: u8::try_from(self.private_data.len()).unwrap_or(u8::MAX),
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: self.flow_control,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq,
            qp_num: self.qp_num,
        }
    }
}

/// The QP types `create_qp` can make (`IBV_QPT_*`).
pub(crate) const QPT_RC: u32 = sys::ibv_qp_type::IBV_QPT_RC;
/// `IBV_QPT_UC`.
pub(crate) const QPT_UC: u32 = sys::ibv_qp_type::IBV_QPT_UC;
/// `IBV_QPT_UD`.
pub(crate) const QPT_UD: u32 = sys::ibv_qp_type::IBV_QPT_UD;
/// `IBV_TRANSPORT_IWARP`.
pub(crate) const TRANSPORT_IWARP: i32 = sys::ibv_transport_type::IBV_TRANSPORT_IWARP;

/// An owned `struct rdma_cm_id` (see the module's ownership invariant).
pub(crate) struct RawId(NonNull<sys::rdma_cm_id>);

// SAFETY: librdmacm ids may be used from any thread; the registry serialises the calls that
// touch a synchronous id's stored event.
unsafe impl Send for RawId {}
// SAFETY: as above.
unsafe impl Sync for RawId {}

impl RawId {
    fn as_ptr(&self) -> *mut sys::rdma_cm_id {
        self.0.as_ptr()
    }

    /// The id's address, used as a lookup key for events.
    pub(crate) fn addr(&self) -> usize {
        self.as_ptr() as usize
    }

    /// `rdma_create_id`; `None` makes a synchronous id (librdmacm opens a private channel).
    pub(crate) fn create(channel: Option<&RawChannel>, context: u64, ps: u32) -> CResult<RawId> {
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        let ch = channel.map_or(ptr::null_mut(), RawChannel::as_ptr);
        // SAFETY: `ch` is NULL or a live channel; `id` is a valid out-pointer; the context is
        // an opaque value librdmacm never dereferences.
        check(unsafe { sys::rdma_create_id(ch, &mut id, context as usize as *mut c_void, ps) })?;
        NonNull::new(id).map(RawId).ok_or(libc::EIO)
    }

    /// `rdma_destroy_id`, after `rdma_destroy_qp` if the id still has a QP.
    pub(crate) fn destroy(self) -> CResult<()> {
        self.destroy_qp();
        // SAFETY: consumes the only owner of a live id. All its events were acked when they
        // were fetched, so librdmacm does not block.
        check(unsafe { sys::rdma_destroy_id(self.as_ptr()) })
    }

    /// `rdma_bind_addr`.
    pub(crate) fn bind_addr(&self, addr: &SocketAddr) -> CResult<()> {
        let mut sa = to_storage(addr);
        // SAFETY: live id; `sa` is a valid sockaddr that librdmacm copies.
        check(unsafe { sys::rdma_bind_addr(self.as_ptr(), ptr::addr_of_mut!(sa).cast()) })
    }

    /// `rdma_resolve_addr`.
    pub(crate) fn resolve_addr(
        &self,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: i32,
    ) -> CResult<()> {
        let mut src_sa = src.map(to_storage);
        let mut dst_sa = to_storage(dst);
        let src_ptr = src_sa
            .as_mut()
            .map_or(ptr::null_mut(), |s| ptr::addr_of_mut!(*s).cast());
        // SAFETY: live id; the sockaddrs are valid for the call (copied by librdmacm).
        check(unsafe {
            sys::rdma_resolve_addr(
                self.as_ptr(),
                src_ptr,
                ptr::addr_of_mut!(dst_sa).cast(),
                timeout_ms,
            )
        })
    }

    /// `rdma_resolve_route`. The caller has checked that the id has a device.
    pub(crate) fn resolve_route(&self, timeout_ms: i32) -> CResult<()> {
        // SAFETY: live id with a device (checked by the caller: §16.1).
        check(unsafe { sys::rdma_resolve_route(self.as_ptr(), timeout_ms) })
    }

    /// `rdma_listen`.
    pub(crate) fn listen(&self, backlog: i32) -> CResult<()> {
        // SAFETY: live id.
        check(unsafe { sys::rdma_listen(self.as_ptr(), backlog) })
    }

    /// `rdma_get_request` on a synchronous listener: blocks; returns the new synchronous id.
    pub(crate) fn get_request(&self) -> CResult<RawId> {
        let mut child: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: live synchronous listener (checked by the caller; librdmacm refuses others
        // with EINVAL); `child` is a valid out-pointer.
        check(unsafe { sys::rdma_get_request(self.as_ptr(), &mut child) })?;
        NonNull::new(child).map(RawId).ok_or(libc::EIO)
    }

    /// `rdma_connect`. The caller has checked device, parameters and private-data length.
    pub(crate) fn connect(&self, param: Option<&ConnParamIn<'_>>) -> CResult<()> {
        let mut c = param.map(ConnParamIn::to_c);
        let p = c.as_mut().map_or(ptr::null_mut(), |c| c as *mut _);
        // SAFETY: live id with a device (§16.2); `p` is NULL or valid for the call, and its
        // private data borrows a slice that outlives the call.
        check(unsafe { sys::rdma_connect(self.as_ptr(), p) })
    }

    /// `rdma_accept`. The caller has checked device, listener, parameters/QP and length.
    pub(crate) fn accept(&self, param: Option<&ConnParamIn<'_>>) -> CResult<()> {
        let mut c = param.map(ConnParamIn::to_c);
        let p = c.as_mut().map_or(ptr::null_mut(), |c| c as *mut _);
        // SAFETY: live non-listening id with a device; params given when it has no QP (§16.3).
        check(unsafe { sys::rdma_accept(self.as_ptr(), p) })
    }

    /// `rdma_reject`. The caller has checked device, listener and length.
    pub(crate) fn reject(&self, data: &[u8]) -> CResult<()> {
        let p = if data.is_empty() {
            ptr::null()
        } else {
            data.as_ptr().cast()
        };
        let len = u8::try_from(data.len()).unwrap_or(u8::MAX);
        // SAFETY: live non-listening id; the data is copied by librdmacm.
        check(unsafe { sys::rdma_reject(self.as_ptr(), p, len) })
    }

    /// `rdma_disconnect`.
    pub(crate) fn disconnect(&self) -> CResult<()> {
        // SAFETY: live id; librdmacm checks for a device itself.
        check(unsafe { sys::rdma_disconnect(self.as_ptr()) })
    }

    /// `rdma_notify` with a raw `ibv_event_type` number.
    pub(crate) fn notify(&self, event: i32) -> CResult<()> {
        // SAFETY: live id; the event number is passed as an int and only forwarded to the
        // kernel.
        check(unsafe { rdma_notify_int(self.as_ptr(), event) })
    }

    /// `rdma_establish`. The caller has checked that the id has a device.
    pub(crate) fn establish(&self) -> CResult<()> {
        // SAFETY: live id with a device.
        check(unsafe { sys::rdma_establish(self.as_ptr()) })
    }

    /// `rdma_write_cm_event` if this librdmacm has it: `None` when the symbol is absent.
    pub(crate) fn write_cm_event(&self, kind: i32, status: i32, arg: u64) -> Option<CResult<()>> {
        let f = write_cm_event_fn()?;
        // SAFETY: live id; `f` is librdmacm's rdma_write_cm_event.
        Some(check(unsafe {
            f(self.as_ptr(), kind as c_uint, status, arg)
        }))
    }

    /// `rdma_join_multicast`. The caller has checked that the id has a device.
    pub(crate) fn join_multicast(&self, addr: &SocketAddr, context: u64) -> CResult<()> {
        let mut sa = to_storage(addr);
        // SAFETY: live id with a device; the sockaddr is copied; the context is opaque.
        check(unsafe {
            sys::rdma_join_multicast(
                self.as_ptr(),
                ptr::addr_of_mut!(sa).cast(),
                context as usize as *mut c_void,
            )
        })
    }

    /// `rdma_join_multicast_ex` with the address and the join flags (`RDMA_MC_JOIN_FLAG_*`).
    /// The caller has checked that the id has a device.
    pub(crate) fn join_multicast_ex(
        &self,
        addr: &SocketAddr,
        join_flags: u32,
        context: u64,
    ) -> CResult<()> {
        let mut sa = to_storage(addr);
        let mut attr = sys::rdma_cm_join_mc_attr_ex {
            comp_mask: (sys::rdma_cm_join_mc_attr_mask::RDMA_CM_JOIN_MC_ATTR_ADDRESS
                | sys::rdma_cm_join_mc_attr_mask::RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)
                .0,
            join_flags,
            addr: ptr::addr_of_mut!(sa).cast(),
        };
        // SAFETY: live id with a device; `attr` and the sockaddr it points to live across the
        // call, which copies the address; the context is opaque.
        check(unsafe {
            sys::rdma_join_multicast_ex(
                self.as_ptr(),
                ptr::addr_of_mut!(attr),
                context as usize as *mut c_void,
            )
        })
    }

    /// `rdma_leave_multicast`.
    pub(crate) fn leave_multicast(&self, addr: &SocketAddr) -> CResult<()> {
        let mut sa = to_storage(addr);
        // SAFETY: live id; the address is only compared. Fetched events of the membership
        // were acked when fetched, so librdmacm does not block.
        check(unsafe { sys::rdma_leave_multicast(self.as_ptr(), ptr::addr_of_mut!(sa).cast()) })
    }

    /// `rdma_migrate_id` to `channel`, or to a new private channel (synchronous) for `None`.
    pub(crate) fn migrate(&self, channel: Option<&RawChannel>) -> CResult<()> {
        let ch = channel.map_or(ptr::null_mut(), RawChannel::as_ptr);
        // SAFETY: live id; `ch` is NULL or a live channel. The id's fetched events were acked
        // at fetch time, so librdmacm does not block.
        check(unsafe { sys::rdma_migrate_id(self.as_ptr(), ch) })
    }

    /// `rdma_set_option` with a raw value.
    pub(crate) fn set_option(&self, level: i32, name: i32, value: &mut [u8]) -> CResult<()> {
        let p = if value.is_empty() {
            ptr::null_mut()
        } else {
            value.as_mut_ptr().cast()
        };
        // SAFETY: live id; `value` is valid for `len` bytes during the call.
        check(unsafe { sys::rdma_set_option(self.as_ptr(), level, name, p, value.len()) })
    }

    /// `rdma_destroy_qp` if the id has a QP (it destroys the CQs librdmacm made, too).
    pub(crate) fn destroy_qp(&self) -> bool {
        // SAFETY: live id; `qp` is NULL or the QP librdmacm created for it.
        unsafe {
            let id = self.as_ptr();
            if (*id).qp.is_null() {
                return false;
            }
            sys::rdma_destroy_qp(id);
            (*id).qp = ptr::null_mut();
        }
        true
    }

    /// The QP number, if the id has a QP.
    pub(crate) fn qp_num(&self) -> Option<u32> {
        // SAFETY: live id; `qp` is NULL or a live QP.
        unsafe {
            let qp = (*self.as_ptr()).qp;
            (!qp.is_null()).then(|| (*qp).qp_num)
        }
    }

    /// Whether the id is attached to an RDMA device (`id->verbs != NULL`).
    pub(crate) fn has_device(&self) -> bool {
        // SAFETY: live id; reading a pointer field.
        unsafe { !(*self.as_ptr()).verbs.is_null() }
    }

    /// The device's `ibv_transport_type`, if the id has a device.
    pub(crate) fn transport_type(&self) -> Option<i32> {
        // SAFETY: live id; `verbs` is NULL or a device context librdmacm keeps open for as
        // long as the id exists, whose `device` is valid as long as the context.
        unsafe {
            let verbs = (*self.as_ptr()).verbs;
            if verbs.is_null() || (*verbs).device.is_null() {
                return None;
            }
            Some((*(*verbs).device).transport_type)
        }
    }

    /// `id->context`.
    pub(crate) fn context(&self) -> u64 {
        // SAFETY: live id; reading a pointer-sized field.
        unsafe { (*self.as_ptr()).context as usize as u64 }
    }

    /// Sets `id->context`. The caller holds the id's channel's fetch lock, so librdmacm does
    /// not read the field meanwhile (it copies a listener's context into a request's new id
    /// while processing the request).
    pub(crate) fn set_context(&self, context: u64) {
        // SAFETY: live id; writing a pointer-sized field that librdmacm only reads while it
        // processes an event of the id's channel, which the caller excludes.
        unsafe { (*self.as_ptr()).context = context as usize as *mut c_void }
    }

    /// `id->qp_type` (`IBV_QPT_*`).
    pub(crate) fn qp_type(&self) -> u32 {
        // SAFETY: live id; plain field.
        unsafe { (*self.as_ptr()).qp_type }
    }

    /// `id->ps`.
    pub(crate) fn port_space(&self) -> u32 {
        // SAFETY: live id; plain field.
        unsafe { (*self.as_ptr()).ps }
    }

    /// `rdma_get_local_addr`: the source address, if set.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: live id; the route's address union is embedded in the id.
        unsafe {
            let p = ptr::addr_of!((*self.as_ptr()).route.addr.src_addr_union.src_storage);
            from_sockaddr(p.cast())
        }
    }

    /// `rdma_get_peer_addr`: the destination address, if set.
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: live id; the route's address union is embedded in the id.
        unsafe {
            let p = ptr::addr_of!((*self.as_ptr()).route.addr.dst_addr_union.dst_storage);
            from_sockaddr(p.cast())
        }
    }

    /// A copy of `id->event` (synchronous ids); the event stays owned by librdmacm.
    pub(crate) fn current_event(&self) -> Option<EventSnapshot> {
        // SAFETY: live id; the caller holds the id's call lock, so no other librdmacm call on
        // this id can ack and free `id->event` while it is copied.
        unsafe {
            let ev = (*self.as_ptr()).event;
            (!ev.is_null()).then(|| snapshot(ev))
        }
    }

    /// `rdma_resolve_addrinfo` if this librdmacm has it (`None` when the symbol is absent).
    pub(crate) fn resolve_addrinfo_native(
        &self,
        node: Option<&CStr>,
        service: Option<&CStr>,
        hints: Option<&AddrInfoHintsIn>,
    ) -> Option<CResult<()>> {
        let (resolve, _) = resolve_addrinfo_fn()?;
        let h = hints.map(AddrInfoHintsIn::to_c);
        let hp = h.as_ref().map_or(ptr::null(), |h| h as *const _);
        // SAFETY: live id; strings are NUL-terminated and outlive the call; `hp` is NULL or a
        // valid hints struct with null pointers.
        let ret = unsafe {
            resolve(
                self.as_ptr(),
                node.map_or(ptr::null(), CStr::as_ptr),
                service.map_or(ptr::null(), CStr::as_ptr),
                hp,
            )
        };
        Some(match ret {
            0 => Ok(()),
            // §10.4: errno may be -1 or a negative EAI code; passed on as it is.
            _ => Err(last_errno()),
        })
    }

    /// `rdma_query_addrinfo` if present (`None` when the symbol is absent).
    pub(crate) fn query_addrinfo_native(&self) -> Option<CResult<Vec<AddrInfoOut>>> {
        let (_, query) = resolve_addrinfo_fn()?;
        let mut res: *mut sys::rdma_addrinfo = ptr::null_mut();
        // SAFETY: live id; `res` is a valid out-pointer.
        let ret = unsafe { query(self.as_ptr(), &mut res) };
        if ret != 0 {
            return Some(Err(last_errno()));
        }
        // SAFETY: `res` is a list returned by librdmacm, owned by us until freed here.
        Some(Ok(unsafe { take_addrinfo_list(res) }))
    }
}

/// `rdma_get_devices` + `rdma_free_devices`: makes librdmacm re-read the device list, which
/// closes its context of a removed device once no id uses it (librdmacm 44 keeps it open
/// otherwise, and drivers such as rxe cannot finish unregistering while it is open). Returns the
/// number of devices. With no device left at all, librdmacm gives up before releasing anything.
pub(crate) fn refresh_device_list() -> usize {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the returned array (or NULL) is given back at once.
    unsafe {
        let list = sys::rdma_get_devices(&mut n);
        if !list.is_null() {
            sys::rdma_free_devices(list);
        }
    }
    usize::try_from(n).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Address information.
// ---------------------------------------------------------------------------------------------

/// Hints for `rdma_getaddrinfo` / `rdma_resolve_addrinfo`.
pub(crate) struct AddrInfoHintsIn {
    pub flags: i32,
    pub port_space: i32,
    pub qp_type: i32,
    /// `ai_src_addr`, with its length.
    pub src: Option<(libc::sockaddr_storage, libc::socklen_t)>,
    /// `ai_dst_addr`, with its length.
    pub dst: Option<(libc::sockaddr_storage, libc::socklen_t)>,
}

/// A socket address as librdmacm takes it in an `rdma_addrinfo`: the storage and the length
/// of its family's `sockaddr`.
pub(crate) fn addrinfo_addr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let len = match addr {
        SocketAddr::V4(_) => mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => mem::size_of::<libc::sockaddr_in6>(),
    };
    (to_storage(addr), len as libc::socklen_t)
}

impl AddrInfoHintsIn {
    /// The C hints; their address pointers point into `self`, which must outlive their use.
    fn to_c(&self) -> sys::rdma_addrinfo {
        // SAFETY: rdma_addrinfo is plain data; all-zero is "no constraint, no pointers".
        let mut h: sys::rdma_addrinfo = unsafe { mem::zeroed() };
        h.ai_flags = self.flags;
        h.ai_port_space = self.port_space;
        h.ai_qp_type = self.qp_type;
        if let Some((sa, len)) = &self.src {
            // librdmacm only reads (copies) the hints' addresses.
            h.ai_src_addr = ptr::from_ref(sa).cast_mut().cast();
            h.ai_src_len = *len;
        }
        if let Some((sa, len)) = &self.dst {
            h.ai_dst_addr = ptr::from_ref(sa).cast_mut().cast();
            h.ai_dst_len = *len;
        }
        h
    }
}

/// One `struct rdma_addrinfo`, copied.
pub(crate) struct AddrInfoOut {
    pub flags: i32,
    pub qp_type: i32,
    pub port_space: i32,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
}

/// Copies and frees a list from `rdma_getaddrinfo` / `rdma_query_addrinfo`.
///
/// # Safety
/// `res` is NULL or a list allocated by librdmacm that nobody else will free.
unsafe fn take_addrinfo_list(res: *mut sys::rdma_addrinfo) -> Vec<AddrInfoOut> {
    let mut out = Vec::new();
    let mut cur = res;
    // SAFETY: (whole loop) the list is valid until freed below; the sockaddr pointers are NULL
    // or point to addresses of the length the family implies.
    unsafe {
        while !cur.is_null() {
            let ai = &*cur;
            out.push(AddrInfoOut {
                flags: ai.ai_flags,
                qp_type: ai.ai_qp_type,
                port_space: ai.ai_port_space,
                src: from_sockaddr(ai.ai_src_addr),
                dst: from_sockaddr(ai.ai_dst_addr),
            });
            cur = ai.ai_next;
        }
        if !res.is_null() {
            sys::rdma_freeaddrinfo(res);
        }
    }
    out
}

/// `rdma_getaddrinfo`: blocking DNS resolution. The error is the errno, or the (negative)
/// `EAI_*` code librdmacm passes through from `getaddrinfo`.
pub(crate) fn getaddrinfo(
    node: Option<&CStr>,
    service: Option<&CStr>,
    hints: Option<&AddrInfoHintsIn>,
) -> CResult<Vec<AddrInfoOut>> {
    let h = hints.map(AddrInfoHintsIn::to_c);
    let hp = h.as_ref().map_or(ptr::null(), |h| h as *const _);
    let mut res: *mut sys::rdma_addrinfo = ptr::null_mut();
    // SAFETY: NUL-terminated strings and hints valid for the call; `res` is an out-pointer.
    let ret = unsafe {
        sys::rdma_getaddrinfo(
            node.map_or(ptr::null(), CStr::as_ptr),
            service.map_or(ptr::null(), CStr::as_ptr),
            hp,
            &mut res,
        )
    };
    if ret != 0 {
        let errno = last_errno();
        return Err(if ret == -1 && errno > 0 { errno } else { ret });
    }
    // SAFETY: on success `res` is a list we own.
    Ok(unsafe { take_addrinfo_list(res) })
}

// ---------------------------------------------------------------------------------------------
// libc: O_NONBLOCK, poll, eventfd.
// ---------------------------------------------------------------------------------------------

/// A duplicate of `fd`, owned (close-on-exec): readiness of the same open file, which stays
/// open as long as the duplicate does, whatever becomes of `fd`.
#[cfg(feature = "tokio")]
pub(crate) fn dup_fd(fd: RawFd) -> CResult<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only reads `fd` (the caller holds the channel it belongs to, so
    // it is open) and returns a new descriptor or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(last_errno());
    }
    // SAFETY: `new` was just created for us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Registers `fd` with the current tokio runtime's reactor (the caller checked that there is
/// one: registering outside a runtime panics).
#[cfg(feature = "tokio")]
pub(crate) fn register_with_tokio(
    fd: OwnedFd,
) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` keeps its descriptor open, referring to the same file description,
    // until it is dropped, which happens only with the `AsyncFd` that owns it; its
    // `as_raw_fd` always returns that descriptor.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(std::io::Error::from)
}

/// Sets O_NONBLOCK on `fd`.
fn set_nonblocking(fd: RawFd) -> CResult<()> {
    // SAFETY: fcntl on an fd owned by a live channel; F_GETFL/F_SETFL only change flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_errno());
        }
    }
    Ok(())
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (-1: forever). Returns whether
/// any fd was ready; EINTR is reported as not ready.
pub(crate) fn poll_readable(fds: &[RawFd], timeout_ms: i32) -> CResult<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `len` pollfd structs for the duration of the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    match n {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => match last_errno() {
            libc::EINTR => Ok(false),
            e => Err(e),
        },
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (-1: forever), and returns
/// which are readable (all false at the timeout or on EINTR).
pub(crate) fn poll_which(fds: &[RawFd], timeout_ms: i32) -> CResult<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `len` pollfd structs for the duration of the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        return match last_errno() {
            libc::EINTR => Ok(vec![false; fds.len()]),
            e => Err(e),
        };
    }
    Ok(pfds.iter().map(|p| p.revents & libc::POLLIN != 0).collect())
}

/// Reads `clock`; `None` if the clock cannot be read.
fn clock(clock: libc::clockid_t, getres: bool) -> Option<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let ret = unsafe {
        if getres {
            libc::clock_getres(clock, &mut ts)
        } else {
            libc::clock_gettime(clock, &mut ts)
        }
    };
    (ret == 0)
        .then(|| std::time::Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), ts.tv_nsec as u32))
}

/// `CLOCK_MONOTONIC_COARSE`: the monotonic time of the last timer tick. The vDSO serves it
/// from memory, with neither a system call nor a read of the clock source, even where the
/// precise clocks need both (a VM whose clock source is an emulated HPET). `None` if the
/// kernel has no such clock.
pub(crate) fn monotonic_coarse() -> Option<std::time::Duration> {
    clock(libc::CLOCK_MONOTONIC_COARSE, false)
}

/// How far [`monotonic_coarse`] may lag the precise monotonic time (its resolution: a tick).
pub(crate) fn monotonic_coarse_lag() -> Option<std::time::Duration> {
    static LAG: OnceLock<Option<std::time::Duration>> = OnceLock::new();
    *LAG.get_or_init(|| clock(libc::CLOCK_MONOTONIC_COARSE, true))
}

/// A non-blocking eventfd, readable while the injected-event queue it guards is non-empty.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`.
    pub(crate) fn new() -> CResult<EventFd> {
        // SAFETY: plain syscall; returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The fd, for poll.
    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the fd readable (adds 1 to the counter).
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own. A full counter
        // (EAGAIN) still leaves the fd readable, which is all that matters.
        unsafe { libc::write(self.fd(), ptr::addr_of!(one).cast(), 8) };
    }

    /// Makes the fd unreadable (resets the counter).
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from a non-blocking eventfd we own; EAGAIN
        // (already zero) is fine.
        unsafe { libc::read(self.fd(), ptr::addr_of_mut!(v).cast(), 8) };
    }
}
