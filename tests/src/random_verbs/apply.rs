//! Applying an [`Op`]: the object calls (PDs, regions, channels, CQs, QPs, address handles)
//! and the fabric's steps here; the posts and completions in `posts.rs`.

use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, QpAttr, QpAttrMask, QpInitAttrEx, QpState};
use cmtwin::{AhAttr, AsyncEvent, Call, CmBackend, Errno, PortSpace, QpType, Wait};

use super::op::{CapSpec, Op, Pick};
use super::{cap_of, AhRec, CqRec, Entry, Home, Model, MrRec, PdRec, QpRec, Validity};
use crate::SimBed;

/// The QP state of a choice (modulo 8; 7: none).
fn state_of(s: u8) -> Option<QpState> {
    crate::qp_modify::ALL_STATES
        .get(usize::from(s % 8))
        .copied()
}

/// A wait of `ms` milliseconds (0: non-blocking); never a blocking one.
fn wait_of(ms: u8) -> Wait {
    match ms {
        0 => Wait::NonBlocking,
        ms => Wait::Timeout(Duration::from_millis(u64::from(ms))),
    }
}

impl Model {
    /// Applies one op, checking each call's result.
    ///
    /// # Panics
    ///
    /// When a result breaks the contract (see the module documentation).
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::AllocPd { id } => self.alloc_pd(id),
            Op::DeallocPd { pd } => self.dealloc_pd(pd),
            Op::RegMr { pd, len, access } => self.reg_mr(pd, len, access),
            Op::RegHelper { id, kind, len } => self.reg_helper(id, kind, len),
            Op::DeregMr { mr } => self.dereg_mr(mr),
            Op::MrRead { mr, offset, len } => self.mr_access(mr, offset, len, None),
            Op::MrWrite {
                mr,
                offset,
                len,
                byte,
            } => self.mr_access(mr, offset, len, Some(byte)),
            Op::CreateCompChannel { id } => self.create_comp_channel(id),
            Op::DestroyCompChannel { ch } => self.destroy_comp_channel(ch),
            Op::CreateCq { id, cqe, channel } => self.create_cq(id, cqe, channel),
            Op::DestroyCq { cq } => self.destroy_cq(cq),
            Op::ReqNotifyCq { cq, solicited_only } => self.req_notify(cq, solicited_only),
            Op::GetCqEvent { ch, wait_ms } => self.get_cq_event(ch, wait_ms),
            Op::AckCqEvents { cq, count } => self.ack_cq_events(cq, count),
            Op::PollCq { cq, n } => {
                self.poll(cq, n);
            }
            Op::CreateQpEx {
                id,
                pd,
                send_cq,
                recv_cq,
                ud,
                cap,
                sq_sig_all,
            } => self.create_qp_ex(id, (pd, send_cq, recv_cq), ud, cap, sq_sig_all),
            Op::CreateExternalQp {
                server,
                pd,
                send_cq,
                recv_cq,
                cap,
                sq_sig_all,
            } => self.create_external_qp(server, (pd, send_cq, recv_cq), cap, sq_sig_all),
            Op::DestroyExternalQp { qp } => self.destroy_external_qp(qp),
            Op::DestroyQp { id } => self.destroy_qp(id),
            Op::InitQpAttr { id, state } => self.init_qp_attr(id, state),
            Op::ModifyQp {
                qp,
                state,
                attrs_of,
                timeout,
                retry,
                rnr,
            } => self.modify_qp(qp, state, attrs_of, [timeout, retry, rnr]),
            Op::Reconnect { qp, attrs_of } => {
                for state in [0, 1, 2, 3] {
                    self.modify_qp(qp, state, attrs_of & !1, [14, 3, 3]);
                }
            }
            Op::QueryQp { qp } => self.query_qp(qp),
            Op::CreateAh { pd, attr } => self.create_ah(pd, attr),
            Op::CreateAhFromWc { pd, garbage } => self.create_ah_from_wc(pd, garbage),
            Op::DestroyAh { ah } => self.destroy_ah(ah),
            Op::PostSend { .. }
            | Op::PostRecv { .. }
            | Op::Flood { .. }
            | Op::PostRecvMsg { .. }
            | Op::PostSendMsg { .. }
            | Op::PostUdSend { .. }
            | Op::PostRdma { .. }
            | Op::GetComp { .. } => self.apply_post(op),
            Op::PostAtomic { .. } => self.post_atomic(op),
            Op::ModifyQpAccess { qp, access } => self.modify_qp_access(qp, access),
            Op::GetAsyncEvent { server, wait_ms } => {
                let _ = self.get_async_event(server, wait_of(wait_ms));
            }
            Op::NewId { server } => self.new_id(server),
            Op::Disconnect { id } => self.disconnect(id),
            Op::DestroyId { id } => self.destroy_id(id),
            Op::RemoveDevice { server } => {
                let host = if server { "server" } else { "client" };
                self.bed
                    .fabric
                    .remove_device(host)
                    .expect("both hosts have a device");
            }
            Op::LosePackets { count } => {
                self.bed
                    .fabric
                    .drop_data_packets(u32::from(count % 8))
                    .expect("outside a run");
            }
            Op::Run { us, scale } => {
                let d = Duration::from_micros(u64::from(us) << (scale % 12));
                self.check(
                    &[Call::Sleep],
                    Validity::Live,
                    None,
                    self.cm(false).sleep(d),
                );
            }
        }
    }

    // ----- protection domains and regions ----------------------------------------------

    fn alloc_pd(&mut self, id: Pick) {
        let Some((server, _, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let id = self.ids[id.idx % self.ids.len()].v;
        let r = self.cm(server).alloc_pd(id);
        if let Some(pd) = self.check(&[Call::AllocPd], v, Some(Errno::ENOENT), r) {
            let rec = PdRec { pd, default: false };
            self.pds.push(live(Self::home(server), rec));
        }
    }

    /// Whether PD `pd` is in use: it is a device's default, or live regions, QPs or
    /// address handles are of it.
    fn pd_in_use(&self, pd: usize) -> bool {
        self.pds[pd].v.default
            || self.mrs.iter().any(|m| m.live && m.v.pd == pd)
            || self.qps.iter().any(|q| q.live && q.v.pd == pd)
            || self.ahs.iter().any(|a| a.live && a.v.pd == pd)
    }

    fn dealloc_pd(&mut self, pd: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.pds, pd) else {
            return;
        };
        let r = self.cm(server).dealloc_pd(self.pds[idx].v.pd);
        let busy = v == Validity::Live && self.pd_in_use(idx);
        let expect = busy.then_some(Errno::EBUSY);
        if self.expect_outcome(Call::DeallocPd, v, expect, r).is_some() {
            self.pds[idx].live = false;
        }
    }

    /// Checks a result whose outcome the model knows for a live handle: `expect` is the
    /// errno it must fail with, or `None` if it must succeed (a stale or foreign handle
    /// must fail with EBADF).
    fn expect_outcome<T>(
        &self,
        call: Call,
        v: Validity,
        expect: Option<Errno>,
        r: cmtwin::Result<T>,
    ) -> Option<T> {
        if v == Validity::Live {
            match (&r, expect) {
                (Ok(_), Some(errno)) => panic!("{call:?} succeeded; the model expects {errno:?}"),
                (Err(e), None) if e.errno != Errno::ENXIO => {
                    panic!("{call:?} failed; the model expects success: {e}")
                }
                (Err(e), Some(errno)) => assert_refused(e, errno),
                _ => {}
            }
        }
        self.check(&[call], v, Some(Errno::EBADF), r)
    }

    fn reg_mr(&mut self, pd: Pick, len: u16, access: u8) {
        let Some((server, idx, v)) = Self::pick(&self.pds, pd) else {
            return;
        };
        let len = usize::from(len % 1100);
        let access = AccessFlags(u32::from(access % 32));
        let fill: Vec<u8> = (0..len).map(|i| (i * 3 + self.mrs.len()) as u8).collect();
        let r = self
            .cm(server)
            .reg_mr(self.pds[idx].v.pd, fill.clone(), access);
        if len == 0 && v == Validity::Live {
            assert_refused(r.as_ref().expect_err("an empty region"), Errno::EINVAL);
        }
        if let Some(mr) = self.check(&[Call::RegMr], v, Some(Errno::EBADF), r) {
            let rec = MrRec {
                mr,
                pd: idx,
                shadow: fill,
            };
            self.mrs.push(live(Self::home(server), rec));
        }
    }

    fn reg_helper(&mut self, id: Pick, kind: u8, len: u16) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let cm = self.cm(server).clone();
        let id = self.ids[idx].v;
        let Some(pd) = self.check(&[Call::IdPd], v, Some(Errno::ENOENT), cm.pd(id)) else {
            return;
        };
        let home = Self::home(server);
        let pd_idx = match self
            .pds
            .iter()
            .position(|p| p.live && p.home == home && p.v.pd == pd)
        {
            Some(i) => i,
            None => {
                self.pds.push(live(home, PdRec { pd, default: true }));
                self.pds.len() - 1
            }
        };
        let fill = vec![0x3c; usize::from(len % 600)];
        let r = match kind % 3 {
            0 => cm.reg_msgs(id, fill.clone()),
            1 => cm.reg_read(id, fill.clone()),
            _ => cm.reg_write(id, fill.clone()),
        };
        if let Some(mr) = self.check(&[Call::IdPd, Call::RegMr], v, None, r) {
            let rec = MrRec {
                mr,
                pd: pd_idx,
                shadow: fill,
            };
            self.mrs.push(live(home, rec));
        }
    }

    fn dereg_mr(&mut self, mr: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.mrs, mr) else {
            return;
        };
        let r = self.cm(server).dereg_mr(self.mrs[idx].v.mr.handle);
        if let Some(buf) = self.check(&[Call::DeregMr], v, Some(Errno::EBADF), r) {
            assert_eq!(
                buf.len(),
                self.mrs[idx].v.shadow.len(),
                "the buffer handed back"
            );
            self.explain_changes(idx, &buf);
            self.mrs[idx].live = false;
        }
    }

    /// `mr_read` (`write` `None`) or `mr_write` of `len` bytes at `offset`.
    fn mr_access(&mut self, mr: Pick, offset: u16, len: u16, write: Option<u8>) {
        let Some((server, idx, v)) = Self::pick(&self.mrs, mr) else {
            return;
        };
        let (offset, len) = (usize::from(offset % 1200), usize::from(len % 600));
        let h = self.mrs[idx].v.mr.handle;
        let fits = offset + len <= self.mrs[idx].v.shadow.len();
        let (call, r) = match write {
            None => {
                let mut out = vec![0; len];
                (Call::MrRead, self.cm(server).mr_read(h, offset, &mut out))
            }
            Some(b) => (
                Call::MrWrite,
                self.cm(server).mr_write(h, offset, &vec![b; len]),
            ),
        };
        let expect = (!fits).then_some(Errno::EINVAL);
        if self.expect_outcome(call, v, expect, r).is_some() {
            if let Some(b) = write {
                self.mrs[idx].v.shadow[offset..offset + len].fill(b);
                self.app_wrote(idx, offset, len);
            }
        }
    }

    // ----- completion channels and CQs -------------------------------------------------

    fn create_comp_channel(&mut self, id: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let r = self.cm(server).create_comp_channel(self.ids[idx].v);
        let r = self.check(&[Call::CreateCompChannel], v, Some(Errno::ENOENT), r);
        if let Some(ch) = r {
            self.channels.push(live(Self::home(server), ch));
        }
    }

    fn destroy_comp_channel(&mut self, ch: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.channels, ch) else {
            return;
        };
        let r = self.cm(server).destroy_comp_channel(self.channels[idx].v);
        let busy = self.cqs.iter().any(|c| c.live && c.v.channel == Some(idx));
        let expect = busy.then_some(Errno::EBUSY);
        if self
            .expect_outcome(Call::DestroyCompChannel, v, expect, r)
            .is_some()
        {
            self.channels[idx].live = false;
        }
    }

    fn create_cq(&mut self, id: Pick, cqe: u32, channel: Option<usize>) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let channel = channel.map(|c| c % self.channels.len());
        let cv = channel.map_or(Validity::Live, |c| {
            Self::validity_on(&self.channels, c, server)
        });
        let handle = channel.map(|c| self.channels[c].v);
        let r = self.cm(server).create_cq(self.ids[idx].v, cqe, handle);
        // The simulated RoCE device's `max_cqe`, rxe's (`query_device`).
        const MAX_CQE: u32 = (1 << 15) - 1;
        if v.max(cv) == Validity::Live && (cqe == 0 || cqe > MAX_CQE) {
            assert_refused(
                r.as_ref().expect_err("a CQ of 0 or too many entries"),
                Errno::EINVAL,
            );
        }
        if let Some(cq) = self.check(&[Call::CreateCq], v.max(cv), None, r) {
            let rec = CqRec {
                cq,
                channel,
                unacked: 0,
                overrun: false,
            };
            self.cqs.push(live(Self::home(server), rec));
        }
    }

    fn destroy_cq(&mut self, cq: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.cqs, cq) else {
            return;
        };
        let r = self.cm(server).destroy_cq(self.cqs[idx].v.cq);
        let used = self
            .qps
            .iter()
            .any(|q| q.live && (q.v.send_cq == idx || q.v.recv_cq == idx));
        let busy = used || self.cqs[idx].v.unacked > 0;
        let expect = busy.then_some(Errno::EBUSY);
        if self.expect_outcome(Call::DestroyCq, v, expect, r).is_some() {
            self.cqs[idx].live = false;
        }
    }

    fn req_notify(&mut self, cq: Pick, solicited_only: bool) {
        let Some((server, idx, v)) = Self::pick(&self.cqs, cq) else {
            return;
        };
        let r = self
            .cm(server)
            .req_notify_cq(self.cqs[idx].v.cq, solicited_only);
        let expect = self.cqs[idx].v.channel.is_none().then_some(Errno::EINVAL);
        self.expect_outcome(Call::ReqNotifyCq, v, expect, r);
    }

    fn get_cq_event(&mut self, ch: Pick, wait_ms: u8) {
        let Some((server, idx, v)) = Self::pick(&self.channels, ch) else {
            return;
        };
        let r = self
            .cm(server)
            .get_cq_event(self.channels[idx].v, wait_of(wait_ms));
        let Some(cq) = self.check(&[Call::GetCqEvent], v, Some(Errno::EBADF), r) else {
            return;
        };
        let home = Self::home(server);
        let Some(rec) = self
            .cqs
            .iter_mut()
            .find(|c| c.live && c.home == home && c.v.cq == cq)
        else {
            panic!("a CQ event of {cq}, which is not a live CQ of this host");
        };
        assert_eq!(rec.v.channel, Some(idx), "{cq}'s event on another channel");
        rec.v.unacked += 1;
    }

    fn ack_cq_events(&mut self, cq: Pick, count: u8) {
        let Some((server, idx, v)) = Self::pick(&self.cqs, cq) else {
            return;
        };
        let count = u32::from(count % 4);
        let r = self.cm(server).ack_cq_events(self.cqs[idx].v.cq, count);
        let expect = (count > self.cqs[idx].v.unacked).then_some(Errno::EINVAL);
        if self
            .expect_outcome(Call::AckCqEvents, v, expect, r)
            .is_some()
        {
            self.cqs[idx].v.unacked -= count;
        }
    }

    // ----- QPs and address handles -------------------------------------------------------

    /// The worst validity of the PD and CQs `objs` (indices modulo the pools) on host
    /// `server`, and the indices.
    fn qp_objects(&self, server: bool, objs: (usize, usize, usize)) -> (Validity, [usize; 3]) {
        let pd = objs.0 % self.pds.len();
        let (s, r) = (objs.1 % self.cqs.len(), objs.2 % self.cqs.len());
        let v = Self::validity_on(&self.pds, pd, server)
            .max(Self::validity_on(&self.cqs, s, server))
            .max(Self::validity_on(&self.cqs, r, server));
        (v, [pd, s, r])
    }

    /// The attributes of a QP of the objects `idx` and `cap`.
    fn init_attr(&self, [pd, s, r]: [usize; 3], ud: bool, cap: CapSpec, sig: bool) -> QpInitAttrEx {
        let mut attr = QpInitAttrEx::rc(self.pds[pd].v.pd, self.cqs[s].v.cq, self.cqs[r].v.cq);
        attr.cap = cap_of(cap);
        attr.sq_sig_all = sig;
        if ud {
            attr.qp_type = QpType::Ud;
        }
        attr
    }

    fn create_qp_ex(
        &mut self,
        id: Pick,
        objs: (usize, usize, usize),
        ud: bool,
        cap: CapSpec,
        sq_sig_all: bool,
    ) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let (ov, [pd, s, r]) = self.qp_objects(server, objs);
        let attr = self.init_attr([pd, s, r], ud, cap, sq_sig_all);
        let cm = self.cm(server).clone();
        let result = cm.create_qp_ex(self.ids[idx].v, &attr);
        let Some(qpn) = self.check(&[Call::CreateQpEx], v.max(ov), None, result) else {
            return;
        };
        let qp = cm
            .qp(self.ids[idx].v)
            .expect("a live id")
            .expect("the QP just made");
        let rec = QpRec {
            qp,
            qpn,
            pd,
            send_cq: s,
            recv_cq: r,
            ud,
            id: Some(idx),
            sq_sig_all,
            timed: false,
            wedged: false,
        };
        self.qps.push(live(Self::home(server), rec));
    }

    fn create_external_qp(
        &mut self,
        server: bool,
        objs: (usize, usize, usize),
        cap: CapSpec,
        sq_sig_all: bool,
    ) {
        let (v, [pd, s, r]) = self.qp_objects(server, objs);
        let attr = self.init_attr([pd, s, r], false, cap, sq_sig_all);
        let cm = self.cm(server).clone();
        let result = cm.create_external_qp(&attr);
        let Some(qp) = self.check(&[Call::CreateExternalQp], v, None, result) else {
            return;
        };
        let qpn = cm.qp_number(qp).expect("the QP just made");
        let rec = QpRec {
            qp,
            qpn,
            pd,
            send_cq: s,
            recv_cq: r,
            ud: false,
            id: None,
            sq_sig_all,
            timed: false,
            wedged: false,
        };
        self.qps.push(live(Self::home(server), rec));
    }

    fn destroy_external_qp(&mut self, qp: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return;
        };
        let r = self.cm(server).destroy_external_qp(self.qps[idx].v.qp);
        let expect = self.qps[idx].v.id.is_some().then_some(Errno::EINVAL);
        if self
            .expect_outcome(Call::DestroyExternalQp, v, expect, r)
            .is_some()
        {
            self.qps[idx].live = false;
            self.discard_work_of(idx);
        }
    }

    /// The live QP of id `id`, if the model knows one.
    pub(super) fn qp_of_id(&self, id: usize) -> Option<usize> {
        self.qps.iter().position(|q| q.live && q.v.id == Some(id))
    }

    /// Id `id`'s QP is gone (with the id, or by `rdma_destroy_qp`).
    fn forget_qp_of(&mut self, id: usize) {
        if let Some(q) = self.qp_of_id(id) {
            self.qps[q].live = false;
            self.discard_work_of(q);
        }
    }

    fn destroy_qp(&mut self, id: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let r = self.cm(server).destroy_qp(self.ids[idx].v);
        if r.is_ok() {
            assert_eq!(v, Validity::Live, "rdma_destroy_qp of a dead or foreign id");
            self.forget_qp_of(idx);
        }
    }

    fn init_qp_attr(&mut self, id: Pick, state: u8) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let Some(state) = state_of(state) else {
            return;
        };
        let r = self.cm(server).init_qp_attr(self.ids[idx].v, state);
        self.check(&[Call::InitQpAttr], v, Some(Errno::ENOENT), r);
    }

    fn modify_qp(&mut self, qp: Pick, state: u8, attrs_of: usize, [timeout, retry, rnr]: [u8; 3]) {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return;
        };
        let cm = self.cm(server).clone();
        let to = state_of(state);
        let own = self.qps[idx].v.id.filter(|_| attrs_of % 2 == 0);
        let id = &self.ids[own.unwrap_or(attrs_of / 2 % self.ids.len())];
        let mut attr = match to {
            Some(s) if id.live && id.home == Self::home(server) => {
                cm.init_qp_attr(id.v, s).unwrap_or_default()
            }
            _ => QpAttr::default(),
        };
        attr.qp_state = to;
        if to == Some(QpState::Rts) {
            attr.timeout = timeout % 24;
            attr.retry_cnt = retry % 8;
            // 7 retries without limit: the blocking helpers would never end.
            attr.rnr_retry = rnr % 7;
        }
        let r = cm.modify_qp(self.qps[idx].v.qp, &attr);
        if self
            .check(&[Call::ModifyQp], v, Some(Errno::EBADF), r)
            .is_none()
        {
            return;
        }
        if let Some(s @ (QpState::Reset | QpState::Error)) = to {
            let now = cm.query_qp_state(self.qps[idx].v.qp);
            assert_eq!(now.ok(), Some(s), "the QP's state after modify_qp to {s:?}");
        }
        match to {
            Some(QpState::Reset) => self.discard_work_of(idx),
            Some(QpState::Rts) => {
                self.qps[idx].v.timed = attr.timeout != 0;
                self.psns_restarted = true;
            }
            Some(QpState::Rtr) => self.psns_restarted = true,
            _ => {}
        }
    }

    /// `ibv_modify_qp` of the access flags alone (`access` modulo 16).
    fn modify_qp_access(&mut self, qp: Pick, access: u8) {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return;
        };
        let attr = QpAttr {
            access: AccessFlags(u32::from(access % 16)),
            ..QpAttr::default()
        };
        let mask = QpAttrMask::ACCESS_FLAGS;
        let r = self
            .cm(server)
            .modify_qp_with_mask(self.qps[idx].v.qp, &attr, mask);
        self.check(&[Call::ModifyQp], v, Some(Errno::EBADF), r);
    }

    fn query_qp(&mut self, qp: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.qps, qp) else {
            return;
        };
        let r = self.cm(server).query_qp_state(self.qps[idx].v.qp);
        self.check(&[Call::QueryQp], v, Some(Errno::EBADF), r);
    }

    fn create_ah(&mut self, pd: Pick, attr: u8) {
        let Some((server, idx, v)) = Self::pick(&self.pds, pd) else {
            return;
        };
        let attr = match attr % 4 {
            0 => self.to_server,
            1 => AhAttr::default(),
            2 => AhAttr {
                port_num: 9,
                ..self.to_server
            },
            _ => {
                let mut a = self.to_server;
                a.grh.dgid[15] ^= 0x40;
                a
            }
        };
        let r = self.cm(server).create_ah(self.pds[idx].v.pd, &attr);
        if let Some(ah) = self.check(&[Call::CreateAh], v, Some(Errno::EBADF), r) {
            self.ahs
                .push(live(Self::home(server), AhRec { ah, pd: idx }));
        }
    }

    fn create_ah_from_wc(&mut self, pd: Pick, garbage: bool) {
        let Some((_, wc, grh)) = self.last_ud_recv else {
            return;
        };
        let Some((server, idx, v)) = Self::pick(&self.pds, pd) else {
            return;
        };
        let grh = if garbage { [0x77; 40] } else { grh };
        let r = self
            .cm(server)
            .create_ah_from_wc(self.pds[idx].v.pd, &wc, &grh);
        if let Some(ah) = self.check(&[Call::CreateAhFromWc], v, Some(Errno::EBADF), r) {
            self.ahs
                .push(live(Self::home(server), AhRec { ah, pd: idx }));
        }
    }

    fn destroy_ah(&mut self, ah: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.ahs, ah) else {
            return;
        };
        let r = self.cm(server).destroy_ah(self.ahs[idx].v.ah);
        if self.expect_outcome(Call::DestroyAh, v, None, r).is_some() {
            self.ahs[idx].live = false;
        }
    }

    // ----- asynchronous events and the CM ------------------------------------------------

    /// Fetches one asynchronous event of host `server`; a CQ_ERR marks its CQ overrun.
    pub(super) fn get_async_event(&mut self, server: bool, wait: Wait) -> bool {
        let r = self.cm(server).get_async_event(wait);
        let Some(ev) = self.check(&[Call::GetAsyncEvent], Validity::Live, None, r) else {
            return false;
        };
        if self.verbose {
            eprintln!("    async event {ev:?}");
        }
        if ev.kind == AsyncEvent::CQ_ERR {
            let home = Self::home(server);
            let cq = ev.cq.expect("a CQ_ERR names its CQ");
            // The CQ may have been destroyed since (the event was queued before).
            let rec = self
                .cqs
                .iter_mut()
                .find(|c| c.home == home && c.v.cq == cq)
                .expect("a CQ_ERR of a CQ of the host");
            rec.v.overrun = true;
        }
        true
    }

    fn new_id(&mut self, server: bool) {
        let cm = self.cm(server).clone();
        let Ok(id) = cm.create_id(None, 0, PortSpace::TCP) else {
            return;
        };
        let ip = if server {
            SimBed::SERVER_IP
        } else {
            SimBed::CLIENT_IP
        };
        let _ = cm.bind_addr(id, std::net::SocketAddr::new(ip, 0));
        self.ids.push(live(Self::home(server), id));
    }

    fn disconnect(&mut self, id: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        let r = self.cm(server).disconnect(self.ids[idx].v);
        assert!(
            r.is_err() || v == Validity::Live,
            "rdma_disconnect of a dead or foreign id"
        );
    }

    fn destroy_id(&mut self, id: Pick) {
        let Some((server, idx, v)) = Self::pick(&self.ids, id) else {
            return;
        };
        if self.cm(server).destroy_id(self.ids[idx].v).is_ok() {
            assert_eq!(v, Validity::Live, "rdma_destroy_id of a dead or foreign id");
            self.ids[idx].live = false;
            self.forget_qp_of(idx);
        }
    }
}

/// `e` is `errno`, or ENXIO (a removed device answers that first).
fn assert_refused(e: &cmtwin::CmError, errno: Errno) {
    assert!(
        e.errno == errno || e.errno == Errno::ENXIO,
        "the model expects {errno:?}: {e}"
    );
}

/// A live entry of `home`.
fn live<T>(home: Home, v: T) -> Entry<T> {
    Entry {
        home,
        live: true,
        v,
    }
}
