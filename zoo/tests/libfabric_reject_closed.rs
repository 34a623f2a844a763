//! libfabric commit de5b92d00: `fi_reject` through an id its endpoint already destroyed.

use std::time::{Duration, Instant};

use cmtwin::{Call, CmError, Errno, EventKind};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::connector::connect_times;
use cmtwin_zoo::harness::{
    outcome, run_both, server_addr, swarm_space, sweep_catches, sweep_passes,
};
use cmtwin_zoo::libfabric_reject_closed::{refusing_server, RejectResult};
use cmtwin_zoo::Variant;

/// Connection attempts the client makes.
const ATTEMPTS: usize = 2;
/// How long the server waits without a request before it closes.
const QUIET: Duration = Duration::from_secs(10);

type Sides = (
    Result<Vec<RejectResult>, CmError>,
    Result<Vec<EventKind>, CmError>,
);

fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        move |cm| refusing_server(&cm, server_addr(), QUIET, variant),
        |cm| connect_times(&cm, server_addr(), ATTEMPTS),
    )
    .expect("the run itself failed")
}

#[test]
fn buggy_rejects_through_the_destroyed_id() {
    let started = Instant::now();
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy);
    let wall = started.elapsed();
    let err = server.expect_err("the buggy reject must use the stale id");
    eprintln!("libfabric de5b92d00 buggy caught in {wall:?}: {err}");
    assert_eq!((err.call, err.errno), (Call::Reject, Errno::ENOENT));
    assert!(err.detail.contains("is not a live id"), "{}", err.detail);
    // The endpoint's close already ended the request: the CM rejected it (reason 28).
    assert_eq!(client.unwrap()[0], EventKind::Rejected);
}

#[test]
fn fixed_reject_returns_busy_and_the_close_rejected_the_request() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed);
    assert_eq!(server.unwrap(), vec![RejectResult::Busy; ATTEMPTS]);
    assert_eq!(client.unwrap(), vec![EventKind::Rejected; ATTEMPTS]);
}

/// Both sides, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant);
        outcome(server)?;
        outcome(client)
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "libfabric-reject-closed-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "libfabric-reject-closed-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        "rdma_reject: ENOENT",
    );
}
