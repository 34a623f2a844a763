//! `modify_qp_with_mask` on the simulator: the kernel's transition table and rxe's checks
//! (the same outcomes as on rxe, `cmtwin_tests::qp_modify`), and the attributes' effects at
//! exact virtual times: an RNR timer set on RTS, a timeout and retry count set in SQD, SQD's
//! draining.
//!
//! Times: the wire's latency is 5 µs without jitter, so a request's answer comes 10 µs after
//! it is sent.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, Payload, QpAttr, QpAttrMask as M, QpState, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use cmtwin::{AsyncEvent, Call, CmBackend, Errno, Transport, Wait};
use cmtwin_sim::{SimBackend, SimConfig};
use cmtwin_tests::datapath::{connect, next_completion, post_recv_all, region, Conn};
use cmtwin_tests::qp_modify as shared;
use cmtwin_tests::steps::{expect_errno, ok};
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);

/// A bed of `transport` whose wire has no jitter.
fn bed(seed: u64, transport: Transport) -> SimBed {
    SimBed::jitterless(seed, transport)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), port)
}

#[test]
fn masks_follow_the_kernels_table_and_rxes_checks() {
    let linux612 = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::linux612()
    };
    let beds = [
        (bed(1, Transport::Roce), Transport::Roce, false),
        (bed(1, Transport::InfiniBand), Transport::InfiniBand, false),
        (
            SimBed::with_config(1, Transport::Roce, linux612),
            Transport::Roce,
            true,
        ),
    ];
    for (bed, transport, linux_6_12) in beds {
        let got = shared::masks_of_rc_qps(bed.server(), bed.client(), addr(7600));
        let mut want = shared::expected_outcomes(linux_6_12);
        if transport == Transport::InfiniBand {
            // No alternate path is modelled; RoCE's kernel bans them (EINVAL).
            want[7].1 = Err(cmtwin::Errno::EOPNOTSUPP);
        }
        shared::assert_outcomes(&got, &want);
    }
}

#[test]
fn an_rnr_timer_set_on_rts_times_the_senders_rnr_wait() {
    let bed = bed(2, Transport::Roce);
    // 18: 5.12 ms.
    let (wc, took) = shared::rnr_timer_set_on_rts(bed.server(), bed.client(), addr(7601), 18);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::RNR_RETRY_EXC_ERR, WcOpcode::Send)
    );
    // Sent, NAKed 10 µs later; sent again 5.12 ms after, NAKed 10 µs later: no retry left.
    assert_eq!(took, 10 * US + Duration::from_micros(5120) + 10 * US);
}

#[test]
fn a_timeout_and_retry_count_set_in_sqd_time_a_dead_peer() {
    let bed = bed(3, Transport::Roce);
    let (wc, took) = shared::timeout_set_in_sqd(bed.server(), bed.client(), addr(7602), 10, 1);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::RETRY_EXC_ERR, WcOpcode::Send)
    );
    // Two timeouts of 4.096 µs × 2^10: the first resends, the second exhausts the retry.
    assert_eq!(took, 2 * Duration::from_nanos(4096 << 10));
}

/// A retry count of 7 on the simulated rxe: 1000 timeouts of 4.096 µs × 2^10 later the send
/// is still outstanding and the QP in RTS.
#[test]
fn a_retry_count_of_7_retries_without_end_on_rxe() {
    let bed = bed(5, Transport::Roce);
    let window = 1000 * Duration::from_nanos(4096 << 10);
    let got =
        shared::retry_count_7_on_a_silent_peer(bed.server(), bed.client(), addr(7604), 10, window);
    assert_eq!(got, (0, QpState::Rts));
}

/// RTS → SQD with a send outstanding: the QP sends nothing new, cannot leave SQD for RTS
/// until the send is acknowledged (rxe's draining check), raises SQ_DRAINED at that
/// acknowledgement, and sends what was posted meanwhile once back in RTS.
#[test]
fn sqd_waits_for_the_outstanding_send_then_reports_sq_drained() {
    let bed = bed(4, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(7603));
    let rx = region(s, conn.server.pd, 8, 0, AccessFlags::LOCAL_WRITE);
    post_recv_all(s, conn.server.qp, 1, &rx);
    post_recv_all(s, conn.server.qp, 2, &rx);
    let qp = conn.client.qp;
    let to = |state| QpAttr {
        qp_state: Some(state),
        ..QpAttr::default()
    };
    let t0 = c.now();
    send_bytes(c, &conn, 10);
    ok(
        c.modify_qp_with_mask(qp, &to(QpState::Sqd), M::STATE),
        "RTS -> SQD",
    );
    send_bytes(c, &conn, 11);
    expect_errno(
        c.modify_qp_with_mask(qp, &to(QpState::Rts), M::STATE),
        Call::ModifyQp,
        Errno::EINVAL,
    );
    let event = ok(c.get_async_event(Wait::Block), "get_async_event");
    assert_eq!(
        (event.kind, event.qp_num),
        (AsyncEvent::SQ_DRAINED, Some(conn.client.qpn))
    );
    assert_eq!(c.now() - t0, 10 * US, "at the acknowledgement");
    ok(s.sleep(100 * US), "sleep");
    ok(
        c.modify_qp_with_mask(qp, &to(QpState::Rts), M::STATE),
        "SQD -> RTS",
    );
    let first = next_completion(s, &conn.server);
    assert_eq!((first.wr_id, first.status), (1, WcStatus::SUCCESS));
    let second = next_completion(s, &conn.server);
    assert_eq!((second.wr_id, second.status), (2, WcStatus::SUCCESS));
    assert_eq!(
        s.now() - t0,
        115 * US,
        "sent at SQD -> RTS, 5 µs on the wire"
    );
}

/// Posts an 8-byte send with `wr_id` from the client.
fn send_bytes(c: &SimBackend, conn: &Conn, wr_id: u64) {
    let mr = ok(
        c.reg_mr(conn.client.pd, vec![7; 8], AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, 8)];
    let wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(conn.client.qp, &wr), "post_send");
}
