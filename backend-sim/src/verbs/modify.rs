//! The external-QP path the CM supports: a QP made apart from any id (`ibv_create_qp`, in
//! RESET), whose number the application announces in `rdma_connect`'s or `rdma_accept`'s
//! parameters, driven through the attributes the CM computes (`rdma_init_qp_attr`) and
//! explicit transitions (`ibv_modify_qp`). The QPs the CM drives itself take the same
//! attributes ([`World::connection_attrs`]). A UD QP made apart goes through INIT (pkey
//! index 0, port 1, its qkey), RTR and RTS as librdmacm moves an id's; it sends to and
//! receives from any UD QP, but joins no multicast group (no `ibv_attach_mcast`).

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, QpAttr, QpInitAttrEx, QpState};
use cmtwin::{Call, CmError, Errno, IdHandle, PortSpace, QpHandle, QpType, Result, Transport};

use super::rc::RcParams;
use super::{QpMachine, RcQp, UdQp};
use crate::world::{HostKey, IdKey, World};

/// IB's encoding of `min_rnr_timer`, in units of 10 µs: 0 is 655.36 ms, 1 is 0.01 ms, ...
/// 31 is 491.52 ms.
const RNR_TIMER_10US: [u64; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
];

/// The wait an RNR NAK asks for, from `min_rnr_timer`'s encoding (5 bits).
pub(crate) fn rnr_timer(code: u8) -> Duration {
    Duration::from_micros(10 * RNR_TIMER_10US[usize::from(code & 31)])
}

/// The attributes of a connection's QP as the CM computes them.
pub(crate) struct ConnAttrs {
    /// The peer QP: (host, number).
    pub peer: (HostKey, u32),
    /// Timeout and retry counts.
    pub params: RcParams,
}

impl World {
    /// The attributes `rdma_init_qp_attr` gives id `id`'s QP for RTR and RTS: the peer's QP
    /// number (the REQ's on the passive side, the REP's on the active side), the id's ACK
    /// timeout (the ACK_TIMEOUT option, else the one computed from the path's packet life
    /// time), the REQ's transport retry count, and the RNR retry count of the REQ (passive)
    /// or REP (active). `None` while the peer's QP number is unknown.
    pub(crate) fn connection_attrs(&self, id: IdKey) -> Option<ConnAttrs> {
        let i = self.id(id);
        let req = i.req_conn?;
        let active = self.cm.eps.get(&i.ep.get()?)?.cm.is_active();
        let (dest, rnr_retry) = match active {
            true => {
                let rep = i.rep_conn?;
                (rep.qp_num, rep.rnr_retry_count)
            }
            false => (req.qp_num, req.rnr_retry_count),
        };
        let peer_host = self.topo.host_of_ip(i.peer?.ip())?;
        let plt = i.path_plt.unwrap_or(self.cfg.packet_life_time);
        let timeout = i
            .ack_timeout
            .unwrap_or_else(|| crate::config::ack_timeout(self.cfg.ca_ack_delay, plt));
        Some(ConnAttrs {
            peer: (peer_host, dest),
            params: RcParams {
                timeout,
                retry_count: req.retry_count.min(7),
                rnr_retry: rnr_retry.min(7),
            },
        })
    }

    /// The responder resources and initiator depth the id's IB CM id holds (cm.c's
    /// `cm_id_priv`), seen from this side: none before a REQ; the REQ's (swapped on the
    /// passive side: `req_conn` holds the REQ as sent) until the REP, then the REP's (on the
    /// active side `rep_conn` holds the CONNECT_RESPONSE's values, already swapped to its
    /// side: the REP's responder resources are its initiator depth). Measured on rxe-6.1
    /// and 6.12: a passive side accepting with `responder_resources` 0 and the device's
    /// initiator depth leaves the active QP `max_rd_atomic` 0 and `max_dest_rd_atomic`
    /// 128.
    pub(super) fn cm_resources(&self, id: IdKey) -> Option<(u8, u8)> {
        let i = self.id(id);
        let req = i.req_conn?;
        let active = self.cm.eps.get(&i.ep.get()?)?.cm.is_active();
        Some(match (active, i.rep_conn) {
            (true, Some(rep)) => (rep.responder_resources, rep.initiator_depth),
            (true, None) => (req.responder_resources, req.initiator_depth),
            (false, Some(rep)) => (rep.responder_resources, rep.initiator_depth),
            (false, None) => (req.initiator_depth, req.responder_resources),
        })
    }

    /// The access flags `rdma_init_qp_attr` gives for INIT. cm_init_qp_init_attr: remote
    /// write, and remote read and atomics when the CM holds responder resources; before a
    /// REQ the id has no IB CM id and cma_ib_init_qp_attr gives none (measured on rxe-6.1:
    /// 0x0 before rdma_connect, 0xe with resources, 0x2 without).
    pub(super) fn cm_access(&self, id: IdKey) -> AccessFlags {
        access_for(self.cm_resources(id))
    }

    /// `ibv_create_qp`: an RC, UC or UD QP of `attr`'s PD and CQs, in RESET, on no id.
    pub(crate) fn create_external_qp(
        &mut self,
        host: HostKey,
        attr: &QpInitAttrEx,
    ) -> Result<QpHandle> {
        let call = Call::CreateExternalQp;
        if attr.block_self_multicast_loopback {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "IBV_QP_CREATE_BLOCK_SELF_MCAST_LB apart from ids (such a QP joins no group)",
            ));
        }
        let objects = self.qp_objects(host, call, attr, None)?;
        let (dev, pd, cqs) = (objects.dev, objects.pd, objects.cqs);
        let transport = self.topo.devices[dev].transport;
        if !super::makes_qp_type(transport, attr.qp_type) {
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                format!("{:?} QPs do not exist on iWARP", attr.qp_type),
            ));
        }
        let qpn = self.draw_qp_number(host, dev);
        let cap = super::qps::without_rq(attr.cap, objects.srq.is_some());
        let (cap, sig_all) = (super::device_cap(cap, transport), attr.sq_sig_all);
        let rc = || RcQp::new(cap, sig_all).in_reset();
        let ud = || UdQp::new(qpn, cap, sig_all, 0).in_reset();
        let machine = match (attr.qp_type, transport) {
            (QpType::Ud, Transport::Roce) => QpMachine::Ud(ud().on_rxe(self.cfg.kernel)),
            (QpType::Ud, _) => QpMachine::Ud(ud()),
            (QpType::Uc, Transport::Roce) => QpMachine::Rc(rc().unreliable().on_rxe()),
            (QpType::Uc, _) => QpMachine::Rc(rc().unreliable()),
            (QpType::Rc, Transport::Iwarp) => QpMachine::Rc(rc().on_siw()),
            (QpType::Rc, Transport::Roce) => QpMachine::Rc(rc().on_rxe()),
            (QpType::Rc, Transport::InfiniBand) => QpMachine::Rc(rc()),
        };
        let key = self.insert_qp((host, dev, None), qpn, pd, cqs, false, machine);
        self.own_verbs_object(key);
        if let Some(srq) = objects.srq {
            self.attach_srq(key, srq);
        }
        Ok(QpHandle::from_raw(self.stamp(key)))
    }

    /// `ibv_destroy_qp` of a QP on no id.
    pub(crate) fn destroy_external_qp(&mut self, host: HostKey, h: QpHandle) -> Result<()> {
        let call = Call::DestroyExternalQp;
        let key = self.qp_key(host, call, h)?;
        if self.verbs.qps[&key].id.is_some() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the QP belongs to an id: rdma_destroy_qp destroys it",
            ));
        }
        self.drop_external_qp(key);
        Ok(())
    }

    /// Destroys external QP `key` as `ibv_destroy_qp` does (on iWARP the connection drops).
    pub(crate) fn drop_external_qp(&mut self, key: super::ObjKey) {
        self.siw_destroy_qp(key);
        self.iw_qp_destroyed(key);
        self.remove_qp(key);
    }

    /// `rdma_init_qp_attr`. A connected id's RTR attributes are the peer's QP number and the
    /// address handle of its primary path ([`World::path_ah_attr`]); its RTS attributes the
    /// timeout and retry counts (and neither an address handle nor a peer QP number).
    pub(crate) fn init_qp_attr(
        &mut self,
        host: HostKey,
        h: IdHandle,
        state: QpState,
    ) -> Result<QpAttr> {
        let call = Call::InitQpAttr;
        let (key, dev) = self.id_device(host, call, h)?;
        let mut attr = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        let ps = self.id(key).ps;
        if matches!(state, QpState::Init | QpState::Rtr | QpState::Rts)
            && (ps == PortSpace::UDP || ps == PortSpace::IPOIB)
        {
            attr.pkey_index = 0;
            attr.ah_attr.port_num = 1;
            attr.qkey = self.id(key).qkey;
            return Ok(attr);
        }
        if matches!(state, QpState::Init | QpState::Rtr | QpState::Rts)
            && self.topo.devices[dev].transport == Transport::Iwarp
        {
            return self.iw_init_qp_attr(key, state);
        }
        if matches!(state, QpState::Init | QpState::Rtr | QpState::Rts) {
            self.check_cm_gives_qp_attrs(call, key)?;
        }
        match state {
            QpState::Init => {
                attr.access = self.cm_access(key);
                return Ok(attr);
            }
            QpState::Rtr | QpState::Rts => {}
            other => {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!("no attributes for {other:?} (INIT, RTR or RTS)"),
                ))
            }
        }
        let c = self.connection_attrs(key).ok_or_else(|| {
            CmError::new(
                call,
                Errno::EINVAL,
                "the peer's QP number is not known yet (no request, or no REP processed)",
            )
        })?;
        // Each state gets what cm.c sets for it (cm_init_qp_rtr_attr, cm_init_qp_rts_attr);
        // ucma zeroes the rest.
        // The CM's responder resources bound the incoming reads and atomics (RTR), its
        // initiator depth the outgoing ones (RTS), as cm.c sets them (measured on rxe-6.1).
        let (responder_resources, initiator_depth) = self.cm_resources(key).unwrap_or_default();
        if state == QpState::Rtr {
            attr.dest_qp_num = c.peer.1;
            attr.ah_attr = self.path_ah_attr(key, dev);
            attr.max_dest_rd_atomic = responder_resources;
        } else {
            attr.max_rd_atomic = initiator_depth;
            attr.timeout = c.params.timeout;
            attr.retry_cnt = c.params.retry_count;
            attr.rnr_retry = c.params.rnr_retry;
        }
        Ok(attr)
    }

    /// `ibv_modify_qp` to `attr.qp_state` with the mask of that transition
    /// ([`super::modify_mask::transition_mask`]).
    pub(crate) fn modify_qp(&mut self, host: HostKey, h: QpHandle, attr: &QpAttr) -> Result<()> {
        let call = Call::ModifyQp;
        let q = self.qp_key(host, call, h)?;
        let Some(to) = attr.qp_state else {
            return Err(CmError::new(call, Errno::EINVAL, "no qp_state to move to"));
        };
        let qp_type = self.verbs.qps[&q].machine.qp_type();
        let (attr, mask) = super::modify_mask::transition_mask(qp_type, to, attr);
        self.modify_qp_with_mask(host, h, &attr, mask)
    }

    /// Any state → RESET: outstanding requests are discarded without completions.
    pub(super) fn reset_qp(&mut self, q: super::ObjKey) {
        self.verbs.kept_requests.remove(&q);
        let qp = self.verbs.qps.get_mut(&q).expect("live QP");
        let dev = qp.dev;
        qp.peer = None;
        let timer = qp.timer.take();
        let discarded = qp.machine.discard();
        if let Some((t, _)) = timer {
            self.timeline.cancel(t);
        }
        for s in &discarded {
            self.release_entry(dev, s);
        }
    }
}

/// The IP address a path's destination GID carries (IPv4-mapped or IPv6).
pub(super) fn dgid_ip(ah: &cmtwin::AhAttr) -> IpAddr {
    let v6 = Ipv6Addr::from(ah.grh.dgid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// [`World::cm_access`] of an id whose CM holds the resources `held` (from `cm_resources`).
pub(super) fn access_for(held: Option<(u8, u8)>) -> AccessFlags {
    match held {
        None => AccessFlags::NONE,
        Some((0, _)) => AccessFlags::REMOTE_WRITE,
        Some(_) => {
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
        }
    }
}
