//! QP creation attributes with chosen CQs, QP states, and the device's asynchronous events.

use crate::{AsyncEvent, CompChannelHandle, CqHandle, IdHandle, PdHandle, QpCap, QpType};

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
    /// Signal every send completion (else only requests marked signaled, and errors).
    pub sq_sig_all: bool,
}

impl QpInitAttrEx {
    /// An RC QP of `pd` completing into `send_cq` and `recv_cq`, with small default queues,
    /// signalling every send.
    pub fn rc(pd: PdHandle, send_cq: CqHandle, recv_cq: CqHandle) -> Self {
        QpInitAttrEx {
            pd,
            send_cq,
            recv_cq,
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: true,
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
