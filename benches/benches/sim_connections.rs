//! Simulator cost: connections established and torn down per second of wall time, and the cost
//! of one event round trip (write a USER event, fetch, ack).

use std::net::{IpAddr, SocketAddr};

use cmtwin::{CmBackend, EventKind, PortSpace, Transport, Wait};
use cmtwin_benches::connect_many;
use cmtwin_sim::{Fabric, SimConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn fabric(seed: u64, trace: bool) -> Fabric {
    let ip = |s: &str| s.parse::<IpAddr>().expect("literal address");
    Fabric::builder(seed)
        .config(SimConfig {
            trace,
            ..SimConfig::default()
        })
        .host("server", Transport::Roce, &[ip("10.0.0.1")])
        .host("client", Transport::Roce, &[ip("10.0.0.2")])
        .build()
        .expect("a valid configuration")
}

fn connections(c: &mut Criterion) {
    for trace in [true, false] {
        let name = if trace {
            "sim_connect_disconnect"
        } else {
            "sim_connect_disconnect_untraced"
        };
        let mut group = c.benchmark_group(name);
        for n in [10usize, 100, 1000] {
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
                b.iter(|| {
                    let f = fabric(1, trace);
                    let addr = SocketAddr::new("10.0.0.1".parse().expect("literal"), 7471);
                    let (server, client) = (f.backend("server"), f.backend("client"));
                    connect_many(&server, &client, addr, n).expect("workload");
                })
            });
        }
        group.finish();
    }
}

fn user_event_round_trip(c: &mut Criterion) {
    let f = fabric(2, true);
    let cm = f.backend("client");
    let ch = cm.create_event_channel().expect("channel");
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).expect("id");
    c.bench_function("sim_user_event_round_trip", |b| {
        b.iter(|| {
            cm.write_cm_event(id, EventKind::User, 0, 7).expect("write");
            let event = cm.get_cm_event(ch, Wait::NonBlocking).expect("event");
            cm.ack_cm_event(event).expect("ack");
        })
    });
}

criterion_group!(benches, connections, user_event_round_trip);
criterion_main!(benches);
