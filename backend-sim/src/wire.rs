//! The wire: CM messages travelling between hosts with latency, jitter, random loss and
//! targeted faults, and their delivery to the host that owns the address or to the endpoint
//! they name.
//!
//! The link model: each ordered pair of hosts is one FIFO link. Jitter never reorders it: a
//! message is delivered no earlier than the one sent before it on the same link. A delayed
//! message (`delay_next`, a plan's `DelayMessages` or a chance's delay) therefore holds back
//! every later message of its link until it is delivered, as a slow path would. A reordered
//! message (`reorder_next`, a plan's `ReorderMessages`) is delayed without holding anything
//! back: later messages overtake it, as CM MADs (datagrams) can on a real network; messages
//! that ride TCP (iWARP's MPA messages and the close) cannot be reordered. Loss and
//! duplication keep the order of what is delivered.

use std::sync::Arc;

use cmtwin::Transport;

use crate::calls::is_any;
use crate::cm::messages::{Body, Dest, MessageHead, MessageKind};
use crate::engine::timeline::SimTime;
use crate::rng::Stream;
use crate::store::KeyMap;
use crate::trace::{Entry, TraceKind, WireNote};
use crate::world::{Action, DevKey, EpKey, HostKey, World};

/// A targeted fault on the wire: the next `count` messages of `kind` are lost, or delayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireFault {
    pub kind: MessageKind,
    pub count: u32,
    /// `None`: lost; `Some(d)`: delivered `d` later than usual.
    pub delay: Option<std::time::Duration>,
    /// Whether later messages of the link may overtake the delayed one (a reordering).
    pub overtaken: bool,
}

/// A message in flight.
#[derive(Clone, Debug)]
pub(crate) struct Message {
    /// The sending endpoint (0 for stateless answers of a CM).
    pub from: EpKey,
    pub to: Dest,
    pub body: Body,
    /// The host and device the message travels to, fixed when it is sent (the port still
    /// receives it after the endpoint it names is gone).
    pub port: Option<(HostKey, DevKey)>,
}

impl Message {
    /// The message's head, for the trace.
    pub(crate) fn head(&self) -> MessageHead {
        MessageHead::of(self.from, self.to, &self.body)
    }
}

/// The wire's state: when each link next delivers, and the targeted faults still to apply.
#[derive(Default)]
pub(crate) struct Net {
    /// The latest delivery time scheduled on each (from host, to host) link (only ever
    /// looked up: a hash table, not an ordered map).
    pub link_clock: KeyMap<(HostKey, HostKey), SimTime>,
    /// Targeted losses and delays still to apply.
    pub faults: Vec<WireFault>,
}

impl World {
    /// Records a wire message with `note`.
    fn record_wire(
        &mut self,
        host: Option<HostKey>,
        kind: TraceKind,
        msg: &Message,
        note: WireNote,
    ) {
        if !self.trace.is_on() {
            return;
        }
        let entry = Entry::Wire {
            msg: msg.head(),
            note,
        };
        self.record(host, kind, entry);
    }

    /// Puts `body` on the wire from endpoint `from` of `from_host` to `to`.
    pub(crate) fn send(&mut self, from_host: HostKey, from: EpKey, to: Dest, body: Body) {
        let (port, peer_found) = self.port_of(from, to);
        let msg = Message {
            from,
            to,
            body,
            port,
        };
        let mut extra = std::time::Duration::ZERO;
        let mut overtaken = false;
        let kind = msg.body.kind();
        if self.plan.is_some() {
            self.plan_message_sent(kind);
        }
        if let Some(at) = self
            .net
            .faults
            .iter()
            .position(|f| f.kind == kind && f.count > 0)
        {
            let f = &mut self.net.faults[at];
            f.count -= 1;
            let (delay, f_overtaken) = (f.delay, f.overtaken);
            if f.count == 0 {
                // Used up: gone, so that the list never grows with the faults ever set.
                self.net.faults.remove(at);
            }
            match delay {
                None => {
                    let entry = Entry::Wire {
                        msg: msg.head(),
                        note: WireNote::Targeted,
                    };
                    self.record(Some(from_host), TraceKind::Loss, entry);
                    return;
                }
                Some(d) => {
                    extra = d;
                    overtaken = f_overtaken;
                }
            }
        }
        let planned = match self.plan.is_some() {
            true => self.plan_chance(from_host, &msg),
            false => Default::default(),
        };
        if planned.lost {
            return;
        }
        extra += planned.extra;
        overtaken |= planned.overtaken;
        let p = self.cfg.loss_probability;
        if self.rng.chance(Stream::Loss, p) {
            self.record_wire(Some(from_host), TraceKind::Loss, &msg, WireNote::None);
            return;
        }
        let jitter = self
            .rng
            .range(Stream::Latency, 0, self.cfg.wire_jitter.as_nanos() as u64);
        let delay = self.cfg.wire_latency + std::time::Duration::from_nanos(jitter) + extra;
        // Jitter never reorders the messages between two hosts: links are FIFO.
        // (The FIFO clock of a link is kept for messages to live endpoints and addresses.)
        let to_host = match to {
            Dest::Ip(_) => port.map(|(h, _)| h),
            // The endpoint's port, as `port_of` found it, unless a fault plan's step may have
            // changed the endpoints since.
            Dest::Ep(_) if self.plan.is_none() => port.filter(|_| peer_found).map(|(h, _)| h),
            Dest::Ep(ep) => self.cm.eps.get(&ep).map(|e| e.host),
        };
        let mut at = self.now.after(delay);
        if let Some(to_host) = to_host.filter(|_| !overtaken) {
            let last = self.net.link_clock.entry((from_host, to_host)).or_default();
            at = at.max(*last);
            *last = at;
            if kind.rides_tcp() {
                // iWARP: the MPA messages and the close travel in the TCP stream that carries
                // the connection's data (siw), so data sent after them (the acceptor's first
                // sends, right after its MPA reply) never overtakes them, nor they the data
                // sent before (a FIN behind the last sends).
                let data = self
                    .verbs
                    .link_clock
                    .entry((from_host, to_host))
                    .or_default();
                at = at.max(*data);
                *data = at;
                self.net.link_clock.insert((from_host, to_host), at);
            }
        }
        self.record_wire(Some(from_host), TraceKind::Send, &msg, WireNote::None);
        if planned.duplicate {
            // Right behind the original, on the same FIFO link.
            self.record_wire(Some(from_host), TraceKind::Send, &msg, WireNote::None);
            self.timeline.schedule(at, Action::Deliver(msg.clone()));
        }
        self.timeline.schedule(at, Action::Deliver(msg));
    }

    /// The host and device a message from endpoint `from` to `to` travels to: the owner of the
    /// address, or the named endpoint's port; for an endpoint already forgotten, the port of
    /// the address the sender knows its peer by (the fabric routes to ports, not endpoints).
    /// A request to a loopback or any address from an InfiniBand port goes to that port
    /// itself: loopback resolution made its destination GID the source's (cma.c
    /// `cma_resolve_loopback`), and the SA's path leads back to the port. (RoCE and iWARP ids
    /// get no route there: such messages reach nobody.) Also says whether `to` names an
    /// endpoint that exists.
    fn port_of(&self, from: EpKey, to: Dest) -> (Option<(HostKey, DevKey)>, bool) {
        let port = match to {
            Dest::Ip(ip) if is_any(ip) => self
                .cm
                .eps
                .get(&from)
                .filter(|e| self.topo.devices[e.device].transport == Transport::InfiniBand)
                .map(|e| (e.host, e.device)),
            Dest::Ip(ip) => self.topo.owner_of_ip(ip),
            Dest::Ep(ep) => match self.cm.eps.get(&ep) {
                Some(e) => return (Some((e.host, e.device)), true),
                None => (self.cm.eps.get(&from))
                    .and_then(|e| e.cm.remote_ip())
                    .and_then(|ip| self.topo.owner_of_ip(ip)),
            },
        };
        (port, false)
    }

    /// A message for endpoint `ep`, which no longer exists, reaches its port. A DREQ is
    /// answered by the receiving CM itself with a DREP, as cm.c's `cm_dreq_handler` does
    /// through `cm_issue_drep` when no cm_id matches (the id was destroyed and its timewait
    /// is over); anything else is dropped.
    fn deliver_to_gone_endpoint(&mut self, msg: Message) {
        let port = msg.port.filter(|&(_, dev)| self.topo.devices[dev].present);
        match (&msg.body, port) {
            (Body::Dreq, Some((host, _))) => {
                let note = WireNote::AnsweredByCm;
                self.record_wire(Some(host), TraceKind::Recv, &msg, note);
                self.send(host, 0, Dest::Ep(msg.from), Body::Drep);
            }
            _ => self.record_wire(None, TraceKind::Drop, &msg, WireNote::EndpointGone),
        }
    }

    /// A message arrives: requests go to the host owning the address, the rest to endpoints.
    pub(crate) fn deliver(&mut self, msg: Message) {
        match msg.to {
            Dest::Ip(ip) => {
                let owner = if is_any(ip) {
                    msg.port.filter(|&(_, dev)| self.topo.devices[dev].present)
                } else {
                    self.topo.owner_of_ip(ip)
                };
                let Some((host, dev)) = owner else {
                    self.record_wire(None, TraceKind::Drop, &msg, WireNote::NobodyOwns(ip));
                    return;
                };
                self.record_wire(Some(host), TraceKind::Recv, &msg, WireNote::None);
                if self.plan.is_some() && self.plan_intercepts_request(host, dev, &msg) {
                    return;
                }
                match msg.body {
                    // The request itself when its sender no longer keeps it for
                    // retransmission, else a copy.
                    Body::Req(req) | Body::MpaReq(req) => {
                        self.on_req(host, dev, msg.from, Arc::unwrap_or_clone(req), false)
                    }
                    Body::SidrReq(req) => {
                        self.on_req(host, dev, msg.from, Arc::unwrap_or_clone(req), true)
                    }
                    // A REJ (or an iWARP close) from a request's sender, for the passive
                    // endpoint answering it.
                    Body::Rej { .. } | Body::Fin => {
                        match self.cm.passive_by_peer.get(&(host, msg.from)) {
                            Some(&ep) => {
                                let from = msg.from;
                                self.drive(ep, |e, out| e.on_message(from, msg.body, out));
                            }
                            None => {
                                let note = WireNote::NoSuchRequest;
                                self.record_wire(Some(host), TraceKind::Drop, &msg, note);
                            }
                        }
                    }
                    _ => unreachable!("only requests and their rejects are addressed by IP"),
                }
            }
            Dest::Ep(ep) => {
                let Some(e) = self.cm.eps.get(&ep) else {
                    self.deliver_to_gone_endpoint(msg);
                    return;
                };
                let (host, dev) = (e.host, e.device);
                if !self.topo.devices[dev].present {
                    self.record_wire(Some(host), TraceKind::Drop, &msg, WireNote::DeviceRemoved);
                    return;
                }
                self.record_wire(Some(host), TraceKind::Recv, &msg, WireNote::None);
                let from = msg.from;
                if self.fin_held_for_missing_bytes(ep, from, &msg.body) {
                    return; // TCP delivers it behind the bytes sent before it
                }
                self.drive(ep, |e, out| e.on_message(from, msg.body, out));
            }
        }
    }
}
