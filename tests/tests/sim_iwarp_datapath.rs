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

/// TCP carries siw's messages: a lost one is sent again and delivered once, however many
/// times it is lost, and the connection never gives up (siw has no `retry_count`, so no
/// RETRY_EXC_ERR; TCP's own limit, about 15 minutes of retransmissions before it resets the
/// connection, is not modelled and was not measured: both addresses of a VM bed are on one
/// host, so no peer there falls silent). The SEND completed when first sent, before any of
/// it.
#[test]
fn lost_messages_are_sent_again_without_end() {
    use cmtwin::verbs::{AccessFlags, DataPath, Payload, SendOp, SendWr, WcOpcode, WcStatus};
    use cmtwin::CmBackend;
    use cmtwin_tests::datapath::{connect, drain, next_completion, post_recv_all, region};
    let mut config = SimConfig::for_kernel(KernelProfile::Linux61);
    config.wire_jitter = Duration::ZERO;
    let bed = SimBed::with_config(43, Transport::Iwarp, config);
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(7702));
    let rx = region(s, conn.server.pd, 16, 0, AccessFlags::LOCAL_WRITE);
    post_recv_all(s, conn.server.qp, 1, &rx);
    let tx = region(c, conn.client.pd, 8, 7, AccessFlags::NONE);
    let sge = [tx.sge(0, 8)];
    // Lose the SEND and its first 20 retransmissions: far beyond any retry count.
    bed.fabric.drop_data_packets(21).expect("outside a run");
    let t0 = c.now();
    let send = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(conn.client.qp, &send), "post_send");
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
    // 21 transport timeouts of the iWARP path (exponent 19: 2.147483648 s each), then the
    // wire's 5 µs.
    assert_eq!(
        s.now() - t0,
        21 * Duration::from_nanos(2_147_483_648) + Duration::from_micros(5)
    );
    ok(s.sleep(Duration::from_secs(60)), "sleep");
    assert!(drain(s, &conn.server).is_empty(), "delivered once");
    assert!(drain(c, &conn.client).is_empty(), "no RETRY_EXC_ERR");
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
