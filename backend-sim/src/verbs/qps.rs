//! QPs on ids: creation (with chosen CQs, or with CQs made for them as librdmacm makes
//! them), the transitions the CM drives, posts, and carrying out the RC machine's outputs.

use std::sync::Arc;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, Payload, QpCqs, QpInitAttrEx, QpState, RecvWr, SendOp, SendWr, Sge, WcStatus,
};
use cmtwin::{
    AsyncEvent, Call, CmError, CompChannelHandle, Errno, IdHandle, QpCap, QpHandle, QpInitAttr,
    Result,
};

use super::rc::{Memory, PostError, QpOutput, Queue, RecvEntry, SendEntry, SendKind, Sges};
use super::{Mr, ObjKey, Qp, RcQp, Verbs, VerbsAction, VerbsAsyncEvent};
use crate::engine::timeline::SimTime;
use crate::store::Store;
use crate::world::{Action, DevKey, HostKey, IdKey, World};

/// The most requests per queue, entries per request and inline bytes of a simulated QP.
const MAX_QP_WR: u32 = 16384;
const MAX_SGE: u32 = 32;
const MAX_INLINE: u32 = 256;

/// What `min_rnr_timer` 0 means (IB's encoding): 655.36 ms. The kernel's CM programs 0 into
/// the RTR attributes of every QP it connects (CM-SEMANTICS.md §2).
pub(crate) const MIN_RNR_TIMER_0: Duration = Duration::from_micros(655_360);

/// The regions of one device and PD, as an RC machine reaches them.
struct RegionMemory<'a> {
    mrs: &'a mut Store<Mr>,
    by_key: &'a std::collections::BTreeMap<(DevKey, u32), ObjKey>,
    dev: DevKey,
    pd: ObjKey,
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
        for s in sges {
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
}

impl World {
    // ----- creation and destruction ------------------------------------------------------

    /// A QP number not in use on `host` (drawn from the numbers stream).
    pub(crate) fn draw_qp_number(&mut self, host: HostKey) -> u32 {
        loop {
            let qpn = self.rng.range(crate::rng::Stream::Numbers, 0x10, 0xFF_FFFE) as u32;
            if !self.verbs.qp_by_num.contains_key(&(host, qpn)) {
                return qpn;
            }
        }
    }

    /// The default PD of device `dev` of `host`, made when first needed.
    pub(crate) fn default_pd(&mut self, host: HostKey, dev: DevKey) -> ObjKey {
        if let Some(&pd) = self.verbs.default_pd.get(&dev) {
            return pd;
        }
        let pd = self.new_pd(host, dev);
        // Held by the device itself: never deallocated by the application.
        self.verbs.pds.get_mut(&pd).expect("new PD").users += 1;
        self.verbs.default_pd.insert(dev, pd);
        pd
    }

    /// `id->pd`: the PD of the id's QP, else its device's default.
    pub(crate) fn id_pd(&mut self, host: HostKey, h: IdHandle) -> Result<cmtwin::PdHandle> {
        let (key, dev) = self.id_device(host, Call::IdPd, h)?;
        let pd = match self.verbs.qp_of_id.get(&key) {
            Some(q) => self.verbs.qps[q].pd,
            None => self.default_pd(host, dev),
        };
        Ok(cmtwin::PdHandle::from_raw(self.stamp(pd)))
    }

    /// Gives id `id` the verbs QP `qpn` of `rdma_create_qp` without PD and CQs: librdmacm
    /// takes the device's default PD and makes a send and a receive CQ, each with its own
    /// completion channel, sized by the capacities.
    pub(crate) fn attach_qp(&mut self, id: IdKey, qpn: u32, attr: &QpInitAttr) {
        let (host, dev) = (
            self.id(id).host,
            self.id(id).device.expect("checked by create_qp"),
        );
        let pd = self.default_pd(host, dev);
        let send_channel = self.new_comp_channel(host, dev);
        let recv_channel = self.new_comp_channel(host, dev);
        let cap = attr.cap;
        let send_cq = self.new_cq(host, dev, cap.max_send_wr.max(1), Some(send_channel), true);
        let recv_cq = self.new_cq(host, dev, cap.max_recv_wr.max(1), Some(recv_channel), true);
        let mut machine = RcQp::new(qpn, cap, attr.sq_sig_all);
        let ud = !attr.qp_type.is_connected();
        if ud {
            machine.ready_unconnected();
        }
        let where_ = (host, dev, Some(id));
        self.insert_qp(where_, pd, (send_cq, recv_cq), true, ud, machine);
    }

    /// Records QP `machine` of host, device and id `where_` and counts its users of the PD
    /// and CQs; its key.
    pub(crate) fn insert_qp(
        &mut self,
        where_: (HostKey, DevKey, Option<IdKey>),
        pd: ObjKey,
        (send_cq, recv_cq): (ObjKey, ObjKey),
        implicit: bool,
        ud: bool,
        machine: RcQp,
    ) -> ObjKey {
        let (host, dev, id) = where_;
        self.verbs.pds.get_mut(&pd).expect("live PD").users += 1;
        for cq in [send_cq, recv_cq] {
            self.verbs.cqs.get_mut(&cq).expect("live CQ").users += 1;
        }
        let key = self.verbs.fresh();
        let qpn = machine.qpn();
        let qp = Qp {
            host,
            dev,
            id,
            qpn,
            ud,
            pd,
            send_cq,
            recv_cq,
            implicit,
            peer: None,
            timer: None,
            timer_due: SimTime(0),
            machine,
        };
        self.verbs.qps.insert(key, qp);
        self.verbs.qp_by_num.insert((host, qpn), key);
        if let Some(id) = id {
            self.verbs.qp_of_id.insert(id, key);
        }
        key
    }

    /// The live PD and CQs of `attr`, all on one device: that device.
    pub(crate) fn qp_objects(
        &self,
        host: HostKey,
        call: Call,
        attr: &QpInitAttrEx,
    ) -> Result<(DevKey, ObjKey, (ObjKey, ObjKey))> {
        let pd = self.pd_key(host, call, attr.pd)?;
        let send_cq = self.cq_key(host, call, attr.send_cq)?;
        let recv_cq = self.cq_key(host, call, attr.recv_cq)?;
        let dev = self.verbs.pds[&pd].dev;
        if self.verbs.cqs[&send_cq].dev != dev || self.verbs.cqs[&recv_cq].dev != dev {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the CQs are on another device than the PD",
            ));
        }
        check_cap(call, &attr.cap)?;
        Ok((dev, pd, (send_cq, recv_cq)))
    }

    /// `rdma_create_qp_ex`: a QP with chosen PD and CQs.
    pub(crate) fn create_qp_ex(
        &mut self,
        host: HostKey,
        h: IdHandle,
        attr: &QpInitAttrEx,
    ) -> Result<u32> {
        let call = Call::CreateQpEx;
        let (key, dev) = self.id_device(host, call, h)?;
        self.check_qp_allowed(call, key, attr.qp_type)?;
        let (objects_dev, pd, cqs) = self.qp_objects(host, call, attr)?;
        if objects_dev != dev {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the PD and CQs are on another device than the id",
            ));
        }
        let qpn = self.draw_qp_number(host);
        self.id_mut(key).qp = Some(qpn);
        let mut machine = RcQp::new(qpn, attr.cap, attr.sq_sig_all);
        let ud = !attr.qp_type.is_connected();
        if ud {
            machine.ready_unconnected();
        }
        self.insert_qp((host, dev, Some(key)), pd, cqs, false, ud, machine);
        Ok(qpn)
    }

    /// What the data path keeps of id `id` goes with it: its QP, its REP's data.
    pub(crate) fn verbs_forget_id(&mut self, id: IdKey) {
        self.remove_qp_of(id);
        self.verbs.rep_conn.remove(&id);
    }

    /// Destroys id `id`'s verbs QP, if any.
    pub(crate) fn remove_qp_of(&mut self, id: IdKey) {
        if let Some(key) = self.verbs.qp_of_id.get(&id).copied() {
            self.remove_qp(key);
        }
    }

    /// Destroys QP `key`: its outstanding requests are discarded without completions, and
    /// the CQs made for it go with it.
    pub(crate) fn remove_qp(&mut self, key: ObjKey) {
        let Some(mut qp) = self.verbs.qps.remove(&key) else {
            return;
        };
        if let Some(id) = qp.id {
            self.verbs.qp_of_id.remove(&id);
        }
        if let Some((t, _)) = qp.timer.take() {
            self.timeline.cancel(t);
        }
        self.verbs.qp_by_num.remove(&(qp.host, qp.qpn));
        for s in qp.machine.discard() {
            self.release_entry(qp.dev, &s);
        }
        self.verbs.pds.get_mut(&qp.pd).expect("live PD").users -= 1;
        for cq in [qp.send_cq, qp.recv_cq] {
            self.verbs.cqs.get_mut(&cq).expect("live CQ").users -= 1;
        }
        if qp.implicit {
            for cq in [qp.send_cq, qp.recv_cq] {
                let channel = self.verbs.cqs[&cq].channel;
                self.remove_cq(cq);
                if let Some(c) = channel {
                    self.verbs.channels.remove(&c);
                    self.sched.wake_all(super::comp_channel_wait_key(c));
                }
            }
        }
    }

    /// The live QP behind `h`.
    pub(crate) fn qp_key(&self, host: HostKey, call: Call, h: QpHandle) -> Result<ObjKey> {
        self.unstamp(h.raw())
            .filter(|k| self.verbs.qps.get(k).is_some_and(|q| q.host == host))
            .ok_or_else(|| {
                CmError::new(
                    call,
                    Errno::EBADF,
                    format!("{h} is not a live QP of this host"),
                )
            })
    }

    /// `id->qp`.
    pub(crate) fn id_qp(&self, host: HostKey, h: IdHandle) -> Result<Option<QpHandle>> {
        let key = self.id_key(host, Call::IdQp, h)?;
        Ok(self
            .verbs
            .qp_of_id
            .get(&key)
            .map(|q| QpHandle::from_raw(self.stamp(*q))))
    }

    /// `id->send_cq`, `id->recv_cq` and their channels.
    pub(crate) fn qp_cqs(&self, host: HostKey, h: IdHandle) -> Result<Option<QpCqs>> {
        let key = self.id_key(host, Call::QpCqs, h)?;
        Ok(self.verbs.qp_of_id.get(&key).map(|q| {
            let qp = &self.verbs.qps[q];
            let channel = |cq: ObjKey| {
                self.verbs.cqs[&cq]
                    .channel
                    .map(|c| CompChannelHandle::from_raw(self.stamp(c)))
            };
            QpCqs {
                send_cq: self.cq_handle(qp.send_cq),
                send_channel: channel(qp.send_cq),
                recv_cq: self.cq_handle(qp.recv_cq),
                recv_channel: channel(qp.recv_cq),
            }
        }))
    }

    /// The state of QP `h`.
    pub(crate) fn query_qp_state(&self, host: HostKey, h: QpHandle) -> Result<QpState> {
        let q = self.qp_key(host, Call::QueryQp, h)?;
        Ok(self.verbs.qps[&q].machine.state())
    }

    // ----- the CM's transitions ----------------------------------------------------------

    /// INIT → RTR → RTS of id `id`'s QP with the attributes `rdma_init_qp_attr` gives (see
    /// [`World::connection_attrs`]). Returns false when the QP could not be moved.
    pub(crate) fn connect_qp(&mut self, id: IdKey) -> bool {
        let Some(&q) = self.verbs.qp_of_id.get(&id) else {
            return true; // no QP (the application drives its own)
        };
        let Some(c) = self.connection_attrs(id) else {
            return false;
        };
        self.verbs.qps.get_mut(&q).expect("indexed QP").peer = Some(c.peer);
        self.drive_qp(q, |m, _, out| m.connect(MIN_RNR_TIMER_0, c.params, out))
    }

    /// Moves id `id`'s QP to ERROR, flushing its outstanding requests.
    pub(crate) fn qp_to_error(&mut self, id: IdKey) {
        if let Some(&q) = self.verbs.qp_of_id.get(&id) {
            self.drive_qp(q, |m, _, out| m.enter_error(out));
        }
    }

    /// Device `dev` is gone: its QPs enter ERROR.
    pub(crate) fn verbs_device_removed(&mut self, dev: DevKey) {
        let on_dev: Vec<ObjKey> = self
            .verbs
            .qps
            .iter()
            .filter(|(_, q)| q.dev == dev)
            .map(|(k, _)| *k)
            .collect();
        for q in on_dev {
            self.drive_qp(q, |m, _, out| m.enter_error(out));
        }
    }

    // ----- posts -------------------------------------------------------------------------

    /// `ibv_post_send`.
    pub(crate) fn post_send(&mut self, host: HostKey, h: QpHandle, wr: &SendWr<'_>) -> Result<()> {
        let call = Call::PostSend;
        let q = self.qp_key(host, call, h)?;
        let qp = &self.verbs.qps[&q];
        let (dev, pd, cap) = (qp.dev, qp.pd, qp.machine.cap());
        if qp.ud {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "UD requests need an address handle, which is not modelled yet",
            ));
        }
        let kind = send_kind(wr);
        let is_read = matches!(kind, SendKind::Read { .. });
        let (data, sges, fault) = match wr.payload {
            Payload::Inline(_) if is_read => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    "an RDMA read cannot be inline",
                ));
            }
            Payload::Inline(bytes) if bytes.len() > cap.max_inline_data as usize => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!(
                        "{} inline bytes exceed max_inline_data {}",
                        bytes.len(),
                        cap.max_inline_data
                    ),
                ));
            }
            Payload::Inline(bytes) => (Arc::from(bytes), Sges::Many(Vec::new()), None),
            Payload::Sges(sges) if sges.len() > cap.max_send_sge as usize => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!(
                        "{} entries exceed max_send_sge {}",
                        sges.len(),
                        cap.max_send_sge
                    ),
                ));
            }
            Payload::Sges(sges) if is_read => {
                let fault = (!self.sges_valid(dev, pd, sges, AccessFlags::LOCAL_WRITE))
                    .then_some(WcStatus::LOC_PROT_ERR);
                (Arc::from(&[][..]), Sges::from(sges), fault)
            }
            Payload::Sges(sges) => match self.gather(dev, pd, sges) {
                Some(data) => (Arc::from(data), Sges::from(sges), None),
                None => (
                    Arc::from(&[][..]),
                    Sges::from(sges),
                    Some(WcStatus::LOC_PROT_ERR),
                ),
            },
        };
        let kind = match kind {
            SendKind::Read { addr, rkey, .. } => SendKind::Read {
                addr,
                rkey,
                len: sges.iter().map(|s| s.length).sum(),
            },
            k => k,
        };
        self.hold_entries(dev, &sges);
        let mut entry = SendEntry::new(wr.wr_id, kind, data, sges);
        entry.signaled = wr.signaled;
        entry.solicited = wr.solicited;
        entry.fault = fault;
        match self.drive_qp(q, |m, _, out| m.post_send(entry, out)) {
            Ok(()) => Ok(()),
            Err((e, entry)) => {
                for s in entry.sges.iter() {
                    self.release_entry(dev, s);
                }
                Err(post_error(call, e, cap.max_send_wr))
            }
        }
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(&mut self, host: HostKey, h: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        let call = Call::PostRecv;
        let q = self.qp_key(host, call, h)?;
        let qp = &self.verbs.qps[&q];
        let (dev, cap) = (qp.dev, qp.machine.cap());
        if wr.sg_list.len() > cap.max_recv_sge as usize {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!(
                    "{} entries exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    cap.max_recv_sge
                ),
            ));
        }
        self.hold_entries(dev, wr.sg_list);
        let entry = RecvEntry {
            wr_id: wr.wr_id,
            sges: Sges::from(wr.sg_list),
        };
        match self.drive_qp(q, |m, _, out| m.post_recv(entry, out)) {
            Ok(()) => Ok(()),
            Err((e, _)) => {
                for s in wr.sg_list {
                    self.release_entry(dev, s);
                }
                Err(post_error(call, e, cap.max_recv_wr))
            }
        }
    }

    /// Whether every entry lies in a region of `pd` on `dev` granting `access`.
    fn sges_valid(&self, dev: DevKey, pd: ObjKey, sges: &[Sge], access: AccessFlags) -> bool {
        sges.iter()
            .all(|s| self.region_of(dev, pd, s, access).is_some())
    }

    /// The region holding entry `s` and its offset there.
    fn region_of(
        &self,
        dev: DevKey,
        pd: ObjKey,
        s: &Sge,
        access: AccessFlags,
    ) -> Option<(&Mr, usize)> {
        let mr = self
            .verbs
            .mrs
            .get(self.verbs.mr_by_key.get(&(dev, s.lkey))?)?;
        let off = s.addr.checked_sub(mr.addr)?;
        let fits = off
            .checked_add(u64::from(s.length))
            .is_some_and(|e| e <= mr.buf.len() as u64);
        (mr.pd == pd && fits && mr.access.contains(access)).then_some((mr, off as usize))
    }

    /// The bytes of `sges`, in order; `None` if one is not in a region of `pd`.
    fn gather(&self, dev: DevKey, pd: ObjKey, sges: &[Sge]) -> Option<Vec<u8>> {
        let mut data = Vec::with_capacity(sges.iter().map(|s| s.length as usize).sum());
        for s in sges {
            let (mr, off) = self.region_of(dev, pd, s, AccessFlags::NONE)?;
            data.extend_from_slice(&mr.buf[off..off + s.length as usize]);
        }
        Some(data)
    }

    /// Counts `sges` against the regions their keys name (dereg is refused meanwhile).
    fn hold_entries(&mut self, dev: DevKey, sges: &[Sge]) {
        for s in sges {
            if let Some(mr) = self
                .verbs
                .mr_by_key
                .get(&(dev, s.lkey))
                .and_then(|k| self.verbs.mrs.get_mut(k))
            {
                mr.busy += 1;
            }
        }
    }

    /// Releases what [`World::hold_entries`] counted for `s`.
    pub(crate) fn release_entry(&mut self, dev: DevKey, s: &Sge) {
        if let Some(mr) = self
            .verbs
            .mr_by_key
            .get(&(dev, s.lkey))
            .and_then(|k| self.verbs.mrs.get_mut(k))
        {
            mr.busy -= 1;
        }
    }

    // ----- driving the machine -----------------------------------------------------------

    /// Gives QP `q`'s machine an input and carries out what it answers.
    pub(crate) fn drive_qp<R>(
        &mut self,
        q: ObjKey,
        input: impl FnOnce(&mut RcQp, &mut dyn Memory, &mut Vec<QpOutput>) -> R,
    ) -> R {
        let mut out = std::mem::take(&mut self.verbs.outputs);
        let r = {
            let Verbs {
                qps,
                mrs,
                mr_by_key,
                ..
            } = &mut self.verbs;
            let qp = qps.get_mut(&q).expect("live QP");
            let mut mem = RegionMemory {
                mrs,
                by_key: mr_by_key,
                dev: qp.dev,
                pd: qp.pd,
            };
            input(&mut qp.machine, &mut mem, &mut out)
        };
        for o in out.drain(..) {
            self.carry_out_qp(q, o);
        }
        self.verbs.outputs = out;
        r
    }

    fn carry_out_qp(&mut self, q: ObjKey, output: QpOutput) {
        let Some(qp) = self.verbs.qps.get(&q) else {
            return;
        };
        let (host, dev, id, qpn) = (qp.host, qp.dev, qp.id, qp.qpn);
        let (send_cq, recv_cq) = (qp.send_cq, qp.recv_cq);
        match output {
            QpOutput::Packet(pkt) => self.send_data(q, pkt),
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
                if let Some(wc) = wc {
                    self.push_completion(cq, wc, solicited);
                }
            }
            QpOutput::SetTimer(after) => self.set_qp_timer(q, self.now.after(after)),
            QpOutput::CancelTimer => self.cancel_qp_timer(q),
            QpOutput::CommEst => {
                let event = VerbsAsyncEvent {
                    kind: AsyncEvent::COMM_EST,
                    qp_num: Some(qpn),
                    id: id.map(|i| self.id_handle(i)),
                    cq: None,
                };
                self.queue_async_event(host, event);
            }
        }
    }

    /// Makes QP `q`'s timer due at `due`, keeping its timeline entry if that runs no later.
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
        }
    }
}

/// The machine's kind of request for `wr` (a read's length is filled in from its entries).
fn send_kind(wr: &SendWr<'_>) -> SendKind {
    match wr.op {
        SendOp::Send => SendKind::Send { imm: None },
        SendOp::SendWithImm(imm) => SendKind::Send { imm: Some(imm) },
        SendOp::RdmaWrite { remote_addr, rkey } => SendKind::Write {
            addr: remote_addr,
            rkey,
            imm: None,
        },
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => SendKind::Write {
            addr: remote_addr,
            rkey,
            imm: Some(imm),
        },
        SendOp::RdmaRead { remote_addr, rkey } => SendKind::Read {
            addr: remote_addr,
            rkey,
            len: 0,
        },
    }
}

/// The errno of a refused post.
fn post_error(call: Call, e: PostError, depth: u32) -> CmError {
    match e {
        PostError::Reset => CmError::new(call, Errno::EINVAL, "the QP is in RESET"),
        PostError::Full => CmError::new(
            call,
            Errno::ENOMEM,
            format!("the queue holds its {depth} requests"),
        ),
    }
}

/// EINVAL for capacities a simulated device does not have.
fn check_cap(call: Call, cap: &QpCap) -> Result<()> {
    let ok = (1..=MAX_QP_WR).contains(&cap.max_send_wr)
        && (1..=MAX_QP_WR).contains(&cap.max_recv_wr)
        && cap.max_send_sge <= MAX_SGE
        && cap.max_recv_sge <= MAX_SGE
        && cap.max_inline_data <= MAX_INLINE;
    if ok {
        return Ok(());
    }
    Err(CmError::new(
        call,
        Errno::EINVAL,
        format!("capacities {cap:?} outside the device's (1..={MAX_QP_WR} requests, {MAX_SGE} entries, {MAX_INLINE} inline bytes)"),
    ))
}
