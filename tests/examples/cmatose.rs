//! cmatose-style connections: one server and one client, each with ONE event channel for all
//! its connections, and a dispatch loop that routes every event to the connection it belongs
//! to by the context of its id (as rdma-core's `cmatose` does with `id->context`).
//!
//! `cargo run --example cmatose [seed]` runs it on the simulator;
//! `CMTWIN_RDMA_ADDR=<ip> cargo run --example cmatose` on the real librdmacm (Soft-RoCE or
//! hardware) at that address. The protocol code is the same.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    CmBackend, CmError, ConnParam, Dispatcher, EventKind, Flow, IdHandle, PortSpace, QpInitAttr,
    QpType, Routed, Wait,
};

/// How many connections the client opens.
const CONNECTIONS: usize = 4;
/// Each wait's bound.
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));

/// One connection, as either side keeps it.
#[derive(Debug)]
struct Conn {
    id: IdHandle,
    established: bool,
}

#[derive(Clone)]
struct Cmatose;

/// An event the protocol does not expect here: a bug of the peer or of this program, so the
/// run fails, naming it.
fn unexpected(r: &Routed<'_>) -> ! {
    panic!(
        "unexpected {} (status {}) on {} (context {})",
        r.event.kind(),
        r.event.status(),
        r.event.id(),
        r.context
    )
}

impl support::Program for Cmatose {
    fn server<B: CmBackend>(&self, cm: &B, addr: SocketAddr) -> Result<(), CmError> {
        let channel = cm.create_event_channel()?;
        let mut conns: Dispatcher<Conn> = Dispatcher::new();
        // The listener's context is 0: no connection has it.
        let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.bind_addr(listener, addr)?;
        cm.listen(listener, CONNECTIONS as i32)?;
        let mut accepted = 0;
        let mut closed = Vec::new();
        conns.run(cm, &[channel], WAIT, |conns, r| {
            match r.event.kind() {
                EventKind::ConnectRequest if r.context == 0 => {
                    let id = r.event.id();
                    let ctx = conns.add(Conn {
                        id,
                        established: false,
                    });
                    cm.set_context(id, ctx)?;
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                    cm.accept(id, Some(&ConnParam::default()))?;
                    accepted += 1;
                }
                EventKind::Established => {
                    let conn = conns.get_mut(r.context).unwrap_or_else(|| unexpected(&r));
                    conn.established = true;
                    println!("server: connection {} established ({})", r.context, conn.id);
                }
                EventKind::Disconnected => {
                    let conn = conns.remove(r.context).unwrap_or_else(|| unexpected(&r));
                    cm.disconnect(conn.id)?;
                    // Destroyed once the loop acknowledged this event.
                    closed.push(conn.id);
                }
                _ => unexpected(&r),
            }
            let finished = accepted == CONNECTIONS && conns.is_empty();
            Ok(if finished { Flow::Stop } else { Flow::Continue })
        })?;
        for id in closed {
            cm.destroy_id(id)?;
        }
        cm.destroy_id(listener)?;
        cm.destroy_event_channel(channel)?;
        println!("server: {accepted} connections served");
        Ok(())
    }

    fn client<B: CmBackend>(&self, cm: &B, server: SocketAddr) -> Result<(), CmError> {
        let channel = cm.create_event_channel()?;
        let mut conns: Dispatcher<Conn> = Dispatcher::new();
        for _ in 0..CONNECTIONS {
            let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
            let ctx = conns.add(Conn {
                id,
                established: false,
            });
            cm.set_context(id, ctx)?;
            cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
        }
        // Drive every connection to ESTABLISHED.
        conns.run(cm, &[channel], WAIT, |conns, r| {
            let conn = conns.get_mut(r.context).unwrap_or_else(|| unexpected(&r));
            match r.event.kind() {
                EventKind::AddrResolved => cm.resolve_route(conn.id, Duration::from_secs(2))?,
                EventKind::RouteResolved => {
                    cm.create_qp(conn.id, &QpInitAttr::new(QpType::Rc))?;
                    cm.connect(conn.id, Some(&ConnParam::default()))?;
                }
                EventKind::Established => conn.established = true,
                _ => unexpected(&r),
            }
            let all = conns.iter().all(|(_, c)| c.established);
            Ok(if all { Flow::Stop } else { Flow::Continue })
        })?;
        println!(
            "client: {CONNECTIONS} connections established at {:?}",
            cm.now()
        );
        for (_, c) in conns.iter() {
            cm.disconnect(c.id)?;
        }
        let mut ids = Vec::new();
        conns.run(cm, &[channel], WAIT, |conns, r| {
            if r.event.kind() != EventKind::Disconnected {
                unexpected(&r);
            }
            let conn = conns.remove(r.context).unwrap_or_else(|| unexpected(&r));
            ids.push(conn.id);
            Ok(if conns.is_empty() {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })?;
        for id in ids {
            cm.destroy_id(id)?;
        }
        cm.destroy_event_channel(channel)?;
        println!("client: all disconnected at {:?}", cm.now());
        Ok(())
    }
}

fn main() {
    support::run(Cmatose, 7471);
}
