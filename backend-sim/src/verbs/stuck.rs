//! Endless retries that change nothing. Two kinds of RC requester retry for ever, as the
//! hardware they model does:
//! * one that met a receiver-not-ready NAK retries after the responder's RNR timer without
//!   limit when its `rnr_retry` is 7: until the responder has a receive, each retry gets the
//!   same NAK;
//! * one on rxe whose `retry_count` is 7 resends on its transport timeout without limit
//!   (rxe_comp.c counts down only below 7): toward a peer that can never answer (its device
//!   gone, its QP gone, in another state, connected elsewhere or with a responder left in
//!   error, or every packet lost), each
//!   resend is lost the same way.
//!
//! Only a process can change either (post that receive, restore or re-create the peer); so
//! when such retries, and packets on their way to a QP that will drop them, are all the
//! timeline holds, nothing in the fabric can change by itself, and a caller blocked on it
//! waits in vain, as on a timeline that is empty: the simulator reports the deadlock (EDEADLK)
//! instead of running the retries for ever.

use super::{Qp, QpMachine, VerbsAction};
use crate::world::{Action, HostKey, World};

/// What keeps a stuck timeline going, for the deadlock's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndlessRetries {
    /// Only RNR retries at responders without a receive.
    Rnr,
    /// Transport retries toward peers that cannot answer (and perhaps RNR retries too).
    Transport,
}

impl EndlessRetries {
    /// Why nothing can change, as the deadlock's trace record says it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            EndlessRetries::Rnr => {
                "RC sends retrying for ever after RNR NAKs at responders without a receive"
            }
            EndlessRetries::Transport => {
                "RC sends retrying for ever (retry count 7 on rxe) toward peers that cannot \
                 answer, or after RNR NAKs at responders without a receive"
            }
        }
    }
}

impl World {
    /// Whether the timeline holds nothing but endless retries that change nothing (and data
    /// packets on their way to a QP that will drop them), and of which kind. Costs one look
    /// at the next action unless that is the timer of an endless retry.
    pub(crate) fn only_endless_retries(&mut self) -> Option<EndlessRetries> {
        let timer_of = |action: &Action| match action {
            Action::Verbs(VerbsAction::QpTimer { qp }) => Some(*qp),
            _ => None,
        };
        let next = self.timeline.peek().and_then(timer_of)?;
        let mut kind = self.endless_retry(next)?;
        for action in self.timeline.pending() {
            match action {
                Action::Verbs(VerbsAction::QpTimer { qp }) => {
                    if self.endless_retry(*qp)? == EndlessRetries::Transport {
                        kind = EndlessRetries::Transport;
                    }
                }
                Action::Verbs(VerbsAction::Deliver { from, to, packet })
                    if self.dropped_on_arrival(*from, *to, packet.is_request()) => {}
                _ => return None,
            }
        }
        Some(kind)
    }

    /// One step of the timeline unless it holds only endless retries; false when it did not
    /// step (nothing pending, or nothing that can change anything by itself).
    pub(crate) fn step_unless_stuck(&mut self) -> bool {
        self.only_endless_retries().is_none() && self.step()
    }

    /// Which endless retry QP `q`'s timer is, if it is one that changes nothing.
    fn endless_retry(&self, q: super::ObjKey) -> Option<EndlessRetries> {
        let qp = self.verbs.qps.get(&q)?;
        let QpMachine::Rc(m) = &qp.machine else {
            return None;
        };
        if m.in_endless_transport_retry() && self.unanswerable(qp) {
            return Some(EndlessRetries::Transport);
        }
        (m.in_endless_rnr_wait() && self.endless_rnr_wait(qp)).then_some(EndlessRetries::Rnr)
    }

    /// Whether requester `qp`'s resends can never be answered: its device or its peer's is
    /// gone, every packet is lost, or the peer's QP drops them.
    fn unanswerable(&self, qp: &Qp) -> bool {
        if !self.topo.devices[qp.dev].present || self.cfg.loss_probability >= 1.0 {
            return true;
        }
        qp.peer
            .is_none_or(|to| self.dropped_on_arrival((qp.host, qp.qpn), to, true))
    }

    /// Whether a data packet (a `request` or an answer) from QP `from` would be dropped by QP
    /// `to` on arrival: no such QP, its device removed, connected to another QP, or in a
    /// state that takes nothing (or no request).
    fn dropped_on_arrival(&self, from: (HostKey, u32), to: (HostKey, u32), request: bool) -> bool {
        let Some(target) = self.verbs.qp_by_num.get(&to).map(|k| &self.verbs.qps[k]) else {
            return true;
        };
        let drops = match &target.machine {
            QpMachine::Rc(r) => r.drops_from_peer(request),
            _ => false,
        };
        !self.topo.devices[target.dev].present || target.peer != Some(from) || drops
    }

    /// Whether requester `qp`, waiting out an RNR NAK for ever, meets a responder that has no
    /// receive (on its receive queue or its SRQ) and still answers (so each retry gets the
    /// same NAK), with no data packet that could be lost (no loss configured, no targeted
    /// packet fault pending).
    fn endless_rnr_wait(&self, qp: &Qp) -> bool {
        if self.cfg.loss_probability > 0.0
            || !self.verbs.faults.is_empty()
            || !self.topo.devices[qp.dev].present
        {
            return false;
        }
        let Some(peer) = qp.peer else {
            return false;
        };
        let Some(&p) = self.verbs.qp_by_num.get(&peer) else {
            return false;
        };
        let Some(responder) = self.verbs.qps.get(&p) else {
            return false;
        };
        let QpMachine::Rc(r) = &responder.machine else {
            return false;
        };
        let srq_empty = self
            .verbs
            .srq_of_qp
            .get(&p)
            .is_none_or(|s| self.verbs.srqs.get(s).is_some_and(|s| s.rq.is_empty()));
        self.topo.devices[responder.dev].present
            && responder.peer == Some((qp.host, qp.qpn))
            && r.responds_without_receive()
            && srq_empty
    }
}
