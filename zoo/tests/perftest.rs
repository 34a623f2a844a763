//! perftest PR 60: an error event left unacknowledged makes `rdma_destroy_id` block forever.

use std::time::Instant;

use cmtwin::{Call, Errno, EventKind};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::harness::{
    default_peer, outcome, run_pair, server_addr, swarm_space, sweep_catches, sweep_passes, SERVER,
};
use cmtwin_zoo::perftest::{client, Connection};
use cmtwin_zoo::Variant;

/// The trigger: the server's CM rejects the first connection request (REJ reason 28).
fn rejecting_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 0 },
        FaultAction::RejectRequests {
            host: SERVER.into(),
            count: 1,
        },
    )
}

fn run(ctx: &RunContext, variant: Variant) -> Result<Connection, cmtwin::CmError> {
    run_pair(ctx, default_peer(), move |cm| {
        client(&cm, server_addr(), variant)
    })
    .expect("the run itself failed")
}

#[test]
fn buggy_destroy_id_is_refused_for_the_unacknowledged_rejected() {
    let started = Instant::now();
    let err = run(&RunContext::new(1, rejecting_plan()), Variant::Buggy)
        .expect_err("the buggy cleanup must fail");
    let wall = started.elapsed();
    assert_eq!((err.call, err.errno), (Call::DestroyId, Errno::EBUSY));
    assert!(err.detail.contains("REJECTED"), "{}", err.detail);
    eprintln!("perftest buggy caught in {wall:?}: {err}");
}

#[test]
fn fixed_cleans_up_after_the_rejected() {
    let got = run(&RunContext::new(1, rejecting_plan()), Variant::Fixed);
    assert_eq!(got.unwrap(), Connection::Failed(EventKind::Rejected));
}

#[test]
fn both_connect_and_clean_up_without_faults() {
    for variant in [Variant::Buggy, Variant::Fixed] {
        let got = run(&RunContext::new(1, FaultPlan::new()), variant);
        assert_eq!(got.unwrap(), Connection::Established);
    }
}

/// The buggy client against a default peer, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        outcome(run_pair(ctx, default_peer(), move |cm| {
            client(&cm, server_addr(), variant)
        })?)
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "perftest-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    let caught = "rdma_destroy_id: EBUSY";
    sweep_catches(
        "perftest-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        caught,
    );
}
