//! The IB CM (and, with its differences, the iWARP CM): one endpoint per connection attempt,
//! its message handling, retransmissions and timewait (CM-SEMANTICS.md §15.1, §5.2, §7).
//!
//! Events produced here: CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED (passive; UD active),
//! REJECTED, UNREACHABLE, DISCONNECTED, TIMEWAIT_EXIT.

use std::net::IpAddr;
use std::time::Duration;

use cmtwin::{
    AhAttr, ConnData, EventKind, EventParam, GlobalRoute, IbRejReason, PrivateDataOp, SidrStatus,
    Transport, UdData,
};

use crate::config::{cm_ms, mra_timeout, req_timeout};
use crate::engine::timeline::TimerKey;
use crate::engine::trace::{Entry, TraceKind};
use crate::wire::{padded, Body, Dest, Request};
use crate::world::{Action, AddrinfoState, CmState, DevKey, EpKey, HostKey, Id, IdKey, World};

/// IB CM endpoint states (§15.1). "MRA prepared" states are folded into the received ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EpState {
    Idle,
    ReqSent,
    MraReqRcvd,
    /// REQ received; duplicates are answered with an MRA.
    ReqRcvd,
    RepSent,
    MraRepRcvd,
    /// REP received; duplicates are answered with an MRA.
    RepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

/// One side of one connection attempt.
pub(crate) struct Endpoint {
    /// The rdma_cm id, while it exists.
    pub owner: Option<IdKey>,
    pub host: HostKey,
    pub device: DevKey,
    pub transport: Transport,
    pub state: EpState,
    /// The peer's endpoint, once known.
    pub peer: Option<EpKey>,
    pub active: bool,
    /// The pending retransmission or timewait timer.
    pub timer: Option<TimerKey>,
    pub retries_left: u32,
    pub retry: Option<(Dest, Body)>,
    pub interval: Duration,
    /// This side's timewait.
    pub timewait: Duration,
    /// The peer's address (an active endpoint reaches the passive CM through it before it
    /// knows the passive endpoint).
    pub remote_ip: Option<IpAddr>,
    /// The path's packet life time exponent (sets the REQ/DREQ retransmission interval).
    pub plt: u8,
}

impl World {
    /// Creates an endpoint for `owner` in `state`.
    pub(crate) fn new_endpoint(&mut self, owner: IdKey, state: EpState, active: bool) -> EpKey {
        let key = self.fresh_key();
        let id = self.id(owner);
        let device = id.device.expect("endpoint ids have a device");
        let ep = Endpoint {
            owner: Some(owner),
            host: id.host,
            device,
            transport: self.devices[device].transport,
            state,
            peer: None,
            active,
            timer: None,
            retries_left: 0,
            retry: None,
            interval: Duration::ZERO,
            timewait: self.cfg.timewait(),
            remote_ip: id.peer.map(|a| a.ip()),
            plt: id.path_plt.unwrap_or(self.cfg.packet_life_time),
        };
        self.eps.insert(key, ep);
        self.id_mut(owner).ep = Some(key);
        key
    }

    pub(crate) fn ep_state(&self, ep: EpKey) -> EpState {
        self.eps[&ep].state
    }

    pub(crate) fn set_ep_state(&mut self, ep: EpKey, state: EpState) {
        self.eps.get_mut(&ep).expect("endpoint").state = state;
    }

    /// Sends `body` from `ep` to `to` once (nothing leaves a removed device).
    pub(crate) fn ep_send(&mut self, ep: EpKey, to: Dest, body: Body) {
        let (host, dev) = (self.eps[&ep].host, self.eps[&ep].device);
        if self.devices[dev].present {
            self.send(host, ep, to, body);
        }
    }

    /// Sends `body` and retransmits it every `interval` until cancelled or out of retries.
    pub(crate) fn ep_send_retrying(&mut self, ep: EpKey, to: Dest, body: Body, interval: Duration) {
        self.cancel_ep_timer(ep);
        let retries = self.cfg.max_cm_retries;
        let e = self.eps.get_mut(&ep).expect("endpoint");
        e.retries_left = retries;
        e.retry = Some((to, body.clone()));
        e.interval = interval;
        self.ep_send(ep, to, body);
        self.set_ep_timer(ep, interval, Action::EpTimer { ep });
    }

    /// Cancels `ep`'s pending timer, if any.
    fn cancel_ep_timer(&mut self, ep: EpKey) {
        if let Some(key) = self.eps.get_mut(&ep).and_then(|e| e.timer.take()) {
            self.timeline.cancel(key);
        }
    }

    /// Sets `ep`'s one timer to run `action` after `delay`.
    fn set_ep_timer(&mut self, ep: EpKey, delay: Duration, action: Action) {
        let key = self.after(delay, action);
        self.eps.get_mut(&ep).expect("endpoint").timer = Some(key);
    }

    /// Cancels `ep`'s retransmission.
    pub(crate) fn ep_cancel(&mut self, ep: EpKey) {
        self.cancel_ep_timer(ep);
        if let Some(e) = self.eps.get_mut(&ep) {
            e.retry = None;
        }
    }

    /// Restarts the retransmission timer with a new interval (after an MRA).
    fn ep_stretch(&mut self, ep: EpKey, interval: Duration) {
        self.cancel_ep_timer(ep);
        self.eps.get_mut(&ep).expect("endpoint").interval = interval;
        self.set_ep_timer(ep, interval, Action::EpTimer { ep });
    }

    /// The retransmission timer of `ep` fired.
    pub(crate) fn ep_timer(&mut self, ep: EpKey) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        e.timer = None;
        if e.retry.is_none() {
            return;
        }
        if e.retries_left > 0 {
            e.retries_left -= 1;
            let (to, body) = e.retry.clone().expect("checked");
            let interval = e.interval;
            self.ep_send(ep, to, body);
            self.set_ep_timer(ep, interval, Action::EpTimer { ep });
            return;
        }
        e.retry = None;
        let state = e.state;
        let owner = e.owner;
        match state {
            EpState::ReqSent | EpState::MraReqRcvd | EpState::RepSent | EpState::MraRepRcvd => {
                self.set_ep_state(ep, EpState::Idle);
                if let Some(id) = owner {
                    self.queue_event(
                        id,
                        EventKind::Unreachable,
                        -110,
                        EventParam::None,
                        Vec::new(),
                    );
                }
            }
            EpState::SidrReqSent => {
                self.set_ep_state(ep, EpState::Idle);
                if let Some(id) = owner {
                    let param = EventParam::Ud(UdData::default());
                    self.queue_event(id, EventKind::Unreachable, -110, param, Vec::new());
                }
            }
            EpState::DreqSent => {
                self.enter_timewait(ep);
                if let Some(id) = owner {
                    self.report_disconnected(id, -110);
                }
            }
            _ => {}
        }
    }

    /// Enters timewait (IB, RoCE) or goes idle (iWARP has none).
    pub(crate) fn enter_timewait(&mut self, ep: EpKey) {
        self.ep_cancel(ep);
        let e = &self.eps[&ep];
        if e.transport == Transport::Iwarp {
            self.set_ep_state(ep, EpState::Idle);
            self.reap_endpoint(ep);
            return;
        }
        let tw = e.timewait;
        self.set_ep_state(ep, EpState::Timewait);
        self.set_ep_timer(ep, tw, Action::TimewaitDone { ep });
    }

    /// Timewait ended: TIMEWAIT_EXIT if the id is still in DISCONNECT (§7.4).
    pub(crate) fn timewait_done(&mut self, ep: EpKey) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        e.timer = None;
        if e.state != EpState::Timewait {
            return;
        }
        let owner = e.owner;
        self.set_ep_state(ep, EpState::Idle);
        if let Some(id) = owner {
            if self.id(id).state == CmState::Disconnect {
                self.queue_event(id, EventKind::TimewaitExit, 0, EventParam::None, Vec::new());
            }
        }
        self.reap_endpoint(ep);
    }

    /// Forgets an endpoint whose id is gone and which has nothing left to do.
    pub(crate) fn reap_endpoint(&mut self, ep: EpKey) {
        if let Some(e) = self.eps.get(&ep) {
            if e.owner.is_none() && matches!(e.state, EpState::Idle) {
                if let (false, Some(peer)) = (e.active, e.peer) {
                    self.passive_by_peer.remove(&(e.host, peer));
                }
                self.eps.remove(&ep);
            }
        }
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

    /// The address handle attributes to reach `ip` over `dev`.
    pub(crate) fn ah_attr_to(&self, dev: DevKey, ip: IpAddr) -> AhAttr {
        let gid = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let roce = self.devices[dev].transport == Transport::Roce;
        AhAttr {
            grh: GlobalRoute {
                dgid: gid,
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: if roce { 0 } else { 1 + (gid[15] as u16) },
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: roce,
            port_num: 1,
        }
    }

    // ----- passive: requests ---------------------------------------------------------------

    /// A REQ or SIDR REQ arrives at `host` on device `dev` (§4.9).
    pub(crate) fn on_req(
        &mut self,
        host: HostKey,
        dev: DevKey,
        from: EpKey,
        req: Request,
        sidr: bool,
    ) {
        // A duplicate of a request we already hold: answer with an MRA while it is undecided.
        let dup = self
            .passive_by_peer
            .get(&(host, from))
            .map(|ep| (*ep, self.eps[ep].state));
        if let Some((ep, state)) = dup {
            if state == EpState::ReqRcvd {
                self.ep_send(ep, Dest::Ep(from), Body::Mra);
            }
            return;
        }
        let reply_rej = |w: &mut World, reason: i32| {
            let transport = w.devices[dev].transport;
            let body = if sidr {
                let status = if reason == IbRejReason::INVALID_SERVICE_ID {
                    SidrStatus::UNSUPPORTED
                } else {
                    SidrStatus::REJECT
                };
                let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::RejectUd);
                Body::SidrRep {
                    status,
                    qpn: 0,
                    qkey: 0,
                    data: padded(&[], len),
                }
            } else {
                let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::Reject);
                Body::Rej {
                    reason,
                    data: padded(&[], len),
                }
            };
            w.send(host, 0, Dest::Ep(from), body);
        };
        let Some(listener) = self.find_listener(host, dev, &req) else {
            reply_rej(self, IbRejReason::INVALID_SERVICE_ID);
            return;
        };
        let (l_qp_type, l_state, ls, l_sync, l_channel) = {
            let l = self.id(listener);
            (
                l.qp_type,
                l.state,
                l.listen.expect("listening"),
                l.sync,
                l.channel,
            )
        };
        // The request's QP type must be the listener's (§13.1).
        if l_qp_type != req.qp_type || l_state != CmState::Listen {
            reply_rej(self, IbRejReason::CONSUMER_DEFINED);
            return;
        }
        if ls.pending >= ls.backlog {
            let listener = self.id_handle(listener);
            self.record(Some(host), TraceKind::Drop, Entry::BacklogFull { listener });
            return;
        }
        // The new child id, in CONNECT, bound to the receiving device, not yet owned by user space.
        let child_key = self.fresh_key();
        let (channel, sync) = if l_sync {
            (self.new_private_channel(host, child_key), true)
        } else {
            (l_channel, false)
        };
        let l = self.id(listener);
        let child = Id {
            host,
            channel,
            sync,
            context: l.context,
            ps: l.ps,
            qp_type: l.qp_type,
            state: CmState::Connect,
            device: Some(dev),
            local: Some(std::net::SocketAddr::new(
                req.dst.ip(),
                l.local.map_or(req.dst.port(), |a| a.port()),
            )),
            peer: Some(req.src),
            port: None,
            reuseaddr: false,
            afonly: l.afonly,
            tos: l.tos,
            ack_timeout: None,
            path_plt: Some(req.plt),
            qp: None,
            qkey: l.qkey,
            ep: None,
            listen: None,
            owned: false,
            sync_event: None,
            op_gen: 0,
            multicast: Default::default(),
            addrinfo: AddrinfoState::None,
            torn_down: false,
            reported: 0,
            queued: 0,
            request_queued_on: None,
            unacked: 0,
        };
        self.ids.insert(child_key, child);
        let ep = self.new_endpoint(
            child_key,
            if sidr {
                EpState::SidrReqRcvd
            } else {
                EpState::ReqRcvd
            },
            false,
        );
        self.passive_by_peer.insert((host, from), ep);
        {
            let e = self.eps.get_mut(&ep).expect("new endpoint");
            e.peer = Some(from);
            e.timewait = Duration::from_millis(cm_ms(req.ack_timeout));
            if let Some(tw) = self.cfg.timewait_override {
                e.timewait = tw;
            }
        }
        self.id_mut(listener)
            .listen
            .as_mut()
            .expect("listening")
            .pending += 1;
        let param = if sidr {
            EventParam::Ud(UdData::default())
        } else {
            // The child sees the peer's resources from its own side: swapped.
            EventParam::Conn(ConnData {
                responder_resources: req.conn.initiator_depth,
                initiator_depth: req.conn.responder_resources,
                ..req.conn
            })
        };
        self.queue_event_full(
            child_key,
            listener,
            Some(listener),
            EventKind::ConnectRequest,
            0,
            param,
            req.data,
            None,
        );
    }

    /// The listener that takes a request for `req.dst` on `dev`: a specific-address listener
    /// first, then a wildcard one (§4.9).
    fn find_listener(&self, host: HostKey, dev: DevKey, req: &Request) -> Option<IdKey> {
        let holders = self.ports.get(&(host, req.ps, req.dst.port()))?;
        let listening = || {
            holders
                .iter()
                .copied()
                .filter(|k| self.id(*k).listen.is_some())
        };
        let specific = listening().find(|k| {
            let i = self.id(*k);
            i.local.is_some_and(|a| a.ip() == req.dst.ip()) && i.device == Some(dev)
        });
        specific.or_else(|| {
            listening().find(|k| {
                let i = self.id(*k);
                let Some(a) = i.local else { return false };
                let wildcard = a.ip().is_unspecified() || a.ip().is_loopback();
                let family_ok =
                    a.is_ipv4() == req.dst.is_ipv4() || (a.is_ipv6() && i.afonly != Some(true));
                wildcard && family_ok
            })
        })
    }

    // ----- messages at an endpoint -----------------------------------------------------------

    /// A message for endpoint `ep` arrives from endpoint `from`.
    pub(crate) fn on_message(&mut self, ep: EpKey, from: EpKey, body: Body) {
        let state = self.ep_state(ep);
        let owner = self.eps[&ep].owner;
        let transport = self.eps[&ep].transport;
        match body {
            Body::Mra => match state {
                EpState::ReqSent => {
                    self.set_ep_state(ep, EpState::MraReqRcvd);
                    let t = mra_timeout(self.eps[&ep].plt);
                    self.ep_stretch(ep, t);
                }
                EpState::RepSent => {
                    self.set_ep_state(ep, EpState::MraRepRcvd);
                    let t = mra_timeout(self.eps[&ep].plt);
                    self.ep_stretch(ep, t);
                }
                _ => {}
            },
            Body::Rep {
                data,
                conn,
                ack_timeout,
            } => match state {
                EpState::ReqSent | EpState::MraReqRcvd => {
                    self.ep_cancel(ep);
                    let e = self.eps.get_mut(&ep).expect("endpoint");
                    e.peer = Some(from);
                    if self.cfg.timewait_override.is_none() {
                        e.timewait = Duration::from_millis(cm_ms(ack_timeout));
                    }
                    let param = EventParam::Conn(ConnData {
                        responder_resources: conn.initiator_depth,
                        initiator_depth: conn.responder_resources,
                        ..conn
                    });
                    let Some(id) = owner else { return };
                    if transport == Transport::Iwarp {
                        // iWARP: the driver moves the QP; the active side sees ESTABLISHED directly.
                        self.set_ep_state(ep, EpState::Established);
                        self.queue_event(id, EventKind::Established, 0, param, data);
                    } else {
                        self.set_ep_state(ep, EpState::RepRcvd);
                        self.queue_event(id, EventKind::ConnectResponse, 0, param, data);
                    }
                }
                EpState::RepRcvd => self.ep_send(ep, Dest::Ep(from), Body::Mra),
                EpState::Established => self.ep_send(ep, Dest::Ep(from), Body::Rtu),
                _ => {}
            },
            Body::Rtu => {
                if matches!(state, EpState::RepSent | EpState::MraRepRcvd) {
                    self.ep_cancel(ep);
                    self.set_ep_state(ep, EpState::Established);
                    if let Some(id) = owner {
                        if self.id(id).state == CmState::Connect {
                            self.queue_event(
                                id,
                                EventKind::Established,
                                0,
                                EventParam::None,
                                Vec::new(),
                            );
                        }
                    }
                }
            }
            Body::Rej { reason, data } => {
                let status = if transport == Transport::Iwarp {
                    -111
                } else {
                    reason
                };
                match state {
                    EpState::ReqSent | EpState::MraReqRcvd => {
                        self.ep_cancel(ep);
                        self.set_ep_state(ep, EpState::Idle);
                        if let Some(id) = owner {
                            self.queue_event(
                                id,
                                EventKind::Rejected,
                                status,
                                EventParam::Conn(ConnData::default()),
                                data,
                            );
                        }
                    }
                    EpState::ReqRcvd => {
                        // The initiator gave up; the unaccepted child never hears of it (§5.2 S7).
                        self.set_ep_state(ep, EpState::Idle);
                    }
                    EpState::RepSent
                    | EpState::MraRepRcvd
                    | EpState::RepRcvd
                    | EpState::Established
                    | EpState::DreqSent => {
                        self.enter_timewait(ep);
                        if let Some(id) = owner {
                            self.queue_event(
                                id,
                                EventKind::Rejected,
                                status,
                                EventParam::Conn(ConnData::default()),
                                data,
                            );
                        }
                    }
                    _ => {}
                }
            }
            Body::Dreq => match state {
                EpState::Established
                | EpState::RepSent
                | EpState::MraRepRcvd
                | EpState::DreqSent => {
                    self.ep_cancel(ep);
                    self.set_ep_state(ep, EpState::DreqRcvd);
                    self.eps.get_mut(&ep).expect("endpoint").peer = Some(from);
                    match owner {
                        Some(id) => self.report_disconnected(id, 0),
                        // The id was destroyed: the CM answers for it.
                        None => {
                            self.ep_send(ep, Dest::Ep(from), Body::Drep);
                            self.enter_timewait(ep);
                        }
                    }
                }
                EpState::Timewait => self.ep_send(ep, Dest::Ep(from), Body::Drep),
                _ => {}
            },
            Body::Drep => {
                if state == EpState::DreqSent {
                    self.enter_timewait(ep);
                    if let Some(id) = owner {
                        self.report_disconnected(id, 0);
                    }
                }
            }
            Body::SidrRep {
                status,
                qpn,
                qkey,
                data,
            } => {
                if state != EpState::SidrReqSent {
                    return;
                }
                self.ep_cancel(ep);
                self.set_ep_state(ep, EpState::Idle);
                let Some(id) = owner else { return };
                if status == 0 {
                    let dev = self.eps[&ep].device;
                    let peer_ip = self
                        .id(id)
                        .peer
                        .map(|a| a.ip())
                        .expect("connecting id has a peer");
                    let ud = UdData {
                        ah_attr: self.ah_attr_to(dev, peer_ip),
                        qp_num: qpn,
                        qkey,
                    };
                    self.queue_event(id, EventKind::Established, 0, EventParam::Ud(ud), data);
                } else {
                    self.queue_event(
                        id,
                        EventKind::Unreachable,
                        status,
                        EventParam::Ud(UdData::default()),
                        data,
                    );
                }
            }
            Body::Req(_) | Body::SidrReq(_) => unreachable!("requests are addressed by IP"),
        }
    }

    /// Sends REJ(`reason`, `data`) from `ep` if its state allows one (§4.11, §7.4): the
    /// endpoint goes idle, or into timewait once it had sent a REP. False if no REJ applies.
    pub(crate) fn ep_reject(&mut self, ep: EpKey, reason: i32, data: &[u8]) -> bool {
        let e = &self.eps[&ep];
        let timewait = match e.state {
            EpState::ReqSent | EpState::MraReqRcvd | EpState::ReqRcvd | EpState::RepRcvd => false,
            EpState::RepSent | EpState::MraRepRcvd => true,
            _ => return false,
        };
        // Before the REP the active side knows only the passive CM's address.
        let to = e.peer.map(Dest::Ep).or(e.remote_ip.map(Dest::Ip));
        let len = cmtwin::delivered_private_data_len(e.transport, PrivateDataOp::Reject);
        self.ep_cancel(ep);
        if let Some(to) = to {
            self.ep_send(
                ep,
                to,
                Body::Rej {
                    reason,
                    data: padded(data, len),
                },
            );
        }
        if timewait {
            self.enter_timewait(ep);
        } else {
            self.set_ep_state(ep, EpState::Idle);
        }
        true
    }

    /// Answers the UD request `ep` holds with SIDR REP status 2 (REJECT) and `data`.
    pub(crate) fn ep_sidr_reject(&mut self, ep: EpKey, data: &[u8]) {
        let e = &self.eps[&ep];
        let len = cmtwin::delivered_private_data_len(e.transport, PrivateDataOp::RejectUd);
        if let Some(p) = e.peer {
            let body = Body::SidrRep {
                status: SidrStatus::REJECT,
                qpn: 0,
                qkey: 0,
                data: padded(data, len),
            };
            self.ep_send(ep, Dest::Ep(p), body);
        }
        self.set_ep_state(ep, EpState::Idle);
    }

    /// The IB CM side effects of destroying `ep`'s id (§7.4), leaving the endpoint ownerless.
    pub(crate) fn destroy_endpoint(&mut self, ep: EpKey) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        e.owner = None;
        let (state, peer) = (e.state, e.peer);
        match state {
            EpState::ReqSent | EpState::MraReqRcvd => {
                // The passive child never sees this REJ (uid 0), but its accept will fail.
                self.ep_reject(ep, IbRejReason::TIMEOUT, &[]);
            }
            EpState::ReqRcvd | EpState::RepRcvd | EpState::RepSent | EpState::MraRepRcvd => {
                self.ep_reject(ep, IbRejReason::CONSUMER_DEFINED, &[]);
            }
            EpState::Established => {
                // One DREQ, no retries, straight to timewait (§5.2 S12).
                if let Some(p) = peer {
                    self.ep_send(ep, Dest::Ep(p), Body::Dreq);
                }
                self.enter_timewait(ep);
            }
            EpState::DreqSent => self.enter_timewait(ep),
            EpState::DreqRcvd => {
                if let Some(p) = peer {
                    self.ep_send(ep, Dest::Ep(p), Body::Drep);
                }
                self.enter_timewait(ep);
            }
            EpState::SidrReqSent => {
                self.ep_cancel(ep);
                self.set_ep_state(ep, EpState::Idle);
            }
            EpState::SidrReqRcvd => self.ep_sidr_reject(ep, &[]),
            EpState::Timewait | EpState::Idle => {}
        }
        self.reap_endpoint(ep);
    }

    /// The REQ/DREQ retransmission interval of `ep`'s path.
    pub(crate) fn req_interval(&self, ep: EpKey) -> Duration {
        req_timeout(self.eps[&ep].plt)
    }
}
