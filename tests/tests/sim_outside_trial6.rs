//! An outside user's sixth trial: a C program's completion-channel loop ported as it stands,
//! each CQ armed for solicited completions only (`ibv_req_notify_cq(cq, 1)`), as a server
//! that wakes only for its peer's solicited messages writes it. Which completions wake such
//! a CQ is the driver's choice: rxe (Linux 6.1 `rxe_cq_post`) wakes it only for a receive
//! whose packet carried the solicited-event bit, or one flushed without a packet; never for
//! a send-queue completion, failed or not, and not for a receive failed by an unsolicited
//! packet. siw (`siw_cq_notify_now`, with libsiw arming the CQ in the process's memory) wakes
//! it for the completion of a send posted solicited, on the sender's side, and never for a
//! receive. Then a server that rejects right after accepting (before the RTU). Each test pins
//! the exact outcome on a simulated bed without jitter.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, Payload, QpAttr, QpState, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};
use cmtwin::{Call, CmBackend, Errno, EventKind, PortSpace, QpType, Transport, Wait};
use cmtwin_sim::SimConfig;
use cmtwin_tests::datapath::{connect, drain, post_recv_all, region, Conn, Side};
use cmtwin_tests::steps::{
    add_qp, expect_errno, expect_quiet, expect_request, listen_on, next_event, ok, resolved_client,
};
use cmtwin_tests::{SimBed, TestBed};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;
const MS: Duration = Duration::from_millis(1);

/// A RoCE bed of `config`'s kernel profile without wire jitter.
fn bed(seed: u64, config: SimConfig) -> SimBed {
    bed_of(seed, Transport::Roce, config)
}

/// A bed of `transport` devices and `config`'s kernel profile without wire jitter.
fn bed_of(seed: u64, transport: Transport, config: SimConfig) -> SimBed {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..config
    };
    SimBed::with_config(seed, transport, config)
}

/// A connected RC pair on `bed`.
fn connected(bed: &SimBed) -> Conn {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7471);
    connect(bed.server(), bed.client(), addr)
}

/// Posts a SEND of `sge` with `wr_id` on `side`'s QP, with the solicited-event bit as asked.
fn send<B: DataPath>(cm: &B, side: &Side, wr_id: u64, sge: &[Sge], solicited: bool) {
    let mut wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(sge));
    wr.solicited = solicited;
    ok(cm.post_send(side.qp, &wr), "post_send");
}

/// Waits up to 1 ms for a CQ event of `side`'s channel: the CQ it names (acknowledged), or
/// the wait's errno with the time it took.
fn wake<B: DataPath + CmBackend>(cm: &B, side: &Side) -> Result<Duration, (Errno, Duration)> {
    let t0 = cm.now();
    match cm.get_cq_event(side.comp, Wait::Timeout(MS)) {
        Ok(cq) => {
            assert_eq!(cq, side.cq);
            ok(cm.ack_cq_events(cq, 1), "ack_cq_events");
            Ok(cm.now() - t0)
        }
        Err(e) => Err((e.errno, cm.now() - t0)),
    }
}

/// A completion's request id, status and opcode.
type Wc = (u64, WcStatus, WcOpcode);

fn summary(wcs: &[WorkCompletion]) -> Vec<Wc> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

#[test]
fn a_failed_write_does_not_wake_a_cq_armed_for_solicited_completions_on_rxe() {
    let bed = bed(1, SimConfig::default());
    let c = bed.client();
    let conn = connected(&bed);
    let mr = region(c, conn.client.pd, 8, 1, LW);
    ok(c.req_notify_cq(conn.client.cq, true), "arm solicited only");
    // A write under a key the server never gave: REM_ACCESS_ERR, the QP in ERROR. rxe's
    // completer posts it with the solicited flag clear: the CQ stays armed and asleep.
    let sge = [mr.sge(0, 8)];
    let write = SendOp::RdmaWrite {
        remote_addr: 0x1000,
        rkey: 0xdead,
    };
    ok(
        c.post_send(conn.client.qp, &SendWr::new(7, write, Payload::Sges(&sge))),
        "post_send",
    );
    assert_eq!(wake(c, &conn.client), Err((Errno::ETIMEDOUT, MS)));
    assert_eq!(
        summary(&drain(c, &conn.client)),
        [(7, WcStatus::REM_ACCESS_ERR, WcOpcode::RdmaWrite)]
    );
    // Still armed: a send posted to the QP in ERROR is flushed, silently too.
    send(c, &conn.client, 8, &sge, false);
    assert_eq!(wake(c, &conn.client), Err((Errno::ETIMEDOUT, MS)));
    assert_eq!(
        summary(&drain(c, &conn.client)),
        [(8, WcStatus::WR_FLUSH_ERR, WcOpcode::Send)]
    );
    // Armed for every completion, the next flush wakes it at once.
    ok(c.req_notify_cq(conn.client.cq, false), "arm");
    send(c, &conn.client, 9, &sge, false);
    assert_eq!(wake(c, &conn.client), Ok(Duration::ZERO));
}

/// An 8-byte SEND (`solicited` or not) into a 1-byte receive of a server whose CQ is armed
/// for solicited completions only: what waking the server's CQ gives, then both sides'
/// completions. rxe's LOC_QP_OP_ERR (a malformed receive) is completed from the packet, so
/// its solicited-event bit decides; the sender's REM_OP_ERR follows with the NAK.
fn short_receive_wakes(
    seed: u64,
    solicited: bool,
) -> (Result<Duration, (Errno, Duration)>, Vec<Wc>) {
    let bed = bed(seed, SimConfig::default());
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let small = region(s, conn.server.pd, 1, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &small);
    ok(s.req_notify_cq(conn.server.cq, true), "arm solicited only");
    let mr = region(c, conn.client.pd, 8, 1, LW);
    let sge = [mr.sge(0, 8)];
    send(c, &conn.client, 2, &sge, solicited);
    let woke = wake(s, &conn.server);
    let mut wcs = summary(&drain(s, &conn.server));
    ok(c.sleep(MS), "sleep while the NAK comes back");
    wcs.extend(summary(&drain(c, &conn.client)));
    (woke, wcs)
}

#[test]
fn a_receive_failed_by_an_unsolicited_send_does_not_wake_a_solicited_only_cq_on_rxe() {
    let (woke, wcs) = short_receive_wakes(2, false);
    assert_eq!(woke, Err((Errno::ETIMEDOUT, MS)));
    assert_eq!(
        wcs,
        [
            (1, WcStatus::LOC_QP_OP_ERR, WcOpcode::Recv),
            (2, WcStatus::REM_OP_ERR, WcOpcode::Send)
        ]
    );
}

#[test]
fn a_solicited_send_into_a_short_receive_wakes_the_cq() {
    let (woke, wcs) = short_receive_wakes(3, true);
    assert_eq!(woke, Ok(Duration::from_micros(5)));
    assert_eq!(
        wcs,
        [
            (1, WcStatus::LOC_QP_OP_ERR, WcOpcode::Recv),
            (2, WcStatus::REM_OP_ERR, WcOpcode::Send)
        ]
    );
}

/// The server's receive flushed by its own move to ERROR, its CQ armed for solicited
/// completions only: whether the flush wakes it.
fn flush_wakes(config: SimConfig) -> Result<Duration, (Errno, Duration)> {
    let bed = bed(4, config);
    let s = bed.server();
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    ok(s.req_notify_cq(conn.server.cq, true), "arm solicited only");
    let error = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    ok(s.modify_qp(conn.server.qp, &error), "modify_qp to ERROR");
    let woke = wake(s, &conn.server);
    assert_eq!(
        summary(&drain(s, &conn.server)),
        [(1, WcStatus::WR_FLUSH_ERR, WcOpcode::Recv)]
    );
    woke
}

#[test]
fn a_flushed_receive_wakes_a_solicited_only_cq_on_linux_6_1_and_not_on_6_12() {
    // 6.1's responder completes the flush without a packet, taken as solicited; 6.12's
    // flush_recv_wqe posts it unsolicited.
    assert_eq!(flush_wakes(SimConfig::default()), Ok(Duration::ZERO));
    assert_eq!(
        flush_wakes(SimConfig::linux612()),
        Err((Errno::ETIMEDOUT, MS))
    );
}

/// On `transport`, a receive posted on the server, the server's CQ armed for every
/// completion and then for solicited completions only, and an unsolicited send from the
/// client: whether it wakes the server.
fn rearmed_solicited_wakes(transport: Transport) -> Result<Duration, (Errno, Duration)> {
    let bed = bed_of(5, transport, SimConfig::default());
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    ok(s.req_notify_cq(conn.server.cq, false), "arm");
    ok(s.req_notify_cq(conn.server.cq, true), "arm solicited only");
    let mr = region(c, conn.client.pd, 8, 1, LW);
    let sge = [mr.sge(0, 8)];
    send(c, &conn.client, 2, &sge, false);
    let woke = wake(s, &conn.server);
    assert_eq!(
        summary(&drain(s, &conn.server)),
        [(1, WcStatus::SUCCESS, WcOpcode::Recv)]
    );
    woke
}

#[test]
fn arming_for_every_completion_outlasts_a_later_solicited_arming_on_rxe_but_not_on_siw() {
    // rxe keeps IB_CQ_NEXT_COMP until it fires; libsiw overwrites the CQ's flags.
    assert_eq!(
        rearmed_solicited_wakes(Transport::Roce),
        Ok(Duration::from_micros(5))
    );
    assert_eq!(
        rearmed_solicited_wakes(Transport::Iwarp),
        Err((Errno::ETIMEDOUT, MS))
    );
}

#[test]
fn on_siw_a_solicited_send_wakes_the_senders_cq_and_never_the_receivers() {
    let bed = bed_of(6, Transport::Iwarp, SimConfig::default());
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    post_recv_all(s, conn.server.qp, 2, &rx);
    ok(
        s.req_notify_cq(conn.server.cq, true),
        "server: arm solicited only",
    );
    ok(
        c.req_notify_cq(conn.client.cq, true),
        "client: arm solicited only",
    );
    let mr = region(c, conn.client.pd, 8, 1, LW);
    let sge = [mr.sge(0, 8)];
    // Unsolicited: neither side wakes.
    send(c, &conn.client, 3, &sge, false);
    assert_eq!(wake(c, &conn.client), Err((Errno::ETIMEDOUT, MS)));
    assert_eq!(wake(s, &conn.server), Err((Errno::ETIMEDOUT, MS)));
    // Solicited: the sender's completion wakes its CQ, the receive still does not.
    send(c, &conn.client, 4, &sge, true);
    assert_eq!(wake(c, &conn.client), Ok(Duration::ZERO));
    assert_eq!(wake(s, &conn.server), Err((Errno::ETIMEDOUT, MS)));
    assert_eq!(
        summary(&drain(c, &conn.client)),
        [
            (3, WcStatus::SUCCESS, WcOpcode::Send),
            (4, WcStatus::SUCCESS, WcOpcode::Send)
        ]
    );
    assert_eq!(
        summary(&drain(s, &conn.server)),
        [
            (1, WcStatus::SUCCESS, WcOpcode::Recv),
            (2, WcStatus::SUCCESS, WcOpcode::Recv)
        ]
    );
}

#[test]
fn a_reject_right_after_the_accept_makes_the_clients_connect_response_a_connect_error() {
    // The server accepts, then rejects before the RTU: the IB CM still allows a REJ from
    // REP_SENT (the server's CM id enters timewait). The client's CM, in REP_RCVD, takes it
    // and enters timewait too, so when librdmacm processes the CONNECT_RESPONSE it queued
    // first, rdma_init_qp_attr for RTR fails: CONNECT_ERROR status -1, the REJECTED behind
    // it swallowed (cma.c `connect_error`), the QP in ERROR. The server hears nothing more.
    let bed = bed(7, SimConfig::default());
    let (s, c) = (bed.server(), bed.client());
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let client = resolved_client(&bed, PortSpace::TCP, listener.addr);
    add_qp(c, client.id, QpType::Rc);
    ok(c.connect(client.id, None), "connect");
    let req = expect_request(s, &listener);
    add_qp(s, req.id, QpType::Rc);
    ok(s.accept(req.id, None), "accept");
    ok(s.reject(req.id, b"changed my mind"), "reject after accept");
    // A second reject finds the CM id in timewait.
    expect_errno(s.reject(req.id, b""), Call::Reject, Errno::EINVAL);
    ok(c.sleep(MS), "let the REP and the REJ arrive");
    let t = c.now();
    let e = next_event(c, client.channel);
    assert_eq!(
        (e.kind, e.status, e.id, c.now() - t),
        (EventKind::ConnectError, -1, client.id, Duration::ZERO)
    );
    let qp = ok(c.qp(client.id), "qp").expect("the client's QP");
    assert_eq!(ok(c.query_qp_state(qp), "query_qp_state"), QpState::Error);
    // Not even the end of either side's timewait: the ids are still in the CM's CONNECT
    // state, where cma.c reports no TIMEWAIT_EXIT.
    expect_quiet(c, client.channel, Duration::from_secs(30));
    expect_quiet(s, listener.channel, Duration::from_secs(30));
}
