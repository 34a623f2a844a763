//! libfabric issue 12362: a spontaneous UNREACHABLE after DISCONNECTED trips the provider's
//! assertion that the endpoint is not DISCONNECTED.

use std::net::IpAddr;
use std::time::Instant;

use cmtwin::EventKind;
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::harness::{
    default_peer, outcome, run_pair, server_addr, swarm_space, sweep_catches, sweep_passes, CLIENT,
    SERVER_IP,
};
use cmtwin_zoo::libfabric_unreachable::{client, EqEntry};
use cmtwin_zoo::Variant;

/// What the provider's assertion reports when it fails.
const ASSERTION: &str = "ep->state != VRB_DISCONNECTED on Unreachable";

/// The trigger: right after the client's DISCONNECTED is queued, the server's neighbour entry
/// changes its MAC (a RoCE neighbour change; Linux >= 6.0 reports UNREACHABLE on the id).
fn neighbour_change_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Event {
            host: CLIENT.into(),
            event: EventKind::Disconnected,
            nth: 1,
        },
        FaultAction::NeighbourChange {
            ip: IpAddr::from(SERVER_IP),
        },
    )
}

fn run(ctx: &RunContext, variant: Variant) -> Result<Vec<EqEntry>, String> {
    run_pair(ctx, default_peer(), move |cm| {
        client(&cm, server_addr(), variant)
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
}

#[test]
fn buggy_asserts_on_the_unreachable_after_disconnected() {
    let started = Instant::now();
    let err = run(&RunContext::new(1, neighbour_change_plan()), Variant::Buggy)
        .expect_err("the buggy provider must trip its assertion");
    let wall = started.elapsed();
    eprintln!("libfabric 12362 buggy caught in {wall:?}: {err}");
    assert!(err.contains("process active panicked"), "{err}");
    assert!(err.contains(ASSERTION), "{err}");
}

#[test]
fn fixed_skips_the_unreachable_after_disconnected() {
    let got = run(&RunContext::new(1, neighbour_change_plan()), Variant::Fixed);
    assert_eq!(got.unwrap(), vec![EqEntry::Connected, EqEntry::Shutdown]);
}

#[test]
fn both_connect_and_shut_down_without_faults() {
    for variant in [Variant::Buggy, Variant::Fixed] {
        let got = run(&RunContext::new(1, FaultPlan::new()), variant);
        assert_eq!(got.unwrap(), vec![EqEntry::Connected, EqEntry::Shutdown]);
    }
}

/// The client against a default peer, for sweeps.
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
        "libfabric-unreachable-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "libfabric-unreachable-buggy",
        0..200,
        swarm_space(),
        swept(Variant::Buggy),
        "ep->state != VRB_DISCONNECTED",
    );
}
