//! DiSNI issue 41: an unhandled ROUTE_ERROR leaves `connect` waiting forever (InfiniBand).

use std::time::Instant;

use cmtwin::{Call, CmError, Errno, Transport};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::disni_route_error::{client, ConnectEnd};
use cmtwin_zoo::harness::{
    default_peer, infiniband_swarm_space, outcome, run_pair_on, server_addr, sweep_catches,
    sweep_passes, CLIENT,
};
use cmtwin_zoo::Variant;

/// The trigger: the client's first SA path query fails (no path): ROUTE_ERROR -EINVAL.
fn failing_path_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 0 },
        FaultAction::FailPathQueries {
            host: CLIENT.into(),
            count: 1,
            timeout: false,
        },
    )
}

fn run(ctx: &RunContext, variant: Variant) -> Result<ConnectEnd, CmError> {
    run_pair_on(ctx, Transport::InfiniBand, default_peer(), move |cm| {
        client(&cm, server_addr(), variant)
    })
    .expect("the run itself failed")
}

#[test]
fn buggy_connect_waits_forever_after_route_error() {
    let started = Instant::now();
    let err = run(&RunContext::new(1, failing_path_plan()), Variant::Buggy)
        .expect_err("the buggy connect must never return");
    let wall = started.elapsed();
    eprintln!("disni 41 buggy caught in {wall:?}: {err}");
    assert_eq!((err.call, err.errno), (Call::GetCmEvent, Errno::EDEADLK));
    assert!(
        err.detail
            .contains("process active blocked in rdma_get_cm_event on ch"),
        "{}",
        err.detail
    );
}

#[test]
fn fixed_connect_throws_after_route_error() {
    let got = run(&RunContext::new(1, failing_path_plan()), Variant::Fixed);
    assert_eq!(got.unwrap(), ConnectEnd::Failed("resolve route failed"));
}

#[test]
fn both_connect_without_faults() {
    for variant in [Variant::Buggy, Variant::Fixed] {
        let got = run(&RunContext::new(1, FaultPlan::new()), variant);
        assert_eq!(got.unwrap(), ConnectEnd::Connected);
    }
}

/// The client against a default peer on InfiniBand, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        outcome(run_pair_on(
            ctx,
            Transport::InfiniBand,
            default_peer(),
            move |cm| client(&cm, server_addr(), variant),
        )?)
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "disni-route-error-fixed",
        0..1000,
        infiniband_swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "disni-route-error-buggy",
        0..100,
        infiniband_swarm_space(),
        swept(Variant::Buggy),
        "blocked in rdma_get_cm_event",
    );
}
