//! Work completions, with libibverbs' numbering of statuses and opcodes.

use std::fmt;

/// `enum ibv_wc_status`, numbered as libibverbs numbers it.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WcStatus(pub u32);

macro_rules! statuses {
    ($($name:ident = $value:expr, $str:literal;)*) => {
        impl WcStatus {
            $(
                #[doc = concat!("`IBV_WC_", stringify!($name), "` (", stringify!($value), ").")]
                pub const $name: WcStatus = WcStatus($value);
            )*

            /// libibverbs' `ibv_wc_status_str` text.
            pub fn as_str(self) -> &'static str {
                match self.0 {
                    $($value => $str,)*
                    _ => "unknown",
                }
            }
        }
    };
}

statuses! {
    SUCCESS = 0, "success";
    LOC_LEN_ERR = 1, "local length error";
    LOC_QP_OP_ERR = 2, "local QP operation error";
    LOC_EEC_OP_ERR = 3, "local EE context operation error";
    LOC_PROT_ERR = 4, "local protection error";
    WR_FLUSH_ERR = 5, "Work Request Flushed Error";
    MW_BIND_ERR = 6, "memory management operation error";
    BAD_RESP_ERR = 7, "bad response error";
    LOC_ACCESS_ERR = 8, "local access error";
    REM_INV_REQ_ERR = 9, "remote invalid request error";
    REM_ACCESS_ERR = 10, "remote access error";
    REM_OP_ERR = 11, "remote operation error";
    RETRY_EXC_ERR = 12, "transport retry counter exceeded";
    RNR_RETRY_EXC_ERR = 13, "RNR retry counter exceeded";
    LOC_RDD_VIOL_ERR = 14, "local RDD violation error";
    REM_INV_RD_REQ_ERR = 15, "remote invalid RD request";
    REM_ABORT_ERR = 16, "aborted error";
    INV_EECN_ERR = 17, "invalid EE context number";
    INV_EEC_STATE_ERR = 18, "invalid EE context state";
    FATAL_ERR = 19, "fatal error";
    RESP_TIMEOUT_ERR = 20, "response timeout error";
    GENERAL_ERR = 21, "general error";
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.0)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// `enum ibv_wc_opcode`: what completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` (0), also for sends with immediate data.
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE` (1), with or without immediate data.
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ` (2).
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP` (3): an atomic compare and swap.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD` (4): an atomic fetch and add.
    FetchAdd = 4,
    /// `IBV_WC_RECV` (128): a receive consumed by a send.
    Recv = 128,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` (129): a receive consumed by an RDMA write with immediate.
    RecvRdmaWithImm = 129,
}

/// The bytes a UD receive reserves for the global route header at the start of its buffer
/// (`sizeof(struct ibv_grh)`): the payload lands after them and `byte_len` counts them.
pub const GRH_LEN: u32 = 40;

/// `struct ibv_wc`, the fields a protocol reads. As in libibverbs, only `wr_id`, `status` and
/// `qp_num` are meaningful when the status is not SUCCESS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (RDMA reads); bytes sent for sends and writes; for
    /// an atomic the local entries' length (rxe: at least 8, the value before in the first 8).
    pub byte_len: u32,
    /// Immediate data (`IBV_WC_WITH_IMM`), in host order.
    pub imm: Option<u32>,
    /// The local QP's number.
    pub qp_num: u32,
    /// The sending QP's number (`src_qp`), for receives on a UD QP (0 otherwise).
    pub src_qp: u32,
    /// `IBV_WC_GRH`: the first [`GRH_LEN`] bytes of a UD receive's buffer hold the
    /// datagram's global route header (on RoCE always; on InfiniBand when the sender's
    /// address handle is global). Without it those bytes are left as they were.
    pub grh: bool,
    /// The sender's LID (`slid`), for UD receives on InfiniBand (0 on RoCE, and for other
    /// completions): what `ibv_create_ah_from_wc` routes an answer to when there is no GRH.
    pub slid: u16,
    /// The service level the datagram came on (`sl`), for UD receives.
    pub sl: u8,
    /// The destination LID's path bits (`dlid_path_bits`), for UD receives on InfiniBand:
    /// an answer's `src_path_bits`.
    pub dlid_path_bits: u8,
    /// The index of the partition key the datagram matched (`pkey_index`), for UD receives
    /// (GSI QPs only on hardware; 0 otherwise).
    pub pkey_index: u16,
}
