//! `modify_qp_with_mask` on the simulator: the kernel's transition table and rxe's checks
//! (the same outcomes as on rxe, `cmtwin_tests::qp_modify`), and the attributes' effects at
//! exact virtual times: an RNR timer set on RTS, a timeout and retry count set in SQD, PSNs.
//!
//! Times: the wire's latency is 5 µs without jitter, so a request's answer comes 10 µs after
//! it is sent.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{WcOpcode, WcStatus};
use cmtwin::Transport;
use cmtwin_sim::SimConfig;
use cmtwin_tests::qp_modify as shared;
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);

/// A bed of `transport` whose wire has no jitter, so that times are exact sums of latencies.
fn bed(seed: u64, transport: Transport) -> SimBed {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    SimBed::with_config(seed, transport, config)
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
