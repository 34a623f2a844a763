//! An outside user's seventh trial: an RDMA library author testing a connection state machine
//! at the CM level, both sides driven by one process over one host holding a server and a
//! client address on one device (as the test VM's dummy interface, NOARP), the simulator's
//! Linux 6.1 profile without wire jitter. The same programs (`tests/src/bin/cm_phases.rs`)
//! ran on librdmacm in the VM; each test says what the real bed showed.
//!
//! * `a_server_accepts_rejects_abandons_and_migrates_requests`: four requests on one channel,
//!   answered by an accept with private data, a reject with private data (REJECTED 28, the
//!   data, 148 bytes), a destroyed request (REJECTED 28, zeros) and an accept after the child
//!   moved to a second channel (its ESTABLISHED there); a client id migrated mid-connection
//!   gets its DISCONNECTED on its new channel; the ids are reaped out of order. rxe-6.1,
//!   rxe-6.12 and siw-6.1 (where REJECTED is -104 with the data's own length): the same events in the same
//!   order.
//! * `a_synchronous_disconnect_returns_with_the_next_event_of_the_id`: an id moved to
//!   synchronous mode with a DISCONNECTED queued returns from `disconnect` at once with that
//!   event; a second `disconnect` waits for TIMEWAIT_EXIT (librdmacm's `ucma_complete`). On
//!   rxe-6.1 the wait took 2.18 s (2.17 s here), on rxe-6.12 0.53 s (the 6.12 profile's
//!   512 ms timewait). On siw-6.1, where no TIMEWAIT_EXIT comes, the call blocked for ever (the
//!   simulator: EDEADLK).
//! * `a_client_disconnect_before_the_rep_makes_the_response_a_connect_error` and
//!   `an_id_refused_once_is_spent`: the QP the client's `rdma_disconnect` moved to ERROR
//!   cannot take the REP (CONNECT_ERROR, status -1; the server's child gets REJECTED 28 once
//!   the client destroys its id); after REJECTED, `connect`, `resolve_route` and
//!   `resolve_addr` are EINVAL and `disconnect` succeeds; a server's `disconnect` of a request
//!   it holds makes its later `accept` EINVAL (the QP is in ERROR) while `reject` still works.
//! * `an_iwarp_connect_to_an_address_no_host_holds_waits_out_tcps_syn_retries`: on a NOARP
//!   netdev an absent on-link address resolves, and siw's `rdma_connect`, which makes the TCP
//!   connection inside the call, blocks through the SYN retries and fails with ETIMEDOUT
//!   (the simulator made the connection and returned at once).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, ConnParam, Errno, IdHandle, PortSpace, QpInitAttr, QpType,
    Transport, Wait,
};
use cmtwin_sim::{Fabric, SimBackend, SimConfig, IW_TCP_SYN_GIVE_UP};

const S: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const ABSENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
const T: Duration = Duration::from_secs(2);

/// What a scenario saw: one line per call outcome and event, with the time in microseconds.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

/// A scenario's view: the backend, its start and its log.
struct Probe<'a> {
    cm: &'a SimBackend,
    t0: Duration,
    log: Log,
}

impl Probe<'_> {
    fn line(&self, what: String) {
        let us = self.cm.now().saturating_sub(self.t0).as_micros();
        self.log.0.lock().unwrap().push(format!("{us} {what}"));
    }

    /// Logs a call's outcome (`ok` or the errno).
    fn r<T>(&self, what: &str, result: Result<T, CmError>) {
        let outcome = result.map_or_else(|e| e.errno.to_string(), |_| "ok".to_string());
        self.line(format!("{what}: {outcome}"));
    }

    /// The next event of any of `chs` within `within`, acknowledged and logged as
    /// `<n> <KIND> <status> <private data up to a zero>/<length>` (n: the channel's index).
    fn ev(&self, chs: &[ChannelHandle], within: Duration) -> Option<IdHandle> {
        match self.cm.get_cm_event_any(chs, Wait::Timeout(within)) {
            Ok((from, event)) => {
                let info = event.info().clone();
                self.cm.ack_cm_event(event).expect("ack");
                let n = chs.iter().position(|c| *c == from).unwrap();
                let pd: String = info
                    .private_data
                    .iter()
                    .take_while(|b| **b != 0)
                    .map(|b| *b as char)
                    .collect();
                let kind = info.kind.to_string().replace("RDMA_CM_EVENT_", "");
                let len = info.private_data.len();
                self.line(format!("{n} {kind} {} {pd}/{len}", info.status));
                Some(info.id)
            }
            Err(e) => {
                self.line(format!("no event ({})", e.errno));
                None
            }
        }
    }

    /// A listener on `ch` at the server address, port `port`.
    fn listener(&self, ch: ChannelHandle, port: u16) -> IdHandle {
        let id = self.cm.create_id(Some(ch), 100, PortSpace::TCP).unwrap();
        self.cm.bind_addr(id, SocketAddr::new(S, port)).unwrap();
        self.cm.listen(id, 8).unwrap();
        id
    }

    /// A client id on `ch`, resolved to `dst` (its two events not logged).
    fn resolved(&self, ch: ChannelHandle, ctx: u64, dst: SocketAddr) -> IdHandle {
        let id = self.cm.create_id(Some(ch), ctx, PortSpace::TCP).unwrap();
        self.cm.resolve_addr(id, None, dst, T).unwrap();
        drop(self.cm.get_cm_event(ch, Wait::Timeout(T)).unwrap());
        self.cm.resolve_route(id, T).unwrap();
        drop(self.cm.get_cm_event(ch, Wait::Timeout(T)).unwrap());
        id
    }

    fn qp(&self, id: IdHandle) {
        self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
    }
}

/// Runs `scenario` on one host of `transport` holding S and C (NOARP, no jitter) and returns
/// its log.
fn run(transport: Transport, scenario: fn(&Probe)) -> Vec<String> {
    let config = SimConfig {
        noarp: true,
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    let fabric = Fabric::builder(1)
        .config(config)
        .host("node", transport, &[S, C])
        .build()
        .unwrap();
    let log = Log::default();
    let l = log.clone();
    fabric.spawn("node", "probe", move |cm| {
        let p = Probe {
            cm: &cm,
            t0: cm.now(),
            log: l,
        };
        scenario(&p);
        Ok(())
    });
    fabric.run().unwrap();
    let lines = log.0.lock().unwrap().clone();
    lines
}

/// Asserts `got` is `want`, printing both on a mismatch.
fn check(got: &[String], want: &[&str]) {
    assert_eq!(got, want, "\ngot:\n{}\n", got.join("\n"));
}

fn many_requests(p: &Probe) {
    let cm = p.cm;
    let (chs, chs2) = (
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    );
    let (chc, chc2) = (
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    );
    let l = p.listener(chs, 7472);
    let clients: Vec<IdHandle> = (0..4u64)
        .map(|n| {
            let a = p.resolved(chc, n, SocketAddr::new(S, 7472));
            p.qp(a);
            let data = format!("c{n}");
            cm.connect(a, Some(&ConnParam::with_private_data(data.as_bytes())))
                .unwrap();
            a
        })
        .collect();
    let children: Vec<IdHandle> = (0..4).map(|_| p.ev(&[chs], T).unwrap()).collect();
    p.qp(children[0]);
    p.r(
        "accept s0",
        cm.accept(children[0], Some(&ConnParam::with_private_data(b"ok0"))),
    );
    p.r("reject s1", cm.reject(children[1], b"no1"));
    p.r("destroy s2 unanswered", cm.destroy_id(children[2]));
    p.r("migrate s3", cm.migrate_id(children[3], Some(chs2)));
    p.qp(children[3]);
    p.r(
        "accept s3",
        cm.accept(children[3], Some(&ConnParam::with_private_data(b"ok3"))),
    );
    for _ in 0..6 {
        p.ev(&[chs, chs2, chc], T);
    }
    p.r("destroy chs2 in use", cm.destroy_event_channel(chs2));
    p.r("migrate c0", cm.migrate_id(clients[0], Some(chc2)));
    p.r("disconnect s0", cm.disconnect(children[0]));
    p.ev(&[chs, chc, chc2], T);
    p.r("destroy s3 connected", cm.destroy_id(children[3]));
    p.ev(&[chs, chc, chc2], T);
    p.r("destroy listener", cm.destroy_id(l));
    for id in [clients[1], clients[3], clients[2], clients[0]] {
        p.r("destroy client", cm.destroy_id(id));
    }
    p.ev(&[chs, chc, chc2], T);
    for id in [children[0], children[1]] {
        p.r("destroy child", cm.destroy_id(id));
    }
}

#[test]
fn a_server_accepts_rejects_abandons_and_migrates_requests() {
    let want = [
        "5 0 CONNECT_REQUEST 0 c0/56",
        "5 0 CONNECT_REQUEST 0 c1/56",
        "5 0 CONNECT_REQUEST 0 c2/56",
        "5 0 CONNECT_REQUEST 0 c3/56",
        "5 accept s0: ok",
        "5 reject s1: ok",
        "5 destroy s2 unanswered: ok",
        "5 migrate s3: ok",
        "5 accept s3: ok",
        "10 2 ESTABLISHED 0 ok0/196",
        "10 2 REJECTED 28 no1/148",
        "10 2 REJECTED 28 /148",
        "10 2 ESTABLISHED 0 ok3/196",
        "15 0 ESTABLISHED 0 /0",
        "15 1 ESTABLISHED 0 /0",
        "15 destroy chs2 in use: EBUSY (16)",
        "15 migrate c0: ok",
        "35 disconnect s0: ok",
        "40 2 DISCONNECTED 0 /0",
        "40 destroy s3 connected: ok",
        "45 1 DISCONNECTED 0 /0",
        "45 destroy listener: ok",
        "45 destroy client: ok",
        "45 destroy client: ok",
        "45 destroy client: ok",
        "45 destroy client: ok",
        "50 0 DISCONNECTED 0 /0",
        "50 destroy child: ok",
        "50 destroy child: ok",
    ];
    let got = run(Transport::Roce, many_requests);
    check(&got, &want);
}

fn sync_migrate(p: &Probe) {
    let cm = p.cm;
    let (chs, chc) = (
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    );
    let l = p.listener(chs, 7478);
    let a = p.resolved(chc, 1, SocketAddr::new(S, 7478));
    p.qp(a);
    cm.connect(a, None).unwrap();
    let c = p.ev(&[chs], T).unwrap();
    p.qp(c);
    cm.accept(c, None).unwrap();
    p.ev(&[chs, chc], T);
    p.ev(&[chs, chc], T);
    p.r("server disconnect", cm.disconnect(c));
    p.r("sleep", cm.sleep(Duration::from_millis(100)));
    p.r("migrate client to sync", cm.migrate_id(a, None));
    for _ in 0..2 {
        p.r("client disconnect", cm.disconnect(a));
        let current = cm.sync_event(a).unwrap().map(|e| e.kind.to_string());
        p.line(format!("sync_event {current:?}"));
    }
    p.ev(&[chs], T);
    for id in [a, c, l] {
        p.r("destroy", cm.destroy_id(id));
    }
}

#[test]
fn a_synchronous_disconnect_returns_with_the_next_event_of_the_id() {
    let want = [
        "5 0 CONNECT_REQUEST 0 /56",
        "10 1 ESTABLISHED 0 /196",
        "15 0 ESTABLISHED 0 /0",
        "35 server disconnect: ok",
        "100035 sleep: ok",
        "100035 migrate client to sync: ok",
        "100055 client disconnect: ok",
        "100055 sync_event Some(\"RDMA_CM_EVENT_DISCONNECTED\")",
        "2272000 client disconnect: ok",
        "2272000 sync_event Some(\"RDMA_CM_EVENT_TIMEWAIT_EXIT\")",
        "2272000 0 DISCONNECTED 0 /0",
        "2272000 destroy: ok",
        "2272000 destroy: ok",
        "2272000 destroy: ok",
    ];
    check(&run(Transport::Roce, sync_migrate), &want);
}

fn client_disconnects_early(p: &Probe) {
    let cm = p.cm;
    let (chs, chc) = (
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    );
    let l = p.listener(chs, 7476);
    let a = p.resolved(chc, 1, SocketAddr::new(S, 7476));
    p.qp(a);
    p.r("connect", cm.connect(a, None));
    p.r("client disconnect", cm.disconnect(a));
    let c = p.ev(&[chs, chc], T).unwrap();
    p.qp(c);
    p.r("accept", cm.accept(c, None));
    p.ev(&[chs, chc], Duration::from_secs(3));
    p.ev(&[chs, chc], Duration::from_secs(3));
    p.r("destroy client", cm.destroy_id(a));
    p.ev(&[chs, chc], Duration::from_secs(1));
    p.r("destroy child", cm.destroy_id(c));
    p.r("destroy listener", cm.destroy_id(l));
}

#[test]
fn a_client_disconnect_before_the_rep_makes_the_response_a_connect_error() {
    let want = [
        "0 connect: ok",
        "20 client disconnect: ok",
        "20 0 CONNECT_REQUEST 0 /56",
        "20 accept: ok",
        "25 1 CONNECT_ERROR -1 /196",
        "3000025 no event (ETIMEDOUT (110))",
        "3000025 destroy client: ok",
        "3000030 0 REJECTED 28 /148",
        "3000030 destroy child: ok",
        "3000030 destroy listener: ok",
    ];
    check(&run(Transport::Roce, client_disconnects_early), &want);
}

fn spent_ids(p: &Probe) {
    let cm = p.cm;
    let (chs, chc) = (
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    );
    let l = p.listener(chs, 7476);
    let b = p.resolved(chc, 2, SocketAddr::new(S, 7477));
    p.qp(b);
    p.r("connect to no listener", cm.connect(b, None));
    p.ev(&[chs, chc], T);
    p.r("connect again", cm.connect(b, None));
    p.r("resolve_route again", cm.resolve_route(b, T));
    p.r(
        "resolve_addr again",
        cm.resolve_addr(b, None, SocketAddr::new(S, 7476), T),
    );
    p.r("disconnect", cm.disconnect(b));
    p.r("destroy", cm.destroy_id(b));
    let d = p.resolved(chc, 3, SocketAddr::new(S, 7476));
    p.qp(d);
    p.r("connect", cm.connect(d, None));
    let c = p.ev(&[chs, chc], T).unwrap();
    p.qp(c);
    p.r("server disconnect", cm.disconnect(c));
    p.r("accept", cm.accept(c, None));
    p.ev(&[chs, chc], Duration::from_secs(1));
    p.r("reject", cm.reject(c, b"late"));
    p.ev(&[chs, chc], Duration::from_secs(1));
    for id in [d, c, l] {
        p.r("destroy", cm.destroy_id(id));
    }
}

#[test]
fn an_id_refused_once_is_spent() {
    let want = [
        "0 connect to no listener: ok",
        "10 1 REJECTED 8 /148",
        "10 connect again: EINVAL (22)",
        "10 resolve_route again: EINVAL (22)",
        "10 resolve_addr again: EINVAL (22)",
        "30 disconnect: ok",
        "30 destroy: ok",
        "30 connect: ok",
        "35 0 CONNECT_REQUEST 0 /56",
        "55 server disconnect: ok",
        "55 accept: EINVAL (22)",
        "1000055 no event (ETIMEDOUT (110))",
        "1000055 reject: ok",
        "1000060 1 REJECTED 28 late/148",
        "1000060 destroy: ok",
        "1000060 destroy: ok",
        "1000060 destroy: ok",
    ];
    check(&run(Transport::Roce, spent_ids), &want);
}

fn connect_to_absent(p: &Probe) {
    let cm = p.cm;
    let ch = cm.create_event_channel().unwrap();
    let a = cm.create_id(Some(ch), 1, PortSpace::TCP).unwrap();
    let dst = SocketAddr::new(ABSENT, 7475);
    p.r(
        "resolve_addr",
        cm.resolve_addr(a, Some(SocketAddr::new(C, 0)), dst, T),
    );
    p.ev(&[ch], T);
    p.r("resolve_route", cm.resolve_route(a, T));
    p.ev(&[ch], T);
    p.qp(a);
    p.r("connect", cm.connect(a, None));
    p.ev(&[ch], Duration::from_secs(5));
    p.r("disconnect", cm.disconnect(a));
    p.ev(&[ch], Duration::from_secs(1));
    p.r("destroy", cm.destroy_id(a));
}

#[test]
fn an_iwarp_connect_to_an_address_no_host_holds_waits_out_tcps_syn_retries() {
    // siw blocks in the call through the SYN retries (131 s on siw-6.1, 127 s here), then
    // the id is back in ROUTE_RESOLVED: no event, and `disconnect` (after moving the QP, 20 us)
    // finds no connection.
    let syn = IW_TCP_SYN_GIVE_UP.as_micros();
    let want = [
        "0 resolve_addr: ok".to_string(),
        "0 0 ADDR_RESOLVED 0 /0".into(),
        "0 resolve_route: ok".into(),
        "0 0 ROUTE_RESOLVED 0 /0".into(),
        format!("{syn} connect: {}", Errno::ETIMEDOUT),
        format!("{} no event ({})", syn + 5_000_000, Errno::ETIMEDOUT),
        format!("{} disconnect: {}", syn + 5_000_020, Errno::EINVAL),
        format!("{} no event ({})", syn + 6_000_020, Errno::ETIMEDOUT),
        format!("{} destroy: ok", syn + 6_000_020),
    ];
    let got = run(Transport::Iwarp, connect_to_absent);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    check(&got, &want);
}
