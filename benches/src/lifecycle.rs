//! `n` full RC lifecycles in flight at once, driven single-threaded from an event loop: the
//! caller's thread makes every call and pumps the fabric (`run_for`), no simulated process runs.
//!
//! One lifecycle: the client creates an id, resolves address and route, creates a QP and
//! connects; the server takes the CONNECT_REQUEST, creates a QP and accepts; once both sides are
//! ESTABLISHED the client disconnects, the server answers with its own disconnect, both sides
//! see DISCONNECTED and, after timewait, TIMEWAIT_EXIT, then destroy QP and id. That is 9 CM
//! events: ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT on the client,
//! CONNECT_REQUEST, ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT on the server.
//!
//! All `n` ids are created and resolving at once. Connects are admitted through a window of
//! `CONNECT_WINDOW` requests not yet taken by the server, half the kernel's cap on a listen
//! backlog: a full backlog drops REQs, whose retransmission (seconds later) would measure the
//! backlog, not the engine. The window is a few microseconds of virtual time long, timewait two
//! seconds, so all `n` connections still exist at once.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, ConnParam, Errno, EventKind, IdHandle, PortSpace,
    QpInitAttr, QpType, Wait,
};
use cmtwin_sim::{Fabric, SimBackend};

use crate::lifecycle_tables::{ByHost, Owners};
use crate::topology::{client_name, server_addr, CLIENT_HOSTS};

/// Connect requests in flight (sent, not yet taken by the server) at most.
pub const CONNECT_WINDOW: usize = 512;

/// CM events in one lifecycle (see the module documentation).
pub const EVENTS_PER_LIFECYCLE: u64 = 9;

/// The event loop's first and longest slice of virtual time per turn: it doubles each turn
/// that found no event, and falls back to the first after a turn that found some.
const SLICE: (Duration, Duration) = (Duration::from_micros(10), Duration::from_millis(250));

/// Virtual time after which an unfinished run is reported as stalled.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Resolution timeouts given to `resolve_addr` and `resolve_route`.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a finished run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleCounts {
    /// Lifecycles completed (both ids destroyed).
    pub lifecycles: u64,
    /// CM events fetched and acknowledged.
    pub events: u64,
    /// Virtual time the run took, its leftover timers included.
    pub virtual_time: Duration,
}

/// Hooks for measuring at the two points of a run where nothing is half done.
pub trait Probe {
    /// The driver's own storage is allocated and nothing has been called yet.
    fn started(&mut self);
    /// Every connection is ESTABLISHED on both sides and none is disconnecting; the run goes on
    /// when this returns.
    fn all_established(&mut self);
}

/// Which end of a connection an event or call concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The active side.
    Client,
    /// The passive side (the listener's child id).
    Server,
}

/// Why a run failed.
#[derive(Debug)]
pub enum LifecycleError {
    /// A call failed.
    Cm(CmError),
    /// An event that the lifecycle does not expect at this point.
    Unexpected {
        /// Connection number.
        conn: usize,
        /// Where the event arrived.
        side: Side,
        /// Its kind.
        kind: EventKind,
        /// Its status.
        status: i32,
    },
    /// An event for an id the driver never created or was given.
    UnknownId {
        /// Where the event arrived.
        side: Side,
        /// The id.
        id: IdHandle,
        /// The event's kind.
        kind: EventKind,
    },
    /// The fabric refused to be driven.
    Fabric(cmtwin_sim::FabricError),
    /// Virtual time ran past the stall limit with lifecycles unfinished.
    Stalled {
        /// Lifecycles completed.
        completed: usize,
        /// Lifecycles started.
        started: usize,
        /// Virtual time when the run gave up.
        at: Duration,
    },
}

impl fmt::Display for LifecycleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LifecycleError::Cm(e) => write!(f, "{e}"),
            LifecycleError::Fabric(e) => write!(f, "{e}"),
            LifecycleError::Unexpected {
                conn,
                side,
                kind,
                status,
            } => write!(
                f,
                "connection {conn}: unexpected {kind:?} (status {status}) on the {side:?} side"
            ),
            LifecycleError::UnknownId { side, id, kind } => {
                write!(
                    f,
                    "{kind:?} for {id}, an id the {side:?} side does not know"
                )
            }
            LifecycleError::Stalled {
                completed,
                started,
                at,
            } => write!(
                f,
                "stalled: {completed} of {started} lifecycles done at {at:?} of virtual time"
            ),
        }
    }
}

impl std::error::Error for LifecycleError {}

impl From<CmError> for LifecycleError {
    fn from(e: CmError) -> Self {
        LifecycleError::Cm(e)
    }
}

/// Bits of `Conn::established` and `Conn::destroyed`.
const CLIENT: u8 = 1;
const SERVER: u8 = 2;
const BOTH: u8 = CLIENT | SERVER;

/// One connection's progress.
#[derive(Clone, Copy, Debug, Default)]
struct Conn {
    client: Option<IdHandle>,
    child: Option<IdHandle>,
    established: u8,
    destroyed: u8,
}

/// One endpoint's backend and channel.
struct Endpoint {
    cm: SimBackend,
    channel: ChannelHandle,
}

/// The event loop's state.
struct Driver<'f, 'p> {
    fabric: &'f Fabric,
    server: Endpoint,
    listener: IdHandle,
    clients: Vec<Endpoint>,
    conns: ByHost<Conn>,
    /// Ids to connection numbers, by (endpoint, id): endpoint 0 is the server, `k + 1` client
    /// host `k`.
    owners: Owners,
    /// Connections whose route is resolved, waiting for a window slot to connect.
    to_connect: VecDeque<u32>,
    connects_in_flight: usize,
    /// Connections ESTABLISHED on both sides held back for the probe.
    parked: Vec<u32>,
    completed: usize,
    events: u64,
    probe: Option<&'p mut dyn Probe>,
}

/// Runs `n` lifecycles at once on `fabric` (built by `topology::bench_fabric`). With a probe,
/// the connections are held at ESTABLISHED until all `n` are, and the probe is told then.
pub fn run_lifecycles(
    fabric: &Fabric,
    n: usize,
    probe: Option<&mut dyn Probe>,
) -> Result<LifecycleCounts, LifecycleError> {
    let start = fabric.now();
    let mut d = Driver::new(fabric, n, probe)?;
    if let Some(p) = d.probe.as_mut() {
        p.started();
    }
    for conn in 0..n {
        d.start(conn)?;
    }
    d.pump()?;
    d.close()?;
    fabric.run_until_idle().map_err(LifecycleError::Fabric)?;
    Ok(LifecycleCounts {
        lifecycles: d.completed as u64,
        events: d.events,
        virtual_time: fabric.now() - start,
    })
}

impl<'f, 'p> Driver<'f, 'p> {
    fn new(
        fabric: &'f Fabric,
        n: usize,
        probe: Option<&'p mut dyn Probe>,
    ) -> Result<Self, LifecycleError> {
        let endpoint = |cm: SimBackend| -> Result<Endpoint, CmError> {
            let channel = cm.create_event_channel()?;
            Ok(Endpoint { cm, channel })
        };
        let server = endpoint(fabric.backend("server"))?;
        let listener = server
            .cm
            .create_id(Some(server.channel), 0, PortSpace::TCP)?;
        server.cm.bind_addr(listener, server_addr())?;
        server.cm.listen(listener, 0)?;
        let clients = (0..CLIENT_HOSTS)
            .map(|k| endpoint(fabric.backend(&client_name(k))))
            .collect::<Result<Vec<_>, _>>()?;
        let parked = Vec::with_capacity(if probe.is_some() { n } else { 0 });
        Ok(Driver {
            fabric,
            server,
            listener,
            clients,
            conns: ByHost::new(n, CLIENT_HOSTS),
            owners: Owners::new(CLIENT_HOSTS + 1, |endpoint| {
                if endpoint == 0 {
                    n
                } else {
                    n.div_ceil(CLIENT_HOSTS)
                }
            }),
            to_connect: VecDeque::with_capacity(n),
            connects_in_flight: 0,
            parked,
            completed: 0,
            events: 0,
            probe,
        })
    }

    /// The client host of connection `conn`.
    fn host_of(conn: usize) -> usize {
        conn % CLIENT_HOSTS
    }

    fn start(&mut self, conn: usize) -> Result<(), LifecycleError> {
        let k = Self::host_of(conn);
        let c = &self.clients[k];
        let id =
            c.cm.create_id(Some(c.channel), conn as u64, PortSpace::TCP)?;
        c.cm.resolve_addr(id, None, server_addr(), RESOLVE_TIMEOUT)?;
        self.conns[conn].client = Some(id);
        self.owners.insert(k as u8 + 1, id, conn as u32);
        Ok(())
    }

    /// Alternates between handling every queued event and running the fabric, until every
    /// lifecycle is done.
    fn pump(&mut self) -> Result<(), LifecycleError> {
        let deadline = self.fabric.now() + STALL_LIMIT;
        let mut slice = SLICE.0;
        while self.completed < self.conns.len() {
            let handled = self.drain_all()?;
            self.admit_connects()?;
            if self.completed == self.conns.len() {
                break;
            }
            slice = if handled > 0 {
                SLICE.0
            } else {
                (slice * 2).min(SLICE.1)
            };
            if self.fabric.now() > deadline {
                return Err(LifecycleError::Stalled {
                    completed: self.completed,
                    started: self.conns.len(),
                    at: self.fabric.now(),
                });
            }
            self.fabric.run_for(slice).map_err(LifecycleError::Fabric)?;
        }
        Ok(())
    }

    /// Handles every queued event of every endpoint; returns how many.
    fn drain_all(&mut self) -> Result<u64, LifecycleError> {
        let before = self.events;
        self.drain(None)?;
        for k in 0..self.clients.len() {
            self.drain(Some(k))?;
        }
        if self.probe.is_some() && !self.parked.is_empty() && self.parked.len() == self.conns.len()
        {
            self.release_parked()?;
        }
        Ok(self.events - before)
    }

    /// Handles the queued events of the server (`None`) or of client host `k`.
    fn drain(&mut self, client: Option<usize>) -> Result<(), LifecycleError> {
        loop {
            let ep = client.map_or(&self.server, |k| &self.clients[k]);
            let event = match ep.cm.get_cm_event(ep.channel, Wait::NonBlocking) {
                Ok(event) => event,
                Err(e) if e.errno == Errno::EAGAIN => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            let (kind, status, id) = (event.kind(), event.status(), event.id());
            let conn_from_request = (kind == EventKind::ConnectRequest)
                .then(|| conn_number(event.private_data()))
                .flatten();
            ep.cm.ack_cm_event(event)?;
            self.events += 1;
            let side = if client.is_some() {
                Side::Client
            } else {
                Side::Server
            };
            let endpoint = client.map_or(0, |k| k as u8 + 1);
            let conn = match conn_from_request {
                Some(conn) if conn < self.conns.len() => conn,
                _ => match self.owners.get(endpoint, id) {
                    Some(conn) => conn as usize,
                    None => return Err(LifecycleError::UnknownId { side, id, kind }),
                },
            };
            if status != 0 {
                return Err(LifecycleError::Unexpected {
                    conn,
                    side,
                    kind,
                    status,
                });
            }
            match side {
                Side::Client => self.on_client_event(conn, kind)?,
                Side::Server => self.on_server_event(conn, id, kind)?,
            }
        }
    }

    fn on_client_event(&mut self, conn: usize, kind: EventKind) -> Result<(), LifecycleError> {
        let k = Self::host_of(conn);
        let id = self.conns[conn].client.expect("set at start");
        let cm = &self.clients[k].cm;
        match kind {
            EventKind::AddrResolved => cm.resolve_route(id, RESOLVE_TIMEOUT)?,
            EventKind::RouteResolved => {
                cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                self.to_connect.push_back(conn as u32);
            }
            EventKind::Established => self.established(conn, CLIENT)?,
            EventKind::Disconnected => {}
            EventKind::TimewaitExit => self.destroy(conn, Side::Client)?,
            _ => return Err(unexpected(conn, Side::Client, kind)),
        }
        Ok(())
    }

    fn on_server_event(
        &mut self,
        conn: usize,
        id: IdHandle,
        kind: EventKind,
    ) -> Result<(), LifecycleError> {
        let cm = &self.server.cm;
        match kind {
            EventKind::ConnectRequest => {
                if self.conns[conn].child.is_some() {
                    return Err(unexpected(conn, Side::Server, kind));
                }
                self.connects_in_flight -= 1;
                self.conns[conn].child = Some(id);
                self.owners.insert(0, id, conn as u32);
                cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                cm.accept(id, Some(&ConnParam::default()))?;
            }
            EventKind::Established => self.established(conn, SERVER)?,
            EventKind::Disconnected => cm.disconnect(id)?,
            EventKind::TimewaitExit => self.destroy(conn, Side::Server)?,
            _ => return Err(unexpected(conn, Side::Server, kind)),
        }
        Ok(())
    }

    /// Connects waiting connections while the window has room.
    fn admit_connects(&mut self) -> Result<(), LifecycleError> {
        while self.connects_in_flight < CONNECT_WINDOW {
            let Some(conn) = self.to_connect.pop_front() else {
                return Ok(());
            };
            let conn = conn as usize;
            let c = &self.clients[Self::host_of(conn)];
            let id = self.conns[conn].client.expect("set at start");
            let number = (conn as u32).to_le_bytes();
            c.cm.connect(id, Some(&ConnParam::with_private_data(&number)))?;
            self.connects_in_flight += 1;
        }
        Ok(())
    }

    /// Marks one side ESTABLISHED; with both, starts the teardown (or parks the connection).
    fn established(&mut self, conn: usize, side: u8) -> Result<(), LifecycleError> {
        let c = &mut self.conns[conn];
        if c.established & side != 0 {
            let s = if side == CLIENT {
                Side::Client
            } else {
                Side::Server
            };
            return Err(unexpected(conn, s, EventKind::Established));
        }
        c.established |= side;
        if c.established != BOTH {
            return Ok(());
        }
        if self.probe.is_some() {
            self.parked.push(conn as u32);
            return Ok(());
        }
        self.disconnect(conn)
    }

    fn disconnect(&self, conn: usize) -> Result<(), LifecycleError> {
        let id = self.conns[conn].client.expect("set at start");
        self.clients[Self::host_of(conn)].cm.disconnect(id)?;
        Ok(())
    }

    /// Tells the probe that all connections are ESTABLISHED, then lets them go on.
    fn release_parked(&mut self) -> Result<(), LifecycleError> {
        if let Some(p) = self.probe.as_mut() {
            p.all_established();
        }
        self.probe = None;
        for conn in std::mem::take(&mut self.parked) {
            self.disconnect(conn as usize)?;
        }
        Ok(())
    }

    fn destroy(&mut self, conn: usize, side: Side) -> Result<(), LifecycleError> {
        let c = self.conns[conn];
        let (cm, id, bit) = match side {
            Side::Client => (
                &self.clients[Self::host_of(conn)].cm,
                c.client.expect("set at start"),
                CLIENT,
            ),
            Side::Server => (&self.server.cm, c.child.expect("set on request"), SERVER),
        };
        if c.destroyed & bit != 0 {
            return Err(unexpected(conn, side, EventKind::TimewaitExit));
        }
        cm.destroy_qp(id)?;
        cm.destroy_id(id)?;
        self.conns[conn].destroyed |= bit;
        if self.conns[conn].destroyed == BOTH {
            self.completed += 1;
        }
        Ok(())
    }

    /// Destroys the listener and the channels.
    fn close(&mut self) -> Result<(), LifecycleError> {
        self.server.cm.destroy_id(self.listener)?;
        for ep in std::iter::once(&self.server).chain(&self.clients) {
            ep.cm.destroy_event_channel(ep.channel)?;
        }
        Ok(())
    }
}

/// The connection number a client put in its REQ's private data. The data is padded to the
/// REQ's private data size, so only the first four bytes count.
fn conn_number(private_data: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = private_data.get(..4)?.try_into().ok()?;
    Some(u32::from_le_bytes(bytes) as usize)
}

fn unexpected(conn: usize, side: Side, kind: EventKind) -> LifecycleError {
    LifecycleError::Unexpected {
        conn,
        side,
        kind,
        status: 0,
    }
}
