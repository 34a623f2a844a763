//! UCX commit 8083e99: REJECTED(28) on a connected QP-less client makes its disconnect fail.

use std::time::{Duration, Instant};

use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::FaultPlan;
use cmtwin_sim::SchedConfig;
use cmtwin_zoo::harness::{
    default_peer, outcome, run_both, run_pair, server_addr, swarm_space, sweep_catches,
    sweep_passes, sweep_passes_on,
};
use cmtwin_zoo::ucx_connected_reject::{client, closing_server, ClientEnd, UcsStatus, UctError};
use cmtwin_zoo::Variant;

/// How long the server waits without an event before it exits.
const QUIET: Duration = Duration::from_secs(10);

type Sides = (Result<usize, cmtwin::CmError>, Result<ClientEnd, UctError>);

/// The client against a server that closes its side right after accepting.
fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        |cm| closing_server(&cm, server_addr(), QUIET),
        move |cm| client(&cm, server_addr(), variant),
    )
    .expect("the run itself failed")
}

#[test]
fn buggy_cannot_disconnect_after_the_rejected() {
    let started = Instant::now();
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy);
    let wall = started.elapsed();
    eprintln!("ucx 8083e99 buggy caught in {wall:?}: {client:?}");
    assert_eq!(server.unwrap(), 1);
    match client {
        Err(UctError::Ucs { call, status }) => {
            assert_eq!((call, status), ("uct_ep_disconnect", UcsStatus::Rejected))
        }
        other => panic!("expected uct_ep_disconnect to fail, got {other:?}"),
    }
}

#[test]
fn fixed_reports_the_rejected_as_a_disconnect() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed);
    assert_eq!(server.unwrap(), 1);
    let end = ClientEnd::Disconnected(Some(UcsStatus::ConnectionReset));
    assert_eq!(client.unwrap(), end);
}

#[test]
fn both_connect_and_disconnect_with_a_server_that_stays() {
    for variant in [Variant::Buggy, Variant::Fixed] {
        let got = run_pair(
            &RunContext::new(1, FaultPlan::new()),
            default_peer(),
            move |cm| client(&cm, server_addr(), variant),
        )
        .expect("the run itself failed");
        assert_eq!(got.unwrap(), ClientEnd::Disconnected(None));
    }
}

/// The client against the closing server, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant);
        outcome(server)?;
        outcome(client)
    }
}

/// The client against a server that stays, for sweeps.
fn swept_default(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        outcome(run_pair(ctx, default_peer(), move |cm| {
            client(&cm, server_addr(), variant)
        })?)
    }
}

/// Against the closing server the fix holds only while the user confirms the connection
/// (`rdma_establish`) before the server's REJ arrives: with the seed's drawn wake-up latency
/// the confirmation can come after it, `rdma_establish` fails, and UCX (at the fix) sets the
/// endpoint failed with IO_ERROR, so the user's `uct_ep_disconnect` fails again (see
/// `a_late_confirmation_still_fails_the_fixed_logic`). The sweep of the fix therefore runs
/// on the default schedule (no latency); the sweep against the server that stays draws one.
#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes_on(
        "ucx-connected-reject-fixed",
        0..1000,
        swarm_space(),
        Some(SchedConfig::default()),
        swept(Variant::Fixed),
    );
    sweep_passes(
        "ucx-connected-reject-fixed-default-peer",
        0..1000,
        swarm_space(),
        swept_default(Variant::Fixed),
    );
}

/// What the simulator found beyond the upstream fix: a user that confirms the connection after
/// the server's REJ (its thread woken late) gets IO_ERROR from `uct_ep_disconnect` with the
/// fixed logic too. Seed 2 with its drawn schedule and no fault shows it.
#[test]
fn a_late_confirmation_still_fails_the_fixed_logic() {
    let ctx = RunContext::new(2, cmtwin_sim::FaultPlan::new()).with_schedule(SchedConfig::drawn(2));
    assert!(SchedConfig::drawn(2).wake_latency > Duration::ZERO);
    let (server, client) = run(&ctx, Variant::Fixed);
    server.expect("the server side runs as usual");
    match client {
        Err(UctError::Ucs {
            call: "uct_ep_disconnect",
            status: UcsStatus::IoError,
        }) => {}
        other => panic!("expected uct_ep_disconnect's IO_ERROR, got {other:?}"),
    }
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "ucx-connected-reject-buggy",
        0..100,
        swarm_space(),
        swept_default(Variant::Buggy),
        "uct_ep_disconnect returned",
    );
}
