//! What a call on an id does, as the model predicts it: the exact result (success or the exact
//! errno), the state changes it makes at once, and the events that follow, each with its
//! channel, kind, id and status, in the order a channel delivers them.
//!
//! The predictions follow CM-SEMANTICS.md (§3.2's legality matrix, §3.4, §4.7-§4.15, §5.3 for
//! iWARP, §7.4's destroy table, §19 measured on the CI kernel) and the conformance scenarios
//! that pin each errno on the simulator and on real librdmacm (named next to each rule). Where
//! neither says what the real CM answers (e.g. `rdma_create_qp` on an IDLE id, whose errno
//! librdmacm leaves to the device), the model gives no prediction and the call is not made:
//! the model never widens a prediction to a set of results.

use std::time::Duration;

use cmtwin::{Call, Errno, EventKind, IbRejReason, SidrStatus, Transport};

use super::op::OverMaxCall;
use super::state::{IdState, World};
use crate::steps::refusal_status;

/// Whose event an expected event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFor {
    /// A known id (index in [`World::ids`]).
    Id(usize),
    /// A CONNECT_REQUEST's new child id of `listener`, for the request of `client`.
    Request {
        /// The listener's index.
        listener: usize,
        /// The initiator's index.
        client: usize,
    },
}

/// One event the model expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Index of the channel it arrives on.
    pub channel: usize,
    /// Its kind.
    pub kind: EventKind,
    /// Its id.
    pub id: EventFor,
    /// Its status.
    pub status: i32,
    /// The id's state once the event is delivered.
    pub then: IdState,
}

/// What the model predicts of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prediction {
    /// The call.
    pub call: Call,
    /// Success, or the exact errno.
    pub errno: Option<Errno>,
    /// State changes made by the call itself (index, new state).
    pub now: Vec<(usize, IdState)>,
    /// The events that follow, in delivery order per channel.
    pub events: Vec<Expected>,
    /// A channel on which nothing may arrive for [`QUIET`] after the call: the model waits
    /// that long so that the peer's CM has seen what the call sent before the next call.
    pub quiet: Option<usize>,
}

/// How long the model waits after a call whose effect on the peer shows no event (the REJ of
/// an initiator that gave up, CM-SEMANTICS §5.6).
pub const QUIET: Duration = Duration::from_millis(300);

impl Prediction {
    fn fails(call: Call, errno: Errno) -> Option<Self> {
        Some(Prediction {
            call,
            errno: Some(errno),
            now: Vec::new(),
            events: Vec::new(),
            quiet: None,
        })
    }

    fn succeeds(call: Call) -> Self {
        Prediction {
            call,
            errno: None,
            now: Vec::new(),
            events: Vec::new(),
            quiet: None,
        }
    }

    fn with(mut self, id: usize, state: IdState) -> Self {
        self.now.push((id, state));
        self
    }

    fn event(
        mut self,
        world: &World,
        id: usize,
        kind: EventKind,
        status: i32,
        then: IdState,
    ) -> Self {
        self.events.push(Expected {
            channel: world.ids[id].channel,
            kind,
            id: EventFor::Id(id),
            status,
            then,
        });
        self
    }
}

/// The calls on an id the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdCall {
    /// `rdma_bind_addr` to the id's own address, fresh port.
    Bind,
    /// `rdma_resolve_addr` to the latest listener's address.
    ResolveAddr,
    /// `rdma_resolve_route`.
    ResolveRoute,
    /// `rdma_create_qp` (RC).
    CreateQp,
    /// `rdma_connect`, with parameters or not.
    Connect {
        /// With parameters.
        param: bool,
    },
    /// `rdma_listen`.
    Listen,
    /// `rdma_accept` with parameters.
    Accept,
    /// `rdma_reject`.
    Reject,
    /// `rdma_disconnect`.
    Disconnect,
    /// `rdma_notify(COMM_EST)`.
    Notify,
    /// `rdma_establish`.
    Establish,
    /// `rdma_destroy_id`.
    DestroyId,
    /// `rdma_connect`, `rdma_accept` or `rdma_reject` with one byte of private data too many.
    OverMax(OverMaxCall),
}

impl IdCall {
    /// The call it makes.
    pub fn call(self) -> Call {
        match self {
            IdCall::Bind => Call::BindAddr,
            IdCall::ResolveAddr => Call::ResolveAddr,
            IdCall::ResolveRoute => Call::ResolveRoute,
            IdCall::CreateQp => Call::CreateQp,
            IdCall::Connect { .. } => Call::Connect,
            IdCall::Listen => Call::Listen,
            IdCall::Accept => Call::Accept,
            IdCall::Reject => Call::Reject,
            IdCall::Disconnect => Call::Disconnect,
            IdCall::Notify => Call::Notify,
            IdCall::Establish => Call::Establish,
            IdCall::DestroyId => Call::DestroyId,
            IdCall::OverMax(OverMaxCall::Connect) => Call::Connect,
            IdCall::OverMax(OverMaxCall::Accept) => Call::Accept,
            IdCall::OverMax(OverMaxCall::Reject) => Call::Reject,
        }
    }
}

/// The prediction for `call` on id `idx`, or `None` where the model does not know the exact
/// outcome.
pub fn predict(
    world: &World,
    transport: Transport,
    idx: usize,
    call: IdCall,
) -> Option<Prediction> {
    use IdState::*;
    let id = &world.ids[idx];
    let c = call.call();
    let iwarp = transport == Transport::Iwarp;
    if id.state == Destroyed {
        // handles::destroyed_id_is_enoent (notify and create_qp are not pinned there).
        return match call {
            IdCall::Notify | IdCall::CreateQp => None,
            _ => Prediction::fails(c, Errno::ENOENT),
        };
    }
    let s = id.state;
    let ud_only = matches!(
        call,
        IdCall::Bind
            | IdCall::ResolveAddr
            | IdCall::ResolveRoute
            | IdCall::Listen
            | IdCall::CreateQp
    );
    if id.ud && !ud_only {
        return predict_ud(world, transport, idx, call);
    }
    match call {
        // §3.2: bind only from IDLE (legality::bind_twice_is_einval, bind_after_resolve_or_listen).
        IdCall::Bind => match s {
            Idle => Some(Prediction::succeeds(c).with(idx, AddrBound)),
            _ => Prediction::fails(c, Errno::EINVAL),
        },
        // §3.2: from IDLE (auto-bind) or ADDR_BOUND; else EINVAL (resolve_addr_twice_is_einval,
        // resolve_addr_on_listener_is_einval).
        IdCall::ResolveAddr => match s {
            Idle | AddrBound => Some(Prediction::succeeds(c).event(
                world,
                idx,
                EventKind::AddrResolved,
                0,
                AddrResolved,
            )),
            _ => Prediction::fails(c, Errno::EINVAL),
        },
        // §3.2: from ADDR_RESOLVED; IDLE and a bound id are EINVAL
        // (resolve_route_before_addr_is_einval), ROUTE_RESOLVED too (resolve_route_twice), and
        // CONNECT after REJECTED (connect_after_rejected_is_einval). A wildcard listener would
        // crash librdmacm (X in §3.2): not predicted.
        IdCall::ResolveRoute => match s {
            AddrResolved => Some(Prediction::succeeds(c).event(
                world,
                idx,
                EventKind::RouteResolved,
                0,
                RouteResolved,
            )),
            Listen if id.wildcard => None,
            _ => Prediction::fails(c, Errno::EINVAL),
        },
        // §4.6: an id with a device and no QP yet.
        IdCall::CreateQp => match s {
            AddrResolved | RouteResolved | Requested if !id.qp => Some(Prediction::succeeds(c)),
            _ => None,
        },
        IdCall::Connect { param } => predict_connect(world, transport, idx, param),
        // §4.8: IDLE auto-binds to the wildcard, ADDR_BOUND listens, else EINVAL
        // (listen_twice_is_einval, listen_on_idle_id_autobinds).
        IdCall::Listen => match s {
            Idle | AddrBound => Some(Prediction::succeeds(c).with(idx, Listen)),
            _ => Prediction::fails(c, Errno::EINVAL),
        },
        IdCall::Accept => predict_accept(world, transport, idx),
        // §4.11: a child's pending request is refused: REJECTED with the transport's refusal
        // status (reject::reject_gives_rejected_28_with_data); a listener or an IDLE id is
        // EINVAL (accept_or_reject_on_listener_is_einval, connection_calls_on_idle_id).
        IdCall::Reject => match (s, id.server, id.peer) {
            (Idle | Listen, _, _) => Prediction::fails(c, Errno::EINVAL),
            (Requested, true, Some(peer)) => {
                Some(Prediction::succeeds(c).with(idx, Refused).event(
                    world,
                    peer,
                    EventKind::Rejected,
                    refusal_status(transport),
                    Refused,
                ))
            }
            _ => None,
        },
        IdCall::Disconnect => predict_disconnect(world, iwarp, idx),
        // §9: IDLE is EINVAL (connection_calls_on_idle_id_are_einval); an established id is
        // EISCONN on IB and RoCE, a no-op on iWARP (notify_on_established_id_is_eisconn).
        IdCall::Notify => match s {
            Idle => Prediction::fails(c, Errno::EINVAL),
            Established if iwarp => Some(Prediction::succeeds(c)),
            Established => Prediction::fails(c, Errno::EISCONN),
            _ => None,
        },
        // §4.10: librdmacm refuses an id with a QP (accept_or_establish_after_establishment);
        // an IDLE id is EINVAL (connection_calls_on_idle_id_are_einval).
        IdCall::Establish => match s {
            _ if id.qp => Prediction::fails(c, Errno::EINVAL),
            Idle => Prediction::fails(c, Errno::EINVAL),
            _ => None,
        },
        IdCall::DestroyId => Some(predict_destroy(world, iwarp, idx)),
        // §6.1: too much private data is EINVAL (an accept's failure rejects the request).
        IdCall::OverMax(which) => over_max(world, transport, idx, which),
    }
}

/// §6.1: too much private data is EINVAL, where the call would otherwise be made
/// (private_data::*_over_maximum_is_einval; the length is checked against the id's device,
/// so only ids with one are predicted). A connect or reject changes nothing; a connection's
/// accept fails in the kernel, whose failure path rejects the request (cma.c's `rdma_accept`,
/// §4.10, §6.1's "the kernel then rejects the request with REJ 28"): the initiator gets
/// REJECTED with the transport's refusal status, as after `rdma_reject`. (A UD accept's
/// reject attempt is not predicted: §6.1 leaves its outcome open.)
fn over_max(
    world: &World,
    transport: Transport,
    idx: usize,
    which: OverMaxCall,
) -> Option<Prediction> {
    let id = &world.ids[idx];
    let s = id.state;
    let legal = match which {
        OverMaxCall::Connect => s == IdState::RouteResolved && id.qp,
        OverMaxCall::Accept => s == IdState::Requested && id.server && id.qp,
        OverMaxCall::Reject => s == IdState::Requested && id.server,
    };
    if !legal {
        return None;
    }
    let call = IdCall::OverMax(which).call();
    match (which, id.ud, id.peer.filter(|p| world.ids[*p].live())) {
        (OverMaxCall::Accept, true, _) => None,
        (OverMaxCall::Accept, false, Some(peer)) if world.ids[peer].state == IdState::Requested => {
            let mut p = Prediction::fails(call, Errno::EINVAL)?.with(idx, IdState::Refused);
            p = p.event(
                world,
                peer,
                EventKind::Rejected,
                refusal_status(transport),
                IdState::Refused,
            );
            Some(p)
        }
        (OverMaxCall::Accept, false, _) => None,
        _ => Prediction::fails(call, Errno::EINVAL),
    }
}

/// The connection calls on a UDP id (IB and RoCE, §13.2: a SIDR exchange instead of a
/// connection): a connect reaches the UDP listener as a CONNECT_REQUEST, or without one ends
/// in UNREACHABLE 1 (ud::ud_no_listener_is_unreachable_1); the child's accept gives the client
/// ESTABLISHED and the server nothing (ud::ud_connect_is_established_with_ud_data), its
/// reject UNREACHABLE 2 (ud::ud_reject_is_unreachable_2), as does its destruction unanswered
/// (§7.4's SIDR_REQ_RCVD row). A connect outside ROUTE_RESOLVED is EINVAL (§3.2), as are the
/// connection calls of §3.2 on an id that never connected; the rest is not predicted.
fn predict_ud(world: &World, transport: Transport, idx: usize, call: IdCall) -> Option<Prediction> {
    use IdState::*;
    let id = &world.ids[idx];
    let (c, s) = (call.call(), id.state);
    let peer = id.peer.filter(|p| world.ids[*p].live());
    let answerable =
        s == Requested && id.server && peer.is_some_and(|p| world.ids[p].state == Requested);
    match call {
        IdCall::Connect { .. } => match s {
            RouteResolved if id.qp => {
                let dst = id.dst?;
                let mut p = Prediction::succeeds(c).with(idx, Requested);
                match world.listener_on(dst, true) {
                    Some(listener) => p.events.push(Expected {
                        channel: world.ids[listener].channel,
                        kind: EventKind::ConnectRequest,
                        id: EventFor::Request {
                            listener,
                            client: idx,
                        },
                        status: 0,
                        then: Requested,
                    }),
                    None => {
                        p = p.event(
                            world,
                            idx,
                            EventKind::Unreachable,
                            SidrStatus::UNSUPPORTED,
                            Datagram,
                        )
                    }
                }
                Some(p)
            }
            RouteResolved | Listen => None,
            _ => Prediction::fails(c, Errno::EINVAL),
        },
        IdCall::Accept if answerable && id.qp => {
            let mut p = Prediction::succeeds(c).with(idx, Datagram).event(
                world,
                peer?,
                EventKind::Established,
                0,
                Datagram,
            );
            p.quiet = Some(id.channel);
            Some(p)
        }
        IdCall::Reject if answerable => Some(Prediction::succeeds(c).with(idx, Datagram).event(
            world,
            peer?,
            EventKind::Unreachable,
            SidrStatus::REJECT,
            Datagram,
        )),
        IdCall::OverMax(which) => over_max(world, transport, idx, which),
        IdCall::Establish if id.qp => Prediction::fails(c, Errno::EINVAL),
        IdCall::Disconnect => match s {
            Idle | AddrBound | AddrResolved | RouteResolved => Prediction::fails(c, Errno::EINVAL),
            _ => None,
        },
        IdCall::DestroyId => {
            let mut p = Prediction::succeeds(c).with(idx, Destroyed);
            match peer {
                Some(peer) if answerable => {
                    p = p.event(
                        world,
                        peer,
                        EventKind::Unreachable,
                        SidrStatus::REJECT,
                        Datagram,
                    )
                }
                Some(peer) if s == Requested && world.ids[peer].state == Requested => {
                    p.now.push((peer, Abandoned))
                }
                _ => {}
            }
            Some(p)
        }
        _ => None,
    }
}

/// §4.7: only from ROUTE_RESOLVED (connect_before_route_is_einval, connect_twice_is_einval,
/// connect_after_rejected_is_einval); an RC id without QP or parameters is EINVAL
/// (connect_rc_without_qp_or_params_is_einval). With a QP: a CONNECT_REQUEST on the
/// listener's channel; with no listener on the address, REJECTED 8 on IB and RoCE, and on
/// iWARP the call fails with ECONNREFUSED and keeps the route (no_listener_gives_rejected_8,
/// destroyed_listener_gives_rejected_8).
fn predict_connect(
    world: &World,
    transport: Transport,
    idx: usize,
    param: bool,
) -> Option<Prediction> {
    let id = &world.ids[idx];
    let c = Call::Connect;
    match id.state {
        IdState::RouteResolved if id.qp => {}
        IdState::RouteResolved if !param => return Prediction::fails(c, Errno::EINVAL),
        // A QP-less connect (CONNECT_RESPONSE, none on iWARP) is outside the model.
        IdState::RouteResolved => return None,
        IdState::Listen if id.wildcard => return None,
        _ => return Prediction::fails(c, Errno::EINVAL),
    }
    let dst = id.dst?;
    match world.listener_on(dst, false) {
        Some(listener) => {
            let mut p = Prediction::succeeds(c).with(idx, IdState::Requested);
            p.events.push(Expected {
                channel: world.ids[listener].channel,
                kind: EventKind::ConnectRequest,
                id: EventFor::Request {
                    listener,
                    client: idx,
                },
                status: 0,
                then: IdState::Requested,
            });
            Some(p)
        }
        None if transport == Transport::Iwarp => Prediction::fails(c, Errno::ECONNREFUSED),
        None => Some(Prediction::succeeds(c).with(idx, IdState::Requested).event(
            world,
            idx,
            EventKind::Rejected,
            IbRejReason::INVALID_SERVICE_ID,
            IdState::Refused,
        )),
    }
}

/// §4.10: a child's pending request with a QP is accepted: ESTABLISHED on the client, then
/// (its RTU) on the child (connect::accept_establishes_both_sides). A listener or an IDLE id
/// is EINVAL (accept_or_reject_on_listener_is_einval, connection_calls_on_idle_id_are_einval);
/// a child whose initiator gave up is EINVAL, ECONNRESET on iWARP
/// (accept_after_initiator_gave_up_is_einval); an established child is EINVAL, and on iWARP
/// the failed accept ends the connection: DISCONNECTED on both sides
/// (accept_or_establish_after_establishment_is_einval).
fn predict_accept(world: &World, transport: Transport, idx: usize) -> Option<Prediction> {
    let id = &world.ids[idx];
    let c = Call::Accept;
    let iwarp = transport == Transport::Iwarp;
    match (id.state, id.server, id.peer) {
        (IdState::Idle | IdState::Listen, _, _) => Prediction::fails(c, Errno::EINVAL),
        (IdState::Requested, true, Some(peer)) if id.qp => Some(
            Prediction::succeeds(c)
                .event(world, peer, EventKind::Established, 0, IdState::Established)
                .event(world, idx, EventKind::Established, 0, IdState::Established),
        ),
        (IdState::Abandoned, true, _) if id.qp => {
            let errno = if iwarp {
                Errno::ECONNRESET
            } else {
                Errno::EINVAL
            };
            let mut p = Prediction::fails(c, errno)?;
            p.now.push((idx, IdState::Refused));
            Some(p)
        }
        (IdState::Established, true, Some(peer)) if iwarp => {
            let mut p = Prediction::fails(c, Errno::EINVAL)?;
            p = p
                .event(world, peer, EventKind::Disconnected, 0, IdState::Closed)
                .event(world, idx, EventKind::Disconnected, 0, IdState::Closed);
            Some(p)
        }
        (IdState::Established, true, _) => Prediction::fails(c, Errno::EINVAL),
        _ => None,
    }
}

/// §4.12, §5.2 S10, §5.3, §7: on IB and RoCE the first side's DREQ gives the peer DISCONNECTED;
/// the peer's answer (its DREP) gives the first side DISCONNECTED, and both TIMEWAIT_EXIT
/// (disconnect::client_disconnect_reaches_both_sides, timewait::*); further calls return 0
/// and do nothing (disconnect_again_is_harmless), as after REJECTED (§3.4). On iWARP the close
/// gives DISCONNECTED on both sides at once, and nothing follows
/// (unanswered_disconnect_leaves_initiator_waiting). An id that never connected is EINVAL
/// (connection_calls_on_idle_id_are_einval; §3.2 for the resolved states); on IB and RoCE
/// librdmacm has then already moved its QP to ERROR, so that its later connect ends in
/// CONNECT_ERROR (sim_only's disconnect_before_connecting_leaves_the_qp_in_error), which the
/// model does not follow: it makes no such call on a resolved id with a QP there.
fn predict_disconnect(world: &World, iwarp: bool, idx: usize) -> Option<Prediction> {
    use IdState::*;
    let id = &world.ids[idx];
    let c = Call::Disconnect;
    let peer = id.peer.filter(|p| world.ids[*p].live());
    match (id.state, peer) {
        (AddrBound | AddrResolved | RouteResolved, _) if id.qp && !iwarp => None,
        (Idle | AddrBound | AddrResolved | RouteResolved, _) => Prediction::fails(c, Errno::EINVAL),
        (Established, Some(peer)) if iwarp => Some(
            Prediction::succeeds(c)
                .event(world, peer, EventKind::Disconnected, 0, Closed)
                .event(world, idx, EventKind::Disconnected, 0, Closed),
        ),
        (Established, Some(peer)) => Some(Prediction::succeeds(c).with(idx, DreqSent).event(
            world,
            peer,
            EventKind::Disconnected,
            0,
            DreqReceived,
        )),
        (Closed, _) => Some(Prediction::succeeds(c)),
        (DreqSent | Refused, _) if !iwarp => Some(Prediction::succeeds(c)),
        (DreqReceived, peer) => {
            let mut p = Prediction::succeeds(c);
            if let Some(peer) = peer.filter(|p| world.ids[*p].state == DreqSent) {
                p = p
                    .event(world, peer, EventKind::Disconnected, 0, DreqSent)
                    .event(world, peer, EventKind::TimewaitExit, 0, Closed);
            }
            Some(p.event(world, idx, EventKind::TimewaitExit, 0, Closed))
        }
        _ => None,
    }
}

/// §4.15, §7.4's table: destroying an id always succeeds (every event is acked); what its peer
/// sees depends on how far the connection got: an unanswered child's destruction rejects the
/// client (destroying_unaccepted_request_gives_rejected_28), a connected id's sends a DREQ
/// (destroying_connected_id_disconnects_peer), an initiator's before any answer leaves the
/// child without event (accept_after_initiator_gave_up_is_einval), and one that received a
/// DREQ answers it with a DREP (DISCONNECTED and then TIMEWAIT_EXIT for the initiator).
///
/// On iWARP the destroy of an initiator whose MPA request is unanswered blocks until siw's MPA
/// timeout (10 s after the request, measured): meanwhile every other unanswered initiator's
/// own timeout passes too (the requests of a case are sent microseconds apart, and events are
/// awaited for 30 s), each with UNREACHABLE -ETIMEDOUT and its TCP connection closed, so that
/// its child can no longer be accepted.
fn predict_destroy(world: &World, iwarp: bool, idx: usize) -> Prediction {
    use IdState::*;
    let id = &world.ids[idx];
    let mut p = Prediction::succeeds(Call::DestroyId).with(idx, Destroyed);
    if iwarp && awaits_mpa_reply(world, idx) {
        // In the order of their requests, which is the order of their children.
        let mut others: Vec<(usize, usize)> = (0..world.ids.len())
            .filter(|&other| other != idx && awaits_mpa_reply(world, other))
            .filter_map(|other| Some((world.ids[other].peer?, other)))
            .collect();
        others.sort_unstable();
        for (child, other) in others {
            p.now.push((child, Abandoned));
            p = p.event(world, other, EventKind::Unreachable, -110, Refused);
        }
    }
    let Some(peer) = id.peer.filter(|p| world.ids[*p].live()) else {
        return p;
    };
    let peer_state = world.ids[peer].state;
    match (id.state, id.server, peer_state) {
        (Requested, false, Requested) => {
            p.now.push((peer, Abandoned));
            p.quiet = Some(world.ids[peer].channel);
        }
        (Requested, true, Requested) => {
            p = p.event(
                world,
                peer,
                EventKind::Rejected,
                refusal_status_of(iwarp),
                Refused,
            );
        }
        (Established, _, Established) if iwarp => {
            p = p.event(world, peer, EventKind::Disconnected, 0, Closed);
        }
        (Established, _, Established) => {
            p = p.event(world, peer, EventKind::Disconnected, 0, DreqReceived);
        }
        (DreqReceived, _, DreqSent) => {
            p = p
                .event(world, peer, EventKind::Disconnected, 0, DreqSent)
                .event(world, peer, EventKind::TimewaitExit, 0, Closed);
        }
        _ => {}
    }
    p
}

/// An initiator whose request reached a child that has not answered it (on iWARP: its MPA
/// request is unanswered).
fn awaits_mpa_reply(world: &World, idx: usize) -> bool {
    let id = &world.ids[idx];
    !id.server
        && id.state == IdState::Requested
        && id
            .peer
            .is_some_and(|c| world.ids[c].live() && world.ids[c].state == IdState::Requested)
}

fn refusal_status_of(iwarp: bool) -> i32 {
    refusal_status(if iwarp {
        Transport::Iwarp
    } else {
        Transport::Roce
    })
}
