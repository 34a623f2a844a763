//! A QP's machine, whichever its transport: RC or UC (`rc.rs`) or UD (`ud.rs`). The calls every
//! QP answers go to either; those of one transport only are no-ops (or refusals) for the
//! other, as the hardware ignores an RC packet at a UD QP.

use std::time::Duration;

use cmtwin::verbs::{QpState, Sge};
use cmtwin::QpCap;

use super::packet::Packet;
use super::rc::{Memory, PostError, QpOutput, RcParams, RecvEntry, SendEntry};
use super::ud::{UdQp, UdSendEntry};
use super::RcQp;

/// The machine of one QP.
pub(crate) enum QpMachine {
    /// RC, or UC (an unreliable [`RcQp`]).
    Rc(RcQp),
    Ud(UdQp),
}

impl QpMachine {
    pub(crate) fn qpn(&self) -> u32 {
        match self {
            QpMachine::Rc(m) => m.qpn(),
            QpMachine::Ud(m) => m.qpn(),
        }
    }

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

    /// Whether it is a UD QP.
    pub(crate) fn is_ud(&self) -> bool {
        matches!(self, QpMachine::Ud(_))
    }

    /// The entries of every outstanding request.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn posted_sges(&self) -> Vec<Sge> {
        match self {
            QpMachine::Rc(m) => m.posted_sges().copied().collect(),
            QpMachine::Ud(m) => m.posted_sges().copied().collect(),
        }
    }

    /// Every outstanding request's entries, discarded without completions (to RESET).
    pub(crate) fn discard(&mut self) -> Vec<Sge> {
        match self {
            QpMachine::Rc(m) => m.discard(),
            QpMachine::Ud(m) => m.discard(),
        }
    }

    /// RESET → INIT.
    pub(crate) fn init(&mut self) -> bool {
        match self {
            QpMachine::Rc(m) => m.init(),
            QpMachine::Ud(m) => m.step_to(QpState::Init, &mut Vec::new()),
        }
    }

    /// INIT → RTR (`rnr_timer` concerns RC only).
    pub(crate) fn rtr(&mut self, rnr_timer: Duration) -> bool {
        match self {
            QpMachine::Rc(m) => m.rtr(rnr_timer),
            QpMachine::Ud(m) => m.step_to(QpState::Rtr, &mut Vec::new()),
        }
    }

    /// RTR → RTS (`params` concern RC only).
    pub(crate) fn rts(&mut self, params: RcParams, out: &mut Vec<QpOutput>) -> bool {
        match self {
            QpMachine::Rc(m) => m.rts(params, out),
            QpMachine::Ud(m) => m.step_to(QpState::Rts, out),
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
    pub(crate) fn iw_rts(&mut self, params: RcParams, out: &mut Vec<QpOutput>) -> bool {
        match self {
            QpMachine::Rc(m) => m.iw_rts(params, out),
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
    ) -> Result<(), (PostError, SendEntry)> {
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
    ) -> Result<(), (PostError, UdSendEntry)> {
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
