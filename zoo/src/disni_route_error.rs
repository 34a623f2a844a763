//! DiSNI: ROUTE_ERROR is not handled, so `RdmaEndpoint.connect` blocks forever
//! (<https://github.com/zrlio/disni/issues/41>).
//!
//! DiSNI's endpoint keeps a connection state that only moves forward (initialized, address
//! resolved, route resolved, resources allocated, connected, closed). `connect` starts each
//! step and waits on the endpoint's monitor until the state reaches the step's goal, then
//! throws if it landed elsewhere. The CM events are dispatched (`dispatchCmEvent`) by the
//! group's CM thread: ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED and DISCONNECTED set the state
//! and notify the waiters; every other event is only logged. On InfiniBand, a failing SA path
//! query ends the route resolution in ROUTE_ERROR: nothing changes the state or wakes the
//! waiter, and `connect` blocks forever (the issue saw it when clients connected at a high
//! rate). The fix asked for in the issue and proposed in zrlio/disni PR 42 is to handle the
//! error events: they end the endpoint's connection state and notify the waiters, so that
//! `connect` throws.
//!
//! The port runs the CM thread's dispatch inline: waiting on the monitor is fetching and
//! dispatching the next event until the state reaches the goal. The simulator reports the
//! endless wait as a deadlock naming the channel it blocks on. The fixed logic ends the state
//! on ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, UNREACHABLE, REJECTED and DEVICE_REMOVAL.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

use crate::Variant;

/// The resolution timeout `connect` is given (milliseconds in DiSNI).
const TIMEOUT: Duration = Duration::from_secs(2);

/// DiSNI's connection states (`CONN_STATE_*`), in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConnState {
    /// Created.
    Initialized,
    /// ADDR_RESOLVED seen.
    AddrResolved,
    /// ROUTE_RESOLVED seen.
    RouteResolved,
    /// QP and buffers allocated.
    ResourcesAllocated,
    /// ESTABLISHED seen.
    Connected,
    /// DISCONNECTED seen (or, with the fixed logic, an error event).
    Closed,
}

/// How a `connect` ended, when it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectEnd {
    /// Connected, then closed by the client.
    Connected,
    /// `connect` threw this `IOException` message.
    Failed(&'static str),
}

/// The active endpoint: its channel (the group's CM channel), id, QP and state.
struct Endpoint<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    id: IdHandle,
    qp: bool,
    state: ConnState,
    variant: Variant,
}

impl<B: CmBackend> Endpoint<'_, B> {
    /// `dispatchCmEvent`.
    fn dispatch(&mut self, kind: EventKind) {
        match kind {
            EventKind::AddrResolved => self.state = ConnState::AddrResolved,
            EventKind::RouteResolved => self.state = ConnState::RouteResolved,
            EventKind::Established => self.state = ConnState::Connected,
            EventKind::Disconnected => self.state = ConnState::Closed,
            EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::DeviceRemoval
                if self.variant == Variant::Fixed =>
            {
                self.state = ConnState::Closed
            }
            // Logged as an unknown event; nobody is notified.
            _ => {}
        }
    }

    /// `while (connState < goal) wait();`: the CM thread's dispatching, inline.
    fn wait_for(&mut self, goal: ConnState) -> Result<(), CmError> {
        while self.state < goal {
            let event = self.cm.get_cm_event(self.channel, Wait::Block)?;
            let kind = event.kind();
            self.cm.ack_cm_event(event)?;
            self.dispatch(kind);
        }
        Ok(())
    }

    /// `RdmaEndpoint.connect`: each step, its wait, and the check that throws.
    fn connect(&mut self, dst: SocketAddr) -> Result<Option<&'static str>, CmError> {
        self.cm.resolve_addr(self.id, None, dst, TIMEOUT)?;
        self.wait_for(ConnState::AddrResolved)?;
        if self.state != ConnState::AddrResolved {
            return Ok(Some("resolve address failed"));
        }
        if !self.step(self.cm.resolve_route(self.id, TIMEOUT), Call::ResolveRoute)? {
            return Ok(Some("resolve route failed"));
        }
        self.wait_for(ConnState::RouteResolved)?;
        if self.state != ConnState::RouteResolved {
            return Ok(Some("resolve route failed"));
        }
        // `allocateResourcesRaw`: the QP.
        let qp = self.cm.create_qp(self.id, &QpInitAttr::new(QpType::Rc));
        if !self.step(qp.map(|_| ()), Call::CreateQp)? {
            return Ok(Some("resources allocation failed"));
        }
        self.qp = true;
        self.state = ConnState::ResourcesAllocated;
        if !self.step(self.cm.connect(self.id, None), Call::Connect)? {
            return Ok(Some("connect failed"));
        }
        self.wait_for(ConnState::Connected)?;
        if self.state != ConnState::Connected {
            return Ok(Some("connect failed"));
        }
        Ok(None)
    }

    /// Whether a call went through; a call the CM refused after a fault (the device removed)
    /// is false, any other error is returned.
    fn step(&self, result: Result<(), CmError>, call: Call) -> Result<bool, CmError> {
        match result {
            Ok(()) => Ok(true),
            Err(e) if e.call == call && allowed(call, e.errno) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `RdmaEndpoint.close`: disconnects a connected endpoint and waits until it is closed,
    /// then frees the QP and the id.
    fn close(&mut self) -> Result<(), CmError> {
        if self.state == ConnState::Connected {
            match self.cm.disconnect(self.id) {
                Err(e) if !allowed(Call::Disconnect, e.errno) => return Err(e),
                _ => {}
            }
            self.wait_for(ConnState::Closed)?;
        }
        if self.qp {
            self.cm.destroy_qp(self.id)?;
        }
        self.cm.destroy_id(self.id)
    }
}

/// A DiSNI client: creates an endpoint, connects it to `server`, and closes it (at once if
/// connected, or after `connect` threw). With the buggy dispatch, a ROUTE_ERROR leaves
/// `connect` waiting forever.
pub fn client<B: CmBackend>(
    cm: &B,
    server: SocketAddr,
    variant: Variant,
) -> Result<ConnectEnd, CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut ep = Endpoint {
        cm,
        channel,
        id,
        qp: false,
        state: ConnState::Initialized,
        variant,
    };
    let thrown = match ep.connect(server) {
        Ok(thrown) => thrown,
        // A device removed under the endpoint refuses the calls with ENXIO.
        Err(e) if e.errno == Errno::ENXIO && e.call != Call::GetCmEvent => Some("device removed"),
        Err(e) => return Err(e),
    };
    ep.close()?;
    cm.destroy_event_channel(channel)?;
    Ok(match thrown {
        None => ConnectEnd::Connected,
        Some(message) => ConnectEnd::Failed(message),
    })
}
