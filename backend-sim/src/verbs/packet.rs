//! The data path's wire format: RC packets between two QPs. Plain data: no world, no time.
//!
//! One packet carries one whole message (segmentation into path-MTU packets is not
//! modelled). PSNs are 24-bit and wrap; every QP starts at PSN 0.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// PSNs are 24 bits.
pub(crate) const PSN_MASK: u32 = 0x00ff_ffff;

/// The PSN after `psn`.
pub(crate) fn psn_next(psn: u32) -> u32 {
    psn.wrapping_add(1) & PSN_MASK
}

/// The PSN before `psn`.
pub(crate) fn psn_prev(psn: u32) -> u32 {
    psn.wrapping_sub(1) & PSN_MASK
}

/// How `a` compares with `b` in the 24-bit circular PSN space (within half the space).
pub(crate) fn psn_cmp(a: u32, b: u32) -> std::cmp::Ordering {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d == 0 {
        std::cmp::Ordering::Equal
    } else if d < 0x0080_0000 {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Less
    }
}

/// Why a responder refuses a request (the NAK codes of the AETH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nak {
    /// Receiver not ready: no receive posted; retry after this long.
    Rnr(Duration),
    /// Remote access error: bad rkey, range or access rights.
    RemoteAccess,
    /// Invalid request: e.g. a message longer than the posted receive.
    InvalidRequest,
    /// Remote operation error: the responder could not place the data.
    RemoteOp,
}

/// What a packet carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// A send (with immediate data, solicited or not).
    Send {
        data: Arc<[u8]>,
        imm: Option<u32>,
        solicited: bool,
    },
    /// An RDMA write (with immediate data or not).
    Write {
        addr: u64,
        rkey: u32,
        data: Arc<[u8]>,
        imm: Option<u32>,
        solicited: bool,
    },
    /// An RDMA read request.
    ReadReq { addr: u64, rkey: u32, len: u32 },
    /// Acknowledges every request up to the packet's PSN.
    Ack,
    /// The bytes of the RDMA read of the packet's PSN (acknowledging it and those before).
    ReadResp { data: Vec<u8> },
    /// Refuses the request of the packet's PSN (acknowledging those before).
    Nak(Nak),
    /// siw: TCP's reset, the answer to a message for a connection whose TCP gave up.
    TcpReset,
}

/// One RC packet (the bytes of a send or write are shared with the request that carries
/// them, so that a retransmission copies nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Packet {
    pub psn: u32,
    pub body: Body,
}

impl Packet {
    /// Whether a requester sent it (a responder answers it).
    pub(crate) fn is_request(&self) -> bool {
        matches!(
            self.body,
            Body::Send { .. } | Body::Write { .. } | Body::ReadReq { .. }
        )
    }
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let psn = self.psn;
        match &self.body {
            Body::Send { data, imm, .. } => match imm {
                Some(imm) => write!(f, "SEND_IMM psn {psn} {} bytes imm {imm:#x}", data.len()),
                None => write!(f, "SEND psn {psn} {} bytes", data.len()),
            },
            Body::Write {
                addr,
                rkey,
                data,
                imm,
                ..
            } => {
                write!(
                    f,
                    "RDMA_WRITE psn {psn} {} bytes to {addr:#x} rkey {rkey:#x}",
                    data.len()
                )?;
                match imm {
                    Some(imm) => write!(f, " imm {imm:#x}"),
                    None => Ok(()),
                }
            }
            Body::ReadReq { addr, rkey, len } => write!(
                f,
                "RDMA_READ_REQ psn {psn} {len} bytes at {addr:#x} rkey {rkey:#x}"
            ),
            Body::Ack => write!(f, "ACK psn {psn}"),
            Body::ReadResp { data } => write!(f, "RDMA_READ_RESP psn {psn} {} bytes", data.len()),
            Body::Nak(nak) => write!(f, "NAK psn {psn} {nak:?}"),
            Body::TcpReset => write!(f, "TCP_RST"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn psns_compare_across_the_wrap() {
        assert_eq!(psn_cmp(0, PSN_MASK), Ordering::Greater);
        assert_eq!(psn_cmp(PSN_MASK, 0), Ordering::Less);
        assert_eq!(psn_cmp(5, 5), Ordering::Equal);
        assert_eq!(psn_next(PSN_MASK), 0);
        assert_eq!(psn_prev(0), PSN_MASK);
    }
}
