use cmtwin::{
    ChannelHandle, CmBackend, ConnParam, EventKind, PortSpace, QpInitAttr, QpType, Transport, Wait,
};
use cmtwin_sim::{Fabric, SimBackend, SimConfig};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

fn drain(cm: &SimBackend, ch: ChannelHandle, mut f: impl FnMut(EventKind, cmtwin::IdHandle)) {
    loop {
        match cm.get_cm_event(ch, Wait::NonBlocking) {
            Ok(e) => {
                let (k, id) = (e.kind(), e.id());
                cm.ack_cm_event(e).unwrap();
                f(k, id);
            }
            Err(_) => return,
        }
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1000);
    let rounds: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(5);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let f = Fabric::builder(1)
        .config(SimConfig {
            trace: false,
            ..SimConfig::default()
        })
        .host("server", Transport::Roce, &[ip("10.0.0.1")])
        .host("client", Transport::Roce, &[ip("10.0.0.2")])
        .build();
    let (s, c) = (f.backend("server"), f.backend("client"));
    let addr = SocketAddr::new(ip("10.0.0.1"), 7471);
    let sch = s.create_event_channel().unwrap();
    let cch = c.create_event_channel().unwrap();
    let l = s.create_id(Some(sch), 0, PortSpace::TCP).unwrap();
    s.bind_addr(l, addr).unwrap();
    s.listen(l, 100000).unwrap();
    let t0 = Instant::now();
    let mut events = 0u64;
    for _ in 0..rounds {
        let mut ids = Vec::new();
        for _ in 0..n {
            let id = c.create_id(Some(cch), 0, PortSpace::TCP).unwrap();
            c.resolve_addr(id, None, addr, Duration::from_secs(2))
                .unwrap();
            ids.push(id);
        }
        f.run_until_idle();
        drain(&c, cch, |k, id| {
            events += 1;
            assert_eq!(k, EventKind::AddrResolved);
            c.resolve_route(id, Duration::from_secs(2)).unwrap();
        });
        f.run_until_idle();
        drain(&c, cch, |k, id| {
            events += 1;
            assert_eq!(k, EventKind::RouteResolved);
            c.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
            c.connect(id, Some(&ConnParam::with_private_data(b"bench")))
                .unwrap();
        });
        let mut children = Vec::new();
        let mut est = 0;
        while est < 2 * n {
            f.run_for(Duration::from_millis(10));
            drain(&s, sch, |k, id| {
                events += 1;
                match k {
                    EventKind::ConnectRequest => {
                        s.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
                        s.accept(id, Some(&ConnParam::default())).unwrap();
                        children.push(id);
                    }
                    EventKind::Established => {
                        est += 1;
                    }
                    k => panic!("{k}"),
                }
            });
            drain(&c, cch, |k, _| {
                est += 1;
                events += 1;
                assert_eq!(k, EventKind::Established);
            });
        }
        for id in &ids {
            c.disconnect(*id).unwrap();
        }
        let mut gone = 0;
        while gone < 2 * n {
            f.run_for(Duration::from_millis(10));
            drain(&s, sch, |k, id| {
                events += 1;
                match k {
                    EventKind::Disconnected => {
                        s.disconnect(id).unwrap_or(());
                    }
                    EventKind::TimewaitExit => {
                        gone += 1;
                        s.destroy_qp(id).unwrap();
                        s.destroy_id(id).unwrap();
                    }
                    k => panic!("{k}"),
                }
            });
            drain(&c, cch, |k, id| {
                events += 1;
                match k {
                    EventKind::Disconnected => {}
                    EventKind::TimewaitExit => {
                        gone += 1;
                        c.destroy_qp(id).unwrap();
                        c.destroy_id(id).unwrap();
                    }
                    k => panic!("{k}"),
                }
            });
        }
    }
    let dt = t0.elapsed();
    let total = n * rounds;
    println!("n={n} rounds={rounds}: {:.1} us/lifecycle, {:.0} lifecycles/s, {:.2} M events/s ({events} events)",
        dt.as_secs_f64() * 1e6 / total as f64, total as f64 / dt.as_secs_f64(), events as f64 / dt.as_secs_f64() / 1e6);
}
