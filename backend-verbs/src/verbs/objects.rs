//! The registry of verbs objects by handle, with the counts that make destroys refuse while
//! something uses the object. Lives inside the backend's `Registry` (one lock for ids,
//! channels and verbs objects). Calls clone an object's `Arc` under the lock and use it after;
//! a destroy takes the object out only when the registry's `Arc` is the last one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cmtwin::verbs::WcOpcode;
use cmtwin::{Call, CmError, IdHandle, QpCap};

use super::regions::Region;
use crate::err;
use crate::ffi::{RawAh, RawCompChannel, RawCq, RawCtx, RawPd, RawQp, RawSrq};

/// A protection domain.
pub(crate) struct PdObj {
    pub raw: RawPd,
    pub ctx: RawCtx,
}

/// A completion channel.
pub(crate) struct ChannelObj {
    pub raw: RawCompChannel,
    pub ctx: RawCtx,
}

/// A CQ.
pub(crate) struct CqObj {
    pub raw: RawCq,
    pub ctx: RawCtx,
}

/// A posted request not known to be complete.
pub(crate) struct Posted {
    /// The application's `wr_id`.
    pub wr_id: u64,
    /// What it completes as (error completions carry no opcode of their own).
    pub opcode: WcOpcode,
    /// The regions its entries name.
    pub holds: Vec<Arc<Region>>,
}

/// A QP's requests by token (a token's low bit says which queue: 1 for receives).
#[derive(Default)]
pub(crate) struct Queues {
    /// The next token number.
    pub next: u64,
    pub sq: BTreeMap<u64, Posted>,
    pub rq: BTreeMap<u64, Posted>,
}

/// A QP.
pub(crate) struct QpObj {
    pub raw: RawQp,
    pub ctx: RawCtx,
    pub qpn: u32,
    /// The capacities the QP has, as `ibv_query_qp` reads them (posts are checked against
    /// them).
    pub cap: QpCap,
    /// The capacities `ibv_create_qp` wrote back into the caller's `attr->cap` (what
    /// `rdma_create_ep` hands back); `None` for a QP made apart from ids.
    pub created: Option<QpCap>,
    /// A UD QP (its sends need a destination: an address handle).
    pub ud: bool,
    /// Takes its receives from an SRQ (it has no receive queue).
    pub srq: bool,
    /// Held across each `ibv_post_send`, so that tokens follow the send queue's order.
    pub send_order: Mutex<()>,
    pub queues: Mutex<Queues>,
}

/// A shared receive queue and its outstanding receives.
pub(crate) struct SrqObj {
    pub raw: RawSrq,
    pub ctx: RawCtx,
    /// Its number in its receives' tokens (`srqs.rs`).
    pub tag: u64,
    /// Receives by token, until their completion is polled.
    pub posted: Mutex<Queues>,
}

/// An SRQ and what uses it.
pub(crate) struct SrqEntry {
    pub obj: Arc<SrqObj>,
    pub pd: u64,
    /// The id whose SRQ it is (`id->srq`), if any.
    pub id: Option<IdHandle>,
    /// QPs taking their receives from it.
    pub users: u32,
}

/// An address handle.
pub(crate) struct AhObj {
    pub raw: RawAh,
    pub ctx: RawCtx,
}

/// An address handle in a PD.
pub(crate) struct AhEntry {
    pub obj: Arc<AhObj>,
    pub pd: u64,
}

/// A registered region in a PD.
pub(crate) struct MrEntry {
    pub region: Arc<Region>,
    pub pd: u64,
}

/// A PD and what uses it.
pub(crate) struct PdEntry {
    pub obj: Arc<PdObj>,
    /// Regions, QPs and address handles in it.
    pub users: u32,
    /// The backend's PD of its device (`id->pd`), freed with the backend.
    pub default: bool,
}

/// A completion channel and what reports to it.
pub(crate) struct ChannelEntry {
    pub obj: Arc<ChannelObj>,
    pub cqs: u32,
    /// Made by librdmacm for an id's QP, destroyed with it.
    pub implicit: bool,
}

/// A CQ, its channel and what uses it.
pub(crate) struct CqEntry {
    pub obj: Arc<CqObj>,
    pub channel: Option<u64>,
    /// QPs completing into it.
    pub users: u32,
    /// CQ events fetched and not acknowledged.
    pub unacked: u32,
    /// Made by librdmacm for an id's QP, destroyed with it.
    pub implicit: bool,
}

/// A QP and the objects it uses.
pub(crate) struct QpEntry {
    pub obj: Arc<QpObj>,
    /// The id it belongs to (`None`: made by `create_external_qp`).
    pub id: Option<IdHandle>,
    pub pd: u64,
    pub send_cq: u64,
    pub recv_cq: u64,
    /// The SRQ it takes its receives from.
    pub srq: Option<u64>,
}

/// Every verbs object of one backend value.
#[derive(Default)]
pub(crate) struct VerbsObjects {
    pub pds: BTreeMap<u64, PdEntry>,
    /// The default PD of each device context.
    pub default_pd: BTreeMap<usize, u64>,
    pub mrs: BTreeMap<u64, MrEntry>,
    pub ahs: BTreeMap<u64, AhEntry>,
    pub channels: BTreeMap<u64, ChannelEntry>,
    pub cqs: BTreeMap<u64, CqEntry>,
    pub cq_by_addr: BTreeMap<usize, u64>,
    pub qps: BTreeMap<u64, QpEntry>,
    pub qp_by_num: BTreeMap<(usize, u32), u64>,
    pub qp_of_id: BTreeMap<IdHandle, u64>,
    pub srqs: BTreeMap<u64, SrqEntry>,
    pub srq_by_addr: BTreeMap<usize, u64>,
    pub srq_of_id: BTreeMap<IdHandle, u64>,
    /// SRQs by the tag in their receives' tokens.
    pub srq_by_tag: BTreeMap<u64, u64>,
    /// The next SRQ's tag.
    pub next_srq_tag: u64,
    /// Receives of destroyed SRQs whose completions may still be in a CQ: token → (wr_id,
    /// opcode).
    pub srq_orphans: BTreeMap<u64, (u64, WcOpcode)>,
    /// Requests of destroyed or reset QPs whose completions may still be in a CQ:
    /// (context, QP number, token) → (wr_id, opcode, CQ key).
    pub orphans: BTreeMap<(usize, u32, u64), (u64, WcOpcode, u64)>,
    /// The anchor of each context the backend's PDs, CQs and channels live on.
    pub anchors: BTreeMap<usize, super::anchors::Anchor>,
}

/// What retiring a QP took out of the registry: to be dropped once librdmacm or libibverbs
/// has destroyed the QP (its regions are released then).
pub(crate) struct Retired {
    pub qp: Option<Arc<QpObj>>,
    pub cqs: Vec<Arc<CqObj>>,
    pub channels: Vec<Arc<ChannelObj>>,
}

impl Retired {
    /// Nothing retired.
    pub(crate) fn none() -> Self {
        Retired {
            qp: None,
            cqs: Vec::new(),
            channels: Vec::new(),
        }
    }
}

/// Dropped after the QP's destruction: its requests' regions are released.
impl Drop for Retired {
    fn drop(&mut self) {
        if let Some(qp) = &self.qp {
            lock_queues_clear(qp);
        }
    }
}

/// EBUSY for `call`: `what` is in use by other threads.
pub(crate) fn in_use(call: Call, what: impl std::fmt::Display, n: usize) -> CmError {
    err(
        call,
        libc::EBUSY,
        format!("{what} is in use by {n} call(s) in other threads"),
    )
}

impl VerbsObjects {
    /// Whether `id`'s QP (and what librdmacm made for it) can be retired now: no other thread
    /// inside a call on them, no unacknowledged CQ event of its implicit CQs.
    pub(crate) fn check_id_qp_retirable(&self, call: Call, id: IdHandle) -> Result<(), CmError> {
        let Some(&q) = self.qp_of_id.get(&id) else {
            return Ok(());
        };
        let e = &self.qps[&q];
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, format!("the QP of {id}"), n));
        }
        for cq in [e.send_cq, e.recv_cq] {
            let c = &self.cqs[&cq];
            if !c.implicit {
                continue;
            }
            if c.unacked > 0 {
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!(
                        "{} CQ event(s) of the CQs of {id}'s QP are not acknowledged \
                         (librdmacm would block destroying them)",
                        c.unacked
                    ),
                ));
            }
            let n = Arc::strong_count(&c.obj) - 1;
            if n > 0 {
                return Err(in_use(call, format!("a CQ of {id}'s QP"), n));
            }
            if let Some(ch) = c.channel {
                let n = Arc::strong_count(&self.channels[&ch].obj) - 1;
                if n > 0 {
                    return Err(in_use(
                        call,
                        format!("a completion channel of {id}'s QP"),
                        n,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Takes `id`'s QP out (checked by [`Self::check_id_qp_retirable`]), with the CQs and
    /// channels librdmacm made for it.
    pub(crate) fn retire_id_qp(&mut self, id: IdHandle) -> Retired {
        match self.qp_of_id.remove(&id) {
            Some(q) => self.retire_qp(q),
            None => Retired::none(),
        }
    }

    /// Takes QP `q` out of the registry: the counts of its PD and CQs drop, its implicit CQs
    /// and channels go too, and its outstanding requests become orphans (their completions
    /// may still be polled).
    pub(crate) fn retire_qp(&mut self, q: u64) -> Retired {
        let Some(e) = self.qps.remove(&q) else {
            return Retired::none();
        };
        if let Some(id) = e.id {
            self.qp_of_id.remove(&id);
        }
        let ctx = e.obj.ctx.addr();
        self.qp_by_num.remove(&(ctx, e.obj.qpn));
        super::async_events::forget_qp(ctx, e.obj.qpn);
        self.orphan_requests(&e.obj, e.send_cq, e.recv_cq);
        if let Some(pd) = self.pds.get_mut(&e.pd) {
            pd.users -= 1;
        }
        if let Some(s) = e.srq.and_then(|s| self.srqs.get_mut(&s)) {
            s.users -= 1;
        }
        let mut retired = Retired {
            qp: Some(e.obj),
            cqs: Vec::new(),
            channels: Vec::new(),
        };
        // Counted once per queue (twice for one CQ of both), as `insert_qp` counts.
        for cq in [e.send_cq, e.recv_cq] {
            if let Some(c) = self.cqs.get_mut(&cq) {
                c.users -= 1;
            }
        }
        let mut cqs = vec![e.send_cq];
        if e.recv_cq != e.send_cq {
            cqs.push(e.recv_cq);
        }
        for cq in cqs {
            let Some(c) = self.cqs.get(&cq) else {
                continue;
            };
            if c.implicit {
                let c = self.remove_cq(cq).expect("present");
                retired.cqs.push(c.obj);
                if let Some(ch) = c.channel.and_then(|ch| self.channels.remove(&ch)) {
                    retired.channels.push(ch.obj);
                }
            }
        }
        retired
    }

    /// Records the outstanding requests of `qp` as orphans of its CQs.
    pub(crate) fn orphan_requests(&mut self, qp: &QpObj, send_cq: u64, recv_cq: u64) {
        let q = crate::registry::lock(&qp.queues);
        let ctx = qp.ctx.addr();
        for (t, p) in &q.sq {
            self.orphans
                .insert((ctx, qp.qpn, *t), (p.wr_id, p.opcode, send_cq));
        }
        for (t, p) in &q.rq {
            self.orphans
                .insert((ctx, qp.qpn, *t), (p.wr_id, p.opcode, recv_cq));
        }
    }

    /// Removes CQ `cq` from the indexes (and its channel's count, and its orphans).
    pub(crate) fn remove_cq(&mut self, cq: u64) -> Option<CqEntry> {
        let c = self.cqs.remove(&cq)?;
        self.cq_by_addr.remove(&c.obj.raw.addr());
        super::async_events::forget_cq(c.obj.raw.addr());
        if let Some(ch) = c.channel.and_then(|ch| self.channels.get_mut(&ch)) {
            ch.cqs -= 1;
        }
        self.orphans.retain(|_, o| o.2 != cq);
        Some(c)
    }
}

impl VerbsObjects {
    /// For the backend's drop, before its ids are destroyed: destroys the QPs made apart from
    /// ids and forgets every QP (the ids' go with their ids).
    pub(crate) fn teardown_qps(&mut self) {
        for (_, e) in std::mem::take(&mut self.qps) {
            super::async_events::forget_qp(e.obj.ctx.addr(), e.obj.qpn);
            let obj = e.obj;
            lock_queues_clear(&obj);
            if let Ok(obj) = Arc::try_unwrap(obj) {
                let _ = obj.raw.destroy();
            }
        }
        self.qp_by_num.clear();
        self.qp_of_id.clear();
    }

    /// For the backend's drop, after its ids are destroyed: the CQs, channels, regions,
    /// address handles and PDs it made (no QP uses them any more).
    pub(crate) fn teardown_rest(&mut self) {
        for (_, c) in std::mem::take(&mut self.cqs) {
            super::async_events::forget_cq(c.obj.raw.addr());
            if let Ok(c) = Arc::try_unwrap(c.obj) {
                let _ = c.raw.destroy();
            }
        }
        for (_, ch) in std::mem::take(&mut self.channels) {
            if let Ok(ch) = Arc::try_unwrap(ch.obj) {
                let _ = ch.raw.destroy();
            }
        }
        let mut keys = super::regions::keys_for_change();
        for (_, m) in std::mem::take(&mut self.mrs) {
            keys.remove(&(m.region.ctx, m.region.raw.lkey()));
            if let Ok(r) = Arc::try_unwrap(m.region) {
                // A region libibverbs refuses to deregister is leaked, never freed.
                let _ = r.raw.dereg();
            }
        }
        drop(keys);
        for (_, a) in std::mem::take(&mut self.ahs) {
            if let Ok(a) = Arc::try_unwrap(a.obj) {
                let _ = a.raw.destroy();
            }
        }
        for (_, p) in std::mem::take(&mut self.pds) {
            if let Ok(p) = Arc::try_unwrap(p.obj) {
                let _ = p.raw.dealloc();
            }
        }
        for (_, a) in std::mem::take(&mut self.anchors) {
            super::anchors::release(a);
        }
    }
}

/// Releases and forgets the outstanding requests of `qp`.
fn lock_queues_clear(qp: &QpObj) {
    let mut q = crate::registry::lock(&qp.queues);
    for p in q.sq.values().chain(q.rq.values()) {
        super::regions::release_all(&p.holds);
    }
    q.sq.clear();
    q.rq.clear();
}
