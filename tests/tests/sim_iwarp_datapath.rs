//! The RC data path on iWARP as siw runs it (tests/src/iwarp_datapath.rs), on the simulator
//! with exact virtual times: the same transcripts real siw gave on the siw beds
//! (backend-verbs/tests/iwarp_datapath.rs compares with the same constants).
//!
//! Times: the wire's latency is 5 µs without jitter; a TERMINATE's close reaches the side that
//! refused at once and its peer one latency later (the FIN).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::Transport;
use cmtwin_sim::{KernelProfile, SimConfig};
use cmtwin_tests::iwarp_datapath::*;
use cmtwin_tests::iwarp_external_qp::on_siw_6_1;
use cmtwin_tests::{SimBed, TestBed};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), port)
}

type Scenario = fn(&cmtwin_sim::SimBackend, &cmtwin_sim::SimBackend, SocketAddr) -> Observed;

/// Runs `scenario` on an iWARP bed of each kernel profile and checks its transcript.
fn on_both_kernels(scenario: Scenario, lines_6_12: &[&str]) -> Vec<Observed> {
    let mut all = Vec::new();
    for kernel in [KernelProfile::Linux61, KernelProfile::Linux612] {
        let mut config = SimConfig::for_kernel(kernel);
        config.wire_jitter = Duration::ZERO;
        let bed = SimBed::with_config(41, Transport::Iwarp, config);
        let o = scenario(bed.server(), bed.client(), addr(7701));
        for (line, at) in &o.times {
            eprintln!("{at:>12?}  {line}");
        }
        let expected = match kernel {
            KernelProfile::Linux61 => on_siw_6_1(lines_6_12),
            _ => lines_6_12.iter().map(|l| l.to_string()).collect(),
        };
        assert_eq!(o.transcript.0, expected, "{kernel:?}");
        all.push(o);
    }
    all
}

const US: Duration = Duration::from_micros(1);

/// Checks, in each kernel's run, when each of `lines` was first seen.
fn expect_times(runs: &[Observed], lines: &[(&str, Duration)]) {
    for o in runs {
        for (line, at) in lines {
            assert_eq!(o.time_of(line), Some(*at), "{line}");
        }
    }
}

#[test]
fn send_and_write_complete_when_handed_to_tcp() {
    on_both_kernels(
        send_and_write_complete_when_sent,
        SEND_AND_WRITE_ON_SIW_6_12,
    );
}

#[test]
fn send_without_a_receive_terminates_the_connection() {
    let runs = on_both_kernels(send_without_a_receive, NO_RECEIVE_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server event: RDMA_CM_EVENT_DISCONNECTED 0", 5 * US),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 10 * US),
        ],
    );
}

#[test]
fn destroying_the_peer_qp_closes_the_connection() {
    let runs = on_both_kernels(send_to_a_destroyed_peer_qp, DESTROYED_PEER_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server event: RDMA_CM_EVENT_DISCONNECTED 0", Duration::ZERO),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 5 * US),
        ],
    );
}

#[test]
fn write_to_a_bad_rkey_terminates_the_connection() {
    let runs = on_both_kernels(write_to_a_bad_rkey, BAD_RKEY_WRITE_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server event: RDMA_CM_EVENT_DISCONNECTED 0", 5 * US),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 10 * US),
        ],
    );
}

#[test]
fn read_from_a_bad_rkey_terminates_the_connection() {
    let runs = on_both_kernels(read_from_a_bad_rkey, BAD_RKEY_READ_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server event: RDMA_CM_EVENT_DISCONNECTED 0", 5 * US),
            ("client wc: (1 Work Request Flushed Error (5))", 10 * US),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 10 * US),
        ],
    );
}

#[test]
fn send_into_a_read_only_receive_terminates_the_connection() {
    let runs = on_both_kernels(send_into_a_read_only_receive, READ_ONLY_RECEIVE_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server wc: (10 general error (21))", 5 * US),
            ("server async: AsyncEvent(3)", 5 * US),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 10 * US),
        ],
    );
}

#[test]
fn write_past_the_region_terminates_the_connection() {
    let runs = on_both_kernels(write_past_the_region, WRITE_PAST_THE_REGION_ON_SIW_6_12);
    expect_times(
        &runs,
        &[
            ("server async: AsyncEvent(3)", 5 * US),
            ("client event: RDMA_CM_EVENT_DISCONNECTED 0", 10 * US),
        ],
    );
}

/// An iWARP bed of `kernel` whose wire has no jitter: 5 µs each way, so TCP's RTO is 200 ms
/// plus the 10 µs round trip in whole 4 ms ticks (250 Hz): 204 ms.
fn jitterless_iwarp(seed: u64, kernel: KernelProfile) -> SimBed {
    let mut config = SimConfig::for_kernel(kernel);
    config.wire_jitter = Duration::ZERO;
    SimBed::with_config(seed, Transport::Iwarp, config)
}

/// Connects the bed's client to its server on `port`, posts a 16-byte receive (wr_id 1) on
/// the server (`rx_on_server`) or the client, lets `fault` break the wire, and posts an
/// 8-byte SEND (wr_id 2) from the client: the connection and the time of the post.
fn send_into_fault(
    bed: &SimBed,
    port: u16,
    rx_on_server: bool,
    fault: impl FnOnce(&cmtwin_sim::Fabric),
) -> (cmtwin_tests::datapath::Conn, Duration) {
    use cmtwin::verbs::{AccessFlags, DataPath, Payload, SendOp, SendWr};
    use cmtwin::CmBackend;
    use cmtwin_tests::datapath::{connect, post_recv_all, region};
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(port));
    let (rx_side, rx) = if rx_on_server {
        (s, &conn.server)
    } else {
        (c, &conn.client)
    };
    let rx_mr = region(rx_side, rx.pd, 16, 0, AccessFlags::LOCAL_WRITE);
    post_recv_all(rx_side, rx.qp, 1, &rx_mr);
    let tx = region(c, conn.client.pd, 8, 7, AccessFlags::NONE);
    let sge = [tx.sge(0, 8)];
    fault(&bed.fabric);
    let t0 = c.now();
    let send = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(conn.client.qp, &send), "post_send");
    (conn, t0)
}

/// TCP carries siw's messages: a lost one is sent again on TCP's schedule (a loss probe at
/// the RTO, then RTOs doubling from there: 204, 408, 816, 1632, 3264, 6528 ms after the
/// post), whatever the QP's `timeout` and `retry_count`, and delivered once. The SEND
/// completed when first sent, before any of it. Measured on siw-6.1: the SEND reached the
/// peer with the first retransmission of this schedule after the loss stopped
/// (`verbs/tcp_timer.rs`).
#[test]
fn a_lost_message_is_sent_again_on_tcps_schedule() {
    use cmtwin::verbs::{WcOpcode, WcStatus};
    use cmtwin::CmBackend;
    use cmtwin_tests::datapath::{drain, next_completion};
    let bed = jitterless_iwarp(43, KernelProfile::Linux61);
    let (s, c) = (bed.server(), bed.client());
    // Lose the SEND, the loss probe and the first four RTOs' retransmissions.
    let lose = |f: &cmtwin_sim::Fabric| f.drop_data_packets(6).expect("outside a run");
    let (conn, t0) = send_into_fault(&bed, 7702, true, lose);
    let wc = drain(c, &conn.client);
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [(2, WcStatus::SUCCESS, WcOpcode::Send)],
        "completed inside the post"
    );
    let got = next_completion(s, &conn.server);
    assert_eq!(
        (got.wr_id, got.status, got.byte_len),
        (1, WcStatus::SUCCESS, 8)
    );
    // The fifth RTO's retransmission, 6.528 s after the post, then the wire's 5 µs.
    assert_eq!(
        s.now() - t0,
        Duration::from_millis(6_528) + Duration::from_micros(5)
    );
    ok(s.sleep(Duration::from_secs(60)), "sleep");
    assert!(drain(s, &conn.server).is_empty(), "delivered once");
    assert!(drain(c, &conn.client).is_empty(), "no RETRY_EXC_ERR");
}

/// A peer that falls silent (its host loses power): siw's TCP retransmits the SEND (which
/// completed SUCCESS inside the post) until TCP gives up, 928.896 s after the post: the
/// first RTO on the schedule that is at least `tcp_retries2`'s 924.6 s after the first
/// transmission. The socket closes without a reset: the client gets DISCONNECTED (status
/// 0), its QP is in ERROR (read on Linux 6.12; 6.1's siw reads RESET in every state) and
/// its posted receive flushed; no RETRY_EXC_ERR.
#[test]
fn a_silent_peer_ends_the_connection_when_tcp_gives_up() {
    use cmtwin::verbs::{DataPath, QpState, WcStatus};
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::{drain, next_completion};
    let bed = jitterless_iwarp(44, KernelProfile::Linux612);
    let c = bed.client();
    let silence = |f: &cmtwin_sim::Fabric| f.power_off("server").expect("outside a run");
    let (conn, t0) = send_into_fault(&bed, 7703, false, silence);
    let sent = next_completion(c, &conn.client);
    assert_eq!((sent.wr_id, sent.status), (2, WcStatus::SUCCESS));
    // Longer than the suite's usual wait: TCP takes its quarter of an hour.
    let patience = Wait::Timeout(Duration::from_secs(1_000));
    let ev = cmtwin::expect_event(c, conn.client.channel, EventKind::Disconnected, patience);
    assert_eq!(ev.expect("DISCONNECTED").status, 0);
    assert_eq!(c.now() - t0, Duration::from_millis(928_896));
    let flushed = next_completion(c, &conn.client);
    assert_eq!((flushed.wr_id, flushed.status), (1, WcStatus::WR_FLUSH_ERR));
    assert_eq!(c.now() - t0, Duration::from_millis(928_896));
    let state = ok(c.query_qp_state(conn.client.qp), "query_qp");
    assert_eq!(state, QpState::Error);
    assert!(drain(c, &conn.client).is_empty());
}

/// A peer that sends after TCP gave the connection up meets a reset (the other end's socket
/// is closed): its SEND completes SUCCESS inside the post, and one round trip later it gets
/// DISCONNECTED (status 0), its QP in ERROR and its receive flushed. Measured on siw-6.1
/// (BEDS.md): SUCCESS, then DISCONNECTED 0 at once.
#[test]
fn a_peer_that_sends_after_tcp_gave_up_meets_a_reset() {
    use cmtwin::verbs::{AccessFlags, DataPath, Payload, QpState, SendOp, SendWr};
    use cmtwin::{EventKind, Wait};
    use cmtwin_tests::datapath::{drain, region};
    let bed = jitterless_iwarp(45, KernelProfile::Linux612);
    let (s, c) = (bed.server(), bed.client());
    // The SEND, the loss probe and the 15 RTOs' retransmissions are lost: TCP gives up.
    let lose = |f: &cmtwin_sim::Fabric| f.drop_data_packets(17).expect("outside a run");
    let (conn, _) = send_into_fault(&bed, 7704, true, lose);
    let patience = Wait::Timeout(Duration::from_secs(1_000));
    let gave_up = cmtwin::expect_event(c, conn.client.channel, EventKind::Disconnected, patience);
    assert_eq!(gave_up.expect("the client's DISCONNECTED").status, 0);
    assert!(
        drain(s, &conn.server).is_empty(),
        "the server heard nothing"
    );

    let back = region(s, conn.server.pd, 8, 9, AccessFlags::NONE);
    let back_sge = [back.sge(0, 8)];
    let reply = SendWr::new(3, SendOp::Send, Payload::Sges(&back_sge));
    send_into_a_reset(s, &conn.server, &reply);
    let state = ok(s.query_qp_state(conn.server.qp), "query_qp");
    assert_eq!(state, QpState::Error);
}

/// Posts `wr` on `side`, whose receive wr_id 1 is posted, toward a peer whose TCP has no
/// socket for it: the SEND completes SUCCESS inside the post, the reset ends the connection
/// one round trip later (DISCONNECTED, status 0) and the receive is flushed.
fn send_into_a_reset(
    cm: &cmtwin_sim::SimBackend,
    side: &cmtwin_tests::datapath::Side,
    wr: &cmtwin::verbs::SendWr,
) {
    use cmtwin::verbs::{DataPath, WcStatus};
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::next_completion;
    let t0 = cm.now();
    ok(cm.post_send(side.qp, wr), "post_send");
    let sent = next_completion(cm, side);
    assert_eq!((sent.wr_id, sent.status), (wr.wr_id, WcStatus::SUCCESS));
    assert_eq!(cm.now(), t0, "completed inside the post");
    let patience = Wait::Timeout(Duration::from_secs(1));
    let reset = cmtwin::expect_event(cm, side.channel, EventKind::Disconnected, patience);
    assert_eq!(reset.expect("DISCONNECTED").status, 0);
    assert_eq!(
        cm.now() - t0,
        Duration::from_micros(10),
        "the SEND there, the reset back"
    );
    let flushed = next_completion(cm, side);
    assert_eq!((flushed.wr_id, flushed.status), (1, WcStatus::WR_FLUSH_ERR));
}

fn ok<T>(r: cmtwin::Result<T>, what: &str) -> T {
    cmtwin_tests::steps::ok(r, what)
}

/// A send posted in INIT: ENOTCONN, kept in siw's ring, and the send queue wedged: the send
/// posted in RTS is taken, and neither is sent, completed or flushed by the close; the
/// server's receives are flushed as the close reaches it (`cmtwin_tests::early_send`).
#[test]
fn a_send_posted_before_rts_wedges_the_send_queue() {
    use cmtwin_tests::early_send::{send_posted_before_rts, EARLY_SEND_ON_SIW_6_12};
    let runs = on_both_kernels(send_posted_before_rts, EARLY_SEND_ON_SIW_6_12);
    let flushed = "server wc: (10 Work Request Flushed Error (5))";
    expect_times(&runs, &[(flushed, Duration::ZERO)]);
}

/// A host back from a power-off hears from a peer of its last life: its TCP has no socket for
/// the segment and answers with a reset, which ends the peer's connection (DISCONNECTED 0, one
/// round trip after the post, its QP in ERROR, reported so on 6.12, and its receive flushed),
/// as the reset of a
/// connection whose TCP gave up does (measured on siw-6.1, above). The message used to be
/// dropped without an answer, and the peer retransmitted it until its own TCP gave up. Both
/// kernel profiles.
#[test]
fn a_host_back_from_a_power_off_resets_a_connection_of_its_last_life() {
    use cmtwin::verbs::{AccessFlags, DataPath, Payload, QpState, SendOp, SendWr};
    use cmtwin_tests::datapath::{connect, post_recv_all, region};
    for (seed, kernel) in [(46, KernelProfile::Linux61), (47, KernelProfile::Linux612)] {
        let bed = jitterless_iwarp(seed, kernel);
        let (s, c) = (bed.server(), bed.client());
        let conn = connect(s, c, addr(7705));
        let rx = region(c, conn.client.pd, 8, 0, AccessFlags::LOCAL_WRITE);
        post_recv_all(c, conn.client.qp, 1, &rx);
        bed.fabric.power_off("server").expect("outside a run");
        bed.fabric.power_on("server").expect("outside a run");

        let tx = region(c, conn.client.pd, 8, 7, AccessFlags::NONE);
        let sge = [tx.sge(0, 8)];
        let wr = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
        send_into_a_reset(c, &conn.client, &wr);
        // siw on Linux 6.1 reports RESET whatever its QP's state (measured).
        let reported = match kernel {
            KernelProfile::Linux61 => QpState::Reset,
            _ => QpState::Error,
        };
        let state = ok(c.query_qp_state(conn.client.qp), "query_qp");
        assert_eq!(state, reported, "{kernel:?}");
    }
}

/// How the client drops its connection right after its SEND completed.
#[derive(Clone, Copy, Debug)]
enum Close {
    /// `rdma_disconnect` (siw's CLOSING).
    Disconnect,
    /// `rdma_destroy_qp` (siw moves the QP to ERROR, which drops the connection).
    DestroyQp,
    /// `rdma_destroy_id` with the QP still on the id.
    DestroyId,
}

fn close_client(c: &cmtwin_sim::SimBackend, side: &cmtwin_tests::datapath::Side, how: Close) {
    use cmtwin::CmBackend;
    match how {
        Close::Disconnect => ok(c.disconnect(side.id), "rdma_disconnect"),
        Close::DestroyQp => ok(c.destroy_qp(side.id), "rdma_destroy_qp"),
        Close::DestroyId => ok(c.destroy_id(side.id), "rdma_destroy_id"),
    }
}

/// TCP's first retransmission of a lost 8-byte SEND, on the loopback path of these beds: the
/// loss probe at the RTO (204 ms after the post), then the wire's 5 µs.
const PROBE_ARRIVES: Duration = Duration::from_micros(204_005);

/// The client's SEND (which completed inside the post) is lost on the wire and the client
/// drops the connection at once, as `how` says: siw releases its socket with a plain close
/// (`siw_qp_cm_drop`, `sock_release`, `tcp_close` without SO_LINGER or unread data), so TCP
/// keeps retransmitting the bytes and its FIN follows them; the server's TCP holds the FIN that
/// overtook the lost bytes until they come. The server's receive completes SUCCESS with the
/// 8 bytes at the loss probe's arrival, 204.005 ms after the post, and only then does the
/// server get DISCONNECTED (status 0), at the same instant; nothing is flushed or delivered
/// twice. (The FIN used to arrive 5 µs after the post with the receive flushed, the bytes
/// never retransmitted.) Both kernel profiles.
fn lost_bytes_reach_the_peer_before_the_close(how: Close, port: u16) {
    use cmtwin::verbs::{WcOpcode, WcStatus};
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::{drain, next_completion};
    for (seed, kernel) in [(48, KernelProfile::Linux61), (49, KernelProfile::Linux612)] {
        let bed = jitterless_iwarp(seed, kernel);
        let (s, c) = (bed.server(), bed.client());
        let lose = |f: &cmtwin_sim::Fabric| f.drop_data_packets(1).expect("outside a run");
        let (conn, t0) = send_into_fault(&bed, port, true, lose);
        let sent: Vec<_> = drain(c, &conn.client)
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
        assert_eq!(sent, [(2, WcStatus::SUCCESS, WcOpcode::Send)], "{kernel:?}");
        let closed = c.now();
        close_client(c, &conn.client, how);
        if let Close::Disconnect = how {
            let patience = Wait::Timeout(Duration::from_secs(1));
            let ev =
                cmtwin::expect_event(c, conn.client.channel, EventKind::Disconnected, patience);
            assert_eq!(ev.expect("the client's DISCONNECTED").status, 0);
            // At once: the call's own 20 µs.
            assert_eq!(
                c.now() - closed,
                20 * US,
                "{kernel:?}: the client's own close"
            );
        }

        let got = next_completion(s, &conn.server);
        assert_eq!(
            (got.wr_id, got.status, got.opcode, got.byte_len),
            (1, WcStatus::SUCCESS, WcOpcode::Recv, 8),
            "{kernel:?} {how:?}"
        );
        assert_eq!(
            s.now() - t0,
            PROBE_ARRIVES,
            "{kernel:?} {how:?}: the receive"
        );
        let patience = Wait::Timeout(Duration::from_secs(1));
        let ev = cmtwin::expect_event(s, conn.server.channel, EventKind::Disconnected, patience);
        assert_eq!(ev.expect("the server's DISCONNECTED").status, 0);
        assert_eq!(s.now() - t0, PROBE_ARRIVES, "{kernel:?} {how:?}: the close");
        ok(s.sleep(Duration::from_secs(60)), "sleep");
        assert!(
            drain(s, &conn.server).is_empty(),
            "{kernel:?} {how:?}: once"
        );
    }
}

#[test]
fn bytes_lost_before_a_disconnect_reach_the_peer_before_its_close() {
    lost_bytes_reach_the_peer_before_the_close(Close::Disconnect, 7710);
}

#[test]
fn bytes_lost_before_the_qp_is_destroyed_reach_the_peer_before_its_close() {
    lost_bytes_reach_the_peer_before_the_close(Close::DestroyQp, 7711);
}

#[test]
fn bytes_lost_before_the_id_is_destroyed_reach_the_peer_before_its_close() {
    lost_bytes_reach_the_peer_before_the_close(Close::DestroyId, 7712);
}

/// The lost SEND is for a server with no receive posted: its retransmission, after the client
/// disconnected, is what the server's siw refuses (a DDP untagged message without a receive:
/// TERMINATE and its own close, `siw_proc_send`, `siw_qp_cm_drop`): the server gets
/// DISCONNECTED (status 0) at the loss probe's arrival, 204.005 ms after the post, not as the
/// FIN that overtook the bytes arrived (5 µs); nothing completes there. Both kernel
/// profiles.
#[test]
fn bytes_lost_before_a_disconnect_for_a_peer_without_a_receive_terminate_there() {
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::drain;
    for (seed, kernel) in [(50, KernelProfile::Linux61), (51, KernelProfile::Linux612)] {
        let bed = jitterless_iwarp(seed, kernel);
        let (s, c) = (bed.server(), bed.client());
        let lose = |f: &cmtwin_sim::Fabric| f.drop_data_packets(1).expect("outside a run");
        let (conn, t0) = send_into_fault(&bed, 7713, false, lose);
        close_client(c, &conn.client, Close::Disconnect);
        let patience = Wait::Timeout(Duration::from_secs(1));
        let ev = cmtwin::expect_event(s, conn.server.channel, EventKind::Disconnected, patience);
        assert_eq!(ev.expect("the server's DISCONNECTED").status, 0);
        assert_eq!(s.now() - t0, PROBE_ARRIVES, "{kernel:?}");
        ok(s.sleep(Duration::from_secs(60)), "sleep");
        assert!(drain(s, &conn.server).is_empty(), "{kernel:?}");
    }
}

/// The server closes before the lost bytes come (100 ms after the post, while its TCP holds
/// the client's FIN behind the gap): its own close gives it DISCONNECTED (status 0) and flushes
/// its receive then; the retransmission that comes at 204 ms meets a closed socket, whose TCP
/// answers with a reset (tcp_input.c `tcp_rcv_state_process`: data after the close), which ends
/// the client's orphaned socket: the server hears nothing more. Both kernel profiles.
#[test]
fn bytes_lost_before_a_disconnect_are_refused_by_a_peer_that_closed_meanwhile() {
    use cmtwin::verbs::WcStatus;
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::{drain, next_completion};
    for (seed, kernel) in [(52, KernelProfile::Linux61), (53, KernelProfile::Linux612)] {
        let bed = jitterless_iwarp(seed, kernel);
        let (s, c) = (bed.server(), bed.client());
        let lose = |f: &cmtwin_sim::Fabric| f.drop_data_packets(1).expect("outside a run");
        let (conn, _) = send_into_fault(&bed, 7714, true, lose);
        close_client(c, &conn.client, Close::Disconnect);
        ok(s.sleep(Duration::from_millis(100)), "sleep");
        assert!(drain(s, &conn.server).is_empty(), "{kernel:?}: nothing yet");
        let closing = s.now();
        ok(s.disconnect(conn.server.id), "rdma_disconnect");
        let patience = Wait::Timeout(Duration::from_secs(1));
        let ev = cmtwin::expect_event(s, conn.server.channel, EventKind::Disconnected, patience);
        assert_eq!(ev.expect("the server's DISCONNECTED").status, 0);
        // At once (the call's own 20 µs), long before the retransmission.
        assert_eq!(s.now() - closing, 20 * US, "{kernel:?}");
        let flushed = next_completion(s, &conn.server);
        assert_eq!((flushed.wr_id, flushed.status), (1, WcStatus::WR_FLUSH_ERR));
        ok(s.sleep(Duration::from_secs(60)), "sleep");
        assert!(drain(s, &conn.server).is_empty(), "{kernel:?}");
        let more = s.get_cm_event(conn.server.channel, Wait::Timeout(Duration::ZERO));
        assert!(more.is_err(), "{kernel:?}: one DISCONNECTED");
    }
}
