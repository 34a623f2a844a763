//! SPDK issue 3592: the close path waits for a DISCONNECTED that can never come.

use std::time::Instant;

use cmtwin::{Call, Errno, EventKind};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::harness::{
    default_peer, outcome, run_pair, server_addr, swarm_space, sweep_catches, sweep_passes, SERVER,
};
use cmtwin_zoo::peer::PeerConfig;
use cmtwin_zoo::spdk_close_wait::{host, QpairState};
use cmtwin_zoo::Variant;

/// The target shuts down: it disconnects each connection once established.
fn shutting_down_target() -> PeerConfig {
    PeerConfig {
        disconnect_first: true,
        ..default_peer()
    }
}

/// The target's CM rejects the first connection request.
fn rejecting_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 0 },
        FaultAction::RejectRequests {
            host: SERVER.into(),
            count: 1,
        },
    )
}

fn run(plan: FaultPlan, peer: PeerConfig, variant: Variant) -> Result<QpairState, cmtwin::CmError> {
    run_pair(&RunContext::new(1, plan), peer, move |cm| {
        host(&cm, server_addr(), variant)
    })
    .expect("the run itself failed")
}

/// Asserts the buggy close path deadlocked in its wait for DISCONNECTED.
fn assert_deadlocked_waiting(result: Result<QpairState, cmtwin::CmError>) {
    let err = result.expect_err("the buggy close path must deadlock");
    assert_eq!((err.call, err.errno), (Call::GetCmEvent, Errno::EDEADLK));
    assert!(
        err.detail.contains("blocked in rdma_get_cm_event on ch"),
        "{}",
        err.detail
    );
}

#[test]
fn buggy_waits_forever_when_the_target_disconnected_first() {
    let started = Instant::now();
    let result = run(FaultPlan::new(), shutting_down_target(), Variant::Buggy);
    let wall = started.elapsed();
    eprintln!("spdk 3592 (peer first) buggy caught in {wall:?}: {result:?}");
    assert_deadlocked_waiting(result);
}

#[test]
fn buggy_waits_forever_after_a_rejected_connect() {
    let started = Instant::now();
    let result = run(rejecting_plan(), default_peer(), Variant::Buggy);
    let wall = started.elapsed();
    eprintln!("spdk 3592 (rejected) buggy caught in {wall:?}: {result:?}");
    assert_deadlocked_waiting(result);
}

#[test]
fn fixed_closes_in_both_cases_and_without_faults() {
    let got = run(FaultPlan::new(), shutting_down_target(), Variant::Fixed);
    assert_eq!(got.unwrap(), QpairState::Failed(EventKind::Disconnected));
    let got = run(rejecting_plan(), default_peer(), Variant::Fixed);
    assert_eq!(got.unwrap(), QpairState::ConnectFailed(EventKind::Rejected));
    for variant in [Variant::Buggy, Variant::Fixed] {
        let got = run(FaultPlan::new(), default_peer(), variant);
        assert_eq!(got.unwrap(), QpairState::Connected);
    }
}

/// The host against a default target, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        outcome(run_pair(ctx, default_peer(), move |cm| {
            host(&cm, server_addr(), variant)
        })?)
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "spdk-close-wait-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    let caught = "rdma_get_cm_event: EDEADLK";
    sweep_catches(
        "spdk-close-wait-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        caught,
    );
}
