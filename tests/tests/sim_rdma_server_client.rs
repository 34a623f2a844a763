//! The `rdma_server`/`rdma_client` port (`cmtwin_tests::ports::rdma_server_client`) on the
//! simulator: synchronous endpoints from `rdma_getaddrinfo` and `rdma_create_ep`, the QP that
//! `rdma_get_request` makes from the listener's attributes, the 16-byte messages through the
//! `rdma_verbs.h` helpers, inline, and `rdma_disconnect` returning with DISCONNECTED on both
//! sides. Exact bytes and virtual times over several seeds; each seed replays its trace.
//!
//! Times, on a wire of 5 µs without jitter (the client starts at 200 ms): address resolution
//! takes 10 µs, so the client's REQ leaves at 200.010 ms. Each CM message or data packet
//! then takes the wire's 5 µs plus the receiving host's processing, which the seed's
//! scheduling does not change; a side's `rdma_disconnect` first spends the 20 µs of moving
//! its QP to ERROR.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::Errno;
use cmtwin_sim::{SimBackend, SimConfig};
use cmtwin_tests::ports::rdma_server_client::{client, server, Flavor, Options, Summary};
use cmtwin_tests::ports::simulated::{run_pair_with, PairRun};

const PORT: u16 = 7471;
const SEEDS: [u64; 5] = [1, 2, 3, 17, 1000];

/// A run of `flavor`'s pair on a jitterless fabric of `seed`.
fn run(seed: u64, flavor: Flavor) -> PairRun<Summary> {
    run_with(seed, flavor, Options::client(flavor))
}

fn run_with(seed: u64, flavor: Flavor, client_opts: Options) -> PairRun<Summary> {
    let exact = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    run_pair_with(
        seed,
        PORT,
        |b| b.config(exact),
        move |cm: &SimBackend, addr: SocketAddr| server(cm, addr, &Options::server(flavor)),
        move |cm: &SimBackend, addr: SocketAddr| client(cm, addr, &client_opts),
    )
    .expect("a valid fabric")
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

#[test]
fn print_it() {
    for seed in SEEDS {
        for flavor in [Flavor::Plain, Flavor::X] {
            let r = run(seed, flavor);
            println!("{seed} {flavor:?} {:?} {:?} {:?} {:?}", r.outcome, r.server, r.client, r.end);
        }
    }
}
