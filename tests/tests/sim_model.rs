//! The CM model (`cmtwin_tests::cm_model`) on the simulator: thousands of cases on RoCE,
//! InfiniBand and iWARP fabrics of three hosts (with CM messages lost on IB and RoCE), every
//! call's result and every event checked exactly against the model's prediction. Each test prints its coverage (share of cases reaching each event
//! kind, faults applied, cases with two hosts connected at once, calls made, errnos predicted
//! and met) and checks it against the generator's weights.
//! `CMTWIN_MODEL_CASES=<n>` runs more (or fewer) cases.

use cmtwin::{EventKind, Transport};
use cmtwin_sim::SimConfig;
use cmtwin_tests::cm_model::{campaign, run_case, Draws, Stats};
use cmtwin_tests::SimBed;

/// The campaign's seed (fixed: the same cases, and the same statistics, on every run).
const SEED: u64 = 0x00c3_0de1;

fn cases() -> u32 {
    std::env::var("CMTWIN_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

fn run(transport: Transport) -> Stats {
    run_with(transport, SimConfig::default(), "Linux 6.1 profile")
}

fn run_with(transport: Transport, config: SimConfig, profile: &str) -> Stats {
    // Three hosts; the simulator loses CM messages on IB and RoCE (iWARP's ride TCP).
    let draws = Draws::for_bed(&SimBed::with_third_host(0, transport, config.clone()));
    let stats = campaign(cases(), SEED, 2000, draws, |seed, ops| {
        run_case(
            &SimBed::with_third_host(seed, transport, config.clone()),
            ops,
        )
    });
    eprintln!("{transport:?} ({profile}): {stats}");
    stats
}

/// Asserts that at least `min` of the cases reached `kind`.
fn assert_share(stats: &Stats, kind: EventKind, min: f64) {
    let share = stats.share(kind);
    assert!(
        share >= min,
        "{kind} reached in {:.1}% of the cases, expected at least {:.0}%",
        share * 100.0,
        min * 100.0
    );
}

/// What every transport reaches: most cases connect and disconnect; requests are refused and
/// misuse is predicted too.
fn assert_common(stats: &Stats) {
    assert_eq!(stats.cases, u64::from(cases()));
    assert_share(stats, EventKind::AddrResolved, 0.9);
    assert_share(stats, EventKind::ConnectRequest, 0.85);
    assert_share(stats, EventKind::Established, 0.6);
    assert_share(stats, EventKind::Disconnected, 0.5);
    assert_share(stats, EventKind::Rejected, 0.1);
    let two = stats.two_hosts_connected as f64 / stats.cases as f64;
    assert!(
        two >= 0.1,
        "two hosts connected at once in {:.1}% of the cases",
        two * 100.0
    );
    assert!(
        stats.errnos.len() >= 10,
        "only {} (call, errno) pairs predicted",
        stats.errnos.len()
    );
}

/// On IB and RoCE about one lifecycle in three loses a CM message (and then gets the same
/// events, later); iWARP has no such fault.
fn assert_faults(stats: &Stats, transport: Transport) {
    let share = stats.faulted as f64 / stats.cases as f64;
    if transport == Transport::Iwarp {
        assert_eq!(stats.faults_applied(), 0);
    } else {
        assert!(
            share >= 0.2,
            "faults applied in {:.1}% of the cases",
            share * 100.0
        );
    }
}

#[test]
fn model_holds_on_roce() {
    let stats = run(Transport::Roce);
    assert_common(&stats);
    assert_faults(&stats, Transport::Roce);
    assert_share(&stats, EventKind::TimewaitExit, 0.5);
    // UD exchanges: no listener, a reject or an unanswered request's destruction.
    assert_share(&stats, EventKind::Unreachable, 0.03);
}

#[test]
fn model_holds_on_infiniband() {
    let stats = run(Transport::InfiniBand);
    assert_common(&stats);
    assert_faults(&stats, Transport::InfiniBand);
    assert_share(&stats, EventKind::TimewaitExit, 0.5);
    assert_share(&stats, EventKind::Unreachable, 0.03);
}

/// The twins of the Linux 6.12 beds (rxe-6.12, siw-6.12: shorter timewait and REQ retries).
#[test]
fn model_holds_on_the_linux612_profile() {
    let roce = run_with(Transport::Roce, SimConfig::linux612(), "Linux 6.12 profile");
    assert_common(&roce);
    assert_share(&roce, EventKind::TimewaitExit, 0.5);
    let iwarp = run_with(
        Transport::Iwarp,
        SimConfig::linux612(),
        "Linux 6.12 profile",
    );
    assert_common(&iwarp);
    assert_eq!(iwarp.share(EventKind::TimewaitExit), 0.0);
}

/// iWARP has no timewait (CM-SEMANTICS §5.3): no case may reach TIMEWAIT_EXIT.
#[test]
fn model_holds_on_iwarp() {
    let stats = run(Transport::Iwarp);
    assert_common(&stats);
    assert_faults(&stats, Transport::Iwarp);
    assert_eq!(stats.share(EventKind::TimewaitExit), 0.0);
}

/// The same seed gives the same cases, outcomes and statistics.
#[test]
fn campaign_is_deterministic() {
    let draws = Draws::for_bed(&SimBed::new(0));
    let once = |_| {
        campaign(200, SEED, 0, draws, |seed, ops| {
            run_case(&SimBed::new(seed), ops)
        })
    };
    assert_eq!(once(0), once(1));
}

/// An accept with too much private data fails, and the kernel's failure path rejects the
/// request (cma.c's `rdma_accept`, CM-SEMANTICS §6.1, §4.10): the client gets REJECTED 28 and
/// a second accept is EINVAL. The model once predicted that the failed accept changed nothing
/// (found when the campaign's cases changed).
#[test]
fn accept_over_maximum_rejects_the_request() {
    use cmtwin_tests::cm_model::op::{Op::*, OverMaxCall, Target::*};
    let ops = [
        NewClient { slot: 0, ud: false },
        ResolveAddr(Client(0)),
        ResolveRoute(Client(0)),
        CreateQp(Client(0)),
        Connect {
            target: Client(0),
            param: false,
            len: 0,
        },
        CreateQp(Child(0)),
        OverMax {
            target: Child(0),
            call: OverMaxCall::Accept,
        },
        Accept {
            target: Child(0),
            len: 0,
        },
        Disconnect(Client(0)),
    ];
    for transport in [Transport::Roce, Transport::InfiniBand, Transport::Iwarp] {
        let stats = run_case(&SimBed::with_transport(0, transport), &ops)
            .unwrap_or_else(|e| panic!("{transport:?}: {e}"));
        assert!(
            stats.reached.contains(&EventKind::Rejected),
            "{transport:?}"
        );
        assert!(
            !stats.reached.contains(&EventKind::Established),
            "{transport:?}"
        );
    }
}

/// A message is lost only while no other exchange is pending (cm_model's driver): here a UDP
/// id's SIDR request is left unanswered, so the later REQ loss is not applied; the fuzz target
/// `cm_model` found that during the seconds a lost message costs, the pending request is
/// retransmitted, and a retransmission arriving just after the server destroyed its child is a
/// new CONNECT_REQUEST, which the model does not predict.
#[test]
fn no_message_is_lost_while_another_exchange_is_pending() {
    use cmtwin_tests::cm_model::op::{LossyCall, Op::*, Target::*};
    let lifecycle = |slot, ud| {
        [
            NewClient { slot, ud },
            ResolveAddr(Client(slot)),
            ResolveRoute(Client(slot)),
            CreateQp(Client(slot)),
        ]
    };
    let mut ops = lifecycle(0, true).to_vec();
    ops.push(Connect {
        target: Client(0),
        param: true,
        len: 16,
    });
    ops.extend(lifecycle(1, false));
    ops.push(Lossy {
        target: Client(1),
        call: LossyCall::ConnectReq,
        lost: 1,
    });
    let pending = run_case(&SimBed::new(0), &ops).expect("the model holds");
    assert!(pending.faults.is_empty(), "{:?}", pending.faults);
    // Without the pending request, the loss is applied.
    let alone = run_case(&SimBed::new(0), &ops[5..]).expect("the model holds");
    assert_eq!(alone.faults.values().sum::<u64>(), 1);
}
