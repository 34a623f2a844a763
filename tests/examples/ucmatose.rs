//! ucmatose (rdma-core's `ucmatose`) with its default message exchange over one connection:
//! both sides post their receives before connecting, the server sends `-C` messages of `-S`
//! bytes, the client receives them and sends as many back, the server disconnects. The
//! protocol is `cmtwin_tests::ports::ucmatose`, wire-compatible with the C `ucmatose`
//! (connection-only runs with several connections: the `cmatose` example).
//!
//! * `cargo run -p cmtwin-tests --example ucmatose [seed]`: both sides on the simulator
//!   (10 messages of 100 bytes each way), run twice to check that the seed replays the same
//!   trace; `CMTWIN_TRACE=1` prints it. With `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>`,
//!   both sides on the real librdmacm instead, on two threads.
//! * `... --example ucmatose -- --server <ip>[:port] [-C count] [-S size]` and
//!   `... -- --client <ip>[:port] ...`: one side on the real librdmacm and libibverbs, against
//!   this example or the C `ucmatose` / `ucmatose -s <ip>` (port 7471 by default).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin_tests::ports::command_line::{parse_addr, Mode};
use cmtwin_tests::ports::simulated;
use cmtwin_tests::ports::ucmatose::{self, Options, Summary, DEFAULT_PORT};
use cmtwin_verbs::VerbsBackend;

fn parse_args() -> Result<(Mode, Options), String> {
    let mut args = std::env::args().skip(1);
    let mut mode = Mode::from_env(DEFAULT_PORT)?;
    let mut opts = Options::default();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--server" => mode = Mode::Server(parse_addr(&value("--server")?, DEFAULT_PORT)?),
            "--client" => mode = Mode::Client(parse_addr(&value("--client")?, DEFAULT_PORT)?),
            "-C" => opts.message_count = value("-C")?.parse().map_err(|e| format!("-C: {e}"))?,
            "-S" => opts.message_size = value("-S")?.parse().map_err(|e| format!("-S: {e}"))?,
            seed => mode = Mode::Simulated(seed.parse().map_err(|e| format!("{seed}: {e}"))?),
        }
    }
    Ok((mode, opts))
}

/// Both sides on the simulator, twice: the summaries must be exact and the traces equal.
fn simulated(seed: u64, opts: Options) -> Result<(), String> {
    // Every message arrives; the client's sends were acknowledged before the server, which
    // had received them all, disconnected.
    let expected = Summary {
        received: opts.message_count,
        sent: opts.message_count,
        flushed: 0,
    };
    let end = simulated::run_pair_replayed(
        seed,
        DEFAULT_PORT,
        move |cm, addr| ucmatose::server(cm, addr, &opts),
        move |cm, addr| ucmatose::client(cm, addr, &opts),
        expected,
    )?;
    println!(
        "simulator (seed {seed}): {} messages of {} bytes each way after {end:?} of virtual \
         time; the seed replays the same trace",
        opts.message_count, opts.message_size
    );
    Ok(())
}

/// Both sides on the real backend at `addr`, on two threads: every message must arrive.
fn both(addr: SocketAddr, opts: Options) -> Result<(), String> {
    let server = std::thread::spawn(move || ucmatose::server(&VerbsBackend::new(), addr, &opts));
    let patient = Options {
        patience: Duration::from_secs(10),
        ..opts
    };
    let client = ucmatose::client(&VerbsBackend::new(), addr, &patient);
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    // Both sides' errors when both failed: the first one to fail may have caused the other's.
    let (server, client) = match (server, client) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), Ok(_)) => return Err(format!("server: {e}")),
        (Ok(_), Err(e)) => return Err(format!("client: {e}")),
        (Err(s), Err(c)) => return Err(format!("server: {s}; client: {c}")),
    };
    let n = opts.message_count;
    if server.received != n || server.sent != n || client.received != n {
        return Err(format!(
            "server {server:?}, client {client:?}: not {n} each way"
        ));
    }
    // The server had all the client's messages before it disconnected: none was lost.
    if client.sent + client.flushed != n {
        return Err(format!("client {client:?}: not {n} sends"));
    }
    println!("librdmacm on {addr}: {n} messages each way (client {client:?})");
    Ok(())
}

fn main() {
    let outcome = parse_args().and_then(|(mode, opts)| {
        let real = |side: &str, r: cmtwin::Result<Summary>| {
            let s = r.map_err(|e| format!("{side}: {e}"))?;
            println!("{side}: {s:?}");
            Ok(())
        };
        match mode {
            Mode::Simulated(seed) => simulated(seed, opts),
            Mode::Both(addr) => both(addr, opts),
            Mode::Server(addr) => real(
                "server",
                ucmatose::server(&VerbsBackend::new(), addr, &opts),
            ),
            Mode::Client(addr) => {
                let opts = Options {
                    patience: Duration::from_secs(10),
                    ..opts
                };
                real(
                    "client",
                    ucmatose::client(&VerbsBackend::new(), addr, &opts),
                )
            }
        }
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}
