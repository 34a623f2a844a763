//! libfabric verbs provider: an assertion that the endpoint is not DISCONNECTED fails when an
//! error event follows its DISCONNECTED
//! (<https://github.com/ofiwg/libfabric/issues/12362>, fixed by
//! <https://github.com/ofiwg/libfabric/pull/12378>).
//!
//! The verbs provider turns each CM event of an endpoint into an event-queue entry and keeps
//! the endpoint's state beside it. DISCONNECTED moves a connected endpoint to DISCONNECTED and
//! reports `FI_SHUTDOWN` (once: a second one is skipped). The error events (ADDR_ERROR,
//! ROUTE_ERROR, CONNECT_ERROR, UNREACHABLE, REJECTED) asserted that the endpoint was not
//! DISCONNECTED yet, then moved it there and reported an error entry. Since Linux 6.0 the CM
//! reports UNREACHABLE on a RoCE id whenever the neighbour its route leads to changes its MAC
//! (`cma_netevent_callback`), whatever the id's state: an endpoint that already saw its
//! DISCONNECTED and is kept open a while (the application drains it before closing) gets an
//! UNREACHABLE and the assertion fails. The fix skips the error event when the endpoint is
//! already DISCONNECTED, as the DISCONNECTED case does.
//!
//! The port keeps the assertion as an `assert!`: the simulator reports the process's panic.
//! DEVICE_REMOVAL and ADDR_CHANGE become error entries without a change of state, as
//! upstream.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

use crate::Variant;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the application waits on its event queue before it acts on the quiet: it
/// disconnects a connection it has used this long, and closes an endpoint it has drained
/// this long (or whose disconnect got no answer).
const QUIET: Duration = Duration::from_secs(1);

/// The endpoint's state (`enum vrb_ep_state`, the part the CM drives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpState {
    /// Resolving the address and the route, then connecting.
    Connecting,
    /// ESTABLISHED seen.
    Connected,
    /// Shut down: DISCONNECTED seen, or the connection failed.
    Disconnected,
}

/// An entry of the endpoint's event queue, as the application reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EqEntry {
    /// `FI_CONNECTED`.
    Connected,
    /// `FI_SHUTDOWN`.
    Shutdown,
    /// An error entry made from this CM event.
    Error(EventKind),
}

/// The active endpoint: its channel (the event queue's), id and state.
struct Endpoint<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    id: IdHandle,
    qp: bool,
    state: EpState,
}

impl<B: CmBackend> Endpoint<'_, B> {
    /// `vrb_eq_cm_process_event` for one CM event; `None` when it makes no entry.
    fn process(&mut self, kind: EventKind, variant: Variant) -> Result<Option<EqEntry>, CmError> {
        match kind {
            EventKind::AddrResolved => tolerate(
                self.cm.resolve_route(self.id, RESOLVE_TIMEOUT),
                Call::ResolveRoute,
            )
            .map(|_| None),
            EventKind::RouteResolved => {
                let qp = tolerate(
                    self.cm.create_qp(self.id, &QpInitAttr::new(QpType::Rc)),
                    Call::CreateQp,
                )?;
                self.qp = qp.is_some();
                if self.qp {
                    tolerate(self.cm.connect(self.id, None), Call::Connect)?;
                }
                Ok(None)
            }
            EventKind::Established => {
                self.state = EpState::Connected;
                Ok(Some(EqEntry::Connected))
            }
            EventKind::Disconnected if self.state == EpState::Disconnected => Ok(None),
            EventKind::Disconnected => {
                self.state = EpState::Disconnected;
                Ok(Some(EqEntry::Shutdown))
            }
            EventKind::AddrError
            | EventKind::RouteError
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected => {
                match variant {
                    Variant::Buggy => assert!(
                        self.state != EpState::Disconnected,
                        "ep->state != VRB_DISCONNECTED on {kind:?}"
                    ),
                    Variant::Fixed if self.state == EpState::Disconnected => return Ok(None),
                    Variant::Fixed => {}
                }
                self.state = EpState::Disconnected;
                Ok(Some(EqEntry::Error(kind)))
            }
            EventKind::DeviceRemoval | EventKind::AddrChange => Ok(Some(EqEntry::Error(kind))),
            _ => Ok(None),
        }
    }

    /// `fi_shutdown`: disconnects (the DISCONNECTED then reports `FI_SHUTDOWN`).
    fn shutdown(&self) -> Result<(), CmError> {
        tolerate(self.cm.disconnect(self.id), Call::Disconnect).map(|_| ())
    }

    /// `fi_close`: the QP, the id and the channel.
    fn close(self) -> Result<(), CmError> {
        if self.qp {
            self.cm.destroy_qp(self.id)?;
        }
        self.cm.destroy_id(self.id)?;
        self.cm.destroy_event_channel(self.channel)
    }
}

/// Accepts `result` of `call` if it succeeded or failed as the CM may fail it after faults.
fn tolerate<T>(result: Result<T, CmError>, call: Call) -> Result<Option<T>, CmError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.call == call && allowed(call, e.errno) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the application is doing with its endpoint.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for `FI_CONNECTED` (or an error).
    Connecting,
    /// Using the connection.
    Working,
    /// `fi_shutdown` called, waiting for `FI_SHUTDOWN`.
    ShuttingDown,
    /// Shut down or failed: draining the endpoint before closing it.
    Draining,
}

/// A libfabric application's active side: `fi_connect` to `server`, uses the connection for a
/// while, `fi_shutdown`, drains the endpoint until its event queue is quiet, then `fi_close`.
/// Returns the event-queue entries it read. With the buggy provider logic, an error event
/// after the DISCONNECTED panics on the provider's assertion.
pub fn client<B: CmBackend>(
    cm: &B,
    server: SocketAddr,
    variant: Variant,
) -> Result<Vec<EqEntry>, CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut ep = Endpoint {
        cm,
        channel,
        id,
        qp: false,
        state: EpState::Connecting,
    };
    let mut entries = Vec::new();
    let mut phase = Phase::Connecting;
    cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT)?;
    loop {
        let event = match cm.get_cm_event(channel, Wait::Timeout(QUIET)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => match phase {
                Phase::Connecting => continue,
                Phase::Working => {
                    ep.shutdown()?;
                    phase = Phase::ShuttingDown;
                    continue;
                }
                Phase::ShuttingDown | Phase::Draining => break,
            },
            Err(e) => return Err(e),
        };
        let kind = event.kind();
        cm.ack_cm_event(event)?;
        let Some(entry) = ep.process(kind, variant)? else {
            continue;
        };
        entries.push(entry);
        phase = match (entry, phase) {
            (EqEntry::Connected, Phase::Connecting) => Phase::Working,
            (EqEntry::Connected, p) => p,
            (EqEntry::Shutdown | EqEntry::Error(_), _) => Phase::Draining,
        };
    }
    ep.close()?;
    Ok(entries)
}
