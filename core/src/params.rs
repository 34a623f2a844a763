//! Parameters of calls: connection parameters, waits, options, QP attributes, addrinfo.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{PortSpace, QpType};

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "use the device maximum".
pub const RDMA_MAX_RESP_RES: u8 = 255;
/// The default qkey of UD ids in the UDP and IB port spaces.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Connection parameters for `connect` and `accept` (`struct rdma_conn_param`).
///
/// [`ConnParam::default`] is what librdmacm uses for a NULL `conn_param` (device maxima, 7
/// retries), not a zeroed struct: C code that does `memset(&param, 0, sizeof param)` and sets
/// only the private data (rdma-core's `rdma_xserver`, for one) asks for 0 responder
/// resources, 0 initiator depth and 0 retries, so its port writes every field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data; more than the transport allows is EINVAL, never truncated.
    pub private_data: Vec<u8>,
    /// Responder resources (255: the device maximum).
    pub responder_resources: u8,
    /// Initiator depth (255: the device maximum).
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retry count (clamped to 7 on the wire). 7, the default, retries without end
    /// on rxe (Soft-RoCE counts down only below 7), where an InfiniBand HCA makes 7 retries:
    /// code that must learn of a dead peer from its sends asks for fewer.
    pub retry_count: u8,
    /// RNR retry count (clamped to 7 on the wire; 7 retries without end everywhere).
    pub rnr_retry_count: u8,
    /// Whether an SRQ is used (ignored when the id has a QP).
    pub srq: u8,
    /// The QP number to announce (ignored when the id has a QP).
    pub qp_num: u32,
}

impl Default for ConnParam {
    /// What librdmacm uses when no parameters are given: device maxima, 7 retries.
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: RDMA_MAX_RESP_RES,
            initiator_depth: RDMA_MAX_RESP_RES,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }
}

impl ConnParam {
    /// Default parameters carrying `data` as private data.
    #[must_use]
    pub fn with_private_data(data: &[u8]) -> Self {
        ConnParam {
            private_data: data.to_vec(),
            ..ConnParam::default()
        }
    }
}

/// How `get_cm_event` waits when the channel has no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Block until an event arrives (the default of librdmacm).
    Block,
    /// Return EAGAIN at once (O_NONBLOCK on the channel's fd).
    NonBlocking,
    /// Wait at most this long, then return ETIMEDOUT (poll on the channel's fd). A timeout
    /// beyond what the clock can reach (`Duration::MAX`; on the simulator the end of its
    /// virtual time, about 584 years) waits as `Block` does.
    Timeout(Duration),
}

/// An option for `set_option` (`rdma_set_option`), with its level and value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmOption {
    /// `RDMA_OPTION_ID_TOS`: type of service for later route resolution.
    Tos(u8),
    /// `RDMA_OPTION_ID_REUSEADDR`.
    ReuseAddr(bool),
    /// `RDMA_OPTION_ID_AFONLY`: an IPv6 id accepts only IPv6.
    AfOnly(bool),
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP ACK timeout exponent (RC only).
    AckTimeout(u8),
    /// `RDMA_OPTION_IB_PATH`: raw `struct ibv_path_data` records (72 bytes each: `flags`,
    /// a reserved word, the packed path record). The kernel installs the first record whose
    /// `flags` (host byte order) are exactly [`IB_PATH_PRIMARY_FLAGS`]; without one the call
    /// fails with EINVAL.
    IbPath(Vec<u8>),
}

/// Size of one `struct ibv_path_data` record, for `CmOption::IbPath`.
pub const IB_PATH_RECORD_LEN: usize = 72;

/// The `flags` of the record `CmOption::IbPath` installs: `IB_PATH_GMP | IB_PATH_PRIMARY |
/// IB_PATH_BIDIRECTIONAL` (1 | 2 | 0x28), as in `ib_user_sa.h`.
pub const IB_PATH_PRIMARY_FLAGS: u32 = 0x2B;

/// `enum ibv_event_type` values accepted by `notify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AsyncEvent(pub i32);

impl AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: a CQ overflowed (a completion was lost).
    pub const CQ_ERR: AsyncEvent = AsyncEvent(0);
    /// `IBV_EVENT_COMM_EST`: data arrived on the passive QP before the RTU.
    pub const COMM_EST: AsyncEvent = AsyncEvent(4);
    /// `IBV_EVENT_QP_REQ_ERR`: the QP, as a responder, met an invalid request (siw raises it
    /// when the response to an RDMA READ under a bad rkey cannot be sent).
    pub const QP_REQ_ERR: AsyncEvent = AsyncEvent(2);
    /// `IBV_EVENT_QP_ACCESS_ERR`: the QP, as a responder, met a protection error (siw raises
    /// it for a write under a registered key outside the region's range or access, and for a
    /// receive it may not write).
    pub const QP_ACCESS_ERR: AsyncEvent = AsyncEvent(3);
    /// `IBV_EVENT_SQ_DRAINED`: a QP moved to SQD has every request it sent acknowledged.
    pub const SQ_DRAINED: AsyncEvent = AsyncEvent(5);
    /// `IBV_EVENT_PATH_MIG`: switch to the alternate path.
    pub const PATH_MIG: AsyncEvent = AsyncEvent(6);
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than the SRQ's armed limit are posted
    /// (the limit is disarmed with it).
    pub const SRQ_LIMIT_REACHED: AsyncEvent = AsyncEvent(15);
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to an SRQ, in ERROR, will take no more
    /// receives from it (raised by the drivers that raise it; rxe does not).
    pub const QP_LAST_WQE_REACHED: AsyncEvent = AsyncEvent(16);
}

/// Capacities of a QP's queues (`struct ibv_qp_cap`): those asked for at creation; the device
/// may grant more (`DataPath::query_qp_cap` says what it made of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// QP creation attributes for `create_qp` (CQs are created by the backend, as librdmacm does
/// when none are given). Built with [`QpInitAttr::new`], then adjusted field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QpInitAttr {
    /// The QP type; it must suit the id's port space.
    pub qp_type: QpType,
    /// Queue capacities.
    pub cap: QpCap,
    /// `sq_sig_all`: every send-queue request reports its completion. False: only those
    /// posted with `IBV_SEND_SIGNALED` ([`crate::verbs::SendFlags::SIGNALED`],
    /// [`crate::verbs::SendWr::signaled`]) do, and those that fail.
    pub sq_sig_all: bool,
}

impl QpInitAttr {
    /// Attributes of a QP of `qp_type` with small default queues (16 requests and one entry
    /// each way, no inline bytes) and **`sq_sig_all` true**.
    ///
    /// This is not C's zeroed `struct ibv_qp_init_attr`: a C program that `memset`s its
    /// attributes to 0 gets `sq_sig_all` 0, so its sends posted with flags 0
    /// ([`crate::verbs::SendFlags::NONE`]) report no completion. A port of such a program
    /// sets `sq_sig_all = false` (and the capacities C sets), else each of those sends
    /// reports a completion the C program never sees, filling the send CQ.
    #[must_use]
    pub fn new(qp_type: QpType) -> Self {
        QpInitAttr {
            qp_type,
            cap: QpCap::default(),
            sq_sig_all: true,
        }
    }
}

/// `rdma_addrinfo` flags.
pub mod rai {
    /// `RAI_PASSIVE`: the result is for a listener.
    pub const PASSIVE: u32 = 0x1;
    /// `RAI_NUMERICHOST`: the node is a numeric address.
    pub const NUMERICHOST: u32 = 0x2;
    /// `RAI_NOROUTE`: do not resolve a route.
    pub const NOROUTE: u32 = 0x4;
    /// `RAI_FAMILY`: the family in the hints is required.
    pub const FAMILY: u32 = 0x8;
    /// `RAI_SA`: resolve through the IB SA (service records).
    pub const SA: u32 = 0x10;
    /// `RAI_DNS`: resolve through DNS (the default).
    pub const DNS: u32 = 0x20;
}

/// Hints for `resolve_addrinfo` (the meaningful subset of `struct rdma_addrinfo`). Built with
/// [`AddrInfoHints::new`] and the `with_` methods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AddrInfoHints {
    /// `RAI_*` flags (see [`rai`]).
    pub flags: u32,
    /// Port space wanted, if any.
    pub port_space: Option<PortSpace>,
    /// QP type wanted, if any.
    pub qp_type: Option<QpType>,
    /// `ai_src_addr`: the source of the results that have none of their own (librdmacm copies
    /// it into every result without a source address, e.g. an active one).
    pub src_addr: Option<SocketAddr>,
    /// `ai_dst_addr`: the destination of the result when neither a node nor a service is
    /// given.
    pub dst_addr: Option<SocketAddr>,
}

/// One result of `resolve_addrinfo` (`struct rdma_addrinfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AddrInfo {
    /// `RAI_*` flags of the result.
    pub flags: u32,
    /// Port space.
    pub port_space: PortSpace,
    /// QP type.
    pub qp_type: QpType,
    /// Source address, when known.
    pub src_addr: Option<SocketAddr>,
    /// Destination address.
    pub dst_addr: Option<SocketAddr>,
}

impl AddrInfoHints {
    /// Hints with `RAI_*` `flags` (see [`rai`]) and no port space or QP type.
    #[must_use]
    pub fn new(flags: u32) -> Self {
        AddrInfoHints {
            flags,
            port_space: None,
            qp_type: None,
            src_addr: None,
            dst_addr: None,
        }
    }

    /// The same hints, asking for `port_space`.
    #[must_use]
    pub fn with_port_space(mut self, port_space: PortSpace) -> Self {
        self.port_space = Some(port_space);
        self
    }

    /// The same hints, asking for `qp_type`.
    #[must_use]
    pub fn with_qp_type(mut self, qp_type: QpType) -> Self {
        self.qp_type = Some(qp_type);
        self
    }

    /// The same hints with a source address (`ai_src_addr`), as rdma-core's examples pass the
    /// result of a passive lookup of their `-b` address to the lookup of the destination.
    #[must_use]
    pub fn with_src_addr(mut self, addr: SocketAddr) -> Self {
        self.src_addr = Some(addr);
        self
    }

    /// The same hints with a destination address (`ai_dst_addr`).
    #[must_use]
    pub fn with_dst_addr(mut self, addr: SocketAddr) -> Self {
        self.dst_addr = Some(addr);
        self
    }
}

impl AddrInfo {
    /// A result (for backend implementors, and for `create_ep` from known addresses).
    #[must_use]
    pub fn new(
        flags: u32,
        port_space: PortSpace,
        qp_type: QpType,
        src_addr: Option<SocketAddr>,
        dst_addr: Option<SocketAddr>,
    ) -> Self {
        AddrInfo {
            flags,
            port_space,
            qp_type,
            src_addr,
            dst_addr,
        }
    }
}

/// How `join_multicast_ex` joins a group (`enum rdma_cm_mc_join_flags`); the kernel turns it
/// into the IB JoinState the SA sees (full member 0x1, send-only full member 0x8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum JoinFlags {
    /// `RDMA_MC_JOIN_FLAG_FULLMEMBER`: send and receive (what `join_multicast` does).
    #[default]
    FullMember,
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: send only. librdmacm does not attach the QP
    /// to the group; on RoCE (IPv4, RoCEv2) the kernel sends no IGMP join; on IB the SA must
    /// support send-only membership.
    SendOnlyFullMember,
}

impl JoinFlags {
    /// librdmacm's value of the flag.
    pub fn as_raw(self) -> u32 {
        match self {
            JoinFlags::FullMember => 0,
            JoinFlags::SendOnlyFullMember => 1,
        }
    }

    /// The IB JoinState bits the kernel asks the SA for.
    pub fn join_state(self) -> u8 {
        1 << (self.as_raw() * 3)
    }
}
