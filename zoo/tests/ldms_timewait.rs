//! LDMS PR 556: TIMEWAIT_EXIT delivered on the id of a passive endpoint freed on DISCONNECTED.

use std::time::{Duration, Instant};

use cmtwin::EventKind;
use cmtwin_sim::sweep::{RunContext, Sweep};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::connector::connect_times;
use cmtwin_zoo::harness::{message_swarm_space, outcome, run_both, server_addr, swarm_space};
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
    assert!(wall.as_millis() < 1000, "took {wall:?}");
}

#[test]
fn fixed_frees_the_endpoint_and_shuts_down() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed);
    assert_eq!(client.unwrap(), vec![EventKind::Established]);
    assert_eq!(server.unwrap(), 1);
}

fn sweep(
    name: &str,
    variant: Variant,
) -> Sweep<impl Fn(&RunContext) -> cmtwin_sim::sweep::Outcome + Sync> {
    Sweep::new(name, move |ctx| {
        let (server, client) = run(ctx, variant);
        outcome(client)?;
        outcome(server)
    })
    .quiet()
}

#[test]
fn fixed_survives_a_thousand_message_swarm_worlds() {
    let started = Instant::now();
    sweep("ldms-timewait-fixed", Variant::Fixed)
        .seeds(0..1000)
        .swarm(message_swarm_space())
        .run()
        .assert_ok();
    eprintln!(
        "ldms 556 fixed: 1000 message-swarm seeds in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_message_swarm_catches_the_buggy_one() {
    let started = Instant::now();
    let report = sweep("ldms-timewait-buggy", Variant::Buggy)
        .seeds(0..100)
        .swarm(message_swarm_space())
        .max_reduced(1)
        .run();
    eprintln!(
        "ldms 556 buggy: {} message-swarm runs in {:?}, {} caught",
        report.runs,
        started.elapsed(),
        report.failures.len()
    );
    assert!(!report.failures.is_empty());
    for f in &report.failures {
        assert!(f.error.contains("TimewaitExit delivered"), "{}", f.error);
    }
}

/// What the upstream fix leaves open: with device, address and neighbour faults, events other
/// than TIMEWAIT_EXIT reach the freed endpoint; none of them is a TIMEWAIT_EXIT.
#[test]
fn the_full_swarm_finds_other_events_on_freed_endpoints() {
    let report = sweep("ldms-timewait-fixed-full", Variant::Fixed)
        .seeds(0..200)
        .swarm(swarm_space())
        .max_reduced(1)
        .run();
    eprintln!("ldms 556 fixed, full swarm: {}", report.summary());
    assert!(!report.failures.is_empty());
    for f in &report.failures {
        assert!(f.error.contains("whose record was freed"), "{}", f.error);
        assert!(!f.error.contains("TimewaitExit"), "{}", f.error);
    }
}
