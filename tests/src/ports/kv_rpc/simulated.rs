//! The RPC's server and client as two processes of a two-host simulated fabric, optionally
//! under a seed's [`Faults`].

use std::time::Duration;

use super::client::{self, ClientOptions, ClientReport};
use super::faults::Faults;
use super::messages::requests;
use super::server::{self, ServerOptions, ServerReport};
use super::DEFAULT_PORT;
use crate::ports::simulated::{run_pair_with, PairRun};

/// What one side of a run reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Side {
    /// The server's report.
    Server(ServerReport),
    /// The client's report.
    Client(ClientReport),
}

/// A simulated run: the requests, the faults, and what each side reported.
#[derive(Debug)]
pub struct RpcRun {
    /// The client's id.
    pub client_id: u64,
    /// The requests the client sent.
    pub requests: Vec<super::messages::Message>,
    /// The server's report (`None`: it failed).
    pub server: Option<ServerReport>,
    /// The client's report (`None`: it failed).
    pub client: Option<ClientReport>,
    /// The fabric's outcome (the first process error, or a deadlock).
    pub outcome: Result<(), String>,
    /// Virtual time at the end.
    pub end: Duration,
    /// The trace.
    pub trace: String,
}

/// The client's pause between requests in simulated runs, so that faults drawn inside the
/// run's window find it busy.
pub const THINK: Duration = Duration::from_millis(10);
/// When the client starts (the server's head start).
pub const START: Duration = Duration::from_millis(200);

/// Runs `count` requests of seed `seed` (client id 1) over 4 keys, under `faults` if given.
pub fn run(seed: u64, count: u64, faults: Option<&Faults>) -> Result<RpcRun, String> {
    let client_id = 1;
    let reqs = requests(client_id, seed, count, 4);
    let sent = reqs.clone();
    let client_opts = ClientOptions {
        think: THINK,
        ..ClientOptions::default()
    };
    let (plan, config) = match faults {
        Some(f) => (f.plan.clone(), f.config()),
        None => Default::default(),
    };
    let pair: PairRun<Side> = run_pair_with(
        seed,
        DEFAULT_PORT,
        move |b| b.config(config).plan(plan),
        |cm, addr| server::serve(cm, addr, &ServerOptions::default()).map(Side::Server),
        move |cm, addr| client::run(cm, addr, &sent, &client_opts).map(Side::Client),
    )?;
    let server = match pair.server {
        Some(Side::Server(r)) => Some(r),
        _ => None,
    };
    let client = match pair.client {
        Some(Side::Client(r)) => Some(r),
        _ => None,
    };
    Ok(RpcRun {
        client_id,
        requests: reqs,
        server,
        client,
        outcome: pair.outcome,
        end: pair.end,
        trace: pair.trace,
    })
}

/// The window of virtual time in which `count` requests are exchanged when nothing fails:
/// where [`Faults::draw`] places its faults.
pub fn window(count: u64) -> (Duration, Duration) {
    (START, START + THINK * (count as u32 + 1))
}
