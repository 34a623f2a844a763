//! QPs: on ids (`rdma_create_qp` with the backend's PD, and librdmacm's CQs or chosen ones),
//! apart from ids (`ibv_create_qp` for the external-QP path), `rdma_init_qp_attr`,
//! `ibv_modify_qp`, queries, and their destruction.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use cmtwin::verbs::{AccessFlags, QpAttr, QpCqs, QpInitAttrEx, QpState};
use cmtwin::{
    AhAttr, Call, CompChannelHandle, CqHandle, GlobalRoute, IdHandle, PdHandle, QpCap, QpHandle,
    QpType, Result,
};

use super::objects::{
    in_use, ChannelEntry, ChannelObj, CqEntry, CqObj, PdEntry, PdObj, QpEntry, QpObj, Queues,
    SrqObj,
};
use crate::ffi::{IdQpParts, QpAttrC, QpCaps, RawCtx, RawPd, RawQp, QPT_RC, QPT_UC, QPT_UD};
use crate::registry::{IdObj, Registry};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

/// `ibv_qp_attr_mask` bits.
const M_STATE: i32 = 1;
const M_ACCESS: i32 = 8;
const M_PKEY: i32 = 16;
const M_PORT: i32 = 32;
const M_QKEY: i32 = 64;
const M_AV: i32 = 128;
const M_PATH_MTU: i32 = 256;
const M_TIMEOUT: i32 = 512;
const M_RETRY: i32 = 1024;
const M_RNR_RETRY: i32 = 2048;
const M_RQ_PSN: i32 = 4096;
const M_MAX_RD_ATOMIC: i32 = 8192;
const M_MIN_RNR: i32 = 32768;
const M_SQ_PSN: i32 = 65536;
const M_MAX_DEST_RD_ATOMIC: i32 = 131072;
const M_DEST_QPN: i32 = 1048576;

/// `IBV_QPT_*` of a QP type.
fn qpt(t: QpType) -> u32 {
    match t {
        QpType::Rc => QPT_RC,
        QpType::Uc => QPT_UC,
        QpType::Ud => QPT_UD,
    }
}

/// EINVAL unless every capacity is at least 1 request per queue (a QP with an SRQ has no
/// receive queue of its own).
fn check_cap(call: Call, cap: &QpCap, with_srq: bool) -> Result<()> {
    if cap.max_send_wr == 0 || (cap.max_recv_wr == 0 && !with_srq) {
        return Err(err(
            call,
            libc::EINVAL,
            format!("capacities {cap:?}: each queue needs at least one request"),
        ));
    }
    Ok(())
}

fn caps(cap: &QpCap, sq_sig_all: bool, t: QpType) -> QpCaps {
    QpCaps {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
        sq_sig_all,
        qp_type: qpt(t),
        create_flags: 0,
    }
}

/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
const CREATE_BLOCK_SELF_MCAST_LB: u32 = 2;

/// The objects a new QP is made with, on one device context.
struct QpObjects {
    ctx: RawCtx,
    pd: Arc<PdObj>,
    send_cq: Arc<CqObj>,
    recv_cq: Arc<CqObj>,
    /// The SRQ it takes its receives from: its key and object.
    srq: Option<(u64, Arc<SrqObj>)>,
}

/// A fresh QP object. Posts are checked against the capacities the device granted, which may
/// exceed those asked for (`ibv_create_qp` writes them back; rxe grants 16 inline bytes to a
/// QP that asked for none but has one entry a request); `asked` stands in if the device
/// cannot be queried.
fn qp_obj(raw: RawQp, (asked, created): (QpCap, Option<QpCap>), ud: bool, srq: bool) -> Arc<QpObj> {
    let ctx = raw.ctx();
    let qpn = raw.qp_num();
    let cap = raw.cap().map_or(asked, |c| QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    });
    Arc::new(QpObj {
        raw,
        ctx,
        qpn,
        cap,
        created,
        ud,
        srq,
        send_order: Mutex::new(()),
        queues: Mutex::new(Queues::default()),
    })
}

impl VerbsBackend {
    /// `id->verbs` and the local address of the live id `id` (EINVAL without a device).
    pub(crate) fn id_device(
        &self,
        call: Call,
        id: IdHandle,
    ) -> Result<(RawCtx, Option<SocketAddr>)> {
        self.on_id(call, id, |o| {
            let ctx = o.raw.ctx().ok_or_else(|| {
                err(
                    call,
                    libc::EINVAL,
                    format!("{id} has no device yet (bind or resolve it first)"),
                )
            })?;
            Ok((ctx, o.raw.local_addr()))
        })
    }

    /// The backend's PD of device `ctx` (made, and anchored through `local`, when first
    /// needed): its key and object.
    pub(crate) fn default_pd(
        &self,
        call: Call,
        ctx: RawCtx,
        local: Option<SocketAddr>,
    ) -> Result<(u64, Arc<PdObj>)> {
        let found = |reg: &Registry| {
            reg.verbs
                .default_pd
                .get(&ctx.addr())
                .map(|&k| (k, Arc::clone(&reg.verbs.pds[&k].obj)))
        };
        if let Some(f) = found(&self.reg()) {
            return Ok(f);
        }
        self.anchor(call, ctx, local)?;
        let raw = match RawPd::alloc(ctx) {
            Ok(raw) => raw,
            Err(e) => {
                self.unanchor(ctx);
                return Err(c_err(call, e));
            }
        };
        let mut reg = self.reg();
        let key = match (found(&reg), reg.issue()) {
            (None, Ok(key)) => key,
            (raced, _) => {
                // Made by another thread meanwhile, or no key left.
                drop(reg);
                let _ = raw.dealloc();
                self.unanchor(ctx);
                return raced.ok_or_else(|| keys_exhausted(call));
            }
        };
        let obj = Arc::new(PdObj { raw, ctx });
        reg.verbs.pds.insert(
            key,
            PdEntry {
                obj: Arc::clone(&obj),
                users: 0,
                default: true,
            },
        );
        reg.verbs.default_pd.insert(ctx.addr(), key);
        Ok((key, obj))
    }

    /// Once the backend has no id left: deallocates its device PDs that nothing uses (and so
    /// drops their anchors, letting a removed device go).
    pub(crate) fn release_idle_default_pds(&self) {
        let idle: Vec<PdObj> = {
            let mut reg = self.reg();
            if reg.ids().next().is_some() {
                return;
            }
            let keys: Vec<(usize, u64)> = reg
                .verbs
                .default_pd
                .iter()
                .filter(|(_, k)| {
                    let e = &reg.verbs.pds[*k];
                    e.users == 0 && Arc::strong_count(&e.obj) == 1
                })
                .map(|(c, k)| (*c, *k))
                .collect();
            keys.into_iter()
                .filter_map(|(ctx, k)| {
                    reg.verbs.default_pd.remove(&ctx);
                    let e = reg.verbs.pds.remove(&k)?;
                    Arc::try_unwrap(e.obj).ok()
                })
                .collect()
        };
        for pd in idle {
            let ctx = pd.ctx;
            // A PD libibverbs refuses to free stays allocated (and anchored).
            if pd.raw.dealloc().is_ok() {
                self.unanchor(ctx);
            }
        }
    }

    /// `rdma_create_qp` without CQs (`CmBackend::create_qp`): the backend's PD of the device,
    /// CQs and channels made by librdmacm. Runs under the id's locks.
    pub(crate) fn create_id_qp(
        &self,
        call: Call,
        o: &IdObj,
        ctx: RawCtx,
        cap: &QpCap,
        sq_sig_all: bool,
        t: QpType,
    ) -> Result<u32> {
        let (pd_key, pd) = self.default_pd(call, ctx, o.raw.local_addr())?;
        // librdmacm gives the QP `id->srq`.
        let (qpn, created) = o
            .raw
            .create_qp_with(&pd.raw, None, None, &caps(cap, sq_sig_all, t))
            .map_err(|e| c_err(call, e))?;
        let parts = match o.raw.qp_parts() {
            Ok(Some(p)) => p,
            Ok(None) => return Err(err(call, libc::EIO, "librdmacm made no QP")),
            Err(e) => {
                o.raw.destroy_qp();
                return Err(c_err(call, e));
            }
        };
        let mut reg = self.reg();
        match self.register_id_qp(&mut reg, o.handle, pd_key, parts, (*cap, created), t) {
            Ok(()) => Ok(qpn),
            Err(e) => {
                drop(reg);
                o.raw.destroy_qp();
                Err(e)
            }
        }
    }

    /// Registers the QP librdmacm made for `id` with its implicit CQs and channels.
    fn register_id_qp(
        &self,
        reg: &mut Registry,
        id: IdHandle,
        pd: u64,
        parts: IdQpParts,
        cap: (QpCap, QpCap),
        t: QpType,
    ) -> Result<()> {
        let call = Call::CreateQp;
        let keys: Vec<u64> = (0..5).map_while(|_| reg.issue().ok()).collect();
        if keys.len() < 5 {
            return Err(keys_exhausted(call));
        }
        let ctx = parts.qp.ctx();
        let mut cq_keys = [0u64; 2];
        let pairs = [
            (parts.send_cq, parts.send_channel),
            (parts.recv_cq, parts.recv_channel),
        ];
        for (i, (cq, ch)) in pairs.into_iter().enumerate() {
            let Some(cq) = cq else {
                return Err(err(call, libc::EIO, "librdmacm made no CQ"));
            };
            if let Some(&k) = reg.verbs.cq_by_addr.get(&cq.addr()) {
                cq_keys[i] = k; // one CQ for both queues
                continue;
            }
            let ch_key = ch.map(|raw| {
                let k = keys[2 + 2 * i];
                reg.verbs.channels.insert(
                    k,
                    ChannelEntry {
                        obj: Arc::new(ChannelObj { raw, ctx }),
                        cqs: 1,
                        implicit: true,
                    },
                );
                k
            });
            let k = keys[1 + 2 * i];
            reg.verbs.cq_by_addr.insert(cq.addr(), k);
            super::async_events::own_cq(cq.addr(), &self.shared.inbox);
            reg.verbs.cqs.insert(
                k,
                CqEntry {
                    obj: Arc::new(CqObj { raw: cq, ctx }),
                    channel: ch_key,
                    users: 0,
                    unacked: 0,
                    implicit: true,
                },
            );
            cq_keys[i] = k;
        }
        let srq = reg.verbs.srq_of_id.get(&id).copied();
        let obj = qp_obj(
            parts.qp,
            (cap.0, Some(cap.1)),
            t == QpType::Ud,
            srq.is_some(),
        );
        let cqs = (cq_keys[0], cq_keys[1]);
        self.insert_qp(reg, keys[0], obj, (Some(id), pd), cqs, srq);
        Ok(())
    }

    /// Records QP `obj` (of id `id`, in PD `pd`) under `key` and counts it against its PD,
    /// CQs and SRQ.
    fn insert_qp(
        &self,
        reg: &mut Registry,
        key: u64,
        obj: Arc<QpObj>,
        (id, pd): (Option<IdHandle>, u64),
        (send_cq, recv_cq): (u64, u64),
        srq: Option<u64>,
    ) {
        let ctx = obj.ctx.addr();
        super::async_events::own_qp(ctx, obj.qpn, &self.shared.inbox);
        reg.verbs.qp_by_num.insert((ctx, obj.qpn), key);
        if let Some(id) = id {
            reg.verbs.qp_of_id.insert(id, key);
        }
        reg.verbs.pds.get_mut(&pd).expect("live PD").users += 1;
        for cq in [send_cq, recv_cq] {
            reg.verbs.cqs.get_mut(&cq).expect("live CQ").users += 1;
        }
        if let Some(s) = srq {
            reg.verbs.srqs.get_mut(&s).expect("live SRQ").users += 1;
        }
        reg.verbs.qps.insert(
            key,
            QpEntry {
                obj,
                id,
                pd,
                send_cq,
                recv_cq,
                srq,
            },
        );
    }

    /// The live PD, CQs and SRQ of `attr` (without one, id `id`'s SRQ), all on one context.
    fn qp_objects(
        &self,
        call: Call,
        attr: &QpInitAttrEx,
        id: Option<IdHandle>,
    ) -> Result<QpObjects> {
        let pd = self.pd_obj(call, attr.pd)?;
        let s = self.cq(call, attr.send_cq)?;
        let r = self.cq(call, attr.recv_cq)?;
        if s.ctx != pd.ctx || r.ctx != pd.ctx {
            return Err(err(
                call,
                libc::EINVAL,
                "the CQs are on another device than the PD",
            ));
        }
        let srq = self.srq_for_qp(call, attr.srq, id)?;
        if srq.as_ref().is_some_and(|(_, o)| o.ctx != pd.ctx) {
            let why = "the SRQ is on another device than the PD";
            return Err(err(call, libc::EINVAL, why));
        }
        check_cap(call, &attr.cap, srq.is_some())?;
        Ok(QpObjects {
            ctx: pd.ctx,
            pd,
            send_cq: s,
            recv_cq: r,
            srq,
        })
    }

    pub(crate) fn create_qp_ex_impl(&self, id: IdHandle, attr: &QpInitAttrEx) -> Result<u32> {
        let call = Call::CreateQpEx;
        let QpObjects {
            ctx,
            pd,
            send_cq: s,
            recv_cq: r,
            srq,
        } = self.qp_objects(call, attr, Some(id))?;
        self.on_id(call, id, |o| {
            let Some(id_ctx) = o.raw.ctx() else {
                return Err(err(call, libc::EINVAL, format!("{id} has no device yet")));
            };
            if id_ctx != ctx {
                return Err(err(
                    call,
                    libc::EINVAL,
                    "the PD and CQs are on another device than the id",
                ));
            }
            if let Some(n) = o.raw.qp_num() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} already has QP {n:#x}"),
                ));
            }
            if (o.raw.qp_type() == QPT_UD) != (attr.qp_type == QpType::Ud) {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("a {:?} QP does not suit the id's port space", attr.qp_type),
                ));
            }
            let mut c = caps(&attr.cap, attr.sq_sig_all, attr.qp_type);
            if attr.block_self_multicast_loopback {
                if attr.qp_type != QpType::Ud {
                    let why = "IBV_QP_CREATE_BLOCK_SELF_MCAST_LB on a QP that is not UD";
                    return Err(err(call, libc::EINVAL, why));
                }
                c.create_flags = CREATE_BLOCK_SELF_MCAST_LB;
            }
            let raw_srq = srq.as_ref().map(|(_, o)| &o.raw);
            let (qpn, created) = o
                .raw
                .create_qp_with(&pd.raw, Some((&s.raw, &r.raw)), raw_srq, &c)
                .map_err(|e| c_err(call, e))?;
            let parts = o.raw.qp_parts().ok().flatten();
            let mut reg = self.reg();
            let (Some(parts), Ok(key)) = (parts, reg.issue()) else {
                drop(reg);
                o.raw.destroy_qp();
                return Err(keys_exhausted(call));
            };
            // The SRQ is still registered: `srq` holds it (a destroy is refused meanwhile).
            let srq_key = srq.as_ref().map(|(k, _)| *k);
            let ud = attr.qp_type == QpType::Ud;
            let obj = qp_obj(parts.qp, (attr.cap, Some(created)), ud, srq_key.is_some());
            let cqs = (attr.send_cq.raw(), attr.recv_cq.raw());
            let owner = (Some(id), attr.pd.raw());
            self.insert_qp(&mut reg, key, obj, owner, cqs, srq_key);
            Ok(qpn)
        })
    }

    pub(crate) fn qp_cqs_impl(&self, id: IdHandle) -> Result<Option<QpCqs>> {
        let call = Call::QpCqs;
        self.id_obj(call, id)?;
        let reg = self.reg();
        Ok(reg.verbs.qp_of_id.get(&id).map(|q| {
            let e = &reg.verbs.qps[q];
            let channel = |cq: u64| reg.verbs.cqs[&cq].channel.map(CompChannelHandle::from_raw);
            QpCqs {
                send_cq: CqHandle::from_raw(e.send_cq),
                send_channel: channel(e.send_cq),
                recv_cq: CqHandle::from_raw(e.recv_cq),
                recv_channel: channel(e.recv_cq),
            }
        }))
    }

    pub(crate) fn id_pd_impl(&self, id: IdHandle) -> Result<PdHandle> {
        let call = Call::IdPd;
        let (ctx, local) = self.id_device(call, id)?;
        let qp_pd = {
            let reg = self.reg();
            reg.verbs.qp_of_id.get(&id).map(|q| reg.verbs.qps[q].pd)
        };
        if let Some(pd) = qp_pd {
            return Ok(PdHandle::from_raw(pd));
        }
        self.default_pd(call, ctx, local)
            .map(|(k, _)| PdHandle::from_raw(k))
    }

    pub(crate) fn id_qp_impl(&self, id: IdHandle) -> Result<Option<QpHandle>> {
        self.id_obj(Call::IdQp, id)?;
        let reg = self.reg();
        Ok(reg.verbs.qp_of_id.get(&id).map(|&q| QpHandle::from_raw(q)))
    }

    /// The live QP `h`.
    pub(crate) fn qp_obj(&self, call: Call, h: QpHandle) -> Result<Arc<QpObj>> {
        let reg = self.reg();
        reg.verbs
            .qps
            .get(&h.raw())
            .map(|e| Arc::clone(&e.obj))
            .ok_or_else(|| super::cqs::bad_handle(&reg, call, "QP", h.raw(), h))
    }

    pub(crate) fn create_external_qp_impl(&self, attr: &QpInitAttrEx) -> Result<QpHandle> {
        let call = Call::CreateExternalQp;
        if !matches!(attr.qp_type, QpType::Rc | QpType::Ud) {
            return Err(err(
                call,
                libc::EINVAL,
                format!(
                    "{:?}: only RC and UD QPs can be made apart from ids",
                    attr.qp_type
                ),
            ));
        }
        if attr.block_self_multicast_loopback {
            let why = "IBV_QP_CREATE_BLOCK_SELF_MCAST_LB apart from ids (such a QP joins no group)";
            return Err(err(call, libc::EINVAL, why));
        }
        let QpObjects {
            pd,
            send_cq: s,
            recv_cq: r,
            srq,
            ..
        } = self.qp_objects(call, attr, None)?;
        let raw = RawQp::create(
            &pd.raw,
            (&s.raw, &r.raw),
            srq.as_ref().map(|(_, o)| &o.raw),
            &caps(&attr.cap, attr.sq_sig_all, attr.qp_type),
        )
        .map_err(|e| c_err(call, e))?;
        let mut reg = self.reg();
        let Ok(key) = reg.issue() else {
            let _ = raw.destroy();
            return Err(keys_exhausted(call));
        };
        // The SRQ is still registered: `srq` holds it (a destroy is refused meanwhile).
        let srq_key = srq.as_ref().map(|(k, _)| *k);
        let obj = qp_obj(
            raw,
            (attr.cap, None),
            attr.qp_type == QpType::Ud,
            srq_key.is_some(),
        );
        let cqs = (attr.send_cq.raw(), attr.recv_cq.raw());
        self.insert_qp(&mut reg, key, obj, (None, attr.pd.raw()), cqs, srq_key);
        Ok(QpHandle::from_raw(key))
    }

    pub(crate) fn destroy_external_qp_impl(&self, h: QpHandle) -> Result<()> {
        let call = Call::DestroyExternalQp;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.qps.get(&h.raw()) else {
            return Err(super::cqs::bad_handle(&reg, call, "QP", h.raw(), h));
        };
        if let Some(id) = e.id {
            return Err(err(
                call,
                libc::EINVAL,
                format!("{h} is the QP of {id}: destroy_qp destroys it"),
            ));
        }
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let (pd, cqs, srq_key) = (e.pd, (e.send_cq, e.recv_cq), e.srq);
        let mut retired = reg.verbs.retire_qp(h.raw());
        let obj = retired.qp.take().expect("retired");
        let obj = Arc::try_unwrap(obj).unwrap_or_else(|_| unreachable!("last reference"));
        let QpObj {
            raw,
            cap,
            created,
            ud,
            srq,
            queues,
            ..
        } = obj;
        match raw.destroy() {
            Ok(()) => {
                let q = queues.into_inner().unwrap_or_else(|p| p.into_inner());
                for p in q.sq.values().chain(q.rq.values()) {
                    super::regions::release_all(&p.holds);
                }
                Ok(())
            }
            Err((errno, raw)) => {
                // Put it back as it was (its orphaned requests stay recorded twice: harmless).
                let obj = Arc::new(QpObj {
                    ctx: raw.ctx(),
                    qpn: raw.qp_num(),
                    raw,
                    cap,
                    created,
                    ud,
                    srq,
                    send_order: Mutex::new(()),
                    queues,
                });
                self.insert_qp(&mut reg, h.raw(), obj, (None, pd), cqs, srq_key);
                Err(c_err(call, errno))
            }
        }
    }

    pub(crate) fn init_qp_attr_impl(&self, id: IdHandle, state: QpState) -> Result<QpAttr> {
        let call = Call::InitQpAttr;
        if !matches!(state, QpState::Init | QpState::Rtr | QpState::Rts) {
            return Err(err(
                call,
                libc::EINVAL,
                format!("{state:?}: rdma_init_qp_attr gives INIT, RTR or RTS"),
            ));
        }
        self.on_id(call, id, |o| {
            if o.raw.ctx().is_none() {
                return Err(err(call, libc::EINVAL, format!("{id} has no device yet")));
            }
            let (a, _) = o
                .raw
                .init_qp_attr(state as u32)
                .map_err(|e| c_err(call, e))?;
            Ok(from_c(&a, state))
        })
    }

    pub(crate) fn modify_qp_impl(&self, h: QpHandle, attr: &QpAttr) -> Result<()> {
        let call = Call::ModifyQp;
        let qp = self.qp_obj(call, h)?;
        let Some(state) = attr.qp_state else {
            return Err(err(call, libc::EINVAL, "no qp_state"));
        };
        let (mut c, mask) = to_c(call, &qp, attr, state)?;
        qp.raw.modify(&mut c, mask).map_err(|e| c_err(call, e))?;
        if state == QpState::Reset {
            self.discard_requests(h, &qp);
        }
        Ok(())
    }

    /// After a move to RESET: outstanding requests are discarded, the device no longer
    /// touches their memory, but their completions may already be in a CQ.
    pub(crate) fn discard_requests(&self, h: QpHandle, qp: &QpObj) {
        let mut reg = self.reg();
        if let Some(e) = reg.verbs.qps.get(&h.raw()) {
            let (s, r) = (e.send_cq, e.recv_cq);
            reg.verbs.orphan_requests(qp, s, r);
        }
        drop(reg);
        let mut q = crate::registry::lock(&qp.queues);
        for p in q.sq.values().chain(q.rq.values()) {
            super::regions::release_all(&p.holds);
        }
        q.sq.clear();
        q.rq.clear();
    }

    pub(crate) fn query_qp_state_impl(&self, h: QpHandle) -> Result<QpState> {
        let call = Call::QueryQp;
        let qp = self.qp_obj(call, h)?;
        let s = qp.raw.state().map_err(|e| c_err(call, e))?;
        Ok(match s {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            _ => QpState::Error,
        })
    }

    pub(crate) fn query_qp_cap_impl(&self, h: QpHandle) -> Result<QpCap> {
        let call = Call::QueryQp;
        let qp = self.qp_obj(call, h)?;
        let c = qp.raw.cap().map_err(|e| c_err(call, e))?;
        Ok(QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        })
    }

    pub(crate) fn qp_number_impl(&self, h: QpHandle) -> Result<u32> {
        Ok(self.qp_obj(Call::QpNumber, h)?.qpn)
    }
}

/// The trait's attributes of a C `ibv_qp_attr` (the port number goes to `ah_attr.port_num`).
fn from_c(a: &QpAttrC, state: QpState) -> QpAttr {
    let g = a.ah_attr.grh;
    QpAttr {
        qp_state: Some(state),
        access: AccessFlags(a.qp_access_flags),
        dest_qp_num: a.dest_qp_num,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: gid_bytes(&g.dgid),
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            },
            dlid: a.ah_attr.dlid,
            sl: a.ah_attr.sl,
            src_path_bits: a.ah_attr.src_path_bits,
            static_rate: a.ah_attr.static_rate,
            is_global: a.ah_attr.is_global != 0,
            port_num: if a.ah_attr.port_num != 0 {
                a.ah_attr.port_num
            } else {
                a.port_num
            },
        },
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        max_rd_atomic: a.max_rd_atomic,
        pkey_index: a.pkey_index,
        qkey: a.qkey,
        cur_qp_state: None,
        path_mtu: u8::try_from(a.path_mtu).unwrap_or(0),
        en_sqd_async_notify: false,
    }
}

/// The C attributes and mask for moving `qp` to `state` with `attr`.
fn to_c(call: Call, qp: &QpObj, attr: &QpAttr, state: QpState) -> Result<(QpAttrC, i32)> {
    let mut c = crate::ffi::zeroed_qp_attr();
    c.qp_state = state as u32;
    let port = if attr.ah_attr.port_num == 0 {
        1
    } else {
        attr.ah_attr.port_num
    };
    if qp.ud {
        let mask = ud_mask(&mut c, attr, state, port);
        return Ok((c, mask));
    }
    let mask = match state {
        QpState::Init => {
            c.qp_access_flags = attr.access.0;
            c.port_num = port;
            c.pkey_index = 0;
            M_STATE | M_ACCESS | M_PKEY | M_PORT
        }
        QpState::Rtr => {
            c.path_mtu = qp.ctx.active_mtu(port).map_err(|e| c_err(call, e))?;
            c.dest_qp_num = attr.dest_qp_num;
            c.rq_psn = attr.rq_psn;
            c.max_dest_rd_atomic = attr.max_dest_rd_atomic;
            c.min_rnr_timer = attr.min_rnr_timer;
            crate::ffi::set_ah_attr(&mut c, &attr.ah_attr, port);
            M_STATE | M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN | M_MAX_DEST_RD_ATOMIC | M_MIN_RNR
        }
        QpState::Rts => {
            c.timeout = attr.timeout;
            c.retry_cnt = attr.retry_cnt;
            c.rnr_retry = attr.rnr_retry;
            c.sq_psn = attr.sq_psn;
            c.max_rd_atomic = attr.max_rd_atomic;
            M_STATE | M_TIMEOUT | M_RETRY | M_RNR_RETRY | M_SQ_PSN | M_MAX_RD_ATOMIC
        }
        QpState::Error | QpState::Reset => M_STATE,
        other => {
            return Err(err(
                call,
                libc::EINVAL,
                format!("{other:?}: modify_qp moves to RESET, INIT, RTR, RTS or ERROR"),
            ))
        }
    };
    Ok((c, mask))
}

/// The mask of a UD QP's move to `state` (as librdmacm moves an id's UD QP: INIT with
/// pkey index, port and qkey, RTR with the state only, RTS with the send PSN), and those
/// attributes set in `c`.
fn ud_mask(c: &mut QpAttrC, attr: &QpAttr, state: QpState, port: u8) -> i32 {
    match state {
        QpState::Init => {
            c.pkey_index = attr.pkey_index;
            c.port_num = port;
            c.qkey = attr.qkey;
            M_STATE | M_PKEY | M_PORT | M_QKEY
        }
        QpState::Rts => {
            c.sq_psn = attr.sq_psn;
            M_STATE | M_SQ_PSN
        }
        _ => M_STATE,
    }
}

/// The 16 bytes of a GID.
fn gid_bytes(g: &crate::ffi::Gid) -> [u8; 16] {
    crate::ffi::gid_raw(g)
}
