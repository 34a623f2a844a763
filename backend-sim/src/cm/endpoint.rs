//! One side of one connection attempt of the IB CM (and, with its differences, the iWARP CM),
//! as a sans-IO state machine (CM-SEMANTICS.md §15.1, §5.2, §7): REQ/MRA/REP/RTU/REJ/DREQ/DREP,
//! SIDR REQ/REP, retransmissions, timewait.
//!
//! An [`Endpoint`] is driven by inputs (a call of its id, a received message, its one timer
//! firing) and answers each by pushing [`Output`]s: messages to send, its timer to set or
//! cancel, and what its id should hear. It owns its retransmission state and its timer's
//! meaning, and knows nothing of ids, hosts, the clock or the wire: the world carries the
//! outputs out (`endpoints.rs`). Whether an event reaches the application (is the id still
//! connected? does user space own it?) is the kernel's decision, not the endpoint's.

use std::net::IpAddr;
use std::time::Duration;

use cmtwin::{delivered_private_data_len, UdData};
use cmtwin::{ConnData, EventKind, EventParam, IbRejReason, PrivateDataOp, SidrStatus, Transport};

use crate::cm::messages::{padded, Body, Dest, EpKey};
use crate::config::{cm_ms, mra_timeout, req_timeout};

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

/// What an endpoint asks of the world, in the order it must happen.
#[derive(Debug)]
pub(crate) enum Output {
    /// Put a message on the wire (nothing leaves a removed device: the world checks).
    Send { to: Dest, body: Body },
    /// Arm the endpoint's one timer `after` from now, replacing any pending one.
    SetTimer(Duration),
    /// Cancel the endpoint's pending timer.
    CancelTimer,
    /// An event for the owning id.
    Event {
        kind: EventKind,
        status: i32,
        param: EventParam,
        data: Vec<u8>,
    },
    /// The passive side's connection is established (RTU, COMM_EST): ESTABLISHED if the id
    /// is still connecting.
    Established,
    /// The SIDR REP accepted the request: ESTABLISHED with the peer's QP and Q_Key (the world
    /// adds the address handle).
    SidrResolved { qpn: u32, qkey: u32, data: Vec<u8> },
    /// The connection ended with `status`: DISCONNECTED, once, if the id is connected.
    Disconnected(i32),
    /// Timewait is over: TIMEWAIT_EXIT if the id is disconnected.
    TimewaitExit,
    /// No id owns the endpoint and it has nothing left to do: forget it.
    Finished,
}

/// The CM's timing an endpoint follows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// Retransmissions after the first send before giving up.
    pub max_retries: u32,
    /// A timewait that no REQ or REP may change.
    pub fixed_timewait: Option<Duration>,
}

/// How long a REP (and a passive side's DREQ) waits for its answer: the CM's response
/// timeout of 20 (2^20 × 4.096 µs, as `cm_convert_to_ms` rounds it).
pub(crate) fn rep_timeout() -> Duration {
    Duration::from_millis(cm_ms(20))
}

/// How long a SIDR REQ waits for its answer.
pub(crate) fn sidr_timeout() -> Duration {
    Duration::from_millis(4096)
}

/// A message being retransmitted until answered.
#[derive(Clone, Debug)]
struct Retry {
    to: Dest,
    body: Body,
    left: u32,
    interval: Duration,
}

/// What `comm_est` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommEst {
    /// The passive side is now established.
    Established,
    /// It already was (the RTU won).
    AlreadyEstablished,
    /// Not a passive side waiting for its RTU.
    NotApplicable(EpState),
}

/// One side of one connection attempt.
#[derive(Debug)]
pub(crate) struct Endpoint {
    state: EpState,
    transport: Transport,
    active: bool,
    /// Whether an rdma_cm id still owns the endpoint (after its destroy the CM answers alone).
    owned: bool,
    /// The peer's endpoint, once known.
    peer: Option<EpKey>,
    /// The peer's address (an active endpoint reaches the passive CM through it before it
    /// knows the passive endpoint).
    remote_ip: Option<IpAddr>,
    /// The path's packet life time exponent (REQ/DREQ and MRA intervals follow it).
    plt: u8,
    timewait: Duration,
    /// Whether the timewait is fixed by configuration (no REQ or REP changes it).
    fixed_timewait: bool,
    max_retries: u32,
    /// What is being retransmitted (boxed: most endpoints retransmit nothing most of the time).
    retry: Option<Box<Retry>>,
}

impl Endpoint {
    /// An active endpoint about to send its REQ (or SIDR REQ) to `remote_ip`.
    pub(crate) fn active(
        transport: Transport,
        remote_ip: Option<IpAddr>,
        plt: u8,
        timewait: Duration,
        timing: Timing,
    ) -> Self {
        Endpoint {
            state: EpState::Idle,
            transport,
            active: true,
            owned: true,
            peer: None,
            remote_ip,
            plt,
            timewait: timing.fixed_timewait.unwrap_or(timewait),
            fixed_timewait: timing.fixed_timewait.is_some(),
            max_retries: timing.max_retries,
            retry: None,
        }
    }

    /// A passive endpoint holding the request of endpoint `peer`, whose sender asked for
    /// `ack_timeout` (it sets this side's timewait).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn passive(
        transport: Transport,
        sidr: bool,
        peer: EpKey,
        remote_ip: Option<IpAddr>,
        plt: u8,
        ack_timeout: u8,
        timing: Timing,
    ) -> Self {
        Endpoint {
            state: if sidr {
                EpState::SidrReqRcvd
            } else {
                EpState::ReqRcvd
            },
            transport,
            active: false,
            owned: true,
            peer: Some(peer),
            remote_ip,
            plt,
            timewait: timing
                .fixed_timewait
                .unwrap_or(Duration::from_millis(cm_ms(ack_timeout))),
            fixed_timewait: timing.fixed_timewait.is_some(),
            max_retries: timing.max_retries,
            retry: None,
        }
    }

    pub(crate) fn state(&self) -> EpState {
        self.state
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    pub(crate) fn peer(&self) -> Option<EpKey> {
        self.peer
    }

    pub(crate) fn plt(&self) -> u8 {
        self.plt
    }

    pub(crate) fn is_owned(&self) -> bool {
        self.owned
    }

    // ----- timers and sending -------------------------------------------------------------

    /// Sends `body` and retransmits it every `interval` until answered or out of retries.
    fn send_retrying(&mut self, to: Dest, body: Body, interval: Duration, out: &mut Vec<Output>) {
        self.retry = Some(Box::new(Retry {
            to,
            body: body.clone(),
            left: self.max_retries,
            interval,
        }));
        out.push(Output::Send { to, body });
        out.push(Output::SetTimer(interval));
    }

    /// Stops retransmitting.
    fn cancel(&mut self, out: &mut Vec<Output>) {
        self.retry = None;
        out.push(Output::CancelTimer);
    }

    /// Waits longer for the answer (after an MRA), keeping the retries left.
    fn stretch(&mut self, interval: Duration, out: &mut Vec<Output>) {
        if let Some(r) = &mut self.retry {
            r.interval = interval;
        }
        out.push(Output::SetTimer(interval));
    }

    fn send_to_peer(&self, body: Body, out: &mut Vec<Output>) {
        if let Some(p) = self.peer {
            out.push(Output::Send {
                to: Dest::Ep(p),
                body,
            });
        }
    }

    /// Enters timewait (IB, RoCE) or goes idle (iWARP has none).
    fn enter_timewait(&mut self, out: &mut Vec<Output>) {
        self.cancel(out);
        if self.transport == Transport::Iwarp {
            self.state = EpState::Idle;
            self.finish_if_done(out);
            return;
        }
        self.state = EpState::Timewait;
        out.push(Output::SetTimer(self.timewait));
    }

    fn finish_if_done(&self, out: &mut Vec<Output>) {
        if !self.owned && self.state == EpState::Idle {
            out.push(Output::Finished);
        }
    }

    // ----- calls of the id ----------------------------------------------------------------

    /// Sends the REQ (or SIDR REQ) `body` to `to` (§4.8).
    pub(crate) fn connect(&mut self, to: Dest, body: Body, out: &mut Vec<Output>) {
        let (state, interval) = match body {
            Body::SidrReq(_) => (EpState::SidrReqSent, sidr_timeout()),
            _ => (EpState::ReqSent, req_timeout(self.plt)),
        };
        self.state = state;
        self.send_retrying(to, body, interval, out);
    }

    /// Answers the held REQ with the REP `body` (§4.10); `Err` with the state if none is held.
    pub(crate) fn accept(&mut self, body: Body, out: &mut Vec<Output>) -> Result<(), EpState> {
        let (EpState::ReqRcvd, Some(peer)) = (self.state, self.peer) else {
            return Err(self.state);
        };
        self.state = EpState::RepSent;
        let interval = rep_timeout();
        self.send_retrying(Dest::Ep(peer), body, interval, out);
        Ok(())
    }

    /// Answers the held SIDR REQ with the SIDR REP `body`.
    pub(crate) fn accept_sidr(&mut self, body: Body, out: &mut Vec<Output>) {
        self.send_to_peer(body, out);
        self.state = EpState::Idle;
    }

    /// The active side's RTU after a REP (librdmacm sends it from `rdma_get_cm_event`, or the
    /// application through `rdma_establish`/`rdma_accept`); false if no REP is waiting for it.
    pub(crate) fn send_rtu(&mut self, out: &mut Vec<Output>) -> bool {
        if self.state != EpState::RepRcvd {
            return false;
        }
        self.state = EpState::Established;
        self.send_to_peer(Body::Rtu, out);
        true
    }

    /// `rdma_notify(COMM_EST)` on the passive side (§9): data arrived before the RTU.
    pub(crate) fn comm_est(&mut self, out: &mut Vec<Output>) -> CommEst {
        match self.state {
            EpState::RepSent | EpState::MraRepRcvd => {
                self.cancel(out);
                self.state = EpState::Established;
                out.push(Output::Established);
                CommEst::Established
            }
            EpState::Established => CommEst::AlreadyEstablished,
            other => CommEst::NotApplicable(other),
        }
    }

    /// Sends REJ(`reason`, `data`) if the state allows one (§4.11, §7.4): the endpoint goes
    /// idle, or into timewait once it had sent a REP. False if no REJ applies.
    pub(crate) fn reject(&mut self, reason: i32, data: &[u8], out: &mut Vec<Output>) -> bool {
        let timewait = match self.state {
            EpState::ReqSent | EpState::MraReqRcvd | EpState::ReqRcvd | EpState::RepRcvd => false,
            EpState::RepSent | EpState::MraRepRcvd => true,
            _ => return false,
        };
        // Before the REP the active side knows only the passive CM's address.
        let to = self.peer.map(Dest::Ep).or(self.remote_ip.map(Dest::Ip));
        let len = delivered_private_data_len(self.transport, PrivateDataOp::Reject);
        self.cancel(out);
        if let Some(to) = to {
            let body = Body::Rej {
                reason,
                data: padded(data, len),
            };
            out.push(Output::Send { to, body });
        }
        if timewait {
            self.enter_timewait(out);
        } else {
            self.state = EpState::Idle;
        }
        true
    }

    /// Answers the held SIDR REQ with status 2 (REJECT) and `data`.
    pub(crate) fn sidr_reject(&mut self, data: &[u8], out: &mut Vec<Output>) {
        let len = delivered_private_data_len(self.transport, PrivateDataOp::RejectUd);
        let body = Body::SidrRep {
            status: SidrStatus::REJECT,
            qpn: 0,
            qkey: 0,
            data: padded(data, len),
        };
        self.send_to_peer(body, out);
        self.state = EpState::Idle;
    }

    /// `rdma_disconnect` (§5.2 S10): DREQ when established, DREP after the peer's DREQ,
    /// nothing otherwise.
    pub(crate) fn disconnect(&mut self, out: &mut Vec<Output>) {
        match (self.state, self.peer) {
            (EpState::Established, Some(peer)) => {
                let interval = if self.active {
                    req_timeout(self.plt)
                } else {
                    rep_timeout()
                };
                self.state = EpState::DreqSent;
                self.send_retrying(Dest::Ep(peer), Body::Dreq, interval, out);
            }
            (EpState::DreqRcvd, Some(_)) => {
                self.send_to_peer(Body::Drep, out);
                self.enter_timewait(out);
                if self.transport == Transport::Iwarp {
                    out.push(Output::Disconnected(0));
                }
            }
            _ => {}
        }
    }

    /// The id is destroyed (§7.4): the CM finishes the conversation on its own and the
    /// endpoint is forgotten once idle.
    pub(crate) fn destroy(&mut self, out: &mut Vec<Output>) {
        self.owned = false;
        match self.state {
            EpState::ReqSent | EpState::MraReqRcvd => {
                // The passive child never sees this REJ (uid 0), but its accept will fail.
                self.reject(IbRejReason::TIMEOUT, &[], out);
            }
            EpState::ReqRcvd | EpState::RepRcvd | EpState::RepSent | EpState::MraRepRcvd => {
                self.reject(IbRejReason::CONSUMER_DEFINED, &[], out);
            }
            EpState::Established => {
                // One DREQ, no retries, straight to timewait (§5.2 S12).
                self.send_to_peer(Body::Dreq, out);
                self.enter_timewait(out);
            }
            EpState::DreqSent => self.enter_timewait(out),
            EpState::DreqRcvd => {
                self.send_to_peer(Body::Drep, out);
                self.enter_timewait(out);
            }
            EpState::SidrReqSent => {
                self.cancel(out);
                self.state = EpState::Idle;
            }
            EpState::SidrReqRcvd => self.sidr_reject(&[], out),
            EpState::Timewait | EpState::Idle => {}
        }
        self.finish_if_done(out);
    }

    /// The device went away: nothing more is sent or retransmitted.
    pub(crate) fn device_removed(&mut self, out: &mut Vec<Output>) {
        self.cancel(out);
    }

    /// The request this passive endpoint holds vanished with its child id before user space
    /// saw it (§8.4): no protocol side effects.
    pub(crate) fn abandon(&mut self, out: &mut Vec<Output>) {
        self.owned = false;
        self.state = EpState::Idle;
        self.finish_if_done(out);
    }

    // ----- the wire and the timer ---------------------------------------------------------

    /// A duplicate of the request this passive endpoint holds: an MRA while undecided.
    pub(crate) fn on_duplicate_request(&mut self, from: EpKey, out: &mut Vec<Output>) {
        if self.state == EpState::ReqRcvd {
            out.push(Output::Send {
                to: Dest::Ep(from),
                body: Body::Mra,
            });
        }
    }

    /// A message from endpoint `from` arrives.
    pub(crate) fn on_message(&mut self, from: EpKey, body: Body, out: &mut Vec<Output>) {
        match body {
            Body::Mra => self.on_mra(out),
            Body::Rep {
                data,
                conn,
                ack_timeout,
            } => self.on_rep(from, data, conn, ack_timeout, out),
            Body::Rtu => {
                if matches!(self.state, EpState::RepSent | EpState::MraRepRcvd) {
                    self.cancel(out);
                    self.state = EpState::Established;
                    out.push(Output::Established);
                }
            }
            Body::Rej { reason, data } => self.on_rej(reason, data, out),
            Body::Dreq => self.on_dreq(from, out),
            Body::Drep => {
                if self.state == EpState::DreqSent {
                    self.enter_timewait(out);
                    out.push(Output::Disconnected(0));
                }
            }
            Body::SidrRep {
                status,
                qpn,
                qkey,
                data,
            } => self.on_sidr_rep(status, qpn, qkey, data, out),
            Body::Req(_) | Body::SidrReq(_) => {
                // Requests are addressed to a CM by IP, never to an endpoint.
            }
        }
    }

    fn on_mra(&mut self, out: &mut Vec<Output>) {
        let next = match self.state {
            EpState::ReqSent => EpState::MraReqRcvd,
            EpState::RepSent => EpState::MraRepRcvd,
            _ => return,
        };
        self.state = next;
        self.stretch(mra_timeout(self.plt), out);
    }

    fn on_rep(
        &mut self,
        from: EpKey,
        data: Vec<u8>,
        conn: ConnData,
        ack_timeout: u8,
        out: &mut Vec<Output>,
    ) {
        match self.state {
            EpState::ReqSent | EpState::MraReqRcvd => {
                self.cancel(out);
                self.peer = Some(from);
                if !self.fixed_timewait {
                    self.timewait = Duration::from_millis(cm_ms(ack_timeout));
                }
                if !self.owned {
                    return;
                }
                // The id sees the peer's resources from its own side: swapped.
                let param = EventParam::Conn(ConnData {
                    responder_resources: conn.initiator_depth,
                    initiator_depth: conn.responder_resources,
                    ..conn
                });
                let kind = if self.transport == Transport::Iwarp {
                    // iWARP: the driver moves the QP; the active side sees ESTABLISHED directly.
                    self.state = EpState::Established;
                    EventKind::Established
                } else {
                    self.state = EpState::RepRcvd;
                    EventKind::ConnectResponse
                };
                out.push(Output::Event {
                    kind,
                    status: 0,
                    param,
                    data,
                });
            }
            EpState::RepRcvd => out.push(Output::Send {
                to: Dest::Ep(from),
                body: Body::Mra,
            }),
            EpState::Established => out.push(Output::Send {
                to: Dest::Ep(from),
                body: Body::Rtu,
            }),
            _ => {}
        }
    }

    fn on_rej(&mut self, reason: i32, data: Vec<u8>, out: &mut Vec<Output>) {
        let status = if self.transport == Transport::Iwarp {
            -111
        } else {
            reason
        };
        let rejected = Output::Event {
            kind: EventKind::Rejected,
            status,
            param: EventParam::Conn(ConnData::default()),
            data,
        };
        match self.state {
            EpState::ReqSent | EpState::MraReqRcvd => {
                self.cancel(out);
                self.state = EpState::Idle;
                out.push(rejected);
            }
            EpState::ReqRcvd => {
                // The initiator gave up; the unaccepted child never hears of it (§5.2 S7).
                self.state = EpState::Idle;
            }
            EpState::RepSent
            | EpState::MraRepRcvd
            | EpState::RepRcvd
            | EpState::Established
            | EpState::DreqSent => {
                self.enter_timewait(out);
                out.push(rejected);
            }
            _ => {}
        }
    }

    fn on_dreq(&mut self, from: EpKey, out: &mut Vec<Output>) {
        match self.state {
            EpState::Established | EpState::RepSent | EpState::MraRepRcvd | EpState::DreqSent => {
                self.cancel(out);
                self.state = EpState::DreqRcvd;
                self.peer = Some(from);
                if self.owned {
                    out.push(Output::Disconnected(0));
                } else {
                    // The id was destroyed: the CM answers for it.
                    self.send_to_peer(Body::Drep, out);
                    self.enter_timewait(out);
                }
            }
            EpState::Timewait => out.push(Output::Send {
                to: Dest::Ep(from),
                body: Body::Drep,
            }),
            _ => {}
        }
    }

    fn on_sidr_rep(
        &mut self,
        status: i32,
        qpn: u32,
        qkey: u32,
        data: Vec<u8>,
        out: &mut Vec<Output>,
    ) {
        if self.state != EpState::SidrReqSent {
            return;
        }
        self.cancel(out);
        self.state = EpState::Idle;
        if !self.owned {
            return;
        }
        if status == 0 {
            out.push(Output::SidrResolved { qpn, qkey, data });
        } else {
            out.push(Output::Event {
                kind: EventKind::Unreachable,
                status,
                param: EventParam::Ud(UdData::default()),
                data,
            });
        }
    }

    /// The endpoint's timer fired: end of timewait, or a retransmission (or giving up).
    pub(crate) fn on_timer(&mut self, out: &mut Vec<Output>) {
        if self.state == EpState::Timewait {
            self.state = EpState::Idle;
            out.push(Output::TimewaitExit);
            self.finish_if_done(out);
            return;
        }
        let Some(retry) = &mut self.retry else {
            return;
        };
        if retry.left > 0 {
            retry.left -= 1;
            let (to, body, interval) = (retry.to, retry.body.clone(), retry.interval);
            out.push(Output::Send { to, body });
            out.push(Output::SetTimer(interval));
            return;
        }
        self.retry = None;
        let unreachable = |param| Output::Event {
            kind: EventKind::Unreachable,
            status: -110,
            param,
            data: Vec::new(),
        };
        match self.state {
            EpState::ReqSent | EpState::MraReqRcvd | EpState::RepSent | EpState::MraRepRcvd => {
                self.state = EpState::Idle;
                out.push(unreachable(EventParam::None));
            }
            EpState::SidrReqSent => {
                self.state = EpState::Idle;
                out.push(unreachable(EventParam::Ud(UdData::default())));
            }
            EpState::DreqSent => {
                self.enter_timewait(out);
                out.push(Output::Disconnected(-110));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ack_timeout;

    const TIMING: Timing = Timing {
        max_retries: 2,
        fixed_timewait: None,
    };
    const PASSIVE_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

    fn req() -> Body {
        Body::Req(Box::new(crate::cm::messages::Request {
            src: "10.0.0.2:5000".parse().expect("literal"),
            dst: "10.0.0.1:7471".parse().expect("literal"),
            ps: cmtwin::PortSpace::TCP,
            qp_type: cmtwin::QpType::Rc,
            data: vec![0; 56],
            conn: ConnData::default(),
            ack_timeout: ack_timeout(15, 18),
            plt: 18,
        }))
    }

    fn rep() -> Body {
        Body::Rep {
            data: vec![0; 196],
            conn: ConnData::default(),
            ack_timeout: 19,
        }
    }

    fn kinds(out: &[Output]) -> Vec<String> {
        out.iter()
            .map(|o| match o {
                Output::Send { body, .. } => format!("send {}", body.kind().name()),
                Output::SetTimer(d) => format!("timer {}ms", d.as_millis()),
                Output::CancelTimer => "cancel".into(),
                Output::Event { kind, status, .. } => format!("event {kind} {status}"),
                Output::Established => "established".into(),
                Output::SidrResolved { .. } => "sidr resolved".into(),
                Output::Disconnected(s) => format!("disconnected {s}"),
                Output::TimewaitExit => "timewait exit".into(),
                Output::Finished => "finished".into(),
            })
            .collect()
    }

    fn active() -> Endpoint {
        Endpoint::active(
            Transport::Roce,
            Some(PASSIVE_IP),
            18,
            Duration::from_millis(2048),
            TIMING,
        )
    }

    #[test]
    fn a_req_is_retransmitted_then_unreachable() {
        let mut ep = active();
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        // 4096 ms of response time plus twice the 1024 ms packet life time of exponent 18.
        assert_eq!(kinds(&out), ["send REQ", "timer 6144ms"]);
        for _ in 0..2 {
            out.clear();
            ep.on_timer(&mut out);
            assert_eq!(kinds(&out), ["send REQ", "timer 6144ms"]);
        }
        out.clear();
        ep.on_timer(&mut out);
        assert_eq!(kinds(&out), ["event RDMA_CM_EVENT_UNREACHABLE -110"]);
        assert_eq!(ep.state(), EpState::Idle);
    }

    #[test]
    fn an_mra_stretches_the_wait_and_a_rep_stops_it() {
        let mut ep = active();
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        ep.on_message(7, Body::Mra, &mut out);
        assert_eq!(ep.state(), EpState::MraReqRcvd);
        let mra_ms = mra_timeout(18).as_millis();
        assert_eq!(kinds(&out), [format!("timer {mra_ms}ms")]);
        out.clear();
        ep.on_message(7, rep(), &mut out);
        assert_eq!(
            kinds(&out),
            ["cancel", "event RDMA_CM_EVENT_CONNECT_RESPONSE 0"]
        );
        assert_eq!((ep.state(), ep.peer()), (EpState::RepRcvd, Some(7)));
        out.clear();
        assert!(ep.send_rtu(&mut out));
        assert_eq!(kinds(&out), ["send RTU"]);
        assert!(!ep.send_rtu(&mut out), "one RTU");
    }

    #[test]
    fn the_passive_side_establishes_on_rtu_or_comm_est_once() {
        let mut ep = Endpoint::passive(Transport::Roce, false, 3, None, 18, 19, TIMING);
        let mut out = Vec::new();
        ep.on_duplicate_request(3, &mut out);
        assert_eq!(kinds(&out), ["send MRA"]);
        out.clear();
        assert_eq!(ep.accept(rep(), &mut out), Ok(()));
        assert_eq!(kinds(&out), ["send REP", "timer 4096ms"]);
        out.clear();
        assert_eq!(ep.comm_est(&mut out), CommEst::Established);
        assert_eq!(kinds(&out), ["cancel", "established"]);
        out.clear();
        ep.on_message(3, Body::Rtu, &mut out);
        assert!(out.is_empty(), "the late RTU is ignored");
        assert_eq!(ep.comm_est(&mut out), CommEst::AlreadyEstablished);
    }

    #[test]
    fn a_disconnect_ends_in_timewait_then_exit() {
        let mut ep = Endpoint::passive(Transport::Roce, false, 3, None, 18, 19, TIMING);
        let mut out = Vec::new();
        ep.accept(rep(), &mut out).expect("request held");
        ep.on_message(3, Body::Rtu, &mut out);
        out.clear();
        ep.on_message(3, Body::Dreq, &mut out);
        assert_eq!(kinds(&out), ["cancel", "disconnected 0"]);
        out.clear();
        ep.disconnect(&mut out);
        // The REQ's ACK timeout 19 sets this side's timewait: 2^(19-8) ms.
        assert_eq!(kinds(&out), ["send DREP", "cancel", "timer 2048ms"]);
        out.clear();
        ep.on_timer(&mut out);
        assert_eq!(kinds(&out), ["timewait exit"]);
    }

    #[test]
    fn an_unowned_endpoint_answers_a_dreq_and_finishes() {
        let mut ep = Endpoint::passive(Transport::Roce, false, 3, None, 18, 19, TIMING);
        let mut out = Vec::new();
        ep.accept(rep(), &mut out).expect("request held");
        ep.on_message(3, Body::Rtu, &mut out);
        out.clear();
        ep.destroy(&mut out);
        assert_eq!(kinds(&out), ["send DREQ", "cancel", "timer 2048ms"]);
        out.clear();
        ep.on_message(3, Body::Dreq, &mut out);
        assert_eq!(kinds(&out), ["send DREP"], "a DREQ in timewait is answered");
        out.clear();
        ep.on_timer(&mut out);
        assert_eq!(kinds(&out), ["timewait exit", "finished"]);
    }

    #[test]
    fn iwarp_has_no_timewait_and_refuses_with_econnrefused() {
        let mut ep = Endpoint::active(
            Transport::Iwarp,
            Some(PASSIVE_IP),
            18,
            Duration::from_millis(2048),
            TIMING,
        );
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        ep.on_message(
            4,
            Body::Rej {
                reason: 28,
                data: Vec::new(),
            },
            &mut out,
        );
        assert_eq!(kinds(&out), ["cancel", "event RDMA_CM_EVENT_REJECTED -111"]);
    }
}
