//! A port's server and client as two processes of a two-host simulated RoCE fabric, or a
//! group's members as processes of hosts of their own, with what each returned and the
//! fabric's trace.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{CmBackend, Result, Transport};
use cmtwin_sim::{Fabric, FabricBuilder, FabricError, SimBackend};

/// The server host's address.
pub const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// The client host's address.
pub const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// How long the client lets the server start listening (virtual time).
const SERVER_HEAD_START: Duration = Duration::from_millis(200);

/// What a simulated run of a port gave.
#[derive(Debug)]
pub struct PairRun<S> {
    /// The server's result (`None`: its process failed before returning one).
    pub server: Option<S>,
    /// The client's result.
    pub client: Option<S>,
    /// The run's outcome (the first process error, or a deadlock).
    pub outcome: std::result::Result<(), String>,
    /// Virtual time at the end.
    pub end: Duration,
    /// The trace.
    pub trace: String,
}

/// Runs `server(cm, addr)` on the server host and, after a head start, `client(cm, addr)` on
/// the client host, of a fabric of `seed`; `addr` is port `port` of [`SERVER_IP`].
pub fn run_pair<S, F, G>(seed: u64, port: u16, server: F, client: G) -> PairRun<S>
where
    S: Send + 'static,
    F: FnOnce(&SimBackend, SocketAddr) -> Result<S> + Send + 'static,
    G: FnOnce(&SimBackend, SocketAddr) -> Result<S> + Send + 'static,
{
    run_pair_with(seed, port, |b| b, server, client)
        .expect("two hosts of distinct addresses make a valid fabric")
}

/// [`run_pair`] as the examples run it: twice, printing the trace when `CMTWIN_TRACE` is
/// set; each side must return `expected` and the second run must replay the first's trace
/// and end time exactly. Gives the virtual time at the end.
pub fn run_pair_replayed<S, F, G>(
    seed: u64,
    port: u16,
    server: F,
    client: G,
    expected: S,
) -> std::result::Result<Duration, String>
where
    S: Send + PartialEq + std::fmt::Debug + 'static,
    F: Fn(&SimBackend, SocketAddr) -> Result<S> + Send + Clone + 'static,
    G: Fn(&SimBackend, SocketAddr) -> Result<S> + Send + Clone + 'static,
{
    let (server, client, end) = run_pair_twice(seed, port, server, client)?;
    for (side, got) in [("server", server), ("client", client)] {
        if got != expected {
            return Err(format!("{side}: {got:?} instead of {expected:?}"));
        }
    }
    Ok(end)
}

/// [`run_pair`] twice, printing the first run's trace when `CMTWIN_TRACE` is set: both runs
/// must succeed, and the second must replay the first's trace and end time exactly. Gives
/// what the server and the client returned (in the first run) and the virtual time at the
/// end.
pub fn run_pair_twice<S, F, G>(
    seed: u64,
    port: u16,
    server: F,
    client: G,
) -> std::result::Result<(S, S, Duration), String>
where
    S: Send + std::fmt::Debug + 'static,
    F: Fn(&SimBackend, SocketAddr) -> Result<S> + Send + Clone + 'static,
    G: Fn(&SimBackend, SocketAddr) -> Result<S> + Send + Clone + 'static,
{
    let run = || run_pair(seed, port, server.clone(), client.clone());
    let first = run();
    if std::env::var_os("CMTWIN_TRACE").is_some() {
        println!("--- trace (seed {seed}) ---\n{}", first.trace);
    }
    first.outcome.clone()?;
    let second = run();
    if second.trace != first.trace || second.end != first.end {
        return Err(format!("seed {seed} did not replay the same trace"));
    }
    match (first.server, first.client) {
        (Some(server), Some(client)) => Ok((server, client, first.end)),
        (server, client) => Err(format!(
            "a side returned nothing: server {server:?}, client {client:?}"
        )),
    }
}

/// [`run_pair`] on a fabric that `setup` configures further (a configuration, fault plans:
/// the hosts are named `server` and `client`); an error when the fabric cannot be built
/// (e.g. an invalid plan).
pub fn run_pair_with<S, F, G>(
    seed: u64,
    port: u16,
    setup: impl FnOnce(FabricBuilder) -> FabricBuilder,
    server: F,
    client: G,
) -> std::result::Result<PairRun<S>, String>
where
    S: Send + 'static,
    F: FnOnce(&SimBackend, SocketAddr) -> Result<S> + Send + 'static,
    G: FnOnce(&SimBackend, SocketAddr) -> Result<S> + Send + 'static,
{
    let builder = Fabric::builder(seed)
        .host("server", Transport::Roce, &[SERVER_IP])
        .host("client", Transport::Roce, &[CLIENT_IP]);
    let fabric = setup(builder).build().map_err(|e| e.to_string())?;
    let addr = SocketAddr::new(SERVER_IP, port);
    let served = Arc::new(Mutex::new(None));
    let asked = Arc::new(Mutex::new(None));
    let out = Arc::clone(&served);
    fabric.spawn("server", "server", move |cm| {
        let s = server(&cm, addr)?;
        *out.lock().expect("not poisoned") = Some(s);
        Ok(())
    });
    let out = Arc::clone(&asked);
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(SERVER_HEAD_START)?;
        let s = client(&cm, addr)?;
        *out.lock().expect("not poisoned") = Some(s);
        Ok(())
    });
    let outcome = fabric.run().map_err(|e| e.to_string());
    let take = |m: Arc<Mutex<Option<S>>>| m.lock().expect("not poisoned").take();
    Ok(PairRun {
        server: take(served),
        client: take(asked),
        outcome,
        end: fabric.now(),
        trace: fabric.trace_text(),
    })
}

/// What a process of [`run_group`] runs, given its backend and its host's address.
pub type GroupBody<S> = Box<dyn FnOnce(&SimBackend, IpAddr) -> Result<S> + Send>;

/// A process of [`run_group`]: its host, the host's address, and what it runs there.
pub struct GroupProcess<S> {
    /// The host's name (each process has a host of its own).
    pub host: &'static str,
    /// The host's address.
    pub ip: IpAddr,
    /// What the process runs, given its backend and its host's address.
    pub body: GroupBody<S>,
}

/// What a simulated run of [`run_group`] gave.
#[derive(Debug)]
pub struct GroupRun<S> {
    /// Each process's result, in the order given (`None`: it failed before returning one).
    pub results: Vec<Option<S>>,
    /// The run's outcome (the first process error, or a deadlock).
    pub outcome: std::result::Result<(), String>,
    /// Virtual time at the end.
    pub end: Duration,
    /// The trace.
    pub trace: String,
}

/// Runs every process on a RoCE host of its own of a fabric of `seed`, all starting at
/// virtual time 0, on a fabric that `setup` configures further and `faults` then prepares
/// (e.g. data packets to lose); an error when the fabric cannot be built (e.g. two hosts of
/// one name or address) or `faults` fails.
pub fn run_group<S: Send + 'static>(
    seed: u64,
    setup: impl FnOnce(FabricBuilder) -> FabricBuilder,
    faults: impl FnOnce(&Fabric) -> std::result::Result<(), FabricError>,
    processes: Vec<GroupProcess<S>>,
) -> std::result::Result<GroupRun<S>, String> {
    let builder = processes.iter().fold(Fabric::builder(seed), |b, p| {
        b.host(p.host, Transport::Roce, &[p.ip])
    });
    let fabric = setup(builder).build().map_err(|e| e.to_string())?;
    faults(&fabric).map_err(|e| e.to_string())?;
    let mut slots = Vec::with_capacity(processes.len());
    for p in processes {
        let slot = Arc::new(Mutex::new(None));
        let out = Arc::clone(&slot);
        let (ip, body) = (p.ip, p.body);
        fabric.spawn(p.host, p.host, move |cm| {
            let s = body(&cm, ip)?;
            *out.lock().expect("not poisoned") = Some(s);
            Ok(())
        });
        slots.push(slot);
    }
    let outcome = fabric.run().map_err(|e| e.to_string());
    let results = slots
        .into_iter()
        .map(|m| m.lock().expect("not poisoned").take())
        .collect();
    Ok(GroupRun {
        results,
        outcome,
        end: fabric.now(),
        trace: fabric.trace_text(),
    })
}
