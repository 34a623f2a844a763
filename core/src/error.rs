//! Errors: every failure names the librdmacm call that failed and the errno it failed with.

use std::fmt;

/// A Linux errno value, as librdmacm reports it through `errno`.
///
/// Both backends return the same errno for the same misuse, so that one assertion holds on both.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident = $value:expr),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($value), ").")]
                pub const $name: Errno = Errno($value);
            )*

            /// The symbolic name (`"EINVAL"`), or `None` for a value this crate does not name.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, ENOENT = 2, EINTR = 4, EIO = 5, ENXIO = 6, EBADF = 9, EAGAIN = 11, ENOMEM = 12,
    EACCES = 13, EFAULT = 14, EBUSY = 16, ENODEV = 19, EINVAL = 22, ENOSPC = 28, EPIPE = 32, EDEADLK = 35,
    ENOSYS = 38, EBADE = 52, ENODATA = 61, EPROTONOSUPPORT = 93, EOPNOTSUPP = 95,
    EAFNOSUPPORT = 97, EADDRINUSE = 98, EADDRNOTAVAIL = 99, ENETUNREACH = 101, ENETRESET = 102,
    ECONNABORTED = 103, ECONNRESET = 104, EISCONN = 106, ENOTCONN = 107, ETIMEDOUT = 110, ECONNREFUSED = 111,
    EHOSTUNREACH = 113, EALREADY = 114, ECANCELED = 125, ENOTSUPP = 524,
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "errno {}", self.0),
        }
    }
}

/// The librdmacm or libibverbs call an error came from; `name()` gives the C function's name (or, for a
/// field of `struct rdma_cm_id` read or written directly in C, the field). The calls of the
/// threads and sync primitives of [`crate::thread`] and [`crate::sync`] are named after their
/// Rust methods, and [`Call::Application`] marks an error of the application itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // each variant is the call of the same name in librdmacm
#[non_exhaustive]
pub enum Call {
    CreateEventChannel,
    DestroyEventChannel,
    CreateId,
    DestroyId,
    BindAddr,
    ResolveAddr,
    ResolveRoute,
    Listen,
    GetRequest,
    Connect,
    Accept,
    Reject,
    Disconnect,
    Notify,
    Establish,
    WriteCmEvent,
    GetCmEvent,
    AckCmEvent,
    JoinMulticast,
    JoinMulticastEx,
    LeaveMulticast,
    ResolveAddrinfo,
    QueryAddrinfo,
    GetAddrinfo,
    MigrateId,
    SetOption,
    CreateQp,
    DestroyQp,
    CreateEp,
    DestroyEp,
    /// `rdma_get_local_addr`.
    LocalAddr,
    /// `rdma_get_peer_addr`.
    PeerAddr,
    /// `rdma_get_src_port`.
    SrcPort,
    /// `rdma_get_dst_port`.
    DstPort,
    /// Reading `id->context`.
    Context,
    /// Writing `id->context`.
    SetContext,
    /// Reading `id->qp->qp_num`.
    QpNum,
    /// Reading a synchronous id's `id->event`.
    SyncEvent,
    /// `poll(2)` on event channels' file descriptors.
    Poll,
    AllocPd,
    DeallocPd,
    RegMr,
    DeregMr,
    /// Reading a region's memory (`memcpy` from `mr->addr` in C).
    MrRead,
    /// Writing a region's memory (`memcpy` to `mr->addr` in C).
    MrWrite,
    CreateCompChannel,
    DestroyCompChannel,
    CreateCq,
    DestroyCq,
    ReqNotifyCq,
    GetCqEvent,
    AckCqEvents,
    PollCq,
    CreateQpEx,
    QueryQp,
    PostSend,
    PostRecv,
    GetAsyncEvent,
    /// Reading `id->send_cq` and `id->recv_cq`.
    QpCqs,
    /// Reading `id->pd`.
    IdPd,
    /// Reading `id->qp`.
    IdQp,
    /// Reading `qp->qp_num`.
    QpNumber,
    CreateExternalQp,
    DestroyExternalQp,
    InitQpAttr,
    ModifyQp,
    CreateAh,
    CreateAhFromWc,
    DestroyAh,
    GetDevices,
    /// Reading `id->verbs->device` and `id->port_num`.
    IdDevice,
    QueryDevice,
    QueryPort,
    CreateSrq,
    ModifySrq,
    QuerySrq,
    DestroySrq,
    PostSrqRecv,
    /// `rdma_create_srq`.
    CreateIdSrq,
    /// `rdma_destroy_srq`.
    DestroyIdSrq,
    /// Reading `id->srq`.
    IdSrq,
    Sleep,
    Spawn,
    Join,
    MutexLock,
    CondvarWait,
    SemaphoreAcquire,
    ChannelSend,
    ChannelRecv,
    Application,
}

impl Call {
    /// The librdmacm function's name, e.g. `"rdma_connect"`.
    pub fn name(self) -> &'static str {
        match self {
            Call::CreateEventChannel => "rdma_create_event_channel",
            Call::DestroyEventChannel => "rdma_destroy_event_channel",
            Call::CreateId => "rdma_create_id",
            Call::DestroyId => "rdma_destroy_id",
            Call::BindAddr => "rdma_bind_addr",
            Call::ResolveAddr => "rdma_resolve_addr",
            Call::ResolveRoute => "rdma_resolve_route",
            Call::Listen => "rdma_listen",
            Call::GetRequest => "rdma_get_request",
            Call::CreateEp => "rdma_create_ep",
            Call::DestroyEp => "rdma_destroy_ep",
            Call::Connect => "rdma_connect",
            Call::Accept => "rdma_accept",
            Call::Reject => "rdma_reject",
            Call::Disconnect => "rdma_disconnect",
            Call::Notify => "rdma_notify",
            Call::Establish => "rdma_establish",
            Call::WriteCmEvent => "rdma_write_cm_event",
            Call::GetCmEvent => "rdma_get_cm_event",
            Call::AckCmEvent => "rdma_ack_cm_event",
            Call::JoinMulticast => "rdma_join_multicast",
            Call::JoinMulticastEx => "rdma_join_multicast_ex",
            Call::LeaveMulticast => "rdma_leave_multicast",
            Call::ResolveAddrinfo => "rdma_resolve_addrinfo",
            Call::QueryAddrinfo => "rdma_query_addrinfo",
            Call::GetAddrinfo => "rdma_getaddrinfo",
            Call::MigrateId => "rdma_migrate_id",
            Call::SetOption => "rdma_set_option",
            Call::CreateQp => "rdma_create_qp",
            Call::DestroyQp => "rdma_destroy_qp",
            Call::LocalAddr => "rdma_get_local_addr",
            Call::PeerAddr => "rdma_get_peer_addr",
            Call::SrcPort => "rdma_get_src_port",
            Call::DstPort => "rdma_get_dst_port",
            Call::Context => "id->context",
            Call::SetContext => "id->context=",
            Call::QpNum => "id->qp->qp_num",
            Call::SyncEvent => "id->event",
            Call::Poll => "poll",
            Call::AllocPd => "ibv_alloc_pd",
            Call::DeallocPd => "ibv_dealloc_pd",
            Call::RegMr => "ibv_reg_mr",
            Call::DeregMr => "ibv_dereg_mr",
            Call::MrRead => "mr->addr (read)",
            Call::MrWrite => "mr->addr (write)",
            Call::CreateCompChannel => "ibv_create_comp_channel",
            Call::DestroyCompChannel => "ibv_destroy_comp_channel",
            Call::CreateCq => "ibv_create_cq",
            Call::DestroyCq => "ibv_destroy_cq",
            Call::ReqNotifyCq => "ibv_req_notify_cq",
            Call::GetCqEvent => "ibv_get_cq_event",
            Call::AckCqEvents => "ibv_ack_cq_events",
            Call::PollCq => "ibv_poll_cq",
            Call::CreateQpEx => "rdma_create_qp_ex",
            Call::QueryQp => "ibv_query_qp",
            Call::PostSend => "ibv_post_send",
            Call::PostRecv => "ibv_post_recv",
            Call::GetAsyncEvent => "ibv_get_async_event",
            Call::QpCqs => "id->send_cq/recv_cq",
            Call::IdPd => "id->pd",
            Call::IdQp => "id->qp",
            Call::QpNumber => "qp->qp_num",
            Call::CreateExternalQp => "ibv_create_qp",
            Call::DestroyExternalQp => "ibv_destroy_qp",
            Call::InitQpAttr => "rdma_init_qp_attr",
            Call::ModifyQp => "ibv_modify_qp",
            Call::CreateAh => "ibv_create_ah",
            Call::CreateAhFromWc => "ibv_create_ah_from_wc",
            Call::DestroyAh => "ibv_destroy_ah",
            Call::GetDevices => "rdma_get_devices",
            Call::IdDevice => "id->verbs/port_num",
            Call::QueryDevice => "ibv_query_device",
            Call::QueryPort => "ibv_query_port",
            Call::CreateSrq => "ibv_create_srq",
            Call::ModifySrq => "ibv_modify_srq",
            Call::QuerySrq => "ibv_query_srq",
            Call::DestroySrq => "ibv_destroy_srq",
            Call::PostSrqRecv => "ibv_post_srq_recv",
            Call::CreateIdSrq => "rdma_create_srq",
            Call::DestroyIdSrq => "rdma_destroy_srq",
            Call::IdSrq => "id->srq",
            Call::Sleep => "sleep",
            Call::Spawn => "thread::spawn",
            Call::Join => "JoinHandle::join",
            Call::MutexLock => "Mutex::lock",
            Call::CondvarWait => "Condvar::wait",
            Call::SemaphoreAcquire => "Semaphore::acquire",
            Call::ChannelSend => "Sender::send",
            Call::ChannelRecv => "Receiver::recv",
            Call::Application => "application",
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: which call, which errno, and a sentence saying why. An application's own
/// failure ([`CmError::application`]) carries no errno and prints as such.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmError {
    /// The call that failed.
    pub call: Call,
    /// The errno it failed with (the same on every backend for the same misuse).
    pub errno: Errno,
    /// A human-readable explanation; never matched on by tests.
    pub detail: String,
}

impl CmError {
    /// Builds an error for `call` with `errno` and an explanation.
    pub fn new(call: Call, errno: Errno, detail: impl Into<String>) -> Self {
        CmError {
            call,
            errno,
            detail: detail.into(),
        }
    }

    /// An error of the application itself (a failed check of protocol code, say), not of a
    /// call: it has no errno (`Errno(0)`) and prints as `application error: <detail>`, so that
    /// a process's own failure does not read as a CM call's errno.
    pub fn application(detail: impl Into<String>) -> Self {
        CmError::new(Call::Application, Errno(0), detail)
    }

    /// Whether this is an application's own error ([`CmError::application`]).
    pub fn is_application(&self) -> bool {
        self.call == Call::Application
    }
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_application() {
            write!(f, "application error: {}", self.detail)
        } else {
            write!(f, "{}: {}: {}", self.call, self.errno, self.detail)
        }
    }
}

impl std::error::Error for CmError {}

/// The result of every cmtwin call.
pub type Result<T, E = CmError> = std::result::Result<T, E>;
