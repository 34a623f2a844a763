//! rdma-core's `cmtime` benchmark: a lost DREQ leaves the server waiting forever, and a lost
//! DREP stalls the client for a whole DREQ timeout (rdma-core commits
//! [737ac31fd](https://github.com/linux-rdma/rdma-core/commit/737ac31fd3bb31e36c7da234597b4cc5e335b430)
//! and [1dd867d6c](https://github.com/linux-rdma/rdma-core/commit/1dd867d6c47d6c9e471421c8f731976bbe06e4da)).
//!
//! `cmtime` times each step of connection setup and teardown between a client and a server
//! that keep in step through an out-of-band channel: after the connect step, and after the
//! disconnect step before destroying its QPs and ids, each side waits for the other
//! (`do_sync`). The client's disconnect
//! step calls `rdma_disconnect` on every connection; the server answers each DISCONNECTED
//! with `rdma_disconnect` and waits until every connection was disconnected.
//!
//! * The client's step used to last until each connection's DISCONNECTED, i.e. until the DREP.
//!   When a DREP is lost, the retransmitted DREQs reach a server id that already left
//!   timewait (the server keeps its ids until the sync): its CM drops them, and the client's
//!   DISCONNECTED comes only when the DREQ times out, after all its retries. 737ac31fd ends
//!   the client's step as soon as `rdma_disconnect` returns and leaves the coordination to
//!   the sync.
//! * The server waited for the DISCONNECTED of every connection without a bound. When every
//!   transmission of a DREQ is lost, it never comes and the server never reaches the sync.
//!   1dd867d6c bounds the wait: every 60 s without completion, the server disconnects the
//!   connections it has not disconnected yet itself.
//!
//! The buggy logic is `cmtime` before both commits, the fixed one after both. The port runs
//! one client and one server process; each out-of-band sync is a connection request on the
//! server's listener carrying [`SYNC`] and the sync's step as private data, which the server holds until it
//! reaches its own sync and then rejects (the rejection is the client's answer). The client's
//! disconnect step is measured in virtual time, so the stall is caught by its exact length;
//! the server's endless wait is reported by the simulator as a deadlock.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, CmEvent, ConnParam, Errno, EventKind, IdHandle, PortSpace,
    QpInitAttr, QpType, Wait,
};

use crate::Variant;

/// The private data of the client's sync requests, followed by the sync's step.
pub const SYNC: &[u8] = b"cmtime sync";
/// The sync after the connect step.
const CONNECTED: u8 = 1;
/// The sync after the disconnect step.
const DISCONNECTED: u8 = 2;

/// The step a sync request's private data names, if it is one.
fn sync_step(data: &[u8]) -> Option<u8> {
    data.strip_prefix(SYNC)
        .and_then(|rest| rest.first().copied())
}

/// The fixed server's bound on its wait for disconnects (`SRV_MAX_DISCONNECT_TIME_US`).
pub const SERVER_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a side of `cmtime` stopped.
#[derive(Debug)]
pub enum CmtimeError {
    /// A CM call failed.
    Cm(CmError),
    /// An event `cmtime` exits on (`printf` and `exit(EXIT_FAILURE)`).
    Exit {
        /// The event.
        kind: EventKind,
        /// Its status.
        status: i32,
    },
}

impl fmt::Display for CmtimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmtimeError::Cm(e) => write!(f, "{e}"),
            CmtimeError::Exit { kind, status } => {
                write!(f, "cmtime exits on event {kind:?}, error {status}")
            }
        }
    }
}

impl std::error::Error for CmtimeError {}

impl From<CmError> for CmtimeError {
    fn from(e: CmError) -> Self {
        CmtimeError::Cm(e)
    }
}

/// `Err` when `cmtime` exits on `event` (every error event; ADDR_ERROR and ROUTE_ERROR after
/// its retries, which the port does not make).
fn fatal(event: &CmEvent) -> Result<(), CmtimeError> {
    match event.kind() {
        kind @ (EventKind::AddrError
        | EventKind::RouteError
        | EventKind::ConnectError
        | EventKind::Unreachable
        | EventKind::Rejected
        | EventKind::DeviceRemoval) => Err(CmtimeError::Exit {
            kind,
            status: event.status(),
        }),
        _ => Ok(()),
    }
}

/// What the server measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerEnd {
    /// From the last ESTABLISHED to the last connection's disconnect.
    pub disconnect_phase: Duration,
    /// Connections the server disconnected itself after its wait timed out.
    pub timed_out: usize,
}

/// One server-side connection.
struct ServerConn {
    id: IdHandle,
    disconnected: bool,
}

/// The server: listens on `addr`, accepts `conns` connections, answers each DISCONNECTED, and
/// once every connection was disconnected, syncs with the client and destroys everything.
pub fn server<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    conns: usize,
    variant: Variant,
) -> Result<ServerEnd, CmtimeError> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 0)?;
    let mut s = Server {
        cm,
        channel,
        conns: Vec::new(),
        established: 0,
        disconnected: 0,
        syncs: Vec::new(),
        synced: 0,
    };
    while s.established < conns {
        s.handle(cm.get_cm_event(channel, Wait::Block)?)?;
    }
    s.sync(CONNECTED)?;
    let start = cm.now();
    let mut waited_since = start;
    let mut timed_out = 0;
    while s.disconnected < conns {
        let wait = match variant {
            Variant::Buggy => Wait::Block,
            Variant::Fixed => {
                Wait::Timeout(SERVER_DISCONNECT_TIMEOUT.saturating_sub(cm.now() - waited_since))
            }
        };
        match cm.get_cm_event(channel, wait) {
            Ok(event) => s.handle(event)?,
            Err(e) if e.errno == Errno::ETIMEDOUT => {
                // `server_disconnect_timeout`.
                for i in 0..s.conns.len() {
                    if !s.conns[i].disconnected {
                        s.disconnect(i);
                        timed_out += 1;
                    }
                }
                waited_since = cm.now();
            }
            Err(e) => return Err(e.into()),
        }
    }
    let disconnect_phase = cm.now() - start;
    s.sync(DISCONNECTED)?;
    for (_, sync) in std::mem::take(&mut s.syncs) {
        cm.destroy_id(sync)?;
    }
    for conn in &s.conns {
        cm.destroy_qp(conn.id)?;
        cm.destroy_id(conn.id)?;
    }
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(ServerEnd {
        disconnect_phase,
        timed_out,
    })
}

/// The server's state.
struct Server<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    conns: Vec<ServerConn>,
    established: usize,
    disconnected: usize,
    /// The client's sync requests (with their step), each held until the server's own sync.
    syncs: Vec<(u8, IdHandle)>,
    /// The last sync the server reached (0: none yet).
    synced: u8,
}

impl<B: CmBackend> Server<'_, B> {
    /// `cma_handler` on the server.
    fn handle(&mut self, event: CmEvent) -> Result<(), CmtimeError> {
        let (kind, id) = (event.kind(), event.id());
        let sync_step = sync_step(event.private_data());
        let failed = fatal(&event);
        self.cm.ack_cm_event(event)?;
        match kind {
            EventKind::ConnectRequest if sync_step.is_some() => {
                self.syncs.extend(sync_step.map(|step| (step, id)));
                // A retransmission of a sync already passed (its answer was lost): answer again.
                self.answer_syncs(self.synced)?;
            }
            EventKind::ConnectRequest => {
                // `req_handler`.
                self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                self.conns.push(ServerConn {
                    id,
                    disconnected: false,
                });
                self.cm.accept(id, None)?;
            }
            EventKind::Established => self.established += 1,
            EventKind::Disconnected => {
                if let Some(i) = self.conns.iter().position(|c| c.id == id) {
                    if !self.conns[i].disconnected {
                        self.disconnect(i);
                    }
                }
            }
            _ => failed?,
        }
        Ok(())
    }

    /// `do_sync` on the server: waits for the client's sync request of `step` and answers
    /// it (with any late duplicate of an earlier one).
    fn sync(&mut self, step: u8) -> Result<(), CmtimeError> {
        while !self.syncs.iter().any(|&(s, _)| s == step) {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            self.handle(event)?;
        }
        self.synced = step;
        self.answer_syncs(step)
    }

    /// Answers (rejects) the held sync requests of `step` and before.
    fn answer_syncs(&mut self, step: u8) -> Result<(), CmtimeError> {
        let (answered, later) = std::mem::take(&mut self.syncs)
            .into_iter()
            .partition(|&(s, _)| s <= step);
        self.syncs = later;
        for (_, sync) in answered {
            match self.cm.reject(sync, &[]) {
                // A duplicate whose sender already gave up.
                Err(e) if e.errno == Errno::EINVAL => {}
                other => other?,
            }
            self.cm.destroy_id(sync)?;
        }
        Ok(())
    }

    /// `server_disconnect`.
    fn disconnect(&mut self, i: usize) {
        self.conns[i].disconnected = true;
        // cmtime does not look at what rdma_disconnect returns.
        let _ = self.cm.disconnect(self.conns[i].id);
        self.disconnected += 1;
    }
}

/// What the client measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientEnd {
    /// The disconnect step: from the first `rdma_disconnect` to the step's completion.
    pub disconnect_step: Duration,
}

/// The client's state: its connections' ids and what it counted.
struct Client<'a, B: CmBackend> {
    cm: &'a B,
    server: SocketAddr,
    conns: Vec<IdHandle>,
    /// The sync request under way, with its step.
    sync: Option<(IdHandle, u8)>,
    established: usize,
    disconnected: usize,
    synced: bool,
}

impl<B: CmBackend> Client<'_, B> {
    /// `cma_handler` on the client.
    fn handle(&mut self, event: CmEvent) -> Result<(), CmtimeError> {
        let (kind, id) = (event.kind(), event.id());
        let failed = fatal(&event);
        self.cm.ack_cm_event(event)?;
        let sync = self.sync.filter(|&(s, _)| s == id);
        let is_sync = sync.is_some();
        match kind {
            EventKind::AddrResolved => self.cm.resolve_route(id, RESOLVE_TIMEOUT)?,
            EventKind::RouteResolved if is_sync => {
                let step = sync.map_or(0, |(_, step)| step);
                let param = ConnParam {
                    private_data: [SYNC, &[step]].concat(),
                    ..ConnParam::default()
                };
                self.cm.connect(id, Some(&param))?;
            }
            EventKind::RouteResolved => {
                self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                self.cm.connect(id, None)?;
            }
            EventKind::Rejected if is_sync => self.synced = true,
            EventKind::Established => self.established += 1,
            EventKind::Disconnected => self.disconnected += 1,
            _ => failed?,
        }
        Ok(())
    }

    /// `do_sync` on the client: a sync request to the server, answered by its rejection.
    fn sync(&mut self, channel: ChannelHandle, step: u8) -> Result<(), CmtimeError> {
        let sync = self.cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        self.sync = Some((sync, step));
        self.synced = false;
        self.cm
            .resolve_addr(sync, None, self.server, RESOLVE_TIMEOUT)?;
        self.until(channel, |c| c.synced)?;
        self.sync = None;
        self.cm.destroy_id(sync)?;
        Ok(())
    }

    /// Handles events until `done` holds.
    fn until(
        &mut self,
        channel: ChannelHandle,
        done: impl Fn(&Self) -> bool,
    ) -> Result<(), CmtimeError> {
        while !done(self) {
            let event = self.cm.get_cm_event(channel, Wait::Block)?;
            self.handle(event)?;
        }
        Ok(())
    }
}

/// The client: makes `conns` connections to `server`, disconnects them (the timed step), syncs
/// with the server, and destroys everything.
pub fn client<B: CmBackend>(
    cm: &B,
    server: SocketAddr,
    conns: usize,
    variant: Variant,
) -> Result<ClientEnd, CmtimeError> {
    let channel = cm.create_event_channel()?;
    let mut c = Client {
        cm,
        server,
        conns: Vec::new(),
        sync: None,
        established: 0,
        disconnected: 0,
        synced: false,
    };
    for _ in 0..conns {
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        c.conns.push(id);
        cm.resolve_addr(id, None, c.server, RESOLVE_TIMEOUT)?;
    }
    c.until(channel, |c| c.established == conns)?;
    c.sync(channel, CONNECTED)?;
    let start = cm.now();
    for &id in &c.conns {
        // cmtime does not look at what rdma_disconnect returns.
        let _ = cm.disconnect(id);
    }
    if variant == Variant::Buggy {
        // The step completes on each connection's DISCONNECTED.
        c.until(channel, |c| c.disconnected == conns)?;
    }
    let disconnect_step = cm.now() - start;
    c.sync(channel, DISCONNECTED)?;
    for &id in &c.conns {
        cm.destroy_qp(id)?;
        cm.destroy_id(id)?;
    }
    cm.destroy_event_channel(channel)?;
    Ok(ClientEnd { disconnect_step })
}
