//! Simulator cost of the data path: small (8-byte) RC messages per second, tracing off, on one
//! connection (`cmtwin_benches::messages`): each message is a send, a receive, a packet, its
//! acknowledgement and two completions. Criterion gives the rate in wall time; the bench also
//! prints the rate in process CPU time over a longer run (the clock of the engine report).

use std::net::{IpAddr, SocketAddr};

use cmtwin::Transport;
use cmtwin_benches::cpu;
use cmtwin_benches::messages::{rc_pair, RcPair};
use cmtwin_sim::{Fabric, SimConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn pair(seed: u64) -> RcPair {
    let ip = |s: &str| s.parse::<IpAddr>().expect("literal address");
    let fabric = Fabric::builder(seed)
        .config(SimConfig {
            trace: false,
            ..SimConfig::default()
        })
        .host("server", Transport::Roce, &[ip("10.0.0.1")])
        .host("client", Transport::Roce, &[ip("10.0.0.2")])
        .build()
        .expect("a valid configuration");
    rc_pair(fabric, SocketAddr::new(ip("10.0.0.1"), 7471)).expect("a connection")
}

fn messages(c: &mut Criterion) {
    let pair = pair(1);
    let mut group = c.benchmark_group("sim_rc_messages_untraced");
    for n in [256u64, 4096] {
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| pair.exchange(n).expect("workload"))
        });
    }
    group.finish();
    let n = 1 << 20;
    let (sent, took) = cpu::measure(|| pair.exchange(n).expect("workload"));
    println!(
        "sim_rc_messages_untraced: {sent} messages in {took:?} of process CPU time: {:.0} messages per CPU-second",
        sent as f64 / took.as_secs_f64()
    );
}

criterion_group!(benches, messages);
criterion_main!(benches);
