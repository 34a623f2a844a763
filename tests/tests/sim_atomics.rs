//! RDMA atomics on the simulator: the shared scenarios of `cmtwin_tests::atomics` (which real
//! rxe and siw beds run too) with exact virtual times, a lost request and a lost ATOMIC ACK
//! under RC's retransmission (the responder adds once: a duplicate is answered with the value
//! it kept), UC's local failure, and a fenced request behind an atomic.
//!
//! Times: the wire's latency is 5 µs without jitter, so an atomic's response is back 10 µs
//! after its post; a transport retry of the default path waits 4.096 µs × 2^19.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, Payload, QpState, SendOp, SendWr, WcOpcode, WcStatus};
use cmtwin::{CmBackend, QpType, Transport};
use cmtwin_sim::SimConfig;
use cmtwin_tests::atomics::*;
use cmtwin_tests::datapath::{connect, connect_with, drain, next_completion, region, Setup};
use cmtwin_tests::steps::ok;
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);
/// One transport timeout of the default path.
const RETRY: Duration = Duration::from_nanos(2_147_483_648);
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

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

/// On RoCE (rxe) and InfiniBand alike: the values before come back and land, each atomic a
/// round trip (10 µs) after its post.
#[test]
fn compare_swap_and_fetch_add_take_a_round_trip_each() {
    for (seed, transport) in [(1, Transport::Roce), (2, Transport::InfiniBand)] {
        let bed = bed(seed, transport);
        let (s, c) = (bed.server(), bed.client());
        let conn = compare_swap_and_fetch_add_return_the_value_before(s, c, addr(7601));
        let target = words_region(s, conn.server.pd, &[u64::MAX], atomic_target());
        let sink = region(c, conn.client.pd, 16, 0, LW);
        let t0 = c.now();
        let wc = post_atomic(
            c,
            &conn,
            4,
            fetch_add(target.addr, target.rkey, 2),
            sink.sge(0, 16),
        );
        assert_eq!(c.now() - t0, 10 * US, "{transport:?}");
        // Entries longer than 8 bytes are taken: the value before fills the first 8 and the
        // completion counts the entries' length, as rxe's completer does.
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::FetchAdd, 16));
        assert_eq!(word_at(c, &sink, 0), u64::MAX);
        assert_eq!(
            (word_at(c, &sink, 8), word_at(s, &target, 0)),
            (0, 1),
            "wrapped"
        );
    }
}

#[test]
fn short_or_misaligned_atomics_are_refused_at_post_time() {
    let bed = bed(3, Transport::Roce);
    short_or_misaligned_atomics_are_einval(bed.server(), bed.client(), addr(7602));
}

#[test]
fn a_region_without_remote_atomic_refuses_with_a_remote_access_error() {
    let bed = bed(4, Transport::Roce);
    an_atomic_on_a_region_without_remote_atomic_is_a_remote_access_error(
        bed.server(),
        bed.client(),
        addr(7603),
    );
}

/// The simulator's iWARP devices are siw: EINVAL at post, as libsiw answers.
#[test]
fn siw_refuses_atomics_at_post_time() {
    let bed = bed(6, Transport::Iwarp);
    siw_refuses_atomics(bed.server(), bed.client(), addr(7605));
}

/// A lost request is resent after one transport timeout and executed once; a lost ATOMIC
/// ACK makes the resent request a duplicate, which the responder answers with the value it
/// kept (5), not by adding again: the word ends at 5 + 3 + 3 = 11, not 14.
#[test]
fn a_lost_request_or_ack_executes_the_atomic_once() {
    let bed = bed(7, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(7606));
    let target = words_region(s, conn.server.pd, &[5], atomic_target());
    let sink = region(c, conn.client.pd, 8, 0, LW);
    let op = fetch_add(target.addr, target.rkey, 3);

    bed.fabric.drop_data_packets(1).expect("outside a run");
    let t0 = c.now();
    let wc = post_atomic(c, &conn, 1, op, sink.sge(0, 8));
    assert_eq!(c.now() - t0, RETRY + 10 * US);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::SUCCESS, WcOpcode::FetchAdd)
    );
    assert_eq!((word_at(c, &sink, 0), word_at(s, &target, 0)), (5, 8));

    // The request goes (the first packet), its ATOMIC ACK is lost (the second).
    bed.fabric.drop_data_packets(0).expect("outside a run");
    let sge = [sink.sge(0, 8)];
    let t1 = c.now();
    ok(
        c.post_send(conn.client.qp, &SendWr::new(2, op, Payload::Sges(&sge))),
        "post_send",
    );
    ok(s.sleep(US), "sleep");
    bed.fabric.drop_data_packets(1).expect("outside a run");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t1, RETRY + 10 * US);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (2, WcStatus::SUCCESS, 8)
    );
    assert_eq!(word_at(c, &sink, 0), 8, "the kept value before, replayed");
    ok(s.sleep(Duration::from_secs(10)), "sleep");
    assert_eq!(word_at(s, &target, 0), 11, "added once");
    assert!(drain(c, &conn.client).is_empty());
    let trace = bed.fabric.trace_text();
    assert_eq!(
        trace.matches("ATOMIC_ACK psn 1 orig 0x8").count(),
        3,
        "{trace}"
    );
}

/// UC has no atomic opcode: librxe takes the post, the requester fails it at once with
/// LOC_QP_OP_ERR and moves the QP to ERROR; nothing reaches the peer.
#[test]
fn uc_takes_an_atomic_then_fails_it_locally() {
    let bed = bed(8, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        qp_type: Some(QpType::Uc),
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7607), &setup);
    let target = words_region(s, conn.server.pd, &[5], atomic_target());
    let sink = region(c, conn.client.pd, 8, 0, LW);
    let t0 = c.now();
    let op = cmp_swap(target.addr, target.rkey, 5, 6);
    let wc = post_atomic(c, &conn, 1, op, sink.sge(0, 8));
    assert_eq!(c.now() - t0, Duration::ZERO);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (1, WcStatus::LOC_QP_OP_ERR, WcOpcode::CompSwap, 0)
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    ok(s.sleep(Duration::from_secs(1)), "sleep");
    assert_eq!(word_at(s, &target, 0), 5);
}

/// A fenced request waits for every read and atomic before it (rxe's `rxe_wqe_is_fenced`):
/// a fenced RDMA write behind an atomic leaves once the ATOMIC ACK is in, and is acknowledged
/// a round trip after that (20 µs after both were posted); unfenced, it leaves at once.
#[test]
fn a_fenced_request_waits_for_the_atomic_before_it() {
    for (fence, done) in [(true, 20 * US), (false, 10 * US)] {
        let bed = bed(9, Transport::Roce);
        let (s, c) = (bed.server(), bed.client());
        let conn = connect(s, c, addr(7608));
        let target = words_region(s, conn.server.pd, &[1], atomic_target());
        let written = region(s, conn.server.pd, 4, 0, LW | AccessFlags::REMOTE_WRITE);
        let sink = region(c, conn.client.pd, 8, 0, LW);
        let source = region(c, conn.client.pd, 4, b'w', LW);
        let (atomic_sge, write_sge) = ([sink.sge(0, 8)], [source.sge(0, 4)]);
        let t0 = c.now();
        let op = fetch_add(target.addr, target.rkey, 1);
        ok(
            c.post_send(
                conn.client.qp,
                &SendWr::new(1, op, Payload::Sges(&atomic_sge)),
            ),
            "atomic",
        );
        let write = SendOp::RdmaWrite {
            remote_addr: written.addr,
            rkey: written.rkey,
        };
        let wr = SendWr {
            fence,
            ..SendWr::new(2, write, Payload::Sges(&write_sge))
        };
        ok(c.post_send(conn.client.qp, &wr), "write");
        assert_eq!(next_completion(c, &conn.client).wr_id, 1);
        let wc = next_completion(c, &conn.client);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::SUCCESS));
        assert_eq!(c.now() - t0, done, "fence {fence}");
    }
}

/// rxe's requester leaves an atomic's entries alone until its completer writes the value
/// before into them (`do_atomic`): an entry the QP may not write (a region without
/// LOCAL_WRITE) fails only then, LOC_PROT_ERR a round trip after the post and the QP in
/// ERROR, while the peer has executed the atomic (read in rxe_comp.c, not measured).
#[test]
fn an_entry_that_cannot_take_the_value_before_fails_after_the_peer_executed() {
    let bed = bed(10, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(7609));
    let target = words_region(s, conn.server.pd, &[5], atomic_target());
    let sink = region(c, conn.client.pd, 8, b'.', AccessFlags::NONE);
    let t0 = c.now();
    let wc = post_atomic(
        c,
        &conn,
        1,
        fetch_add(target.addr, target.rkey, 3),
        sink.sge(0, 8),
    );
    assert_eq!(c.now() - t0, 10 * US);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LOC_PROT_ERR));
    assert_eq!(word_at(s, &target, 0), 8, "executed at the peer");
    assert_eq!(word_at(c, &sink, 0), u64::from_ne_bytes([b'.'; 8]));
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
}

/// Resetting a QP empties its responder resources (rxe's `rxe_qp_reset` cleans them, read
/// from Linux 6.1 and 6.12): an atomic executed before the reset, sent again after it at
/// the same PSN to a QP that now expects the PSN after (both moved back with the CM's
/// attributes, the server's `rq_psn` one further), is a duplicate that nothing kept, so the
/// responder drops it (class D) and the requester's one retry runs out: RETRY_EXC_ERR two
/// transport timeouts after the post, the word added once. It was answered with the value
/// kept before the reset (SUCCESS 10 µs after the post, the old value 5 in place of 8).
#[test]
fn a_reset_forgets_the_atomics_kept_for_duplicates() {
    let bed = bed(7, Transport::Roce);
    let seen =
        an_atomic_resent_after_a_reset_finds_nothing_kept(bed.server(), bed.client(), addr(7610));
    assert_eq!(
        (seen.resent.wr_id, seen.resent.status, seen.resent_after),
        (2, WcStatus::RETRY_EXC_ERR, 2 * RETRY)
    );
    assert_eq!((seen.sink, seen.target), (5, 8), "added once");
}
