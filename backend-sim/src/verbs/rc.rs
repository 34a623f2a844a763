//! One RC (or UC) QP as a sans-IO state machine, as `cm/endpoint.rs` is for the CM: inputs
//! are the application's posts, a state change the CM drives, a packet from the peer QP and
//! the QP's one timer; outputs are packets to the peer, completions, the timer to set or
//! cancel, and the COMM_EST asynchronous event. It owns no memory and no clock: bytes are
//! gathered at post time by the world, and placed through the [`Memory`] port it is handed.
//!
//! The model of InfiniBand RC: requests carry PSNs (from 0, 24-bit, wrapping) and are
//! executed by the responder exactly once and in order; a duplicate is acknowledged again (a
//! duplicate read or atomic is answered from the responder resources, [`Memory::keep_request`]:
//! a read is read again, an atomic gets the value before it executed; one they no longer
//! hold is dropped); a request beyond the expected PSN is dropped and recovered by the requester's retransmission. The requester keeps one timer: a transport
//! timeout of 4.096 µs × 2^timeout (0: never), on which it resends everything unacknowledged
//! (go-back-N) up to `retry_count` times before completing the oldest request with
//! RETRY_EXC_ERR; or an RNR wait after a receiver-not-ready NAK, up to `rnr_retry` times (7:
//! without limit) before RNR_RETRY_EXC_ERR. Progress resets both counters. On rxe (RoCE) the
//! counts are the attribute's byte (8 to 255 count down from there) and a `retry_count` of 7
//! retries without limit too (rxe_comp.c decrements neither counter at 7); an InfiniBand HCA
//! takes the 3-bit fields of the IB specification, where only an `rnr_retry` of 7 is endless.
//! Only an InfiniBand HCA raises COMM_EST as its responder takes the first request: rxe has no
//! such event (nor siw, below). Any error
//! completion moves the QP to ERROR, which flushes every outstanding request with
//! WR_FLUSH_ERR (signaled or not); a responder that refuses a request for a remote access or
//! invalid request moves to ERROR too (a send longer than its receive is such an invalid
//! request on an InfiniBand HCA, LOC_LEN_ERR there; rxe finds it, and a receive under a bad
//! key, only as it copies and takes the receive for malformed: LOC_QP_OP_ERR there,
//! REM_OP_ERR at the requester, an rxe UC QP to ERROR too, whether made by `create_qp` on an
//! id or apart). Before any memory region's access, the responder checks
//! the QP's own ([`Rights`], read from rxe's `check_op_valid` and `check_resource`): an RDMA
//! WRITE without the QP's remote write, or a READ without its remote read or without
//! responder resources, is an invalid request (REM_INV_REQ_ERR at the requester). The CM's
//! QPs get the CM's access flags (`rdma_init_qp_attr`'s) as librdmacm moves them; siw checks
//! no QP access.
//!
//! siw (iWARP) runs RDMAP over TCP, so the same machine differs there ([`Driver::Siw`]):
//! * a SEND or RDMA WRITE completes SUCCESS as soon as it is transmitted (`siw_qp_sq_process`
//!   completes the WQE once `siw_qp_sq_proc_tx` handed its bytes to TCP, inside `post_send`
//!   for a user QP), before the peer has it; the request stays for TCP's retransmission until
//!   acknowledged, and is not flushed again. An RDMA READ completes with its response;
//! * retransmission is TCP's, on TCP's timer (`tcp_timer.rs`): a loss probe, then RTOs from
//!   about 200 ms doubling up to 120 s, whatever the QP's `timeout` and `retry_count`; no
//!   RETRY_EXC_ERR: once TCP gives up (924.6 s after the oldest unacknowledged message was
//!   first sent) the connection closes under the QP ([`QpOutput::TcpLost`]); what is
//!   unacknowledged when this side drops the connection goes on with TCP's socket
//!   ([`RcQp::tcp_backlog`], `tcp_orphan.rs`);
//! * the responder has no NAK: a message it cannot take (no receive posted, a bad rkey or
//!   access, a receive with bad entries) makes it send a TERMINATE and close the connection
//!   (`siw_init_terminate`, `siw_qp_cm_drop`): this QP enters ERROR and the world drops the
//!   connection ([`QpOutput::Terminate`]), which the peer sees as a close (DISCONNECTED, its
//!   QP in ERROR, a READ still outstanding flushed); so no RNR_RETRY_EXC_ERR or
//!   REM_ACCESS_ERR either. A protection error there (a receive it may not write, completed
//!   GENERAL_ERR; a write under a known key outside the region) raises QP_ACCESS_ERR, an
//!   unknown key or a missing receive nothing. A READ it cannot answer raises QP_REQ_ERR, and its
//!   QP stays in RTS (the response fails on the send side, which drops the connection
//!   without the close's move to ERROR);
//! * no COMM_EST: siw moves the QP to RTS itself as MPA completes.
//!
//! UC (`IBV_QPT_UC`) is the same machine without the reliability, as rxe runs it:
//! * the requester has no UC opcode for an RDMA read or atomic (`next_opcode` in rxe_req.c
//!   knows UC sends and writes only; rxe_opcode.c gives reads and atomics no UC mask): the
//!   post is taken (librxe checks no opcode against the QP type), and when the requester
//!   reaches the read or atomic it completes it with LOC_QP_OP_ERR and moves the QP to ERROR (`rxe_requester`'s
//!   error path), flushing what follows;
//! * a request completes SUCCESS as soon as it is transmitted (`rxe_xmit_packet` marks a
//!   non-RC request done when its last packet is sent): no ACK, no timer, no retry, so a
//!   lost request is simply never delivered;
//! * the responder answers nothing. It takes every message whatever its PSN (`check_psn`
//!   for UC accepts any first packet), and drops one it cannot take without a trace: no
//!   receive posted (no RNR NAK: `RESPST_ERR_RNR` is class D for UC), a bad rkey or access
//!   (`RESPST_ERR_RKEY_VIOLATION`, class E without an SRQ): the receive stays posted. A
//!   message longer than the receive, or a receive whose own entries are bad, fails that
//!   receive with LOC_QP_OP_ERR and moves the responder to ERROR (rxe's copy fails: class A,
//!   every QP type), but the requester hears nothing; no COMM_EST. Measured on rxe through
//!   the CM (`tests/BEDS.md`); the InfiniBand profile's UC drops a too-long message, keeps the
//!   receive, and reports a bad receive LOC_PROT_ERR.

use super::tcp_timer::{TcpPath, TcpTimeout, TcpTimer};
use crate::lazy_deque::LazyDeque;
use std::sync::Arc;
use std::time::Duration;

use cmtwin::verbs::{QpState, Sge, WcOpcode, WcStatus, WorkCompletion};
use cmtwin::QpCap;

use super::packet::{psn_cmp, psn_next, psn_prev, AtomicOp, Body, Nak, Packet, PSN_MASK};
use super::responder_resources::{places, Kept};

/// The memory a responder and a completing read place bytes in (the world's regions).
pub(crate) trait Memory {
    /// Writes `data` across `sges` in order: LOC_PROT_ERR for a bad key, range or access.
    fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus>;
    /// A peer's RDMA write: false for a bad rkey, range or access.
    fn remote_write(&mut self, rkey: u32, addr: u64, data: &[u8]) -> bool;
    /// A peer's RDMA read: `None` for a bad rkey, range or access.
    fn remote_read(&mut self, rkey: u32, addr: u64, len: u32) -> Option<Vec<u8>>;
    /// Whether `key` names a region of the device (whatever its range, access or PD).
    fn has_key(&self, key: u32) -> bool;
    /// A peer's atomic `op` on the 8 bytes at `addr` under `rkey`: their value before, or
    /// the refusal: a bad rkey, range or access (no `REMOTE_ATOMIC`) is a remote access
    /// error, checked first (rxe's `check_rkey`); an address not 8-byte aligned then an
    /// invalid request (rxe's `RESPST_ERR_MISALIGNED_ATOMIC`, class C).
    fn remote_atomic(&mut self, rkey: u32, addr: u64, op: AtomicOp) -> Result<u64, Nak>;
    /// Keeps a read or atomic this QP's responder executed, in a ring of `places`, for a
    /// duplicate of it to be answered from (its responder resources, see
    /// `responder_resources.rs`). The world holds them, not the machine, whose size is
    /// watched (`storage_sizes`).
    fn keep_request(&mut self, places: u8, kept: Kept);
    /// The read or atomic kept for `psn`, if still kept.
    fn kept_request(&self, psn: u32) -> Option<Kept>;
}

/// A request's scatter/gather entries, without an allocation for the usual single one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sges {
    One(Sge),
    Many(Vec<Sge>),
}

impl From<&[Sge]> for Sges {
    fn from(sges: &[Sge]) -> Self {
        match sges {
            [one] => Sges::One(*one),
            _ => Sges::Many(sges.to_vec()),
        }
    }
}

impl std::ops::Deref for Sges {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        match self {
            Sges::One(s) => std::slice::from_ref(s),
            Sges::Many(v) => v,
        }
    }
}

/// What a send-queue request does, with its remote part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendKind {
    Send {
        imm: Option<u32>,
    },
    Write {
        addr: u64,
        rkey: u32,
        imm: Option<u32>,
    },
    Read {
        addr: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        addr: u64,
        rkey: u32,
        op: AtomicOp,
    },
}

impl SendKind {
    fn opcode(self) -> WcOpcode {
        match self {
            SendKind::Send { .. } => WcOpcode::Send,
            SendKind::Write { .. } => WcOpcode::RdmaWrite,
            SendKind::Read { .. } => WcOpcode::RdmaRead,
            SendKind::Atomic {
                op: AtomicOp::CmpSwap { .. },
                ..
            } => WcOpcode::CompSwap,
            SendKind::Atomic {
                op: AtomicOp::FetchAdd { .. },
                ..
            } => WcOpcode::FetchAdd,
        }
    }

    /// Whether it waits for a response carrying data (an RDMA read or an atomic): neither
    /// UC (no opcode for it) nor an acknowledgement alone completes it.
    pub(crate) fn awaits_response(self) -> bool {
        matches!(self, SendKind::Read { .. } | SendKind::Atomic { .. })
    }
}

/// A posted send-queue request.
#[derive(Clone, Debug)]
pub(crate) struct SendEntry {
    pub wr_id: u64,
    pub kind: SendKind,
    /// The bytes to send or write, gathered at post time.
    pub data: Arc<[u8]>,
    /// The local entries (the read's target; held for the regions' busy counts).
    pub sges: Sges,
    pub signaled: bool,
    pub solicited: bool,
    /// `IBV_SEND_FENCE`: not transmitted while an earlier RDMA read awaits its response.
    pub fence: bool,
    /// A local error found when the bytes were gathered: completes the request when the
    /// device reaches it.
    pub fault: Option<WcStatus>,
    /// Its PSN, once transmitted.
    psn: u32,
    /// The bytes an RDMA read brought back (an atomic: its entries' length), once its
    /// response arrived.
    read: Option<u32>,
    /// Completed when transmitted (siw), still kept for retransmission.
    completed: bool,
}

impl SendEntry {
    /// A request not yet transmitted.
    pub(crate) fn new(wr_id: u64, kind: SendKind, data: Arc<[u8]>, sges: Sges) -> Self {
        SendEntry {
            wr_id,
            kind,
            data,
            sges,
            signaled: true,
            solicited: false,
            fence: false,
            fault: None,
            psn: 0,
            read: None,
            completed: false,
        }
    }
}

/// A posted receive.
#[derive(Clone, Debug)]
pub(crate) struct RecvEntry {
    pub wr_id: u64,
    pub sges: Sges,
}

impl RecvEntry {
    pub(crate) fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Which queue a completion is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    Send,
    Recv,
}

/// What the machine asks of the world.
#[derive(Debug)]
pub(crate) enum QpOutput {
    /// Send this packet to the peer QP.
    Packet(Packet),
    /// A request finished: its completion for the send or receive CQ (`None` for a
    /// successful unsignaled send); `sges` are its entries (their regions are no longer busy
    /// with it).
    Complete {
        queue: Queue,
        wc: Option<WorkCompletion>,
        solicited: bool,
        sges: Sges,
    },
    /// (Re)start the QP's timer: it fires this long from now, unless set again or cancelled.
    SetTimer(Duration),
    /// Cancel the QP's timer.
    CancelTimer,
    /// The QP received its first request (IBV_EVENT_COMM_EST).
    CommEst,
    /// siw's responder refused a message: a TERMINATE goes to the peer and the connection
    /// closes (the QP is already in ERROR).
    Terminate,
    /// siw's responder could not answer an RDMA READ (IBV_EVENT_QP_REQ_ERR).
    QpReqErr,
    /// siw's TCP connection ended without a close: TCP gave up retransmitting (its socket
    /// closed without a word to the peer), or the peer's TCP answered with a reset. siw takes
    /// that as the connection's close (DISCONNECTED here, the QP in ERROR).
    TcpLost,
    /// siw's responder met a protection error: a write under a registered key outside the
    /// region's range or access, a receive it may not write (IBV_EVENT_QP_ACCESS_ERR).
    QpAccessErr,
    /// The QP, in SQD, has every request it sent acknowledged (IBV_EVENT_SQ_DRAINED).
    SqDrained,
    /// A receive taken from the QP's SRQ left fewer than its armed limit
    /// (IBV_EVENT_SRQ_LIMIT_REACHED; made by the world, which owns the SRQ: `drive.rs`).
    SrqLimitReached,
    /// The QP, attached to an SRQ, entered ERROR (IBV_EVENT_QP_LAST_WQE_REACHED: an
    /// InfiniBand HCA raises it, as the IB specification has it for a QP of an SRQ that
    /// enters ERROR; rxe on Linux 6.12 as its responder flushes, `flush_recv_queue`; the
    /// world drops it on a kernel whose rxe does not: `drive.rs`).
    LastWqeReached,
    /// Send this datagram (UD QPs only, `ud.rs`).
    Datagram(super::ud::Datagram),
}

/// The connection attributes of RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RcParams {
    /// The transport timeout exponent (`timeout`): 4.096 µs × 2^timeout; 0: no timeout.
    pub timeout: u8,
    /// Transport retries (`retry_cnt`, 0..=7).
    pub retry_count: u8,
    /// RNR retries (`rnr_retry`, 0..=7; 7: without limit).
    pub rnr_retry: u8,
}

impl RcParams {
    /// The transport timeout: 4.096 µs × 2^timeout.
    pub(crate) fn retry_timeout(&self) -> Option<Duration> {
        (self.timeout != 0).then(|| Duration::from_nanos(4096u64 << self.timeout.min(31)))
    }
}

/// Why a post was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostError {
    /// The QP is in RESET (EINVAL).
    Reset,
    /// The queue is full (ENOMEM).
    Full,
    /// A send-queue request posted before RTS, in `state` (EINVAL on rxe, ENOTCONN on siw):
    /// the request was written to the queue all the same, and stays there (the provider
    /// writes it, then the kernel's doorbell refuses).
    NotReady { state: QpState, siw: bool },
}

/// One-time facts of an RC QP's life, one bit each (one byte: the machine's size is watched,
/// `storage_sizes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Marks(u8);

impl Marks {
    /// An InfiniBand HCA raised COMM_EST for it (once per QP).
    const COMM_EST: u8 = 0x1;
    /// siw dropped the connection from the send side (see [`RcQp::siw_dropped_by_send`]).
    const DROPPED_BY_SEND: u8 = 0x2;

    fn has(self, mark: u8) -> bool {
        self.0 & mark != 0
    }

    fn set(&mut self, mark: u8) {
        self.0 |= mark;
    }
}

/// What an RC QP was made as, one bit each (one byte: the machine's size is watched,
/// `storage_sizes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Traits(u8);

impl Traits {
    /// RC; without it UC (no acknowledgements, retries, RNR NAKs or RDMA reads).
    const RELIABLE: u8 = 0x1;
    /// Every send request is signalled (`sq_sig_all`).
    const SIGNAL_ALL: u8 = 0x2;
    /// Takes its receives from an SRQ: `rq` is the SRQ's, lent for each input
    /// (`drive.rs`), and neither flushed nor discarded with the QP.
    const SRQ: u8 = 0x4;

    fn has(self, t: u8) -> bool {
        self.0 & t != 0
    }

    fn with(self, t: u8, on: bool) -> Traits {
        Traits(if on { self.0 | t } else { self.0 & !t })
    }
}

/// The requester's timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Off,
    Retransmit,
    RnrWait,
}

/// What TCP still holds of a siw QP's stream when its connection is dropped (see
/// [`RcQp::tcp_backlog`]).
pub(crate) struct TcpBacklog {
    /// The requests sent and not yet acknowledged, oldest first.
    pub unacked: std::collections::VecDeque<Packet>,
    /// The path's retransmission timing.
    pub path: TcpPath,
    /// Where the retransmission timer stands.
    pub timer: TcpTimer,
}

/// One RC QP (or UC: `reliable` false).
pub(crate) struct RcQp {
    state: QpState,
    /// What it was made as (RC or UC, every send signalled, an SRQ's).
    traits: Traits,
    cap: QpCap,
    params: Option<RcParams>,
    sq: LazyDeque<SendEntry>,
    /// How many requests at the head of `sq` were transmitted.
    sent: u32,
    next_psn: u32,
    retries_left: u8,
    rnr_left: u8,
    timer: Timer,
    rq: LazyDeque<RecvEntry>,
    /// The PSN the responder expects next.
    epsn: u32,
    /// One-time facts of its life (COMM_EST raised, siw's drop from the send side).
    marks: Marks,
    /// How long a requester waits after this QP's RNR NAK (`min_rnr_timer`, set at RTR).
    rnr_timer_ns: u32,
    /// Which driver runs it, where they differ.
    driver: Driver,
    /// Requests sit in the send queue that the device was never told of: posted before RTS,
    /// their post failed its doorbell ([`PostError::NotReady`]). rxe sends them with the
    /// next post's doorbell, not when the QP reaches RTS; siw never (see
    /// [`RcQp::post_send`]).
    unannounced: bool,
    /// How rxe left it when it took an `IBV_QP_CUR_STATE` naming a state that leads to RTS
    /// while the QP was in RESET, INIT or ERROR (see [`RcQp::force_rts`]; one byte, as the
    /// machine's size is watched).
    named_rts: NamedRts,
    /// siw: the TCP path's retransmission timing, from RTS on.
    tcp_path: TcpPath,
    /// siw: where TCP's retransmission timer stands.
    tcp_timer: TcpTimer,
    /// The remote operations the responder takes (see [`Rights`]).
    rights: Rights,
    /// The initiator depth (`max_rd_atomic`, see [`RcQp::set_initiator_depth`]).
    init_depth: u8,
    /// The places of its responder resources (`max_dest_rd_atomic`, see
    /// [`RcQp::set_responder_resources`]).
    resp_places: u8,
}

/// What a QP's own attributes let a peer do to it, apart from any memory region's access:
/// its access flags (`IBV_QP_ACCESS_FLAGS`: remote write, remote read, remote atomic; set
/// at INIT and after) and whether it holds responder resources for incoming reads
/// (`IBV_QP_MAX_DEST_RD_ATOMIC` above 0, set at RTR). A QP starts with none of them, as
/// rxe's attributes start zeroed.
///
/// rxe's responder checks them before anything but the PSN (`check_op_valid`, then
/// `check_resource`, Linux 6.1 and 6.12): an RDMA WRITE (with or without immediate data)
/// without remote write, a READ without remote read, or an atomic without remote atomic, is
/// an unsupported opcode, and a READ or atomic with no responder resources too many reads
/// (`RESPST_ERR_TOO_MANY_RDMA_ATM_REQ`); both
/// are class C, answered with an invalid-request NAK that the requester completes with
/// REM_INV_REQ_ERR, each QP then in ERROR. So a write-with-immediate so refused consumes no
/// receive and earns no RNR NAK, and the check applies to a zero-length request too; a
/// duplicate (an earlier PSN) is not checked again. A UC QP drops a write it has no right
/// to, without a trace. An InfiniBand HCA answers the same by the specification (an invalid
/// request NAK, class C). siw checks no QP access on receipt (it keeps the flags but only
/// the memory's access is checked, `siw_check_mem`), so a siw QP takes everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rights(u8);

impl Rights {
    /// Remote write (`IBV_ACCESS_REMOTE_WRITE`'s bit).
    const WRITE: u8 = 0x2;
    /// Remote read (`IBV_ACCESS_REMOTE_READ`'s bit).
    const READ: u8 = 0x4;
    /// Remote atomic (`IBV_ACCESS_REMOTE_ATOMIC`'s bit).
    const ATOMIC: u8 = 0x8;
    /// Responder resources above 0 (a bit no access flag uses).
    const READ_DEPTH: u8 = 0x80;

    /// Every right: what a test QP connected without the CM gets.
    #[cfg(test)]
    const ALL: Rights = Rights(Self::WRITE | Self::READ | Self::ATOMIC | Self::READ_DEPTH);

    /// Whether the responder takes a request carrying `body`.
    fn allow(self, body: &Body) -> bool {
        match body {
            Body::Write { .. } => self.0 & Self::WRITE != 0,
            Body::ReadReq { .. } => {
                self.0 & (Self::READ | Self::READ_DEPTH) == Self::READ | Self::READ_DEPTH
            }
            Body::AtomicReq { .. } => {
                self.0 & (Self::ATOMIC | Self::READ_DEPTH) == Self::ATOMIC | Self::READ_DEPTH
            }
            _ => true,
        }
    }
}

/// The driver running an RC QP, where the model differs between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    /// An InfiniBand HCA, by the specification.
    Hca,
    /// rxe (RoCE): retry counts as bytes, a `retry_count` of 7 without limit.
    Rxe,
    /// siw for a user process (iWARP): its queues are rings in the process's memory, which
    /// siw reads only while a connection carries them and flushes only when the connection
    /// closes, so a receive or a send posted in ERROR stays there without a completion
    /// (measured for both).
    Siw,
}

impl RcQp {
    /// A QP in INIT, as `rdma_create_qp` leaves an RC QP. It does not know its number: the
    /// world puts it in the completions (`drive.rs`).
    pub(crate) fn new(cap: QpCap, sq_sig_all: bool) -> Self {
        RcQp {
            state: QpState::Init,
            traits: Traits(Traits::RELIABLE).with(Traits::SIGNAL_ALL, sq_sig_all),
            cap,
            params: None,
            sq: LazyDeque::default(),
            sent: 0,
            next_psn: 0,
            retries_left: 0,
            rnr_left: 0,
            timer: Timer::Off,
            rq: LazyDeque::default(),
            epsn: 0,
            marks: Marks::default(),
            rnr_timer_ns: 0,
            driver: Driver::Hca,
            unannounced: false,
            named_rts: NamedRts::No,
            tcp_path: TcpPath::default(),
            tcp_timer: TcpTimer::default(),
            rights: Rights::default(),
            init_depth: 0,
            resp_places: 0,
        }
    }

    /// Sets the QP's access flags (`IBV_QP_ACCESS_FLAGS`'s value; only the remote write,
    /// read and atomic bits count, see [`Rights`]).
    pub(crate) fn set_access(&mut self, access: u32) {
        let bits = (access as u8) & (Rights::WRITE | Rights::READ | Rights::ATOMIC);
        self.rights = Rights(self.rights.0 & Rights::READ_DEPTH | bits);
    }

    /// Sets the responder resources (`IBV_QP_MAX_DEST_RD_ATOMIC`): whether there are any
    /// (see [`Rights`]), and how many reads and atomics are kept for duplicates (rounded up
    /// to a power of two; the world empties what was kept, see `responder_resources.rs`).
    pub(crate) fn set_responder_resources(&mut self, depth: u8) {
        let others = self.rights.0 & !Rights::READ_DEPTH;
        self.rights = Rights(others | if depth > 0 { Rights::READ_DEPTH } else { 0 });
        self.resp_places = places(depth);
    }

    /// Sets the initiator depth (`IBV_QP_MAX_QP_RD_ATOMIC`): how many RDMA reads and
    /// atomics the requester has outstanding at once. rxe rounds it up to a power of two, 0
    /// staying 0 (`rxe_qp_from_attr`), takes one credit as it first transmits a read or
    /// atomic and gives it back as that completes (`check_init_depth`, `rxe_comp.c`); with
    /// none left the send queue waits there, everything behind it too. So a QP of depth 0
    /// never sends a read: it waits for ever, no completion (measured on rxe-6.1 and 6.12:
    /// the active side of a connection the passive side accepted with `responder_resources`
    /// 0 gets `max_rd_atomic` 0, and its read never completes). An InfiniBand HCA keeps the
    /// same bound (IBA's initiator depth). siw bounds its reads by the ORD the MPA exchange
    /// negotiated, not by this attribute: not modelled.
    pub(crate) fn set_initiator_depth(&mut self, depth: u8) {
        self.init_depth = places(depth);
    }

    /// The same QP taking its receives from an SRQ (see [`RcQp::rq_mut`]), from its creation.
    pub(crate) fn use_srq(&mut self) {
        self.traits = self.traits.with(Traits::SRQ, true);
    }

    /// The receive queue: on a QP with an SRQ, the world swaps the SRQ's receives in before
    /// an input and out after it.
    pub(crate) fn rq_mut(&mut self) -> &mut LazyDeque<RecvEntry> {
        &mut self.rq
    }

    /// The same QP as siw makes it for a user process (iWARP).
    pub(crate) fn on_siw(mut self) -> Self {
        self.driver = Driver::Siw;
        self
    }

    /// The same QP as rxe makes it (RoCE).
    pub(crate) fn on_rxe(mut self) -> Self {
        self.driver = Driver::Rxe;
        self
    }

    /// Whether siw dropped the connection as it failed to send a READ response
    /// (`siw_qp_sq_process` → `siw_qp_cm_drop`, which detaches the QP from its endpoint, so
    /// the close does not move it to ERROR: it reads RTS after, measured on 6.12).
    pub(crate) fn siw_dropped_by_send(&self) -> bool {
        self.marks.has(Marks::DROPPED_BY_SEND)
    }

    /// Whether siw made it (see [`RcQp::on_siw`]).
    pub(crate) fn is_siw(&self) -> bool {
        self.driver == Driver::Siw
    }

    /// The same QP as a UC one: unreliable (see the module's documentation).
    pub(crate) fn unreliable(mut self) -> Self {
        self.traits = self.traits.with(Traits::RELIABLE, false);
        self
    }

    /// The same QP in RESET, as `ibv_create_qp` leaves it.
    pub(crate) fn in_reset(mut self) -> Self {
        self.state = QpState::Reset;
        self
    }

    /// The QP's state.
    pub(crate) fn state(&self) -> QpState {
        self.state
    }

    /// Whether, as a requester, it waits out an RNR NAK with retries that never run out
    /// (`rnr_retry` 7): its retry then repeats, unchanged, until the responder has a receive.
    pub(crate) fn in_endless_rnr_wait(&self) -> bool {
        self.state == QpState::Rts
            && self.timer == Timer::RnrWait
            && self.params.is_some_and(|p| p.rnr_retry == 7)
    }

    /// Whether, as a requester on rxe, it resends on its transport timeout with retries that
    /// never run out (`retry_count` 7): its retransmission repeats until the peer answers.
    pub(crate) fn in_endless_transport_retry(&self) -> bool {
        self.state == QpState::Rts
            && self.timer == Timer::Retransmit
            && self.driver == Driver::Rxe
            && self.retries_left == 7
    }

    /// Whether a packet from its peer would be dropped unseen: it is not connected (or is in
    /// ERROR), or, for a `request`, its responder stayed in error (rxe 6.1 out of ERROR by a
    /// named state, [`NamedRts::DeafResponder`]).
    pub(crate) fn drops_from_peer(&self, request: bool) -> bool {
        !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            || (request && self.named_rts == NamedRts::DeafResponder)
    }

    /// Whether, as a responder, it answers requests (false: it drops them) and has no
    /// receive of its own posted (an SRQ's are apart).
    pub(crate) fn responds_without_receive(&self) -> bool {
        self.is_reliable()
            && matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            && self.rq.is_empty()
    }

    /// Whether it is RC (false: UC).
    pub(crate) fn is_reliable(&self) -> bool {
        self.traits.has(Traits::RELIABLE)
    }

    /// Whether it takes its receives from an SRQ.
    fn srq(&self) -> bool {
        self.traits.has(Traits::SRQ)
    }

    /// The QP's capacities.
    pub(crate) fn cap(&self) -> QpCap {
        self.cap
    }

    /// The entries of every outstanding request, send queue first.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn posted_sges(&self) -> impl Iterator<Item = &Sge> {
        let sends = self.sq.iter().flat_map(|e| e.sges.iter());
        let own = (!self.srq()).then_some(&self.rq);
        sends.chain(
            own.into_iter()
                .flat_map(|rq| rq.iter().flat_map(|r| r.sges.iter())),
        )
    }

    /// Every outstanding request's entries, for a QP destroyed or reset with work posted (no
    /// completion is made, as for a destroyed QP). The QP is left as `ibv_create_qp` makes
    /// it, in RESET: no timer, no connection attributes, PSNs from 0 again (what
    /// `rdma_init_qp_attr` gives), so that INIT, RTR and RTS start it afresh.
    pub(crate) fn discard(&mut self) -> Vec<Sge> {
        let mut sges: Vec<Sge> = Vec::new();
        for e in self.sq.drain(..) {
            sges.extend_from_slice(&e.sges);
        }
        if !self.srq() {
            for r in self.rq.drain(..) {
                sges.extend_from_slice(&r.sges);
            }
        }
        // The attributes outlive RESET (rxe keeps `qp->attr`).
        let (traits, driver, rights, depth) =
            (self.traits, self.driver, self.rights, self.init_depth);
        *self = RcQp::new(self.cap, self.traits.has(Traits::SIGNAL_ALL)).in_reset();
        (self.traits, self.driver, self.rights, self.init_depth) = (traits, driver, rights, depth);
        sges
    }

    /// INIT → RTR → RTS with the CM's attributes; false from any other state.
    pub(crate) fn connect(
        &mut self,
        rnr_timer: Duration,
        params: RcParams,
        out: &mut Vec<QpOutput>,
    ) -> bool {
        self.rtr(rnr_timer) && self.rts(params, out)
    }

    /// siw's move to RTS as MPA completes, from RESET, INIT or RTR (siw's IDLE and RTR)
    /// with `params`, over a TCP connection with the timing of `tcp`; false from any other
    /// state. iWARP has no RNR NAK: the RNR timer is 0.
    pub(crate) fn iw_rts(
        &mut self,
        params: RcParams,
        tcp: TcpPath,
        out: &mut Vec<QpOutput>,
    ) -> bool {
        if !matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return false;
        }
        self.tcp_path = tcp;
        self.rnr_timer_ns = 0;
        self.state = QpState::Rtr;
        self.rts(params, out)
    }

    /// siw: what TCP still holds of this QP's stream as the connection is dropped under an
    /// RTS QP: the requests handed to TCP and not yet acknowledged, with the path's timing and
    /// where the retransmission timer stands (`None` when nothing is outstanding). siw's
    /// close releases the socket without an abort (`siw_qp_cm_drop`, `sock_release`,
    /// `tcp_close`): the orphaned socket keeps retransmitting them ([`super::tcp_orphan`]).
    pub(crate) fn tcp_backlog(&self) -> Option<TcpBacklog> {
        let pending = self.is_siw()
            && self.state == QpState::Rts
            && self.sent > 0
            && self.timer == Timer::Retransmit;
        pending.then(|| TcpBacklog {
            unacked: self
                .sq
                .iter()
                .take(self.sent())
                .map(request_packet)
                .collect(),
            path: self.tcp_path,
            timer: self.tcp_timer,
        })
    }

    /// The PSN the responder expects next (every message before it was taken).
    pub(crate) fn expected_psn(&self) -> u32 {
        self.epsn
    }

    /// siw's CLOSING (a graceful close, what SQD moves an RTS QP to): every outstanding
    /// request flushed, as ERROR does, the state read as SQD.
    pub(crate) fn siw_close(&mut self, out: &mut Vec<QpOutput>) {
        self.enter_error(out);
        self.state = QpState::Sqd;
    }

    /// RESET → INIT; false from any other state.
    pub(crate) fn init(&mut self) -> bool {
        let ok = self.state == QpState::Reset;
        if ok {
            self.state = QpState::Init;
        }
        ok
    }

    /// INIT → RTR, answering RNR NAKs with `rnr_timer`; false from any other state.
    pub(crate) fn rtr(&mut self, rnr_timer: Duration) -> bool {
        let ok = self.enter_rtr();
        if ok {
            self.set_rnr_timer(rnr_timer);
        }
        ok
    }

    /// INIT → RTR with the attributes already set; false from any other state.
    pub(crate) fn enter_rtr(&mut self) -> bool {
        let ok = self.state == QpState::Init;
        if ok {
            self.state = QpState::Rtr;
        }
        ok
    }

    /// RTR → RTS with `params`, sending what was posted meanwhile; false from any other
    /// state.
    pub(crate) fn rts(&mut self, params: RcParams, out: &mut Vec<QpOutput>) -> bool {
        if self.state != QpState::Rtr {
            return false;
        }
        self.params = Some(params);
        self.retries_left = params.retry_count;
        self.rnr_left = params.rnr_retry;
        self.state = QpState::Rts;
        self.pump(out);
        true
    }

    /// The wait this QP's RNR NAKs ask for (`IBV_QP_MIN_RNR_TIMER`), from the next one on.
    pub(crate) fn set_rnr_timer(&mut self, rnr_timer: Duration) {
        // At most 655.36 ms (IB's encoding), so nanoseconds fit.
        self.rnr_timer_ns = u32::try_from(rnr_timer.as_nanos()).unwrap_or(u32::MAX);
    }

    /// `IBV_QP_TIMEOUT`, `IBV_QP_RETRY_CNT`, `IBV_QP_RNR_RETRY` (each when `Some`): the next
    /// transport timer takes the timeout; a retry count also refills its counter, as rxe
    /// sets `comp.retry_cnt` and `comp.rnr_retry` with the attribute.
    pub(crate) fn set_params(&mut self, timeout: Option<u8>, retry: Option<u8>, rnr: Option<u8>) {
        let p = self.params.get_or_insert(RcParams {
            timeout: 0,
            retry_count: 0,
            rnr_retry: 0,
        });
        if let Some(t) = timeout {
            p.timeout = t;
        }
        // An HCA takes the IB specification's 3-bit fields; rxe keeps the byte.
        let field = |v: u8| {
            if self.driver == Driver::Rxe {
                v
            } else {
                v.min(7)
            }
        };
        if let Some(r) = retry.map(field) {
            p.retry_count = r;
            self.retries_left = r;
        }
        if let Some(r) = rnr.map(field) {
            p.rnr_retry = r;
            self.rnr_left = r;
        }
    }

    /// `IBV_QP_SQ_PSN`: the PSN of the next request sent.
    pub(crate) fn set_sq_psn(&mut self, psn: u32) {
        self.next_psn = psn & PSN_MASK;
    }

    /// `IBV_QP_RQ_PSN`: the PSN the responder expects next.
    pub(crate) fn set_rq_psn(&mut self, psn: u32) {
        self.epsn = psn & PSN_MASK;
    }

    /// RTS → SQD: no new request is sent; SQ_DRAINED once every request sent is
    /// acknowledged (at once if none is outstanding). SQD → SQD drains `again` (a second
    /// SQ_DRAINED) or changes nothing. False from any other state.
    pub(crate) fn drain(&mut self, again: bool, out: &mut Vec<QpOutput>) -> bool {
        match self.state {
            QpState::Sqd => {
                if again && self.sent == 0 {
                    out.push(QpOutput::SqDrained);
                }
                true
            }
            QpState::Rts => {
                self.state = QpState::Sqd;
                if self.sent == 0 {
                    out.push(QpOutput::SqDrained);
                }
                true
            }
            _ => false,
        }
    }

    /// Whether the QP is in SQD with requests sent and not yet acknowledged (rxe refuses to
    /// leave SQD but to ERROR meanwhile).
    pub(crate) fn draining(&self) -> bool {
        self.state == QpState::Sqd && self.sent > 0
    }

    /// RTR, SQD or RTS → RTS with the attributes already set: sending starts or resumes.
    /// False from any other state.
    pub(crate) fn resume(&mut self, out: &mut Vec<QpOutput>) -> bool {
        let ok = matches!(self.state, QpState::Rtr | QpState::Sqd | QpState::Rts);
        if ok {
            self.state = QpState::Rts;
            self.pump(out);
        }
        ok
    }

    /// Any state → RTS, as rxe moves a QP whose `ibv_modify_qp` named, with
    /// `IBV_QP_CUR_STATE`, a state the kernel's table leads to RTS from, whatever the QP's
    /// own state: only the state changes, leaving the QP as `how` says (a path it was
    /// never given outweighs a responder left in error).
    pub(crate) fn force_rts(&mut self, how: NamedRts, out: &mut Vec<QpOutput>) {
        self.state = QpState::Rts;
        if !matches!(self.named_rts, NamedRts::Pathless(_)) {
            self.named_rts = how;
        }
        self.pump(out);
    }

    /// Any state → ERROR, flushing every outstanding request (RESET has none: it moves to
    /// ERROR all the same, as the kernel allows RESET → ERR).
    ///
    /// On a CQ both queues share, the order is the driver's: rxe's `rxe_qp_error` schedules
    /// the responder's task (which flushes the receive queue) before the completer's (which
    /// flushes the send queue) on an RC QP, so an RC QP's receives come out first (measured
    /// on rxe-6.1 and rxe-6.12, `tests/tests/sim_outside_trial8.rs`); on UC, rxe 6.1 runs the
    /// completer at once, and the other drivers are taken to flush the send queue first.
    pub(crate) fn enter_error(&mut self, out: &mut Vec<QpOutput>) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        if self.timer != Timer::Off {
            self.timer = Timer::Off;
            out.push(QpOutput::CancelTimer);
        }
        let receives_first = self.driver == Driver::Rxe && self.traits.has(Traits::RELIABLE);
        if receives_first {
            self.flush_rq(out);
        }
        self.flush_sq(out);
        if self.srq() && matches!(self.driver, Driver::Rxe | Driver::Hca) {
            out.push(QpOutput::LastWqeReached);
        }
        if !receives_first {
            self.flush_rq(out);
        }
    }

    /// Flushes the send queue as ERROR does.
    fn flush_sq(&mut self, out: &mut Vec<QpOutput>) {
        // siw flushes its ring from the slot it would send next: behind a request refused
        // before RTS it never took one, and flushes none (measured on 6.1 and 6.12).
        let wedged = self.is_siw() && self.unannounced;
        while let Some(e) = (!wedged).then(|| self.sq.pop_front()).flatten() {
            if !e.completed {
                self.complete_send(e, WcStatus::WR_FLUSH_ERR, out);
            }
        }
        self.sent = 0;
    }

    /// Flushes the receive queue as ERROR does. An SRQ's receives stay for the other QPs
    /// (rxe's `check_resource` in ERROR takes none from an SRQ).
    fn flush_rq(&mut self, out: &mut Vec<QpOutput>) {
        while let Some(r) = (!self.srq()).then(|| self.rq.pop_front()).flatten() {
            self.complete_recv(
                r,
                WcStatus::WR_FLUSH_ERR,
                WcOpcode::Recv,
                0,
                None,
                false,
                out,
            );
        }
    }

    /// Whether a post to `queue` would be taken (ERROR takes it, to flush it at once; siw's
    /// ring takes it while it has room, and keeps it).
    pub(crate) fn check_post(&self, queue: Queue) -> Result<(), PostError> {
        let (len, depth) = match queue {
            // A request siw completed left its ring slot, though kept for retransmission
            // (only siw completes before the acknowledgement: elsewhere the length counts).
            Queue::Send if self.is_siw() => (
                self.sq.iter().filter(|e| !e.completed).count(),
                self.cap.max_send_wr,
            ),
            Queue::Send => (self.sq.len(), self.cap.max_send_wr),
            Queue::Recv => (self.rq.len(), self.cap.max_recv_wr),
        };
        match self.state {
            // siw's RESET is its IDLE: the queues are rings the process fills at any time.
            QpState::Reset if !self.is_siw() => Err(PostError::Reset),
            QpState::Error if !self.is_siw() => Ok(()),
            _ if len >= depth as usize => Err(PostError::Full),
            _ => Ok(()),
        }
    }

    /// `ibv_post_send` of `entry` (given back when refused and not kept).
    ///
    /// Before RTS (INIT or RTR; on siw its IDLE, read as RESET, too) the provider writes the
    /// request into the send queue and then rings the kernel's doorbell, which refuses:
    /// the post fails ([`PostError::NotReady`]) but the request keeps its slot (measured on
    /// rxe and siw, Linux 6.1 and 6.12). rxe sends it with the next post that succeeds, in
    /// order before it, and not when the QP reaches RTS (nothing rings the doorbell then).
    /// siw never takes it: every later request is taken (the post succeeds) and none is
    /// sent, completed, or flushed by the close (its flush starts at the slot it would send
    /// next); the ring fills up.
    pub(crate) fn post_send(
        &mut self,
        mut entry: SendEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, Option<SendEntry>)> {
        if let Err(e) = self.check_post(Queue::Send) {
            return Err((e, Some(entry)));
        }
        if self.state == QpState::Error && !self.is_siw() {
            self.complete_send(entry, WcStatus::WR_FLUSH_ERR, out);
            return Ok(());
        }
        entry.signaled |= self.traits.has(Traits::SIGNAL_ALL);
        self.sq.push_back(entry);
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            self.unannounced = true;
            let siw = self.is_siw();
            return Err((
                PostError::NotReady {
                    state: self.state,
                    siw,
                },
                None,
            ));
        }
        if !self.is_siw() {
            self.unannounced = false; // this post's doorbell announces the whole queue
        }
        self.pump(out);
        Ok(())
    }

    /// `ibv_post_recv` of `entry` (given back when refused).
    pub(crate) fn post_recv(
        &mut self,
        entry: RecvEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, RecvEntry)> {
        if let Err(e) = self.check_post(Queue::Recv) {
            return Err((e, entry));
        }
        if self.state == QpState::Error && !self.is_siw() {
            let (op, st) = (WcOpcode::Recv, WcStatus::WR_FLUSH_ERR);
            self.complete_recv(entry, st, op, 0, None, false, out);
            return Ok(());
        }
        self.rq.push_back(entry);
        Ok(())
    }

    /// The QP's timer fired.
    pub(crate) fn on_timer(&mut self, out: &mut Vec<QpOutput>) {
        match self.timer {
            Timer::Off => {}
            Timer::Retransmit if self.driver == Driver::Siw => self.on_tcp_timer(out),
            Timer::Retransmit if self.retries_left == 0 => {
                self.timer = Timer::Off;
                self.fail_head(WcStatus::RETRY_EXC_ERR, out);
            }
            Timer::Retransmit => {
                let endless = self.driver == Driver::Rxe && self.retries_left == 7;
                if !endless {
                    self.retries_left -= 1;
                }
                self.timer = Timer::Off;
                self.resend(out);
            }
            Timer::RnrWait => {
                self.timer = Timer::Off;
                self.resend(out);
                self.pump(out);
            }
        }
    }

    /// A packet from the peer QP arrived.
    pub(crate) fn on_packet(&mut self, pkt: Packet, mem: &mut dyn Memory, out: &mut Vec<QpOutput>) {
        if self.driver == Driver::Siw && self.on_tcp_segment(&pkt, out) {
            return;
        }
        if self.drops_from_peer(pkt.is_request()) {
            return; // not connected, in ERROR, or a responder left in error
        }
        if pkt.is_request() {
            if self.is_reliable() {
                self.respond(pkt, mem, out);
            } else {
                self.receive_unreliably(pkt, mem, out);
            }
            return;
        }
        if !self.is_reliable() {
            return; // UC has no responses
        }
        match pkt.body {
            Body::Ack => self.acknowledge(pkt.psn, out),
            Body::ReadResp { data } => self.read_response(pkt.psn, data, mem, out),
            Body::AtomicResp { orig } => self.atomic_response(pkt.psn, orig, mem, out),
            Body::Nak(nak) => self.refused(pkt.psn, nak, out),
            Body::TcpReset => {} // only siw's TCP sends one (`on_tcp_segment`)
            _ => unreachable!("requests were handled above"),
        }
    }

    // ----- requester ---------------------------------------------------------------------

    /// Transmits the requests not yet sent, stopping at one with a local fault (completed
    /// once everything before it is), and starts the timer.
    fn pump(&mut self, out: &mut Vec<QpOutput>) {
        if self.state != QpState::Rts || self.timer == Timer::RnrWait || self.unannounced {
            return;
        }
        if let NamedRts::Pathless(status) = self.named_rts {
            if !self.sq.is_empty() {
                self.fail_head(status.status(), out); // no address vector to send with
            }
            return;
        }
        if !self.is_reliable() {
            self.pump_unreliable(out);
            return;
        }
        while self.sent() < self.sq.len() {
            if let Some(fault) = self.sq[self.sent()].fault {
                if self.sent == 0 {
                    self.fail_head(fault, out);
                }
                return;
            }
            if self.sq[self.sent()].fence && self.response_outstanding() {
                break; // a response lets it go (`acknowledge` pumps again)
            }
            if self.waits_for_read_credit(self.sent()) {
                break; // an earlier read's completion lets it go (`acknowledge` pumps again)
            }
            let psn = self.next_psn;
            self.next_psn = psn_next(psn);
            let i = self.sent();
            let e = &mut self.sq[i];
            e.psn = psn;
            out.push(QpOutput::Packet(request_packet(e)));
            self.sent += 1;
            if self.driver == Driver::Siw {
                self.complete_when_sent(i, out);
            }
        }
        self.arm_retransmit(out);
    }

    /// How many requests at the head of the send queue were transmitted.
    fn sent(&self) -> usize {
        self.sent as usize
    }

    /// Whether a transmitted RDMA read or atomic still awaits its response (what a fenced
    /// request waits for: rxe's `rxe_wqe_is_fenced` waits for every read and atomic, IBA
    /// 10.8.3.3).
    fn response_outstanding(&self) -> bool {
        let unanswered = |e: &SendEntry| e.kind.awaits_response() && e.read.is_none();
        self.sq.iter().take(self.sent()).any(unanswered)
    }

    /// Whether the request at `i` is an RDMA read or atomic that finds the initiator depth
    /// used up by the reads and atomics transmitted before it and not yet completed (see
    /// [`RcQp::set_initiator_depth`]; siw's reads are not bounded here).
    fn waits_for_read_credit(&self, i: usize) -> bool {
        let needs_credit = |e: &SendEntry| e.kind.awaits_response();
        if self.driver == Driver::Siw || !needs_credit(&self.sq[i]) {
            return false;
        }
        let sent = self.sq.iter().take(self.sent());
        sent.filter(|e| needs_credit(e)).count() >= usize::from(self.init_depth)
    }

    /// UC's requester: transmits each request and completes it at once (nothing is ever
    /// outstanding: `sent` stays 0); a request with a local fault, or an RDMA read or atomic
    /// (no UC opcode: LOC_QP_OP_ERR), fails and moves the QP to ERROR.
    fn pump_unreliable(&mut self, out: &mut Vec<QpOutput>) {
        while self.state == QpState::Rts {
            let Some(e) = self.sq.front() else {
                return;
            };
            let fault = match e.kind {
                k if k.awaits_response() => Some(WcStatus::LOC_QP_OP_ERR),
                _ => e.fault,
            };
            if let Some(status) = fault {
                self.fail_head(status, out);
                return;
            }
            let mut e = self.sq.pop_front().expect("checked");
            e.psn = self.next_psn;
            self.next_psn = psn_next(e.psn);
            out.push(QpOutput::Packet(request_packet(&e)));
            self.complete_send(e, WcStatus::SUCCESS, out);
        }
    }

    /// siw: the SEND or WRITE at `i`, just handed to TCP, completes (its regions released; it
    /// stays for TCP's retransmission, of the bytes gathered at post time).
    fn complete_when_sent(&mut self, i: usize, out: &mut Vec<QpOutput>) {
        let e = &mut self.sq[i];
        if e.kind.awaits_response() || e.completed {
            return;
        }
        e.completed = true;
        let done = SendEntry {
            sges: std::mem::replace(&mut e.sges, Sges::Many(Vec::new())),
            ..e.clone()
        };
        self.complete_send(done, WcStatus::SUCCESS, out);
    }

    /// Starts the transport timer if requests are unacknowledged and no timer runs.
    fn arm_retransmit(&mut self, out: &mut Vec<QpOutput>) {
        if self.sent == 0 || self.timer != Timer::Off {
            return;
        }
        if let Some(t) = self.restart_transport_timer() {
            self.timer = Timer::Retransmit;
            out.push(QpOutput::SetTimer(t));
        }
    }

    /// (Re)starts the transport timer's schedule with `sent` requests unacknowledged, and
    /// gives its first wait from now: the QP's `timeout` attribute, or on siw TCP's loss
    /// probe (its backoff starts over); `None`: no timer (timeout 0).
    fn restart_transport_timer(&mut self) -> Option<Duration> {
        match self.driver {
            Driver::Siw => Some(self.tcp_timer.arm(self.tcp_path, self.sent())),
            _ => self.params.and_then(|p| p.retry_timeout()),
        }
    }

    /// siw: what TCP does with `pkt` before siw sees it; true if it took it. A message for a
    /// connection TCP gave up meets a reset (the socket is closed); a reset ends a connection
    /// still up.
    fn on_tcp_segment(&mut self, pkt: &Packet, out: &mut Vec<QpOutput>) -> bool {
        if pkt.body == Body::TcpReset {
            if matches!(self.state, QpState::Rtr | QpState::Rts) {
                out.push(QpOutput::TcpLost);
            }
            return true;
        }
        if self.tcp_timer.gave_up() && pkt.is_request() {
            let reset = Packet {
                psn: 0,
                body: Body::TcpReset,
            };
            out.push(QpOutput::Packet(reset));
            return true;
        }
        false
    }

    /// siw: TCP's retransmission timer fired: its loss probe sends the last request again,
    /// an RTO every unacknowledged one (go-back-N, where TCP sends the oldest and then more
    /// as acknowledgements come); once TCP gives up, the connection closes under the QP.
    fn on_tcp_timer(&mut self, out: &mut Vec<QpOutput>) {
        let (what, next) = self.tcp_timer.fire(self.tcp_path);
        match what {
            TcpTimeout::Probe => {
                if let Some(last) = self.sent().checked_sub(1) {
                    out.push(QpOutput::Packet(request_packet(&self.sq[last])));
                }
            }
            TcpTimeout::Retransmit => {
                for e in self.sq.iter().take(self.sent()) {
                    out.push(QpOutput::Packet(request_packet(e)));
                }
            }
            TcpTimeout::GiveUp => out.push(QpOutput::TcpLost),
        }
        match next {
            Some(t) => out.push(QpOutput::SetTimer(t)),
            None => self.timer = Timer::Off,
        }
    }

    /// Resends every transmitted, unacknowledged request (go-back-N) and restarts the timer.
    fn resend(&mut self, out: &mut Vec<QpOutput>) {
        for e in self.sq.iter().take(self.sent()) {
            out.push(QpOutput::Packet(request_packet(e)));
        }
        self.arm_retransmit(out);
    }

    /// Completes every transmitted request up to `psn` (stopping at a read or atomic whose
    /// response is missing); progress resets the retry counters and restarts the timer.
    fn acknowledge(&mut self, psn: u32, out: &mut Vec<QpOutput>) {
        let mut progress = false;
        while self.sent > 0 {
            let head = &self.sq[0];
            if psn_cmp(head.psn, psn) == std::cmp::Ordering::Greater {
                break;
            }
            if head.kind.awaits_response() && head.read.is_none() {
                break;
            }
            let e = self.sq.pop_front().expect("sent > 0");
            self.sent -= 1;
            if !e.completed {
                self.complete_send(e, WcStatus::SUCCESS, out);
            }
            progress = true;
        }
        if !progress {
            return;
        }
        if self.state == QpState::Sqd && self.sent == 0 {
            out.push(QpOutput::SqDrained);
        }
        if let Some(p) = self.params {
            self.retries_left = p.retry_count;
            self.rnr_left = p.rnr_retry;
        }
        let restart = if self.timer == Timer::Retransmit && self.sent > 0 {
            self.restart_transport_timer()
        } else {
            None
        };
        match restart {
            // Progress restarts a running transport timer (or stops it when nothing is left).
            Some(t) => {
                out.push(QpOutput::SetTimer(t));
            }
            _ if self.timer == Timer::Retransmit => {
                self.timer = Timer::Off;
                out.push(QpOutput::CancelTimer);
            }
            _ => self.arm_retransmit(out),
        }
        self.pump(out);
    }

    /// The response of the read of `psn` arrived.
    fn read_response(
        &mut self,
        psn: u32,
        data: Vec<u8>,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) {
        let Some(i) = self.sq.iter().take(self.sent()).position(|e| e.psn == psn) else {
            return; // a duplicate of a response already taken
        };
        let e = &mut self.sq[i];
        let SendKind::Read { len, .. } = e.kind else {
            return;
        };
        if e.read.is_some() {
            return;
        }
        // A response longer than the read (a stale one, of a request made before a reset that
        // restarted the PSNs) cannot be placed: rxe's completer fails the copy (`do_read`,
        // copy_data: length > resid) with LOC_PROT_ERR.
        let placed = if data.len() > len as usize {
            Err(WcStatus::LOC_PROT_ERR)
        } else {
            mem.scatter(&e.sges, &data)
        };
        if let Err(status) = placed {
            if i == 0 {
                self.fail_head(status, out);
            }
            return;
        }
        // A shorter one (every response here is the read's whole length, so a stale one) is
        // placed but does not finish the read: rxe's completer waits for the rest (`do_read`:
        // bytes still due → COMPST_UPDATE_COMP), and the transport timer asks again.
        if data.len() < len as usize {
            return;
        }
        e.read = Some(data.len() as u32);
        self.acknowledge(psn, out);
    }

    /// The response of the atomic of `psn` arrived: its value before lands, native-endian,
    /// in the first 8 bytes of the local entries (rxe's completer copies the u64 as the CPU
    /// holds it; a bad entry there is a LOC_PROT_ERR), and the request completes with its
    /// entries' length.
    fn atomic_response(
        &mut self,
        psn: u32,
        orig: u64,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) {
        let Some(i) = self.sq.iter().take(self.sent()).position(|e| e.psn == psn) else {
            return; // a duplicate of a response already taken
        };
        let e = &mut self.sq[i];
        if !matches!(e.kind, SendKind::Atomic { .. }) || e.read.is_some() {
            return; // stale: a response to a request made before a reset
        }
        if let Err(status) = mem.scatter(&e.sges, &orig.to_ne_bytes()) {
            if i == 0 {
                self.fail_head(status, out);
            }
            return;
        }
        e.read = Some(e.sges.iter().map(|s| s.length).sum());
        self.acknowledge(psn, out);
    }

    /// The responder refused the request of `psn`.
    fn refused(&mut self, psn: u32, nak: Nak, out: &mut Vec<QpOutput>) {
        self.acknowledge(psn_prev(psn), out);
        if self.sent == 0 || self.sq[0].psn != psn {
            return; // stale
        }
        let status = match nak {
            Nak::Rnr(wait) => {
                if self.rnr_left == 0 {
                    WcStatus::RNR_RETRY_EXC_ERR
                } else {
                    if self.params.is_some_and(|p| p.rnr_retry != 7) {
                        self.rnr_left -= 1;
                    }
                    if self.timer != Timer::Off {
                        out.push(QpOutput::CancelTimer);
                    }
                    self.timer = Timer::RnrWait;
                    out.push(QpOutput::SetTimer(wait));
                    return;
                }
            }
            Nak::RemoteAccess => WcStatus::REM_ACCESS_ERR,
            Nak::InvalidRequest => WcStatus::REM_INV_REQ_ERR,
            Nak::RemoteOp => WcStatus::REM_OP_ERR,
        };
        self.fail_head(status, out);
    }

    /// Completes the oldest request with `status` and moves the QP to ERROR.
    fn fail_head(&mut self, status: WcStatus, out: &mut Vec<QpOutput>) {
        if let Some(e) = self.sq.pop_front() {
            self.sent = self.sent.saturating_sub(1);
            self.complete_send(e, status, out);
        }
        self.enter_error(out);
    }

    fn complete_send(&self, e: SendEntry, status: WcStatus, out: &mut Vec<QpOutput>) {
        let ok = status == WcStatus::SUCCESS;
        if ok && !e.signaled {
            out.push(QpOutput::Complete {
                queue: Queue::Send,
                wc: None,
                solicited: false,
                sges: e.sges,
            });
            return;
        }
        let byte_len = match e.kind {
            _ if !ok => 0,
            k if k.awaits_response() => e.read.unwrap_or(0),
            _ => e.data.len() as u32,
        };
        let wc = WorkCompletion {
            wr_id: e.wr_id,
            status,
            opcode: e.kind.opcode(),
            byte_len,
            ..WorkCompletion::default()
        };
        out.push(QpOutput::Complete {
            queue: Queue::Send,
            wc: Some(wc),
            solicited: e.solicited,
            sges: e.sges,
        });
    }

    // ----- responder ---------------------------------------------------------------------

    /// A request from the peer: executed once, in order.
    fn respond(&mut self, pkt: Packet, mem: &mut dyn Memory, out: &mut Vec<QpOutput>) {
        let psn = pkt.psn;
        match psn_cmp(psn, self.epsn) {
            std::cmp::Ordering::Greater => return, // a gap: the requester will resend
            std::cmp::Ordering::Less => {
                self.duplicate(pkt, mem, out);
                return;
            }
            std::cmp::Ordering::Equal => {}
        }
        self.note_first_request(out);
        if self.driver != Driver::Siw && !self.rights.allow(&pkt.body) {
            out.push(QpOutput::Packet(Packet {
                psn,
                body: Body::Nak(Nak::InvalidRequest),
            }));
            self.enter_error(out);
            return;
        }
        let read = matches!(pkt.body, Body::ReadReq { .. });
        let write_key = match pkt.body {
            Body::Write { rkey, .. } => Some(rkey),
            _ => None,
        };
        let places = self.resp_places;
        let reply = match pkt.body {
            Body::ReadReq { addr, rkey, len } => match Self::read_for_peer(mem, rkey, addr, len) {
                Some(data) => {
                    let kept = Kept::Read {
                        psn,
                        addr,
                        len,
                        rkey,
                    };
                    mem.keep_request(places, kept);
                    Ok(Body::ReadResp { data })
                }
                None => Err(Nak::RemoteAccess),
            },
            Body::AtomicReq { addr, rkey, op } => mem.remote_atomic(rkey, addr, op).map(|orig| {
                mem.keep_request(places, Kept::Atomic { psn, orig });
                Body::AtomicResp { orig }
            }),
            body => self
                .receive_data(body, mem, out)
                .expect("only requests reach the responder"),
        };
        match reply {
            Ok(body) => {
                self.epsn = psn_next(psn);
                out.push(QpOutput::Packet(Packet { psn, body }));
            }
            Err(nak) if self.driver == Driver::Siw => {
                // siw_qp_sq_process fails the READ response, raises QP_REQ_ERR and drops the
                // connection at once (siw_qp_cm_drop), leaving the QP in RTS (measured on
                // 6.12); any other refusal is found on receipt (siw_proc_send,
                // siw_proc_write) and the close puts the QP in ERROR. A protection error
                // (siw_check_sge, siw_check_mem: a receive it may not write, a write under a
                // known key outside the region) raises QP_ACCESS_ERR; an unknown key
                // (siw_mem_id2obj) or a missing receive raise nothing.
                let protection = match nak {
                    Nak::RemoteOp => true,
                    Nak::RemoteAccess => write_key.is_some_and(|k| mem.has_key(k)),
                    _ => false,
                };
                if read {
                    self.marks.set(Marks::DROPPED_BY_SEND);
                    out.push(QpOutput::QpReqErr);
                } else {
                    if protection {
                        out.push(QpOutput::QpAccessErr);
                    }
                    self.enter_error(out);
                }
                out.push(QpOutput::Terminate);
            }
            Err(nak) => {
                out.push(QpOutput::Packet(Packet {
                    psn,
                    body: Body::Nak(nak),
                }));
                if !matches!(nak, Nak::Rnr(_)) {
                    self.enter_error(out);
                }
            }
        }
    }

    /// UC's responder: a request taken whatever its PSN (each message is one packet, a first
    /// one), executed once, answered with nothing; one it cannot take is dropped (the
    /// receive it would have filled stays posted), except a receive whose entries are bad,
    /// which fails there and moves this QP to ERROR.
    fn receive_unreliably(&mut self, pkt: Packet, mem: &mut dyn Memory, out: &mut Vec<QpOutput>) {
        self.note_first_request(out);
        self.epsn = psn_next(pkt.psn);
        if !self.rights.allow(&pkt.body) {
            return; // rxe's check_op_valid: a write without remote write is dropped
        }
        // A UC requester never sends a read (it fails the read itself).
        let Some(taken) = self.receive_data(pkt.body, mem, out) else {
            return;
        };
        if matches!(taken, Err(Nak::RemoteOp)) {
            self.enter_error(out);
        }
    }

    /// The first request this responder takes: the QP's COMM_EST (once), on an InfiniBand
    /// HCA only. rxe and siw raise none: neither driver has an `IB_EVENT_COMM_EST` (Linux 6.1
    /// and 6.12), and none came on the rxe and siw beds (`early_send`, the early send of
    /// backend-verbs/tests/datapath.rs).
    fn note_first_request(&mut self, out: &mut Vec<QpOutput>) {
        if !self.marks.has(Marks::COMM_EST) && self.driver == Driver::Hca {
            self.marks.set(Marks::COMM_EST);
            out.push(QpOutput::CommEst);
        }
    }

    /// Executes a send or a write (`None` for any other body): the reply it earns, or why it
    /// is refused.
    fn receive_data(
        &mut self,
        body: Body,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) -> Option<Result<Body, Nak>> {
        match body {
            Body::Send {
                data,
                imm,
                solicited,
            } => Some(self.receive_send(data, imm, solicited, mem, out)),
            Body::Write {
                addr,
                rkey,
                data,
                imm,
                solicited,
            } => Some(self.receive_write(addr, rkey, data, imm, solicited, mem, out)),
            _ => None,
        }
    }

    /// A request already executed: acknowledged again, a read or atomic from the responder
    /// resources (a read is read again, an atomic's kept value before is sent again, as rxe
    /// replays them); one they no longer hold, or a read asking for other bytes than the one
    /// kept, is dropped (rxe's class D).
    fn duplicate(&mut self, pkt: Packet, mem: &mut dyn Memory, out: &mut Vec<QpOutput>) {
        let body = match pkt.body {
            Body::ReadReq { addr, rkey, len } => {
                let kept = mem.kept_request(pkt.psn);
                if !kept.is_some_and(|k| k.answers_read(addr, len, rkey)) {
                    return;
                }
                match Self::read_for_peer(mem, rkey, addr, len) {
                    Some(data) => Body::ReadResp { data },
                    None => return,
                }
            }
            Body::AtomicReq { .. } => match mem.kept_request(pkt.psn) {
                Some(Kept::Atomic { orig, .. }) => Body::AtomicResp { orig },
                _ => return,
            },
            _ => Body::Ack,
        };
        let psn = match body {
            Body::Ack => psn_prev(self.epsn),
            _ => pkt.psn,
        };
        out.push(QpOutput::Packet(Packet { psn, body }));
    }

    /// A send: consumes the oldest receive.
    fn receive_send(
        &mut self,
        data: Arc<[u8]>,
        imm: Option<u32>,
        solicited: bool,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) -> Result<Body, Nak> {
        let Some(r) = self.rq.front() else {
            return Err(self.rnr());
        };
        if data.len() as u64 > r.capacity() {
            if self.driver == Driver::Rxe {
                // rxe (6.1 and 6.12) finds the overflow only as it copies: copy_data's
                // EINVAL makes send_data_in report a malformed receive (class A): the receive
                // completes LOC_QP_OP_ERR, an RC requester gets REM_OP_ERR, and the QP (UC
                // too) enters ERROR.
                let r = self.rq.pop_front().expect("checked");
                let st = WcStatus::LOC_QP_OP_ERR;
                self.complete_recv(r, st, WcOpcode::Recv, 0, None, solicited, out);
                return Err(Nak::RemoteOp);
            }
            if !self.is_reliable() {
                return Err(Nak::InvalidRequest); // UC: dropped, the receive stays posted
            }
            let r = self.rq.pop_front().expect("checked");
            self.complete_recv(
                r,
                WcStatus::LOC_LEN_ERR,
                WcOpcode::Recv,
                0,
                None,
                solicited,
                out,
            );
            return Err(Nak::InvalidRequest);
        }
        let r = self.rq.pop_front().expect("checked");
        if let Err(status) = mem.scatter(&r.sges, &data) {
            // siw completes such a receive with GENERAL_ERR (measured on 6.12); rxe with
            // LOC_QP_OP_ERR, as copy_data fails (a key of no region or without local write,
            // bytes outside the region) and its responder takes the receive for malformed.
            let status = match self.driver {
                Driver::Siw => WcStatus::GENERAL_ERR,
                Driver::Rxe => WcStatus::LOC_QP_OP_ERR,
                Driver::Hca => status,
            };
            self.complete_recv(r, status, WcOpcode::Recv, 0, None, solicited, out);
            return Err(Nak::RemoteOp);
        }
        let len = data.len() as u32;
        self.complete_recv(
            r,
            WcStatus::SUCCESS,
            WcOpcode::Recv,
            len,
            imm,
            solicited,
            out,
        );
        Ok(Body::Ack)
    }

    /// An RDMA write; with immediate data it also consumes the oldest receive.
    #[allow(clippy::too_many_arguments)]
    fn receive_write(
        &mut self,
        addr: u64,
        rkey: u32,
        data: Arc<[u8]>,
        imm: Option<u32>,
        solicited: bool,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) -> Result<Body, Nak> {
        if imm.is_some() && self.rq.is_empty() {
            return Err(self.rnr());
        }
        // A zero-length write names no memory: its key and address are not checked (IBA
        // C9-88; rxe's check_rkey, siw_proc_write).
        if !data.is_empty() && !mem.remote_write(rkey, addr, &data) {
            return Err(Nak::RemoteAccess);
        }
        if imm.is_some() {
            let r = self.rq.pop_front().expect("checked");
            let (op, len) = (WcOpcode::RecvRdmaWithImm, data.len() as u32);
            self.complete_recv(r, WcStatus::SUCCESS, op, len, imm, solicited, out);
        }
        Ok(Body::Ack)
    }

    /// The bytes a peer's RDMA read of `len` at `addr` under `rkey` fetches; `None` when the
    /// key, range or access refuses it. A zero-length read names no memory: its key and
    /// address are not checked (IBA C9-88; rxe's check_rkey executes it without looking the
    /// key up, siw_check_sgl_tx skips a zero-length entry of the read response).
    fn read_for_peer(mem: &mut dyn Memory, rkey: u32, addr: u64, len: u32) -> Option<Vec<u8>> {
        if len == 0 {
            return Some(Vec::new());
        }
        mem.remote_read(rkey, addr, len)
    }

    /// The RNR NAK this QP answers with when no receive is posted.
    fn rnr(&self) -> Nak {
        Nak::Rnr(Duration::from_nanos(u64::from(self.rnr_timer_ns)))
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_recv(
        &self,
        r: RecvEntry,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        solicited: bool,
        out: &mut Vec<QpOutput>,
    ) {
        let wc = WorkCompletion {
            wr_id: r.wr_id,
            status,
            opcode,
            byte_len,
            imm,
            ..WorkCompletion::default()
        };
        out.push(QpOutput::Complete {
            queue: Queue::Recv,
            wc: Some(wc),
            solicited,
            sges: r.sges,
        });
    }
}

/// The packet that carries request `e` (at its PSN).
fn request_packet(e: &SendEntry) -> Packet {
    let body = match e.kind {
        SendKind::Send { imm } => Body::Send {
            data: Arc::clone(&e.data),
            imm,
            solicited: e.solicited,
        },
        SendKind::Write { addr, rkey, imm } => Body::Write {
            addr,
            rkey,
            data: Arc::clone(&e.data),
            imm,
            solicited: e.solicited,
        },
        SendKind::Read { addr, rkey, len } => Body::ReadReq { addr, rkey, len },
        SendKind::Atomic { addr, rkey, op } => Body::AtomicReq { addr, rkey, op },
    };
    Packet { psn: e.psn, body }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::responder_resources::KeptRequests;

    /// Memory where every access succeeds and writes are recorded; atomics work on one
    /// 8-byte word (refusing an address not 8-byte aligned) and their results are kept.
    #[derive(Default)]
    struct Open {
        written: Vec<u8>,
        word: u64,
        kept: KeptRequests,
    }

    impl Memory for Open {
        fn scatter(&mut self, _: &[Sge], data: &[u8]) -> Result<(), WcStatus> {
            self.written.extend_from_slice(data);
            Ok(())
        }
        fn remote_write(&mut self, _: u32, _: u64, data: &[u8]) -> bool {
            self.written.extend_from_slice(data);
            true
        }
        fn has_key(&self, _: u32) -> bool {
            true
        }
        fn remote_read(&mut self, _: u32, _: u64, len: u32) -> Option<Vec<u8>> {
            Some(vec![7; len as usize])
        }
        fn remote_atomic(&mut self, _: u32, addr: u64, op: AtomicOp) -> Result<u64, Nak> {
            if addr % 8 != 0 {
                return Err(Nak::InvalidRequest);
            }
            let old = self.word;
            self.word = op.apply(old);
            Ok(old)
        }
        fn keep_request(&mut self, places: u8, kept: Kept) {
            self.kept.keep(places, kept);
        }
        fn kept_request(&self, psn: u32) -> Option<Kept> {
            self.kept.find(psn)
        }
    }

    const PARAMS: RcParams = RcParams {
        timeout: 14,
        retry_count: 2,
        rnr_retry: 1,
    };

    fn connected() -> RcQp {
        let mut qp = RcQp::new(QpCap::default(), true);
        qp.rights = Rights::ALL;
        qp.set_initiator_depth(16);
        qp.set_responder_resources(16);
        let mut out = Vec::new();
        assert!(qp.connect(Duration::from_millis(1), PARAMS, &mut out));
        assert!(out.is_empty());
        qp
    }

    fn send(wr_id: u64, data: &[u8]) -> SendEntry {
        SendEntry::new(
            wr_id,
            SendKind::Send { imm: None },
            data.into(),
            Sges::Many(Vec::new()),
        )
    }

    fn recv(wr_id: u64) -> RecvEntry {
        RecvEntry {
            wr_id,
            sges: Sges::Many(Vec::new()),
        }
    }

    fn packets(out: &[QpOutput]) -> Vec<Packet> {
        out.iter()
            .filter_map(|o| match o {
                QpOutput::Packet(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    fn statuses(out: &[QpOutput]) -> Vec<(u64, WcStatus)> {
        out.iter()
            .filter_map(|o| match o {
                QpOutput::Complete { wc: Some(wc), .. } => Some((wc.wr_id, wc.status)),
                _ => None,
            })
            .collect()
    }

    /// rxe: a send posted in INIT is refused but kept; RTS does not send it, the next post
    /// sends both in order, and an acknowledgement of both completes both.
    #[test]
    fn a_send_posted_in_init_is_refused_kept_and_sent_with_the_next_post() {
        let mut qp = RcQp::new(QpCap::default(), true).on_rxe();
        let mut out = Vec::new();
        let (e, kept) = qp.post_send(send(1, b"a"), &mut out).unwrap_err();
        let not_ready = PostError::NotReady {
            state: QpState::Init,
            siw: false,
        };
        assert_eq!((e, kept.is_none()), (not_ready, true));
        assert!(out.is_empty(), "nothing is sent before RTS");
        assert!(qp.connect(Duration::from_millis(1), PARAMS, &mut out));
        assert!(out.is_empty(), "RTS rings no doorbell");
        qp.post_send(send(2, b"b"), &mut out).unwrap();
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(psns, [0, 1]);
        assert!(
            matches!(out.last(), Some(QpOutput::SetTimer(d)) if *d == Duration::from_nanos(4096 << 14))
        );
        out.clear();
        let ack = Packet {
            psn: 1,
            body: Body::Ack,
        };
        qp.on_packet(ack, &mut Open::default(), &mut out);
        assert_eq!(
            statuses(&out),
            [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]
        );
        assert!(out.iter().any(|o| matches!(o, QpOutput::CancelTimer)));
    }

    /// siw on the VM's loopback path (RTO 204 ms).
    fn siw_connected() -> RcQp {
        let mut qp = RcQp::new(QpCap::default(), true).on_siw();
        let tcp = TcpPath::new(Duration::from_micros(10), Some(250));
        let mut out = Vec::new();
        assert!(qp.iw_rts(PARAMS, tcp, &mut out));
        qp
    }

    fn timers(out: &[QpOutput]) -> Vec<Duration> {
        out.iter()
            .filter_map(|o| match o {
                QpOutput::SetTimer(d) => Some(*d),
                _ => None,
            })
            .collect()
    }

    /// siw: TCP's timer, not the QP's `timeout` (14: 67 ms) or `retry_count` (2): the loss
    /// probe sends the last message again, each RTO all of them, and TCP's give-up closes the
    /// connection instead of a RETRY_EXC_ERR.
    #[test]
    fn siw_retransmits_on_tcps_timer_until_tcp_gives_up() {
        let mut qp = siw_connected();
        let mut out = Vec::new();
        qp.post_send(send(1, b"a"), &mut out).unwrap();
        qp.post_send(send(2, b"b"), &mut out).unwrap();
        assert_eq!(
            statuses(&out),
            [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]
        );
        // Armed by the first send with one outstanding: the loss probe at the RTO.
        assert_eq!(timers(&out), [Duration::from_millis(204)]);
        out.clear();
        qp.on_timer(&mut out);
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(
            (psns, timers(&out)),
            (vec![1], vec![Duration::from_millis(204)])
        );
        let mut rtos = 0;
        loop {
            out.clear();
            qp.on_timer(&mut out);
            if out.iter().any(|o| matches!(o, QpOutput::TcpLost)) {
                break;
            }
            let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
            assert_eq!(psns, [0, 1]);
            rtos += 1;
        }
        assert_eq!(rtos, 15, "RTOs before the give-up");
        assert!(
            statuses(&out).is_empty() && timers(&out).is_empty(),
            "{out:?}"
        );
        out.clear();
        qp.on_timer(&mut out);
        assert!(out.is_empty(), "the timer is off: {out:?}");
    }

    /// siw: a send posted before RTS is refused and kept, and nothing after it is ever sent
    /// (the later posts succeed) or flushed: ERROR flushes only the receives.
    #[test]
    fn a_send_posted_before_rts_on_siw_wedges_the_send_queue_for_good() {
        let mut qp = RcQp::new(QpCap::default(), true).on_siw();
        let mut out = Vec::new();
        let (e, kept) = qp.post_send(send(1, b"a"), &mut out).unwrap_err();
        let not_ready = PostError::NotReady {
            state: QpState::Init,
            siw: true,
        };
        assert_eq!((e, kept.is_none()), (not_ready, true));
        let tcp = TcpPath::new(Duration::from_micros(10), Some(250));
        assert!(qp.iw_rts(PARAMS, tcp, &mut out));
        qp.post_send(send(2, b"b"), &mut out).unwrap();
        assert!(packets(&out).is_empty(), "nothing is sent: {out:?}");
        qp.post_recv(recv(10), &mut out).unwrap();
        qp.enter_error(&mut out);
        assert_eq!(statuses(&out), [(10, WcStatus::WR_FLUSH_ERR)]);
    }

    fn read(wr_id: u64) -> SendEntry {
        let kind = SendKind::Read {
            addr: 0,
            rkey: 1,
            len: 4,
        };
        SendEntry::new(wr_id, kind, Arc::from(&[][..]), Sges::Many(Vec::new()))
    }

    fn read_response(psn: u32) -> Packet {
        Packet {
            psn,
            body: Body::ReadResp { data: vec![7; 4] },
        }
    }

    /// A request behind a read leaves at once; a fenced one only once the read's response is
    /// in, and a fenced one behind no read at once.
    #[test]
    fn a_fenced_request_waits_for_the_reads_before_it() {
        let fenced = |wr_id| SendEntry {
            fence: true,
            ..send(wr_id, b"f")
        };
        let mut qp = connected();
        let mut out = Vec::new();
        qp.post_send(read(1), &mut out).unwrap();
        qp.post_send(send(2, b"a"), &mut out).unwrap();
        qp.post_send(fenced(3), &mut out).unwrap();
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(psns, [0, 1], "the fenced request waits behind the read");
        out.clear();
        qp.on_packet(read_response(0), &mut Open::default(), &mut out);
        assert_eq!(statuses(&out), [(1, WcStatus::SUCCESS)]);
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(psns, [2], "the read's response lets it go");
        out.clear();
        qp.post_send(fenced(4), &mut out).unwrap();
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(
            psns,
            [3],
            "no read outstanding: no wait, sends unacknowledged or not"
        );
    }

    /// An initiator depth of 3 is rxe's 4: the fifth read, and the send behind it, wait
    /// until the first read completes; a depth of 0 sends no read, nor anything behind it.
    #[test]
    fn reads_beyond_the_initiator_depth_wait_for_an_earlier_ones_completion() {
        let mut qp = connected();
        qp.set_initiator_depth(3);
        let mut out = Vec::new();
        for wr_id in 1..=5 {
            qp.post_send(read(wr_id), &mut out).unwrap();
        }
        qp.post_send(send(6, b"a"), &mut out).unwrap();
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(psns, [0, 1, 2, 3], "four reads hold the four credits");
        out.clear();
        qp.on_packet(read_response(0), &mut Open::default(), &mut out);
        assert_eq!(statuses(&out), [(1, WcStatus::SUCCESS)]);
        let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
        assert_eq!(
            psns,
            [4, 5],
            "the first read's credit sends the fifth, then the send"
        );

        let mut qp = connected();
        qp.set_initiator_depth(0);
        out.clear();
        qp.post_send(read(1), &mut out).unwrap();
        qp.post_send(send(2, b"a"), &mut out).unwrap();
        assert!(packets(&out).is_empty(), "{out:?}");
        let siw = |depth| {
            let mut qp = siw_connected();
            qp.set_initiator_depth(depth);
            let mut out = Vec::new();
            qp.post_send(read(1), &mut out).unwrap();
            packets(&out).len()
        };
        assert_eq!(siw(0), 1, "siw's reads are not bounded by this attribute");
    }

    fn fetch_add(wr_id: u64, addr: u64, add: u64) -> SendEntry {
        let kind = SendKind::Atomic {
            addr,
            rkey: 1,
            op: AtomicOp::FetchAdd { add },
        };
        let sge = Sge {
            addr: 0,
            length: 8,
            lkey: 1,
        };
        SendEntry::new(wr_id, kind, Arc::from(&[][..]), Sges::One(sge))
    }

    /// The responder adds once: a duplicate of the request (its ATOMIC ACK lost) is answered
    /// with the kept value before, not added again; the requester places the value before
    /// and completes FETCH_ADD with its entries' 8 bytes.
    #[test]
    fn a_duplicate_atomic_replays_its_result_and_adds_once() {
        let (mut req, mut resp) = (connected(), connected());
        let (mut out, mut mem) = (Vec::new(), Open::default());
        mem.word = 40;
        req.post_send(fetch_add(1, 0x1000, 2), &mut out).unwrap();
        let first = packets(&out).remove(0);
        out.clear();
        resp.on_packet(first.clone(), &mut mem, &mut out);
        let answer = Body::AtomicResp { orig: 40 };
        assert_eq!(packets(&out)[0].body, answer);
        out.clear();
        resp.on_packet(first, &mut mem, &mut out); // the requester's retransmission
        assert_eq!((packets(&out)[0].psn, &packets(&out)[0].body), (0, &answer));
        assert_eq!(mem.word, 42, "added once");
        out.clear();
        let mut local = Open::default();
        let ack = Packet {
            psn: 0,
            body: answer,
        };
        req.on_packet(ack, &mut local, &mut out);
        assert_eq!(local.written, 40u64.to_ne_bytes());
        let wc = out.iter().find_map(|o| match o {
            QpOutput::Complete { wc: Some(wc), .. } => Some(*wc),
            _ => None,
        });
        let wc = wc.expect("completed");
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FetchAdd, 8));
    }

    /// The responder keeps as many reads and atomics as its places (`max_dest_rd_atomic`):
    /// with one, an atomic after a read takes the read's place, so the read's duplicate is
    /// dropped unanswered (rxe's class D), while the atomic's is answered with its value
    /// before; a duplicate read asking for more bytes than the read kept is dropped too.
    #[test]
    fn duplicates_are_answered_only_from_the_places_kept() {
        let mut resp = connected();
        resp.set_responder_resources(1);
        let (mut out, mut mem) = (Vec::new(), Open::default());
        mem.word = 40;
        let read = |psn, len| Packet {
            psn,
            body: Body::ReadReq {
                addr: 0x1000,
                rkey: 1,
                len,
            },
        };
        let atomic = Packet {
            psn: 1,
            body: Body::AtomicReq {
                addr: 0x1000,
                rkey: 1,
                op: AtomicOp::FetchAdd { add: 2 },
            },
        };
        resp.on_packet(read(0, 8), &mut mem, &mut out);
        assert_eq!(packets(&out)[0].body, Body::ReadResp { data: vec![7; 8] });
        out.clear();
        resp.on_packet(read(0, 16), &mut mem, &mut out);
        assert_eq!(packets(&out), vec![], "more bytes than kept");
        resp.on_packet(read(0, 8), &mut mem, &mut out);
        assert_eq!(packets(&out).len(), 1, "the read kept, read again");
        out.clear();
        resp.on_packet(atomic.clone(), &mut mem, &mut out);
        resp.on_packet(read(0, 8), &mut mem, &mut out);
        resp.on_packet(atomic, &mut mem, &mut out);
        let answer = Body::AtomicResp { orig: 40 };
        let bodies: Vec<Body> = packets(&out).into_iter().map(|p| p.body).collect();
        assert_eq!(
            bodies,
            vec![answer.clone(), answer],
            "the read's duplicate dropped"
        );
        assert_eq!(mem.word, 42, "added once");
    }

    /// An atomic at an address not 8-byte aligned (librxe refuses it at post; another
    /// requester may send it) is an invalid request: REM_INV_REQ_ERR, both QPs in ERROR. A
    /// responder without remote atomic access, or without responder resources, answers the
    /// same before touching memory.
    #[test]
    fn misaligned_or_unpermitted_atomics_are_invalid_requests() {
        let take_all = Rights::ALL;
        let no_atomic = Rights(Rights::ALL.0 & !Rights::ATOMIC);
        let no_depth = Rights(Rights::ALL.0 & !Rights::READ_DEPTH);
        for (addr, rights) in [(0x1004, take_all), (0x1000, no_atomic), (0x1000, no_depth)] {
            let (mut req, mut resp) = (connected(), connected());
            resp.rights = rights;
            let (mut out, mut mem) = (Vec::new(), Open::default());
            req.post_send(fetch_add(1, addr, 2), &mut out).unwrap();
            let request = packets(&out).remove(0);
            out.clear();
            resp.on_packet(request, &mut mem, &mut out);
            let nak = packets(&out).remove(0);
            assert_eq!(nak.body, Body::Nak(Nak::InvalidRequest));
            assert_eq!((resp.state(), mem.word), (QpState::Error, 0));
            out.clear();
            req.on_packet(nak, &mut mem, &mut out);
            assert_eq!(statuses(&out), [(1, WcStatus::REM_INV_REQ_ERR)]);
        }
    }

    /// UC has no atomic opcode: the requester fails it with LOC_QP_OP_ERR, sending nothing.
    #[test]
    fn uc_fails_an_atomic_locally() {
        let mut qp = RcQp::new(QpCap::default(), true).unreliable();
        let mut out = Vec::new();
        assert!(qp.connect(Duration::from_millis(1), PARAMS, &mut out));
        qp.post_send(fetch_add(1, 0x1000, 2), &mut out).unwrap();
        assert!(packets(&out).is_empty());
        assert_eq!(statuses(&out), [(1, WcStatus::LOC_QP_OP_ERR)]);
        assert_eq!(qp.state(), QpState::Error);
    }

    #[test]
    fn timeouts_resend_then_exhaust_the_retries_and_flush() {
        let mut qp = connected();
        let mut out = Vec::new();
        qp.post_send(send(1, b"a"), &mut out).unwrap();
        qp.post_send(send(2, b"b"), &mut out).unwrap();
        for _ in 0..PARAMS.retry_count {
            out.clear();
            qp.on_timer(&mut out);
            let psns: Vec<u32> = packets(&out).iter().map(|p| p.psn).collect();
            assert_eq!(psns, [0, 1], "go-back-N resends both");
        }
        out.clear();
        qp.on_timer(&mut out);
        assert_eq!(
            statuses(&out),
            [(1, WcStatus::RETRY_EXC_ERR), (2, WcStatus::WR_FLUSH_ERR)]
        );
        assert_eq!(qp.state(), QpState::Error);
    }

    #[test]
    fn rnr_naks_wait_and_resend_until_the_rnr_retries_run_out() {
        let mut qp = connected();
        let mut out = Vec::new();
        qp.post_send(send(1, b"a"), &mut out).unwrap();
        let nak = || Packet {
            psn: 0,
            body: Body::Nak(Nak::Rnr(Duration::from_millis(1))),
        };
        out.clear();
        qp.on_packet(nak(), &mut Open::default(), &mut out);
        assert!(
            matches!(out.last(), Some(QpOutput::SetTimer(d)) if *d == Duration::from_millis(1))
        );
        out.clear();
        qp.on_timer(&mut out);
        assert_eq!(packets(&out).len(), 1, "resent after the wait");
        out.clear();
        qp.on_packet(nak(), &mut Open::default(), &mut out);
        assert_eq!(statuses(&out), [(1, WcStatus::RNR_RETRY_EXC_ERR)]);
    }

    #[test]
    fn the_responder_executes_once_and_in_order() {
        let mut qp = connected();
        let mut mem = Open::default();
        let mut out = Vec::new();
        for wr_id in [1, 2] {
            let r = RecvEntry {
                wr_id,
                sges: Sges::One(Sge {
                    addr: 0,
                    length: 8,
                    lkey: 1,
                }),
            };
            qp.post_recv(r, &mut out).unwrap();
        }
        let send = |psn: u32, byte: u8| Packet {
            psn,
            body: Body::Send {
                data: vec![byte].into(),
                imm: None,
                solicited: false,
            },
        };
        qp.on_packet(send(1, b'x'), &mut mem, &mut out);
        assert!(out.is_empty(), "a gap is dropped");
        qp.on_packet(send(0, b'a'), &mut mem, &mut out);
        assert!(matches!(out[0], QpOutput::CommEst));
        assert_eq!(statuses(&out), [(1, WcStatus::SUCCESS)]);
        assert_eq!(
            packets(&out),
            [Packet {
                psn: 0,
                body: Body::Ack
            }]
        );
        out.clear();
        qp.on_packet(send(0, b'a'), &mut mem, &mut out);
        assert!(
            statuses(&out).is_empty(),
            "a duplicate is not received again"
        );
        assert_eq!(
            packets(&out),
            [Packet {
                psn: 0,
                body: Body::Ack
            }]
        );
        assert_eq!(mem.written, b"a");
    }

    #[test]
    fn uc_completes_on_transmission_and_its_responder_answers_nothing() {
        let mut qp = RcQp::new(QpCap::default(), true).unreliable();
        let mut out = Vec::new();
        assert!(qp.connect(Duration::from_millis(1), PARAMS, &mut out));
        qp.post_send(send(1, b"a"), &mut out).unwrap();
        assert_eq!(packets(&out).iter().map(|p| p.psn).collect::<Vec<_>>(), [0]);
        assert_eq!(statuses(&out), [(1, WcStatus::SUCCESS)]);
        assert!(!out.iter().any(|o| matches!(o, QpOutput::SetTimer(_))));
        out.clear();
        qp.on_timer(&mut out);
        assert!(out.is_empty(), "no timer, nothing to resend");

        let mut rx = RcQp::new(QpCap::default(), true).unreliable();
        assert!(rx.connect(Duration::from_millis(1), PARAMS, &mut out));
        let mut mem = Open::default();
        let pkt = |psn: u32, byte: u8| Packet {
            psn,
            body: Body::Send {
                data: vec![byte].into(),
                imm: None,
                solicited: false,
            },
        };
        // No receive: dropped, no RNR NAK.
        rx.on_packet(pkt(0, b'x'), &mut mem, &mut out);
        assert!(packets(&out).is_empty() && statuses(&out).is_empty());
        let r = RecvEntry {
            wr_id: 7,
            sges: Sges::One(Sge {
                addr: 0,
                length: 8,
                lkey: 1,
            }),
        };
        rx.post_recv(r, &mut out).unwrap();
        // A gap in the PSNs (a lost message) is taken all the same, and not acknowledged.
        out.clear();
        rx.on_packet(pkt(2, b'y'), &mut mem, &mut out);
        assert!(packets(&out).is_empty());
        assert_eq!(statuses(&out), [(7, WcStatus::SUCCESS)]);
        assert_eq!(mem.written, b"y");
        assert_eq!(rx.state(), QpState::Rts);
    }
}

/// What rxe left of an RC or UC QP it moved to RTS from a state `IBV_QP_CUR_STATE` named
/// (measured; tests/BEDS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NamedRts {
    /// Nothing of the kind: the QP came to its state the ordinary way.
    No,
    /// It was never given a path (no RTR's address vector): its requester fails the first
    /// request it takes with this status and moves the QP to ERROR.
    Pathless(PathlessFailure),
    /// rxe 6.1 from ERROR: the responder stays in error and drops every request unanswered.
    DeafResponder,
}

/// The status a pathless QP's first request fails with (one byte, unlike [`WcStatus`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathlessFailure {
    /// rxe 6.1: the requester reports LOC_QP_OP_ERR.
    LocalQpError,
    /// rxe 6.12: the request is flushed.
    Flushed,
}

impl PathlessFailure {
    /// The completion status.
    pub(crate) fn status(self) -> WcStatus {
        match self {
            PathlessFailure::LocalQpError => WcStatus::LOC_QP_OP_ERR,
            PathlessFailure::Flushed => WcStatus::WR_FLUSH_ERR,
        }
    }
}
