//! Applying the ops that post work or take completions: `ibv_post_send`, `ibv_post_recv`,
//! floods of requests, librdmacm's post helpers and `rdma_get_send_comp`/`recv_comp`, and
//! `ibv_poll_cq`.

use cmtwin::verbs::{
    DataPath, MemoryRegion, Payload, QpState, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest,
    WcOpcode, WorkCompletion, MULTICAST_QPN,
};
use cmtwin::{Call, Errno};

use super::op::{Op, Pick, RemoteSpec, SgeSpec, UdSpec};
use super::{Model, Validity, Wr};

/// Entries of a request beyond this many are not built (the device's maximum is 32).
pub(super) const MAX_SGES: usize = 40;

/// What the rdma_verbs.h helpers are posted with: signaled, as the helpers were before they
/// took C's flags, so that the recorded runs keep their completions.
const SIGNALED: SendFlags = SendFlags::SIGNALED;

/// The flags of a helper send, solicited or not.
fn helper_flags(solicited: bool) -> SendFlags {
    match solicited {
        true => SendFlags::SIGNALED | SendFlags::SOLICITED,
        false => SendFlags::SIGNALED,
    }
}

/// The completion opcode of a successful send-queue request of `op`.
fn opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
        SendOp::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
    }
}

impl Model {
    /// Applies a post or completion op.
    pub(super) fn apply_post(&mut self, op: &Op) {
        match op {
            Op::PostSend {
                qp,
                op,
                sges,
                inline,
                remote,
                ud,
                signaled,
                solicited,
            } => {
                let q = qp.idx % self.qps.len();
                let sges: Vec<Sge> = sges.iter().take(MAX_SGES).map(|s| self.sge(s, q)).collect();
                let inline = inline.map(|n| vec![0xa5; usize::from(n % 320)]);
                let payload = match &inline {
                    Some(bytes) => Payload::Inline(bytes),
                    None => Payload::Sges(&sges),
                };
                let (addr, rkey) = self.remote(remote, q);
                let imm = self.next_wr as u32;
                let op = match op % 5 {
                    0 => SendOp::Send,
                    1 => SendOp::SendWithImm(imm),
                    2 => SendOp::RdmaWrite {
                        remote_addr: addr,
                        rkey,
                    },
                    3 => SendOp::RdmaWriteWithImm {
                        remote_addr: addr,
                        rkey,
                        imm,
                    },
                    _ => SendOp::RdmaRead {
                        remote_addr: addr,
                        rkey,
                    },
                };
                let shape = |wr: &mut SendWr<'_>| {
                    wr.signaled = *signaled;
                    wr.solicited = *solicited;
                };
                self.post_send(*qp, op, payload, *ud, shape);
            }
            Op::PostRecv { qp, sges } => {
                let q = qp.idx % self.qps.len();
                let sges: Vec<Sge> = sges.iter().take(MAX_SGES).map(|s| self.sge(s, q)).collect();
                self.post_recv(*qp, &sges);
            }
            Op::Flood { qp, count, recv } => self.flood(*qp, *count, *recv),
            Op::PostRecvMsg {
                id,
                mr,
                offset,
                len,
            } => self.post_helper(*id, *mr, (*offset, *len), Helper::Recv),
            Op::PostSendMsg {
                id,
                mr,
                offset,
                len,
                solicited,
            } => self.post_helper(*id, *mr, (*offset, *len), Helper::Send(*solicited)),
            Op::PostUdSend {
                id,
                mr,
                offset,
                len,
                ud,
            } => self.post_helper(*id, *mr, (*offset, *len), Helper::Ud(*ud)),
            Op::PostRdma {
                id,
                write,
                mr,
                offset,
                len,
                remote,
            } => {
                let how = if *write {
                    Helper::Write(*remote)
                } else {
                    Helper::Read(*remote)
                };
                self.post_helper(*id, *mr, (*offset, *len), how);
            }
            Op::GetComp { id, send } => self.get_comp(*id, *send),
            _ => unreachable!("not a post"),
        }
    }

    /// The region of choice `choice` for QP `qp`: three times in four a live one of its PD
    /// (`local`) or of the other host (else), if there is one; else any of the pool.
    fn region_for(&self, choice: usize, qp: usize, local: bool) -> &cmtwin::verbs::MemoryRegion {
        let rec = &self.qps[qp];
        if choice % 4 != 0 {
            let fits = |m: &&super::Entry<super::MrRec>| {
                m.live
                    && match local {
                        true => m.v.pd == rec.v.pd,
                        false => m.home != rec.home && m.home != super::Home::Foreign,
                    }
            };
            let n = self.mrs.iter().filter(fits).count();
            if n > 0 {
                let m = self.mrs.iter().filter(fits).nth(choice / 4 % n);
                return &m.expect("counted").v.mr;
            }
        }
        &self.mrs[choice % self.mrs.len()].v.mr
    }

    /// The entry `s` describes, for a request of QP `qp`.
    pub(super) fn sge(&self, s: &SgeSpec, qp: usize) -> Sge {
        let mr = self.region_for(s.mr, qp, true);
        Sge {
            addr: mr.addr.wrapping_add(u64::from(s.offset)).wrapping_sub(4),
            length: s.len,
            lkey: key_of(mr.lkey, s.key),
        }
    }

    /// The remote address and key `r` describes, for a request of QP `qp`.
    pub(super) fn remote(&self, r: &RemoteSpec, qp: usize) -> (u64, u32) {
        let mr = self.region_for(r.mr, qp, false);
        let addr = mr.addr.wrapping_add(u64::from(r.offset)).wrapping_sub(4);
        (addr, key_of(mr.rkey, r.key))
    }

    /// The UD destination `u` describes for a send from QP `qp` (index).
    fn ud_dest(&self, u: &UdSpec, qp: usize) -> UdDest {
        let rec = &self.qps[qp];
        let server = rec.home == super::Home::Server;
        let remote_qpn = match u.qpn % 4 {
            0 => self.ud_qpn[usize::from(server)],
            1 => MULTICAST_QPN,
            2 => 0x123,
            _ => rec.v.qpn,
        };
        UdDest {
            ah: self.ahs[u.ah % self.ahs.len()].v.ah,
            remote_qpn,
            remote_qkey: if u.right_qkey { self.ud_qkey } else { 0 },
        }
    }

    /// Posts a send-queue request of `op` over `payload` on QP `qp` (shaped by `shape`, with
    /// a UD destination from `ud`), and records it if taken.
    pub(super) fn post_send(
        &mut self,
        qp: Pick,
        op: SendOp,
        payload: Payload<'_>,
        ud: Option<UdSpec>,
        shape: impl FnOnce(&mut SendWr<'_>),
    ) -> bool {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return false;
        };
        let wr_id = self.fresh_wr();
        let mut wr = SendWr::new(wr_id, op, payload);
        shape(&mut wr);
        wr.ud = ud.map(|u| self.ud_dest(&u, idx));
        let cm = self.cm(server).clone();
        let before = cm.query_qp_state(self.qps[idx].v.qp).ok();
        let r = cm.post_send(self.qps[idx].v.qp, &wr);
        let kept = self.kept_though_refused(idx, v, before, &r);
        if self
            .check(&[Call::PostSend], v, Some(Errno::EBADF), r)
            .is_none()
        {
            if kept {
                self.record_send(server, idx, &wr);
                self.wrs.get_mut(&wr_id).expect("just recorded").discarded = true;
            }
            return false;
        }
        self.record_send(server, idx, &wr);
        true
    }

    /// Whether a send-queue post on QP `idx` (validity `v`, in state `before` just before
    /// it) that ended `r` left its request in the queue though it failed: a post before RTS
    /// (EINVAL on rxe, the request going with the next post that succeeds; ENOTCONN on siw,
    /// whose send queue is then wedged for good). Such a request may complete later, or
    /// never: it is recorded as discarded. A post in INIT or RTR that succeeds fails the run.
    fn kept_though_refused<T>(
        &mut self,
        idx: usize,
        v: Validity,
        before: Option<QpState>,
        r: &cmtwin::Result<T>,
    ) -> bool {
        let early = matches!(before, Some(QpState::Init | QpState::Rtr));
        let Err(e) = r else {
            // rxe and siw (and so the simulator) refuse every send-queue post before RTS.
            assert!(
                v != Validity::Live || !early,
                "a send-queue post on a QP in {before:?} succeeded"
            );
            return false;
        };
        if v != Validity::Live {
            return false;
        }
        match e.errno {
            Errno::ENOTCONN => {
                self.qps[idx].v.wedged = true;
                true
            }
            Errno::EINVAL => matches!(before, Some(QpState::Init | QpState::Rtr)),
            _ => false,
        }
    }

    /// Records send-queue request `wr`, taken by QP `idx` of host `server`, and where it may
    /// place bytes.
    fn record_send(&mut self, server: bool, idx: usize, wr: &SendWr<'_>) {
        let len = match wr.payload {
            Payload::Inline(bytes) => bytes.len() as u64,
            Payload::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
        };
        match (wr.op, wr.payload) {
            (SendOp::RdmaRead { .. }, Payload::Sges(sges)) => {
                for s in sges {
                    self.may_write(wr.wr_id, s);
                }
            }
            (
                SendOp::RdmaWrite { remote_addr, rkey }
                | SendOp::RdmaWriteWithImm {
                    remote_addr, rkey, ..
                },
                _,
            ) => self.may_write_remote(wr.wr_id, rkey, remote_addr, len),
            _ => {}
        }
        let w = Wr {
            server,
            qp: idx,
            recv: false,
            signaled: wr.signaled || self.qps[idx].v.sq_sig_all,
            len,
            opcode: Some(opcode_of(&wr.op)),
            discarded: self.qps[idx].v.wedged,
            grh_at: None,
            atomic: None,
        };
        self.posted(wr.wr_id, w);
    }

    /// Posts a receive over `sges` on QP `qp`, and records it if taken.
    fn post_recv(&mut self, qp: Pick, sges: &[Sge]) -> bool {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return false;
        };
        let wr_id = self.fresh_wr();
        let wr = RecvWr {
            wr_id,
            sg_list: sges,
        };
        let r = self.cm(server).post_recv(self.qps[idx].v.qp, &wr);
        if self
            .check(&[Call::PostRecv], v, Some(Errno::EBADF), r)
            .is_none()
        {
            return false;
        }
        self.record_recv(server, idx, wr_id, sges);
        true
    }

    /// Records receive `wr_id` over `sges`, taken by QP `idx` of host `server`.
    fn record_recv(&mut self, server: bool, idx: usize, wr_id: u64, sges: &[Sge]) {
        for s in sges {
            self.may_write(wr_id, s);
        }
        let grh_at = sges.first().and_then(|s| self.region_at(s));
        let w = Wr {
            server,
            qp: idx,
            recv: true,
            signaled: true,
            len: sges.iter().map(|s| u64::from(s.length)).sum(),
            opcode: None,
            discarded: false,
            grh_at,
            atomic: None,
        };
        self.posted(wr_id, w);
    }

    /// The live region of the bed holding the route header an entry `s` would receive: its
    /// index and the offset.
    fn region_at(&self, s: &Sge) -> Option<(usize, usize)> {
        self.mrs
            .iter()
            .position(|m| {
                let mr = &m.v.mr;
                m.live
                    && m.home != super::Home::Foreign
                    && mr.lkey == s.lkey
                    && s.addr >= mr.addr
                    && s.addr - mr.addr + 40 <= mr.length as u64
            })
            .map(|i| (i, (s.addr - self.mrs[i].v.mr.addr) as usize))
    }

    /// Up to `count` (modulo 40) one-byte inline sends (UD ones through the first address
    /// handle to the peer), or receives of no bytes, until one is refused.
    fn flood(&mut self, qp: Pick, count: u8, recv: bool) {
        for i in 0..count % 40 {
            let taken = if recv {
                self.post_recv(qp, &[])
            } else {
                let ud = (!self.qps.is_empty() && self.qps[qp.idx % self.qps.len()].v.ud)
                    .then_some(UdSpec {
                        ah: 0,
                        qpn: 0,
                        right_qkey: true,
                    });
                let byte = [i];
                self.post_send(qp, SendOp::Send, Payload::Inline(&byte), ud, |_| {})
            };
            if !taken {
                return;
            }
        }
    }

    /// One of librdmacm's post helpers on id `id` over `len` bytes of region `mr` (any of
    /// the pool) from `offset`.
    fn post_helper(&mut self, id: Pick, mr: usize, (offset, len): (u16, u16), how: Helper) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let qp = self.qp_of_id(idx).unwrap_or(0);
        let region: MemoryRegion = *self.region_for(mr, qp, true);
        let (offset, len) = (usize::from(offset % 1200), u32::from(len % 1100));
        let wr_id = self.fresh_wr();
        let cm = self.cm(server).clone();
        let h = self.ids[idx].v;
        let before = match self.qp_of_id(idx) {
            Some(q) => cm.query_qp_state(self.qps[q].v.qp).ok(),
            None => None,
        };
        let (call, r) = match how {
            Helper::Recv => (
                Call::PostRecv,
                cm.post_recv_msg(h, wr_id, &region, offset, len),
            ),
            Helper::Send(solicited) => (
                Call::PostSend,
                cm.post_send_msg(h, wr_id, &region, offset, len, helper_flags(solicited)),
            ),
            Helper::Ud(u) => {
                let dest = self.ud_dest(&u, qp);
                let (ah, qpn) = (dest.ah, dest.remote_qpn);
                let r = cm.post_ud_send(h, wr_id, &region, offset, len, SIGNALED, ah, qpn);
                (Call::PostSend, r)
            }
            Helper::Read(remote) => {
                let (addr, rkey) = self.remote(&remote, qp);
                let r = cm.post_read(h, wr_id, &region, offset, len, SIGNALED, addr, rkey);
                (Call::PostSend, r)
            }
            Helper::Write(remote) => {
                let (addr, rkey) = self.remote(&remote, qp);
                let r = cm.post_write(h, wr_id, &region, offset, len, SIGNALED, addr, rkey);
                (Call::PostSend, r)
            }
        };
        let kept = match (how, self.qp_of_id(idx)) {
            (Helper::Recv, _) | (_, None) => false,
            (_, Some(q)) => self.kept_though_refused(q, v, before, &r),
        };
        if self.check(&[call], v, Some(Errno::ENOENT), r).is_none() && !kept {
            return;
        }
        let qp = self
            .qp_of_id(idx)
            .expect("a helper posted on an id the model knows no QP of");
        let sge = region.sge(offset, len);
        let op = match how {
            Helper::Recv => return self.record_recv(server, qp, wr_id, &[sge]),
            Helper::Send(_) | Helper::Ud(_) => SendOp::Send,
            Helper::Read(remote) => {
                let (remote_addr, rkey) = self.remote(&remote, qp);
                SendOp::RdmaRead { remote_addr, rkey }
            }
            Helper::Write(remote) => {
                let (remote_addr, rkey) = self.remote(&remote, qp);
                SendOp::RdmaWrite { remote_addr, rkey }
            }
        };
        let sges = [sge];
        let wr = SendWr::new(wr_id, op, Payload::Sges(&sges));
        self.record_send(server, qp, &wr);
        if kept {
            self.wrs.get_mut(&wr_id).expect("just recorded").discarded = true;
        }
    }

    /// `rdma_get_send_comp` or `rdma_get_recv_comp` on id `id`, only when the model knows
    /// signaled work outstanding on the CQ (they block).
    fn get_comp(&mut self, id: Pick, send: bool) {
        let Some((server, idx, Validity::Live)) = Self::pick(&self.ids, id) else {
            return;
        };
        let Some(qp) = self.qp_of_id(idx) else {
            return;
        };
        let rec = self.qps[qp].v;
        let cq = if send { rec.send_cq } else { rec.recv_cq };
        let waiting = self.wrs.values().any(|w| {
            let wq = self.qps[w.qp].v;
            let wcq = if w.recv { wq.recv_cq } else { wq.send_cq };
            wcq == cq && w.signaled && !w.discarded
        });
        if !waiting || self.cqs[cq].v.channel.is_none() {
            return;
        }
        let cm = self.cm(server).clone();
        let h = self.ids[idx].v;
        let r = if send {
            cm.get_send_comp(h)
        } else {
            cm.get_recv_comp(h)
        };
        let calls = [
            Call::PollCq,
            Call::ReqNotifyCq,
            Call::GetCqEvent,
            Call::AckCqEvents,
        ];
        if let Some(wc) = self.check(&calls, Validity::Live, None, r) {
            self.completed(server, cq, &wc);
        }
    }

    /// `ibv_poll_cq` for up to `n` (modulo 9) completions.
    pub(super) fn poll(&mut self, cq: Pick, n: u8) -> usize {
        let Some((server, idx, v)) = Self::pick(&self.cqs, cq) else {
            return 0;
        };
        let mut wc = vec![WorkCompletion::default(); usize::from(n % 9)];
        let r = self.cm(server).poll_cq(self.cqs[idx].v.cq, &mut wc);
        let Some(got) = self.check(&[Call::PollCq], v, Some(Errno::EBADF), r) else {
            return 0;
        };
        assert!(
            got <= wc.len(),
            "poll_cq returned {got} of {} slots",
            wc.len()
        );
        for c in &wc[..got] {
            self.completed(server, idx, c);
        }
        got
    }
}

/// Which post helper.
#[derive(Clone, Copy)]
enum Helper {
    Recv,
    Send(bool),
    Ud(UdSpec),
    Read(RemoteSpec),
    Write(RemoteSpec),
}

/// The key of choice `choice` for a region of key `key` (see [`SgeSpec::key`]).
pub(super) fn key_of(key: u32, choice: u8) -> u32 {
    match choice % 8 {
        0..=5 => key,
        6 => key.wrapping_add(1),
        _ => 0xdead_beef,
    }
}
