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
