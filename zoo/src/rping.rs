//! rdma-core's rping, two bugs between its CM thread and the threads it wakes with semaphores.
//!
//! rping runs a CM thread that fetches every event of its channel and, for each, updates the
//! control block (`cb`) the event's id belongs to and posts that block's semaphore; the other
//! threads wait on those semaphores.
//!
//! * [`persistent_server`] (`rping -P`, fixed in rdma-core commit 6f8e0056e): for a
//!   CONNECT_REQUEST the CM thread stores the new id in the listening block's single
//!   `child_cm_id` slot and posts; the server's main thread wakes, clones the block for the id
//!   and starts a thread that accepts it. When a second request comes before the main thread
//!   has woken, the CM thread overwrites the slot and posts again: the main thread clones the
//!   same id twice (one request is accepted twice, the other never). The fix makes the CM thread
//!   wait on a second semaphore (`accept_ready`) that the main thread posts once it has taken
//!   the id. Nothing in the port sleeps to provoke it: the simulator's seeded wake-up latency
//!   lets the second request in first.
//! * [`client`] with a device removal (rdma-core commit d27efd53f, "Avoid possible hang on
//!   device removal"): on DEVICE_REMOVAL the CM thread stops without posting the semaphore the
//!   main thread waits on, so the main thread waits forever. The fix posts it with the block
//!   in its error state.
//!
//! Both are written against [`CmBackend`] with `cmtwin::thread` and `cmtwin::sync`, so they run
//! as real threads on the real backend and as simulated processes on the simulator. (rping's
//! data transfer, a ping-pong of RDMA reads and writes, needs the data path; the ports wait for
//! the connection's end where rping transfers data.)

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cmtwin::sync::{Mutex, Semaphore};
use cmtwin::{
    thread, ChannelHandle, CmBackend, CmError, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Wait,
};

use crate::Variant;

/// Address and route resolution timeout (rping's 2000 ms).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// Where a control block's connection stands (rping's `cb->state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CbState {
    /// Nothing happened yet.
    Idle,
    /// The address resolved.
    AddrResolved,
    /// The route resolved.
    RouteResolved,
    /// A connection request came (listening block).
    ConnectRequest,
    /// ESTABLISHED came.
    Connected,
    /// DISCONNECTED came.
    Disconnected,
    /// An error event or a device removal came.
    Error,
}

/// A control block: its state, the child id of a listening block, and its semaphore.
pub struct Cb {
    state: Mutex<(CbState, Option<IdHandle>)>,
    sem: Semaphore,
}

impl Cb {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Cb {
            state: Mutex::named(&format!("{name}.state"), (CbState::Idle, None)),
            sem: Semaphore::named(&format!("{name}.sem"), 0),
        })
    }

    fn set(&self, state: CbState) -> Result<(), CmError> {
        self.state.lock()?.0 = state;
        Ok(())
    }

    /// The state once the semaphore is posted (rping's `sem_wait(&cb->sem)` then a look at
    /// `cb->state`).
    fn wait(&self) -> Result<CbState, CmError> {
        self.sem.acquire()?;
        Ok(self.state.lock()?.0)
    }
}

/// The blocks by id context (rping's `cma_id->context`).
type Blocks = Arc<Mutex<BTreeMap<u64, Arc<Cb>>>>;

/// The context of the listening block (children get 1, 2, ...).
const LISTENER: u64 = 0;

/// Handles one event as rping's event handler does; `false` when the CM thread must stop.
fn handle_event(
    cm: &impl CmBackend,
    cb: &Cb,
    kind: EventKind,
    id: IdHandle,
    accept_ready: Option<&Semaphore>,
    variant: Variant,
) -> Result<bool, CmError> {
    match kind {
        EventKind::AddrResolved => {
            cb.set(CbState::AddrResolved)?;
            if cm.resolve_route(id, RESOLVE_TIMEOUT).is_err() {
                cb.set(CbState::Error)?;
                cb.sem.release()?;
            }
        }
        EventKind::RouteResolved => {
            cb.set(CbState::RouteResolved)?;
            cb.sem.release()?;
        }
        EventKind::ConnectRequest => {
            if let Some(ready) = accept_ready {
                ready.acquire()?;
            }
            *cb.state.lock()? = (CbState::ConnectRequest, Some(id));
            cb.sem.release()?;
        }
        EventKind::Established => {
            cb.set(CbState::Connected)?;
            cb.sem.release()?;
        }
        EventKind::Disconnected => {
            cb.set(CbState::Disconnected)?;
            cb.sem.release()?;
        }
        EventKind::DeviceRemoval => {
            if variant == Variant::Fixed {
                cb.set(CbState::Error)?;
                cb.sem.release()?;
            }
            return Ok(false);
        }
        EventKind::AddrError
        | EventKind::RouteError
        | EventKind::ConnectError
        | EventKind::Unreachable
        | EventKind::Rejected => {
            cb.set(CbState::Error)?;
            cb.sem.release()?;
            return Ok(false);
        }
        _ => {}
    }
    Ok(true)
}

/// rping's CM thread: fetches each event, hands it to the block of its id's context, acks
/// it; stops after `stop_after` DISCONNECTED events (the ports' end of a run) or when the
/// handler says so.
fn cm_thread<B: CmBackend>(
    cm: B,
    channel: ChannelHandle,
    blocks: Blocks,
    accept_ready: Option<Arc<Semaphore>>,
    stop_after: usize,
    variant: Variant,
) -> Result<(), CmError> {
    let mut disconnects = 0;
    loop {
        let event = cm.get_cm_event(channel, Wait::Block)?;
        let (kind, id) = (event.kind(), event.id());
        let context = cm.context(id)?;
        let cb = blocks.lock()?.get(&context).cloned();
        let go_on = match cb {
            Some(cb) => handle_event(&cm, &cb, kind, id, accept_ready.as_deref(), variant),
            None => Ok(true),
        };
        cm.ack_cm_event(event)?;
        if kind == EventKind::Disconnected {
            disconnects += 1;
        }
        if !go_on? || disconnects == stop_after {
            return Ok(());
        }
    }
}

/// `rping -P`'s persistent server on `addr`, serving `connections` connections: a CM thread,
/// the main loop that takes each request from the listening block and starts a thread that
/// accepts it, holds the connection for `hold` and closes it. Returns the number of
/// connections served.
pub fn persistent_server<B: CmBackend + Clone + Send + 'static>(
    cm: B,
    addr: SocketAddr,
    connections: usize,
    hold: Duration,
    variant: Variant,
) -> Result<usize, CmError> {
    let channel = cm.create_event_channel()?;
    let listen_id = cm.create_id(Some(channel), LISTENER, PortSpace::TCP)?;
    cm.bind_addr(listen_id, addr)?;
    cm.listen(listen_id, 16)?;
    let listening = Cb::new("listening_cb");
    let blocks: Blocks = Arc::new(Mutex::named("cbs", BTreeMap::new()));
    blocks.lock()?.insert(LISTENER, Arc::clone(&listening));
    // rping initialises accept_ready to 1: the first request need not wait.
    let accept_ready =
        (variant == Variant::Fixed).then(|| Arc::new(Semaphore::named("accept_ready", 1)));
    let cm_thread = {
        let (cm, blocks, ready) = (cm.clone(), Arc::clone(&blocks), accept_ready.clone());
        thread::spawn("cm_thread", move || {
            cm_thread(cm, channel, blocks, ready, connections, variant)
        })?
    };
    let mut servers = Vec::new();
    for n in 1..=connections as u64 {
        let (state, child) = {
            let state = listening.wait()?;
            (state, listening.state.lock()?.1)
        };
        let child = match (state, child) {
            (CbState::ConnectRequest, Some(child)) => child,
            _ => {
                return Err(CmError::application(format!(
                    "wait for CONNECT_REQUEST: state {state:?}"
                )))
            }
        };
        // clone_cb: a block of the child's own, which the child id's events now reach.
        let cb = Cb::new(&format!("cb{n}"));
        blocks.lock()?.insert(n, Arc::clone(&cb));
        cm.set_context(child, n)?;
        if let Some(ready) = &accept_ready {
            ready.release()?;
        }
        let cm = cm.clone();
        servers.push(thread::spawn(&format!("server{n}"), move || {
            serve_one(&cm, child, &cb, hold)
        })?);
    }
    let mut served = 0;
    for s in servers {
        s.join()??;
        served += 1;
    }
    cm_thread.join()??;
    cm.destroy_id(listen_id)?;
    cm.destroy_event_channel(channel)?;
    Ok(served)
}

/// rping's persistent server thread: QP and accept; once connected, it holds the connection
/// for `hold` (where rping pings), disconnects, waits for DISCONNECTED and destroys the id.
fn serve_one(cm: &impl CmBackend, child: IdHandle, cb: &Cb, hold: Duration) -> Result<(), CmError> {
    cm.create_qp(child, &QpInitAttr::new(QpType::Rc))?;
    cm.accept(child, None)?;
    let state = cb.wait()?;
    if state != CbState::Connected {
        return Err(CmError::application(format!(
            "wait for CONNECTED: state {state:?}"
        )));
    }
    cm.sleep(hold)?;
    cm.disconnect(child)?;
    while cb.wait()? != CbState::Disconnected {}
    cm.destroy_qp(child)?;
    cm.destroy_id(child)
}

/// How an rping client's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientEnd {
    /// Connected, then disconnected cleanly.
    Done,
    /// The CM thread reported an error state (a failed attempt or a removed device).
    Failed,
}

/// An rping client to `server`: a CM thread, and the main thread that waits on the block's
/// semaphore for each step: the route, the connection, then (where rping waits for each ping's
/// completion) the connection's next state, the server's disconnect. It then disconnects
/// (ignoring the error, as rping does) and destroys what it made.
pub fn client<B: CmBackend + Clone + Send + 'static>(
    cm: B,
    server: SocketAddr,
    variant: Variant,
) -> Result<ClientEnd, CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), LISTENER, PortSpace::TCP)?;
    let cb = Cb::new("cb");
    let blocks: Blocks = Arc::new(Mutex::named("cbs", BTreeMap::new()));
    blocks.lock()?.insert(LISTENER, Arc::clone(&cb));
    let events = {
        let (cm, blocks) = (cm.clone(), Arc::clone(&blocks));
        thread::spawn("cm_thread", move || {
            cm_thread(cm, channel, blocks, None, 1, variant)
        })?
    };
    let end = client_steps(&cm, id, server, &cb)?;
    let _ = cm.disconnect(id);
    events.join()??;
    // No QP when the attempt failed before it, none either once the device took it.
    let _ = cm.destroy_qp(id);
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    Ok(end)
}

/// The client's main thread, step by step.
fn client_steps(
    cm: &impl CmBackend,
    id: IdHandle,
    server: SocketAddr,
    cb: &Cb,
) -> Result<ClientEnd, CmError> {
    cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT)?;
    if cb.wait()? != CbState::RouteResolved {
        return Ok(ClientEnd::Failed);
    }
    if cm.create_qp(id, &QpInitAttr::new(QpType::Rc)).is_err()
        || cm.connect(id, None).is_err()
        || cb.wait()? != CbState::Connected
    {
        return Ok(ClientEnd::Failed);
    }
    match cb.wait()? {
        CbState::Disconnected => Ok(ClientEnd::Done),
        _ => Ok(ClientEnd::Failed),
    }
}
