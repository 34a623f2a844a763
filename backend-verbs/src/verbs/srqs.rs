//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, `ibv_post_srq_recv`, and librdmacm's `id->srq` (`rdma_create_srq`,
//! `rdma_destroy_srq`).
//!
//! A receive posted to an SRQ goes to the device under a token of the backend's, as a QP's
//! does (`posts.rs`), with the high bit set and the SRQ's tag in bits 40..63: its completion
//! names the QP that consumed it, and the token leads back to the SRQ, its `wr_id` and the
//! regions it keeps registered until that completion is polled. Destroying an SRQ releases
//! the regions of the receives it still holds (the device is done with them) and keeps their
//! `wr_id`s for completions still in a CQ.
//!
//! An id's SRQ is made with `ibv_create_srq` in the id's PD (or the one given) and named in
//! `id->srq`, which is what `rdma_create_srq` does for a basic SRQ; `destroy_id_srq` clears
//! the field and destroys it (librdmacm's `rdma_destroy_srq` would also destroy the CQs the
//! id's QP completes into).

use std::sync::{Arc, Mutex};

use cmtwin::verbs::{RecvWr, SrqAttr, SrqAttrMask, WcOpcode};
use cmtwin::{Call, IdHandle, PdHandle, Result, SrqHandle};

use super::objects::{Posted, Queues, SrqEntry, SrqObj, VerbsObjects};
use super::posts::{hold, raw_sges};
use super::regions::{keys_for_post, release_all};
use crate::ffi::{RawSrq, SrqAttrC};
use crate::registry::{lock, Registry};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

/// The bit that marks an SRQ receive's token.
const SRQ_TOKEN: u64 = 1 << 63;
/// Where the SRQ's tag sits in a token.
const TAG_SHIFT: u32 = 40;

/// The C form of `attr`.
fn to_c(attr: &SrqAttr) -> SrqAttrC {
    SrqAttrC {
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        srq_limit: attr.srq_limit,
    }
}

/// The trait's form of `attr`.
fn from_c(attr: &SrqAttrC) -> SrqAttr {
    SrqAttr {
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        srq_limit: attr.srq_limit,
    }
}

/// The `wr_id` and opcode of the SRQ receive whose token `token` is, taken out with its
/// regions released; `None` for a token that is not an SRQ receive's.
pub(crate) fn take_srq_receive(reg: &mut Registry, token: u64) -> Option<(u64, WcOpcode)> {
    if token & SRQ_TOKEN == 0 {
        return None;
    }
    let tag = (token & !SRQ_TOKEN) >> TAG_SHIFT;
    let live = reg
        .verbs
        .srq_by_tag
        .get(&tag)
        .and_then(|k| reg.verbs.srqs.get(k))
        .and_then(|e| lock(&e.obj.posted).rq.remove(&token));
    match live {
        Some(p) => {
            release_all(&p.holds);
            Some((p.wr_id, p.opcode))
        }
        None => reg.verbs.srq_orphans.remove(&token),
    }
}

impl VerbsObjects {
    /// Forgets that `id` has an SRQ (the id is going; its SRQ stays, nobody's): whether it
    /// had one.
    pub(crate) fn forget_id_srq(&mut self, id: IdHandle) -> bool {
        match self.srq_of_id.remove(&id) {
            Some(k) => {
                if let Some(e) = self.srqs.get_mut(&k) {
                    e.id = None;
                }
                true
            }
            None => false,
        }
    }

    /// For the backend's drop, after its ids (and so every QP) are gone: destroys its SRQs.
    pub(crate) fn teardown_srqs(&mut self) {
        for (_, e) in std::mem::take(&mut self.srqs) {
            super::async_events::forget_srq(e.obj.raw.addr());
            if let Ok(obj) = Arc::try_unwrap(e.obj) {
                let posted = std::mem::take(&mut lock(&obj.posted).rq);
                if obj.raw.destroy().is_ok() {
                    for p in posted.values() {
                        release_all(&p.holds);
                    }
                }
            }
        }
        self.srq_of_id.clear();
        self.srq_by_tag.clear();
    }

    /// Takes SRQ `key` out if no QP uses it and no other call holds it.
    fn take_srq(&mut self, call: Call, key: u64) -> Result<SrqEntry> {
        let e = &self.srqs[&key];
        if e.users > 0 {
            let why = format!("{} QP(s) take their receives from it", e.users);
            return Err(err(call, libc::EBUSY, why));
        }
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(super::objects::in_use(call, "the SRQ", n));
        }
        let e = self.srqs.remove(&key).expect("checked");
        self.srq_by_addr.remove(&e.obj.raw.addr());
        self.srq_by_tag.remove(&e.obj.tag);
        if let Some(id) = e.id {
            self.srq_of_id.remove(&id);
        }
        Ok(e)
    }

    /// Puts back SRQ `e` of `key` that libibverbs refused to destroy.
    fn restore_srq(&mut self, key: u64, e: SrqEntry) {
        self.srq_by_addr.insert(e.obj.raw.addr(), key);
        self.srq_by_tag.insert(e.obj.tag, key);
        if let Some(id) = e.id {
            self.srq_of_id.insert(id, key);
        }
        self.srqs.insert(key, e);
    }
}

impl VerbsBackend {
    /// The live SRQ `h`.
    pub(crate) fn srq_obj(&self, call: Call, h: SrqHandle) -> Result<Arc<SrqObj>> {
        let reg = self.reg();
        reg.verbs
            .srqs
            .get(&h.raw())
            .map(|e| Arc::clone(&e.obj))
            .ok_or_else(|| super::cqs::bad_handle(&reg, call, "SRQ", h.raw(), h))
    }

    /// The SRQ a new QP takes its receives from: `asked`, else id `id`'s (librdmacm gives a
    /// QP `id->srq` when the attributes name none); its key and object.
    pub(crate) fn srq_for_qp(
        &self,
        call: Call,
        asked: Option<SrqHandle>,
        id: Option<IdHandle>,
    ) -> Result<Option<(u64, Arc<SrqObj>)>> {
        if let Some(h) = asked {
            return Ok(Some((h.raw(), self.srq_obj(call, h)?)));
        }
        let reg = self.reg();
        Ok(id
            .and_then(|id| reg.verbs.srq_of_id.get(&id))
            .map(|&k| (k, Arc::clone(&reg.verbs.srqs[&k].obj))))
    }

    /// `ibv_create_srq` in PD `pd`, recorded (for id `id`, if given).
    fn make_srq(
        &self,
        call: Call,
        pd: PdHandle,
        attr: &SrqAttr,
        id: Option<IdHandle>,
    ) -> Result<(u64, Arc<SrqObj>, SrqAttr)> {
        let pd_obj = self.pd_obj(call, pd)?;
        let (raw, granted) = RawSrq::create(&pd_obj.raw, to_c(attr)).map_err(|e| c_err(call, e))?;
        let mut reg = self.reg();
        let key = match (reg.issue(), reg.verbs.pds.contains_key(&pd.raw())) {
            (Ok(key), true) => key,
            (Ok(_), false) => {
                drop(reg);
                let _ = raw.destroy();
                return Err(err(call, libc::EBADF, format!("{pd} was deallocated")));
            }
            (Err(_), _) => {
                drop(reg);
                let _ = raw.destroy();
                return Err(keys_exhausted(call));
            }
        };
        let tag = reg.verbs.next_srq_tag;
        reg.verbs.next_srq_tag += 1;
        super::async_events::own_srq(raw.addr(), &self.shared.inbox);
        let obj = Arc::new(SrqObj {
            raw,
            ctx: pd_obj.ctx,
            tag,
            posted: Mutex::new(Queues::default()),
        });
        reg.verbs.srq_by_addr.insert(obj.raw.addr(), key);
        reg.verbs.srq_by_tag.insert(tag, key);
        reg.verbs.pds.get_mut(&pd.raw()).expect("checked").users += 1;
        if let Some(id) = id {
            reg.verbs.srq_of_id.insert(id, key);
        }
        let entry = SrqEntry {
            obj: Arc::clone(&obj),
            pd: pd.raw(),
            id,
            users: 0,
        };
        reg.verbs.srqs.insert(key, entry);
        Ok((key, obj, from_c(&granted)))
    }

    pub(crate) fn create_srq_impl(
        &self,
        pd: PdHandle,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        let (key, _, granted) = self.make_srq(Call::CreateSrq, pd, attr, None)?;
        Ok((SrqHandle::from_raw(key), granted))
    }

    pub(crate) fn create_id_srq_impl(
        &self,
        id: IdHandle,
        pd: Option<PdHandle>,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        let call = Call::CreateIdSrq;
        let pd = match pd {
            Some(pd) => pd,
            None => self.id_pd_impl(id)?,
        };
        let (ctx, _) = self.id_device(call, id)?;
        if self.pd_obj(call, pd)?.ctx != ctx {
            return Err(err(
                call,
                libc::EINVAL,
                "the PD is on another device than the id",
            ));
        }
        self.on_id(call, id, |o| {
            if self.reg().verbs.srq_of_id.contains_key(&id) {
                return Err(err(call, libc::EINVAL, format!("{id} already has an SRQ")));
            }
            let (key, obj, granted) = self.make_srq(call, pd, attr, Some(id))?;
            o.raw.set_srq(Some(&obj.raw));
            Ok((SrqHandle::from_raw(key), granted))
        })
    }

    pub(crate) fn modify_srq_impl(
        &self,
        h: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<()> {
        let call = Call::ModifySrq;
        let srq = self.srq_obj(call, h)?;
        let mask = i32::try_from(mask.0).map_err(|_| err(call, libc::EINVAL, "mask bits"))?;
        srq.raw.modify(to_c(attr), mask).map_err(|e| c_err(call, e))
    }

    pub(crate) fn query_srq_impl(&self, h: SrqHandle) -> Result<SrqAttr> {
        let call = Call::QuerySrq;
        let srq = self.srq_obj(call, h)?;
        srq.raw
            .query()
            .map(|a| from_c(&a))
            .map_err(|e| c_err(call, e))
    }

    pub(crate) fn destroy_srq_impl(&self, h: SrqHandle) -> Result<()> {
        let call = Call::DestroySrq;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.srqs.get(&h.raw()) else {
            return Err(super::cqs::bad_handle(&reg, call, "SRQ", h.raw(), h));
        };
        if let Some(id) = e.id {
            let why = format!("{h} is the SRQ of {id}: destroy_id_srq destroys it");
            return Err(err(call, libc::EBUSY, why));
        }
        let e = reg.verbs.take_srq(call, h.raw())?;
        self.destroy_taken_srq(&mut reg, h.raw(), e, call)
    }

    pub(crate) fn destroy_id_srq_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::DestroyIdSrq;
        self.on_id(call, id, |o| {
            let mut reg = self.reg();
            let Some(&key) = reg.verbs.srq_of_id.get(&id) else {
                return Err(err(call, libc::EINVAL, format!("{id} has no SRQ")));
            };
            let e = reg.verbs.take_srq(call, key)?;
            o.raw.set_srq(None);
            let r = self.destroy_taken_srq(&mut reg, key, e, call);
            if r.is_err() {
                let obj = Arc::clone(&reg.verbs.srqs[&key].obj);
                o.raw.set_srq(Some(&obj.raw));
            }
            r
        })
    }

    /// `ibv_destroy_srq` of SRQ `e` (taken out as `key`): its PD's count drops and its
    /// receives' regions are released; put back if libibverbs refuses.
    fn destroy_taken_srq(
        &self,
        reg: &mut Registry,
        key: u64,
        e: SrqEntry,
        call: Call,
    ) -> Result<()> {
        let SrqEntry { obj, pd, id, users } = e;
        let obj = Arc::try_unwrap(obj).unwrap_or_else(|_| unreachable!("checked by take_srq"));
        let SrqObj {
            raw,
            ctx,
            tag,
            posted,
        } = obj;
        let addr = raw.addr();
        match raw.destroy() {
            Ok(()) => {
                super::async_events::forget_srq(addr);
                if let Some(p) = reg.verbs.pds.get_mut(&pd) {
                    p.users -= 1;
                }
                let posted = posted.into_inner().unwrap_or_else(|p| p.into_inner());
                for (token, p) in posted.rq {
                    release_all(&p.holds);
                    reg.verbs.srq_orphans.insert(token, (p.wr_id, p.opcode));
                }
                Ok(())
            }
            Err((errno, raw)) => {
                let obj = Arc::new(SrqObj {
                    raw,
                    ctx,
                    tag,
                    posted,
                });
                reg.verbs.restore_srq(key, SrqEntry { obj, pd, id, users });
                Err(c_err(call, errno))
            }
        }
    }

    pub(crate) fn id_srq_impl(&self, id: IdHandle) -> Result<Option<SrqHandle>> {
        self.id_obj(Call::IdSrq, id)?;
        let reg = self.reg();
        Ok(reg
            .verbs
            .srq_of_id
            .get(&id)
            .map(|&k| SrqHandle::from_raw(k)))
    }

    pub(crate) fn post_srq_recv_impl(&self, h: SrqHandle, wr: &RecvWr<'_>) -> Result<()> {
        let call = Call::PostSrqRecv;
        let srq = self.srq_obj(call, h)?;
        let sges = raw_sges(wr.sg_list);
        let keys = keys_for_post();
        let holds = hold(&keys, srq.ctx.addr(), wr.sg_list);
        let token = {
            let mut q = lock(&srq.posted);
            let t = SRQ_TOKEN | (srq.tag << TAG_SHIFT) | ((q.next << 1) | 1);
            q.next = (q.next + 1) & ((1 << (TAG_SHIFT - 1)) - 1);
            q.rq.insert(
                t,
                Posted {
                    wr_id: wr.wr_id,
                    opcode: WcOpcode::Recv,
                    holds,
                },
            );
            t
        };
        let posted = srq.raw.post_recv(token, &sges);
        drop(keys);
        posted.map_err(|e| {
            if let Some(p) = lock(&srq.posted).rq.remove(&token) {
                release_all(&p.holds);
            }
            match e {
                libc::ENOMEM => err(call, e, "the SRQ holds as many receives as it can"),
                e => c_err(call, e),
            }
        })
    }
}
