//! Scenarios bundled with the sweep command (`cmtwin-sweep`): small protocols that must hold
//! up under any fault plan.
//!
//! `connect-teardown-*`: a server listens, a client resolves, connects and disconnects, the
//! server accepts and answers the disconnect, driven event by event until the fabric is idle.
//! Under any plan, every call either succeeds or fails with an errno the CM can give there
//! (see [`allowed`]), no id gets ESTABLISHED or DISCONNECTED twice, and at the end every QP
//! and id is destroyed and every channel closed without error. With the empty plan the
//! connection must also be established and disconnected on both sides.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Transport, Wait,
};

use crate::backend::SimBackend;
use crate::fabric::Fabric;
use crate::plan::SwarmSpace;
use crate::sweep::{Outcome, RunContext};

/// A bundled scenario.
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it checks, in a line.
    pub about: &'static str,
    /// One run.
    pub run: fn(&RunContext) -> Outcome,
    /// The faults its swarm plans draw from.
    pub space: fn() -> SwarmSpace,
}

/// Every bundled scenario.
pub const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "connect-teardown-roce",
        about: "connect, accept, disconnect and tear down over RoCE",
        run: |ctx| connect_teardown(ctx, Transport::Roce),
        space,
    },
    Scenario {
        name: "connect-teardown-ib",
        about: "connect, accept, disconnect and tear down over InfiniBand",
        run: |ctx| connect_teardown(ctx, Transport::InfiniBand),
        space,
    },
    Scenario {
        name: "connect-teardown-iwarp",
        about: "connect, accept, disconnect and tear down over iWARP (MPA over TCP)",
        run: |ctx| connect_teardown(ctx, Transport::Iwarp),
        space,
    },
];

const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
const CLIENT_IP: [u8; 4] = [10, 0, 0, 2];
const PORT: u16 = 7471;
/// Actions of the timeline one run may take before it is declared stuck.
const MAX_STEPS: usize = 100_000;

/// The swarm space of the connect-teardown scenarios.
pub fn space() -> SwarmSpace {
    SwarmSpace::new(&["server", "client"])
        .addresses(&[IpAddr::from(SERVER_IP), IpAddr::from(CLIENT_IP)])
        .horizon(Duration::from_secs(8))
}

/// The errnos the CM can give for `call` in the connect-teardown scenarios, once faults may
/// have changed an id under the application's feet (CM-SEMANTICS.md): ENXIO for any call on
/// an id whose device was removed (ucma released it, §8.1); EINVAL for `rdma_create_qp`,
/// `rdma_accept` and `rdma_disconnect` when the connection already ended before the call (a
/// REJ or a timeout the application has not fetched yet moved the id out of CONNECT, §3.3;
/// a request's IB CM id left idle has no QP attributes for librdmacm's `ucma_init_conn_qp`).
pub fn allowed(call: Call, errno: Errno) -> bool {
    match call {
        Call::ResolveRoute | Call::Connect => errno == Errno::ENXIO,
        Call::CreateQp | Call::Accept | Call::Disconnect => {
            matches!(errno, Errno::ENXIO | Errno::EINVAL)
        }
        _ => false,
    }
}

/// What one side saw of one id.
#[derive(Default)]
struct Seen {
    id: Option<IdHandle>,
    qp: bool,
    established: u32,
    disconnected: u32,
    disconnect_called: bool,
}

/// The run's state: both sides' ids and what they saw.
struct Run {
    server: SimBackend,
    client: SimBackend,
    client_id: Seen,
    children: Vec<Seen>,
}

impl Run {
    /// Accepts `result` of `call` if it succeeded or failed as the CM may fail it here.
    fn check<T>(result: Result<T, CmError>, call: Call) -> Result<Option<T>, CmError> {
        match result {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.call == call && allowed(call, e.errno) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn on_client_event(&mut self, kind: EventKind) -> Outcome {
        let c = &self.client;
        let id = self.client_id.id.ok_or("the client has no id")?;
        match kind {
            EventKind::AddrResolved => {
                Run::check(
                    c.resolve_route(id, Duration::from_secs(2)),
                    Call::ResolveRoute,
                )?;
            }
            EventKind::RouteResolved => {
                let qp = Run::check(
                    c.create_qp(id, &QpInitAttr::new(QpType::Rc)),
                    Call::CreateQp,
                )?;
                self.client_id.qp = qp.is_some();
                if qp.is_some() {
                    Run::check(c.connect(id, None), Call::Connect)?;
                }
            }
            EventKind::Established => {
                self.client_id.established += 1;
                self.client_id.disconnect_called = true;
                Run::check(c.disconnect(id), Call::Disconnect)?;
            }
            EventKind::Disconnected => {
                self.client_id.disconnected += 1;
                if !self.client_id.disconnect_called {
                    self.client_id.disconnect_called = true;
                    Run::check(c.disconnect(id), Call::Disconnect)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_server_event(&mut self, kind: EventKind, id: IdHandle) -> Outcome {
        let s = &self.server;
        if kind == EventKind::ConnectRequest {
            let qp = Run::check(
                s.create_qp(id, &QpInitAttr::new(QpType::Rc)),
                Call::CreateQp,
            )?;
            self.children.push(Seen {
                id: Some(id),
                qp: qp.is_some(),
                ..Seen::default()
            });
            if qp.is_some() {
                Run::check(s.accept(id, None), Call::Accept)?;
            }
            return Ok(());
        }
        let Some(child) = self.children.iter_mut().find(|c| c.id == Some(id)) else {
            return Ok(()); // the listener's own events (DEVICE_REMOVAL, ADDR_CHANGE)
        };
        match kind {
            EventKind::Established => child.established += 1,
            EventKind::Disconnected => {
                child.disconnected += 1;
                if !child.disconnect_called {
                    child.disconnect_called = true;
                    Run::check(s.disconnect(id), Call::Disconnect)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Every id saw ESTABLISHED and DISCONNECTED at most once.
    fn check_counts(&self) -> Outcome {
        for (who, seen) in std::iter::once(("client", &self.client_id))
            .chain(self.children.iter().map(|c| ("server child", c)))
        {
            if seen.established > 1 || seen.disconnected > 1 {
                return Err(format!(
                    "{who} id got ESTABLISHED {} times and DISCONNECTED {} times",
                    seen.established, seen.disconnected
                )
                .into());
            }
        }
        Ok(())
    }
}

/// The next event of `channel` (acknowledged at once), if any.
fn poll(cm: &SimBackend, channel: ChannelHandle) -> Result<Option<(EventKind, IdHandle)>, CmError> {
    match cm.get_cm_event(channel, Wait::NonBlocking) {
        Ok(event) => {
            let seen = (event.kind(), event.id());
            cm.ack_cm_event(event)?;
            Ok(Some(seen))
        }
        Err(e) if e.errno == Errno::EAGAIN => Ok(None),
        Err(e) => Err(e),
    }
}

/// One run of the connect-teardown scenario over `transport`.
pub fn connect_teardown(ctx: &RunContext, transport: Transport) -> Outcome {
    let fabric: Fabric = ctx.build(
        ctx.builder()
            .host("server", transport, &[IpAddr::from(SERVER_IP)])
            .host("client", transport, &[IpAddr::from(CLIENT_IP)]),
    )?;
    let mut run = Run {
        server: fabric.backend("server"),
        client: fabric.backend("client"),
        client_id: Seen::default(),
        children: Vec::new(),
    };
    let server_addr = SocketAddr::new(IpAddr::from(SERVER_IP), PORT);
    let s_ch = run.server.create_event_channel()?;
    let listener = run.server.create_id(Some(s_ch), 0, PortSpace::TCP)?;
    run.server.bind_addr(listener, server_addr)?;
    run.server.listen(listener, 8)?;
    let c_ch = run.client.create_event_channel()?;
    let cid = run.client.create_id(Some(c_ch), 0, PortSpace::TCP)?;
    run.client_id.id = Some(cid);
    run.client
        .resolve_addr(cid, None, server_addr, Duration::from_secs(2))?;
    let mut steps = 0;
    loop {
        let mut busy = false;
        while let Some((kind, _)) = poll(&run.client, c_ch)? {
            busy = true;
            run.on_client_event(kind)?;
        }
        while let Some((kind, id)) = poll(&run.server, s_ch)? {
            busy = true;
            run.on_server_event(kind, id)?;
        }
        if !busy && !fabric.step()? {
            break;
        }
        steps += 1;
        if steps > MAX_STEPS {
            return Err(format!("not idle after {MAX_STEPS} steps").into());
        }
    }
    run.check_counts()?;
    if ctx.plan().is_empty() {
        let child = run
            .children
            .first()
            .ok_or("no connection request reached the server")?;
        let got = (
            run.client_id.established,
            run.client_id.disconnected,
            child.established,
            child.disconnected,
        );
        if got != (1, 1, 1, 1) {
            return Err(format!(
                "without faults: client ESTABLISHED/DISCONNECTED {}/{}, server {}/{} (want 1 each)",
                got.0, got.1, got.2, got.3
            )
            .into());
        }
    }
    teardown(&run, listener, [s_ch, c_ch])
}

/// Destroys every QP, id and channel: each must succeed.
fn teardown(run: &Run, listener: IdHandle, channels: [ChannelHandle; 2]) -> Outcome {
    let (s, c) = (&run.server, &run.client);
    for child in &run.children {
        let id = child.id.ok_or("child without id")?;
        if child.qp {
            s.destroy_qp(id)?;
        }
        s.destroy_id(id)?;
    }
    s.destroy_id(listener)?;
    if let Some(id) = run.client_id.id {
        if run.client_id.qp {
            c.destroy_qp(id)?;
        }
        c.destroy_id(id)?;
    }
    s.destroy_event_channel(channels[0])?;
    c.destroy_event_channel(channels[1])?;
    Ok(())
}
