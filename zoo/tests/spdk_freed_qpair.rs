//! SPDK issue 2515: a qpair freed right after `rdma_disconnect`; its DISCONNECTED lands on the
//! freed record.

use std::time::Instant;

use cmtwin::EventKind;
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::harness::{
    default_peer, outcome, run_pair, server_addr, swarm_space, sweep_catches, sweep_passes,
};
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
}

#[test]
fn fixed_deletes_the_io_qpair_cleanly() {
    assert!(run(1, FaultPlan::new(), Variant::Fixed).unwrap());
}

/// The controller against a default target, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        outcome(run_pair(ctx, default_peer(), move |cm| {
            controller(&cm, server_addr(), variant)
        })?)
    }
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    let caught = "whose record was freed";
    sweep_catches(
        "spdk-freed-qpair-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        caught,
    );
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "spdk-freed-qpair-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}
