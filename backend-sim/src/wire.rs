//! The wire: CM messages (REQ, MRA, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP) travelling between
//! hosts with latency and possible loss.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use cmtwin::{ConnData, PortSpace, QpType};

use crate::engine::trace::{Entry, TraceKind, WireNote};
use crate::rng::Stream;
use crate::world::{Action, EpKey, HostKey, World};

/// Where a message goes: requests are addressed by IP (the passive side has no endpoint yet),
/// everything else to the peer's endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    Ip(IpAddr),
    Ep(EpKey),
}

/// The content of a REQ or SIDR REQ.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ps: PortSpace,
    pub qp_type: QpType,
    /// The sender's private data, zero-padded to the message's field (IB/RoCE).
    pub data: Vec<u8>,
    /// Sender's view: its responder resources, initiator depth, QPN, ...
    pub conn: ConnData,
    /// The sender's local ACK timeout exponent (decides the passive side's timewait).
    pub ack_timeout: u8,
    /// The path's packet life time exponent.
    pub plt: u8,
}

/// A CM message body.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    Req(Request),
    Mra,
    Rep {
        data: Vec<u8>,
        conn: ConnData,
        ack_timeout: u8,
    },
    Rtu,
    Rej {
        reason: i32,
        data: Vec<u8>,
    },
    Dreq,
    Drep,
    SidrReq(Request),
    SidrRep {
        status: i32,
        qpn: u32,
        qkey: u32,
        data: Vec<u8>,
    },
}

/// The kinds of CM messages, for targeted faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MessageKind {
    /// Connection request.
    Req,
    /// Message receipt acknowledgement ("wait, I am still deciding").
    Mra,
    /// Connection reply.
    Rep,
    /// Ready to use.
    Rtu,
    /// Reject.
    Rej,
    /// Disconnect request.
    Dreq,
    /// Disconnect reply.
    Drep,
    /// Service id resolution request (UD).
    SidrReq,
    /// Service id resolution reply (UD).
    SidrRep,
}

/// A targeted fault on the wire: the next `count` messages of `kind` are lost, or delayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireFault {
    pub kind: MessageKind,
    pub count: u32,
    /// `None`: lost; `Some(d)`: delivered `d` later than usual.
    pub delay: Option<std::time::Duration>,
}

impl Body {
    pub(crate) fn kind(&self) -> MessageKind {
        match self {
            Body::Req(_) => MessageKind::Req,
            Body::Mra => MessageKind::Mra,
            Body::Rep { .. } => MessageKind::Rep,
            Body::Rtu => MessageKind::Rtu,
            Body::Rej { .. } => MessageKind::Rej,
            Body::Dreq => MessageKind::Dreq,
            Body::Drep => MessageKind::Drep,
            Body::SidrReq(_) => MessageKind::SidrReq,
            Body::SidrRep { .. } => MessageKind::SidrRep,
        }
    }
}

impl MessageKind {
    /// The message's name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            MessageKind::Req => "REQ",
            MessageKind::Mra => "MRA",
            MessageKind::Rep => "REP",
            MessageKind::Rtu => "RTU",
            MessageKind::Rej => "REJ",
            MessageKind::Dreq => "DREQ",
            MessageKind::Drep => "DREP",
            MessageKind::SidrReq => "SIDR_REQ",
            MessageKind::SidrRep => "SIDR_REP",
        }
    }
}

/// A message in flight.
#[derive(Clone, Debug)]
pub(crate) struct Message {
    /// The sending endpoint (0 for stateless answers of a CM).
    pub from: EpKey,
    pub to: Dest,
    pub body: Body,
}

/// What the trace shows of a message: its kind, ends and code, without its payload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageHead {
    kind: MessageKind,
    from: EpKey,
    to: Dest,
    /// REJ's reason or SIDR REP's status.
    code: Option<i32>,
}

impl Message {
    /// The message's head, for the trace.
    pub(crate) fn head(&self) -> MessageHead {
        let code = match &self.body {
            Body::Rej { reason, .. } => Some(*reason),
            Body::SidrRep { status, .. } => Some(*status),
            _ => None,
        };
        MessageHead {
            kind: self.body.kind(),
            from: self.from,
            to: self.to,
            code,
        }
    }
}

impl fmt::Display for MessageHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ep{} -> ", self.kind.name(), self.from)?;
        match self.to {
            Dest::Ip(ip) => write!(f, "{ip}")?,
            Dest::Ep(ep) => write!(f, "ep{ep}")?,
        }
        match (self.kind, self.code) {
            (MessageKind::Rej, Some(reason)) => write!(f, " reason {reason}"),
            (MessageKind::SidrRep, Some(status)) => write!(f, " status {status}"),
            _ => Ok(()),
        }
    }
}

/// `data` zero-padded to `len` bytes, as the IB CM's fixed-size fields deliver it.
pub(crate) fn padded(data: &[u8], len: Option<usize>) -> Vec<u8> {
    let mut v = data.to_vec();
    if let Some(len) = len {
        v.resize(len.max(data.len()), 0);
    }
    v
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
        let entry = Entry::Wire {
            msg: msg.head(),
            note,
        };
        self.record(host, kind, entry);
    }

    /// Puts `body` on the wire from endpoint `from` of `from_host` to `to`.
    pub(crate) fn send(&mut self, from_host: HostKey, from: EpKey, to: Dest, body: Body) {
        let msg = Message { from, to, body };
        let mut extra = std::time::Duration::ZERO;
        let kind = msg.body.kind();
        if let Some(f) = self
            .wire_faults
            .iter_mut()
            .find(|f| f.kind == kind && f.count > 0)
        {
            f.count -= 1;
            match f.delay {
                None => {
                    let entry = Entry::Wire {
                        msg: msg.head(),
                        note: WireNote::Targeted,
                    };
                    self.record(Some(from_host), TraceKind::Loss, entry);
                    return;
                }
                Some(d) => extra = d,
            }
        }
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
        let to_host = match to {
            Dest::Ip(ip) => self.owner_of_ip(ip).map(|(h, _)| h),
            Dest::Ep(ep) => self.eps.get(&ep).map(|e| e.host),
        };
        let mut at = self.now.after(delay);
        if let Some(to_host) = to_host {
            let last = self.link_clock.entry((from_host, to_host)).or_default();
            at = at.max(*last);
            *last = at;
        }
        self.record_wire(Some(from_host), TraceKind::Send, &msg, WireNote::None);
        self.timeline.schedule(at, Action::Deliver(msg));
    }

    /// A message arrives: requests go to the host owning the address, the rest to endpoints.
    pub(crate) fn deliver(&mut self, msg: Message) {
        match msg.to {
            Dest::Ip(ip) => {
                let Some((host, dev)) = self.owner_of_ip(ip) else {
                    self.record_wire(None, TraceKind::Drop, &msg, WireNote::NobodyOwns(ip));
                    return;
                };
                self.record_wire(Some(host), TraceKind::Recv, &msg, WireNote::None);
                match msg.body {
                    Body::Req(req) => self.on_req(host, dev, msg.from, req, false),
                    Body::SidrReq(req) => self.on_req(host, dev, msg.from, req, true),
                    // A REJ from a REQ's sender, for the passive endpoint answering it.
                    Body::Rej { .. } => match self.passive_by_peer.get(&(host, msg.from)) {
                        Some(&ep) => self.on_message(ep, msg.from, msg.body),
                        None => {
                            let note = WireNote::NoSuchRequest;
                            self.record_wire(Some(host), TraceKind::Drop, &msg, note);
                        }
                    },
                    _ => unreachable!("only requests and their rejects are addressed by IP"),
                }
            }
            Dest::Ep(ep) => {
                let Some(e) = self.eps.get(&ep) else {
                    self.record_wire(None, TraceKind::Drop, &msg, WireNote::EndpointGone);
                    return;
                };
                let (host, dev) = (e.host, e.device);
                if !self.devices[dev].present {
                    self.record_wire(Some(host), TraceKind::Drop, &msg, WireNote::DeviceRemoved);
                    return;
                }
                self.record_wire(Some(host), TraceKind::Recv, &msg, WireNote::None);
                self.on_message(ep, msg.from, msg.body);
            }
        }
    }
}
