//! A QP's machine, whichever its transport: RC or UC (`rc.rs`) or UD (`ud.rs`). The calls every
//! QP answers go to either; those of one transport only are no-ops (or refusals) for the
//! other, as the hardware ignores an RC packet at a UD QP.

use std::time::Duration;

use cmtwin::verbs::{QpState, Sge};
use cmtwin::{QpCap, QpType};

use super::packet::Packet;
use super::rc::{Memory, NamedRts, PostError, QpOutput, RcParams, RecvEntry, SendEntry};
use super::tcp_timer::TcpPath;
use super::ud::{UdQp, UdSendEntry};
use super::RcQp;

/// The machine of one QP.
pub(crate) enum QpMachine {
    /// RC, or UC (an unreliable [`RcQp`]).
    Rc(RcQp),
    Ud(UdQp),
}

impl QpMachine {
    pub(crate) fn state(&self) -> QpState {
        match self {
            QpMachine::Rc(m) => m.state(),
            QpMachine::Ud(m) => m.state(),
        }
    }

    pub(crate) fn cap(&self) -> QpCap {
        match self {
            QpMachine::Rc(m) => m.cap(),
            QpMachine::Ud(m) => m.cap(),
        }
    }

    /// Whether siw made it (an RC QP of an iWARP device).
    pub(crate) fn is_siw(&self) -> bool {
        matches!(self, QpMachine::Rc(m) if m.is_siw())
    }

    /// Whether siw dropped its connection from the send side (a READ response it could not
    /// send), which leaves the QP in its state when the connection closes.
    pub(crate) fn siw_dropped_by_send(&self) -> bool {
        matches!(self, QpMachine::Rc(m) if m.siw_dropped_by_send())
    }

    /// siw: what TCP still holds of the QP's stream (see [`RcQp::tcp_backlog`]).
    pub(crate) fn tcp_backlog(&self) -> Option<super::rc::TcpBacklog> {
        match self {
            QpMachine::Rc(m) => m.tcp_backlog(),
            QpMachine::Ud(_) => None,
        }
    }

    /// The PSN an RC responder expects next (`None` for UD).
    pub(crate) fn expected_psn(&self) -> Option<u32> {
        match self {
            QpMachine::Rc(m) => Some(m.expected_psn()),
            QpMachine::Ud(_) => None,
        }
    }

    /// Whether it is a UD QP.
    pub(crate) fn is_ud(&self) -> bool {
        matches!(self, QpMachine::Ud(_))
    }

    /// The QP's type.
    pub(crate) fn qp_type(&self) -> QpType {
        match self {
            QpMachine::Rc(m) if m.is_reliable() => QpType::Rc,
            QpMachine::Rc(_) => QpType::Uc,
            QpMachine::Ud(_) => QpType::Ud,
        }
    }

    /// The RC or UC machine, if it is one.
    pub(crate) fn as_rc(&mut self) -> Option<&mut RcQp> {
        match self {
            QpMachine::Rc(m) => Some(m),
            QpMachine::Ud(_) => None,
        }
    }

    /// RTS → SQD, or SQD → SQD (which drains `again`: SQ_DRAINED once nothing sent is
    /// outstanding); false from any other state.
    pub(crate) fn drain(&mut self, again: bool, out: &mut Vec<QpOutput>) -> bool {
        match self {
            QpMachine::Rc(m) => m.drain(again, out),
            QpMachine::Ud(m) => {
                let was = m.state();
                let ok = m.step_to(QpState::Sqd, out);
                if ok && again && was == QpState::Sqd {
                    out.push(QpOutput::SqDrained);
                }
                ok
            }
        }
    }

    /// Whether the QP is in SQD with requests sent and unacknowledged.
    pub(crate) fn draining(&self) -> bool {
        matches!(self, QpMachine::Rc(m) if m.draining())
    }

    /// RTR, SQD or RTS → RTS with the attributes set, sending what waited; false from any
    /// other state.
    pub(crate) fn resume(&mut self, out: &mut Vec<QpOutput>) -> bool {
        match self {
            QpMachine::Rc(m) => m.resume(out),
            QpMachine::Ud(m) => m.step_to(QpState::Rts, out),
        }
    }

    /// Any state → RTS as rxe takes a named current state (see [`RcQp::force_rts`]);
    /// `how` matters to RC and UC QPs only.
    pub(crate) fn force_rts(&mut self, how: NamedRts, out: &mut Vec<QpOutput>) {
        match self {
            QpMachine::Rc(m) => m.force_rts(how, out),
            QpMachine::Ud(m) => m.force_rts(out),
        }
    }

    /// RESET or INIT → INIT; false from any other state.
    pub(crate) fn init_again(&mut self) -> bool {
        match self {
            QpMachine::Rc(m) => m.state() == QpState::Init || m.init(),
            QpMachine::Ud(m) => m.step_to(QpState::Init, &mut Vec::new()),
        }
    }

    /// INIT → RTR with the attributes set; false from any other state.
    pub(crate) fn enter_rtr(&mut self) -> bool {
        match self {
            QpMachine::Rc(m) => m.enter_rtr(),
            QpMachine::Ud(m) => m.step_to(QpState::Rtr, &mut Vec::new()),
        }
    }

    /// The entries of every outstanding request.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn posted_sges(&self) -> Vec<Sge> {
        match self {
            QpMachine::Rc(m) => m.posted_sges().copied().collect(),
            QpMachine::Ud(m) => m.posted_sges().copied().collect(),
        }
    }

    /// The same QP taking its receives from an SRQ.
    pub(crate) fn use_srq(&mut self) {
        match self {
            QpMachine::Rc(m) => m.use_srq(),
            QpMachine::Ud(m) => m.use_srq(),
        }
    }

    /// The receive queue (an SRQ's while lent to a QP with one: `drive.rs`).
    pub(crate) fn rq_mut(&mut self) -> &mut crate::lazy_deque::LazyDeque<super::rc::RecvEntry> {
        match self {
            QpMachine::Rc(m) => m.rq_mut(),
            QpMachine::Ud(m) => m.rq_mut(),
        }
    }

    /// Every outstanding request's entries, discarded without completions (to RESET).
    pub(crate) fn discard(&mut self) -> Vec<Sge> {
        match self {
            QpMachine::Rc(m) => m.discard(),
            QpMachine::Ud(m) => m.discard(),
        }
    }

    /// The CM's INIT → RTR → RTS of a connection; a UD QP is ready from its creation and
    /// the CM does not move it.
    pub(crate) fn connect(
        &mut self,
        rnr_timer: Duration,
        params: RcParams,
        out: &mut Vec<QpOutput>,
    ) -> bool {
        match self {
            QpMachine::Rc(m) => m.connect(rnr_timer, params, out),
            QpMachine::Ud(_) => true,
        }
    }

    /// siw's move to RTS as MPA completes (RC only; a UD QP is never an iWARP connection's).
    pub(crate) fn iw_rts(
        &mut self,
        params: RcParams,
        tcp: TcpPath,
        out: &mut Vec<QpOutput>,
    ) -> bool {
        match self {
            QpMachine::Rc(m) => m.iw_rts(params, tcp, out),
            QpMachine::Ud(_) => false,
        }
    }

    /// siw's CLOSING: flushing, read as SQD (RC only).
    pub(crate) fn siw_close(&mut self, out: &mut Vec<QpOutput>) {
        match self {
            QpMachine::Rc(m) => m.siw_close(out),
            QpMachine::Ud(m) => m.enter_error(out),
        }
    }

    /// Any state → ERROR, flushing.
    pub(crate) fn enter_error(&mut self, out: &mut Vec<QpOutput>) {
        match self {
            QpMachine::Rc(m) => m.enter_error(out),
            QpMachine::Ud(m) => m.enter_error(out),
        }
    }

    /// `ibv_post_send` of an RC or UC request (the world never gives one to a UD QP).
    pub(crate) fn post_send(
        &mut self,
        entry: SendEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, Option<SendEntry>)> {
        match self {
            QpMachine::Rc(m) => m.post_send(entry, out),
            QpMachine::Ud(_) => unreachable!("posts.rs sends UD requests as UD requests"),
        }
    }

    /// `ibv_post_send` of a UD request (the world never gives one to an RC QP).
    pub(crate) fn post_ud_send(
        &mut self,
        entry: UdSendEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, Option<UdSendEntry>)> {
        match self {
            QpMachine::Ud(m) => m.post_send(entry, out),
            QpMachine::Rc(_) => unreachable!("posts.rs refuses UD requests on RC QPs"),
        }
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(
        &mut self,
        entry: RecvEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, RecvEntry)> {
        match self {
            QpMachine::Rc(m) => m.post_recv(entry, out),
            QpMachine::Ud(m) => m.post_recv(entry, out),
        }
    }

    /// The QP's timer fired (UD QPs have none).
    pub(crate) fn on_timer(&mut self, out: &mut Vec<QpOutput>) {
        if let QpMachine::Rc(m) = self {
            m.on_timer(out);
        }
    }

    /// An RC packet arrived (a UD QP ignores it).
    pub(crate) fn on_packet(&mut self, pkt: Packet, mem: &mut dyn Memory, out: &mut Vec<QpOutput>) {
        if let QpMachine::Rc(m) = self {
            m.on_packet(pkt, mem, out);
        }
    }

    /// Whether it is a UD QP made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    pub(crate) fn blocks_self_loopback(&self) -> bool {
        matches!(self, QpMachine::Ud(m) if m.blocks_self_loopback())
    }

    /// The UD machine, if it is one.
    pub(crate) fn as_ud(&mut self) -> Option<&mut UdQp> {
        match self {
            QpMachine::Ud(m) => Some(m),
            QpMachine::Rc(_) => None,
        }
    }
}
