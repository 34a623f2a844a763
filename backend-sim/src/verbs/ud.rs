//! One UD QP as a sans-IO state machine, apart from the RC one (`rc.rs`): inputs are the
//! application's posts, state changes, and datagrams the world routed to it; outputs are
//! datagrams to send and completions. Unreliable: no PSNs, acknowledgements, retries or
//! timer; a send completes SUCCESS when transmitted, whatever becomes of it.
//!
//! * A receiver drops a datagram (no completion) when it is not ready to receive (RESET,
//!   INIT, ERROR), when no receive is posted (UD has no RNR), or when the datagram's qkey
//!   is not the QP's (the world checks the qkey before handing it over).
//! * A taken datagram fills the oldest receive: the first [`GRH_LEN`] bytes are the global
//!   route header's (written only when the datagram carries one: `IBV_WC_GRH`), the payload
//!   follows, and `byte_len` counts both, as libibverbs reports UD receives. A receive too
//!   small for both is the driver's ([`ShortReceive`]): an InfiniBand HCA completes it with
//!   LOC_LEN_ERR and the QP stays usable (the specification's UD class D error); rxe on
//!   Linux 6.1 completes it with LOC_QP_OP_ERR and the QP enters ERROR; rxe on 6.12 drops
//!   the datagram and keeps the receive (REM_INV_REQ_ERR from an SRQ).
//! * Sends posted before RTS wait for it; ERROR flushes both queues.

use crate::lazy_deque::LazyDeque;
use std::sync::Arc;

use cmtwin::verbs::{QpState, Sge, WcOpcode, WcStatus, WorkCompletion, GRH_LEN};
use cmtwin::QpCap;

use super::rc::{Memory, PostError, QpOutput, Queue, RecvEntry, Sges};

/// Where a datagram goes, as the address handle said when the send was posted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdTarget {
    /// The destination GID (a group's for multicast).
    pub dgid: [u8; 16],
    /// Whether the sender's address handle carries a global route header.
    pub global: bool,
    /// The destination LID (InfiniBand; what a handle without a destination GID goes by).
    pub dlid: u16,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A posted UD send, its bytes gathered at post time.
#[derive(Clone, Debug)]
pub(crate) struct UdSendEntry {
    pub wr_id: u64,
    pub target: UdTarget,
    pub data: Arc<[u8]>,
    pub imm: Option<u32>,
    pub sges: Sges,
    pub signaled: bool,
    pub solicited: bool,
    /// A local error found when the bytes were gathered.
    pub fault: Option<WcStatus>,
}

/// A datagram on the wire: what a receiver learns of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Datagram {
    pub target: UdTarget,
    pub data: Arc<[u8]>,
    pub imm: Option<u32>,
    pub solicited: bool,
}

impl std::fmt::Display for Datagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UD_SEND {} bytes qkey {:#x}",
            self.data.len(),
            self.target.remote_qkey
        )?;
        match self.imm {
            Some(imm) => write!(f, " imm {imm:#x}"),
            None => Ok(()),
        }
    }
}

/// One UD QP.
/// What a UD responder does with a datagram longer than the receive at the head of its
/// queue (the global route header's space included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShortReceive {
    /// The specification's class D error (an InfiniBand HCA): the receive completes with
    /// LOC_LEN_ERR, the QP stays usable.
    LengthError,
    /// rxe on Linux 6.1: no length check before the copy, whose failure its responder takes
    /// for a malformed receive (`send_data_in`, class A): the receive completes with
    /// LOC_QP_OP_ERR and the QP enters ERROR (measured).
    MalformedReceive,
    /// rxe on Linux 6.12: `rxe_resp_check_length` finds it first and drops the datagram,
    /// keeping the receive posted (class D without a completion; measured: nothing within
    /// 10 s); from an SRQ the receive completes with REM_INV_REQ_ERR and the QP stays usable
    /// (class E; read, not measured).
    Dropped,
}

pub(crate) struct UdQp {
    state: QpState,
    qpn: u32,
    cap: QpCap,
    sq_sig_all: bool,
    /// The qkey a datagram must carry to be taken.
    qkey: u32,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: its own datagrams to a group skip it.
    blocks_self_loopback: bool,
    /// Sends posted before RTS, kept though their post failed (see [`UdQp::post_send`]).
    sq: LazyDeque<UdSendEntry>,
    rq: LazyDeque<RecvEntry>,
    /// Takes its receives from an SRQ (as [`super::RcQp::use_srq`]).
    srq: bool,
    /// What a datagram too long for the receive at the head of the queue does.
    short_receive: ShortReceive,
    /// The send queue holds requests whose post failed before RTS: only the next post that
    /// succeeds sends them (as [`super::RcQp`]'s).
    unannounced: bool,
}

impl UdQp {
    /// A UD QP numbered `qpn` with `qkey`, in RTS, as `rdma_create_qp` leaves it.
    pub(crate) fn new(qpn: u32, cap: QpCap, sq_sig_all: bool, qkey: u32) -> Self {
        UdQp {
            state: QpState::Rts,
            qpn,
            cap,
            sq_sig_all,
            qkey,
            blocks_self_loopback: false,
            sq: LazyDeque::default(),
            rq: LazyDeque::default(),
            srq: false,
            short_receive: ShortReceive::LengthError,
            unannounced: false,
        }
    }

    /// The same QP on rxe, with its responder's rule for a datagram too long for the
    /// receive (see [`ShortReceive`]).
    pub(crate) fn on_rxe(mut self, kernel: crate::KernelProfile) -> Self {
        self.short_receive = match kernel {
            crate::KernelProfile::Linux61 => ShortReceive::MalformedReceive,
            _ => ShortReceive::Dropped,
        };
        self
    }

    /// The same QP taking its receives from an SRQ.
    pub(crate) fn use_srq(&mut self) {
        self.srq = true;
    }

    /// The receive queue (an SRQ's, lent, on a QP with one).
    pub(crate) fn rq_mut(&mut self) -> &mut LazyDeque<RecvEntry> {
        &mut self.rq
    }

    /// The QP in RESET with qkey 0, as `ibv_create_qp` makes it (INIT sets the qkey).
    pub(crate) fn in_reset(mut self) -> Self {
        self.state = QpState::Reset;
        self.qkey = 0;
        self
    }

    /// Made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: it receives none of its own datagrams
    /// to a multicast group.
    pub(crate) fn block_self_multicast_loopback(&mut self) {
        self.blocks_self_loopback = true;
    }

    /// Whether its own datagrams to a group skip it.
    pub(crate) fn blocks_self_loopback(&self) -> bool {
        self.blocks_self_loopback
    }

    /// Takes datagrams with `qkey` from now on (`ibv_modify_qp` with `IBV_QP_QKEY`).
    pub(crate) fn set_qkey(&mut self, qkey: u32) {
        self.qkey = qkey;
    }

    pub(crate) fn state(&self) -> QpState {
        self.state
    }

    pub(crate) fn cap(&self) -> QpCap {
        self.cap
    }

    /// The qkey datagrams must carry.
    pub(crate) fn qkey(&self) -> u32 {
        self.qkey
    }

    /// The entries of every outstanding request, send queue first.
    pub(crate) fn posted_sges(&self) -> impl Iterator<Item = &Sge> {
        let sends = self.sq.iter().flat_map(|e| e.sges.iter());
        let own = (!self.srq).then_some(&self.rq);
        sends.chain(
            own.into_iter()
                .flat_map(|rq| rq.iter().flat_map(|r| r.sges.iter())),
        )
    }

    /// Every outstanding request's entries, discarded without completions (RESET, destroy).
    pub(crate) fn discard(&mut self) -> Vec<Sge> {
        let mut sges: Vec<Sge> = self.sq.drain(..).flat_map(|e| e.sges.to_vec()).collect();
        if !self.srq {
            sges.extend(self.rq.drain(..).flat_map(|r| r.sges.to_vec()));
        }
        self.state = QpState::Reset;
        self.unannounced = false;
        sges
    }

    /// RESET or INIT → INIT, INIT → RTR, RTR, RTS or SQD → RTS (sending what was posted in
    /// SQD), RTS → SQD (drained at once) or SQD → SQD; false otherwise. Reaching RTS sends
    /// nothing posted before RTS: that waits for the next post that succeeds.
    pub(crate) fn step_to(&mut self, to: QpState, out: &mut Vec<QpOutput>) -> bool {
        let from: &[QpState] = match to {
            QpState::Init => &[QpState::Reset, QpState::Init],
            QpState::Rtr => &[QpState::Init],
            QpState::Rts => &[QpState::Rtr, QpState::Rts, QpState::Sqd],
            // Every datagram is sent when posted in RTS: nothing is ever in flight.
            QpState::Sqd if self.state == QpState::Rts => {
                self.state = QpState::Sqd;
                out.push(QpOutput::SqDrained);
                return true;
            }
            QpState::Sqd => &[QpState::Sqd],
            _ => return false,
        };
        if !from.contains(&self.state) {
            return false;
        }
        self.state = to;
        if to == QpState::Rts && !self.unannounced {
            self.send_queued(out);
        }
        true
    }

    /// Any state → RTS, as rxe moves a QP whose `ibv_modify_qp` named, with
    /// `IBV_QP_CUR_STATE`, a state the kernel's table leads to RTS from (measured from RESET
    /// and INIT): only the state changes; a datagram names its own path.
    pub(crate) fn force_rts(&mut self, out: &mut Vec<QpOutput>) {
        self.state = QpState::Rts;
        if !self.unannounced {
            self.send_queued(out);
        }
    }

    /// Sends every request the send queue holds, in order.
    fn send_queued(&mut self, out: &mut Vec<QpOutput>) {
        while let Some(e) = self.sq.pop_front() {
            self.transmit(e, out);
        }
        self.unannounced = false;
    }

    /// Any state → ERROR, flushing both queues (RESET has nothing to flush).
    pub(crate) fn enter_error(&mut self, out: &mut Vec<QpOutput>) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        self.unannounced = false;
        while let Some(e) = self.sq.pop_front() {
            self.complete_send(e, WcStatus::WR_FLUSH_ERR, out);
        }
        while let Some(r) = (!self.srq).then(|| self.rq.pop_front()).flatten() {
            self.complete_recv(r, WcStatus::WR_FLUSH_ERR, 0, None, Arrival::failed(0), out);
        }
        if self.srq {
            // As an RC QP's (`QpOutput::LastWqeReached`): rxe flushes every QP type's receive
            // side alike; the world drops it where rxe raises none.
            out.push(QpOutput::LastWqeReached);
        }
    }

    fn check_post(&self, len: usize, depth: u32) -> Result<(), PostError> {
        match self.state {
            QpState::Reset => Err(PostError::Reset),
            QpState::Error => Ok(()),
            _ if len >= depth as usize => Err(PostError::Full),
            _ => Ok(()),
        }
    }

    /// `ibv_post_send` of `entry` (given back when refused and not kept).
    ///
    /// Before RTS (INIT or RTR) the provider writes the request into the send queue and the
    /// kernel's doorbell refuses, as for a connected QP ([`super::RcQp::post_send`]): the
    /// post fails ([`PostError::NotReady`]) and the request stays. Reaching RTS sends
    /// nothing; the next post that succeeds sends the kept requests first, in order, and
    /// ERROR flushes them (measured on rxe, Linux 6.1 and 6.12, with a QP made apart from
    /// ids: `tests/src/ud_datapath.rs`).
    pub(crate) fn post_send(
        &mut self,
        mut entry: UdSendEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, Option<UdSendEntry>)> {
        if let Err(e) = self.check_post(self.sq.len(), self.cap.max_send_wr) {
            return Err((e, Some(entry)));
        }
        entry.signaled |= self.sq_sig_all;
        match self.state {
            QpState::Error => self.complete_send(entry, WcStatus::WR_FLUSH_ERR, out),
            QpState::Rts => {
                self.send_queued(out);
                self.transmit(entry, out);
            }
            QpState::Init | QpState::Rtr => {
                let state = self.state;
                self.sq.push_back(entry);
                self.unannounced = true;
                let not_ready = PostError::NotReady { state, siw: false };
                return Err((not_ready, None));
            }
            // SQD: held until the QP is back in RTS.
            _ => self.sq.push_back(entry),
        }
        Ok(())
    }

    /// `ibv_post_recv` of `entry` (given back when refused).
    pub(crate) fn post_recv(
        &mut self,
        entry: RecvEntry,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), (PostError, RecvEntry)> {
        if let Err(e) = self.check_post(self.rq.len(), self.cap.max_recv_wr) {
            return Err((e, entry));
        }
        if self.state == QpState::Error {
            self.complete_recv(
                entry,
                WcStatus::WR_FLUSH_ERR,
                0,
                None,
                Arrival::failed(0),
                out,
            );
        } else {
            self.rq.push_back(entry);
        }
        Ok(())
    }

    /// Sends `e` (or fails it for its local fault, which moves the QP to ERROR).
    fn transmit(&mut self, e: UdSendEntry, out: &mut Vec<QpOutput>) {
        if let Some(fault) = e.fault {
            self.complete_send(e, fault, out);
            self.enter_error(out);
            return;
        }
        out.push(QpOutput::Datagram(Datagram {
            target: e.target.clone(),
            data: Arc::clone(&e.data),
            imm: e.imm,
            solicited: e.solicited,
        }));
        self.complete_send(e, WcStatus::SUCCESS, out);
    }

    /// Why a datagram of `len` payload bytes arriving now would be dropped, if it would;
    /// `srq_posted` is how many receives the QP's SRQ holds, when it has one and they are not
    /// lent to it.
    pub(crate) fn refusal(&self, srq_posted: Option<usize>, len: usize) -> Option<&'static str> {
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            Some("the QP is not ready to receive")
        } else if srq_posted.map_or(self.rq.is_empty(), |n| n == 0) {
            Some("no receive posted")
        } else if self.short_receive == ShortReceive::Dropped
            && !self.srq
            && self
                .rq
                .front()
                .is_some_and(|r| r.capacity() < GRH_LEN as u64 + len as u64)
        {
            Some("longer than the receive")
        } else {
            None
        }
    }

    /// Datagram `d` from QP `src_qp` of the port with LID `slid` (0 on RoCE) arrived (its
    /// qkey already checked); `grh` is the header to place before the payload, when it
    /// carries one. Whether it was taken.
    pub(crate) fn on_datagram(
        &mut self,
        (src_qp, slid): (u32, u16),
        d: &Datagram,
        grh: Option<[u8; GRH_LEN as usize]>,
        mem: &mut dyn Memory,
        out: &mut Vec<QpOutput>,
    ) -> Result<(), &'static str> {
        if let Some(why) = self.refusal(None, d.data.len()) {
            return Err(why);
        }
        let r = self.rq.pop_front().expect("checked by refusal");
        let len = GRH_LEN + d.data.len() as u32;
        if u64::from(len) > r.capacity() {
            self.on_short_receive(r, src_qp, d.solicited, out);
            return Ok(());
        }
        let placed = match grh {
            Some(header) => {
                let mut bytes = Vec::with_capacity(len as usize);
                bytes.extend_from_slice(&header);
                bytes.extend_from_slice(&d.data);
                mem.scatter(&r.sges, &bytes)
            }
            None => mem.scatter(&skip(&r.sges, GRH_LEN), &d.data),
        };
        match placed {
            Ok(()) => {
                let from = Arrival {
                    src_qp,
                    slid,
                    grh: grh.is_some(),
                    solicited: d.solicited,
                };
                self.complete_recv(r, WcStatus::SUCCESS, len, d.imm, from, out);
            }
            Err(status) => {
                let from = Arrival {
                    solicited: d.solicited,
                    ..Arrival::failed(src_qp)
                };
                self.complete_recv(r, status, 0, None, from, out);
                self.enter_error(out);
            }
        }
        Ok(())
    }

    /// A datagram from `src_qp` too long for its receive `r`, as the driver's
    /// [`ShortReceive`] rule says (the dropping rule without an SRQ is [`UdQp::refusal`]'s).
    fn on_short_receive(
        &mut self,
        r: RecvEntry,
        src_qp: u32,
        solicited: bool,
        out: &mut Vec<QpOutput>,
    ) {
        let status = match self.short_receive {
            ShortReceive::LengthError => WcStatus::LOC_LEN_ERR,
            ShortReceive::MalformedReceive => WcStatus::LOC_QP_OP_ERR,
            ShortReceive::Dropped => WcStatus::REM_INV_REQ_ERR,
        };
        let from = Arrival {
            solicited,
            ..Arrival::failed(src_qp)
        };
        self.complete_recv(r, status, 0, None, from, out);
        if self.short_receive == ShortReceive::MalformedReceive {
            self.enter_error(out);
        }
    }

    fn complete_send(&self, e: UdSendEntry, status: WcStatus, out: &mut Vec<QpOutput>) {
        let ok = status == WcStatus::SUCCESS;
        let wc = (!ok || e.signaled).then(|| WorkCompletion {
            wr_id: e.wr_id,
            status,
            opcode: WcOpcode::Send,
            byte_len: if ok { e.data.len() as u32 } else { 0 },
            qp_num: self.qpn,
            ..WorkCompletion::default()
        });
        out.push(QpOutput::Complete {
            queue: Queue::Send,
            wc,
            solicited: false,
            sges: e.sges,
        });
    }

    /// A receive's completion for the datagram `from` describes.
    fn complete_recv(
        &self,
        r: RecvEntry,
        status: WcStatus,
        byte_len: u32,
        imm: Option<u32>,
        from: Arrival,
        out: &mut Vec<QpOutput>,
    ) {
        let ok = status == WcStatus::SUCCESS;
        let Arrival {
            src_qp,
            slid,
            grh,
            solicited,
        } = from;
        let wc = WorkCompletion {
            wr_id: r.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm,
            qp_num: self.qpn,
            src_qp: if ok { src_qp } else { 0 },
            grh: ok && grh,
            slid: if ok { slid } else { 0 },
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

/// What a receive's completion says of the datagram that consumed it.
#[derive(Clone, Copy)]
struct Arrival {
    src_qp: u32,
    /// The sender's LID (0 on RoCE).
    slid: u16,
    grh: bool,
    solicited: bool,
}

impl Arrival {
    /// A datagram from `src_qp` that was not placed (or no datagram: 0).
    fn failed(src_qp: u32) -> Self {
        Arrival {
            src_qp,
            slid: 0,
            grh: false,
            solicited: false,
        }
    }
}

/// The entries `sges` without their first `n` bytes.
fn skip(sges: &[Sge], mut n: u32) -> Vec<Sge> {
    let mut rest = Vec::with_capacity(sges.len());
    for s in sges {
        let cut = n.min(s.length);
        n -= cut;
        if cut < s.length {
            rest.push(Sge {
                addr: s.addr + u64::from(cut),
                length: s.length - cut,
                lkey: s.lkey,
            });
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::verbs::packet::{AtomicOp, Nak};

    /// Memory that records what is scattered where.
    #[derive(Default)]
    struct Recorder(Vec<(Vec<Sge>, Vec<u8>)>);

    impl Memory for Recorder {
        fn scatter(&mut self, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus> {
            self.0.push((sges.to_vec(), data.to_vec()));
            Ok(())
        }
        fn remote_write(&mut self, _: u32, _: u64, _: &[u8]) -> bool {
            false
        }
        fn has_key(&self, _: u32) -> bool {
            false
        }
        fn remote_read(&mut self, _: u32, _: u64, _: u32) -> Option<Vec<u8>> {
            None
        }
        fn remote_atomic(&mut self, _: u32, _: u64, _: AtomicOp) -> Result<u64, Nak> {
            Err(Nak::RemoteAccess)
        }
        fn keep_request(&mut self, _: u8, _: super::super::responder_resources::Kept) {}
        fn kept_request(&self, _: u32) -> Option<super::super::responder_resources::Kept> {
            None
        }
    }

    fn cap() -> QpCap {
        QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }

    fn recv(wr_id: u64, len: u32) -> RecvEntry {
        let sge = Sge {
            addr: 0x1000,
            length: len,
            lkey: 7,
        };
        RecvEntry {
            wr_id,
            sges: Sges::One(sge),
        }
    }

    fn datagram(len: usize) -> Datagram {
        Datagram {
            target: UdTarget {
                dgid: [0; 16],
                global: false,
                dlid: 0,
                remote_qpn: 0x20,
                remote_qkey: 1,
            },
            data: Arc::from(vec![0xab; len]),
            imm: None,
            solicited: false,
        }
    }

    fn recv_wcs(out: &[QpOutput]) -> Vec<WorkCompletion> {
        out.iter()
            .filter_map(|o| match o {
                QpOutput::Complete {
                    queue: Queue::Recv,
                    wc: Some(wc),
                    ..
                } => Some(*wc),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn without_a_grh_the_payload_lands_after_the_reserved_bytes() {
        let (mut qp, mut mem, mut out) =
            (UdQp::new(0x10, cap(), true, 1), Recorder::default(), vec![]);
        qp.post_recv(recv(1, 100), &mut out).unwrap();
        qp.on_datagram((0x30, 3), &datagram(10), None, &mut mem, &mut out)
            .unwrap();
        let wc = recv_wcs(&out)[0];
        assert_eq!(
            (wc.status, wc.byte_len, wc.src_qp, wc.slid, wc.grh),
            (WcStatus::SUCCESS, 50, 0x30, 3, false)
        );
        assert_eq!(mem.0[0].0[0].addr, 0x1000 + 40);
        assert_eq!(mem.0[0].0[0].length, 60);
        assert_eq!(mem.0[0].1, vec![0xab; 10]);
    }

    #[test]
    fn a_receive_too_small_for_grh_and_payload_is_a_length_error_and_the_qp_stays_ready() {
        let (mut qp, mut mem, mut out) =
            (UdQp::new(0x10, cap(), true, 1), Recorder::default(), vec![]);
        qp.post_recv(recv(1, 49), &mut out).unwrap();
        qp.on_datagram((0x30, 3), &datagram(10), None, &mut mem, &mut out)
            .unwrap();
        assert_eq!(recv_wcs(&out)[0].status, WcStatus::LOC_LEN_ERR);
        assert_eq!(qp.state(), QpState::Rts);
        assert!(mem.0.is_empty());
        assert_eq!(
            qp.on_datagram((0x30, 3), &datagram(1), None, &mut mem, &mut out),
            Err("no receive posted")
        );
    }

    #[test]
    fn on_rxe_6_1_a_receive_too_small_is_a_qp_operation_error_and_the_qp_enters_error() {
        let qp = UdQp::new(0x10, cap(), true, 1).on_rxe(crate::KernelProfile::Linux61);
        let (mut qp, mut mem, mut out) = (qp, Recorder::default(), vec![]);
        qp.post_recv(recv(1, 49), &mut out).unwrap();
        qp.post_recv(recv(2, 100), &mut out).unwrap();
        qp.on_datagram((0x30, 0), &datagram(10), None, &mut mem, &mut out)
            .unwrap();
        let wcs: Vec<_> = recv_wcs(&out).iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            wcs,
            [(1, WcStatus::LOC_QP_OP_ERR), (2, WcStatus::WR_FLUSH_ERR)]
        );
        assert_eq!(qp.state(), QpState::Error);
        assert!(mem.0.is_empty());
    }

    #[test]
    fn on_rxe_6_12_a_datagram_too_long_is_dropped_and_the_receive_kept() {
        let qp = UdQp::new(0x10, cap(), true, 1).on_rxe(crate::KernelProfile::Linux612);
        let (mut qp, mut mem, mut out) = (qp, Recorder::default(), vec![]);
        qp.post_recv(recv(1, 49), &mut out).unwrap();
        assert_eq!(
            qp.on_datagram((0x30, 0), &datagram(10), None, &mut mem, &mut out),
            Err("longer than the receive")
        );
        assert!(recv_wcs(&out).is_empty());
        qp.on_datagram((0x30, 0), &datagram(9), None, &mut mem, &mut out)
            .unwrap();
        let wcs = recv_wcs(&out);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::SUCCESS));
        assert_eq!(qp.state(), QpState::Rts);
    }

    #[test]
    fn on_rxe_6_12_a_datagram_too_long_for_a_receive_from_an_srq_is_an_invalid_request() {
        let qp = UdQp::new(0x10, cap(), true, 1).on_rxe(crate::KernelProfile::Linux612);
        let (mut qp, mut mem, mut out) = (qp, Recorder::default(), vec![]);
        qp.use_srq();
        qp.rq_mut().push_back(recv(1, 49));
        qp.on_datagram((0x30, 0), &datagram(10), None, &mut mem, &mut out)
            .unwrap();
        let wcs = recv_wcs(&out);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (1, WcStatus::REM_INV_REQ_ERR)
        );
        assert_eq!(qp.state(), QpState::Rts);
    }
}
