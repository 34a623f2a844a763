//! The end of a sequence: nothing outstanding on a QP in ERROR, everything flushed exactly
//! once, then every object destroyed in dependency order.

use std::time::Duration;

use cmtwin::verbs::{DataPath, QpAttr, QpState};
use cmtwin::{Call, CmBackend, Wait};

use super::op::Pick;
use super::{Home, Model, Validity, Wr};

impl Model {
    /// Drains every CQ and asynchronous event; checks that no signaled request is left on a
    /// QP in ERROR; moves every QP to ERROR and drains again, after which every signaled
    /// request must have completed (unless discarded or lost to an overrun); then destroys
    /// every object, each of which must go.
    ///
    /// # Panics
    ///
    /// When a request is left over, or a destroy fails.
    pub fn finish(mut self) {
        self.drain();
        self.check_settled(QpState::Error);
        // Every retry and RNR wait runs out well within ten minutes (at most 8 transport
        // timeouts of 34 s, 7 RNR waits of 655 ms).
        let r = self.cm(false).sleep(Duration::from_secs(600));
        self.check(&[Call::Sleep], Validity::Live, None, r);
        self.drain();
        self.check_settled(QpState::Error);
        self.check_settled(QpState::Rts);
        for q in self.live_qps() {
            let server = self.qps[q].home == Home::Server;
            let state = self.cm(server).query_qp_state(self.qps[q].v.qp);
            if state.ok() == Some(QpState::Reset) {
                continue; // nothing to flush, and the kernel has no RESET -> ERROR
            }
            let attr = QpAttr {
                qp_state: Some(QpState::Error),
                ..QpAttr::default()
            };
            if let Err(e) = self.cm(server).modify_qp(self.qps[q].v.qp, &attr) {
                panic!("moving QP {q} to ERROR: {e}");
            }
        }
        self.drain();
        for q in self.live_qps() {
            self.assert_all_completed(q, |_| true, "flushed");
        }
        self.check_words();
        self.destroy_all();
    }

    /// No signaled request is left on a live QP in `state`: ERROR (everything flushed), or
    /// RTS, where only the sends of a UD QP or of an RC QP with a transport timeout must
    /// have ended.
    fn check_settled(&self, state: QpState) {
        for q in self.live_qps() {
            let rec = self.qps[q].v;
            let server = self.qps[q].home == Home::Server;
            if self.cm(server).query_qp_state(rec.qp).ok() != Some(state) {
                continue;
            }
            match state {
                QpState::Error => self.assert_all_completed(q, |_| true, "in ERROR"),
                _ if rec.ud || rec.timed => {
                    self.assert_all_completed(q, |w| !w.recv, "in RTS after ten minutes")
                }
                _ => {}
            }
        }
    }

    /// The indices of the bed's live QPs.
    fn live_qps(&self) -> Vec<usize> {
        (0..self.qps.len())
            .filter(|&q| self.qps[q].live && self.qps[q].home != Home::Foreign)
            .collect()
    }

    /// Fetches every asynchronous event and polls every live CQ of the bed empty.
    fn drain(&mut self) {
        for server in [true, false] {
            while self.get_async_event(server, Wait::NonBlocking) {}
        }
        for c in 0..self.cqs.len() {
            if !self.cqs[c].live || self.cqs[c].home == Home::Foreign {
                continue;
            }
            let pick = Pick {
                idx: c,
                owner: true,
            };
            while self.poll(pick, 8) > 0 {}
        }
    }

    /// Every signaled request of QP `q` that `which` selects has completed, unless discarded
    /// or lost to its CQ's overrun (`why`: the QP's condition, for the message).
    fn assert_all_completed(&self, q: usize, which: impl Fn(&Wr) -> bool, why: &str) {
        let rec = self.qps[q].v;
        for (wr_id, w) in self.outstanding_of(q) {
            let cq = if w.recv { rec.recv_cq } else { rec.send_cq };
            if !which(w) || !w.signaled || w.discarded || self.cqs[cq].v.overrun {
                continue;
            }
            panic!("wr {wr_id} ({w:?}) is outstanding on QP {q}, {why}, and never completed");
        }
    }

    /// Acknowledges every fetched CQ event, then destroys address handles, QPs, regions,
    /// CQs, channels, PDs, ids and event channels: each must go.
    fn destroy_all(&mut self) {
        let own = |home: Home| home != Home::Foreign;
        for c in 0..self.cqs.len() {
            let rec = &self.cqs[c];
            if rec.live && own(rec.home) && rec.v.unacked > 0 {
                let r = self
                    .cm(rec.home == Home::Server)
                    .ack_cq_events(rec.v.cq, rec.v.unacked);
                r.unwrap_or_else(|e| panic!("acknowledging CQ {c}'s events: {e}"));
            }
        }
        for a in self.ahs.iter().filter(|a| a.live && own(a.home)) {
            let r = self.cm(a.home == Home::Server).destroy_ah(a.v.ah);
            r.unwrap_or_else(|e| panic!("destroying {}: {e}", a.v.ah));
        }
        for q in self.qps.iter().filter(|q| q.live && own(q.home)) {
            let cm = self.cm(q.home == Home::Server);
            let r = match q.v.id {
                Some(id) => cm.destroy_qp(self.ids[id].v),
                None => cm.destroy_external_qp(q.v.qp),
            };
            r.unwrap_or_else(|e| panic!("destroying {}: {e}", q.v.qp));
        }
        for m in self.mrs.iter().filter(|m| m.live && own(m.home)) {
            let r = self.cm(m.home == Home::Server).dereg_mr(m.v.mr.handle);
            r.unwrap_or_else(|e| panic!("deregistering {} once no QP is left: {e}", m.v.mr.handle));
        }
        for c in self.cqs.iter().filter(|c| c.live && own(c.home)) {
            let r = self.cm(c.home == Home::Server).destroy_cq(c.v.cq);
            r.unwrap_or_else(|e| panic!("destroying {}: {e}", c.v.cq));
        }
        for ch in self.channels.iter().filter(|c| c.live && own(c.home)) {
            let r = self.cm(ch.home == Home::Server).destroy_comp_channel(ch.v);
            r.unwrap_or_else(|e| panic!("destroying {}: {e}", ch.v));
        }
        for p in self
            .pds
            .iter()
            .filter(|p| p.live && own(p.home) && !p.v.default)
        {
            let r = self.cm(p.home == Home::Server).dealloc_pd(p.v.pd);
            r.unwrap_or_else(|e| panic!("deallocating {}: {e}", p.v.pd));
        }
        for i in self.ids.iter().rev().filter(|i| i.live && own(i.home)) {
            let r = self.cm(i.home == Home::Server).destroy_id(i.v);
            r.unwrap_or_else(|e| panic!("destroying {}: {e}", i.v));
        }
        for &(server, ch) in &self.event_channels {
            let r = self.cm(server).destroy_event_channel(ch);
            r.unwrap_or_else(|e| panic!("destroying {ch}: {e}"));
        }
    }
}
