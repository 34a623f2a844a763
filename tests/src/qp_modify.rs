//! `modify_qp_with_mask` (`ibv_modify_qp` with an attribute mask), written once for every
//! backend: the outcome of each modification of a connected RC QP and of an RC QP made
//! apart, as a list that the simulator's tests and the real beds' compare with
//! [`expected_outcomes`]; and two modifications whose effect is timed (an RNR timer set on
//! RTS, a timeout and retry count set in SQD), which the simulator checks exactly and the
//! real beds within bounds.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, Payload, QpAttr, QpAttrMask as M, QpInitAttrEx, QpState, SendOp, SendWr,
    WcStatus, WorkCompletion,
};
use cmtwin::{AsyncEvent, ConnParam, Errno, QpHandle, Wait};

use crate::datapath::{connect, connect_with, Conn, Setup};
use crate::steps::ok;

/// Every QP state, in `enum ibv_qp_state` order.
pub const ALL_STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Error,
];

/// One modification and what it gave: `Ok`, or the errno.
pub type Outcome = (&'static str, Result<(), Errno>);

/// How long a real bed may take to raise SQ_DRAINED (the simulator: at once).
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for a second SQ_DRAINED after SQD → SQD, which rxe on 6.12 raises (its
/// `rxe_qp_sqd` drains again on every move to SQD) and rxe on 6.1 does not.
const REDRAIN_WAIT: Duration = Duration::from_millis(500);

fn attr(state: QpState) -> QpAttr {
    QpAttr {
        qp_state: Some(state),
        ah_attr: cmtwin::AhAttr {
            port_num: 1,
            ..cmtwin::AhAttr::default()
        },
        ..QpAttr::default()
    }
}

/// Runs `modify_qp_with_mask` and records its outcome under `name`.
fn step<B: DataPath>(
    cm: &B,
    qp: QpHandle,
    out: &mut Vec<Outcome>,
    name: &'static str,
    a: QpAttr,
    mask: M,
) {
    let r = cm.modify_qp_with_mask(qp, &a, mask).map_err(|e| e.errno);
    out.push((name, r));
}

/// Records the QP's state under `name`: `Ok` when it is `want`, else EIO (no call failed;
/// the list marks the wrong state so).
fn state_is<B: DataPath>(
    cm: &B,
    qp: QpHandle,
    out: &mut Vec<Outcome>,
    name: &'static str,
    want: QpState,
) {
    let got = ok(cm.query_qp_state(qp), "query_qp_state");
    out.push((name, if got == want { Ok(()) } else { Err(Errno::EIO) }));
}

/// Waits up to `within` for QP `qpn`'s SQ_DRAINED and records it under `name` (ETIMEDOUT
/// when none came).
fn drained<B: DataPath>(
    cm: &B,
    qpn: u32,
    within: Duration,
    out: &mut Vec<Outcome>,
    name: &'static str,
) {
    let r = loop {
        match cm.get_async_event(Wait::Timeout(within)) {
            Ok(e) if e.kind == AsyncEvent::SQ_DRAINED && e.qp_num == Some(qpn) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e.errno),
        }
    };
    out.push((name, r));
}

/// The outcomes of modifications of the client's RC QP of a fresh connection (in RTS), then
/// of an RC QP made apart (from RESET to RTS towards the server's QP, nothing sent).
pub fn masks_of_rc_qps<B: DataPath>(server: &B, client: &B, addr: SocketAddr) -> Vec<Outcome> {
    let conn = connect(server, client, addr);
    let (c, qp) = (client, conn.client.qp);
    let mut out = Vec::new();
    let rts = attr(QpState::Rts);
    let st = M::STATE;
    let rnr = QpAttr {
        min_rnr_timer: 1,
        ..rts
    };
    step(
        c,
        qp,
        &mut out,
        "RTS -> RTS, MIN_RNR_TIMER",
        rnr,
        st | M::MIN_RNR_TIMER,
    );
    step(
        c,
        qp,
        &mut out,
        "no STATE, MIN_RNR_TIMER",
        rnr,
        M::MIN_RNR_TIMER,
    );
    step(c, qp, &mut out, "empty mask", rts, M::EMPTY);
    step(c, qp, &mut out, "RTS -> RTS, TIMEOUT", rts, st | M::TIMEOUT);
    step(
        c,
        qp,
        &mut out,
        "RTS -> RTS, DEST_QPN",
        rts,
        st | M::DEST_QPN,
    );
    step(c, qp, &mut out, "no STATE, RETRY_CNT", rts, M::RETRY_CNT);
    step(c, qp, &mut out, "RTS -> RTS, QKEY", rts, st | M::QKEY);
    step(
        c,
        qp,
        &mut out,
        "RTS -> RTS, ALT_PATH",
        rts,
        st | M::ALT_PATH,
    );
    step(
        c,
        qp,
        &mut out,
        "RTS -> RTS, RATE_LIMIT",
        rts,
        st | M::RATE_LIMIT,
    );
    let access = QpAttr {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        ..rts
    };
    step(
        c,
        qp,
        &mut out,
        "RTS -> RTS, ACCESS_FLAGS",
        access,
        st | M::ACCESS_FLAGS,
    );
    let cur = |s| QpAttr {
        cur_qp_state: Some(s),
        ..rts
    };
    let cs = st | M::CUR_STATE;
    step(
        c,
        qp,
        &mut out,
        "CUR_STATE RTS, RTS -> RTS",
        cur(QpState::Rts),
        cs,
    );
    step(
        c,
        qp,
        &mut out,
        "CUR_STATE INIT, -> RTS",
        cur(QpState::Init),
        cs,
    );
    step(
        c,
        qp,
        &mut out,
        "CUR_STATE SQD (QP in RTS), -> RTS",
        cur(QpState::Sqd),
        cs,
    );
    step(c, qp, &mut out, "RTS -> RTR", attr(QpState::Rtr), st);
    step(c, qp, &mut out, "RTS -> INIT", attr(QpState::Init), st);
    state_is(c, qp, &mut out, "still RTS", QpState::Rts);
    sqd_steps(c, &conn, &mut out);
    external_steps(c, &conn, &mut out);
    let _ = client.disconnect(conn.client.id);
    let _ = server.disconnect(conn.server.id);
    out
}

/// RTS → SQD, SQD → SQD with values refused and taken, SQD → RTS.
fn sqd_steps<B: DataPath>(c: &B, conn: &Conn, out: &mut Vec<Outcome>) {
    let qp = conn.client.qp;
    let sqd = QpAttr {
        en_sqd_async_notify: true,
        ..attr(QpState::Sqd)
    };
    let st = M::STATE;
    step(c, qp, out, "RTS -> SQD", sqd, st | M::EN_SQD_ASYNC_NOTIFY);
    let drain_name = "SQ_DRAINED after RTS -> SQD";
    drained(c, conn.client.qpn, DRAIN_WAIT, out, drain_name);
    step(
        c,
        qp,
        out,
        "SQD -> SQD, TIMEOUT 32",
        QpAttr { timeout: 32, ..sqd },
        st | M::TIMEOUT,
    );
    let deep = QpAttr {
        max_rd_atomic: 129,
        ..sqd
    };
    step(
        c,
        qp,
        out,
        "SQD -> SQD, MAX_QP_RD_ATOMIC 129",
        deep,
        st | M::MAX_QP_RD_ATOMIC,
    );
    let mut port2 = sqd;
    port2.ah_attr.port_num = 2;
    step(c, qp, out, "SQD -> SQD, PORT 2", port2, st | M::PORT);
    step(
        c,
        qp,
        out,
        "SQD -> SQD, PKEY_INDEX 1",
        QpAttr {
            pkey_index: 1,
            ..sqd
        },
        st | M::PKEY_INDEX,
    );
    // That SQD -> SQD succeeds: rxe on 6.12 drains again, and refuses the next move until
    // it is done (measured: a race the next modification lost once).
    let pkey = "SQ_DRAINED after SQD -> SQD, PKEY_INDEX 1";
    drained(c, conn.client.qpn, REDRAIN_WAIT, out, pkey);
    let retry = QpAttr {
        timeout: 14,
        retry_cnt: 2,
        rnr_retry: 1,
        ..sqd
    };
    let counts = M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY;
    step(
        c,
        qp,
        out,
        "SQD -> SQD, TIMEOUT RETRY_CNT RNR_RETRY",
        retry,
        st | counts,
    );
    let again = "SQ_DRAINED after SQD -> SQD";
    drained(c, conn.client.qpn, REDRAIN_WAIT, out, again);
    step(c, qp, out, "SQD -> RTS", attr(QpState::Rts), st);
    state_is(c, qp, out, "RTS again", QpState::Rts);
}

/// An RC QP made apart, from RESET to RTS towards the server's QP.
fn external_steps<B: DataPath>(c: &B, conn: &Conn, out: &mut Vec<Outcome>) {
    let side = &conn.client;
    let qp = ok(
        c.create_external_qp(&QpInitAttrEx::rc(side.pd, side.cq, side.cq)),
        "create_external_qp",
    );
    let st = M::STATE;
    step(c, qp, out, "RESET -> ERROR", attr(QpState::Error), st);
    // Whatever that did, start from RESET.
    step(c, qp, out, "-> RESET", attr(QpState::Reset), st);
    step(c, qp, out, "RESET -> RTR", attr(QpState::Rtr), st);
    let init = QpAttr {
        access: AccessFlags::LOCAL_WRITE,
        ..attr(QpState::Init)
    };
    let keys = M::PKEY_INDEX | M::PORT;
    step(
        c,
        qp,
        out,
        "RESET -> INIT without ACCESS_FLAGS",
        init,
        st | keys,
    );
    let pkey1 = QpAttr {
        pkey_index: 1,
        ..init
    };
    let init_mask = st | keys | M::ACCESS_FLAGS;
    step(c, qp, out, "RESET -> INIT, PKEY_INDEX 1", pkey1, init_mask);
    step(
        c,
        qp,
        out,
        "INIT -> INIT, ACCESS_FLAGS PKEY_INDEX PORT",
        init,
        init_mask,
    );
    step(
        c,
        qp,
        out,
        "no STATE, ACCESS_FLAGS (INIT)",
        init,
        M::ACCESS_FLAGS,
    );
    step(c, qp, out, "INIT -> INIT, PORT", init, st | M::PORT);
    let path = ok(c.init_qp_attr(side.id, QpState::Rtr), "init_qp_attr RTR");
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        dest_qp_num: conn.server.qpn,
        ah_attr: path.ah_attr,
        min_rnr_timer: 12,
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    };
    let rtr_mask = st
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    step(
        c,
        qp,
        out,
        "INIT -> RTR without DEST_QPN",
        rtr,
        rtr_mask.without(M::DEST_QPN),
    );
    step(
        c,
        qp,
        out,
        "INIT -> RTR without AV",
        rtr,
        rtr_mask.without(M::AV),
    );
    step(
        c,
        qp,
        out,
        "INIT -> RTR, PATH_MTU 6",
        QpAttr { path_mtu: 6, ..rtr },
        rtr_mask,
    );
    step(c, qp, out, "INIT -> RTR, QKEY", rtr, rtr_mask | M::QKEY);
    step(c, qp, out, "INIT -> RTR", rtr, rtr_mask);
    let rts = QpAttr {
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        cur_qp_state: Some(QpState::Rtr),
        ..attr(QpState::Rts)
    };
    let rts_mask = st | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    step(
        c,
        qp,
        out,
        "RTR -> RTS without SQ_PSN",
        rts,
        rts_mask.without(M::SQ_PSN),
    );
    step(
        c,
        qp,
        out,
        "RTR -> RTS, CUR_STATE RTR",
        rts,
        rts_mask | M::CUR_STATE,
    );
    let cur_rts = QpAttr {
        cur_qp_state: Some(QpState::Rts),
        min_rnr_timer: 3,
        ..rts
    };
    step(
        c,
        qp,
        out,
        "no STATE, CUR_STATE RTS, MIN_RNR_TIMER",
        cur_rts,
        M::CUR_STATE | M::MIN_RNR_TIMER,
    );
    state_is(c, qp, out, "external in RTS", QpState::Rts);
    ok(c.destroy_external_qp(qp), "destroy_external_qp");
}

/// What [`masks_of_rc_qps`] gives on the kernel's table and rxe's checks (and the
/// simulator's RoCE devices), step by step.
/// `linux_6_12`: rxe on 6.12 (and the simulator's Linux 6.12 profile), which takes any
/// attribute without IBV_QP_STATE (the table is consulted only with it) and raises a second
/// SQ_DRAINED on SQD → SQD; 6.1 refuses the first and does not raise the second. Both take
/// a pkey index of 1 (measured on rxe-6.1 and rxe-6.12).
pub fn expected_outcomes(linux_6_12: bool) -> Vec<Outcome> {
    let e = Err(Errno::EINVAL);
    let (again, no_state_retry) = match linux_6_12 {
        true => (Ok(()), Ok(())),
        false => (Err(Errno::ETIMEDOUT), e),
    };
    vec![
        ("RTS -> RTS, MIN_RNR_TIMER", Ok(())),
        ("no STATE, MIN_RNR_TIMER", Ok(())),
        ("empty mask", Ok(())),
        ("RTS -> RTS, TIMEOUT", e),
        ("RTS -> RTS, DEST_QPN", e),
        ("no STATE, RETRY_CNT", no_state_retry),
        ("RTS -> RTS, QKEY", e),
        ("RTS -> RTS, ALT_PATH", e),
        ("RTS -> RTS, RATE_LIMIT", Err(Errno::EOPNOTSUPP)),
        ("RTS -> RTS, ACCESS_FLAGS", Ok(())),
        ("CUR_STATE RTS, RTS -> RTS", Ok(())),
        ("CUR_STATE INIT, -> RTS", e),
        ("CUR_STATE SQD (QP in RTS), -> RTS", Ok(())),
        ("RTS -> RTR", e),
        ("RTS -> INIT", e),
        ("still RTS", Ok(())),
        ("RTS -> SQD", Ok(())),
        ("SQ_DRAINED after RTS -> SQD", Ok(())),
        ("SQD -> SQD, TIMEOUT 32", e),
        ("SQD -> SQD, MAX_QP_RD_ATOMIC 129", e),
        ("SQD -> SQD, PORT 2", e),
        ("SQD -> SQD, PKEY_INDEX 1", Ok(())),
        ("SQ_DRAINED after SQD -> SQD, PKEY_INDEX 1", again),
        ("SQD -> SQD, TIMEOUT RETRY_CNT RNR_RETRY", Ok(())),
        ("SQ_DRAINED after SQD -> SQD", again),
        ("SQD -> RTS", Ok(())),
        ("RTS again", Ok(())),
        ("RESET -> ERROR", e),
        ("-> RESET", Ok(())),
        ("RESET -> RTR", e),
        ("RESET -> INIT without ACCESS_FLAGS", e),
        ("RESET -> INIT, PKEY_INDEX 1", Ok(())),
        ("INIT -> INIT, ACCESS_FLAGS PKEY_INDEX PORT", Ok(())),
        ("no STATE, ACCESS_FLAGS (INIT)", Ok(())),
        ("INIT -> INIT, PORT", Ok(())),
        ("INIT -> RTR without DEST_QPN", e),
        ("INIT -> RTR without AV", e),
        ("INIT -> RTR, PATH_MTU 6", e),
        ("INIT -> RTR, QKEY", e),
        ("INIT -> RTR", Ok(())),
        ("RTR -> RTS without SQ_PSN", e),
        ("RTR -> RTS, CUR_STATE RTR", Ok(())),
        ("no STATE, CUR_STATE RTS, MIN_RNR_TIMER", Ok(())),
        ("external in RTS", Ok(())),
    ]
}

/// Prints `got` and compares it with `want` step by step, naming every difference.
#[track_caller]
pub fn assert_outcomes(got: &[Outcome], want: &[Outcome]) {
    for (name, r) in got {
        eprintln!("{name}: {r:?}");
    }
    let differ: Vec<String> = got
        .iter()
        .zip(want)
        .filter(|(g, w)| g != w)
        .map(|(g, w)| format!("{}: got {:?}, want {:?} ({})", g.0, g.1, w.1, w.0))
        .collect();
    assert!(differ.is_empty() && got.len() == want.len(), "{differ:#?}");
}

/// A send from the client to a server QP with no receive posted, whose RNR NAKs the server
/// times with `min_rnr_timer` set on its RTS QP (RTS → RTS, `IBV_QP_MIN_RNR_TIMER`, as
/// perftest does after `accept`); the client retries once (its accept-given RNR retry count
/// 1). Returns the client's completion and the time from the post to it.
pub fn rnr_timer_set_on_rts<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    min_rnr_timer: u8,
) -> (WorkCompletion, Duration) {
    let setup = Setup {
        accept: ConnParam {
            rnr_retry_count: 1,
            ..ConnParam::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(server, client, addr, &setup);
    let a = QpAttr {
        min_rnr_timer,
        ..attr(QpState::Rts)
    };
    ok(
        server.modify_qp_with_mask(conn.server.qp, &a, M::STATE | M::MIN_RNR_TIMER),
        "RTS -> RTS with MIN_RNR_TIMER",
    );
    let r = send_and_wait(client, &conn);
    let _ = client.disconnect(conn.client.id);
    let _ = server.disconnect(conn.server.id);
    r
}

/// A send from the client to a server whose QP is gone, after the client went RTS → SQD →
/// SQD (`IBV_QP_TIMEOUT`, `IBV_QP_RETRY_CNT`) → RTS: RETRY_EXC_ERR after `retry_cnt` + 1
/// timeouts of 4.096 µs × 2^`timeout`. Returns the completion and the time from the post.
pub fn timeout_set_in_sqd<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    timeout: u8,
    retry_cnt: u8,
) -> (WorkCompletion, Duration) {
    let conn = silent_peer_retrying(server, client, addr, timeout, retry_cnt);
    let r = send_and_wait(client, &conn);
    let _ = client.disconnect(conn.client.id);
    let _ = server.disconnect(conn.server.id);
    r
}

/// As [`timeout_set_in_sqd`] with a retry count of 7, librdmacm's default: rxe retries
/// without end (its completer, rxe_comp.c, counts down only below 7), so `window` after the
/// post the send has no completion and the QP is still in RTS. Returns the completions polled
/// then (none expected) and the QP's state.
pub fn retry_count_7_on_a_silent_peer<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    timeout: u8,
    window: Duration,
) -> (usize, QpState) {
    let conn = silent_peer_retrying(server, client, addr, timeout, 7);
    let side = &conn.client;
    post_probe(client, side);
    ok(client.sleep(window), "sleep through the retries");
    let mut wc = [WorkCompletion::default(); 1];
    let polled = ok(client.poll_cq(side.cq, &mut wc), "poll_cq");
    let state = ok(client.query_qp_state(side.qp), "ibv_query_qp");
    let _ = client.disconnect(conn.client.id);
    let _ = server.disconnect(conn.server.id);
    let _ = crate::datapath::next_completion(client, side);
    (polled, state)
}

/// A connection whose server QP is destroyed (the peer goes silent) and whose client QP went
/// RTS → SQD → SQD (`IBV_QP_TIMEOUT` `timeout`, `IBV_QP_RETRY_CNT` `retry_cnt`) → RTS.
fn silent_peer_retrying<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    timeout: u8,
    retry_cnt: u8,
) -> Conn {
    let conn = connect(server, client, addr);
    ok(
        server.destroy_qp(conn.server.id),
        "destroy_qp (the peer goes silent)",
    );
    let qp = conn.client.qp;
    ok(
        client.modify_qp_with_mask(qp, &attr(QpState::Sqd), M::STATE),
        "RTS -> SQD",
    );
    let mut seen = Vec::new();
    drained(client, conn.client.qpn, DRAIN_WAIT, &mut seen, "SQ_DRAINED");
    assert_eq!(seen[0].1, Ok(()), "SQ_DRAINED");
    let a = QpAttr {
        timeout,
        retry_cnt,
        ..attr(QpState::Sqd)
    };
    ok(
        client.modify_qp_with_mask(qp, &a, M::STATE | M::TIMEOUT | M::RETRY_CNT),
        "SQD -> SQD with TIMEOUT and RETRY_CNT",
    );
    // Where SQD -> SQD drains again (rxe on 6.12), SQD -> RTS waits for it.
    drained(client, conn.client.qpn, REDRAIN_WAIT, &mut seen, "again");
    eprintln!("SQ_DRAINED: {seen:?}");
    ok(
        client.modify_qp_with_mask(qp, &attr(QpState::Rts), M::STATE),
        "SQD -> RTS",
    );
    conn
}

/// Sends 8 bytes from the client and waits for the completion, timing it on the backend's
/// clock.
fn send_and_wait<B: DataPath>(client: &B, conn: &Conn) -> (WorkCompletion, Duration) {
    let side = &conn.client;
    let t0 = post_probe(client, side);
    let wc = crate::datapath::next_completion(client, side);
    let took = client.now().saturating_sub(t0);
    assert_ne!(wc.status, WcStatus::SUCCESS, "nobody could take the send");
    (wc, took)
}

/// Posts a send of 8 bytes on `side`'s QP (wr_id 1); when it was posted, on the backend's
/// clock.
fn post_probe<B: DataPath>(client: &B, side: &crate::datapath::Side) -> Duration {
    let mr = ok(
        client.reg_mr(side.pd, b"anyone?!".to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, 8)];
    let t0 = client.now();
    let wr = SendWr::new(1, SendOp::Send, Payload::Sges(&sge));
    ok(client.post_send(side.qp, &wr), "post_send");
    t0
}
