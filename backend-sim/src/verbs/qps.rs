//! QPs on ids: creation (with chosen CQs, or with CQs made for them as librdmacm makes
//! them), destruction, lookups, and the transitions the CM drives.

use std::time::Duration;

use cmtwin::verbs::{QpCqs, QpInitAttrEx, QpState};
use cmtwin::{
    Call, CmError, CompChannelHandle, Errno, IdHandle, QpCap, QpHandle, QpInitAttr, QpType, Result,
    Transport,
};

use super::{ObjKey, Qp, QpMachine, RcQp, UdQp};
use crate::engine::timeline::SimTime;
use crate::world::{DevKey, HostKey, IdKey, World};

/// The most inline bytes of a simulated QP's send request (the requests per queue and
/// entries per request are the device's `max_qp_wr` and `max_sge`: `device_profile.rs`).
const MAX_INLINE: u32 = 256;

/// The inline bytes a siw QP takes, whatever it asked for, and the most it may ask for
/// (`SIW_MAX_INLINE`: five entries' room, 80 bytes; `siw_create_qp` refuses more with EINVAL,
/// measured on siw-6.1).
pub(crate) const SIW_MAX_INLINE: u32 = 80;

/// What `min_rnr_timer` 0 means (IB's encoding): 655.36 ms. The kernel's CM programs 0 into
/// the RTR attributes of every QP it connects (CM-SEMANTICS.md §2).
pub(crate) const MIN_RNR_TIMER_0: Duration = Duration::from_micros(655_360);

impl World {
    // ----- creation and destruction ------------------------------------------------------

    /// A QP number of device `dev` not in use on `host`: the device's next (after a power
    /// cycle, its previous life's numbers come first), drawn from the numbers stream.
    pub(crate) fn draw_qp_number(&mut self, host: HostKey, dev: DevKey) -> u32 {
        loop {
            let rng = &mut self.rng;
            let draw = || rng.range(crate::rng::Stream::Numbers, 0x10, 0xFF_FFFE) as u32;
            let qpn = self.topo.devices[dev].qpns.next(draw);
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
        let pd = match self.qp_of(key) {
            Some(q) => self.verbs.qps[&q].pd,
            None => self.default_pd(host, dev),
        };
        Ok(cmtwin::PdHandle::from_raw(self.stamp(pd)))
    }

    /// Gives id `id` the verbs QP `qpn` of `rdma_create_qp` without PD and CQs: librdmacm
    /// takes the device's default PD and makes a send and a receive CQ, each with its own
    /// completion channel, sized by the capacities.
    pub(crate) fn attach_qp(&mut self, id: IdKey, qpn: u32, attr: &QpInitAttr) {
        let owner = self.id(id);
        let (host, dev) = (owner.host, owner.device.expect("checked by create_qp"));
        let pd = self.default_pd(host, dev);
        // Each channel for the one CQ made on it next (no lookup to count it then).
        let send_channel = self.new_comp_channel(host, dev, 1);
        let recv_channel = self.new_comp_channel(host, dev, 1);
        let cap = attr.cap;
        let send_cq = self.new_cq(host, dev, cap.max_send_wr.max(1), Some(send_channel), true);
        let recv_cq = self.new_cq(host, dev, cap.max_recv_wr.max(1), Some(recv_channel), true);
        let srq = self.verbs.srq_of_id.get(&id).copied();
        let machine_cap = without_rq(cap, srq.is_some());
        let machine = self.new_machine(id, dev, qpn, attr.qp_type, machine_cap, attr.sq_sig_all);
        let where_ = (host, dev, Some(id));
        let key = self.insert_qp(where_, qpn, pd, (send_cq, recv_cq), true, machine);
        if let Some(srq) = srq {
            self.attach_srq(key, srq);
        }
    }

    /// The machine of id `id`'s new QP `qpn` of type `qp_type`: RC or UC (the RC machine
    /// without its reliability, `rc.rs`) in INIT, or UD in RTS with the id's qkey (as
    /// librdmacm moves a UD QP at creation).
    fn new_machine(
        &self,
        id: IdKey,
        dev: DevKey,
        qpn: u32,
        qp_type: QpType,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> QpMachine {
        let transport = self.topo.devices[dev].transport;
        let cap = device_cap(cap, transport);
        let rc = || RcQp::new(cap, sq_sig_all);
        let ud = || UdQp::new(qpn, cap, sq_sig_all, self.id(id).qkey);
        match (qp_type, transport) {
            // rxe's UC rules, as for a UC QP made apart (measured through the CM, RDMA_PS_IB).
            (QpType::Uc, Transport::Roce) => QpMachine::Rc(rc().unreliable().on_rxe()),
            (QpType::Uc, _) => QpMachine::Rc(rc().unreliable()),
            (QpType::Ud, Transport::Roce) => QpMachine::Ud(ud().on_rxe(self.cfg.kernel)),
            (QpType::Ud, _) => QpMachine::Ud(ud()),
            (QpType::Rc, Transport::Iwarp) => QpMachine::Rc(rc().on_siw()),
            (QpType::Rc, Transport::Roce) => QpMachine::Rc(rc().on_rxe()),
            (QpType::Rc, Transport::InfiniBand) => QpMachine::Rc(rc()),
        }
    }

    /// Records QP `qpn` with `machine` of host, device and id `where_` and counts its users
    /// of the PD and CQs; its key.
    pub(crate) fn insert_qp(
        &mut self,
        where_: (HostKey, DevKey, Option<IdKey>),
        qpn: u32,
        pd: ObjKey,
        (send_cq, recv_cq): (ObjKey, ObjKey),
        implicit: bool,
        machine: QpMachine,
    ) -> ObjKey {
        let (host, dev, id) = where_;
        self.verbs.pds.get_mut(&pd).expect("live PD").users += 1;
        if !implicit {
            // An implicit QP's CQs were made counting it (`new_cq`).
            for cq in [send_cq, recv_cq] {
                self.verbs.cqs.get_mut(&cq).expect("live CQ").users += 1;
            }
        }
        let key = self.verbs.fresh();
        let qp = Qp {
            host,
            dev,
            id,
            qpn,
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
        if let Some(owner) = id.and_then(|id| self.kernel.ids.get_mut(&id)) {
            owner.qp_hint = u32::try_from(key).unwrap_or(0);
        }
        key
    }

    /// The live PD and CQs of `attr`, all on one device: that device; and the SRQ the QP
    /// takes its receives from (`attr.srq`, else id `id`'s).
    pub(crate) fn qp_objects(
        &self,
        host: HostKey,
        call: Call,
        attr: &QpInitAttrEx,
        id: Option<IdKey>,
    ) -> Result<QpObjects> {
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
        let srq = self.srq_for_qp(host, call, attr.srq, id, dev)?;
        check_cap(
            call,
            &attr.cap,
            self.topo.devices[dev].transport,
            srq.is_some(),
        )?;
        if attr.block_self_multicast_loopback && attr.qp_type != cmtwin::QpType::Ud {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "IBV_QP_CREATE_BLOCK_SELF_MCAST_LB on a QP that is not UD",
            ));
        }
        Ok(QpObjects {
            dev,
            pd,
            cqs: (send_cq, recv_cq),
            srq,
        })
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
        let objects = self.qp_objects(host, call, attr, Some(key))?;
        if objects.dev != dev {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the PD and CQs are on another device than the id",
            ));
        }
        let qpn = self.draw_qp_number(host, dev);
        self.id_mut(key).set_qp(Some(qpn));
        let cap = without_rq(attr.cap, objects.srq.is_some());
        let id_dev = self.id(key).device.expect("checked by create_qp");
        let mut machine = self.new_machine(key, id_dev, qpn, attr.qp_type, cap, attr.sq_sig_all);
        if let (true, Some(ud)) = (attr.block_self_multicast_loopback, machine.as_ud()) {
            ud.block_self_multicast_loopback();
        }
        let (pd, cqs) = (objects.pd, objects.cqs);
        let q = self.insert_qp((host, dev, Some(key)), qpn, pd, cqs, false, machine);
        if let Some(srq) = objects.srq {
            self.attach_srq(q, srq);
        }
        Ok(qpn)
    }

    /// What the data path keeps of id `id` goes with it: its QP.
    pub(crate) fn verbs_forget_id(&mut self, id: IdKey) {
        self.remove_qp_of(id);
        self.srq_forget_id(id);
    }

    /// Id `id`'s verbs QP, if it has one: found by the QP number the id holds (`id->qp`).
    /// The QP the id last made (`Id::qp_hint`) is that one whenever it still lives with that
    /// number: QP numbers in use are unique per host, a QP's id never changes, and an id's
    /// number changes only as it makes a QP.
    pub(crate) fn qp_of(&self, id: IdKey) -> Option<ObjKey> {
        self.qp_of_found(id, self.kernel.ids.get(&id)?)
    }

    /// [`World::qp_of`] of id `id`, found as `owner`.
    pub(crate) fn qp_of_found(&self, id: IdKey, owner: &crate::kernel::Id) -> Option<ObjKey> {
        let qpn = owner.qp()?;
        let q = match owner.qp_hint {
            0 => *self.verbs.qp_by_num.get(&(owner.host, qpn))?,
            hint => ObjKey::from(hint),
        };
        let qp = self.verbs.qps.get(&q)?;
        (qp.id == Some(id) && qp.qpn == qpn && qp.host == owner.host).then_some(q)
    }

    /// Destroys id `id`'s verbs QP, if any.
    pub(crate) fn remove_qp_of(&mut self, id: IdKey) {
        if let Some(key) = self.qp_of(id) {
            self.remove_qp(key);
        }
    }

    /// Destroys QP `key`: its outstanding requests are discarded without completions, and
    /// the CQs made for it go with it.
    pub(crate) fn remove_qp(&mut self, key: ObjKey) {
        let Some(mut qp) = self.verbs.qps.remove(&key) else {
            return;
        };
        // siw: a connection still up drops with the QP; TCP keeps its unacknowledged bytes
        // (taken from the QP out of the table: one lookup).
        self.siw_orphan_stream_of(&qp);
        if let Some((t, _)) = qp.timer.take() {
            self.timeline.cancel(t);
        }
        self.verbs.qp_by_num.remove(&(qp.host, qp.qpn));
        self.verbs.kept_requests.remove(&key);
        for s in qp.machine.discard() {
            self.release_entry(qp.dev, &s);
        }
        self.verbs.pds.get_mut(&qp.pd).expect("live PD").users -= 1;
        self.detach_srq(key);
        if qp.implicit {
            // librdmacm's own CQs and their channels go with the QP: each CQ is taken out
            // with one lookup (counting its user off or its channel's CQs would be undone
            // at once).
            for cq in [qp.send_cq, qp.recv_cq] {
                let channel = self.verbs.cqs.remove(&cq).and_then(|c| c.channel);
                if let Some(c) = channel {
                    self.verbs.channels.remove(&c);
                    self.sched.wake_all(super::comp_channel_wait_key(c));
                }
            }
        } else {
            for cq in [qp.send_cq, qp.recv_cq] {
                self.verbs.cqs.get_mut(&cq).expect("live CQ").users -= 1;
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
        Ok(self.qp_of(key).map(|q| QpHandle::from_raw(self.stamp(q))))
    }

    /// `id->send_cq`, `id->recv_cq` and their channels.
    pub(crate) fn qp_cqs(&self, host: HostKey, h: IdHandle) -> Result<Option<QpCqs>> {
        let key = self.id_key(host, Call::QpCqs, h)?;
        Ok(self.qp_of(key).map(|q| {
            let qp = &self.verbs.qps[&q];
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
        let m = &self.verbs.qps[&q].machine;
        if m.is_siw() {
            return Ok(self.siw_reported_state(m.state()));
        }
        Ok(m.state())
    }

    /// `ibv_query_qp`'s capacities: what the device made of those asked for (`device_cap`).
    pub(crate) fn query_qp_cap(&self, host: HostKey, h: QpHandle) -> Result<QpCap> {
        let q = self.qp_key(host, Call::QueryQp, h)?;
        Ok(self.verbs.qps[&q].machine.cap())
    }

    /// The state of id `id`'s QP, if it has one.
    pub(crate) fn qp_state_of(&self, id: IdKey) -> Option<QpState> {
        self.qp_of(id).map(|q| self.verbs.qps[&q].machine.state())
    }

    // ----- the CM's transitions ----------------------------------------------------------

    /// INIT → RTR → RTS of id `id`'s QP with the attributes `rdma_init_qp_attr` gives (see
    /// [`World::connection_attrs`]), as librdmacm's `ucma_modify_qp_rtr` and
    /// `ucma_modify_qp_rts` move it: INIT again with the CM's access flags of the moment,
    /// then RTR and RTS with `resources` (the responder resources and initiator depth of
    /// `rdma_accept`'s REP, on the passive side) or else the CM's. Returns false when the QP
    /// could not be moved.
    pub(crate) fn connect_qp(&mut self, id: IdKey, resources: Option<(u8, u8)>) -> bool {
        let Some(q) = self.qp_of(id) else {
            return true; // no QP (the application drives its own)
        };
        if self.uc_qp_of_rc_id(id, q) {
            return false;
        }
        let Some(c) = self.connection_attrs(id) else {
            return false;
        };
        // The CM's resources, looked up once for the access flags and the default.
        let held = self.cm_resources(id);
        let access = super::modify::access_for(held);
        let (responder_resources, initiator_depth) =
            resources.unwrap_or_else(|| held.unwrap_or_default());
        let qp = self.verbs.qps.get_mut(&q).expect("indexed QP");
        qp.peer = Some(c.peer);
        if let Some(rc) = qp.machine.as_rc() {
            rc.set_access(access.0);
            rc.set_responder_resources(responder_resources);
            rc.set_initiator_depth(initiator_depth);
        }
        self.drive_qp(q, |m, _, out| m.connect(MIN_RNR_TIMER_0, c.params, out))
    }

    /// Whether id `id` holds a UC QP while its connection is an RC one, as every connected
    /// id is through this API (the kernel gives an RDMA_PS_TCP id the type RC,
    /// `ucma_get_qp_type`, and librdmacm's `rdma_create_id` gives RDMA_PS_IB ids RC too): the
    /// IB CM's RTR attributes for an RC connection carry MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER
    /// (`cm_init_qp_rtr_attr`), which a UC QP's modify refuses (EINVAL), so librdmacm cannot
    /// move the QP to RTR (measured on rxe: `rdma_accept` fails with EINVAL).
    pub(crate) fn uc_qp_on_rc_id(&self, id: IdKey) -> bool {
        self.qp_of(id).is_some_and(|q| self.uc_qp_of_rc_id(id, q))
    }

    /// [`World::uc_qp_on_rc_id`] of id `id` whose QP is `q` (as `qp_of` found it).
    fn uc_qp_of_rc_id(&self, id: IdKey, q: ObjKey) -> bool {
        self.verbs.qps[&q].machine.qp_type() == QpType::Uc && self.id(id).qp_type == QpType::Rc
    }

    /// Moves id `id`'s QP to ERROR, flushing its outstanding requests.
    pub(crate) fn qp_to_error(&mut self, id: IdKey) {
        if let Some(q) = self.qp_of(id) {
            self.qp_enter_error(q);
        }
    }

    /// Moves QP `q` to ERROR, flushing its outstanding requests.
    pub(crate) fn qp_enter_error(&mut self, q: ObjKey) {
        self.drive_qp(q, |m, _, out| m.enter_error(out));
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
}

/// The queues a device makes of `cap`, what `ibv_query_qp` then reports and the posts the
/// queues take.
///
/// * Depths: rxe (the RoCE and InfiniBand devices here) gives each queue a power-of-two ring
///   with one slot left empty, so a queue asked for `n` requests holds the next power of two
///   above `n`, minus one (`rxe_queue_init`: 2 → 3, 16 → 31), and hands that back
///   (`rxe_qp_init_req`, `rxe_init_rq`); siw (iWARP) rounds each depth up to a power of two
///   (`siw_create_qp`: 2 → 2, 3 → 4; an empty receive queue stays empty).
/// * Send room (rxe_qp_init_req): a send request has room for `max_send_sge` entries of 16
///   bytes or `max_inline_data` bytes, whichever is larger, and the QP takes as many of each as
///   that room holds. So a QP of one entry and no inline bytes asked for sends 16 bytes inline
///   (rdma_xclient does), and one of 64 inline bytes takes 4 entries. siw keeps the entries
///   asked and takes [`SIW_MAX_INLINE`] inline bytes on every QP (`siw_query_qp`; measured on
///   siw-6.1: a QP asking 1 entry and no inline bytes reads 1 and 80).
pub(crate) fn device_cap(cap: QpCap, transport: Transport) -> QpCap {
    const SGE_BYTES: u32 = 16; // sizeof(struct ib_sge)
    let depths = QpCap {
        max_send_wr: queue_depth(cap.max_send_wr, transport),
        max_recv_wr: queue_depth(cap.max_recv_wr, transport),
        ..cap
    };
    if transport == Transport::Iwarp {
        return QpCap {
            max_inline_data: SIW_MAX_INLINE,
            ..depths
        };
    }
    let room = (cap.max_send_sge * SGE_BYTES).max(cap.max_inline_data);
    QpCap {
        max_send_sge: room / SGE_BYTES,
        max_inline_data: room,
        ..depths
    }
}

/// The requests (or completions) a device's ring asked for `n` holds: rxe's power of two
/// above `n` minus one (`rxe_queue_init`), siw's power of two at or above `n` (0 stays 0).
pub(crate) fn queue_depth(n: u32, transport: Transport) -> u32 {
    match transport {
        Transport::Iwarp if n == 0 => 0,
        Transport::Iwarp => n.checked_next_power_of_two().unwrap_or(n),
        _ => n
            .saturating_add(1)
            .checked_next_power_of_two()
            .map_or(n, |slots| slots - 1),
    }
}

/// EINVAL for capacities above a simulated device's `max_qp_wr` and `max_sge` (rxe_qp_chk_cap, siw_create_qp: no lower bound, an
/// empty queue is allowed there; librdmacm sizes the CQs it makes for one at least), and on
/// iWARP for an empty send queue (`siw_create_qp` needs one).
pub(crate) fn check_cap_maxima(call: Call, cap: &QpCap, transport: Transport) -> Result<()> {
    if transport == Transport::Iwarp && cap.max_send_wr == 0 {
        return Err(CmError::new(
            call,
            Errno::EINVAL,
            format!("capacities {cap:?}: an iWARP QP needs a send queue"),
        ));
    }
    let m = super::device_profile::maxima(transport);
    let inline = match transport {
        Transport::Iwarp => SIW_MAX_INLINE,
        _ => MAX_INLINE,
    };
    let ok = cap.max_send_wr <= m.qp_wr
        && cap.max_recv_wr <= m.qp_wr
        && cap.max_send_sge <= m.sge
        && cap.max_recv_sge <= m.sge
        && cap.max_inline_data <= inline;
    if ok {
        return Ok(());
    }
    let (wr, sge) = (m.qp_wr, m.sge);
    Err(CmError::new(
        call,
        Errno::EINVAL,
        format!("capacities {cap:?} above the device's ({wr} requests, {sge} entries, {inline} inline bytes)"),
    ))
}

/// EINVAL for capacities whose CQs the device cannot make: `rdma_create_qp` makes each CQ
/// of the QP's own, one entry per request of its queue (librdmacm's `ucma_create_cqs`), and
/// `ibv_create_cq` refuses more entries than `max_cqe` (on rxe 32767, below its `max_qp_wr`).
pub(crate) fn check_librdmacm_cqs(call: Call, cap: &QpCap, transport: Transport) -> Result<()> {
    let max_cqe = super::device_profile::maxima(transport).cqe;
    if cap.max_send_wr.max(cap.max_recv_wr) <= max_cqe {
        return Ok(());
    }
    Err(CmError::new(
        call,
        Errno::EINVAL,
        format!("capacities {cap:?}: a CQ of that many entries is above the device's max_cqe {max_cqe} (ibv_create_cq)"),
    ))
}

/// What `qp_objects` finds for a new QP.
pub(crate) struct QpObjects {
    pub dev: DevKey,
    pub pd: ObjKey,
    pub cqs: (ObjKey, ObjKey),
    pub srq: Option<ObjKey>,
}

/// The capacities of a QP with an SRQ (`with_srq`): no receive queue of its own, which is
/// what rxe reports (`rxe_qp_to_attr`: 0 receives of 0 entries).
pub(crate) fn without_rq(cap: QpCap, with_srq: bool) -> QpCap {
    match with_srq {
        true => QpCap {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..cap
        },
        false => cap,
    }
}

/// EINVAL for capacities a simulated device does not have: the maxima, and (for
/// `ibv_create_qp_ex`) at least one send and one receive entry. A QP with an SRQ has no
/// receive queue: its receive capacities are not looked at (`rxe_qp_chk_cap`).
fn check_cap(call: Call, cap: &QpCap, transport: Transport, with_srq: bool) -> Result<()> {
    let cap = &without_rq(*cap, with_srq);
    if cap.max_send_wr == 0 || (cap.max_recv_wr == 0 && !with_srq) {
        return Err(CmError::new(
            call,
            Errno::EINVAL,
            format!(
                "capacities {cap:?} without a send or a receive entry (at least 1 request each)"
            ),
        ));
    }
    check_cap_maxima(call, cap, transport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depths_are_the_drivers_rings() {
        let rxe = |n| queue_depth(n, Transport::Roce);
        let siw = |n| queue_depth(n, Transport::Iwarp);
        assert_eq!([rxe(0), rxe(1), rxe(2), rxe(3), rxe(16)], [0, 1, 3, 3, 31]);
        assert_eq!([siw(0), siw(1), siw(3), siw(16)], [0, 1, 4, 16]);
        // Beyond any ring: the asked depth, never a panic.
        assert_eq!(rxe(u32::MAX), u32::MAX);
        assert_eq!(siw(u32::MAX), u32::MAX);
    }
}
