//! Runs a ported active side against the [`peer`](crate::peer) on a two-host simulated fabric
//! built from a [`RunContext`] (its seed and fault plan), each side a simulated process.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmtwin::Transport;
use cmtwin_sim::sweep::{Outcome, RunContext, Sweep};
use cmtwin_sim::{Fabric, SchedConfig, SimBackend, SwarmSpace};

use crate::peer::{serve, PeerConfig};

/// The passive host's name.
pub const SERVER: &str = "server";
/// The active host's name.
pub const CLIENT: &str = "client";
/// The passive host's address.
pub const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
/// The active host's address.
pub const CLIENT_IP: [u8; 4] = [10, 0, 0, 2];
/// The port the passive side listens on.
pub const PORT: u16 = 4420;

/// Where the passive side listens.
pub fn server_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::from(SERVER_IP), PORT)
}

/// The peer of the zoo's runs: accepts everything, answers disconnects, exits after 10 s of
/// quiet.
pub fn default_peer() -> PeerConfig {
    PeerConfig {
        addr: server_addr(),
        disconnect_first: false,
        reject_all: false,
        linger: Duration::from_secs(10),
    }
}

/// The faults swarm plans draw from: every fault the simulator has, on both hosts and their
/// addresses, within the first 8 s (the bundled connect-teardown scenarios' space).
pub fn swarm_space() -> SwarmSpace {
    cmtwin_sim::scenarios::space()
}

/// The swarm space for InfiniBand runs: [`swarm_space`] with failing SA path queries too
/// (ROUTE_ERROR).
pub fn infiniband_swarm_space() -> SwarmSpace {
    swarm_space().path_queries(true)
}

/// Swarm plans of message faults only: loss, delay and duplication of every RC message kind,
/// and targeted drops (no device, address or neighbour changes, no rejects).
pub fn message_swarm_space() -> SwarmSpace {
    SwarmSpace::new(&[]).horizon(std::time::Duration::from_secs(8))
}

/// Runs `active` on the client host and the peer on the server host, both over RoCE, in a
/// fabric built by `ctx`, and returns what `active` returned. Fails if the peer failed or the
/// run could not be made.
pub fn run_pair<T: Send + 'static>(
    ctx: &RunContext,
    peer: PeerConfig,
    active: impl FnOnce(SimBackend) -> T + Send + 'static,
) -> Result<T, Box<dyn std::error::Error>> {
    let (served, out) = run_both(ctx, move |cm| serve(&cm, &peer), active)?;
    served?;
    Ok(out)
}

/// Runs `passive` on the server host and `active` on the client host, both over RoCE, in a
/// fabric built by `ctx`, each as a simulated process, and returns what each returned.
pub fn run_both<S: Send + 'static, T: Send + 'static>(
    ctx: &RunContext,
    passive: impl FnOnce(SimBackend) -> S + Send + 'static,
    active: impl FnOnce(SimBackend) -> T + Send + 'static,
) -> Result<(S, T), Box<dyn std::error::Error>> {
    run_both_on(ctx, Transport::Roce, passive, active)
}

/// Runs `active` on the client host and the peer on the server host, both over `transport`
/// (see [`run_pair`]).
pub fn run_pair_on<T: Send + 'static>(
    ctx: &RunContext,
    transport: Transport,
    peer: PeerConfig,
    active: impl FnOnce(SimBackend) -> T + Send + 'static,
) -> Result<T, Box<dyn std::error::Error>> {
    let (served, out) = run_both_on(ctx, transport, move |cm| serve(&cm, &peer), active)?;
    served?;
    Ok(out)
}

/// Runs `passive` on the server host and `active` on the client host, both over `transport`
/// (see [`run_both`]).
pub fn run_both_on<S: Send + 'static, T: Send + 'static>(
    ctx: &RunContext,
    transport: Transport,
    passive: impl FnOnce(SimBackend) -> S + Send + 'static,
    active: impl FnOnce(SimBackend) -> T + Send + 'static,
) -> Result<(S, T), Box<dyn std::error::Error>> {
    let fabric = ctx.build(
        ctx.builder()
            .host(SERVER, transport, &[IpAddr::from(SERVER_IP)])
            .host(CLIENT, transport, &[IpAddr::from(CLIENT_IP)]),
    )?;
    let passive_out = Arc::new(Mutex::new(None));
    let active_out = Arc::new(Mutex::new(None));
    spawn_into(
        &fabric,
        SERVER,
        "passive",
        Arc::clone(&passive_out),
        passive,
    );
    spawn_into(&fabric, CLIENT, "active", Arc::clone(&active_out), active);
    fabric.run()?;
    let s = take(&passive_out).ok_or("the passive side did not finish")?;
    let t = take(&active_out).ok_or("the active side did not finish")?;
    Ok((s, t))
}

/// Spawns `body` on `host`, its result kept in `slot`.
fn spawn_into<T: Send + 'static>(
    fabric: &Fabric,
    host: &str,
    name: &str,
    slot: Arc<Mutex<Option<T>>>,
    body: impl FnOnce(SimBackend) -> T + Send + 'static,
) {
    fabric.spawn(host, name, move |cm| {
        let out = body(cm);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
        Ok(())
    });
}

/// What a process left in its slot.
fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Turns a port's result into a sweep outcome.
pub fn outcome<T, E: std::error::Error + 'static>(result: Result<T, E>) -> Outcome {
    result
        .map(|_| ())
        .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)
}

/// Sweeps the swarm worlds of `seeds`, drawn from `space`, over `scenario`, and fails naming
/// every failing seed with its replay line if any fails (how a fixed port proves itself).
pub fn sweep_passes<F: Fn(&RunContext) -> Outcome + Sync>(
    name: &str,
    seeds: Range<u64>,
    space: SwarmSpace,
    scenario: F,
) {
    sweep_passes_on(name, seeds, space, None, scenario);
}

/// As [`sweep_passes`], with every run on `schedule` instead of the one each seed draws
/// (`None`: drawn), for a fix that holds only when its threads are not slowed down.
pub fn sweep_passes_on<F: Fn(&RunContext) -> Outcome + Sync>(
    name: &str,
    seeds: Range<u64>,
    space: SwarmSpace,
    schedule: Option<SchedConfig>,
    scenario: F,
) {
    let started = Instant::now();
    let count = seeds.end - seeds.start;
    let sweep = Sweep::new(name, scenario).seeds(seeds).swarm(space).quiet();
    let sweep = match schedule {
        Some(s) => sweep.schedule(s),
        None => sweep,
    };
    sweep.run().assert_ok();
    eprintln!(
        "{name}: {count} swarm seeds passed in {:?}",
        started.elapsed()
    );
}

/// Sweeps the swarm worlds of `seeds` over `scenario` (a buggy port): at least one must fail,
/// and every failure's error must contain `caught` (the catch the zoo documents). Returns how
/// many seeds caught it.
pub fn sweep_catches<F: Fn(&RunContext) -> Outcome + Sync>(
    name: &str,
    seeds: Range<u64>,
    space: SwarmSpace,
    scenario: F,
    caught: &str,
) -> usize {
    let started = Instant::now();
    let report = Sweep::new(name, scenario)
        .seeds(seeds)
        .swarm(space)
        .quiet()
        .max_reduced(1)
        .run();
    eprintln!(
        "{name}: {} swarm runs in {:?}, {} caught",
        report.runs,
        started.elapsed(),
        report.failures.len()
    );
    assert!(
        !report.failures.is_empty(),
        "{name}: no seed caught the bug"
    );
    for f in &report.failures {
        assert!(f.error.contains(caught), "{name}: {}", f.error);
    }
    report.failures.len()
}
