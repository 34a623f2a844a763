//! Driving a QP's machine: its inputs with the regions it may touch ([`Memory`] over the
//! world's regions), and its outputs carried out: packets onto the data wire, completions into
//! CQs, its one timer on the timeline, COMM_EST to the host's asynchronous events.

use cmtwin::verbs::{AccessFlags, Sge, WcStatus, WorkCompletion};
use cmtwin::AsyncEvent;

use super::packet::{AtomicOp, Nak};
use super::rc::{Memory, QpOutput, Queue};
use super::responder_resources::{Kept, KeptRequests};
use super::{Mr, ObjKey, QpMachine, Verbs, VerbsAction, VerbsAsyncEvent};
use crate::config::KernelProfile;
use crate::engine::timeline::SimTime;
use crate::store::Store;
use crate::world::{Action, DevKey, World};

/// The regions of one device and PD, as an RC machine reaches them, and the QP's kept reads
/// and atomics.
struct RegionMemory<'a> {
    mrs: &'a mut Store<Mr>,
    by_key: &'a std::collections::BTreeMap<(DevKey, u32), ObjKey>,
    dev: DevKey,
    pd: ObjKey,
    kept: &'a mut std::collections::BTreeMap<ObjKey, KeptRequests>,
    qp: ObjKey,
}

impl RegionMemory<'_> {
    /// The region of key `key` of this PD whose bytes `addr..addr + len` it holds and which
    /// grants `access`; the offset of `addr` in it.
    fn find(
        &mut self,
        key: u32,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Option<(&mut Mr, usize)> {
        let k = self.by_key.get(&(self.dev, key))?;
        let mr = self.mrs.get_mut(k)?;
        let offset = addr.checked_sub(mr.addr)?;
        let fits = offset
            .checked_add(len)
            .is_some_and(|end| end <= mr.buf.len() as u64);
        (mr.pd == self.pd && fits && mr.access.contains(access)).then_some((mr, offset as usize))
    }
}

impl Memory for RegionMemory<'_> {
    fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus> {
        let mut rest = data;
        // An entry of no bytes is skipped, its key never looked up (rxe's `copy_data`).
        for s in sges.iter().filter(|s| s.length > 0) {
            if rest.is_empty() {
                break;
            }
            let n = rest.len().min(s.length as usize);
            let (mr, off) = self
                .find(s.lkey, s.addr, n as u64, AccessFlags::LOCAL_WRITE)
                .ok_or(WcStatus::LOC_PROT_ERR)?;
            mr.buf[off..off + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        Ok(())
    }

    fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool {
        let len = data.len() as u64;
        match self.find(rkey, addr, len, AccessFlags::REMOTE_WRITE) {
            Some((mr, off)) => {
                mr.buf[off..off + data.len()].copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    fn remote_read(&mut self, rkey: u32, addr: u64, len: u32) -> Option<Vec<u8>> {
        let (mr, off) = self.find(rkey, addr, u64::from(len), AccessFlags::REMOTE_READ)?;
        Some(mr.buf[off..off + len as usize].to_vec())
    }

    fn has_key(&self, key: u32) -> bool {
        self.by_key.contains_key(&(self.dev, key))
    }

    fn remote_atomic(&mut self, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, Nak> {
        let (mr, off) = self
            .find(rkey, addr, 8, AccessFlags::REMOTE_ATOMIC)
            .ok_or(Nak::RemoteAccess)?;
        if addr % 8 != 0 {
            return Err(Nak::InvalidRequest);
        }
        let word: &mut [u8; 8] = (&mut mr.buf[off..off + 8]).try_into().expect("8 bytes");
        let old = u64::from_ne_bytes(*word);
        *word = op.apply(old).to_ne_bytes();
        Ok(old)
    }

    fn keep_request(&mut self, places: u8, kept: Kept) {
        if places > 0 {
            self.kept.entry(self.qp).or_default().keep(places, kept);
        }
    }

    fn kept_request(&self, psn: u32) -> Option<Kept> {
        self.kept.get(&self.qp)?.find(psn)
    }
}

impl World {
    // ----- driving the machine -----------------------------------------------------------

    /// Gives QP `q`'s machine an input and carries out what it answers.
    pub(crate) fn drive_qp<R>(
        &mut self,
        q: ObjKey,
        input: impl FnOnce(&mut QpMachine, &mut dyn Memory, &mut Vec<QpOutput>) -> R,
    ) -> R {
        let mut out = std::mem::take(&mut self.verbs.outputs);
        let r = {
            let Verbs {
                qps,
                mrs,
                mr_by_key,
                srqs,
                srq_of_qp,
                kept_requests,
                ..
            } = &mut self.verbs;
            let qp = qps.get_mut(&q).expect("live QP");
            let mut mem = RegionMemory {
                mrs,
                by_key: mr_by_key,
                dev: qp.dev,
                pd: qp.pd,
                kept: kept_requests,
                qp: q,
            };
            let srq = srq_of_qp
                .get(&q)
                .map(|s| srqs.get_mut(s).expect("an attached SRQ lives"));
            match srq {
                Some(srq) => {
                    let posted = srq.rq.len();
                    std::mem::swap(&mut srq.rq, qp.machine.rq_mut());
                    let r = input(&mut qp.machine, &mut mem, &mut out);
                    std::mem::swap(&mut srq.rq, qp.machine.rq_mut());
                    if srq_limit_reached(srq, posted) {
                        out.push(QpOutput::SrqLimitReached);
                    }
                    r
                }
                None => input(&mut qp.machine, &mut mem, &mut out),
            }
        };
        // A receive completion its CQ could not hold puts the QP in ERROR before the
        // acknowledgement that followed it goes out: none does.
        let mut errored = false;
        for o in out.drain(..) {
            if !(errored && matches!(o, QpOutput::Packet(_))) {
                errored |= self.carry_out_qp(q, o);
            }
        }
        self.verbs.outputs = out;
        r
    }

    /// Carries out one output of QP `q`'s machine; true if a receive completion was lost to
    /// a full CQ, which put the QP in ERROR.
    fn carry_out_qp(&mut self, q: ObjKey, output: QpOutput) -> bool {
        let Some(qp) = self.verbs.qps.get(&q) else {
            return false;
        };
        let (host, dev, id, qpn) = (qp.host, qp.dev, qp.id, qp.qpn);
        let (send_cq, recv_cq) = (qp.send_cq, qp.recv_cq);
        match output {
            QpOutput::Packet(pkt) => self.send_data(q, pkt),
            QpOutput::Datagram(d) => self.send_datagram(q, d),
            QpOutput::Complete {
                queue,
                wc,
                solicited,
                sges,
            } => {
                for s in sges.iter() {
                    self.release_entry(dev, s);
                }
                let cq = match queue {
                    Queue::Send => send_cq,
                    Queue::Recv => recv_cq,
                };
                // An RC machine does not know its number (`rc.rs`).
                let wc = wc.map(|wc| WorkCompletion { qp_num: qpn, ..wc });
                let lost = wc.is_some_and(|wc| {
                    let wakes = self.wakes_solicited_only(dev, queue, &wc, solicited);
                    !self.push_completion(cq, wc, wakes)
                });
                if lost && queue == Queue::Recv && wc.is_some_and(|wc| wc.status.0 == 0) {
                    // rxe's responder takes a receive completion its CQ cannot hold for a
                    // class G error (RESPST_ERR_CQ_OVERFLOW): the QP enters ERROR. (The
                    // requester ignores a lost send completion and goes on; so do flushes.)
                    self.drive_qp(q, |m, _, out| m.enter_error(out));
                    return true;
                }
            }
            QpOutput::Terminate => self.siw_drop_connection_of(q),
            QpOutput::TcpLost => self.siw_tcp_lost(q),
            QpOutput::SetTimer(after) => self.set_qp_timer(q, self.now.after(after)),
            QpOutput::CancelTimer => self.cancel_qp_timer(q),
            QpOutput::SrqLimitReached => {
                let srq = self.verbs.srq_of_qp[&q];
                let event = VerbsAsyncEvent {
                    kind: AsyncEvent::SRQ_LIMIT_REACHED,
                    qp_num: None,
                    id: None,
                    cq: None,
                    srq: Some(cmtwin::SrqHandle::from_raw(self.stamp(srq))),
                };
                self.queue_async_event(host, event);
            }
            // rxe on Linux 6.1 raises no LAST_WQE_REACHED (measured); 6.12's does, and so does
            // an InfiniBand HCA on every kernel.
            QpOutput::LastWqeReached
                if self.cfg.kernel == KernelProfile::Linux61
                    && self.topo.devices[dev].transport == cmtwin::Transport::Roce => {}
            QpOutput::CommEst
            | QpOutput::SqDrained
            | QpOutput::LastWqeReached
            | QpOutput::QpReqErr
            | QpOutput::QpAccessErr => {
                let kind = match output {
                    QpOutput::CommEst => AsyncEvent::COMM_EST,
                    QpOutput::SqDrained => AsyncEvent::SQ_DRAINED,
                    QpOutput::QpReqErr => AsyncEvent::QP_REQ_ERR,
                    QpOutput::QpAccessErr => AsyncEvent::QP_ACCESS_ERR,
                    _ => AsyncEvent::QP_LAST_WQE_REACHED,
                };
                let event = VerbsAsyncEvent {
                    kind,
                    qp_num: Some(qpn),
                    id: id.map(|i| self.id_handle(i)),
                    cq: None,
                    srq: None,
                };
                self.queue_async_event(host, event);
            }
        }
        false
    }

    /// Makes QP `q`'s timer due at `due`, keeping its timeline entry if that runs no later.
    /// Whether a completion of `queue` on device `dev` wakes a CQ armed for solicited
    /// completions only (`solicited`: the send request, or the packet a receive completed
    /// from, carried the solicited-event bit). Each driver has its rule:
    /// * an InfiniBand HCA, the specification's: a solicited receive or a failed completion;
    /// * rxe (`rxe_cq_post`): a receive completed from a packet with the bit, failed or not,
    ///   or one flushed without a packet on Linux 6.1 (6.12's `flush_recv_wqe` posts the
    ///   flush unsolicited); never a send-queue completion, which its completer posts
    ///   unsolicited whatever its status;
    /// * siw (`siw_cq_notify_now`): a send-queue completion of a request posted solicited,
    ///   failed or flushed too; never a receive (`siw_rqe_complete` passes no solicited
    ///   flag). Each rule measured on its bed (rxe-6.1, rxe-6.12, siw-6.1; tests/BEDS.md).
    fn wakes_solicited_only(
        &self,
        dev: DevKey,
        queue: Queue,
        wc: &WorkCompletion,
        solicited: bool,
    ) -> bool {
        let failed = wc.status != WcStatus::SUCCESS;
        match (self.topo.devices[dev].transport, queue) {
            (cmtwin::Transport::Roce, Queue::Send) => false,
            (cmtwin::Transport::Roce, Queue::Recv) if wc.status == WcStatus::WR_FLUSH_ERR => {
                self.cfg.kernel == KernelProfile::Linux61
            }
            (cmtwin::Transport::Roce, Queue::Recv) => solicited,
            (cmtwin::Transport::Iwarp, Queue::Send) => solicited,
            (cmtwin::Transport::Iwarp, Queue::Recv) => false,
            (cmtwin::Transport::InfiniBand, Queue::Send) => failed,
            (cmtwin::Transport::InfiniBand, Queue::Recv) => solicited || failed,
        }
    }

    fn set_qp_timer(&mut self, q: ObjKey, due: SimTime) {
        let qp = self.verbs.qps.get_mut(&q).expect("live QP");
        qp.timer_due = due;
        match qp.timer {
            Some((_, at)) if at <= due => {}
            _ => {
                self.cancel_qp_timer(q);
                let key = self
                    .timeline
                    .schedule(due, Action::Verbs(VerbsAction::QpTimer { qp: q }));
                self.verbs.qps.get_mut(&q).expect("live QP").timer = Some((key, due));
            }
        }
    }

    fn cancel_qp_timer(&mut self, q: ObjKey) {
        if let Some((t, _)) = self.verbs.qps.get_mut(&q).and_then(|qp| qp.timer.take()) {
            self.timeline.cancel(t);
        }
    }

    /// Runs an action of the data path's timeline.
    pub(crate) fn verbs_action(&mut self, action: VerbsAction) {
        match action {
            VerbsAction::Deliver { from, to, packet } => self.deliver_data(from, to, packet),
            VerbsAction::QpTimer { qp } => {
                let Some(record) = self.verbs.qps.get_mut(&qp) else {
                    return;
                };
                record.timer = None;
                if record.timer_due > self.now {
                    let due = record.timer_due;
                    self.set_qp_timer(qp, due);
                    return;
                }
                self.drive_qp(qp, |m, _, out| m.on_timer(out));
            }
            VerbsAction::OrphanTimer { stream } => self.orphan_timer(stream),
            VerbsAction::DeliverDatagram {
                from,
                to,
                sgid,
                datagram,
            } => self.deliver_datagram(from, to, sgid, datagram),
        }
    }
}

/// Whether a message took a receive from `srq` (which held `posted` before the input) and
/// left fewer than its armed limit: rxe's `get_srq_wqe` then disarms the limit and raises
/// IBV_EVENT_SRQ_LIMIT_REACHED, once.
fn srq_limit_reached(srq: &mut super::Srq, posted: usize) -> bool {
    let left = srq.rq.len();
    let fired = srq.limit > 0 && left < posted && left < srq.limit as usize;
    if fired {
        srq.limit = 0;
    }
    fired
}
