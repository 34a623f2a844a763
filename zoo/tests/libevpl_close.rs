//! libevpl PR 52: a local close recycles the bind while its DISCONNECTED is still owed.

use std::time::{Duration, Instant};

use cmtwin::EventKind;
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::connector::connect_until_peer_closes;
use cmtwin_zoo::harness::{run_both, server_addr, swarm_space, sweep_catches, sweep_passes};
use cmtwin_zoo::libevpl_close::server;
use cmtwin_zoo::Variant;

/// How long the server's loop waits without an event before it exits.
const QUIET: Duration = Duration::from_secs(10);
/// Connections the client makes, one after the other.
const ATTEMPTS: usize = 2;

type Sides = (Result<usize, String>, Result<Vec<EventKind>, String>);

fn run(ctx: &RunContext, variant: Variant) -> Result<Sides, String> {
    run_both(
        ctx,
        move |cm| server(&cm, server_addr(), QUIET, variant).map_err(|e| e.to_string()),
        |cm| connect_until_peer_closes(&cm, server_addr(), ATTEMPTS).map_err(|e| e.to_string()),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn buggy_closes_the_recycled_bind_again_on_the_owed_disconnected() {
    let started = Instant::now();
    let err = run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy)
        .expect_err("the buggy server must abort");
    let wall = started.elapsed();
    eprintln!("libevpl 52 buggy caught in {wall:?}: {err}");
    assert!(
        err.contains("process passive panicked: bind 0 already closed"),
        "{err}"
    );
}

#[test]
fn fixed_waits_for_the_disconnected_before_finalizing() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed).unwrap();
    assert_eq!(client.unwrap(), vec![EventKind::Established; ATTEMPTS]);
    assert_eq!(server.unwrap(), ATTEMPTS);
}

/// Both sides, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant)?;
        client?;
        server?;
        Ok(())
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "libevpl-close-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "libevpl-close-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        "already closed",
    );
}
