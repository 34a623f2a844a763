//! The mckey port (`cmtwin_tests::ports::mckey`) on the simulator: a sender and receivers on
//! hosts of their own join one group; every receiver takes every datagram, and a lost one is
//! a receiver's clear error when its wait ends, not a hang.
//!
//! Times: the wire's latency is 5 µs without jitter; RoCE joins take no time, so every member
//! has joined at 0; the sender sends after mckey's 3 s pause, its sends completing as they are
//! posted, and every copy reaches its receiver 5 µs later.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::MULTICAST_QPN;
use cmtwin::RDMA_UDP_QKEY;
use cmtwin_sim::{Fabric, FabricError, SimBackend, SimConfig};
use cmtwin_tests::ports::mckey::{member, Options, Role, Summary};
use cmtwin_tests::ports::session::STEP;
use cmtwin_tests::ports::simulated::{run_group, GroupProcess, GroupRun};

const US: Duration = Duration::from_micros(1);
const GROUP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 5, 6, 7)), 0);
const HOSTS: [&str; 4] = ["sender", "receiver-1", "receiver-2", "receiver-3"];

/// The sender (first) and `receivers` receivers, each on its host 10.0.0.<n>, on a wire
/// without jitter, with `faults` applied before the run.
fn run(
    seed: u64,
    receivers: usize,
    opts: Options,
    faults: impl FnOnce(&Fabric) -> Result<(), FabricError>,
) -> GroupRun<Summary> {
    let processes = HOSTS[..=receivers]
        .iter()
        .enumerate()
        .map(|(i, &host)| {
            let role = if i == 0 { Role::Sender } else { Role::Receiver };
            GroupProcess {
                host,
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1)),
                body: Box::new(move |cm: &SimBackend, ip| {
                    member(cm, role, Some(SocketAddr::new(ip, 0)), GROUP, &opts)
                }),
            }
        })
        .collect();
    let exact = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    run_group(seed, |b| b.config(exact), faults, processes).expect("a valid fabric")
}

#[test]
fn every_receiver_takes_every_datagram_one_latency_after_the_pause() {
    let opts = Options {
        message_count: 20,
        message_size: 1000,
        ..Options::default()
    };
    let run = run(5, 3, opts, |_| Ok(()));
    assert_eq!(run.outcome, Ok(()));
    let sender = run.results[0].clone().expect("the sender's summary");
    let sent_at = Duration::from_secs(3);
    assert_eq!(
        (sender.joined, sender.sent, sender.received, sender.finished),
        (Duration::ZERO, 20, 0, sent_at)
    );
    assert_eq!(sender.group.qp_num, MULTICAST_QPN);
    assert_eq!(sender.group.qkey, RDMA_UDP_QKEY);
    for got in &run.results[1..] {
        let got = got.clone().expect("a receiver's summary");
        assert_eq!(got.group, sender.group, "one group for all");
        assert_eq!(got.joined, Duration::ZERO);
        assert_eq!((got.sent, got.received), (0, 20));
        assert_eq!(got.sources, vec![(sender.qpn, 20)]);
        assert_eq!(got.finished, sent_at + 5 * US);
    }
    assert_eq!(run.end, sent_at + 5 * US);
}

#[test]
fn a_lost_datagram_is_the_receivers_error_when_its_wait_ends() {
    let run = run(6, 2, Options::default(), |f| f.drop_data_packets(1));
    let err = run.outcome.expect_err("one receiver misses a datagram");
    assert!(err.contains("9 of 10 completions"), "{err}");
    assert!(err.contains("ETIMEDOUT"), "{err}");
    let sender = run.results[0].clone().expect("the sender's summary");
    assert_eq!(sender.sent, 10);
    let done: Vec<&Summary> = run.results[1..].iter().flatten().collect();
    assert_eq!(done.len(), 1, "the other receiver took all ten");
    assert_eq!(done[0].sources, vec![(sender.qpn, 10)]);
    // The failed receiver's last CQ event came with the last datagram it got (sent at 3 s,
    // there 5 µs later); its next wait ended STEP after that.
    assert_eq!(
        run.end,
        Duration::from_secs(3) + 5 * US + STEP,
        "{}",
        run.trace
    );
}

/// mckey's `-l`: the members' QPs are made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`. The
/// exchange is the same to the nanosecond; only the copies of the sender's datagrams to its
/// own QP (sent, and lost: it has no receive posted and is gone by then) are not sent.
#[test]
fn with_l_the_sender_gets_no_copy_of_its_own_datagrams_and_the_exchange_is_unchanged() {
    let plain = run(7, 2, Options::default(), |_| Ok(()));
    let opts = Options {
        block_self_loopback: true,
        ..Options::default()
    };
    let blocked = run(7, 2, opts, |_| Ok(()));
    assert_eq!(blocked.outcome, Ok(()));
    assert_eq!(blocked.results, plain.results);
    assert_eq!(blocked.end, plain.end);
    let q = plain.results[0].as_ref().expect("the sender's summary").qpn;
    let to_itself = format!("send data qp {q:#x} -> qp {q:#x}");
    let own_copies = |trace: &str| trace.matches(&to_itself).count();
    assert_eq!(own_copies(&plain.trace), 10, "{}", plain.trace);
    assert_eq!(own_copies(&blocked.trace), 0, "{}", blocked.trace);
}
