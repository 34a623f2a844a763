//! perftest: error events never acknowledged on the error path
//! (<https://github.com/linux-rdma/perftest/pull/60>).
//!
//! perftest's rdma_cm client fetches each event, hands it to its dispatcher and acknowledges it
//! afterwards. When the dispatcher fails on an error event (REJECTED, UNREACHABLE,
//! ADDR/ROUTE/CONNECT_ERROR), the loop jumps to its error exit and leaves the event
//! unacknowledged; the cleanup then calls `rdma_destroy_id`, which in librdmacm waits for
//! every fetched event of the id to be acknowledged: it blocks forever. The fix acknowledges
//! the event before leaving the loop.
//!
//! The port keeps the failed event in the context, as the C code keeps the pointer (a
//! [`CmEvent`] dropped unacknowledged is acknowledged at its drop, which would hide the bug).
//! On cmtwin, `destroy_id` does not block: it fails with EBUSY naming the unacknowledged event.
//! DEVICE_REMOVAL is treated as an error event too, so the client never waits on an id the
//! device took away.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, CmEvent, Errno, EventKind, IdHandle, PortSpace,
    QpInitAttr, QpType, Wait,
};

use crate::Variant;

/// Address and route resolution timeout (perftest uses 2 s).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a perftest connection ended, when the cleanup succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Connected, then disconnected.
    Established,
    /// The dispatcher failed on this event.
    Failed(EventKind),
}

/// The client's context (`struct pingpong_context`, its CM part).
struct Context<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    id: IdHandle,
    qp: bool,
    connected: bool,
    /// The event the error path left unacknowledged (the C code's dangling `event`).
    unacked: Option<CmEvent>,
}

impl<B: CmBackend> Context<'_, B> {
    /// `rdma_cm_events_dispatcher`: one event; `Err` names an error event.
    fn dispatch(&mut self, event: &CmEvent) -> Result<Result<(), EventKind>, CmError> {
        match event.kind() {
            EventKind::AddrResolved => self.cm.resolve_route(self.id, RESOLVE_TIMEOUT)?,
            EventKind::RouteResolved => {
                self.cm.create_qp(self.id, &QpInitAttr::new(QpType::Rc))?;
                self.qp = true;
                self.cm.connect(self.id, None)?;
            }
            EventKind::Established => self.connected = true,
            kind @ (EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::DeviceRemoval) => return Ok(Err(kind)),
            _ => {}
        }
        Ok(Ok(()))
    }

    /// `rdma_cm_connect_events`: events until connected or an error event.
    fn connect_events(&mut self, variant: Variant) -> Result<Result<(), EventKind>, CmError> {
        loop {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            if let Err(kind) = self.dispatch(&event)? {
                match variant {
                    // goto error: the event is never acknowledged.
                    Variant::Buggy => self.unacked = Some(event),
                    Variant::Fixed => self.cm.ack_cm_event(event)?,
                }
                return Ok(Err(kind));
            }
            self.cm.ack_cm_event(event)?;
            if self.connected {
                return Ok(Ok(()));
            }
        }
    }

    /// The end of a connected run: disconnect and wait for the event that ends the id's
    /// connection: DISCONNECTED, or REJECTED / UNREACHABLE / CONNECT_ERROR when the peer never
    /// saw it established (a lost RTU), or DEVICE_REMOVAL.
    fn close_connection(&mut self) -> Result<(), CmError> {
        match self.cm.disconnect(self.id) {
            Ok(()) => {}
            // The connection already ended: its DISCONNECTED (or DEVICE_REMOVAL) is queued.
            Err(e) if matches!(e.errno, Errno::EINVAL | Errno::ENXIO) => {}
            Err(e) => return Err(e),
        }
        loop {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            let kind = event.kind();
            self.cm.ack_cm_event(event)?;
            if matches!(
                kind,
                EventKind::Disconnected
                    | EventKind::Rejected
                    | EventKind::Unreachable
                    | EventKind::ConnectError
                    | EventKind::DeviceRemoval
            ) {
                return Ok(());
            }
        }
    }

    /// `destroy_ctx`: the QP, the id and the channel.
    fn destroy(&mut self) -> Result<(), CmError> {
        if self.qp {
            self.cm.destroy_qp(self.id)?;
        }
        self.cm.destroy_id(self.id)?;
        self.cm.destroy_event_channel(self.channel)
    }
}

/// perftest's rdma_cm client: connects to `server`, disconnects when connected, and cleans up.
/// With the buggy logic, an error event leaves the cleanup's `destroy_id` failing with EBUSY.
pub fn client<B: CmBackend>(
    cm: &B,
    server: SocketAddr,
    variant: Variant,
) -> Result<Connection, CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut ctx = Context {
        cm,
        channel,
        id,
        qp: false,
        connected: false,
        unacked: None,
    };
    let resolved = cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT);
    let ended = match resolved.and_then(|()| ctx.connect_events(variant)) {
        Ok(Ok(())) => ctx.close_connection().map(|()| Connection::Established),
        Ok(Err(kind)) => Ok(Connection::Failed(kind)),
        // A call the CM refused after a fault took the device: still clean up.
        Err(e) if e.errno == Errno::ENXIO && e.call != Call::GetCmEvent => {
            Ok(Connection::Failed(EventKind::DeviceRemoval))
        }
        Err(e) => Err(e),
    };
    let destroyed = ctx.destroy();
    let connection = ended?;
    destroyed.map(|()| connection)
}
