//! QP creation attributes with chosen CQs, QP states, and the device's asynchronous events.

use crate::{
    AhAttr, AsyncEvent, CompChannelHandle, CqHandle, IdHandle, PdHandle, QpCap, QpType, SrqHandle,
};

use super::AccessFlags;

/// `enum ibv_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum QpState {
    /// `IBV_QPS_RESET` (0).
    Reset = 0,
    /// `IBV_QPS_INIT` (1): receives may be posted; sends wait.
    Init = 1,
    /// `IBV_QPS_RTR` (2): ready to receive.
    Rtr = 2,
    /// `IBV_QPS_RTS` (3): ready to send.
    Rts = 3,
    /// `IBV_QPS_SQD` (4): send queue drained.
    Sqd = 4,
    /// `IBV_QPS_SQE` (5): send queue error (UC/UD).
    Sqe = 5,
    /// `IBV_QPS_ERR` (6): every outstanding and later request completes with WR_FLUSH_ERR.
    Error = 6,
}

/// Attributes of `create_qp_ex` (`rdma_create_qp` with a PD and `struct ibv_qp_init_attr`
/// naming the CQs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInitAttrEx {
    /// The protection domain: the QP's requests may use only regions of this PD.
    pub pd: PdHandle,
    /// Where send-queue completions go.
    pub send_cq: CqHandle,
    /// Where receive-queue completions go (may be `send_cq`).
    pub recv_cq: CqHandle,
    /// The QP type; it must suit the id's port space.
    pub qp_type: QpType,
    /// Queue capacities.
    pub cap: QpCap,
    /// `sq_sig_all`: every send-queue request reports its completion (else only requests
    /// posted signaled, [`super::SendFlags::SIGNALED`], and those that fail).
    pub sq_sig_all: bool,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (mckey's `-l`): a UD QP whose id joined a
    /// multicast group does not receive its own datagrams to it. UD QPs on ids only.
    pub block_self_multicast_loopback: bool,
    /// The shared receive queue the QP takes its receives from (`attr->srq`): its own
    /// receive queue is then not made (`cap.max_recv_wr` and `max_recv_sge` are ignored,
    /// and `post_recv` on it is refused). `None` on an id that has an SRQ of its own
    /// (`create_id_srq`) takes that one, as librdmacm's `rdma_create_qp_ex` does.
    pub srq: Option<SrqHandle>,
}

impl QpInitAttrEx {
    /// An RC QP of `pd` completing into `send_cq` and `recv_cq`, with small default queues
    /// and **`sq_sig_all` true** (not C's zeroed struct: see [`crate::QpInitAttr::new`]).
    pub fn rc(pd: PdHandle, send_cq: CqHandle, recv_cq: CqHandle) -> Self {
        QpInitAttrEx {
            pd,
            send_cq,
            recv_cq,
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: true,
            block_self_multicast_loopback: false,
            srq: None,
        }
    }
}

/// An asynchronous event of a device (`struct ibv_async_event`), as `get_async_event`
/// returns it. Fetching it acknowledges it (`ibv_ack_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsAsyncEvent {
    /// The event type (`enum ibv_event_type`; COMM_EST is 4, CQ_ERR 0).
    pub kind: AsyncEvent,
    /// The QP it concerns, for QP events: its number.
    pub qp_num: Option<u32>,
    /// The id the QP belongs to, for QP events.
    pub id: Option<IdHandle>,
    /// The CQ it concerns, for CQ events.
    pub cq: Option<CqHandle>,
    /// The SRQ it concerns, for SRQ events (SRQ_LIMIT_REACHED).
    pub srq: Option<SrqHandle>,
}

/// The CQs of an id's QP and their completion channels (`id->send_cq`, `id->recv_cq`,
/// `id->send_cq_channel`, `id->recv_cq_channel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCqs {
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// The send CQ's completion channel, if it has one.
    pub send_channel: Option<CompChannelHandle>,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// The receive CQ's completion channel, if it has one.
    pub recv_channel: Option<CompChannelHandle>,
}

/// The attributes of a QP state transition (`struct ibv_qp_attr`, the fields RC and UD QPs
/// use), as `init_qp_attr` gives them and `modify_qp` takes them. On an RC QP INIT uses
/// `access` (and the port, `ah_attr.port_num`), RTR `dest_qp_num`, `ah_attr`, `rq_psn`,
/// `min_rnr_timer` and `max_dest_rd_atomic`, RTS `timeout`, `retry_cnt`, `rnr_retry`,
/// `sq_psn` and `max_rd_atomic`. On a UD QP INIT uses `pkey_index`, the port
/// (`ah_attr.port_num`) and `qkey`, RTR nothing, RTS `sq_psn`. ERROR and RESET use nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: Option<QpState>,
    /// `qp_access_flags`: what the peer may do with this QP's regions.
    pub access: AccessFlags,
    /// The peer QP's number.
    pub dest_qp_num: u32,
    /// The path to the peer (its GID in `grh.dgid`).
    pub ah_attr: AhAttr,
    /// The first PSN expected from the peer.
    pub rq_psn: u32,
    /// The first PSN sent.
    pub sq_psn: u32,
    /// The RNR NAK timer this QP asks senders to wait (IB's encoding: 0 is 655.36 ms).
    pub min_rnr_timer: u8,
    /// The transport timeout exponent: 4.096 µs × 2^timeout (0: none).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 without limit).
    pub rnr_retry: u8,
    /// RDMA reads and atomics this QP answers at once (responder resources).
    pub max_dest_rd_atomic: u8,
    /// RDMA reads and atomics this QP has outstanding at once (initiator depth).
    pub max_rd_atomic: u8,
    /// The partition key's index in the port's table (UD INIT; the CM gives 0).
    pub pkey_index: u16,
    /// The qkey a UD QP takes datagrams with (UD INIT; the CM gives the id's).
    pub qkey: u32,
    /// With `QpAttrMask::CUR_STATE`: the state the transition starts from, as the caller
    /// believes it (`cur_qp_state`; the kernel checks the transition from it, not from the
    /// QP's state).
    pub cur_qp_state: Option<QpState>,
    /// With `QpAttrMask::PATH_MTU`: the path MTU in libibverbs' encoding (`enum ibv_mtu`: 1
    /// is 256 bytes ... 5 is 4096); 0 stands for the port's active MTU, what `modify_qp`
    /// moves to RTR with.
    pub path_mtu: u8,
    /// With `QpAttrMask::EN_SQD_ASYNC_NOTIFY`: ask for IBV_EVENT_SQ_DRAINED on RTS → SQD
    /// (rxe and the simulator raise it whatever this says).
    pub en_sqd_async_notify: bool,
}
