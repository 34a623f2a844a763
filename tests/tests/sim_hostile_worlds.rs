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
        plan in fault_plan(&space(), 6),
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
