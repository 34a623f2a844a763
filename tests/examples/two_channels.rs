//! A program with two event channels, waiting on both at once: the server listens on two
//! ports (a "control" and a "data" listener), each with its own channel, and serves whichever
//! has an event; the client connects to both, each id on its own channel, and waits on both
//! too. It first asks which channels are ready (`poll_channels`, the `poll(2)` of a C program)
//! and then takes events from whichever has one (`get_cm_event_any`).
//!
//! `cargo run --example two_channels [seed]` runs it on the simulator;
//! `CMTWIN_RDMA_ADDR=<ip> cargo run --example two_channels` on the real librdmacm.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, CmEvent, ConnParam, EventKind, IdHandle, PortSpace,
    QpInitAttr, QpType, Wait,
};

/// Each wait's bound.
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));

#[derive(Clone)]
struct TwoChannels;

/// The next event of either channel, with the name of the channel it came from.
fn next<B: CmBackend>(
    cm: &B,
    channels: &[(ChannelHandle, &'static str); 2],
) -> Result<(&'static str, CmEvent), CmError> {
    let handles = [channels[0].0, channels[1].0];
    let (from, event) = cm.get_cm_event_any(&handles, WAIT)?;
    let name = channels
        .iter()
        .find(|(h, _)| *h == from)
        .map_or("?", |(_, n)| *n);
    Ok((name, event))
}

/// Checks that `event` is of `kind`, naming what came otherwise.
fn check(event: &CmEvent, kind: EventKind, side: &str) {
    assert_eq!(
        event.kind(),
        kind,
        "{side}: expected {kind}, got {} (status {}) on {}",
        event.kind(),
        event.status(),
        event.id()
    );
}

impl support::Program for TwoChannels {
    fn server<B: CmBackend>(&self, cm: &B, addr: SocketAddr) -> Result<(), CmError> {
        let chans = [
            (cm.create_event_channel()?, "control"),
            (cm.create_event_channel()?, "data"),
        ];
        let mut listeners = Vec::new();
        for (i, (ch, _)) in chans.iter().enumerate() {
            let l = cm.create_id(Some(*ch), 0, PortSpace::TCP)?;
            cm.bind_addr(l, SocketAddr::new(addr.ip(), addr.port() + i as u16))?;
            cm.listen(l, 4)?;
            listeners.push(l);
        }
        let handles = [chans[0].0, chans[1].0];
        // Readiness first: which listener has a request (without taking it)?
        let ready = cm.poll_channels(&handles, WAIT)?;
        let names: Vec<&str> = chans
            .iter()
            .filter(|(h, _)| ready.contains(h))
            .map(|(_, n)| *n)
            .collect();
        println!("server: ready first: {names:?}");
        let mut conns: Vec<IdHandle> = Vec::new();
        let (mut established, mut disconnected) = (0, 0);
        while disconnected < 2 {
            let (from, event) = next(cm, &chans)?;
            match event.kind() {
                EventKind::ConnectRequest => {
                    let id = event.id();
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                    cm.accept(id, Some(&ConnParam::default()))?;
                    conns.push(id);
                    println!("server: request on the {from} channel");
                }
                EventKind::Established => established += 1,
                EventKind::Disconnected => {
                    cm.disconnect(event.id())?;
                    disconnected += 1;
                }
                _ => check(&event, EventKind::Established, "server"),
            }
            cm.ack_cm_event(event)?;
        }
        println!("server: {established} established, {disconnected} disconnected");
        for id in conns.into_iter().chain(listeners) {
            cm.destroy_id(id)?;
        }
        for (ch, _) in chans {
            cm.destroy_event_channel(ch)?;
        }
        Ok(())
    }

    fn client<B: CmBackend>(&self, cm: &B, server: SocketAddr) -> Result<(), CmError> {
        let chans = [
            (cm.create_event_channel()?, "control"),
            (cm.create_event_channel()?, "data"),
        ];
        let mut ids = Vec::new();
        for (i, (ch, _)) in chans.iter().enumerate() {
            let id = cm.create_id(Some(*ch), 0, PortSpace::TCP)?;
            let dst = SocketAddr::new(server.ip(), server.port() + i as u16);
            cm.resolve_addr(id, None, dst, Duration::from_secs(2))?;
            ids.push(id);
        }
        let mut established = 0;
        while established < 2 {
            let (from, event) = next(cm, &chans)?;
            let id = event.id();
            match event.kind() {
                EventKind::AddrResolved => cm.resolve_route(id, Duration::from_secs(2))?,
                EventKind::RouteResolved => {
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                    cm.connect(id, Some(&ConnParam::default()))?;
                }
                EventKind::Established => {
                    established += 1;
                    println!("client: {from} connection established at {:?}", cm.now());
                }
                _ => check(&event, EventKind::Established, "client"),
            }
            // Dropping the event acknowledges it.
            drop(event);
        }
        for id in &ids {
            cm.disconnect(*id)?;
        }
        for _ in 0..2 {
            let (_, event) = next(cm, &chans)?;
            check(&event, EventKind::Disconnected, "client");
        }
        for id in ids {
            cm.destroy_id(id)?;
        }
        for (ch, _) in chans {
            cm.destroy_event_channel(ch)?;
        }
        println!("client: both closed at {:?}", cm.now());
        Ok(())
    }
}

fn main() {
    support::run(TwoChannels, 7481);
}
