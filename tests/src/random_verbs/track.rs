//! What the model tracks of posted work: where it may place bytes, its completions (each
//! exactly once, on the right CQ and QP, within the posted length), and the regions'
//! contents.

use cmtwin::verbs::{DataPath, Sge, WcOpcode, WcStatus, WorkCompletion, GRH_LEN};

use super::{Home, Model, Role, Wr, Writer};

impl Model {
    /// Notes that posted work `wr` may place bytes at `sge` (a receive's or a read's entry).
    pub(super) fn may_write(&mut self, wr: u64, sge: &Sge) {
        self.writers.push(Writer {
            key: sge.lkey,
            start: sge.addr,
            end: sge.addr.saturating_add(u64::from(sge.length)),
            role: Role::Other,
            wr,
        });
    }

    /// Notes that RDMA write `wr` may place `len` bytes at `addr` under `rkey`.
    pub(super) fn may_write_remote(&mut self, wr: u64, rkey: u32, addr: u64, len: u64) {
        self.writers.push(Writer {
            key: rkey,
            start: addr,
            end: addr.saturating_add(len),
            role: Role::Other,
            wr,
        });
    }

    /// Records work request `wr_id`, posted successfully.
    pub(super) fn posted(&mut self, wr_id: u64, wr: Wr) {
        if self.verbose {
            eprintln!("    posted wr {wr_id}: {wr:?}");
        }
        let old = self.wrs.insert(wr_id, wr);
        assert!(old.is_none(), "wr ids are fresh");
    }

    /// Checks completion `wc`, polled from CQ `cq` (index) on host `server`, against the
    /// request it completes, and forgets that request (and, for a send-queue completion, the
    /// unsignaled sends posted before it on the QP, which completed silently).
    pub(super) fn completed(&mut self, server: bool, cq: usize, wc: &WorkCompletion) {
        if self.verbose {
            eprintln!("    completion on cq {cq}: {wc:?}");
        }
        let Some(w) = self.wrs.remove(&wc.wr_id) else {
            panic!(
                "a completion of wr {} that is not outstanding: {wc:?}",
                wc.wr_id
            );
        };
        assert_eq!(
            w.server, server,
            "wr {} completed on the other host",
            wc.wr_id
        );
        let qp = self.qps[w.qp].v;
        let want_cq = if w.recv { qp.recv_cq } else { qp.send_cq };
        assert_eq!(cq, want_cq, "wr {} completed on another CQ", wc.wr_id);
        assert_eq!(
            wc.qp_num, qp.qpn,
            "wr {}'s completion names another QP",
            wc.wr_id
        );
        // A write with immediate data reports the write's length in the receive it
        // consumes, whatever that receive's entries (rxe: the responder's message length).
        let written = wc.status == WcStatus::SUCCESS && wc.opcode == WcOpcode::RecvRdmaWithImm;
        assert!(
            written || u64::from(wc.byte_len) <= w.len,
            "wr {}: {} bytes completed of {} posted",
            wc.wr_id,
            wc.byte_len,
            w.len
        );
        if wc.status == WcStatus::SUCCESS {
            self.check_success(&w, wc);
        }
        if let Some(a) = &w.atomic {
            self.atomic_completed(wc.wr_id, a, Some(wc));
        }
        if !w.recv {
            let earlier: Vec<u64> = self
                .outstanding_of(w.qp)
                .filter(|(&id, o)| id < wc.wr_id && !o.recv && !o.signaled)
                .map(|(&id, _)| id)
                .collect();
            for id in earlier {
                let gone = self.wrs.remove(&id).expect("outstanding");
                if let Some(a) = &gone.atomic {
                    self.atomic_completed(id, a, None);
                }
            }
        }
    }

    /// A successful completion's opcode and byte count.
    fn check_success(&mut self, w: &Wr, wc: &WorkCompletion) {
        if let Some(opcode) = w.opcode {
            assert_eq!(wc.opcode, opcode, "wr {}'s opcode", wc.wr_id);
            assert_eq!(
                u64::from(wc.byte_len),
                w.len,
                "wr {}: a successful {opcode:?} of {} bytes",
                wc.wr_id,
                w.len
            );
            return;
        }
        assert!(
            matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
            "wr {} is a receive, completed as {:?}",
            wc.wr_id,
            wc.opcode
        );
        if !self.qps[w.qp].v.ud {
            return;
        }
        assert!(
            wc.byte_len >= GRH_LEN,
            "wr {}: a UD receive of {} bytes has no room for the GRH",
            wc.wr_id,
            wc.byte_len
        );
        if let Some((mr, offset)) = w.grh_at {
            let mut grh = [0u8; GRH_LEN as usize];
            let rec = &self.mrs[mr];
            if rec.live
                && self
                    .cm(w.server)
                    .mr_read(rec.v.mr.handle, offset, &mut grh)
                    .is_ok()
            {
                self.last_ud_recv = Some((w.server, *wc, grh));
            }
        }
    }

    /// Every live region of the bed holds what the model expects, except where posted work
    /// may have placed bytes; the expectation then follows.
    pub(super) fn check_contents(&mut self) {
        for i in 0..self.mrs.len() {
            let rec = &self.mrs[i];
            if !rec.live || rec.home == Home::Foreign {
                continue;
            }
            let server = rec.home == Home::Server;
            let mut now = vec![0u8; rec.v.shadow.len()];
            if let Err(e) = self.cm(server).mr_read(rec.v.mr.handle, 0, &mut now) {
                // Only a removed device makes a live region unreadable.
                assert_eq!(e.errno, cmtwin::Errno::ENXIO, "reading region {i}: {e}");
                continue;
            }
            self.explain_changes(i, &now);
            self.mrs[i].v.shadow = now;
        }
    }

    /// Every byte of region `i` that differs between the model's copy and `now` lies where
    /// posted work could place it.
    pub(super) fn explain_changes(&self, i: usize, now: &[u8]) {
        let mr = &self.mrs[i].v.mr;
        for (off, (a, b)) in self.mrs[i].v.shadow.iter().zip(now).enumerate() {
            if a == b {
                continue;
            }
            let addr = mr.addr_at(off);
            let explained = self
                .writers
                .iter()
                .any(|w| w.key == mr.lkey && w.start <= addr && addr < w.end);
            assert!(
                explained,
                "byte {off} of region {i} (key {:#x}) changed from {a:#x} to {b:#x}, and no \
                 posted work targets it",
                mr.lkey
            );
        }
    }
}
