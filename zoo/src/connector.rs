//! A well-behaved active side: connects to a listener a number of times in a row, each time
//! until the attempt ends (rejected, unreachable, ...) or, once established, until the
//! connection is disconnected (by itself at once, or by the listener's side), and destroys
//! each id. The ported passive sides run against it.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Wait,
};

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an established connection waits for the peer to disconnect it.
const PEER_GRACE: Duration = Duration::from_secs(30);

/// Makes `attempts` connection attempts to `target`, one after the other; returns the event
/// that ended each (ESTABLISHED for one that connected, then was disconnected).
pub fn connect_times<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    attempts: usize,
) -> Result<Vec<EventKind>, CmError> {
    connect_each(cm, target, attempts, Closer::Connector)
}

/// Like [`connect_times`], but leaves the disconnect to the listener's side: each established
/// connection lasts until the peer disconnects it (or something else ends it).
pub fn connect_until_peer_closes<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    attempts: usize,
) -> Result<Vec<EventKind>, CmError> {
    connect_each(cm, target, attempts, Closer::Peer)
}

/// Which side disconnects an established connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closer {
    /// The connector, as soon as the connection is established.
    Connector,
    /// The listener's side.
    Peer,
}

/// Makes `attempts` attempts, one after the other, `closer` disconnecting each connection.
fn connect_each<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    attempts: usize,
    closer: Closer,
) -> Result<Vec<EventKind>, CmError> {
    let channel = cm.create_event_channel()?;
    let mut ends = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        ends.push(attempt(cm, channel, target, closer)?);
    }
    cm.destroy_event_channel(channel)?;
    Ok(ends)
}

/// Whether `kind` ends an attempt or a connection for good.
fn ends(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::Disconnected
            | EventKind::DeviceRemoval
    )
}

/// One attempt on a fresh id.
fn attempt<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    target: SocketAddr,
    closer: Closer,
) -> Result<EventKind, CmError> {
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut qp = false;
    let ended = drive(cm, channel, id, (target, closer), &mut qp);
    if qp {
        cm.destroy_qp(id)?;
    }
    cm.destroy_id(id)?;
    ended
}

/// Drives the attempt on `id` to its end.
fn drive<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    (target, closer): (SocketAddr, Closer),
    qp: &mut bool,
) -> Result<EventKind, CmError> {
    let mut established = false;
    if let Err(e) = cm.resolve_addr(id, None, target, RESOLVE_TIMEOUT) {
        return gone(e);
    }
    // Waiting on the peer to disconnect is bounded: past `PEER_GRACE` the connector
    // disconnects itself (the DISCONNECTED then comes from the DREP or the DREQ's timeout).
    let mut wait = Wait::Block;
    loop {
        let event = match cm.get_cm_event(channel, wait) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => {
                wait = Wait::Block;
                match cm.disconnect(id) {
                    Err(e) if e.errno == Errno::EINVAL => {}
                    Err(e) => return gone(e),
                    Ok(()) => {}
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let kind = event.kind();
        cm.ack_cm_event(event)?;
        let step = match kind {
            EventKind::AddrResolved => cm.resolve_route(id, RESOLVE_TIMEOUT),
            EventKind::RouteResolved => {
                cm.create_qp(id, &QpInitAttr::new(QpType::Rc))
                    .and_then(|_| {
                        *qp = true;
                        cm.connect(id, None)
                    })
            }
            EventKind::Established if closer == Closer::Peer => {
                established = true;
                wait = Wait::Timeout(PEER_GRACE);
                Ok(())
            }
            EventKind::Established => {
                established = true;
                match cm.disconnect(id) {
                    Err(e) if e.errno == Errno::EINVAL => Ok(()),
                    other => other,
                }
            }
            k if ends(k) => {
                return Ok(if established && k == EventKind::Disconnected {
                    EventKind::Established
                } else {
                    k
                })
            }
            _ => Ok(()),
        };
        if let Err(e) = step {
            return gone(e);
        }
    }
}

/// A call refused because the device was removed (its DEVICE_REMOVAL is queued) ends the
/// attempt; any other error is returned.
pub(crate) fn gone(e: CmError) -> Result<EventKind, CmError> {
    if e.errno == Errno::ENXIO {
        Ok(EventKind::DeviceRemoval)
    } else {
        Err(e)
    }
}
