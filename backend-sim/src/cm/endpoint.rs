//! One side of one connection attempt of the IB CM, or of an iWARP connection, as a sans-IO
//! state machine (CM-SEMANTICS.md §15.1, §5.2, §5.3, §7): REQ/MRA/REP/RTU/REJ/DREQ/DREP, SIDR
//! REQ/REP, retransmissions, timewait; on iWARP the MPA exchange over a TCP connection as the
//! kernel's iw_cm.c and the software iWARP driver (drivers/infiniband/sw/siw/siw_cm.c) run it.
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

/// How long an iWARP initiator waits for the MPA reply (siw_cm.h's `MPAREQ_TIMEOUT`, used
/// while the endpoint awaits the reply): then UNREACHABLE -ETIMEDOUT.
pub(crate) const MPA_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// ECONNRESET, negated: the status of the REJECTED an MPA reject gives the initiator (siw's
/// `siw_proc_mpareply` reports a reply with the reject bit as -ECONNRESET; measured on siw,
/// Linux 6.1 and 6.12).
const ECONNRESET: i32 = -104;
/// ECONNREFUSED, negated: the status of an iWARP REJECTED when the TCP connection is reset
/// after it was made (nothing takes its MPA request).
const ECONNREFUSED: i32 = -111;

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

impl EpState {
    /// Whether the IB CM gives QP attributes in this state (cm.c `cm_init_qp_init_attr`): from
    /// the REQ to the established connection. Elsewhere (idle after a REJ, disconnecting, in
    /// timewait) `rdma_init_qp_attr` is EINVAL, and with it `rdma_create_qp` of a connected QP.
    pub(crate) fn gives_qp_attrs(self) -> bool {
        matches!(
            self,
            EpState::ReqSent
                | EpState::MraReqRcvd
                | EpState::ReqRcvd
                | EpState::RepSent
                | EpState::MraRepRcvd
                | EpState::RepRcvd
                | EpState::Established
        )
    }
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
    /// The passive side's connection is established (RTU, COMM_EST; on iWARP the MPA reply
    /// sent): ESTABLISHED with this param (IB: none; iWARP: the negotiated IRD and ORD) if the
    /// id is still connecting.
    Established(EventParam),
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
    /// iWARP, passive side: the initiator's IRD and ORD from its MPA request, which the
    /// accept negotiates against.
    iw_initiator: IrdOrd,
    /// iWARP, passive side: this side answered the request with an MPA reject
    /// (`iw_cm_reject` left the iWARP CM IDLE, where a later `iw_cm_accept` is EINVAL; an
    /// endpoint idle because the initiator went away still holds its request, CONN_RECV).
    iw_rejected: bool,
}

/// An iWARP side's inbound and outbound RDMA read limits (MPA v2's IRD and ORD; the rdma_cm's
/// responder resources and initiator depth).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IrdOrd {
    /// Inbound RDMA reads (responder resources).
    pub ird: u8,
    /// Outbound RDMA reads (initiator depth).
    pub ord: u8,
}

impl IrdOrd {
    /// What siw_accept settles on (relaxed IRD negotiation, siw_cm.c): the responder's ORD is
    /// cut to the initiator's IRD, its IRD raised to the initiator's ORD.
    pub(crate) fn negotiated(self, initiator: IrdOrd) -> IrdOrd {
        IrdOrd {
            ird: self.ird.max(initiator.ord),
            ord: self.ord.min(initiator.ird),
        }
    }
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
            iw_initiator: IrdOrd::default(),
            iw_rejected: false,
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
            iw_initiator: IrdOrd::default(),
            iw_rejected: false,
        }
    }

    /// This passive iWARP endpoint with the initiator's IRD and ORD from its MPA request.
    pub(crate) fn with_iw_initiator(mut self, initiator: IrdOrd) -> Self {
        self.iw_initiator = initiator;
        self
    }

    pub(crate) fn state(&self) -> EpState {
        self.state
    }

    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// An iWARP initiator whose MPA request is unanswered: siw's MPA timer is pending, and
    /// iw_cm's `destroy_cm_id` waits for the reply or that timeout (`IWCM_F_CONNECT_WAIT`).
    pub(crate) fn awaits_mpa_reply(&self) -> bool {
        self.transport == Transport::Iwarp && self.active && self.state == EpState::ReqSent
    }

    pub(crate) fn peer(&self) -> Option<EpKey> {
        self.peer
    }

    /// The address the peer's CM is reached at, when known.
    pub(crate) fn remote_ip(&self) -> Option<IpAddr> {
        self.remote_ip
    }

    pub(crate) fn plt(&self) -> u8 {
        self.plt
    }

    /// iWARP: whether this side rejected the request it held (its iWARP CM is IDLE).
    pub(crate) fn iw_rejected(&self) -> bool {
        self.iw_rejected
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

    /// Enters timewait (IB, RoCE; iWARP has none).
    fn enter_timewait(&mut self, out: &mut Vec<Output>) {
        self.cancel(out);
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
        if self.transport == Transport::Iwarp {
            return self.iw_connect(to, body, out);
        }
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
        if self.transport == Transport::Iwarp {
            self.iw_accept(peer, body, out);
            return Ok(());
        }
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
                out.push(Output::Established(EventParam::None));
                CommEst::Established
            }
            EpState::Established => CommEst::AlreadyEstablished,
            other => CommEst::NotApplicable(other),
        }
    }

    /// Sends REJ(`reason`, `data`) if the state allows one (§4.11, §7.4): the endpoint goes
    /// idle, or into timewait once it had sent a REP. False if no REJ applies.
    pub(crate) fn reject(&mut self, reason: i32, data: &[u8], out: &mut Vec<Output>) -> bool {
        if self.transport == Transport::Iwarp {
            return self.iw_reject(data, out);
        }
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
        if self.transport == Transport::Iwarp {
            if self.iw_close(out) {
                out.push(Output::Disconnected(0));
            }
            return;
        }
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
            }
            _ => {}
        }
    }

    /// The id is destroyed (§7.4): the CM finishes the conversation on its own and the
    /// endpoint is forgotten once idle.
    pub(crate) fn destroy(&mut self, out: &mut Vec<Output>) {
        self.owned = false;
        if self.transport == Transport::Iwarp {
            self.iw_destroy(out);
            self.finish_if_done(out);
            return;
        }
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
        if self.state == EpState::ReqRcvd && self.transport != Transport::Iwarp {
            out.push(Output::Send {
                to: Dest::Ep(from),
                body: Body::Mra,
            });
        }
    }

    /// A message from endpoint `from` arrives.
    pub(crate) fn on_message(&mut self, from: EpKey, body: Body, out: &mut Vec<Output>) {
        if self.transport == Transport::Iwarp {
            return self.iw_on_message(from, body, out);
        }
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
                    out.push(Output::Established(EventParam::None));
                }
            }
            Body::Rej { reason, data } => self.on_rej(reason, data, out),
            Body::Dreq => self.on_dreq(from, out),
            Body::Drep => {
                // cm.c `cm_drep_handler`: a DREP ends the disconnect in DREQ_SENT, and also in
                // DREQ_RCVD (after DREQs crossed, the peer's second disconnect answers ours).
                if matches!(self.state, EpState::DreqSent | EpState::DreqRcvd) {
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
            Body::Req(_) | Body::SidrReq(_) | Body::MpaReq(_) => {
                // Requests are addressed to a CM by IP, never to an endpoint.
            }
            Body::MpaRep { .. } | Body::MpaRej { .. } | Body::Fin | Body::Rst => {
                // iWARP's messages never reach an IB CM endpoint.
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
                // The id sees the peer's resources from its own side: swapped. A REP has no
                // retry count: the rdma_cm leaves it 0 in the event (cma.c
                // `cma_set_rep_event_data`; measured on rxe and siw, tests/FIDELITY.md).
                let param = EventParam::Conn(ConnData {
                    responder_resources: conn.initiator_depth,
                    initiator_depth: conn.responder_resources,
                    retry_count: 0,
                    ..conn
                });
                self.state = EpState::RepRcvd;
                out.push(Output::Event {
                    kind: EventKind::ConnectResponse,
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
        let rejected = Output::Event {
            kind: EventKind::Rejected,
            status: reason,
            param: EventParam::Conn(ConnData::default()),
            data,
        };
        // cm_rej_handler: before a REP was received the IB CM goes back to idle, dropping its
        // claim on the peer's QP number at once (cm_reset_to_idle), unless the peer called
        // the connection stale; from REP_RCVD on it enters timewait.
        let stale = reason == IbRejReason::STALE_CONN;
        match self.state {
            EpState::ReqSent | EpState::MraReqRcvd | EpState::RepSent | EpState::MraRepRcvd => {
                self.cancel(out);
                if stale {
                    self.enter_timewait(out);
                } else {
                    self.state = EpState::Idle;
                }
                out.push(rejected);
            }
            EpState::ReqRcvd => {
                // The initiator gave up; the unaccepted child never hears of it (§5.2 S7).
                if stale {
                    self.enter_timewait(out);
                } else {
                    self.state = EpState::Idle;
                }
            }
            EpState::RepRcvd | EpState::Established | EpState::DreqSent => {
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
        if self.transport == Transport::Iwarp {
            return self.iw_on_timer(out);
        }
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

/// iWARP (§5.3): the connection request is a TCP connection carrying an MPA request; the
/// MPA reply (or reject) answers it; there are no retransmissions at this level (TCP does
/// them), no RTU, no MRA and no timewait, and a disconnect is a TCP close.
impl Endpoint {
    /// Opens the TCP connection and sends the MPA request carrying `body`'s request; siw then
    /// waits `MPA_REPLY_TIMEOUT` for the reply.
    fn iw_connect(&mut self, to: Dest, body: Body, out: &mut Vec<Output>) {
        let body = match body {
            Body::Req(req) | Body::MpaReq(req) => Body::MpaReq(req),
            other => other,
        };
        self.state = EpState::ReqSent;
        out.push(Output::Send { to, body });
        out.push(Output::SetTimer(MPA_REPLY_TIMEOUT));
    }

    /// siw_accept: the IRD and ORD are negotiated against the initiator's, the MPA reply
    /// goes out carrying them, the QP is in RTS, and the driver reports the connection
    /// established at once (no RTU exists). iw_cm and the rdma_cm report an iWARP side's IRD
    /// as its initiator depth and its ORD as its responder resources, and nothing else of the
    /// connection data (no QPN, retry counts or flow control: all 0; measured on siw).
    fn iw_accept(&mut self, peer: EpKey, body: Body, out: &mut Vec<Output>) {
        let (data, conn) = match body {
            Body::Rep { data, conn, .. } | Body::MpaRep { data, conn } => (data, conn),
            _ => (Vec::new(), ConnData::default()),
        };
        let own = IrdOrd {
            ird: conn.responder_resources,
            ord: conn.initiator_depth,
        };
        let agreed = own.negotiated(self.iw_initiator);
        self.state = EpState::Established;
        // The reply carries the responder's IRD and ORD (MPA v2); the initiator takes them
        // as its ORD and IRD.
        let reply = ConnData {
            responder_resources: agreed.ird,
            initiator_depth: agreed.ord,
            ..ConnData::default()
        };
        out.push(Output::Send {
            to: Dest::Ep(peer),
            body: Body::MpaRep { data, conn: reply },
        });
        out.push(Output::Established(EventParam::Conn(ConnData {
            responder_resources: agreed.ord,
            initiator_depth: agreed.ird,
            ..ConnData::default()
        })));
    }

    /// iw_cm_reject: an MPA reply with the reject bit answers the held request; false if no
    /// request is held.
    fn iw_reject(&mut self, data: &[u8], out: &mut Vec<Output>) -> bool {
        if self.state != EpState::ReqRcvd {
            return false;
        }
        let len = delivered_private_data_len(self.transport, PrivateDataOp::Reject);
        self.send_to_peer(
            Body::MpaRej {
                data: padded(data, len),
            },
            out,
        );
        self.state = EpState::Idle;
        self.iw_rejected = true;
        true
    }

    /// siw gives up the request it holds because the accepting QP could not go to RTS
    /// (`siw_accept`'s error path releases the TCP connection): the initiator's connection
    /// is reset, and the iWARP CM is IDLE, so a later accept or reject is EINVAL.
    pub(crate) fn iw_abort(&mut self, out: &mut Vec<Output>) {
        if self.state == EpState::ReqRcvd {
            // The initiator sees it as a reject (REJECTED -ECONNRESET, measured on siw).
            self.send_to_peer(Body::MpaRej { data: Vec::new() }, out);
            self.state = EpState::Idle;
            self.iw_rejected = true;
        }
        self.finish_if_done(out);
    }

    /// The initiator's QP was destroyed while its MPA request waited for the reply: siw
    /// closes the TCP connection under it (the passive side can no longer accept), but the
    /// request keeps waiting for its reply until siw's MPA timeout (UNREACHABLE -ETIMEDOUT,
    /// measured on siw).
    pub(crate) fn iw_qp_destroyed(&mut self, out: &mut Vec<Output>) {
        if self.state != EpState::ReqSent {
            return;
        }
        if let Some(ip) = self.remote_ip {
            out.push(Output::Send {
                to: Dest::Ip(ip),
                body: Body::Fin,
            });
        }
    }

    /// The TCP connection died under an established endpoint (TCP gave up retransmitting):
    /// DISCONNECTED, and nothing goes to the peer.
    pub(crate) fn iw_connection_lost(&mut self, out: &mut Vec<Output>) {
        if self.state == EpState::Established {
            self.state = EpState::Idle;
            out.push(Output::Disconnected(0));
        }
        self.finish_if_done(out);
    }

    /// Closes an established TCP connection (FIN); false if it was not established.
    fn iw_close(&mut self, out: &mut Vec<Output>) -> bool {
        if self.state != EpState::Established {
            return false;
        }
        self.send_to_peer(Body::Fin, out);
        self.state = EpState::Idle;
        true
    }

    /// iw_destroy_cm_id: an unanswered request is rejected, a pending or established
    /// connection closed.
    fn iw_destroy(&mut self, out: &mut Vec<Output>) {
        match self.state {
            EpState::ReqRcvd => {
                self.iw_reject(&[], out);
            }
            EpState::ReqSent => {
                out.push(Output::CancelTimer);
                self.iw_drop_request(out);
            }
            EpState::Established => {
                self.iw_close(out);
            }
            _ => {}
        }
    }

    /// The initiator gives its unanswered request up and closes the TCP connection (siw's
    /// `release_cep`): the passive side can no longer accept it.
    fn iw_drop_request(&mut self, out: &mut Vec<Output>) {
        // Before the reply the initiator knows only the passive host's address.
        if let Some(ip) = self.remote_ip {
            out.push(Output::Send {
                to: Dest::Ip(ip),
                body: Body::Fin,
            });
        }
        self.state = EpState::Idle;
    }

    fn iw_on_message(&mut self, from: EpKey, body: Body, out: &mut Vec<Output>) {
        match (self.state, body) {
            (EpState::ReqSent, Body::MpaRep { data, conn }) => {
                out.push(Output::CancelTimer);
                self.peer = Some(from);
                self.state = EpState::Established;
                // The driver moved the QP to RTS: ESTABLISHED directly (never CONNECT_RESPONSE).
                // This side's IRD is the responder's ORD and its ORD the responder's IRD; the
                // rdma_cm reports the IRD as initiator depth, the ORD as responder resources.
                let param = EventParam::Conn(ConnData {
                    responder_resources: conn.responder_resources,
                    initiator_depth: conn.initiator_depth,
                    ..ConnData::default()
                });
                out.push(Output::Event {
                    kind: EventKind::Established,
                    status: 0,
                    param,
                    data,
                });
            }
            (EpState::ReqSent, Body::MpaRej { data }) => self.iw_refused(ECONNRESET, data, out),
            (EpState::ReqSent, Body::Rst) => self.iw_refused(ECONNREFUSED, Vec::new(), out),
            (EpState::Established, Body::Fin) => {
                self.state = EpState::Idle;
                out.push(Output::Disconnected(0));
            }
            (EpState::ReqRcvd, Body::Fin) => {
                // The initiator went away before an answer: the request can no longer be
                // accepted, and its child is not told (siw waits for the application).
                self.state = EpState::Idle;
            }
            _ => {}
        }
        self.finish_if_done(out);
    }

    /// The connection was refused: REJECTED with `status` (-ECONNRESET for an MPA reject,
    /// -ECONNREFUSED for a reset).
    fn iw_refused(&mut self, status: i32, data: Vec<u8>, out: &mut Vec<Output>) {
        out.push(Output::CancelTimer);
        self.state = EpState::Idle;
        out.push(Output::Event {
            kind: EventKind::Rejected,
            status,
            param: EventParam::Conn(ConnData::default()),
            data,
        });
    }

    /// No MPA reply in time: UNREACHABLE -ETIMEDOUT (siw's MPA timeout, then cma_iw_handler),
    /// and the TCP connection is closed (a later accept of the request is ECONNRESET).
    fn iw_on_timer(&mut self, out: &mut Vec<Output>) {
        if self.state == EpState::ReqSent {
            out.push(Output::Event {
                kind: EventKind::Unreachable,
                status: -110,
                param: EventParam::None,
                data: Vec::new(),
            });
            self.iw_drop_request(out);
        }
        self.finish_if_done(out);
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
        Body::Req(std::sync::Arc::new(crate::cm::messages::Request {
            src: "10.0.0.2:5000".parse().expect("literal"),
            dst: "10.0.0.1:7471".parse().expect("literal"),
            ps: cmtwin::PortSpace::TCP,
            qp_type: cmtwin::QpType::Rc,
            data: vec![0; 56],
            conn: ConnData::default(),
            ack_timeout: ack_timeout(15, 18),
            plt: 18,
            tclass: 0,
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
                Output::Established(_) => "established".into(),
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

    fn established_active() -> Endpoint {
        let mut ep = active();
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        ep.on_message(3, rep(), &mut out);
        assert!(ep.send_rtu(&mut out));
        ep
    }

    /// cm.c: a DREQ received in DREQ_SENT cancels our DREQ and reports the disconnect
    /// (`cm_dreq_handler`), and no DREP leaves until the id calls again; the call after the
    /// peer's DREQ arrived (cma.c `rdma_disconnect`: `ib_send_cm_dreq` fails, then
    /// `ib_send_cm_drep`) answers it and starts timewait.
    #[test]
    fn a_dreq_before_or_after_our_own_disconnect() {
        let mut crossing = established_active();
        let mut out = Vec::new();
        crossing.disconnect(&mut out);
        assert_eq!(kinds(&out), ["send DREQ", "timer 6144ms"]);
        out.clear();
        crossing.on_message(3, Body::Dreq, &mut out);
        assert_eq!(kinds(&out), ["cancel", "disconnected 0"], "no DREP yet");
        assert_eq!(crossing.state(), EpState::DreqRcvd);
        out.clear();
        // The peer's second disconnect sends its DREP, which ends ours too (`cm_drep_handler`
        // accepts DREQ_RCVD); the disconnect was already reported.
        crossing.on_message(3, Body::Drep, &mut out);
        assert_eq!(kinds(&out), ["cancel", "timer 2048ms", "disconnected 0"]);
        assert_eq!(crossing.state(), EpState::Timewait);

        let mut answering = established_active();
        out.clear();
        answering.on_message(3, Body::Dreq, &mut out);
        assert_eq!(kinds(&out), ["cancel", "disconnected 0"]);
        out.clear();
        answering.disconnect(&mut out);
        // The REP's target ACK delay 19 sets the active side's timewait: 2^(19-8) ms.
        assert_eq!(kinds(&out), ["send DREP", "cancel", "timer 2048ms"]);
    }

    /// cm.c `cm_issue_drep`: the DREP a CM sends for a forgotten connection comes from no
    /// endpoint (0) and ends our DREQ's wait like any DREP.
    #[test]
    fn a_drep_from_the_peers_cm_ends_the_dreq_wait() {
        let mut ep = established_active();
        let mut out = Vec::new();
        ep.disconnect(&mut out);
        out.clear();
        ep.on_timer(&mut out);
        assert_eq!(kinds(&out), ["send DREQ", "timer 6144ms"], "retransmitted");
        out.clear();
        ep.on_message(0, Body::Drep, &mut out);
        assert_eq!(kinds(&out), ["cancel", "timer 2048ms", "disconnected 0"]);
        assert_eq!(ep.state(), EpState::Timewait);
    }

    fn iwarp_active() -> Endpoint {
        Endpoint::active(
            Transport::Iwarp,
            Some(PASSIVE_IP),
            18,
            Duration::from_millis(2048),
            TIMING,
        )
    }

    fn iwarp_passive() -> Endpoint {
        Endpoint::passive(Transport::Iwarp, false, 3, Some(PASSIVE_IP), 18, 19, TIMING)
    }

    /// siw_cm.c: the initiator sends one MPA request and waits `MPAREQ_TIMEOUT` (10 s) for the
    /// reply; the reply moves the QP to RTS and iw_cm reports the CONNECT_REPLY as ESTABLISHED.
    #[test]
    fn iwarp_connects_with_one_mpa_request_and_no_rtu() {
        let mut ep = iwarp_active();
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        assert_eq!(kinds(&out), ["send MPA_REQ", "timer 10000ms"]);
        out.clear();
        ep.on_message(
            4,
            Body::MpaRep {
                data: vec![1; 3],
                conn: ConnData::default(),
            },
            &mut out,
        );
        assert_eq!(kinds(&out), ["cancel", "event RDMA_CM_EVENT_ESTABLISHED 0"]);
        assert!(!ep.send_rtu(&mut out), "iWARP has no RTU");
        assert_eq!((ep.state(), ep.peer()), (EpState::Established, Some(4)));
    }

    /// siw_accept: the MPA reply goes out and the passive side is established at once; no
    /// timer waits for anything.
    #[test]
    fn iwarp_passive_side_is_established_when_its_reply_is_sent() {
        let mut ep = iwarp_passive();
        let mut out = Vec::new();
        ep.on_duplicate_request(3, &mut out);
        assert!(out.is_empty(), "no MRA on iWARP");
        assert_eq!(ep.accept(rep(), &mut out), Ok(()));
        assert_eq!(kinds(&out), ["send MPA_REP", "established"]);
        assert_eq!(ep.state(), EpState::Established);
    }

    /// An MPA reject is REJECTED -ECONNRESET (as siw reports it, measured on Linux 6.1 and
    /// 6.12), a reset after the connection was made REJECTED -ECONNREFUSED; an MPA reply that
    /// never comes is UNREACHABLE -ETIMEDOUT after 10 s, and siw then closes the connection.
    #[test]
    fn iwarp_refusals_and_the_mpa_timeout() {
        let mut ep = iwarp_active();
        let mut out = Vec::new();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        ep.on_message(4, Body::MpaRej { data: vec![9; 2] }, &mut out);
        assert_eq!(kinds(&out), ["cancel", "event RDMA_CM_EVENT_REJECTED -104"]);
        let mut ep = iwarp_active();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        ep.on_message(0, Body::Rst, &mut out);
        assert_eq!(kinds(&out), ["cancel", "event RDMA_CM_EVENT_REJECTED -111"]);
        let mut ep = iwarp_active();
        ep.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        ep.on_timer(&mut out);
        assert_eq!(
            kinds(&out),
            ["event RDMA_CM_EVENT_UNREACHABLE -110", "send FIN"],
            "the timeout closes the TCP connection"
        );
        let mut ep = iwarp_passive();
        out.clear();
        assert!(ep.reject(28, &[], &mut out));
        assert_eq!(kinds(&out), ["send MPA_REJ"]);
        assert!(!ep.reject(28, &[], &mut out), "one reject");
    }

    /// siw_accept's relaxed IRD negotiation (measured on siw): the responder's ORD is cut to
    /// the initiator's IRD, its IRD raised to the initiator's ORD; the reply carries the agreed
    /// pair, and each side's ESTABLISHED reports its own IRD as initiator depth and its ORD as
    /// responder resources, with no QPN, retry counts or flow control.
    #[test]
    fn iwarp_accept_negotiates_ird_and_ord() {
        let initiator = IrdOrd { ird: 2, ord: 3 };
        let responder = IrdOrd { ird: 5, ord: 4 };
        assert_eq!(
            responder.negotiated(initiator),
            IrdOrd { ird: 5, ord: 2 },
            "ORD 4 cut to the initiator's IRD 2; IRD 5 already covers its ORD 3"
        );
        assert_eq!(
            IrdOrd { ird: 1, ord: 9 }.negotiated(initiator),
            IrdOrd { ird: 3, ord: 2 },
            "IRD 1 raised to the initiator's ORD 3"
        );
        let mut ep = iwarp_passive().with_iw_initiator(initiator);
        let mut out = Vec::new();
        let accept = Body::Rep {
            data: vec![],
            conn: ConnData {
                responder_resources: 5,
                initiator_depth: 4,
                retry_count: 7,
                rnr_retry_count: 6,
                qp_num: 42,
                ..ConnData::default()
            },
            ack_timeout: 19,
        };
        assert_eq!(ep.accept(accept, &mut out), Ok(()));
        let agreed = |rr, id| ConnData {
            responder_resources: rr,
            initiator_depth: id,
            ..ConnData::default()
        };
        match &out[..] {
            [Output::Send {
                body: Body::MpaRep { conn, .. },
                ..
            }, Output::Established(EventParam::Conn(own))] => {
                assert_eq!(*conn, agreed(5, 2), "the reply: the agreed IRD and ORD");
                assert_eq!(*own, agreed(2, 5), "own ESTABLISHED: ORD, IRD");
            }
            other => panic!("expected the MPA reply and ESTABLISHED, got {other:?}"),
        }
        let mut active = iwarp_active();
        out.clear();
        active.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        out.clear();
        active.on_message(
            4,
            Body::MpaRep {
                data: vec![],
                conn: agreed(5, 2),
            },
            &mut out,
        );
        match &out[..] {
            [Output::CancelTimer, Output::Event {
                param: EventParam::Conn(conn),
                ..
            }] => assert_eq!(*conn, agreed(5, 2), "the initiator's ESTABLISHED"),
            other => panic!("expected ESTABLISHED, got {other:?}"),
        }
    }

    /// A disconnect is a TCP close: DISCONNECTED at once on the closing side, on the FIN's
    /// arrival on the other, and no timewait anywhere.
    #[test]
    fn iwarp_disconnect_is_a_close_without_timewait() {
        let mut a = iwarp_passive();
        let mut out = Vec::new();
        a.accept(rep(), &mut out).expect("request held");
        out.clear();
        a.disconnect(&mut out);
        assert_eq!(kinds(&out), ["send FIN", "disconnected 0"]);
        out.clear();
        a.disconnect(&mut out);
        assert!(out.is_empty(), "a second disconnect does nothing");
        let mut b = iwarp_active();
        b.connect(Dest::Ip(PASSIVE_IP), req(), &mut out);
        b.on_message(
            4,
            Body::MpaRep {
                data: Vec::new(),
                conn: ConnData::default(),
            },
            &mut out,
        );
        out.clear();
        b.on_message(4, Body::Fin, &mut out);
        assert_eq!(kinds(&out), ["disconnected 0"]);
        out.clear();
        b.on_timer(&mut out);
        b.destroy(&mut out);
        assert_eq!(
            kinds(&out),
            ["finished"],
            "no timewait, nothing left to send"
        );
    }
}
