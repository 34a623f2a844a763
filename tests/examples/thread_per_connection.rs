//! A thread-per-connection server and client, as rping and most RDMA servers are written: the
//! server's CM thread fetches every event of the listening channel and hands each connection's
//! events to that connection's own thread through a channel; each connection thread accepts,
//! waits for ESTABLISHED, then for the client's disconnect, and cleans up. The client runs one
//! thread per connection, each with its own event channel.
//!
//! Written once with `cmtwin::thread` and `cmtwin::sync`: on the simulator every thread is a
//! simulated process scheduled by the fabric (seeded, in virtual time); on the real librdmacm
//! they are OS threads and std's primitives.
//!
//! `cargo run --example thread_per_connection [seed]` runs it on the simulator;
//! `CMTWIN_RDMA_ADDR=<ip> cargo run --example thread_per_connection` on the real librdmacm.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::sync::{self, Receiver, Sender};
use cmtwin::{
    thread, CmBackend, CmError, ConnParam, EventKind, IdHandle, PortSpace, QpInitAttr, QpType, Wait,
};

/// Connections the client opens, each on its own thread.
const CONNECTIONS: u64 = 4;
/// Each wait's bound.
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
/// The listener's context; connections get 1, 2, ...
const LISTENER: u64 = 0;

#[derive(Clone)]
struct ThreadPerConnection;

/// Fails with an application error naming what came instead of `want`.
fn expect(got: EventKind, want: EventKind, who: &str) -> Result<(), CmError> {
    if got == want {
        Ok(())
    } else {
        Err(CmError::application(format!(
            "{who}: expected {want}, got {got}"
        )))
    }
}

/// A connection thread of the server: accepts `id`, then follows its events as the CM thread
/// forwards them.
fn serve<B: CmBackend>(
    cm: &B,
    id: IdHandle,
    n: u64,
    events: Receiver<EventKind>,
) -> Result<(), CmError> {
    let who = format!("server connection {n}");
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.accept(id, Some(&ConnParam::default()))?;
    expect(events.recv()?, EventKind::Established, &who)?;
    println!("{who}: established");
    expect(events.recv()?, EventKind::Disconnected, &who)?;
    cm.disconnect(id)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    println!("{who}: closed");
    Ok(())
}

/// The server's CM thread: starts a connection thread per request and forwards every later
/// event of a connection to its thread; returns the connection threads once all of them saw
/// their DISCONNECTED.
fn cm_thread<B: CmBackend + Clone + 'static>(
    cm: B,
    listening: cmtwin::ChannelHandle,
) -> Result<Vec<thread::JoinHandle<Result<(), CmError>>>, CmError> {
    let mut conns: BTreeMap<u64, Sender<EventKind>> = BTreeMap::new();
    let mut threads = Vec::new();
    let mut closed = 0;
    while closed < CONNECTIONS {
        let event = cm.get_cm_event(listening, WAIT)?;
        let (kind, id) = (event.kind(), event.id());
        if kind == EventKind::ConnectRequest {
            let n = threads.len() as u64 + 1;
            cm.set_context(id, n)?;
            let (tx, rx) = sync::channel();
            conns.insert(n, tx);
            let cm = cm.clone();
            threads.push(thread::spawn(&format!("conn{n}"), move || {
                serve(&cm, id, n, rx)
            })?);
        } else {
            let n = cm.context(id)?;
            // Acknowledged before the hand-over (only its kind travels): the connection
            // thread's destroy_id would otherwise wait for this thread's ack.
            cm.ack_cm_event(event)?;
            let tx = conns.get(&n).ok_or_else(|| {
                CmError::application(format!("{kind} for unknown connection {n}"))
            })?;
            tx.send(kind)?;
            if kind == EventKind::Disconnected {
                closed += 1;
            }
            continue;
        }
        cm.ack_cm_event(event)?;
    }
    Ok(threads)
}

/// One client connection, on its own thread and event channel.
fn connect<B: CmBackend>(cm: &B, server: SocketAddr, n: u64) -> Result<(), CmError> {
    let who = format!("client connection {n}");
    let ch = cm.create_event_channel()?;
    let id = cm.create_id(Some(ch), n, PortSpace::TCP)?;
    let next = || -> Result<EventKind, CmError> {
        let event = cm.get_cm_event(ch, WAIT)?;
        let kind = event.kind();
        cm.ack_cm_event(event)?;
        Ok(kind)
    };
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    expect(next()?, EventKind::AddrResolved, &who)?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    expect(next()?, EventKind::RouteResolved, &who)?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::default()))?;
    expect(next()?, EventKind::Established, &who)?;
    cm.disconnect(id)?;
    expect(next()?, EventKind::Disconnected, &who)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(ch)?;
    println!("{who}: done at {:?}", cm.now());
    Ok(())
}

impl support::Program for ThreadPerConnection {
    fn server<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        addr: SocketAddr,
    ) -> Result<(), CmError> {
        let channel = cm.create_event_channel()?;
        let listener = cm.create_id(Some(channel), LISTENER, PortSpace::TCP)?;
        cm.bind_addr(listener, addr)?;
        cm.listen(listener, 8)?;
        let events = {
            let cm = cm.clone();
            thread::spawn("cm", move || cm_thread(cm, channel))?
        };
        let connections = events.join()??;
        let served = connections.len();
        for c in connections {
            c.join()??;
        }
        cm.destroy_id(listener)?;
        cm.destroy_event_channel(channel)?;
        println!("server: {served} connections served, one thread each");
        Ok(())
    }

    fn client<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        server: SocketAddr,
    ) -> Result<(), CmError> {
        let mut threads = Vec::new();
        for n in 1..=CONNECTIONS {
            let cm = cm.clone();
            threads.push(thread::spawn(&format!("client{n}"), move || {
                connect(&cm, server, n)
            })?);
        }
        for t in threads {
            t.join()??;
        }
        Ok(())
    }
}

fn main() {
    support::run(ThreadPerConnection, 7473);
}
