//! RDMA atomics over `ibv_post_send` (librdmacm has no helper for them), generic over
//! [`DataPath`] so that the simulator and a real bed run the same scenarios: compare and swap
//! and fetch and add with the value before placed in the requester's entry, librxe's
//! post-time refusals, a region without atomic access, and siw's refusal of any atomic. (A
//! QP without atomic rights is the RC machine's unit tests' to check: a connection whose
//! passive side accepts with no responder resources gives the active QP `max_rd_atomic` 0,
//! and rxe's requester then never sends the atomic, measured; see tests/BEDS.md.)
//!
//! Each scenario makes its own connection at `at` and asserts what any conforming bed shows
//! (values, statuses, opcodes, lengths, errnos); timings are the simulator's tests' to assert.

use std::net::SocketAddr;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpAttr, QpState, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use cmtwin::{Call, Errno, Wait};
use std::time::Duration;

use crate::datapath::{completion_through_channel, connect, post_recv_all, region, Conn, Side};
use crate::steps::{expect_errno, ok, WAIT};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// The access an atomic target region needs (rxe wants LOCAL_WRITE with REMOTE_ATOMIC).
pub fn atomic_target() -> AccessFlags {
    LW | AccessFlags::REMOTE_ATOMIC
}

/// A region of `pd` holding `words` as native-endian u64s, with `access`.
pub fn words_region<B: DataPath>(
    cm: &B,
    pd: cmtwin::PdHandle,
    words: &[u64],
    access: AccessFlags,
) -> MemoryRegion {
    let bytes = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    ok(cm.reg_mr(pd, bytes, access), "reg_mr")
}

/// The native-endian u64 at byte `offset` of `mr`.
pub fn word_at<B: DataPath>(cm: &B, mr: &MemoryRegion, offset: usize) -> u64 {
    let mut got = [0u8; 8];
    ok(cm.mr_read(mr.handle, offset, &mut got), "mr_read");
    u64::from_ne_bytes(got)
}

/// Posts `op` on the client's QP with `sge` as its local entries and waits for its
/// completion.
pub fn post_atomic<B: DataPath>(
    c: &B,
    conn: &Conn,
    wr_id: u64,
    op: SendOp,
    sge: Sge,
) -> WorkCompletion {
    let sges = [sge];
    ok(
        c.post_send(
            conn.client.qp,
            &SendWr::new(wr_id, op, Payload::Sges(&sges)),
        ),
        "post_send (atomic)",
    );
    completion_within(c, &conn.client, wr_id)
}

/// The next completion of `side`'s CQ, waiting through its channel at most
/// [`crate::steps::WAIT`] (a panic naming `wr_id` past that, not a hang).
pub fn completion_within<B: DataPath>(cm: &B, side: &Side, wr_id: u64) -> WorkCompletion {
    completion_through_channel(cm, side, Wait::Timeout(WAIT))
        .unwrap_or_else(|e| panic!("no completion for request {wr_id} within {WAIT:?}: {e}"))
}

/// A fetch and add of `add` at `remote_addr` under `rkey`.
pub fn fetch_add(remote_addr: u64, rkey: u32, add: u64) -> SendOp {
    SendOp::AtomicFetchAndAdd {
        remote_addr,
        rkey,
        compare_add: add,
    }
}

/// A compare and swap at `remote_addr` under `rkey`.
pub fn cmp_swap(remote_addr: u64, rkey: u32, compare: u64, swap: u64) -> SendOp {
    SendOp::AtomicCmpAndSwp {
        remote_addr,
        rkey,
        compare_add: compare,
        swap,
    }
}

/// Asserts a successful atomic completion: `opcode`, 8 bytes, for the client's QP.
fn assert_done(wc: WorkCompletion, conn: &Conn, wr_id: u64, opcode: WcOpcode) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (wr_id, WcStatus::SUCCESS, opcode, 8, conn.client.qpn),
        "completion {wc:?}"
    );
}

/// A fetch and add of 3 to 5 gives 5 and leaves 8; a compare and swap that matches (8 → 100)
/// gives 8 and swaps; one that does not match (7) gives 100 and leaves it; each value before
/// lands in the client's 8-byte entry. The word beside the target is untouched. Returns the
/// connection for the caller's further checks.
pub fn compare_swap_and_fetch_add_return_the_value_before<B: DataPath>(
    s: &B,
    c: &B,
    at: SocketAddr,
) -> Conn {
    let conn = connect(s, c, at);
    eprintln!("atomics: connected, compare and swap and fetch and add");
    let target = words_region(s, conn.server.pd, &[5, 0x1111], atomic_target());
    let sink = region(c, conn.client.pd, 8, b'.', LW);
    let (addr, rkey) = (target.addr, target.rkey);
    let wc = post_atomic(c, &conn, 1, fetch_add(addr, rkey, 3), sink.sge(0, 8));
    assert_done(wc, &conn, 1, WcOpcode::FetchAdd);
    assert_eq!((word_at(c, &sink, 0), word_at(s, &target, 0)), (5, 8));
    let wc = post_atomic(c, &conn, 2, cmp_swap(addr, rkey, 8, 100), sink.sge(0, 8));
    assert_done(wc, &conn, 2, WcOpcode::CompSwap);
    assert_eq!((word_at(c, &sink, 0), word_at(s, &target, 0)), (8, 100));
    let wc = post_atomic(c, &conn, 3, cmp_swap(addr, rkey, 7, 1), sink.sge(0, 8));
    assert_done(wc, &conn, 3, WcOpcode::CompSwap);
    assert_eq!((word_at(c, &sink, 0), word_at(s, &target, 0)), (100, 100));
    assert_eq!(word_at(s, &target, 8), 0x1111, "the next word is untouched");
    conn
}

/// librxe refuses at post time, with EINVAL, an atomic whose entries hold fewer than 8 bytes
/// or whose `remote_addr` is not 8-byte aligned; nothing is queued and the QP stays in RTS
/// (a good atomic after them succeeds).
pub fn short_or_misaligned_atomics_are_einval<B: DataPath>(s: &B, c: &B, at: SocketAddr) {
    let conn = connect(s, c, at);
    let target = words_region(s, conn.server.pd, &[40, 0], atomic_target());
    let sink = region(c, conn.client.pd, 8, 0, LW);
    let short = [sink.sge(0, 4)];
    let op = fetch_add(target.addr, target.rkey, 1);
    let wr = SendWr::new(1, op, Payload::Sges(&short));
    expect_errno(
        c.post_send(conn.client.qp, &wr),
        Call::PostSend,
        Errno::EINVAL,
    );
    let whole = [sink.sge(0, 8)];
    let op = fetch_add(target.addr + 4, target.rkey, 1);
    let wr = SendWr::new(2, op, Payload::Sges(&whole));
    expect_errno(
        c.post_send(conn.client.qp, &wr),
        Call::PostSend,
        Errno::EINVAL,
    );
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
    let op = fetch_add(target.addr + 8, target.rkey, 2);
    let wc = post_atomic(c, &conn, 3, op, sink.sge(0, 8));
    assert_done(wc, &conn, 3, WcOpcode::FetchAdd);
    assert_eq!((word_at(s, &target, 0), word_at(s, &target, 8)), (40, 2));
}

/// A region registered without REMOTE_ATOMIC (remote read and write only) refuses an atomic:
/// REM_ACCESS_ERR, both QPs in ERROR, the word untouched and the entry not written.
pub fn an_atomic_on_a_region_without_remote_atomic_is_a_remote_access_error<B: DataPath>(
    s: &B,
    c: &B,
    at: SocketAddr,
) {
    let conn = connect(s, c, at);
    let access = LW | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let target = words_region(s, conn.server.pd, &[9], access);
    let sink = region(c, conn.client.pd, 8, b'.', LW);
    let wc = post_atomic(
        c,
        &conn,
        1,
        fetch_add(target.addr, target.rkey, 1),
        sink.sge(0, 8),
    );
    assert_eq!(
        (wc.wr_id, wc.status),
        (1, WcStatus::REM_ACCESS_ERR),
        "{wc:?}"
    );
    assert_eq!(word_at(s, &target, 0), 9);
    assert_eq!(word_at(c, &sink, 0), u64::from_ne_bytes([b'.'; 8]));
    expect_both_in_error(s, c, &conn);
}

/// siw has no atomics: libsiw refuses either with EINVAL at post time, queuing nothing (the
/// word untouched, a send after them the first request the peer receives).
pub fn siw_refuses_atomics<B: DataPath>(s: &B, c: &B, at: SocketAddr) {
    let conn = connect(s, c, at);
    let target = words_region(s, conn.server.pd, &[9], atomic_target());
    let sink = region(c, conn.client.pd, 8, 0, LW);
    let sge = [sink.sge(0, 8)];
    for (wr_id, op) in [
        (1, fetch_add(target.addr, target.rkey, 1)),
        (2, cmp_swap(target.addr, target.rkey, 9, 10)),
    ] {
        let wr = SendWr::new(wr_id, op, Payload::Sges(&sge));
        expect_errno(
            c.post_send(conn.client.qp, &wr),
            Call::PostSend,
            Errno::EINVAL,
        );
    }
    assert_eq!(word_at(s, &target, 0), 9);
    // Nothing was queued: a send after them is the first request, taken and received (the
    // QP's state is not asked: siw on 6.1 reads RESET in every state).
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 7, &rx);
    let send = SendWr::new(3, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(conn.client.qp, &send), "post_send (send)");
    let wc = completion_within(c, &conn.client, 3);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (3, WcStatus::SUCCESS, WcOpcode::Send)
    );
    let wc = completion_within(s, &conn.server, 7);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::SUCCESS, 8)
    );
}

/// Both QPs of `conn` are in ERROR.
/// What [`an_atomic_resent_after_a_reset_finds_nothing_kept`] saw.
#[derive(Clone, Copy, Debug)]
pub struct ResentAfterReset {
    /// The completion of the atomic posted again after the resets.
    pub resent: WorkCompletion,
    /// How long after its post it completed (the backend's clock).
    pub resent_after: Duration,
    /// The requester's entry at the end: the value before of the first atomic (5), unless the
    /// second was answered.
    pub sink: u64,
    /// The word at the responder at the end: 8 if added once.
    pub target: u64,
}

/// A fetch and add of 3 to 5 (completing with 5, leaving 8); then both QPs moved to RESET and
/// back to RTS with the CM's attributes (`init_qp_attr`), the server's `rq_psn` one further
/// and the client's `retry_cnt` 1; then the same fetch and add again. It goes at the first
/// one's PSN, which the server has passed: a duplicate, answered only from what its responder
/// resources keep for that PSN. The caller asserts what it saw.
pub fn an_atomic_resent_after_a_reset_finds_nothing_kept<B: DataPath>(
    s: &B,
    c: &B,
    at: SocketAddr,
) -> ResentAfterReset {
    let conn = connect(s, c, at);
    let target = words_region(s, conn.server.pd, &[5], atomic_target());
    let sink = region(c, conn.client.pd, 8, 0, LW);
    let op = fetch_add(target.addr, target.rkey, 3);
    let wc = post_atomic(c, &conn, 1, op, sink.sge(0, 8));
    assert_eq!((wc.status, word_at(c, &sink, 0)), (WcStatus::SUCCESS, 5));
    reset_and_reconnect(s, &conn.server, 1, 7);
    reset_and_reconnect(c, &conn.client, 0, 1);
    let t0 = c.now();
    let resent = post_atomic(c, &conn, 2, op, sink.sge(0, 8));
    ResentAfterReset {
        resent,
        resent_after: c.now() - t0,
        sink: word_at(c, &sink, 0),
        target: word_at(s, &target, 0),
    }
}

/// Moves `side`'s QP to RESET and back to RTS with the CM's attributes (`init_qp_attr`),
/// `rq_psn` moved on by `skip` and `retry_cnt` set to `retries`.
fn reset_and_reconnect<B: DataPath>(cm: &B, side: &Side, skip: u32, retries: u8) {
    let reset = QpAttr {
        qp_state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    ok(cm.modify_qp(side.qp, &reset), "ibv_modify_qp RESET");
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let mut attr = ok(cm.init_qp_attr(side.id, state), "rdma_init_qp_attr");
        attr.rq_psn += skip;
        attr.retry_cnt = retries;
        ok(cm.modify_qp(side.qp, &attr), "ibv_modify_qp");
    }
}

fn expect_both_in_error<B: DataPath>(s: &B, c: &B, conn: &Conn) {
    let states = (
        ok(s.query_qp_state(conn.server.qp), "query"),
        ok(c.query_qp_state(conn.client.qp), "query"),
    );
    assert_eq!(states, (QpState::Error, QpState::Error));
}
