//! Work requests: scatter/gather entries, send-queue and receive-queue requests.

/// `struct ibv_sge`: `length` bytes at device address `addr` of the region whose local key is
/// `lkey`. A bad key, or bytes outside the region, complete the request with LOC_PROT_ERR
/// (a receive's on rxe with LOC_QP_OP_ERR, its QP entering ERROR). An entry of no bytes
/// names no memory: its key is never looked up, whatever it is (rxe's `copy_data`, siw, the
/// simulator).
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
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (`wr.atomic`): the peer's 8 bytes at `remote_addr`
    /// (8-byte aligned; the region registered with `IBV_ACCESS_REMOTE_ATOMIC`) become `swap`
    /// if they equal `compare_add`; their value before lands in the first 8 bytes of the
    /// local entries (at least 8 bytes in all), and the completion is `IBV_WC_COMP_SWAP`.
    /// RC only; siw has no atomics (EINVAL at post).
    AtomicCmpAndSwp {
        /// The peer's device address (`wr.atomic.remote_addr`).
        remote_addr: u64,
        /// The peer region's remote key (`wr.atomic.rkey`).
        rkey: u32,
        /// The value compared with (`wr.atomic.compare_add`).
        compare_add: u64,
        /// The value written on a match (`wr.atomic.swap`).
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (`wr.atomic`): `compare_add` is added (wrapping) to the
    /// peer's 8 bytes at `remote_addr`; as [`SendOp::AtomicCmpAndSwp`] otherwise, completing
    /// as `IBV_WC_FETCH_ADD`. C's `swap` is unused by it.
    AtomicFetchAndAdd {
        /// The peer's device address (`wr.atomic.remote_addr`).
        remote_addr: u64,
        /// The peer region's remote key (`wr.atomic.rkey`).
        rkey: u32,
        /// The value added (`wr.atomic.compare_add`).
        compare_add: u64,
    },
}

impl SendOp {
    /// Whether it is one of the two atomic operations.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. }
        )
    }
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

/// Where a UD send goes (`ibv_send_wr.wr.ud`): an address handle, the destination QP's number
/// (0xFFFFFF for a multicast group) and the qkey the destination QP must have (a datagram
/// whose qkey differs is dropped by the receiver without a trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The address handle (`wr.ud.ah`), made by `create_ah` in the QP's PD.
    pub ah: crate::AhHandle,
    /// The destination QP (`wr.ud.remote_qpn`).
    pub remote_qpn: u32,
    /// The destination's qkey (`wr.ud.remote_qkey`).
    pub remote_qkey: u32,
}

/// The QP number multicast datagrams are sent to (`remote_qpn` for a group).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// `struct ibv_send_wr` (one request; a C list is a loop of posts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local bytes: sent, written, or (RDMA read, atomic) the target.
    pub payload: Payload<'a>,
    /// `IBV_SEND_SIGNALED`: a successful completion is reported even when the QP does not
    /// signal every request (errors are always reported).
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: the peer's CQ armed for solicited events fires.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`: the request is not started before every RDMA read posted before it
    /// on the QP has its response (InfiniBand's fence, IBA 10.8.3.3; rxe's
    /// `rxe_wqe_is_fenced` and siw's read fence hold it so); without a read outstanding it
    /// changes nothing. The simulator holds it the same way on every transport.
    pub fence: bool,
    /// The destination of a send on a UD QP (`wr.ud`): required there (only `Send` and
    /// `SendWithImm` are UD operations), refused on a connected QP.
    pub ud: Option<UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled, unsolicited, unfenced request of `op` over `payload`.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            payload,
            signaled: true,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    /// A signaled, unsolicited UD send of `payload` to `dest` (with `imm` for
    /// `IBV_WR_SEND_WITH_IMM`).
    pub fn ud_send(wr_id: u64, dest: UdDest, imm: Option<u32>, payload: Payload<'a>) -> Self {
        let op = match imm {
            Some(imm) => SendOp::SendWithImm(imm),
            None => SendOp::Send,
        };
        SendWr {
            ud: Some(dest),
            ..SendWr::new(wr_id, op, payload)
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
