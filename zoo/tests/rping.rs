//! rdma-core's rping: `rping -P` accepting one request twice (commit 6f8e0056e), and the main
//! thread's hang after a device removal (commit d27efd53f). Both are races between rping's CM
//! thread and the threads it wakes; the simulator's scheduler finds the first by itself: a
//! plain sweep of seeds (each with its drawn schedule, no fault, no sleep added to the port).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmtwin::sync::Mutex;
use cmtwin::{thread, Call, CmError, Errno};
use cmtwin_sim::sweep::{RunContext, Sweep};
use cmtwin_sim::{FaultAction, FaultPlan, SchedConfig, SwarmSpace, Trigger};
use cmtwin_zoo::harness::{
    default_peer, outcome, run_both, run_pair, server_addr, sweep_passes, CLIENT,
};
use cmtwin_zoo::peer::PeerConfig;
use cmtwin_zoo::rping::{client, persistent_server, ClientEnd};
use cmtwin_zoo::Variant;

/// Clients that connect at the same instant, as a burst of `rping -c` runs does.
const CLIENTS: usize = 4;
/// How long each server thread holds its connection.
const HOLD: Duration = Duration::from_millis(1);

/// A persistent server and a burst of clients (threads of one client process): what the
/// server and each client returned.
type Burst = (Result<usize, CmError>, Result<Vec<ClientEnd>, CmError>);

fn burst(ctx: &RunContext, variant: Variant) -> Result<Burst, Box<dyn std::error::Error>> {
    let addr = server_addr();
    run_both(
        ctx,
        move |cm| persistent_server(cm, addr, CLIENTS, HOLD, variant),
        move |cm| clients(cm, addr),
    )
}

/// `CLIENTS` rping clients started together, each on a thread of its own.
fn clients(cm: cmtwin_sim::SimBackend, addr: SocketAddr) -> Result<Vec<ClientEnd>, CmError> {
    let ends = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for n in 0..CLIENTS {
        let (cm, ends) = (cm.clone(), Arc::clone(&ends));
        threads.push(thread::spawn(&format!("client{n}"), move || {
            let end = client(cm, addr, Variant::Fixed)?;
            ends.lock()?.push(end);
            Ok::<(), CmError>(())
        })?);
    }
    for t in threads {
        t.join()??;
    }
    let ends = ends.lock()?.clone();
    Ok(ends)
}

/// The sweep's verdict on one run of the burst: every request accepted once, every client
/// connected and closed.
fn burst_ok(ctx: &RunContext, variant: Variant) -> cmtwin_sim::sweep::Outcome {
    let (served, ends) = burst(ctx, variant)?;
    let served = served?;
    let ends = ends?;
    if served != CLIENTS || ends != [ClientEnd::Done; CLIENTS] {
        return Err(format!("served {served}, clients {ends:?}").into());
    }
    Ok(())
}

/// What the buggy server's failure says: two server threads set up the same id, so the one
/// that comes second finds its QP already made or its accept already done; or, when the
/// second thread is slower, the first one (whose id's context now names the second block)
/// waits forever for an ESTABLISHED that goes to the other block, and the main thread's join
/// of it is reported as a deadlock.
fn caught_twice(error: &str) -> bool {
    error.contains("rdma_create_qp: EINVAL (22): the id already has a QP")
        || error.contains("rdma_accept: EINVAL")
        || error.contains("blocked in JoinHandle::join of the thread 'server")
}

#[test]
fn buggy_persistent_server_accepts_a_request_twice_in_most_seeds_of_a_plain_sweep() {
    let started = Instant::now();
    let report = Sweep::new("rping-P-buggy", |ctx| burst_ok(ctx, Variant::Buggy))
        .seeds(0..1000)
        .max_reduced(1)
        .quiet()
        .run();
    let wall = started.elapsed();
    let caught = report.failures.len();
    eprintln!("rping -P buggy: {caught} of 1000 plain seeds caught it in {wall:?}");
    for f in &report.failures {
        assert!(caught_twice(&f.error), "seed {}: {}", f.seed, f.error);
    }
    assert!(caught > 500, "only {caught} of 1000 seeds caught it");
}

#[test]
fn buggy_persistent_server_is_caught_by_one_seed_in_well_under_a_second() {
    // The first seed of the plain sweep that catches it; a run of it alone, timed.
    let seed = (0..50)
        .find(|&s| burst_ok(&seeded(s), Variant::Buggy).is_err())
        .expect("one of the first 50 seeds catches it");
    let started = Instant::now();
    let err = burst_ok(&seeded(seed), Variant::Buggy).expect_err("the same seed catches it again");
    eprintln!(
        "rping -P buggy caught by seed {seed} in {:?}: {err}",
        started.elapsed()
    );
    assert!(caught_twice(&err.to_string()), "{err}");
}

/// The context a sweep gives `seed`: no fault, the seed's drawn schedule.
fn seeded(seed: u64) -> RunContext {
    RunContext::new(seed, FaultPlan::new()).with_schedule(SchedConfig::drawn(seed))
}

#[test]
fn fixed_persistent_server_serves_every_request_once_in_a_thousand_seeds() {
    let started = Instant::now();
    Sweep::new("rping-P-fixed", |ctx| burst_ok(ctx, Variant::Fixed))
        .seeds(0..1000)
        .quiet()
        .run()
        .assert_ok();
    eprintln!(
        "rping -P fixed: 1000 seeds passed in {:?}",
        started.elapsed()
    );
}

/// Without wake-up latency or preemption (the schedule the simulator had before it drew one
/// per seed) the race never shows: the woken main thread always runs before the next
/// request arrives.
#[test]
fn without_wake_up_latency_the_race_never_shows() {
    for seed in 0..100 {
        let ctx = RunContext::new(seed, FaultPlan::new()).with_schedule(SchedConfig::default());
        burst_ok(&ctx, Variant::Buggy).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

// ----- device removal: the main thread's hang -------------------------------------------------

/// The client's device goes away as the peer's DREQ is sent (the peer disconnects at once
/// after ESTABLISHED): the client's main thread, past ESTABLISHED, waits for the connection's
/// next state, and only the CM thread's DEVICE_REMOVAL can tell it.
fn removal_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Message {
            kind: cmtwin_sim::MessageKind::Dreq,
            nth: 1,
        },
        FaultAction::RemoveDevice {
            host: CLIENT.into(),
        },
    )
}

fn disconnecting_peer() -> PeerConfig {
    PeerConfig {
        disconnect_first: true,
        ..default_peer()
    }
}

fn run_client(ctx: &RunContext, variant: Variant) -> Result<ClientEnd, CmError> {
    let addr = server_addr();
    run_pair(ctx, disconnecting_peer(), move |cm| {
        client(cm, addr, variant)
    })
    .expect("the run itself failed")
}

#[test]
fn buggy_client_hangs_after_a_device_removal_and_is_told_so() {
    let started = Instant::now();
    let result = run_client(&RunContext::new(1, removal_plan()), Variant::Buggy);
    eprintln!(
        "rping removal buggy caught in {:?}: {result:?}",
        started.elapsed()
    );
    let err = result.expect_err("the main thread must hang");
    assert_eq!(
        (err.call, err.errno),
        (Call::SemaphoreAcquire, Errno::EDEADLK)
    );
    assert!(
        err.detail
            .contains("Semaphore::acquire of the semaphore 'cb.sem'"),
        "{}",
        err.detail
    );
}

#[test]
fn fixed_client_ends_after_a_device_removal() {
    let result = run_client(&RunContext::new(1, removal_plan()), Variant::Fixed);
    assert_eq!(result, Ok(ClientEnd::Failed));
}

/// The fix is about the client's own device: the swarm draws device faults of the client and
/// faults of the messages that set the connection up. (A server whose DREQ never arrives, lost
/// until the server gives up on it, leaves any rping client waiting forever, fixed or not:
/// rping has no keep-alive; a sweep with DREQ loss shows it.)
#[test]
fn fixed_client_survives_a_thousand_swarm_worlds() {
    use cmtwin_sim::MessageKind;
    let mut space = SwarmSpace::new(&[CLIENT]).horizon(Duration::from_secs(8));
    space.messages = vec![
        MessageKind::Req,
        MessageKind::Mra,
        MessageKind::Rep,
        MessageKind::Rtu,
        MessageKind::Rej,
    ];
    sweep_passes("rping-removal-fixed", 0..1000, space, |ctx| {
        let addr = server_addr();
        outcome(run_pair(ctx, disconnecting_peer(), move |cm| {
            client(cm, addr, Variant::Fixed)
        })?)
    });
}
