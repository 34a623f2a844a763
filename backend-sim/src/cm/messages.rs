//! The CM's wire formats: the messages (REQ, MRA, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP; on
//! iWARP the MPA request, reply and reject and the TCP connection's FIN and RST) and what the
//! trace shows of them. Plain data: no world, no time.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use cmtwin::{ConnData, PortSpace, QpType};

/// The key of a CM endpoint (the sender or receiver of a message).
pub(crate) type EpKey = u64;

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
    /// The primary path's traffic class (the REQ's Primary Traffic Class): on RoCE the TOS the
    /// sender's route was resolved with, 0 elsewhere.
    pub tclass: u8,
}

/// A CM message body. A request is shared, not copied, between the message on the wire and
/// the sender's copy for retransmission.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    Req(Arc<Request>),
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
    SidrReq(Arc<Request>),
    SidrRep {
        status: i32,
        qpn: u32,
        qkey: u32,
        data: Vec<u8>,
    },
    /// iWARP: TCP connection and MPA request.
    MpaReq(Arc<Request>),
    /// iWARP: MPA reply accepting the request.
    MpaRep {
        data: Vec<u8>,
        conn: ConnData,
    },
    /// iWARP: MPA reply with the reject bit.
    MpaRej {
        data: Vec<u8>,
    },
    /// iWARP: the TCP connection is closed (FIN).
    Fin,
    /// iWARP: TCP reset (nothing listens on the port).
    Rst,
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
    /// iWARP MPA request (sent once the TCP connection is up).
    MpaReq,
    /// iWARP MPA reply accepting the connection.
    MpaRep,
    /// iWARP MPA reply rejecting the connection.
    MpaRej,
    /// iWARP: TCP FIN closing the connection.
    Fin,
    /// iWARP: TCP RST (no listener).
    Rst,
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
            Body::MpaReq(_) => MessageKind::MpaReq,
            Body::MpaRep { .. } => MessageKind::MpaRep,
            Body::MpaRej { .. } => MessageKind::MpaRej,
            Body::Fin => MessageKind::Fin,
            Body::Rst => MessageKind::Rst,
        }
    }
}

impl MessageKind {
    /// Every kind, IB CM's then iWARP's.
    pub const ALL: [MessageKind; 14] = [
        MessageKind::Req,
        MessageKind::Mra,
        MessageKind::Rep,
        MessageKind::Rtu,
        MessageKind::Rej,
        MessageKind::Dreq,
        MessageKind::Drep,
        MessageKind::SidrReq,
        MessageKind::SidrRep,
        MessageKind::MpaReq,
        MessageKind::MpaRep,
        MessageKind::MpaRej,
        MessageKind::Fin,
        MessageKind::Rst,
    ];

    /// Whether the message rides a TCP stream (iWARP's MPA messages and the TCP close), which
    /// delivers in order whatever happens: only the IB CM's MADs, datagrams, can be reordered.
    pub fn rides_tcp(self) -> bool {
        matches!(
            self,
            MessageKind::MpaReq
                | MessageKind::MpaRep
                | MessageKind::MpaRej
                | MessageKind::Fin
                | MessageKind::Rst
        )
    }

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
            MessageKind::MpaReq => "MPA_REQ",
            MessageKind::MpaRep => "MPA_REP",
            MessageKind::MpaRej => "MPA_REJ",
            MessageKind::Fin => "FIN",
            MessageKind::Rst => "RST",
        }
    }
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

impl MessageHead {
    /// The head of `body` sent from `from` to `to`.
    pub(crate) fn of(from: EpKey, to: Dest, body: &Body) -> MessageHead {
        let code = match body {
            Body::Rej { reason, .. } => Some(*reason),
            Body::SidrRep { status, .. } => Some(*status),
            _ => None,
        };
        MessageHead {
            kind: body.kind(),
            from,
            to,
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
    let len = len.map_or(data.len(), |len| len.max(data.len()));
    // One allocation of the final length (not a copy grown by the padding).
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(data);
    v.resize(len, 0);
    v
}
