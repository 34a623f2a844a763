//! LDMS PR 556: TIMEWAIT_EXIT delivered on the id of a passive endpoint freed on DISCONNECTED.

use std::time::{Duration, Instant};

use cmtwin::EventKind;
use cmtwin_sim::sweep::{Outcome, RunContext, Sweep};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::connector::connect_times;
use cmtwin_zoo::harness::{
    message_swarm_space, outcome, run_both, server_addr, swarm_space, sweep_catches, sweep_passes,
};
use cmtwin_zoo::ldms_timewait::{daemon, Caught};
use cmtwin_zoo::Variant;

/// How long the daemon waits without an event before it shuts down.
const QUIET: Duration = Duration::from_secs(10);

type Sides = (
    Result<usize, Caught>,
    Result<Vec<EventKind>, cmtwin::CmError>,
);

fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        move |cm| daemon(&cm, server_addr(), QUIET, variant),
        |cm| connect_times(&cm, server_addr(), 1),
    )
    .expect("the run itself failed")
}

#[test]
fn buggy_reads_the_freed_endpoint_on_timewait_exit() {
    let started = Instant::now();
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy);
    let wall = started.elapsed();
    assert_eq!(client.unwrap(), vec![EventKind::Established]);
    eprintln!("ldms 556 buggy caught in {wall:?}: {server:?}");
    match server {
        Err(Caught::EventOnFreedRecord { kind, context }) => {
            assert_eq!((kind, context), (EventKind::TimewaitExit, 1));
        }
        other => panic!("expected TIMEWAIT_EXIT on the freed endpoint, got {other:?}"),
    }
}

#[test]
fn fixed_frees_the_endpoint_and_shuts_down() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed);
    assert_eq!(client.unwrap(), vec![EventKind::Established]);
    assert_eq!(server.unwrap(), 1);
}

/// Both sides of the daemon, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant);
        outcome(client)?;
        outcome(server)
    }
}

#[test]
fn fixed_survives_a_thousand_message_swarm_worlds() {
    let space = message_swarm_space();
    sweep_passes("ldms-timewait-fixed", 0..1000, space, swept(Variant::Fixed));
}

#[test]
fn a_message_swarm_catches_the_buggy_one() {
    let (space, caught) = (message_swarm_space(), "TimewaitExit delivered");
    sweep_catches(
        "ldms-timewait-buggy",
        0..100,
        space,
        swept(Variant::Buggy),
        caught,
    );
}

/// What the upstream fix leaves open: with device, address and neighbour faults, events other
/// than TIMEWAIT_EXIT reach the freed endpoint; none of them is a TIMEWAIT_EXIT.
#[test]
fn the_full_swarm_finds_other_events_on_freed_endpoints() {
    let report = Sweep::new("ldms-timewait-fixed-full", swept(Variant::Fixed))
        .seeds(0..200)
        .swarm(swarm_space())
        .quiet()
        .max_reduced(1)
        .run();
    eprintln!("ldms 556 fixed, full swarm: {}", report.summary());
    assert!(!report.failures.is_empty());
    for f in &report.failures {
        assert!(f.error.contains("whose record was freed"), "{}", f.error);
        assert!(!f.error.contains("TimewaitExit"), "{}", f.error);
    }
}
