//! iWARP connections over external QPs on real siw, through the generic steps of
//! `cmtwin_tests::iwarp_external_qp`, compared line by line with the transcripts the
//! simulator gives (tests/tests/sim_datapath.rs holds the same constants). They need an
//! iWARP device whose IPv4 address is in `CMTWIN_RDMA_ADDR` (the Soft-iWARP VM of
//! `scripts/vm-run --transport siw`), so they are ignored by default; `scripts/verbs-tests-in-vm`
//! runs them on the siw beds with `--ignored --test-threads=1`.
//!
//! The `siw_data_path_*` tests run the RC data path scenarios of
//! `cmtwin_tests::iwarp_datapath` (completion at send, no receive posted, a destroyed peer QP,
//! bad rkeys), whose transcripts the simulator gives too (tests/tests/sim_iwarp_datapath.rs);
//! they print when each thing was first seen (run with `--nocapture`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};

use cmtwin_tests::iwarp_datapath::{
    read_from_a_bad_rkey, send_and_write_complete_when_sent, send_into_a_read_only_receive,
    send_to_a_destroyed_peer_qp, send_without_a_receive, write_past_the_region,
    write_to_a_bad_rkey, Observed, BAD_RKEY_READ_ON_SIW_6_12, BAD_RKEY_WRITE_ON_SIW_6_12,
    DESTROYED_PEER_ON_SIW_6_12, NO_RECEIVE_ON_SIW_6_12, READ_ONLY_RECEIVE_ON_SIW_6_12,
    SEND_AND_WRITE_ON_SIW_6_12, WRITE_PAST_THE_REGION_ON_SIW_6_12,
};
use cmtwin_tests::iwarp_external_qp::{
    connection_over_external_qps, on_siw_6_1, wrong_external_qps, Transcript,
    CONNECTION_ON_SIW_6_12, WRONG_ON_SIW_6_12,
};
use cmtwin_verbs::VerbsBackend;

fn addr() -> SocketAddr {
    // Below the kernel's ephemeral range (32768-60999), where a client's resolve_addr could
    // take the port first.
    static NEXT: AtomicU16 = AtomicU16::new(30_500);
    let ip: IpAddr = std::env::var("CMTWIN_RDMA_ADDR")
        .expect("CMTWIN_RDMA_ADDR must name the RDMA device's IPv4 address")
        .parse()
        .expect("CMTWIN_RDMA_ADDR is an IP address");
    SocketAddr::new(ip, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Whether the bed runs Linux 6.1 (whose siw reads every QP state as RESET) rather than 6.12.
fn linux_6_1() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    release.starts_with("6.1.")
}

/// The transcript of this bed's kernel, from the 6.12 one.
fn for_this_kernel(lines_6_12: &[&str]) -> Vec<String> {
    if linux_6_1() {
        on_siw_6_1(lines_6_12)
    } else {
        lines_6_12.iter().map(|l| l.to_string()).collect()
    }
}

fn print(name: &str, t: &Transcript) {
    eprintln!("--- {name}");
    for line in &t.0 {
        eprintln!("{line}");
    }
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn iwarp_external_qps_connect_and_carry_data() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let t = connection_over_external_qps(&s, &c, addr());
    print("connection over external QPs", &t);
    let expected = for_this_kernel(CONNECTION_ON_SIW_6_12);
    assert_eq!(
        t.0, expected,
        "the simulator's transcript (tests/src/iwarp_external_qp.rs)"
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn iwarp_external_qps_in_the_wrong_state() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let t = wrong_external_qps(&s, &c, &mut addr);
    print("wrong external QPs", &t);
    let expected = for_this_kernel(WRONG_ON_SIW_6_12);
    assert_eq!(
        t.0, expected,
        "the simulator's transcript (tests/src/iwarp_external_qp.rs)"
    );
}

/// Prints a data path scenario's observations with their times, then compares its
/// transcript with the simulator's (tests/src/iwarp_datapath.rs).
fn check_data_path(name: &str, o: &Observed, lines_6_12: &[&str]) {
    eprintln!("--- {name}: times from the trigger");
    for (line, at) in &o.times {
        eprintln!("{at:>12?}  {line}");
    }
    assert_eq!(
        o.transcript.0,
        for_this_kernel(lines_6_12),
        "the simulator's transcript (tests/src/iwarp_datapath.rs)"
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_send_and_write_complete_when_handed_to_tcp() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = send_and_write_complete_when_sent(&s, &c, addr());
    check_data_path("send and write", &o, SEND_AND_WRITE_ON_SIW_6_12);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_send_without_a_receive_terminates_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = send_without_a_receive(&s, &c, addr());
    check_data_path("send without a receive", &o, NO_RECEIVE_ON_SIW_6_12);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_destroying_the_peer_qp_closes_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = send_to_a_destroyed_peer_qp(&s, &c, addr());
    check_data_path("destroyed peer QP", &o, DESTROYED_PEER_ON_SIW_6_12);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_write_to_a_bad_rkey_terminates_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = write_to_a_bad_rkey(&s, &c, addr());
    check_data_path("write to a bad rkey", &o, BAD_RKEY_WRITE_ON_SIW_6_12);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_read_from_a_bad_rkey_terminates_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = read_from_a_bad_rkey(&s, &c, addr());
    check_data_path("read from a bad rkey", &o, BAD_RKEY_READ_ON_SIW_6_12);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_send_into_a_read_only_receive_terminates_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = send_into_a_read_only_receive(&s, &c, addr());
    check_data_path(
        "send into a read-only receive",
        &o,
        READ_ONLY_RECEIVE_ON_SIW_6_12,
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_write_past_the_region_terminates_the_connection() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = write_past_the_region(&s, &c, addr());
    check_data_path(
        "write past the region",
        &o,
        WRITE_PAST_THE_REGION_ON_SIW_6_12,
    );
}

/// siw refuses a send posted in INIT (ENOTCONN) and keeps it in its ring, which wedges the
/// send queue: the send posted in RTS is taken and neither is sent before the close flushes
/// them (`cmtwin_tests::early_send`; the simulator's twin in
/// tests/tests/sim_iwarp_datapath.rs).
#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_data_path_a_send_posted_before_rts_wedges_the_send_queue() {
    use cmtwin_tests::early_send::{send_posted_before_rts, EARLY_SEND_ON_SIW_6_12};
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    let o = send_posted_before_rts(&s, &c, addr());
    check_data_path("send posted before RTS", &o, EARLY_SEND_ON_SIW_6_12);
}

/// siw has no atomics: libsiw refuses both with EINVAL at post time, queuing nothing (the
/// shared scenario of tests/src/atomics.rs).
#[test]
#[ignore = "needs RDMA: run inside the Soft-iWARP VM"]
fn siw_refuses_atomics_at_post_time() {
    let (s, c) = (VerbsBackend::new(), VerbsBackend::new());
    cmtwin_tests::atomics::siw_refuses_atomics(&s, &c, addr());
}
