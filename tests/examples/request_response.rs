//! A key-value RPC that reconnects after any failure and never loses or repeats an answered
//! request: the protocol is `cmtwin_tests::ports::kv_rpc`, written once over
//! `cmtwin::verbs::DataPath` with librdmacm's `rdma_verbs.h` helpers. The client sends PUTs,
//! GETs and ADDs (not idempotent) with request ids, one at a time, and checks every answer
//! against a reference model; when its connection breaks it reconnects with backoff and sends
//! the unanswered request again, which the server answers from its per-client reply cache.
//!
//! * `cargo run -p cmtwin-tests --example request_response [seed] [requests] [--faults]`:
//!   the server and the client as two simulated processes (24 requests by default);
//!   `--faults` draws the seed's fault plan (data packet loss and delay, CM message loss and
//!   delay, a device removed and restored mid-run), as `tests/sim_rpc.rs` does for 1000
//!   seeds. `CMTWIN_TRACE=1` prints the trace.
//! * With `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>[:port]`, the same code runs on the real
//!   librdmacm and libibverbs, the server and the client on two threads, each with its own
//!   `VerbsBackend` (the seed then only draws the requests).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::CmBackend;
use cmtwin_tests::ports::command_line::Mode;
use cmtwin_tests::ports::kv_rpc::client::{self, ClientOptions};
use cmtwin_tests::ports::kv_rpc::faults::Faults;
use cmtwin_tests::ports::kv_rpc::messages::requests;
use cmtwin_tests::ports::kv_rpc::server::{self, ServerOptions};
use cmtwin_tests::ports::kv_rpc::{simulated, verify, DEFAULT_PORT};
use cmtwin_verbs::VerbsBackend;

fn simulated_run(seed: u64, count: u64, faults: bool) -> Result<(), String> {
    let faults = faults.then(|| Faults::draw(seed, simulated::window(count)));
    if let Some(f) = &faults {
        println!(
            "faults: loss {}, CM faults {}, {} data drops, {} data delays, removal {:?}",
            f.loss, f.cm, f.data_drops, f.data_delays, f.removal
        );
    }
    let run = simulated::run(seed, count, faults.as_ref())?;
    if std::env::var_os("CMTWIN_TRACE").is_some() {
        println!("--- trace (seed {seed}) ---\n{}", run.trace);
    }
    run.outcome.clone()?;
    let (Some(client), Some(server)) = (&run.client, &run.server) else {
        return Err("a side returned nothing".into());
    };
    verify(&run.requests, client, server)?;
    println!(
        "simulator (seed {seed}): {} requests answered correctly, each executed once, by {:?} \
         of virtual time; {} connections ({} attempts), {} requests sent again, {} answered \
         from the cache, {} re-listens; breaks {:?}",
        client.answered.len(),
        client.finished_at,
        client.connections,
        client.attempts,
        client.resent,
        server.replays,
        server.relistens,
        client.breaks
    );
    Ok(())
}

/// Both sides on the real backend at `addr`, on two threads.
fn on_verbs(addr: SocketAddr, seed: u64, count: u64) -> Result<(), String> {
    let server = std::thread::spawn(move || {
        server::serve(&VerbsBackend::new(), addr, &ServerOptions::default())
    });
    let cm = VerbsBackend::new();
    let reqs = requests(1, seed, count, 4);
    let client = cm
        .sleep(Duration::from_millis(200))
        .and_then(|()| client::run(&cm, addr, &reqs, &ClientOptions::default()));
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?
        .map_err(|e| format!("server: {e}"))?;
    let client = client.map_err(|e| format!("client: {e}"))?;
    verify(&reqs, &client, &server)?;
    println!(
        "librdmacm on {addr}: {} requests answered correctly, each executed once ({} connections)",
        client.answered.len(),
        client.connections
    );
    Ok(())
}

fn main() {
    let outcome = (|| {
        let mut numbers = Vec::new();
        let mut faults = false;
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--faults" => faults = true,
                n => numbers.push(n.parse::<u64>().map_err(|e| format!("{n}: {e}"))?),
            }
        }
        let seed = numbers.first().copied().unwrap_or(1);
        let count = numbers.get(1).copied().unwrap_or(24);
        match Mode::from_env(DEFAULT_PORT)? {
            Mode::Both(addr) => on_verbs(addr, seed, count),
            _ => simulated_run(seed, count, faults),
        }
    })();
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}
