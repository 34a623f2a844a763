//! RDMA transports and the private-data limits each imposes (CM-SEMANTICS.md §6).

/// The transport of an RDMA device, which decides private-data limits, reject semantics and
/// whether timewait exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// InfiniBand: IB CM with an SA for routes and multicast.
    InfiniBand,
    /// RoCE: the IB CM over Ethernet; routes computed locally.
    Roce,
    /// iWARP: TCP + MPA; no timewait, exact-length private data.
    Iwarp,
}

/// A CM message that carries user private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivateDataOp {
    /// `rdma_connect` on a connected QP (REQ).
    Connect,
    /// `rdma_connect` on a UD id (SIDR REQ).
    ConnectUd,
    /// `rdma_accept` on a connected QP (REP).
    Accept,
    /// `rdma_accept` on a UD request (SIDR REP).
    AcceptUd,
    /// `rdma_reject` on a connected request (REJ).
    Reject,
    /// `rdma_reject` on a UD request (SIDR REP with status 2).
    RejectUd,
}

/// Bytes of an IP id's CMA header that the kernel puts in front of REQ and SIDR REQ data.
pub const CMA_HEADER_LEN: usize = 36;

/// The largest private data a user may pass for `op` on `transport` with IP addressing; more is
/// EINVAL (never truncated).
pub fn max_private_data(transport: Transport, op: PrivateDataOp) -> usize {
    match (transport, op) {
        // siw and erdma accept 256, but the API's length is a u8.
        (Transport::Iwarp, _) => 255,
        (_, PrivateDataOp::Connect) => 92 - CMA_HEADER_LEN,
        (_, PrivateDataOp::ConnectUd) => 216 - CMA_HEADER_LEN,
        (_, PrivateDataOp::Accept) => 196,
        (_, PrivateDataOp::AcceptUd) => 136,
        (_, PrivateDataOp::Reject) => 148,
        (_, PrivateDataOp::RejectUd) => 136,
    }
}

/// The length of private data the receiver sees on IB/RoCE: the whole zero-padded field of the
/// CM message (`None` on iWARP, where the sent length is delivered).
pub fn delivered_private_data_len(transport: Transport, op: PrivateDataOp) -> Option<usize> {
    match transport {
        Transport::Iwarp => None,
        _ => Some(max_private_data(transport, op)),
    }
}
