//! SPDK nvme_rdma: after a host power-off, reconnecting is rejected as a stale connection
//! (<https://github.com/spdk/spdk/issues/450>; the stale-connection retry came with the
//! initiator's disconnect handling, spdk/spdk issue 1087).
//!
//! The host loses power while connected: its peer (the target) is told nothing and keeps the
//! connection. When the host is back, its first QP gets the QP number the old connection had
//! (the device's QP numbers start over). The target's CM still holds a connection from that
//! device and QP number, so it rejects the new REQ with reason 10 (stale connection) and
//! disconnects the old connection itself. The initiator of the issue treats the REJECTED like
//! any failed connect: the controller fails, and the host never comes back.
//!
//! The fixed logic (SPDK's `nvme_rdma_stale_conn_retry`) recognises REJECTED with status 10,
//! drops the attempt (its QP and id) and tries again after 10 ms with a new QP, whose number is
//! not the stale one, at most five times.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    CmBackend, CmError, Errno, EventKind, IbRejReason, PortSpace, QpInitAttr, QpType, Wait,
};

use crate::Variant;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Each CM event wait's bound (SPDK's CM event timeout is 1 s; this is longer so that CM
/// retransmissions under message loss still count as the same attempt).
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);
/// SPDK's stale-connection retries and their spacing.
const STALE_RETRIES: u32 = 5;
const STALE_RETRY_DELAY: Duration = Duration::from_millis(10);

/// How a connect attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// ESTABLISHED.
    Connected,
    /// An event ended it (REJECTED, UNREACHABLE, ...), with its status.
    Failed(EventKind, i32),
    /// The host lost its device or its handles (power-off, device removal): `Errno`.
    HostLost(Errno),
    /// No event within SPDK's CM event timeout (the target's side silent or gone).
    TimedOut,
}

/// How the controller's connect ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// Connected after this many stale-connection retries.
    Connected {
        /// Retries made after a stale-connection reject.
        stale_retries: u32,
    },
    /// The controller failed: the last attempt's end.
    Failed(Attempt),
}

/// Errors that mean the host's RDMA state is gone (a power-off or a device removal under the
/// attempt), not a mistake of the port.
fn host_lost(e: &CmError) -> bool {
    matches!(
        e.errno,
        Errno::EBADF | Errno::ENOENT | Errno::ENXIO | Errno::ENODEV
    )
}

/// One `nvme_rdma_qpair_connect`: a fresh channel, id and QP, driven to ESTABLISHED or to the
/// event that ends it; the id is kept when connected (returned with its channel).
fn attempt<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
) -> Result<(Attempt, Option<(cmtwin::ChannelHandle, cmtwin::IdHandle)>), CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let step = |r: Result<(), CmError>| -> Result<Option<Attempt>, CmError> {
        match r {
            Ok(()) => Ok(None),
            Err(e) if host_lost(&e) => Ok(Some(Attempt::HostLost(e.errno))),
            Err(e) => Err(e),
        }
    };
    let mut end = step(cm.resolve_addr(id, None, target, RESOLVE_TIMEOUT))?;
    while end.is_none() {
        let event = match cm.get_cm_event(channel, Wait::Timeout(EVENT_TIMEOUT)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => {
                end = Some(Attempt::TimedOut);
                break;
            }
            Err(e) if host_lost(&e) => return Ok((Attempt::HostLost(e.errno), None)),
            Err(e) => return Err(e),
        };
        let (kind, status) = (event.kind(), event.status());
        cm.ack_cm_event(event)?;
        end = match kind {
            EventKind::AddrResolved => step(cm.resolve_route(id, RESOLVE_TIMEOUT))?,
            EventKind::RouteResolved => step(
                cm.create_qp(id, &QpInitAttr::new(QpType::Rc))
                    .and_then(|_| cm.connect(id, None)),
            )?,
            EventKind::Established => Some(Attempt::Connected),
            EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::DeviceRemoval => Some(Attempt::Failed(kind, status)),
            _ => None,
        };
    }
    let end = end.unwrap_or(Attempt::HostLost(Errno::EIO));
    if end == Attempt::Connected {
        return Ok((end, Some((channel, id))));
    }
    // nvme_rdma_qpair_destroy: the QP, the id, the channel (whatever is left of them).
    let _ = cm.destroy_qp(id);
    let _ = cm.destroy_id(id);
    let _ = cm.destroy_event_channel(channel);
    Ok((end, None))
}

/// The controller's connect (`nvme_rdma_ctrlr_connect_qpair` of the admin qpair), then a
/// clean disconnect once connected. With the buggy logic a stale-connection reject fails the
/// controller; with the fixed logic it is retried with a new QP.
pub fn connect_controller<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    variant: Variant,
) -> Result<Controller, CmError> {
    let mut stale_retries = 0;
    loop {
        let (end, connected) = attempt(cm, target)?;
        if let Some((channel, id)) = connected {
            let _ = cm.disconnect(id);
            // The DISCONNECTED (or the host lost under it) ends the connection.
            let _ = cm
                .get_cm_event(channel, Wait::Timeout(EVENT_TIMEOUT))
                .map(|e| cm.ack_cm_event(e));
            let _ = cm.destroy_qp(id);
            let _ = cm.destroy_id(id);
            let _ = cm.destroy_event_channel(channel);
            return Ok(Controller::Connected { stale_retries });
        }
        let stale = end == Attempt::Failed(EventKind::Rejected, IbRejReason::STALE_CONN);
        if variant == Variant::Fixed && stale && stale_retries < STALE_RETRIES {
            stale_retries += 1;
            cm.sleep(STALE_RETRY_DELAY)?;
            continue;
        }
        return Ok(Controller::Failed(end));
    }
}

/// The host's life before the power-off: connects to `target` and keeps the connection (as an
/// admin qpair does) until the host's handles die under it or the target ends it.
pub fn first_life<B: CmBackend>(cm: &B, target: SocketAddr) -> Result<Attempt, CmError> {
    let (end, connected) = attempt(cm, target)?;
    let Some((channel, _id)) = connected else {
        return Ok(end);
    };
    loop {
        match cm.get_cm_event(channel, Wait::Block) {
            Ok(event) => {
                let kind = event.kind();
                cm.ack_cm_event(event)?;
                if kind == EventKind::Disconnected {
                    return Ok(Attempt::Failed(kind, 0));
                }
            }
            Err(e) if host_lost(&e) => return Ok(Attempt::HostLost(e.errno)),
            Err(e) => return Err(e),
        }
    }
}
