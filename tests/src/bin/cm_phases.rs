//! A connection state machine's author probing the CM from one process, both sides driven by
//! one thread over one backend (a server address and a client address on the same device, as
//! on a test VM): what the address accessors say after each phase, which `set_option` calls
//! each phase accepts, a server that accepts, rejects, abandons and migrates requests and
//! reaps ids in its own order, a server that disconnects before its ESTABLISHED, a client
//! port reused after its connection, and resolution from a source on no device or to an absent
//! host. Each scenario prints one line per call result and event, with the time since its
//! start, so that a run on the simulator and one on librdmacm can be compared line by line.
//!
//! `cargo run -p cmtwin-tests --bin cm_phases [scenario...]` runs on a simulated RoCE host
//! (Linux 6.1 profile, NOARP as the VM's dummy interface); with `CMTWIN_RDMA_ADDR` and
//! `CMTWIN_RDMA_ADDR2` (two addresses of one RDMA interface, as `scripts/vm-run` sets) on
//! librdmacm. `CMTWIN_TRANSPORT=iwarp|ib` picks the simulated transport.
//!
//! A probe, not a test: it asserts nothing, and no test run starts it (on siw some of its
//! scenarios block for minutes, one for ever). What it found is pinned, at exact virtual
//! times, in `tests/tests/sim_outside_trial7.rs`.

use std::fmt::Debug;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, CmOption, ConnParam, EventInfo, IdHandle, PortSpace,
    QpInitAttr, QpType, Transport, Wait,
};
use cmtwin_sim::{Fabric, SimConfig};
use cmtwin_verbs::VerbsBackend;

/// Every scenario, by name.
const SCENARIOS: [&str; 9] = [
    "phases",
    "client_early",
    "sync_migrate",
    "reuse_both",
    "options",
    "server",
    "early_disconnect",
    "port_reuse",
    "resolve",
];

/// A scenario's state: the backend, the two addresses, the start and the lines so far.
struct Probe<'a, B> {
    cm: &'a B,
    server: IpAddr,
    client: IpAddr,
    t0: Duration,
}

impl<'a, B: CmBackend> Probe<'a, B> {
    fn new(cm: &'a B, server: IpAddr, client: IpAddr) -> Self {
        Probe {
            cm,
            server,
            client,
            t0: cm.now(),
        }
    }

    /// Prints `what` with the time since the start, the addresses named S and C.
    fn line(&self, what: String) {
        let t = self.cm.now().saturating_sub(self.t0);
        let what = what
            .replace(&self.server.to_string(), "S")
            .replace(&self.client.to_string(), "C");
        println!("{:>10.3} ms  {what}", t.as_secs_f64() * 1e3);
    }

    /// Prints a call's outcome: `ok` or its errno.
    fn r<T: Debug>(&self, what: &str, result: Result<T, CmError>) -> Option<T> {
        match result {
            Ok(v) => {
                self.line(format!("{what}: ok {v:?}"));
                Some(v)
            }
            Err(e) => {
                self.line(format!("{what}: {}", e.errno));
                None
            }
        }
    }

    /// The next event of `channel` within `within`, acknowledged and printed.
    fn ev(&self, who: &str, channel: ChannelHandle, within: Duration) -> Option<EventInfo> {
        match self.cm.get_cm_event(channel, Wait::Timeout(within)) {
            Ok(event) => {
                let info = event.info().clone();
                let _ = self.cm.ack_cm_event(event);
                let pd: String = info
                    .private_data
                    .iter()
                    .take_while(|b| **b != 0)
                    .map(|b| *b as char)
                    .collect();
                self.line(format!(
                    "{who}: {} status {} pd {:?}/{}",
                    info.kind,
                    info.status,
                    pd,
                    info.private_data.len()
                ));
                Some(info)
            }
            Err(e) => {
                self.line(format!("{who}: no event ({})", e.errno));
                None
            }
        }
    }

    /// Prints what the accessors say of `id`: local, peer, src port, dst port (ports as
    /// `eph` when ephemeral, i.e. not one the program chose).
    fn addrs(&self, who: &str, id: IdHandle, chosen: &[u16]) {
        let port = |p: u16| {
            if p == 0 || chosen.contains(&p) {
                p.to_string()
            } else {
                "eph".to_string()
            }
        };
        let sa = |a: Option<SocketAddr>| {
            a.map_or("none".to_string(), |a| {
                format!("{}:{}", a.ip(), port(a.port()))
            })
        };
        let local = self.cm.local_addr(id).ok().flatten();
        let peer = self.cm.peer_addr(id).ok().flatten();
        let src = self.cm.src_port(id).unwrap_or(u16::MAX);
        let dst = self.cm.dst_port(id).unwrap_or(u16::MAX);
        self.line(format!(
            "{who} addrs: local {} peer {} src {} dst {}",
            sa(local),
            sa(peer),
            port(src),
            port(dst)
        ));
    }

    fn sa(&self, ip: IpAddr, port: u16) -> SocketAddr {
        SocketAddr::new(ip, port)
    }
}

const T: Duration = Duration::from_secs(2);
const RES: Duration = Duration::from_millis(2000);

fn rc() -> QpInitAttr {
    QpInitAttr::new(QpType::Rc)
}

fn pd(data: &str) -> ConnParam {
    ConnParam::with_private_data(data.as_bytes())
}

/// A client id on `ch` resolved (address and route) to `dst` from `src`.
fn resolved<B: CmBackend>(
    p: &Probe<B>,
    ch: ChannelHandle,
    ctx: u64,
    src: Option<SocketAddr>,
    dst: SocketAddr,
) -> Result<IdHandle, CmError> {
    let id = p.cm.create_id(Some(ch), ctx, PortSpace::TCP)?;
    p.cm.resolve_addr(id, src, dst, RES)?;
    p.ev("client", ch, T);
    p.cm.resolve_route(id, RES)?;
    p.ev("client", ch, T);
    Ok(id)
}

/// A listener on `ch` at `addr`.
fn listener<B: CmBackend>(
    p: &Probe<B>,
    ch: ChannelHandle,
    addr: SocketAddr,
) -> Result<IdHandle, CmError> {
    let id = p.cm.create_id(Some(ch), 100, PortSpace::TCP)?;
    p.cm.bind_addr(id, addr)?;
    p.cm.listen(id, 8)?;
    Ok(id)
}

/// The accessors through a connection's life, on the client, the listener and the child.
fn phases<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = p.cm.create_id(Some(chs), 1, PortSpace::TCP)?;
    p.addrs("listener new", l, &[]);
    p.r("bind S:0", p.cm.bind_addr(l, p.sa(p.server, 0)));
    p.addrs("listener bound", l, &[]);
    p.r("listen", p.cm.listen(l, 8));
    p.addrs("listener listening", l, &[]);
    let port = p.cm.src_port(l)?;
    let a = p.cm.create_id(Some(chc), 2, PortSpace::TCP)?;
    p.addrs("client new", a, &[port]);
    p.r(
        "resolve_addr C:0 -> S",
        p.cm.resolve_addr(a, Some(p.sa(p.client, 0)), p.sa(p.server, port), RES),
    );
    p.addrs("client resolving", a, &[port]);
    p.ev("client", chc, T);
    p.addrs("client addr resolved", a, &[port]);
    p.r("resolve_route", p.cm.resolve_route(a, RES));
    p.ev("client", chc, T);
    p.addrs("client route resolved", a, &[port]);
    p.r("create_qp", p.cm.create_qp(a, &rc()).map(|_| ()));
    p.r("connect", p.cm.connect(a, Some(&pd("hi"))));
    p.addrs("client connecting", a, &[port]);
    let req = p.ev("server", chs, T).expect("a request");
    let c = req.id;
    p.addrs("child requested", c, &[port]);
    p.r("child context", p.cm.context(c));
    p.r("create_qp child", p.cm.create_qp(c, &rc()).map(|_| ()));
    p.r("accept", p.cm.accept(c, Some(&pd("yo"))));
    p.ev("client", chc, T);
    p.ev("server", chs, T);
    p.addrs("client established", a, &[port]);
    p.addrs("child established", c, &[port]);
    p.r("client disconnect", p.cm.disconnect(a));
    p.ev("client", chc, T);
    p.ev("server", chs, T);
    p.addrs("client disconnected", a, &[port]);
    p.addrs("child disconnected", c, &[port]);
    p.r("child disconnect", p.cm.disconnect(c));
    p.ev("client", chc, Duration::from_secs(5));
    p.ev("server", chs, Duration::from_secs(5));
    p.addrs("client after timewait", a, &[port]);
    p.r("destroy client", p.cm.destroy_id(a));
    p.r("destroy child", p.cm.destroy_id(c));
    p.r("destroy listener", p.cm.destroy_id(l));
    Ok(())
}

/// Each option on an id at each phase.
fn try_options<B: CmBackend>(p: &Probe<B>, phase: &str, id: IdHandle) {
    for o in [
        CmOption::Tos(32),
        CmOption::ReuseAddr(true),
        CmOption::AfOnly(true),
        CmOption::AckTimeout(14),
    ] {
        p.r(&format!("{phase} set {o:?}"), p.cm.set_option(id, &o));
    }
}

/// Which options each phase accepts.
fn options<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = p.cm.create_id(Some(chs), 1, PortSpace::TCP)?;
    try_options(p, "listener new", l);
    p.cm.bind_addr(l, p.sa(p.server, 7471))?;
    try_options(p, "listener bound", l);
    p.cm.listen(l, 8)?;
    try_options(p, "listener listening", l);
    let a = p.cm.create_id(Some(chc), 2, PortSpace::TCP)?;
    p.cm.resolve_addr(a, None, p.sa(p.server, 7471), RES)?;
    try_options(p, "client resolving", a);
    p.ev("client", chc, T);
    try_options(p, "client addr resolved", a);
    p.cm.resolve_route(a, RES)?;
    p.ev("client", chc, T);
    try_options(p, "client route resolved", a);
    p.cm.create_qp(a, &rc())?;
    p.cm.connect(a, None)?;
    try_options(p, "client connecting", a);
    let c = p.ev("server", chs, T).expect("a request").id;
    try_options(p, "child requested", c);
    p.cm.create_qp(c, &rc())?;
    p.cm.accept(c, None)?;
    p.ev("client", chc, T);
    p.ev("server", chs, T);
    try_options(p, "client established", a);
    p.cm.disconnect(a)?;
    p.ev("client", chc, T);
    p.ev("server", chs, T);
    try_options(p, "client disconnected", a);
    let u = p.cm.create_id(Some(chc), 3, PortSpace::UDP)?;
    try_options(p, "udp new", u);
    for id in [a, c, l, u] {
        p.r("destroy", p.cm.destroy_id(id));
    }
    Ok(())
}

/// Four requests: one accepted, one rejected with data, one abandoned (its id destroyed),
/// one moved to a second channel before it is accepted; then a client id migrated
/// mid-connection, and ids reaped out of order.
fn many_requests<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chs2) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let (chc, chc2) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7472))?;
    let mut clients = Vec::new();
    for n in 0..4u64 {
        let a = resolved(p, chc, n, None, p.sa(p.server, 7472))?;
        p.cm.create_qp(a, &rc())?;
        p.r(
            &format!("connect c{n}"),
            p.cm.connect(a, Some(&pd(&format!("c{n}")))),
        );
        clients.push(a);
    }
    let mut children = Vec::new();
    for _ in 0..4 {
        let info = p.ev("server", chs, T).expect("a request");
        children.push((info.private_data[1] - b'0', info.id));
    }
    children.sort();
    let child = |n: usize| children[n].1;
    p.r("create_qp s0", p.cm.create_qp(child(0), &rc()).map(|_| ()));
    p.r("accept s0", p.cm.accept(child(0), Some(&pd("ok0"))));
    p.r("reject s1", p.cm.reject(child(1), b"no1"));
    p.r("destroy s2 unanswered", p.cm.destroy_id(child(2)));
    p.r("migrate s3 -> chs2", p.cm.migrate_id(child(3), Some(chs2)));
    p.r("create_qp s3", p.cm.create_qp(child(3), &rc()).map(|_| ()));
    p.r("accept s3", p.cm.accept(child(3), Some(&pd("ok3"))));
    for _ in 0..4 {
        if let Some(info) = p.ev("client", chc, T) {
            p.r("  its context", p.cm.context(info.id));
        }
    }
    p.ev("server chs", chs, T);
    p.ev("server chs2", chs2, T);
    p.ev("server chs (nothing more)", chs, Duration::from_millis(50));
    p.r(
        "destroy channel chs2 in use",
        p.cm.destroy_event_channel(chs2),
    );
    p.r(
        "migrate c0 -> chc2",
        p.cm.migrate_id(clients[0], Some(chc2)),
    );
    p.r("server disconnect s0", p.cm.disconnect(child(0)));
    p.ev("client chc2", chc2, T);
    p.ev("server chs", chs, T);
    p.r("destroy s3 connected", p.cm.destroy_id(child(3)));
    p.ev("client chc", chc, T);
    p.r("destroy listener", p.cm.destroy_id(l));
    p.ev("server chs (nothing more)", chs, Duration::from_millis(50));
    p.r("destroy c1 rejected", p.cm.destroy_id(clients[1]));
    p.r("migrate c3 -> sync", p.cm.migrate_id(clients[3], None));
    if iwarp() {
        // No event would ever end a synchronous disconnect here: librdmacm waits for ever.
        p.line("(iWARP: no TIMEWAIT_EXIT, synchronous disconnect skipped)".into());
    } else {
        p.r("disconnect c3 sync", p.cm.disconnect(clients[3]));
    }
    p.r(
        "c3 sync_event",
        p.cm.sync_event(clients[3]).map(|e| e.map(|e| e.kind)),
    );
    p.r("destroy c3", p.cm.destroy_id(clients[3]));
    p.r("destroy c2", p.cm.destroy_id(clients[2]));
    p.r("destroy c0", p.cm.destroy_id(clients[0]));
    p.r("destroy s0", p.cm.destroy_id(child(0)));
    p.ev("client chc2 (timewait)", chc2, Duration::from_secs(5));
    p.ev("server chs (timewait)", chs, Duration::from_secs(5));
    p.r("destroy s1", p.cm.destroy_id(child(1)));
    for ch in [chs, chs2, chc, chc2] {
        p.r("destroy channel", p.cm.destroy_event_channel(ch));
    }
    Ok(())
}

/// The server disconnects right after accepting, before its ESTABLISHED; then a client
/// without QP disconnects after its CONNECT_RESPONSE instead of establishing.
fn early_disconnect<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7473))?;
    let a = resolved(p, chc, 1, None, p.sa(p.server, 7473))?;
    p.cm.create_qp(a, &rc())?;
    p.r("connect", p.cm.connect(a, None));
    let c = p.ev("server", chs, T).expect("a request").id;
    p.cm.create_qp(c, &rc())?;
    p.r("accept", p.cm.accept(c, None));
    p.r("server disconnect at once", p.cm.disconnect(c));
    for _ in 0..3 {
        if p.get_any(&[chs, chc], Duration::from_secs(3)).is_none() {
            break;
        }
    }
    p.r("client disconnect", p.cm.disconnect(a));
    for _ in 0..3 {
        if p.get_any(&[chs, chc], Duration::from_secs(4)).is_none() {
            break;
        }
    }
    p.r("destroy client", p.cm.destroy_id(a));
    p.r("destroy child", p.cm.destroy_id(c));
    if iwarp() {
        p.r("destroy listener", p.cm.destroy_id(l));
        return Ok(());
    }
    // A QP-less client that disconnects instead of establishing.
    let b = resolved(p, chc, 2, None, p.sa(p.server, 7473))?;
    let mut param = ConnParam::with_private_data(b"x");
    param.qp_num = 77;
    param.responder_resources = 1;
    param.initiator_depth = 1;
    p.r("connect without qp", p.cm.connect(b, Some(&param)));
    let c = p.ev("server", chs, T).expect("a request").id;
    p.cm.create_qp(c, &rc())?;
    p.r("accept", p.cm.accept(c, None));
    p.ev("client", chc, T);
    p.r("client disconnect instead of establish", p.cm.disconnect(b));
    for _ in 0..3 {
        if p.get_any(&[chs, chc], Duration::from_secs(3)).is_none() {
            break;
        }
    }
    // The child's ESTABLISHED has not come: take one event and hold it unacknowledged.
    p.r("establish after disconnect", p.cm.establish(b));
    p.r("destroy client", p.cm.destroy_id(b));
    for _ in 0..3 {
        if p.get_any(&[chs, chc], Duration::from_secs(3)).is_none() {
            break;
        }
    }
    p.r("destroy child", p.cm.destroy_id(c));
    p.r("destroy listener", p.cm.destroy_id(l));
    Ok(())
}

impl<B: CmBackend> Probe<'_, B> {
    /// The next event of either channel within `within`, acknowledged and printed.
    fn get_any(&self, chs: &[ChannelHandle], within: Duration) -> Option<EventInfo> {
        match self.cm.get_cm_event_any(chs, Wait::Timeout(within)) {
            Ok((from, event)) => {
                let info = event.info().clone();
                let _ = self.cm.ack_cm_event(event);
                let who = if from == chs[0] { "server" } else { "client" };
                self.line(format!(
                    "{who}: {} status {} pdlen {}",
                    info.kind,
                    info.status,
                    info.private_data.len()
                ));
                Some(info)
            }
            Err(e) => {
                self.line(format!("no event ({})", e.errno));
                None
            }
        }
    }
}

/// A client port bound explicitly, connected, disconnected, then bound and connected again.
fn port_reuse<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7474))?;
    let src = p.sa(p.client, 20074);
    let mut old: Option<(IdHandle, IdHandle)> = None;
    for round in 0..2 {
        let a = p.cm.create_id(Some(chc), round, PortSpace::TCP)?;
        p.r(
            &format!("round {round} bind C:20074"),
            p.cm.bind_addr(a, src),
        );
        if let Some((oa, oc)) = old.take() {
            p.r("destroy old client", p.cm.destroy_id(oa));
            p.r("bind C:20074 again", p.cm.bind_addr(a, src));
            p.r("destroy old child", p.cm.destroy_id(oc));
        }
        p.r(
            "resolve_addr",
            p.cm.resolve_addr(a, None, p.sa(p.server, 7474), RES),
        );
        p.ev("client", chc, T);
        p.addrs("client", a, &[20074, 7474]);
        p.cm.resolve_route(a, RES)?;
        p.ev("client", chc, T);
        p.cm.create_qp(a, &rc())?;
        p.r("connect", p.cm.connect(a, None));
        let c = p.ev("server", chs, T).expect("a request").id;
        p.addrs("child", c, &[20074, 7474]);
        p.cm.create_qp(c, &rc())?;
        p.cm.accept(c, None)?;
        p.ev("client", chc, T);
        p.ev("server", chs, T);
        p.r("client disconnect", p.cm.disconnect(a));
        p.ev("client", chc, T);
        p.ev("server", chs, T);
        p.r("server disconnect", p.cm.disconnect(c));
        old = Some((a, c));
    }
    let (a, c) = old.expect("two rounds");
    p.ev("client (timewait)", chc, Duration::from_secs(5));
    p.ev("client (second timewait)", chc, Duration::from_secs(5));
    p.ev("server (timewait)", chs, Duration::from_secs(5));
    p.ev("server (second timewait)", chs, Duration::from_secs(5));
    for id in [a, c, l] {
        p.r("destroy", p.cm.destroy_id(id));
    }
    Ok(())
}

/// Resolution from an address on no device, and to an on-link address no host holds.
fn resolve<B: CmBackend>(p: &Probe<B>, absent: IpAddr) -> Result<(), CmError> {
    let ch = p.cm.create_event_channel()?;
    let a = p.cm.create_id(Some(ch), 1, PortSpace::TCP)?;
    p.r(
        "resolve_addr from absent",
        p.cm.resolve_addr(a, Some(p.sa(absent, 0)), p.sa(p.server, 7475), RES),
    );
    p.ev("client", ch, Duration::from_millis(2500));
    p.addrs("client", a, &[7475]);
    p.r("destroy", p.cm.destroy_id(a));
    let a = p.cm.create_id(Some(ch), 2, PortSpace::TCP)?;
    p.r(
        "resolve_addr to absent (src C)",
        p.cm.resolve_addr(a, Some(p.sa(p.client, 0)), p.sa(absent, 7475), RES),
    );
    if p.ev("client", ch, Duration::from_millis(2500)).is_some() {
        p.r("resolve_route", p.cm.resolve_route(a, RES));
        p.ev("client", ch, Duration::from_millis(2500));
        p.cm.create_qp(a, &rc())?;
        p.r("connect to absent", p.cm.connect(a, None));
        p.ev("client", ch, Duration::from_secs(5));
        p.r("disconnect while connecting", p.cm.disconnect(a));
        p.ev("client", ch, Duration::from_secs(1));
    }
    p.r("destroy", p.cm.destroy_id(a));
    p.r("destroy channel", p.cm.destroy_event_channel(ch));
    Ok(())
}

/// Events of either channel until `quiet` passes without one.
fn drain_both<B: CmBackend>(p: &Probe<B>, chs: ChannelHandle, chc: ChannelHandle, quiet: Duration) {
    for _ in 0..6 {
        if p.get_any(&[chs, chc], quiet).is_none() {
            break;
        }
    }
}

/// A client that disconnects before its REP arrives; an id reused after REJECTED; a server
/// that disconnects a request before accepting it.
fn client_early<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7476))?;
    let a = resolved(p, chc, 1, None, p.sa(p.server, 7476))?;
    p.cm.create_qp(a, &rc())?;
    p.r("connect", p.cm.connect(a, None));
    p.r("client disconnect before the REP", p.cm.disconnect(a));
    let c = p.ev("server", chs, T).expect("a request").id;
    p.cm.create_qp(c, &rc())?;
    p.r("accept", p.cm.accept(c, None));
    drain_both(p, chs, chc, Duration::from_secs(3));
    p.r("destroy client", p.cm.destroy_id(a));
    drain_both(p, chs, chc, Duration::from_secs(1));
    p.r("destroy child", p.cm.destroy_id(c));
    // An id whose connect was refused, used again.
    let b = resolved(p, chc, 2, None, p.sa(p.server, 7477))?;
    p.cm.create_qp(b, &rc())?;
    p.r("connect to no listener", p.cm.connect(b, None));
    p.ev("client", chc, T);
    p.r("connect again", p.cm.connect(b, None));
    p.r("resolve_route again", p.cm.resolve_route(b, RES));
    p.r(
        "resolve_addr again",
        p.cm.resolve_addr(b, None, p.sa(p.server, 7476), RES),
    );
    p.r("disconnect after REJECTED", p.cm.disconnect(b));
    p.r("destroy", p.cm.destroy_id(b));
    // The server disconnects a request it holds, then accepts it.
    let d = resolved(p, chc, 3, None, p.sa(p.server, 7476))?;
    p.cm.create_qp(d, &rc())?;
    p.r("connect", p.cm.connect(d, None));
    let c = p.ev("server", chs, T).expect("a request").id;
    p.cm.create_qp(c, &rc())?;
    p.r("server disconnect before accept", p.cm.disconnect(c));
    p.r("accept after it", p.cm.accept(c, None));
    drain_both(p, chs, chc, Duration::from_secs(1));
    p.r("reject after it", p.cm.reject(c, b"late"));
    drain_both(p, chs, chc, Duration::from_secs(1));
    for id in [d, c, l] {
        p.r("destroy", p.cm.destroy_id(id));
    }
    Ok(())
}

/// An id moved to synchronous mode while an event of it is queued, then disconnected.
fn sync_migrate<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7478))?;
    let a = resolved(p, chc, 1, None, p.sa(p.server, 7478))?;
    p.cm.create_qp(a, &rc())?;
    p.cm.connect(a, None)?;
    let c = p.ev("server", chs, T).expect("a request").id;
    p.cm.create_qp(c, &rc())?;
    p.cm.accept(c, None)?;
    p.ev("client", chc, T);
    p.ev("server", chs, T);
    p.r("server disconnect", p.cm.disconnect(c));
    p.r("sleep", p.cm.sleep(Duration::from_millis(100)));
    p.r(
        "migrate client -> sync, DISCONNECTED queued",
        p.cm.migrate_id(a, None),
    );
    p.r(
        "client sync_event",
        p.cm.sync_event(a).map(|e| e.map(|e| e.kind)),
    );
    p.r("client disconnect (sync)", p.cm.disconnect(a));
    p.r(
        "client sync_event",
        p.cm.sync_event(a).map(|e| e.map(|e| e.kind)),
    );
    p.r("client disconnect again (sync)", p.cm.disconnect(a));
    p.r(
        "client sync_event",
        p.cm.sync_event(a).map(|e| e.map(|e| e.kind)),
    );
    p.ev("server", chs, Duration::from_secs(4));
    p.r("migrate client -> chc", p.cm.migrate_id(a, Some(chc)));
    p.ev("client", chc, Duration::from_millis(100));
    for id in [a, c, l] {
        p.r("destroy", p.cm.destroy_id(id));
    }
    Ok(())
}

/// Two ids with REUSEADDR bound to one client address and port, connected to one server.
fn reuse_both<B: CmBackend>(p: &Probe<B>) -> Result<(), CmError> {
    let (chs, chc) = (p.cm.create_event_channel()?, p.cm.create_event_channel()?);
    let l = listener(p, chs, p.sa(p.server, 7479))?;
    let src = p.sa(p.client, 20079);
    let mut ids = Vec::new();
    for n in 0..2u64 {
        let a = p.cm.create_id(Some(chc), n, PortSpace::TCP)?;
        p.r(
            "set reuseaddr",
            p.cm.set_option(a, &CmOption::ReuseAddr(true)),
        );
        p.r(&format!("bind {n} C:20079"), p.cm.bind_addr(a, src));
        ids.push(a);
    }
    let mut children = Vec::new();
    for (n, a) in ids.iter().enumerate() {
        p.r(
            &format!("resolve_addr {n}"),
            p.cm.resolve_addr(*a, None, p.sa(p.server, 7479), RES),
        );
        p.ev("client", chc, T);
        p.r("resolve_route", p.cm.resolve_route(*a, RES));
        p.ev("client", chc, T);
        p.cm.create_qp(*a, &rc())?;
        p.r("connect", p.cm.connect(*a, None));
        if let Some(info) = p.ev("server", chs, T) {
            p.addrs("child", info.id, &[20079, 7479]);
            p.cm.create_qp(info.id, &rc())?;
            p.r("accept", p.cm.accept(info.id, None));
            p.ev("client", chc, T);
            p.ev("server", chs, T);
            children.push(info.id);
        }
    }
    let third = p.cm.create_id(Some(chc), 9, PortSpace::TCP)?;
    p.r(
        "bind third C:20079 without reuseaddr",
        p.cm.bind_addr(third, src),
    );
    p.r("listen on a reused port", p.cm.listen(ids[0], 1));
    for id in children.into_iter().chain(ids).chain([third, l]) {
        p.r("destroy", p.cm.destroy_id(id));
    }
    Ok(())
}

/// Whether the run is on iWARP (`CMTWIN_TRANSPORT` on the simulator, `CMTWIN_RDMA_TRANSPORT`
/// in the VM).
fn iwarp() -> bool {
    ["CMTWIN_TRANSPORT", "CMTWIN_RDMA_TRANSPORT"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|t| t == "iwarp"))
}

/// Runs the named scenarios on `cm`.
fn run_all<B: CmBackend>(cm: &B, server: IpAddr, client: IpAddr, absent: IpAddr, names: &[String]) {
    for name in names {
        println!("=== {name}");
        let p = Probe::new(cm, server, client);
        let outcome = match name.as_str() {
            "phases" => phases(&p),
            "options" => options(&p),
            "server" => many_requests(&p),
            "early_disconnect" => early_disconnect(&p),
            "port_reuse" => port_reuse(&p),
            "resolve" => resolve(&p, absent),
            "client_early" => client_early(&p),
            "sync_migrate" => sync_migrate(&p),
            "reuse_both" => reuse_both(&p),
            other => {
                println!("unknown scenario {other}");
                Ok(())
            }
        };
        if let Err(e) = outcome {
            p.line(format!("scenario failed: {e}"));
        }
    }
}

fn main() {
    let mut names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() {
        names = SCENARIOS.iter().map(|s| s.to_string()).collect();
    }
    match (
        std::env::var("CMTWIN_RDMA_ADDR"),
        std::env::var("CMTWIN_RDMA_ADDR2"),
    ) {
        (Ok(s), Ok(c)) => {
            let (s, c): (IpAddr, IpAddr) = (s.parse().expect("an IP"), c.parse().expect("an IP"));
            let absent = "192.168.77.9".parse().expect("literal");
            println!("librdmacm: server {s}, client {c}");
            run_all(&VerbsBackend::new(), s, c, absent, &names);
        }
        _ => {
            let transport = match std::env::var("CMTWIN_TRANSPORT").as_deref() {
                Ok("iwarp") => Transport::Iwarp,
                Ok("ib") => Transport::InfiniBand,
                _ => Transport::Roce,
            };
            let (s, c): (IpAddr, IpAddr) =
                ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
            let absent = "10.0.0.9".parse().expect("literal");
            let config = SimConfig {
                noarp: true,
                ..SimConfig::default()
            };
            let fabric = Fabric::builder(1)
                .config(config)
                .host("node", transport, &[s, c])
                .build()
                .expect("a fabric");
            fabric.spawn("node", "probe", move |cm| {
                run_all(&cm, s, c, absent, &names);
                Ok(())
            });
            if let Err(e) = fabric.run() {
                println!("simulation failed: {e}");
            }
            if std::env::var_os("CMTWIN_TRACE").is_some() {
                println!("{}", fabric.trace_text());
            }
        }
    }
}
