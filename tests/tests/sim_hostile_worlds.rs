//! A user's property test with `cmtwin_sim::strategies`: the bundled connect/teardown scenario
//! holds in hostile worlds drawn by proptest (seed, transport, schedule, a plan of up to six
//! faults), and a failing world would shrink to its smallest plan. Each case runs twice and
//! its traces are compared byte for byte.

use cmtwin_sim::scenarios::{connect_teardown, space};
use cmtwin_sim::strategies::{fault_plan, schedule, seed, transport};
use cmtwin_sim::sweep::RunContext;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn connect_teardown_holds_in_hostile_worlds(
        seed in seed(),
        transport in transport(),
        schedule in schedule(),
        plan in fault_plan(&space().unregisters(true), 6),
    ) {
        let run = || {
            let ctx = RunContext::new(seed, plan.clone()).with_schedule(schedule);
            let outcome = connect_teardown(&ctx, transport).map_err(|e| e.to_string());
            (outcome, ctx.trace())
        };
        let (outcome, trace) = run();
        prop_assert!(outcome.is_ok(), "{:?}", outcome);
        prop_assert!(trace.as_ref().is_some_and(|t| t.len() > 10), "a trace was kept");
        let (_, again) = run();
        prop_assert_eq!(trace, again);
    }
}

/// Swarm worlds that also reorder CM messages (held back while later ones of their link
/// overtake them): the bundled scenario holds on RoCE and InfiniBand over 300 seeds each.
#[test]
fn connect_teardown_holds_when_cm_messages_are_reordered() {
    use cmtwin_sim::sweep::Sweep;
    use cmtwin_sim::{Fault, FaultPlan};
    let reordering = (0..300)
        .filter(|&seed| {
            FaultPlan::swarm(seed, &space().reorders(true))
                .faults
                .iter()
                .any(|f| matches!(f, Fault::Chance(c) if c.reorder > 0.0))
        })
        .count();
    assert!(reordering > 30, "only {reordering} of 300 plans reorder");
    for transport in [cmtwin::Transport::Roce, cmtwin::Transport::InfiniBand] {
        let report = Sweep::new("reorders", |ctx| connect_teardown(ctx, transport))
            .seeds(0..300)
            .swarm(space().reorders(true))
            .quiet()
            .run();
        report.assert_ok();
    }
}

/// Swarm worlds that also unregister a host's device (its ids destroyed while the port still
/// works, so the peer hears DREQ or REJ) and may restore it: the bundled scenario holds on
/// every transport over 300 seeds each.
#[test]
fn connect_teardown_holds_when_devices_are_unregistered() {
    use cmtwin_sim::sweep::Sweep;
    use cmtwin_sim::{Fault, FaultAction, FaultPlan};
    let unregistering = (0..300)
        .filter(|&seed| {
            FaultPlan::swarm(seed, &space().unregisters(true))
                .faults
                .iter()
                .any(|f| {
                    matches!(
                        f,
                        Fault::Scheduled {
                            action: FaultAction::UnregisterDevice { .. },
                            ..
                        }
                    )
                })
        })
        .count();
    assert!(
        unregistering > 60,
        "only {unregistering} of 300 plans unregister"
    );
    let mut struck_per_transport = Vec::new();
    for transport in [
        cmtwin::Transport::Roce,
        cmtwin::Transport::InfiniBand,
        cmtwin::Transport::Iwarp,
    ] {
        // Worlds in which an unregistration struck while the scenario ran.
        let struck = std::sync::atomic::AtomicUsize::new(0);
        let report = Sweep::new("unregisters", |ctx| {
            let outcome = connect_teardown(ctx, transport);
            let trace = ctx.trace().unwrap_or_default();
            if trace.iter().any(|r| r.to_string().contains("unregistered")) {
                struck.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            outcome
        })
        .seeds(0..300)
        .swarm(space().unregisters(true))
        .quiet()
        .run();
        report.assert_ok();
        struck_per_transport.push(struck.into_inner());
    }
    // Every plan that draws one (102 of 300): the fault is timed within the horizon, which
    // the scenario runs through.
    assert_eq!(
        struck_per_transport,
        [102, 102, 102],
        "worlds an unregistration struck"
    );
}

/// The data faults of seed `seed`'s swarm plan over `space` (data-packet losses and delays)
/// and nothing else: worlds in which the connection itself always comes up.
fn data_faults_of(seed: u64, space: &cmtwin_sim::SwarmSpace) -> cmtwin_sim::FaultPlan {
    use cmtwin_sim::{Fault, FaultAction, FaultPlan};
    let mut plan = FaultPlan::swarm(seed, space);
    plan.faults.retain(|f| {
        matches!(
            f,
            Fault::Scheduled {
                action: FaultAction::DropDataPackets { .. } | FaultAction::DelayDataPackets { .. },
                ..
            }
        )
    });
    plan
}

/// One world: the client sends 16 bytes and disconnects as soon as its SEND completed; the
/// server's receive must complete SUCCESS with the 16 bytes, and only then may it see
/// DISCONNECTED. The run's trace, for the determinism check.
fn send_then_disconnect(
    seed: u64,
    plan: cmtwin_sim::FaultPlan,
    transport: cmtwin::Transport,
) -> String {
    use cmtwin::verbs::{AccessFlags, DataPath, Payload, SendOp, SendWr, WcStatus};
    use cmtwin::{CmBackend, EventKind, Wait};
    use cmtwin_tests::datapath::{connect, drain, next_completion, post_recv_all, region};
    let ctx = cmtwin_sim::sweep::RunContext::new(seed, plan.clone());
    let server_ip: std::net::IpAddr = "10.0.0.1".parse().expect("literal");
    let builder = ctx.builder().host("server", transport, &[server_ip]).host(
        "client",
        transport,
        &["10.0.0.2".parse().expect("literal")],
    );
    let fabric = ctx.build(builder).expect("a fabric");
    let (s, c) = (fabric.backend("server"), fabric.backend("client"));
    let conn = connect(&s, &c, std::net::SocketAddr::new(server_ip, 7400));
    let rx = region(&s, conn.server.pd, 16, 0, AccessFlags::LOCAL_WRITE);
    post_recv_all(&s, conn.server.qp, 1, &rx);
    let tx = region(&c, conn.client.pd, 16, 7, AccessFlags::NONE);
    let sge = [tx.sge(0, 16)];
    let send = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
    c.post_send(conn.client.qp, &send).expect("post_send");
    let sent = next_completion(&c, &conn.client);
    let why = format!("seed {seed} {transport:?} plan {}", plan.to_json());
    assert_eq!((sent.wr_id, sent.status), (2, WcStatus::SUCCESS), "{why}");
    c.disconnect(conn.client.id).expect("rdma_disconnect");
    let got = next_completion(&s, &conn.server);
    assert_eq!(
        (got.wr_id, got.status, got.byte_len),
        (1, WcStatus::SUCCESS, 16),
        "{why}"
    );
    let patience = Wait::Timeout(std::time::Duration::from_secs(60));
    let ev = cmtwin::expect_event(&s, conn.server.channel, EventKind::Disconnected, patience);
    assert_eq!(ev.map(|e| e.status).ok(), Some(0), "{why}");
    assert!(drain(&s, &conn.server).is_empty(), "{why}");
    fabric.trace_text()
}

/// Swarm plans that lose or delay data packets (`SwarmSpace::data_packets`), kept to those
/// faults: a SEND that completed before its sender disconnected reaches the peer before the
/// close, on iWARP (siw completes it at transmit: TCP retransmits it after the close,
/// `verbs/tcp_orphan.rs`) as on RoCE (completed at its acknowledgement), over 150 seeds each,
/// each world run twice and its traces compared.
#[test]
fn a_send_completed_before_a_disconnect_arrives_under_swarm_data_faults() {
    use cmtwin_sim::FaultAction;
    let space = space().data_packets(true);
    let losing = (0..150)
        .filter(|&seed| {
            data_faults_of(seed, &space).faults.iter().any(|f| {
                matches!(
                    f,
                    cmtwin_sim::Fault::Scheduled {
                        action: FaultAction::DropDataPackets { .. },
                        ..
                    }
                )
            })
        })
        .count();
    assert!(losing > 30, "only {losing} of 150 plans lose data packets");
    for transport in [cmtwin::Transport::Iwarp, cmtwin::Transport::Roce] {
        for seed in 0..150 {
            let plan = data_faults_of(seed, &space);
            let trace = send_then_disconnect(seed, plan.clone(), transport);
            assert_eq!(
                trace,
                send_then_disconnect(seed, plan, transport),
                "seed {seed}"
            );
        }
    }
}
