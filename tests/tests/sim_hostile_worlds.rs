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
