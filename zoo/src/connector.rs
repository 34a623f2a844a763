//! A well-behaved active side: connects to a listener a number of times in a row, each time
//! until the attempt ends (rejected, unreachable, ...) or, once established, until the
//! connection is disconnected, and destroys each id. The ported passive sides run against it.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Wait,
};

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Makes `attempts` connection attempts to `target`, one after the other; returns the event
/// that ended each (ESTABLISHED for one that connected, then was disconnected).
pub fn connect_times<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    attempts: usize,
) -> Result<Vec<EventKind>, CmError> {
    let channel = cm.create_event_channel()?;
    let mut ends = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        ends.push(attempt(cm, channel, target)?);
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
) -> Result<EventKind, CmError> {
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut qp = false;
    let ended = drive(cm, channel, id, target, &mut qp);
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
    target: SocketAddr,
    qp: &mut bool,
) -> Result<EventKind, CmError> {
    let mut established = false;
    if let Err(e) = cm.resolve_addr(id, None, target, RESOLVE_TIMEOUT) {
        return gone(e);
    }
    loop {
        let event = cm.get_cm_event(channel, Wait::Block)?;
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
