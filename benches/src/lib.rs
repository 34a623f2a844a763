//! Workloads shared by the benchmarks: protocol code generic over `CmBackend`, so that the same
//! workload measures the simulator and real librdmacm, and the engine report's measurements of
//! the simulator (RC lifecycles driven from an event loop, process switches), each timed in
//! process CPU time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cpu;
pub mod lifecycle;
mod lifecycle_tables;
pub mod messages;
pub mod switch;
pub mod topology;

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, ConnParam, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Result, Wait,
};

const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));

/// Takes the next event of `channel`, which must be of `kind`; returns its id.
pub fn next<B: CmBackend>(cm: &B, channel: ChannelHandle, kind: EventKind) -> Result<IdHandle> {
    let event = cm.get_cm_event(channel, WAIT)?;
    let (got, id) = (event.kind(), event.id());
    cm.ack_cm_event(event)?;
    assert_eq!(got, kind, "unexpected event");
    Ok(id)
}

/// Opens `n` RC connections from `client` to a listener of `server` at `addr`, one after the
/// other, then tears them all down; every step waits for its event.
pub fn connect_many<B: CmBackend>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    n: usize,
) -> Result<()> {
    let sch = server.create_event_channel()?;
    let cch = client.create_event_channel()?;
    let listener = server.create_id(Some(sch), 0, PortSpace::TCP)?;
    server.bind_addr(listener, addr)?;
    server.listen(listener, 0)?;
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        let id = client.create_id(Some(cch), 0, PortSpace::TCP)?;
        client.resolve_addr(id, None, addr, Duration::from_secs(2))?;
        next(client, cch, EventKind::AddrResolved)?;
        client.resolve_route(id, Duration::from_secs(2))?;
        next(client, cch, EventKind::RouteResolved)?;
        client.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
        client.connect(id, Some(&ConnParam::with_private_data(b"bench")))?;
        let child = next(server, sch, EventKind::ConnectRequest)?;
        server.create_qp(child, &QpInitAttr::new(QpType::Rc))?;
        server.accept(child, Some(&ConnParam::default()))?;
        next(client, cch, EventKind::Established)?;
        next(server, sch, EventKind::Established)?;
        pairs.push((id, child));
    }
    for (id, child) in pairs {
        client.disconnect(id)?;
        next(server, sch, EventKind::Disconnected)?;
        server.disconnect(child)?;
        next(client, cch, EventKind::Disconnected)?;
        for (cm, id) in [(client, id), (server, child)] {
            cm.destroy_qp(id)?;
            cm.destroy_id(id)?;
        }
    }
    server.destroy_id(listener)?;
    server.destroy_event_channel(sch)?;
    client.destroy_event_channel(cch)
}
