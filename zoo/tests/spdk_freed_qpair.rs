//! SPDK issue 2515: a qpair freed right after `rdma_disconnect`; its DISCONNECTED lands on the
//! freed record.

use std::time::Instant;

use cmtwin::EventKind;
use cmtwin_sim::sweep::{RunContext, Sweep};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::harness::{default_peer, outcome, run_pair, server_addr, swarm_space};
use cmtwin_zoo::spdk_freed_qpair::{controller, Caught};
use cmtwin_zoo::Variant;

fn run(seed: u64, plan: FaultPlan, variant: Variant) -> Result<bool, Caught> {
    run_pair(&RunContext::new(seed, plan), default_peer(), move |cm| {
        controller(&cm, server_addr(), variant)
    })
    .expect("the run itself failed")
}

#[test]
fn buggy_gets_the_disconnected_of_the_freed_io_qpair() {
    let started = Instant::now();
    let result = run(1, FaultPlan::new(), Variant::Buggy);
    let wall = started.elapsed();
    eprintln!("spdk 2515 buggy caught in {wall:?}: {result:?}");
    match result {
        Err(Caught::EventOnFreedRecord { kind, context }) => {
            assert_eq!((kind, context), (EventKind::Disconnected, 2));
        }
        other => panic!("expected the event on the freed record, got {other:?}"),
    }
    assert!(wall.as_millis() < 1000, "took {wall:?}");
}

#[test]
fn fixed_deletes_the_io_qpair_cleanly() {
    assert!(run(1, FaultPlan::new(), Variant::Fixed).unwrap());
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    let started = Instant::now();
    let report = Sweep::new("spdk-freed-qpair-buggy", |ctx| {
        outcome(run_pair(ctx, default_peer(), |cm| {
            controller(&cm, server_addr(), Variant::Buggy)
        })?)
    })
    .seeds(0..100)
    .swarm(swarm_space())
    .quiet()
    .max_reduced(1)
    .run();
    eprintln!(
        "spdk 2515 buggy: {} swarm runs in {:?}, {} caught",
        report.runs,
        started.elapsed(),
        report.failures.len()
    );
    assert!(!report.failures.is_empty());
    for f in &report.failures {
        assert!(f.error.contains("whose record was freed"), "{}", f.error);
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    let started = Instant::now();
    Sweep::new("spdk-freed-qpair-fixed", |ctx| {
        outcome(run_pair(ctx, default_peer(), |cm| {
            controller(&cm, server_addr(), Variant::Fixed)
        })?)
    })
    .seeds(0..1000)
    .swarm(swarm_space())
    .quiet()
    .run()
    .assert_ok();
    eprintln!(
        "spdk 2515 fixed: 1000 swarm seeds in {:?}",
        started.elapsed()
    );
}
