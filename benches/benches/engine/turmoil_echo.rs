//! The comparison workload on turmoil: per connection a TCP connect, a 5-byte request echoed
//! back by the server, and a close, all `n` connections started at once from the same host
//! layout as the simulator's (one server, `CLIENT_HOSTS` clients). Turmoil keeps its own
//! defaults (1 ms step, message latency drawn between 0 and 100 ms) except where the workload
//! needs more: a long enough simulated duration and a listen queue for every connect.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;
use std::time::Duration;

use cmtwin_benches::topology::{client_name, CLIENT_HOSTS, SERVER_PORT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use turmoil::net::{TcpListener, TcpStream};

/// The request, echoed back.
const REQUEST: &[u8; 5] = b"bench";

/// Turmoil's default socket and listen queue capacity. The listen queue must hold every
/// connect at once (turmoil panics when it overflows), so it is raised to `n`.
const DEFAULT_TCP_CAPACITY: usize = 64;

/// Runs the workload with `n` connections; returns how many completed their exchange.
pub fn run(n: usize, seed: u64) -> Result<usize, String> {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(3600))
        .tcp_capacity(n.max(DEFAULT_TCP_CAPACITY))
        .rng_seed(seed)
        .build();
    sim.host("server", || async {
        let listener = TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), SERVER_PORT)).await?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::task::spawn_local(echo(stream));
        }
    });
    let done = Rc::new(Cell::new(0usize));
    for k in 0..CLIENT_HOSTS {
        let share = n / CLIENT_HOSTS + usize::from(k < n % CLIENT_HOSTS);
        let done = Rc::clone(&done);
        sim.client(client_name(k), async move {
            let mut exchanges = JoinSet::new();
            for _ in 0..share {
                exchanges.spawn_local(exchange());
            }
            while let Some(outcome) = exchanges.join_next().await {
                outcome??;
                done.set(done.get() + 1);
            }
            Ok(())
        });
    }
    sim.run().map_err(|e| format!("turmoil run failed: {e}"))?;
    Ok(done.get())
}

/// The server's side of one connection: read the request, send it back, close.
async fn echo(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; REQUEST.len()];
    stream.read_exact(&mut buf).await?;
    stream.write_all(&buf).await
}

/// The client's side of one connection: connect, send, read the echo, close.
async fn exchange() -> std::io::Result<()> {
    let mut stream = TcpStream::connect(("server", SERVER_PORT)).await?;
    stream.write_all(REQUEST).await?;
    let mut buf = [0u8; REQUEST.len()];
    stream.read_exact(&mut buf).await?;
    if &buf != REQUEST {
        return Err(std::io::Error::other(format!("echo came back as {buf:?}")));
    }
    Ok(())
}
