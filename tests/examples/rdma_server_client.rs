//! rdma-core's synchronous examples `rdma_server` / `rdma_client` and, in RC mode,
//! `rdma_xserver` / `rdma_xclient`: endpoints made by `rdma_getaddrinfo` and `rdma_create_ep`,
//! a request taken by `rdma_get_request` with its QP, 16-byte messages through librdmacm's
//! `rdma_verbs.h` helpers (`rdma_reg_msgs`, `rdma_post_recv`, `rdma_post_send`,
//! `rdma_get_send_comp`, `rdma_get_recv_comp`), inline when the QP has room. The protocol is
//! `cmtwin_tests::ports::rdma_server_client`, wire-compatible with the C tools.
//!
//! * `cargo run -p cmtwin-tests --example rdma_server_client [seed]`: both pairs on the
//!   simulator, each run twice to check that the seed replays the same trace; the bytes each
//!   side received are checked. `CMTWIN_TRACE=1` prints the traces. With
//!   `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>`, both pairs on the real librdmacm instead,
//!   each side on its own thread.
//! * `... --example rdma_server_client -- --server <ip>[:port] [-x]` and
//!   `... -- --client <ip>[:port] [-x]`: one side on the real librdmacm and libibverbs,
//!   against this example or the C `rdma_client -s <ip>` / `rdma_server -s <ip>` (with `-x`:
//!   `rdma_xclient -s <ip>` / `rdma_xserver`), port 7471 by default.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin_tests::ports::command_line::{parse_addr, Mode};
use cmtwin_tests::ports::rdma_server_client::{
    self as pair, Flavor, Options, Summary, DEFAULT_PORT,
};
use cmtwin_tests::ports::simulated;
use cmtwin_verbs::VerbsBackend;

fn parse_args() -> Result<(Mode, Flavor), String> {
    let mut args = std::env::args().skip(1);
    let mut mode = Mode::from_env(DEFAULT_PORT)?;
    let mut flavor = Flavor::Plain;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--server" => mode = Mode::Server(parse_addr(&value("--server")?, DEFAULT_PORT)?),
            "--client" => mode = Mode::Client(parse_addr(&value("--client")?, DEFAULT_PORT)?),
            "-x" => flavor = Flavor::X,
            seed => mode = Mode::Simulated(seed.parse().map_err(|e| format!("{seed}: {e}"))?),
        }
    }
    Ok((mode, flavor))
}

/// The tool names of `flavor`, for messages.
fn names(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Plain => "rdma_server/rdma_client",
        Flavor::X => "rdma_xserver/rdma_xclient (RC)",
    }
}

/// Checks that the server received the client's message and the client the server's (the
/// plain pair) or nothing (the X pair, whose client learnt the SRQ number 0).
fn check_pair(flavor: Flavor, server: &Summary, client: &Summary) -> Result<(), String> {
    let (s, c) = (Options::server(flavor), Options::client(flavor));
    let expected_client = match flavor {
        Flavor::Plain => (Some(s.message), None),
        Flavor::X => (None, Some(0)),
    };
    if server.received != Some(c.message) {
        return Err(format!("server received {:?}", server.received));
    }
    if (client.received, client.srqn) != expected_client {
        return Err(format!("client: {client:?}"));
    }
    Ok(())
}

/// Both pairs on the simulator, each twice: the bytes must arrive and the traces be equal.
fn simulated(seed: u64) -> Result<(), String> {
    for flavor in [Flavor::Plain, Flavor::X] {
        let (server, client, end) = simulated::run_pair_twice(
            seed,
            DEFAULT_PORT,
            move |cm, addr| pair::server(cm, addr, &Options::server(flavor)),
            move |cm, addr| pair::client(cm, addr, &Options::client(flavor)),
        )?;
        check_pair(flavor, &server, &client).map_err(|e| format!("{}: {e}", names(flavor)))?;
        println!(
            "simulator (seed {seed}), {}: 16-byte messages verified on both sides (inline: \
             server {}, client {}), disconnected at {:?} and {:?}, run ends after {end:?} of \
             virtual time; the seed replays the same trace",
            names(flavor),
            server.inline,
            client.inline,
            server.disconnected,
            client.disconnected
        );
    }
    Ok(())
}

/// Both pairs on the real backend at `addr` (the X pair one port up), each side on a thread.
fn both(addr: SocketAddr) -> Result<(), String> {
    for (flavor, port) in [(Flavor::Plain, addr.port()), (Flavor::X, addr.port() + 1)] {
        let addr = SocketAddr::new(addr.ip(), port);
        let server = std::thread::spawn(move || {
            pair::server(&VerbsBackend::new(), addr, &Options::server(flavor))
        });
        let patient = Options {
            patience: Duration::from_secs(10),
            ..Options::client(flavor)
        };
        let client = pair::client(&VerbsBackend::new(), addr, &patient);
        let server = server
            .join()
            .map_err(|_| "the server thread panicked".to_string())?
            .map_err(|e| format!("server: {e}"))?;
        let client = client.map_err(|e| format!("client: {e}"))?;
        check_pair(flavor, &server, &client).map_err(|e| format!("{}: {e}", names(flavor)))?;
        println!(
            "librdmacm on {addr}, {}: 16-byte messages verified on both sides (inline: server \
             {} of {} bytes, client {} of {} bytes) in {:?}",
            names(flavor),
            server.inline,
            server.max_inline_data,
            client.inline,
            client.max_inline_data,
            client.disconnected.saturating_sub(client.connected),
        );
    }
    Ok(())
}

/// Prints what one side on librdmacm did.
fn report(side: &str, summary: cmtwin::Result<Summary>) -> Result<(), String> {
    let s = summary.map_err(|e| format!("{side}: {e}"))?;
    let shown = s.received.map(|m| String::from_utf8_lossy(&m).into_owned());
    println!(
        "{side}: received {shown:?} (bytes {:?}), sent {}, inline {} (max_inline_data {}), \
         srqn {:?}",
        s.received, s.sent, s.inline, s.max_inline_data, s.srqn
    );
    Ok(())
}

fn main() {
    let outcome = parse_args().and_then(|(mode, flavor)| match mode {
        Mode::Simulated(seed) => simulated(seed),
        Mode::Both(addr) => both(addr),
        Mode::Server(addr) => report(
            "server",
            pair::server(&VerbsBackend::new(), addr, &Options::server(flavor)),
        ),
        Mode::Client(addr) => {
            let opts = Options {
                patience: Duration::from_secs(10),
                ..Options::client(flavor)
            };
            report("client", pair::client(&VerbsBackend::new(), addr, &opts))
        }
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}
