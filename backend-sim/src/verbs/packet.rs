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

/// The operation of an atomic request, on the responder's 8 bytes taken as a native-endian
/// u64 (rxe's `rxe_mr_do_atomic_op` works on the page's u64 in CPU order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    /// Compare and swap: the value becomes `swap` if it equals `compare`.
    CmpSwap { compare: u64, swap: u64 },
    /// Fetch and add: `add` is added, wrapping.
    FetchAdd { add: u64 },
}

impl AtomicOp {
    /// The value `old` becomes.
    pub(crate) fn apply(self, old: u64) -> u64 {
        match self {
            AtomicOp::CmpSwap { compare, swap } if old == compare => swap,
            AtomicOp::CmpSwap { .. } => old,
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
        }
    }
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
    /// An atomic request on the 8 bytes at `addr`.
    AtomicReq { addr: u64, rkey: u32, op: AtomicOp },
    /// Acknowledges every request up to the packet's PSN.
    Ack,
    /// The value before of the atomic of the packet's PSN (acknowledging it and those
    /// before: InfiniBand's ATOMIC ACKNOWLEDGE).
    AtomicResp { orig: u64 },
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
            Body::Send { .. } | Body::Write { .. } | Body::ReadReq { .. } | Body::AtomicReq { .. }
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
            Body::AtomicReq { addr, rkey, op } => match op {
                AtomicOp::CmpSwap { compare, swap } => write!(
                    f,
                    "CMP_SWAP psn {psn} at {addr:#x} rkey {rkey:#x} compare {compare:#x} \
                     swap {swap:#x}"
                ),
                AtomicOp::FetchAdd { add } => write!(
                    f,
                    "FETCH_ADD psn {psn} at {addr:#x} rkey {rkey:#x} add {add:#x}"
                ),
            },
            Body::Ack => write!(f, "ACK psn {psn}"),
            Body::AtomicResp { orig } => write!(f, "ATOMIC_ACK psn {psn} orig {orig:#x}"),
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
    fn atomics_compare_swap_or_add_wrapping() {
        let cas = AtomicOp::CmpSwap {
            compare: 5,
            swap: 9,
        };
        assert_eq!((cas.apply(5), cas.apply(6)), (9, 6));
        let faa = AtomicOp::FetchAdd { add: 3 };
        assert_eq!((faa.apply(4), faa.apply(u64::MAX)), (7, 2));
    }

    #[test]
    fn psns_compare_across_the_wrap() {
        assert_eq!(psn_cmp(0, PSN_MASK), Ordering::Greater);
        assert_eq!(psn_cmp(PSN_MASK, 0), Ordering::Less);
        assert_eq!(psn_cmp(5, 5), Ordering::Equal);
        assert_eq!(psn_next(PSN_MASK), 0);
        assert_eq!(psn_prev(0), PSN_MASK);
    }
}
