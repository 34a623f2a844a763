//! SPDK nvme_rdma: the close path waits for a DISCONNECTED that can never come
//! (<https://github.com/spdk/spdk/issues/3592>).
//!
//! SPDK's NVMe-oF host keeps each qpair's CM events and processes them in two places: the
//! transport-event poll, which consumes a DISCONNECTED the target sends (the target shut
//! down) and marks the qpair failed, and the qpair's close path, which calls `rdma_disconnect`
//! (ignoring its error) and then waits for the qpair's DISCONNECTED. When the peer
//! disconnected first, that event was already consumed by the poll; when the connect was
//! REJECTED, no connection ever existed: either way nothing will deliver a DISCONNECTED. SPDK
//! bounds the wait with its CM event timeout, so the close path always ends in that timeout.
//! The port waits without bound, so the simulator reports the impossible wait at once: the
//! blocked `get_cm_event` fails with EDEADLK naming the channel it waited on.
//!
//! The fixed logic (what the issue asks for) waits only for a DISCONNECTED that is owed: the
//! connection was established, nothing ended it yet, and `rdma_disconnect` succeeded.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Wait,
};

use crate::Variant;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a qpair's connection stands, as the host tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpairState {
    /// Resolving and connecting.
    Connecting,
    /// ESTABLISHED seen, nothing ended it since.
    Connected,
    /// The connection attempt ended with this event (REJECTED, UNREACHABLE, ...).
    ConnectFailed(EventKind),
    /// The transport-event poll consumed the peer's DISCONNECTED (or DEVICE_REMOVAL).
    Failed(EventKind),
}

/// One NVMe-oF qpair over RDMA: its channel, id and QP.
pub struct Qpair<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    id: IdHandle,
    qp: bool,
    /// Where the connection stands.
    pub state: QpairState,
}

impl<'a, B: CmBackend> Qpair<'a, B> {
    /// Creates the qpair's channel and id and connects it to `target`, event by event, until
    /// ESTABLISHED or an event that ends the attempt.
    pub fn connect(cm: &'a B, target: SocketAddr) -> Result<Self, CmError> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        let mut qpair = Qpair {
            cm,
            channel,
            id,
            qp: false,
            state: QpairState::Connecting,
        };
        cm.resolve_addr(id, None, target, RESOLVE_TIMEOUT)?;
        while qpair.state == QpairState::Connecting {
            let event = cm.get_cm_event(channel, Wait::Block)?;
            let kind = event.kind();
            cm.ack_cm_event(event)?;
            // A call refused because the device went away (its DEVICE_REMOVAL is queued)
            // fails the attempt as the event would.
            let step = match kind {
                EventKind::AddrResolved => cm.resolve_route(id, RESOLVE_TIMEOUT),
                EventKind::RouteResolved => cm
                    .create_qp(id, &QpInitAttr::new(QpType::Rc))
                    .and_then(|_| {
                        qpair.qp = true;
                        cm.connect(id, None)
                    }),
                _ => Ok(()),
            };
            if let Err(e) = step {
                qpair.state = QpairState::ConnectFailed(crate::connector::gone(e)?);
                continue;
            }
            match kind {
                EventKind::Established => qpair.state = QpairState::Connected,
                EventKind::AddrError
                | EventKind::RouteError
                | EventKind::ConnectError
                | EventKind::Unreachable
                | EventKind::Rejected
                | EventKind::DeviceRemoval => qpair.state = QpairState::ConnectFailed(kind),
                _ => {}
            }
        }
        Ok(qpair)
    }

    /// The transport-event poll: consumes every event arriving within `period`; a
    /// DISCONNECTED (or anything else ending the connection) marks the qpair failed.
    pub fn process_transport_events(&mut self, period: Duration) -> Result<(), CmError> {
        let until = self.cm.now() + period;
        loop {
            let left = until.saturating_sub(self.cm.now());
            if left.is_zero() {
                return Ok(());
            }
            let event = match self.cm.get_cm_event(self.channel, Wait::Timeout(left)) {
                Ok(event) => event,
                Err(e) if e.errno == Errno::ETIMEDOUT => return Ok(()),
                Err(e) => return Err(e),
            };
            let kind = event.kind();
            self.cm.ack_cm_event(event)?;
            if ends_connection(kind) && self.state == QpairState::Connected {
                self.state = QpairState::Failed(kind);
            }
        }
    }

    /// `nvme_rdma_process_event` for an expected kind: fetches the qpair's events until one of
    /// `expected` kind (others are acknowledged and passed over).
    fn wait_for(&self, expected: EventKind) -> Result<(), CmError> {
        loop {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            let kind = event.kind();
            self.cm.ack_cm_event(event)?;
            if kind == expected {
                return Ok(());
            }
        }
    }

    /// The close path: disconnect, wait for the DISCONNECTED as `variant` does, then destroy
    /// the QP, the id and the channel.
    pub fn close(self, variant: Variant) -> Result<(), CmError> {
        if self.qp {
            let disconnected = self.cm.disconnect(self.id);
            let owed = match variant {
                // The error of rdma_disconnect is only logged; the wait always happens.
                Variant::Buggy => true,
                Variant::Fixed => self.state == QpairState::Connected && disconnected.is_ok(),
            };
            if owed {
                match variant {
                    Variant::Buggy => self.wait_for(EventKind::Disconnected)?,
                    Variant::Fixed => self.wait_for_end()?,
                }
            }
            self.cm.destroy_qp(self.id)?;
        }
        self.cm.destroy_id(self.id)?;
        self.cm.destroy_event_channel(self.channel)
    }

    /// The fixed wait: the owed DISCONNECTED, or whatever else ended the connection first (a
    /// REJECTED when the peer never saw it established, DEVICE_REMOVAL).
    fn wait_for_end(&self) -> Result<(), CmError> {
        loop {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            let kind = event.kind();
            self.cm.ack_cm_event(event)?;
            if ends_connection(kind) {
                return Ok(());
            }
        }
    }
}

/// Whether `kind` ends an RC connection (or its attempt) for good.
fn ends_connection(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Disconnected
            | EventKind::Rejected
            | EventKind::Unreachable
            | EventKind::ConnectError
            | EventKind::DeviceRemoval
    )
}

/// The host's life of one qpair: connect to `target`, poll transport events for one second
/// of I/O when connected, then close it as `variant` does. Returns the state the qpair was
/// in when it was closed.
pub fn host<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    variant: Variant,
) -> Result<QpairState, CmError> {
    let mut qpair = Qpair::connect(cm, target)?;
    if qpair.state == QpairState::Connected {
        qpair.process_transport_events(Duration::from_secs(1))?;
    }
    let state = qpair.state;
    qpair.close(variant)?;
    Ok(state)
}
