//! Runs an example's server and client on the simulator, or on the real librdmacm when
//! `CMTWIN_RDMA_ADDR` names an RDMA interface's address (Soft-RoCE or hardware).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{CmBackend, CmError, Transport};
use cmtwin_sim::Fabric;
use cmtwin_verbs::VerbsBackend;

/// A program with a server side and a client side, written once for every backend.
pub trait Program: Clone + Send + 'static {
    /// The server, listening on `addr` (it may start threads with clones of `cm`).
    fn server<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        addr: SocketAddr,
    ) -> Result<(), CmError>;
    /// The client, connecting to the server at `server`.
    fn client<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        server: SocketAddr,
    ) -> Result<(), CmError>;
}

/// How long the client lets the server start listening (virtual time on the simulator).
const SERVER_HEAD_START: Duration = Duration::from_millis(200);

/// Runs `program` on the backend the environment asks for; exits with status 1 on failure.
pub fn run<P: Program>(program: P, port: u16) {
    let outcome = match std::env::var("CMTWIN_RDMA_ADDR") {
        Ok(ip) => {
            let ip: IpAddr = ip.parse().expect("CMTWIN_RDMA_ADDR is an IP address");
            on_verbs(program, SocketAddr::new(ip, port))
        }
        Err(_) => on_simulator(program, port),
    };
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}

/// Two hosts of a simulated RoCE fabric (seed from the first argument, default 1), one
/// process each; prints the trace when `CMTWIN_TRACE` is set.
fn on_simulator<P: Program>(program: P, port: u16) -> Result<(), String> {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let server_ip: IpAddr = "10.0.0.1".parse().expect("literal");
    let fabric = Fabric::builder(seed)
        .host("server", Transport::Roce, &[server_ip])
        .host(
            "client",
            Transport::Roce,
            &["10.0.0.2".parse().expect("literal")],
        )
        .build()
        .map_err(|e| e.to_string())?;
    let addr = SocketAddr::new(server_ip, port);
    let p = program.clone();
    fabric.spawn("server", "server", move |cm| p.server(&cm, addr));
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(SERVER_HEAD_START)?;
        program.client(&cm, addr)
    });
    let outcome = fabric.run().map_err(|e| e.to_string());
    if std::env::var_os("CMTWIN_TRACE").is_some() {
        println!("--- trace (seed {seed}) ---\n{}", fabric.trace_text());
    }
    println!(
        "simulator (seed {seed}): {} after {:?} of virtual time",
        if outcome.is_ok() { "done" } else { "failed" },
        fabric.now()
    );
    outcome
}

/// The real librdmacm: the server and the client on two threads, each with its backend.
fn on_verbs<P: Program>(program: P, addr: SocketAddr) -> Result<(), String> {
    let p = program.clone();
    let server = std::thread::spawn(move || p.server(&VerbsBackend::new(), addr));
    let cm = VerbsBackend::new();
    let client = cm
        .sleep(SERVER_HEAD_START)
        .and_then(|()| program.client(&cm, addr));
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    server.map_err(|e| format!("server: {e}"))?;
    client.map_err(|e| format!("client: {e}"))?;
    println!("librdmacm on {}: done", addr.ip());
    Ok(())
}
