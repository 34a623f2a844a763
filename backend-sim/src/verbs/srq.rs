//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, `ibv_post_srq_recv`, librdmacm's `rdma_create_srq` and
//! `rdma_destroy_srq` (`id->srq`), and QPs attached to an SRQ at creation.
//!
//! The SRQ keeps its receives; a QP attached to it is lent them for each input (`drive.rs`),
//! so that whichever QP a message reaches takes the oldest one, and a QP entering ERROR
//! leaves them (rxe's `check_resource` takes nothing from an SRQ in ERROR). The checks are
//! rxe's (`rxe_srq_chk_attr`, librxe's posts) on RoCE and InfiniBand and siw's
//! (`siw_create_srq`, `siw_modify_srq`) on iWARP.

use cmtwin::verbs::{RecvWr, SrqAttr, SrqAttrMask};
use cmtwin::{Call, CmError, Errno, IdHandle, PdHandle, Result, SrqHandle, Transport};

use super::posts::MAX_MSG_SZ;
use super::qps::queue_depth;
use super::rc::RecvEntry;
use super::{ObjKey, Srq};
use crate::config::KernelProfile;
use crate::world::{DevKey, HostKey, IdKey, World};

/// EINVAL of `call` saying `why`.
fn invalid(call: Call, why: String) -> CmError {
    CmError::new(call, Errno::EINVAL, why)
}

impl World {
    /// The live SRQ behind `h`.
    pub(crate) fn srq_key(&self, host: HostKey, call: Call, h: SrqHandle) -> Result<ObjKey> {
        self.unstamp(h.raw())
            .filter(|k| self.verbs.srqs.get(k).is_some_and(|s| s.host == host))
            .ok_or_else(|| {
                let why = format!("{h} is not a live shared receive queue of this host");
                CmError::new(call, Errno::EBADF, why)
            })
    }

    fn srq_handle(&self, key: ObjKey) -> SrqHandle {
        SrqHandle::from_raw(self.stamp(key))
    }

    /// `ibv_create_srq`.
    pub(crate) fn create_srq(
        &mut self,
        host: HostKey,
        pd: PdHandle,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        let pd = self.pd_key(host, Call::CreateSrq, pd)?;
        let (key, granted) = self.new_srq(host, Call::CreateSrq, pd, attr)?;
        self.own_verbs_object(key);
        Ok((self.srq_handle(key), granted))
    }

    /// An SRQ of `pd` as `attr` asks, checked as its device checks it; its key and the
    /// attributes written back.
    fn new_srq(
        &mut self,
        host: HostKey,
        call: Call,
        pd: ObjKey,
        attr: &SrqAttr,
    ) -> Result<(ObjKey, SrqAttr)> {
        let dev = self.verbs.pds[&pd].dev;
        let transport = self.topo.devices[dev].transport;
        let m = super::device_profile::maxima(transport);
        if attr.max_wr == 0 || attr.max_wr > m.srq_wr {
            let why = format!("max_wr {} outside 1..={}", attr.max_wr, m.srq_wr);
            return Err(invalid(call, why));
        }
        if attr.max_sge > m.srq_sge {
            let why = format!("max_sge {} above the device's {}", attr.max_sge, m.srq_sge);
            return Err(invalid(call, why));
        }
        let iwarp = transport == Transport::Iwarp;
        if iwarp && attr.srq_limit > attr.max_wr {
            let why = format!("srq_limit {} above max_wr {}", attr.srq_limit, attr.max_wr);
            return Err(invalid(call, why));
        }
        // As a QP's receive queue: rxe's power of two above, minus one (`rxe_queue_init`),
        // siw's power of two at or above (`siw_create_srq`).
        let holds = queue_depth(attr.max_wr, transport);
        let granted = SrqAttr {
            // rxe on Linux 6.1 writes back what was asked; rxe on 6.12 (measured) and siw
            // what they made.
            max_wr: match iwarp || self.cfg.kernel != KernelProfile::Linux61 {
                true => holds,
                false => attr.max_wr,
            },
            max_sge: attr.max_sge.max(1),
            srq_limit: attr.srq_limit,
        };
        let key = self.verbs.fresh();
        let srq = Srq {
            host,
            dev,
            pd,
            id: None,
            max_wr: holds,
            max_sge: granted.max_sge,
            limit: attr.srq_limit,
            rq: Default::default(),
            users: 0,
        };
        self.verbs.srqs.insert(key, srq);
        self.verbs.pds.get_mut(&pd).expect("live PD").users += 1;
        Ok((key, granted))
    }

    /// `ibv_modify_srq`.
    pub(crate) fn modify_srq(
        &mut self,
        host: HostKey,
        h: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<()> {
        let call = Call::ModifySrq;
        let key = self.srq_key(host, call, h)?;
        let srq = &self.verbs.srqs[&key];
        let transport = self.topo.devices[srq.dev].transport;
        let m = super::device_profile::maxima(transport);
        let resize = mask.contains(SrqAttrMask::MAX_WR);
        if resize && transport == Transport::Iwarp {
            let why = "siw does not resize an SRQ (IBV_SRQ_MAX_WR)";
            return Err(CmError::new(call, Errno::EOPNOTSUPP, why));
        }
        let mut holds = srq.max_wr;
        if resize {
            if attr.max_wr == 0 || attr.max_wr > m.srq_wr {
                let why = format!("max_wr {} outside 1..={}", attr.max_wr, m.srq_wr);
                return Err(invalid(call, why));
            }
            if srq.limit > 0 && attr.max_wr < srq.limit {
                let why = format!("max_wr {} below the armed limit {}", attr.max_wr, srq.limit);
                return Err(invalid(call, why));
            }
            holds = queue_depth(attr.max_wr, transport);
            if holds < srq.rq.len() as u32 {
                let why = format!("{holds} receives cannot hold the {} posted", srq.rq.len());
                return Err(invalid(call, why));
            }
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            // Against the queue as it is before a resize (rxe and siw).
            let bound = srq.max_wr.min(m.srq_wr);
            if attr.srq_limit > bound {
                let why = format!("srq_limit {} above the {bound} receives", attr.srq_limit);
                return Err(invalid(call, why));
            }
        }
        let srq = self.verbs.srqs.get_mut(&key).expect("checked");
        srq.max_wr = holds;
        if mask.contains(SrqAttrMask::LIMIT) {
            srq.limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq`.
    pub(crate) fn query_srq(&self, host: HostKey, h: SrqHandle) -> Result<SrqAttr> {
        let srq = &self.verbs.srqs[&self.srq_key(host, Call::QuerySrq, h)?];
        Ok(SrqAttr {
            max_wr: srq.max_wr,
            max_sge: srq.max_sge,
            srq_limit: srq.limit,
        })
    }

    /// `ibv_destroy_srq`.
    pub(crate) fn destroy_srq(&mut self, host: HostKey, h: SrqHandle) -> Result<()> {
        let call = Call::DestroySrq;
        let key = self.srq_key(host, call, h)?;
        if self.verbs.srqs[&key].id.is_some() {
            let why = format!("{h} is an id's (rdma_destroy_srq destroys it)");
            return Err(CmError::new(call, Errno::EBUSY, why));
        }
        self.remove_srq(call, key)
    }

    /// Destroys SRQ `key` unless a QP uses it (EBUSY): its receives go without completions.
    pub(crate) fn remove_srq(&mut self, call: Call, key: ObjKey) -> Result<()> {
        let users = self.verbs.srqs[&key].users;
        if users > 0 {
            let why = format!("{users} QPs take their receives from it");
            return Err(CmError::new(call, Errno::EBUSY, why));
        }
        let mut srq = self.verbs.srqs.remove(&key).expect("checked");
        for r in srq.rq.drain(..) {
            for s in r.sges.iter() {
                self.release_entry(srq.dev, s);
            }
        }
        self.verbs.pds.get_mut(&srq.pd).expect("live PD").users -= 1;
        if let Some(id) = srq.id {
            self.verbs.srq_of_id.remove(&id);
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub(crate) fn post_srq_recv(
        &mut self,
        host: HostKey,
        h: SrqHandle,
        wr: &RecvWr<'_>,
    ) -> Result<()> {
        let call = Call::PostSrqRecv;
        let key = self.srq_key(host, call, h)?;
        let srq = &self.verbs.srqs[&key];
        self.check_receive_has_entries(call, srq.dev, wr)?;
        let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        if len >= MAX_MSG_SZ {
            let why = format!("a receive of {len} bytes: messages are shorter than {MAX_MSG_SZ}");
            return Err(invalid(call, why));
        }
        if wr.sg_list.len() > srq.max_sge as usize {
            let why = format!(
                "{} entries exceed max_sge {}",
                wr.sg_list.len(),
                srq.max_sge
            );
            return Err(invalid(call, why));
        }
        if srq.rq.len() >= srq.max_wr as usize {
            let why = format!("the SRQ holds its {} receives", srq.max_wr);
            return Err(CmError::new(call, Errno::ENOMEM, why));
        }
        let dev = srq.dev;
        let entry = RecvEntry {
            wr_id: wr.wr_id,
            sges: self.hold_entries(dev, wr.sg_list),
        };
        let srq = self.verbs.srqs.get_mut(&key).expect("checked");
        srq.rq.push_back(entry);
        Ok(())
    }

    // ----- librdmacm's id->srq -----------------------------------------------------------

    /// `rdma_create_srq`: in `pd`, or the id's PD.
    pub(crate) fn create_id_srq(
        &mut self,
        host: HostKey,
        h: IdHandle,
        pd: Option<PdHandle>,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        let call = Call::CreateIdSrq;
        let (id, dev) = self.id_device(host, call, h)?;
        if self.verbs.srq_of_id.contains_key(&id) {
            return Err(invalid(call, format!("{h} already has an SRQ")));
        }
        let pd = match pd {
            Some(pd) => self.pd_key(host, call, pd)?,
            None => match self.qp_of(id) {
                Some(q) => self.verbs.qps[&q].pd,
                None => self.default_pd(host, dev),
            },
        };
        if self.verbs.pds[&pd].dev != dev {
            return Err(invalid(
                call,
                "the PD is on another device than the id".into(),
            ));
        }
        let (key, granted) = self.new_srq(host, call, pd, attr)?;
        self.verbs.srqs.get_mut(&key).expect("made").id = Some(id);
        self.verbs.srq_of_id.insert(id, key);
        Ok((self.srq_handle(key), granted))
    }

    /// `rdma_destroy_srq`.
    pub(crate) fn destroy_id_srq(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::DestroyIdSrq;
        let id = self.id_key(host, call, h)?;
        let key = *self
            .verbs
            .srq_of_id
            .get(&id)
            .ok_or_else(|| invalid(call, format!("{h} has no SRQ")))?;
        self.remove_srq(call, key)
    }

    /// `id->srq`.
    pub(crate) fn id_srq(&self, host: HostKey, h: IdHandle) -> Result<Option<SrqHandle>> {
        let id = self.id_key(host, Call::IdSrq, h)?;
        Ok(self.verbs.srq_of_id.get(&id).map(|&k| self.srq_handle(k)))
    }

    /// The id is gone: its SRQ stays, an SRQ of nobody's (`destroy_srq` destroys it).
    pub(crate) fn srq_forget_id(&mut self, id: IdKey) {
        if let Some(key) = self.verbs.srq_of_id.remove(&id) {
            self.verbs.srqs.get_mut(&key).expect("indexed SRQ").id = None;
        }
    }

    // ----- QPs attached --------------------------------------------------------------------

    /// The SRQ a new QP on `dev` takes its receives from: `asked`, or the id's
    /// (`rdma_create_qp_ex` takes `id->srq` when the attributes name none).
    pub(crate) fn srq_for_qp(
        &self,
        host: HostKey,
        call: Call,
        asked: Option<SrqHandle>,
        id: Option<IdKey>,
        dev: DevKey,
    ) -> Result<Option<ObjKey>> {
        let key = match asked {
            Some(h) => Some(self.srq_key(host, call, h)?),
            None => id.and_then(|id| self.verbs.srq_of_id.get(&id).copied()),
        };
        if key.is_some_and(|k| self.verbs.srqs[&k].dev != dev) {
            let why = "the SRQ is on another device than the QP".to_string();
            return Err(invalid(call, why));
        }
        Ok(key)
    }

    /// The `srq` flag `rdma_connect` and `rdma_accept` announce for id `id`: whether its QP
    /// has an SRQ (librdmacm's `id->qp->srq != NULL`), else what the parameters say.
    pub(crate) fn announced_srq(&self, id: IdKey, asked: u8) -> u8 {
        match self.qp_of(id) {
            Some(q) => u8::from(self.verbs.srq_of_qp.contains_key(&q)),
            None => asked,
        }
    }

    /// Attaches new QP `qp` to SRQ `srq`: its receives come from there from now on.
    pub(crate) fn attach_srq(&mut self, qp: ObjKey, srq: ObjKey) {
        let record = self.verbs.qps.get_mut(&qp).expect("live QP");
        record.machine.use_srq();
        self.verbs.srq_of_qp.insert(qp, srq);
        self.verbs.srqs.get_mut(&srq).expect("live SRQ").users += 1;
    }

    /// Detaches destroyed QP `qp` from its SRQ, if it has one.
    pub(crate) fn detach_srq(&mut self, qp: ObjKey) {
        let srq = self.verbs.srq_of_qp.remove(&qp);
        if let Some(s) = srq.and_then(|s| self.verbs.srqs.get_mut(&s)) {
            s.users -= 1;
        }
    }
}
