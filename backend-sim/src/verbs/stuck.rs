//! Endless RNR retries. An RC requester whose send met a receiver-not-ready NAK retries it
//! after the responder's RNR timer, for ever when its `rnr_retry` is 7 (as hardware does):
//! until the responder has a receive, each retry gets the same NAK and changes nothing. Only
//! a process can post that receive; so when such waits are all the timeline holds, nothing
//! in the fabric can change by itself, and a caller blocked on it waits in vain, as on a
//! timeline that is empty: the simulator reports the deadlock (EDEADLK) instead of running the
//! retries for ever.

use super::{QpMachine, VerbsAction};
use crate::world::{Action, World};

impl World {
    /// Whether the timeline holds nothing but endless RNR waits: every pending action is the
    /// timer of an RC requester waiting out an RNR NAK with `rnr_retry` 7, whose responder
    /// still answers and has no receive (on its receive queue or its SRQ), with no data
    /// packet that could be lost (no loss configured, no targeted packet fault pending).
    /// Costs one look at the next action unless that is such a timer.
    pub(crate) fn only_endless_rnr_waits(&mut self) -> bool {
        let timer_of = |action: &Action| match action {
            Action::Verbs(VerbsAction::QpTimer { qp }) => Some(*qp),
            _ => None,
        };
        let Some(next) = self.timeline.peek().and_then(timer_of) else {
            return false;
        };
        if !self.endless_rnr_wait(next)
            || self.cfg.loss_probability > 0.0
            || !self.verbs.faults.is_empty()
        {
            return false;
        }
        (self.timeline.pending()).all(|a| timer_of(a).is_some_and(|q| self.endless_rnr_wait(q)))
    }

    /// One step of the timeline unless it holds only endless RNR waits; false when it did
    /// not step (nothing pending, or nothing that can change anything by itself).
    pub(crate) fn step_unless_stuck(&mut self) -> bool {
        !self.only_endless_rnr_waits() && self.step()
    }

    /// Whether QP `q` waits out an RNR NAK for ever at a responder that has no receive and
    /// still answers (so each retry gets the same NAK).
    fn endless_rnr_wait(&self, q: super::ObjKey) -> bool {
        let Some(qp) = self.verbs.qps.get(&q) else {
            return false;
        };
        let QpMachine::Rc(m) = &qp.machine else {
            return false;
        };
        if !m.in_endless_rnr_wait() || !self.topo.devices[qp.dev].present {
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
