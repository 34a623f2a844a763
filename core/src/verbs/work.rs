//! Work requests: scatter/gather entries, send-queue and receive-queue requests.

/// `struct ibv_sge`: `length` bytes at device address `addr` of the region whose local key is
/// `lkey`. A bad key, or bytes outside the region, complete the request with LOC_PROT_ERR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Device address (see [`crate::verbs::MemoryRegion::addr`]).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// The operation of a send-queue work request (`enum ibv_wr_opcode` with its remote part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`: consumes a receive of the peer.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`: a send carrying 32 bits of immediate data.
    SendWithImm(u32),
    /// `IBV_WR_RDMA_WRITE` to the peer's `remote_addr` under `rkey`; consumes nothing.
    RdmaWrite {
        /// The peer's device address.
        remote_addr: u64,
        /// The peer region's remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: a write that also consumes a receive of the peer, which
    /// completes with the immediate data.
    RdmaWriteWithImm {
        /// The peer's device address.
        remote_addr: u64,
        /// The peer region's remote key.
        rkey: u32,
        /// The immediate data.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ` of the peer's bytes at `remote_addr` into the local entries.
    RdmaRead {
        /// The peer's device address.
        remote_addr: u64,
        /// The peer region's remote key.
        rkey: u32,
    },
}

/// Where a send-queue request's local bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Scatter/gather entries over registered memory.
    Sges(&'a [Sge]),
    /// `IBV_SEND_INLINE`: bytes copied at post time, no region needed (at most the QP's
    /// `max_inline_data`; not for RDMA reads).
    Inline(&'a [u8]),
}

/// `struct ibv_send_wr` (one request; a C list is a loop of posts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local bytes: sent, written, or (RDMA read) the target.
    pub payload: Payload<'a>,
    /// `IBV_SEND_SIGNALED`: a successful completion is reported even when the QP does not
    /// signal every request (errors are always reported).
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: the peer's CQ armed for solicited events fires.
    pub solicited: bool,
}

impl<'a> SendWr<'a> {
    /// A signaled, unsolicited request of `op` over `payload`.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            payload,
            signaled: true,
            solicited: false,
        }
    }
}

/// `struct ibv_recv_wr` (one request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the incoming bytes go, in order.
    pub sg_list: &'a [Sge],
}
