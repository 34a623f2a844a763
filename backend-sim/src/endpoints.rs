//! The world's side of the CM endpoints (`cm/endpoint.rs`): creating them for ids, feeding
//! them inputs, and carrying out their outputs: messages onto the wire, their one timer on the
//! timeline, and events for their ids as the kernel would queue them.
//!
//! Events produced here: CONNECT_RESPONSE, ESTABLISHED, REJECTED, UNREACHABLE, DISCONNECTED,
//! TIMEWAIT_EXIT.

use std::net::{IpAddr, SocketAddr};

use cmtwin::{AhAttr, Errno, EventKind, EventParam, GlobalRoute, Transport, UdData};

use crate::cm::endpoint::Endpoint;
use crate::cm::endpoint::{EpState, IrdOrd, Output, Timing};
use crate::cm::messages::{EpKey, Request};
use crate::engine::timeline::TimerKey;
use crate::store::{BoxedStore, KeyMap, OptKey};
use crate::world::{Action, CmState, DevKey, HostKey, IdKey, World};

/// An endpoint as the world keeps it: the machine, and where it lives.
pub(crate) struct EpRecord {
    /// The rdma_cm id, while it exists.
    pub owner: Option<IdKey>,
    pub host: HostKey,
    pub device: DevKey,
    /// The machine's one pending timer.
    pub timer: Option<TimerKey>,
    pub cm: Endpoint,
    /// For a passive IB CM endpoint: the requester's device and QP number, under which the
    /// CM's remote-QPN table holds the connection until its timewait ends (stale check).
    pub remote_qpn: Option<(DevKey, u32)>,
}

/// Every CM endpoint of the fabric, and how to find a passive one from its peer.
#[derive(Default)]
pub(crate) struct Endpoints {
    /// Each in an allocation of its own: the table holds one pointer per endpoint.
    pub eps: BoxedStore<EpRecord>,
    /// Passive endpoints by (host, the active endpoint they answer): finds duplicate REQs.
    pub passive_by_peer: KeyMap<(HostKey, EpKey), EpKey>,
    /// The CM's remote-QPN table: passive IB CM endpoints by (host, requester's device,
    /// requester's QP number), from the REQ until the end of their timewait (cm.c's
    /// `cm_insert_remote_qpn`): a REQ that matches one is from a stale connection.
    pub by_remote_qpn: KeyMap<(HostKey, DevKey, u32), EpKey>,
    /// Reused buffer for an endpoint's outputs.
    pub outputs: Vec<Output>,
    /// Moves on whenever an endpoint is forgotten or loses its owner: while it stands still,
    /// what [`World::drive`] read of an endpoint (owner, host, device) still holds, and the
    /// outputs it carries out need not look the endpoint up again.
    pub epoch: u64,
}

/// What carrying out an output needs of its endpoint, read by [`World::drive`] with its input.
#[derive(Clone, Copy)]
struct Seen {
    owner: Option<IdKey>,
    host: HostKey,
    dev: DevKey,
}

impl World {
    /// The CM timing endpoints follow.
    fn timing(&self) -> Timing {
        Timing {
            max_retries: self.cfg.max_cm_retries,
            fixed_timewait: self.cfg.timewait_override,
        }
    }

    fn add_endpoint(&mut self, owner: IdKey, cm: Endpoint) -> EpKey {
        let key = self.fresh_key();
        let id = self.id(owner);
        let record = EpRecord {
            owner: Some(owner),
            host: id.host,
            device: id.device.expect("endpoint ids have a device"),
            timer: None,
            cm,
            remote_qpn: None,
        };
        self.cm.eps.insert(key, record);
        self.id_mut(owner).ep = OptKey::some(key);
        key
    }

    /// A new active endpoint for the connecting id `owner`.
    pub(crate) fn new_active_endpoint(&mut self, owner: IdKey) -> EpKey {
        let id = self.id(owner);
        let transport = self.topo.devices[id.device.expect("a routed id has a device")].transport;
        let cm = Endpoint::active(
            transport,
            id.peer.map(|a| a.ip()),
            id.path_plt.unwrap_or(self.cfg.packet_life_time),
            self.cfg.timewait(),
            self.timing(),
        );
        self.add_endpoint(owner, cm)
    }

    /// A new passive endpoint for the child `owner` holding `req` from endpoint `from`.
    pub(crate) fn new_passive_endpoint(
        &mut self,
        owner: IdKey,
        from: EpKey,
        req: &Request,
        sidr: bool,
    ) -> EpKey {
        let transport =
            self.topo.devices[self.id(owner).device.expect("child on a device")].transport;
        let cm = Endpoint::passive(
            transport,
            sidr,
            from,
            Some(req.src.ip()),
            req.plt,
            req.ack_timeout,
            self.timing(),
        )
        .with_iw_initiator(IrdOrd {
            ird: req.conn.responder_resources,
            ord: req.conn.initiator_depth,
        });
        self.add_endpoint(owner, cm)
    }

    /// Whether id `id`, found as `i`, is an iWARP initiator whose MPA request is unanswered.
    pub(crate) fn awaits_mpa_reply(&self, id: IdKey, i: &crate::kernel::Id) -> bool {
        (i.ep.get())
            .and_then(|ep| self.cm.eps.get(&ep))
            .is_some_and(|e| e.owner == Some(id) && e.cm.awaits_mpa_reply())
    }

    /// Gives endpoint `ep` an input and carries out what it answers.
    pub(crate) fn drive<R>(
        &mut self,
        ep: EpKey,
        input: impl FnOnce(&mut Endpoint, &mut Vec<Output>) -> R,
    ) -> R {
        let mut out = std::mem::take(&mut self.cm.outputs);
        let record = self.cm.eps.get_mut(&ep).expect("live endpoint");
        let awaited = record.cm.awaits_mpa_reply();
        let r = input(&mut record.cm, &mut out);
        // Only an input moves an endpoint to IDLE, and a new one gets its remote QPN before
        // any input: an endpoint that this input did not leave IDLE holding one releases
        // nothing (a nested drive of it releases for itself).
        let may_release = record.remote_qpn.is_some() && record.cm.state() == EpState::Idle;
        let seen = Seen {
            owner: record.owner,
            host: record.host,
            dev: record.device,
        };
        if awaited && !record.cm.awaits_mpa_reply() {
            if let Some(owner) = record.owner {
                // A process waiting in rdma_destroy_id for this reply may go on.
                self.sched.wake_all(crate::process::mpa_reply_key(owner));
            }
        }
        let epoch = self.cm.epoch;
        for o in out.drain(..) {
            // An earlier output may have forgotten the endpoint or taken its owner away.
            let seen = (self.cm.epoch == epoch).then_some(seen);
            self.carry_out(ep, o, seen);
        }
        self.cm.outputs = out;
        if may_release {
            self.release_remote_qpn_if_idle(ep);
        }
        r
    }

    /// An IB CM endpoint back in IDLE (cm_reset_to_idle, or the end of its timewait) no longer
    /// holds the requester's QP number: `cm_cleanup_timewait` takes it out of the CM's
    /// remote-QPN table, so a new REQ from that QP is not refused as stale.
    fn release_remote_qpn_if_idle(&mut self, ep: EpKey) {
        let Some(e) = self.cm.eps.get_mut(&ep) else {
            return;
        };
        if e.cm.state() != EpState::Idle {
            return;
        }
        if let Some((dev, qpn)) = e.remote_qpn.take() {
            let key = (e.host, dev, qpn);
            self.unhold_remote_qpn(ep, key);
        }
    }

    /// siw_proc_mpareply: the initiator's driver moves its QP to RTS as it takes the MPA
    /// reply, before iw_cm reports the CONNECT_REPLY as ESTABLISHED; no RTU and no
    /// CONNECT_RESPONSE are involved (the passive side's QP went to RTS in `rdma_accept`).
    /// The QP is paired with the acceptor's, which the simulated TCP connection leads to.
    /// False when the QP cannot go to RTS (the application moved it past RTR, or destroyed
    /// the external QP the connect named): siw_proc_mpareply fails the connection.
    fn iw_initiator_qp_to_rts(&mut self, id: IdKey, ep: EpKey) -> bool {
        let peer_qpn = (self.cm.eps.get(&ep))
            .and_then(|e| e.cm.peer())
            .and_then(|p| self.cm.eps.get(&p))
            .and_then(|p| p.owner)
            .and_then(|acceptor| self.cm_qp_num(acceptor));
        let Some(qpn) = peer_qpn else {
            return true; // the acceptor is gone: nothing to pair the QP with
        };
        let own = self.id(id).req_conn.unwrap_or_default();
        self.id_mut(id).rep_conn = Some(cmtwin::ConnData {
            qp_num: qpn,
            retry_count: own.retry_count,
            rnr_retry_count: own.rnr_retry_count,
            ..cmtwin::ConnData::default()
        });
        self.iw_qp_to_rts(id)
    }

    /// siw_proc_mpareply could not move the initiator's QP to RTS: the CONNECT_REPLY
    /// carries -EINVAL (CONNECT_ERROR), and siw closes the TCP connection.
    fn iw_reply_failed(&mut self, id: IdKey, ep: EpKey) {
        let status = -(Errno::EINVAL.0);
        self.queue_event(
            id,
            EventKind::ConnectError,
            status,
            EventParam::None,
            Vec::new(),
        );
        self.drive(ep, |e, out| {
            e.disconnect(out);
            out.retain(|o| !matches!(o, Output::Disconnected(_)));
        });
    }

    /// Carries out `output` of endpoint `ep`, of which `seen` is what is known without a
    /// lookup (`None`: look it up; nothing is done for an endpoint that is gone).
    fn carry_out(&mut self, ep: EpKey, output: Output, seen: Option<Seen>) {
        let seen = match seen {
            Some(seen) => seen,
            None => match self.cm.eps.get(&ep) {
                Some(e) => Seen {
                    owner: e.owner,
                    host: e.host,
                    dev: e.device,
                },
                None => return,
            },
        };
        let Seen { owner, host, dev } = seen;
        match output {
            Output::Send { to, body } => {
                if self.topo.devices[dev].present {
                    self.send(host, ep, to, body);
                }
            }
            Output::SetTimer(after) => {
                // The pending timer cancelled and the new one set through one lookup
                // (`cancel_ep_timer` and `after` would each look the endpoint up again).
                let e = self.cm.eps.get_mut(&ep).expect("live endpoint");
                if let Some(pending) = e.timer.take() {
                    self.timeline.cancel(pending);
                }
                // The CM's timers run on the kernel's timer wheel (config.rs).
                let after = match self.cfg.kernel_hz {
                    Some(hz) => {
                        crate::config::kernel_timer_delay(self.now.as_duration(), after, hz)
                    }
                    None => after,
                };
                let at = self.now.after(after);
                e.timer = Some(self.timeline.schedule(at, Action::EpTimer { ep }));
            }
            Output::CancelTimer => self.cancel_ep_timer(ep),
            Output::Event {
                kind,
                status,
                param,
                data,
            } => {
                if let Some(id) = owner {
                    // Only an iWARP initiator's MPA reply ends in an ESTABLISHED event of
                    // its own endpoint (IB's active side gets CONNECT_RESPONSE).
                    if kind == EventKind::Established && !self.iw_initiator_qp_to_rts(id, ep) {
                        self.iw_reply_failed(id, ep);
                        return;
                    }
                    let gave_up = matches!(kind, EventKind::Unreachable | EventKind::Rejected);
                    if gave_up && self.topo.devices[dev].transport == Transport::Iwarp {
                        // siw gives the refused or unanswered connection up: its QP goes to
                        // ERROR (measured on siw).
                        self.cm_qp_to_error(id);
                    }
                    self.queue_event(id, kind, status, param, data);
                }
            }
            Output::Established(param) => {
                if let Some(id) = owner.filter(|id| self.id(*id).state == CmState::Connect) {
                    self.queue_event(id, EventKind::Established, 0, param, Vec::new());
                }
            }
            Output::SidrResolved { qpn, qkey, data } => {
                if let Some(id) = owner {
                    let ud = UdData {
                        ah_attr: self.path_ah_attr(id, dev),
                        qp_num: qpn,
                        qkey,
                    };
                    self.queue_event(id, EventKind::Established, 0, EventParam::Ud(ud), data);
                }
            }
            Output::Disconnected(status) => {
                if let Some(id) = owner {
                    if self.topo.devices[dev].transport == Transport::Iwarp {
                        self.cm_qp_connection_closed(id);
                    }
                    self.report_disconnected(id, status);
                }
            }
            Output::TimewaitExit => {
                if let Some(id) = owner.filter(|id| self.id(*id).state == CmState::Disconnect) {
                    self.queue_event(id, EventKind::TimewaitExit, 0, EventParam::None, Vec::new());
                }
            }
            Output::Finished => self.forget_endpoint(ep),
        }
    }

    fn cancel_ep_timer(&mut self, ep: EpKey) {
        if let Some(key) = self.cm.eps.get_mut(&ep).and_then(|e| e.timer.take()) {
            self.timeline.cancel(key);
        }
    }

    /// Endpoint `ep`'s timer fired.
    pub(crate) fn ep_timer(&mut self, ep: EpKey) {
        let Some(e) = self.cm.eps.get_mut(&ep) else {
            return;
        };
        e.timer = None;
        self.drive(ep, |e, out| e.on_timer(out));
    }

    /// Forgets an endpoint that has nothing left to do (or whose host lost it: power-off).
    pub(crate) fn forget_endpoint(&mut self, ep: EpKey) {
        if let Some(e) = self.cm.eps.remove(&ep) {
            self.cm.epoch += 1;
            // Its pending timer, cancelled from the record taken out (no second lookup).
            if let Some(pending) = e.timer {
                self.timeline.cancel(pending);
            }
            if let (false, Some(peer)) = (e.cm.is_active(), e.cm.peer()) {
                self.cm.passive_by_peer.remove(&(e.host, peer));
            }
            if let Some((dev, qpn)) = e.remote_qpn {
                self.unhold_remote_qpn(ep, (e.host, dev, qpn));
            }
        }
    }

    /// Takes passive endpoint `ep` out of its CM's remote-QPN table under `key`, if it is the
    /// one held there (one lookup when it is).
    fn unhold_remote_qpn(&mut self, ep: EpKey, key: (HostKey, DevKey, u32)) {
        if let Some(held) = self.cm.by_remote_qpn.remove(&key) {
            if held != ep {
                self.cm.by_remote_qpn.insert(key, held);
            }
        }
    }

    /// Enters passive endpoint `ep` in its CM's remote-QPN table under the requester's device
    /// and QP number.
    pub(crate) fn hold_remote_qpn(&mut self, ep: EpKey, remote: (DevKey, u32)) {
        let e = self.cm.eps.get_mut(&ep).expect("live endpoint");
        e.remote_qpn = Some(remote);
        let host = e.host;
        self.cm.by_remote_qpn.insert((host, remote.0, remote.1), ep);
    }

    /// The state of endpoint `ep`.
    pub(crate) fn ep_state(&self, ep: EpKey) -> EpState {
        self.cm.eps[&ep].cm.state()
    }

    /// REJ(`reason`, `data`) from `ep` if its state allows one; false if none applies.
    pub(crate) fn ep_reject(&mut self, ep: EpKey, reason: i32, data: &[u8]) -> bool {
        self.drive(ep, |e, out| e.reject(reason, data, out))
    }

    /// The IB CM side effects of destroying `ep`'s id (§7.4), leaving the endpoint ownerless.
    pub(crate) fn destroy_endpoint(&mut self, ep: EpKey) {
        let Some(e) = self.cm.eps.get_mut(&ep) else {
            return;
        };
        e.owner = None;
        self.cm.epoch += 1;
        self.drive(ep, |e, out| e.destroy(out));
    }

    /// DISCONNECTED, once, with the CONNECT → DISCONNECT transition (§3.3).
    pub(crate) fn report_disconnected(&mut self, id: IdKey, status: i32) {
        if self.id(id).state == CmState::Connect {
            self.id_mut(id).state = CmState::Disconnect;
            self.queue_event(
                id,
                EventKind::Disconnected,
                status,
                EventParam::None,
                Vec::new(),
            );
        }
    }

    /// The address handle attributes of connecting id `id`'s primary path on `dev`
    /// (`ib_init_ah_attr_from_path`): what a UD ESTABLISHED carries (cma.c
    /// `cma_sidr_rep_handler`) and what `rdma_init_qp_attr` gives for RTR (cm.c
    /// `cm_init_qp_rtr_attr`, from the IB CM endpoint's address vector). A RoCE path carries
    /// the active side's route (`cma_resolve_iboe_route`): the id's TOS when it resolved it as
    /// traffic class and, RoCE v2 being the only RoCE simulated, the flow label of
    /// [`roce_udp_flow_label`] from the active side's port to the passive side's. The passive
    /// side takes both from the REQ (cm.c `cm_format_paths_from_req`), not from its own TOS.
    pub(crate) fn path_ah_attr(&self, id: IdKey, dev: DevKey) -> AhAttr {
        let i = self.id(id);
        let peer = i.peer.expect("connecting id has a peer");
        let mut ah = self.ah_attr_to(dev, peer.ip());
        if self.topo.devices[dev].transport == Transport::Roce {
            let local = i.local.expect("connecting id is bound");
            let passive =
                i.ep.get()
                    .and_then(|ep| self.cm.eps.get(&ep))
                    .is_some_and(|e| !e.cm.is_active());
            let (src, dst) = if passive {
                (peer, local)
            } else {
                (local, peer)
            };
            ah.grh.traffic_class = i.path_tclass;
            ah.grh.flow_label = roce_udp_flow_label(src, dst);
        }
        ah
    }

    /// The address handle attributes to reach `ip` over `dev`.
    pub(crate) fn ah_attr_to(&self, dev: DevKey, ip: IpAddr) -> AhAttr {
        let gid = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let roce = self.topo.devices[dev].transport == Transport::Roce;
        AhAttr {
            grh: GlobalRoute {
                dgid: gid,
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: if roce { 0 } else { crate::topology::ib_lid(ip) },
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: roce,
            port_num: 1,
        }
    }
}

/// The flow label the rdma_cm gives a RoCE v2 route from `src` to `dst` (cma.c
/// `cma_get_roce_udp_flow_label`): the source's IPv6 flow label if it has one, else
/// (source port × 31 + destination port) masked to the label's 20 bits.
fn roce_udp_flow_label(src: SocketAddr, dst: SocketAddr) -> u32 {
    const FLOW_LABEL_MASK: u32 = 0xf_ffff;
    let given = match src {
        SocketAddr::V6(v6) => v6.flowinfo() & FLOW_LABEL_MASK,
        SocketAddr::V4(_) => 0,
    };
    if given != 0 {
        return given;
    }
    (u32::from(src.port()) * 31 + u32::from(dst.port())) & FLOW_LABEL_MASK
}
