//! libfabric PR 9622: one id leaked per rejected connection request.

use std::time::{Duration, Instant};

use cmtwin::{Call, CmError, Errno, EventKind};
use cmtwin_sim::sweep::RunContext;
use cmtwin_sim::FaultPlan;
use cmtwin_zoo::connector::connect_times;
use cmtwin_zoo::harness::{outcome, run_both, server_addr, swarm_space, sweep_passes};
use cmtwin_zoo::libfabric_reject_leak::rejecting_server;
use cmtwin_zoo::Variant;

/// Connection attempts the client makes.
const ATTEMPTS: usize = 3;
/// How long the server waits without a request before it closes.
const QUIET: Duration = Duration::from_secs(10);

type Sides = (Result<usize, CmError>, Result<Vec<EventKind>, CmError>);

fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        move |cm| rejecting_server(&cm, server_addr(), QUIET, variant),
        |cm| connect_times(&cm, server_addr(), ATTEMPTS),
    )
    .expect("the run itself failed")
}

/// The ids a refused `destroy_event_channel` names as still on the channel.
fn live_ids(err: &CmError) -> usize {
    let (_, ids) = err
        .detail
        .split_once("ids still use the channel: ")
        .expect("the refusal names the ids");
    ids.split(", ").count()
}

#[test]
fn buggy_leaks_one_id_per_rejected_request() {
    let started = Instant::now();
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy);
    let wall = started.elapsed();
    assert_eq!(client.unwrap(), vec![EventKind::Rejected; ATTEMPTS]);
    let err = server.expect_err("closing the endpoint must find the leaked ids");
    eprintln!("libfabric 9622 buggy caught in {wall:?}: {err}");
    assert_eq!(
        (err.call, err.errno),
        (Call::DestroyEventChannel, Errno::EBUSY)
    );
    assert_eq!(live_ids(&err), ATTEMPTS);
}

#[test]
fn fixed_destroys_every_rejected_id() {
    let (server, client) = run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed);
    assert_eq!(client.unwrap(), vec![EventKind::Rejected; ATTEMPTS]);
    assert_eq!(server.unwrap(), ATTEMPTS);
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "libfabric-reject-leak-fixed",
        0..1000,
        swarm_space(),
        |ctx| {
            let (server, client) = run(ctx, Variant::Fixed);
            outcome(client)?;
            outcome(server)
        },
    );
}
