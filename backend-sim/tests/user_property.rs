//! A user's property tests over the simulator: one with a fault plan and a replayable seed,
//! one sweeping a thousand seeds, each with its own swarm of faults. The README shows this
//! file from `use` on; `cargo test -p cmtwin-sim --test user_property` runs it.

use cmtwin::Transport;
use cmtwin_sim::scenarios::connect_teardown;
use cmtwin_sim::sweep::{Outcome, RunContext, Sweep};
use cmtwin_sim::{FaultAction, FaultPlan, MessageKind, SwarmSpace, Trigger};

/// The property: your protocol, on a fabric built by `ctx` (which applies the run's plan).
/// Here the bundled connect/accept/disconnect/teardown stands in for it.
fn my_protocol_holds(ctx: &RunContext) -> Outcome {
    connect_teardown(ctx, Transport::Roce)
}

#[test]
fn survives_a_lost_rep_and_a_device_removal() {
    let plan = FaultPlan::new()
        .scheduled(
            Trigger::Message {
                kind: MessageKind::Rep,
                nth: 1,
            },
            FaultAction::DropMessages {
                kind: MessageKind::Rep,
                count: 1,
            },
        )
        .scheduled(
            Trigger::Time { at_ms: 3000 },
            FaultAction::RemoveDevice {
                host: "server".into(),
            },
        );
    // CMTWIN_SEED / CMTWIN_PLAN replay a run; a failure prints the line that does.
    cmtwin_sim::seeded_test!(|_| plan.clone(), |seed, plan: &FaultPlan| {
        my_protocol_holds(&RunContext::new(seed, plan.clone()))
    });
}

#[test]
fn survives_a_thousand_swarm_worlds() {
    // Spread over the cores; CMTWIN_SHARD=i/n splits it between CI jobs.
    Sweep::new("my-protocol", my_protocol_holds)
        .seeds(0..1000)
        .swarm(SwarmSpace::new(&["server", "client"]))
        .run()
        .assert_ok();
}
