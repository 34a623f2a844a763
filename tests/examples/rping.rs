//! rping (rdma-core's `rping`) over the data path: the client advertises a buffer, the server
//! RDMA-reads it and RDMA-writes it back into a second advertised buffer, for `-C` pings, the
//! client comparing the data (`-V`). The protocol is `cmtwin_tests::ports::rping`,
//! wire-compatible with the C `rping`.
//!
//! * `cargo run -p cmtwin-tests --example rping [seed]`: both sides on the simulator (10 pings
//!   of 64 bytes, verified), run twice to check that the seed replays the same trace;
//!   `CMTWIN_TRACE=1` prints it. With `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>`, both
//!   sides on the real librdmacm instead, on two threads.
//! * `... --example rping -- --server <ip>[:port] [-S size] [-C count] [-v] [-V]` and
//!   `... -- --client <ip>[:port] ...`: one side on the real librdmacm and libibverbs, against
//!   this example or the C `rping -s` / `rping -c` (port 7174 by default).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cmtwin_tests::ports::command_line::{parse_addr, Mode};
use cmtwin_tests::ports::rping::{self, Options, Summary, DEFAULT_PORT};
use cmtwin_tests::ports::simulated;
use cmtwin_verbs::VerbsBackend;

fn parse_args() -> Result<(Mode, Options), String> {
    let mut args = std::env::args().skip(1);
    let mut mode = Mode::from_env(DEFAULT_PORT)?;
    let mut opts = Options::default();
    let mut explicit_validate = false;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--server" => mode = Mode::Server(parse_addr(&value("--server")?, DEFAULT_PORT)?),
            "--client" => mode = Mode::Client(parse_addr(&value("--client")?, DEFAULT_PORT)?),
            "-S" => opts.size = value("-S")?.parse().map_err(|e| format!("-S: {e}"))?,
            "-C" => opts.count = value("-C")?.parse().map_err(|e| format!("-C: {e}"))?,
            "-v" => opts.verbose = true,
            "-V" => explicit_validate = true,
            seed => mode = Mode::Simulated(seed.parse().map_err(|e| format!("{seed}: {e}"))?),
        }
    }
    // The simulated run always verifies; a real side does when asked, as rping does.
    opts.validate = explicit_validate || matches!(mode, Mode::Simulated(_));
    Ok((mode, opts))
}

/// Both sides on the simulator, twice: the summaries must be exact and the traces equal.
fn simulated(seed: u64, opts: Options) -> Result<(), String> {
    let expected = Summary {
        pings: opts.count,
        rdma_bytes: 2 * opts.size as u64 * u64::from(opts.count),
    };
    let end = simulated::run_pair_replayed(
        seed,
        DEFAULT_PORT,
        move |cm, addr| rping::server(cm, addr, &opts),
        move |cm, addr| rping::client(cm, addr, &opts),
        expected,
    )?;
    println!(
        "simulator (seed {seed}): {} pings of {} bytes verified on both sides after {end:?} \
         of virtual time; the seed replays the same trace",
        opts.count, opts.size
    );
    Ok(())
}

/// Both sides on the real backend at `addr`, on two threads; the summaries must be exact.
fn both(addr: SocketAddr, opts: Options) -> Result<(), String> {
    let started = Instant::now();
    let server = std::thread::spawn(move || rping::server(&VerbsBackend::new(), addr, &opts));
    let patient = Options {
        patience: Duration::from_secs(10),
        ..opts
    };
    let client = rping::client(&VerbsBackend::new(), addr, &patient);
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    let expected = Summary {
        pings: opts.count,
        rdma_bytes: 2 * opts.size as u64 * u64::from(opts.count),
    };
    for (side, got) in [("server", server), ("client", client)] {
        let got = got.map_err(|e| format!("{side}: {e}"))?;
        if got != expected {
            return Err(format!("{side}: {got:?} instead of {expected:?}"));
        }
    }
    println!(
        "librdmacm on {addr}: {} pings of {} bytes verified on both sides in {:?}",
        opts.count,
        opts.size,
        started.elapsed()
    );
    Ok(())
}

fn main() {
    let outcome = parse_args().and_then(|(mode, opts)| {
        let started = Instant::now();
        let real = |side: &str, r: cmtwin::Result<Summary>| {
            let s = r.map_err(|e| format!("{side}: {e}"))?;
            println!(
                "{side}: {} pings, {} RDMA bytes in {:?}",
                s.pings,
                s.rdma_bytes,
                started.elapsed()
            );
            Ok(())
        };
        match mode {
            Mode::Simulated(seed) => simulated(seed, opts),
            Mode::Both(addr) => both(addr, opts),
            Mode::Server(addr) => real("server", rping::server(&VerbsBackend::new(), addr, &opts)),
            Mode::Client(addr) => {
                let opts = Options {
                    patience: Duration::from_secs(10),
                    ..opts
                };
                real("client", rping::client(&VerbsBackend::new(), addr, &opts))
            }
        }
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}
