//! Cost of a process switch in `Fabric::run`: two processes play ping-pong with USER events
//! (one switch per event) while 1, 10 or 100 other processes are blocked in a long sleep. A
//! switch should cost the same whatever the number of blocked processes.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmtwin::{ChannelHandle, CmBackend, CmError, EventKind, IdHandle, PortSpace, Transport, Wait};
use cmtwin_sim::{Fabric, SimConfig};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// A channel and an id on it, published by the process that made them.
type Published = Arc<Mutex<Option<(ChannelHandle, IdHandle)>>>;

fn fabric() -> Fabric {
    let ip = |s: &str| s.parse::<IpAddr>().expect("literal address");
    Fabric::builder(3)
        .config(SimConfig {
            trace: false,
            ..SimConfig::default()
        })
        .host("a", Transport::Roce, &[ip("10.0.0.1")])
        .host("b", Transport::Roce, &[ip("10.0.0.2")])
        .build()
        .expect("a valid configuration")
}

/// Makes a channel and an id on it and publishes them.
fn publish(cm: &impl CmBackend, slot: &Published) -> Result<ChannelHandle, CmError> {
    let ch = cm.create_event_channel()?;
    let id = cm.create_id(Some(ch), 0, PortSpace::UDP)?;
    *slot.lock().expect("slot") = Some((ch, id));
    Ok(ch)
}

fn peer(slot: &Published) -> IdHandle {
    slot.lock().expect("slot").expect("published first").1
}

/// Wall time of `rounds` ping-pong round trips (two switches each) with `sleepers` blocked
/// processes around.
fn ping_pong(sleepers: usize, rounds: u64) -> Duration {
    let f = fabric();
    let (ping, pong): (Published, Published) = Default::default();
    let elapsed = Arc::new(Mutex::new(Duration::ZERO));
    let (p1, p2, e) = (ping.clone(), pong.clone(), elapsed.clone());
    f.spawn("a", "ping", move |cm| {
        let ch = publish(&cm, &p1)?;
        cm.sleep(Duration::from_nanos(1))?;
        let start = Instant::now();
        for r in 0..rounds {
            cm.write_cm_event(peer(&p2), EventKind::User, 0, r)?;
            let ev = cm.get_cm_event(ch, Wait::Block)?;
            cm.ack_cm_event(ev)?;
        }
        *e.lock().expect("slot") = start.elapsed();
        Ok(())
    });
    f.spawn("a", "pong", move |cm| {
        let ch = publish(&cm, &pong)?;
        for r in 0..rounds {
            let ev = cm.get_cm_event(ch, Wait::Block)?;
            cm.ack_cm_event(ev)?;
            cm.write_cm_event(peer(&ping), EventKind::User, 0, r)?;
        }
        Ok(())
    });
    for n in 0..sleepers {
        f.spawn("b", &format!("sleeper{n}"), |cm| {
            cm.sleep(Duration::from_secs(3600))
        });
    }
    f.run().expect("every process ends");
    let total = *elapsed.lock().expect("slot");
    total
}

fn switches(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_process_switch");
    for sleepers in [1usize, 10, 100] {
        group.throughput(Throughput::Elements(2));
        group.bench_with_input(
            BenchmarkId::from_parameter(sleepers),
            &sleepers,
            |b, &sleepers| b.iter_custom(|iters| ping_pong(sleepers, iters)),
        );
    }
    group.finish();
}

criterion_group!(benches, switches);
criterion_main!(benches);
