//! UCX uct rdmacm: a REJECTED on a client that already had its CONNECT_RESPONSE
//! (<https://github.com/openucx/ucx/commit/8083e9951451f7593e64b0d7a00626b0d1de5106>).
//!
//! UCX's rdmacm connection manager uses the CM for the handshake only: the client's id has no
//! QP (the QP number travels in the connection parameters), so librdmacm hands it the
//! CONNECT_RESPONSE; UCX then calls the user's connect callback (the endpoint counts as
//! connected from then on) and the user confirms with `uct_ep_connect_notify`, which calls
//! `rdma_establish` (the RTU). If the server destroys its side after accepting but before the
//! RTU reached it, its CM sends a REJ with reason 28 (consumer defined) and the client gets
//! REJECTED(28) on a connected endpoint.
//!
//! UCX handled REJECTED as a connect error: it marked the endpoint FAILED and, the connect
//! callback having run, called the disconnect callback instead. The UCT contract is that the
//! user answers a disconnect callback with `uct_ep_disconnect` (UCP does so from its main
//! thread, after the callback returns), but `uct_ep_disconnect` on a FAILED endpoint only
//! returns the failure status (REJECTED, with an error message): the endpoint cannot be
//! disconnected. The fix reports the first failure of a connected endpoint as a disconnect
//! event (the endpoint is not FAILED), so the user's `uct_ep_disconnect` goes through.
//!
//! The port keeps UCX's endpoint flags and callbacks; the user's disconnect runs after the
//! event handler returns, as UCP's main thread would run it.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, ConnParam, Errno, EventKind, IdHandle, PortSpace,
    QpInitAttr, QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

use crate::Variant;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the user keeps a connection before it disconnects it, and how long it waits for
/// the disconnect to complete.
const QUIET: Duration = Duration::from_secs(1);
/// The QP number the client announces (the QP it would use, outside the CM).
const ANNOUNCED_QPN: u32 = 0x1234;

/// A `ucs_status_t` the port uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UcsStatus {
    /// `UCS_ERR_REJECTED`.
    Rejected,
    /// `UCS_ERR_CONNECTION_RESET`.
    ConnectionReset,
    /// `UCS_ERR_IO_ERROR`.
    IoError,
    /// `UCS_ERR_NOT_CONNECTED`.
    NotConnected,
    /// `UCS_ERR_BUSY`.
    Busy,
}

/// What went wrong in a run of the client.
#[derive(Debug)]
pub enum UctError {
    /// A CM call failed.
    Cm(CmError),
    /// A UCT call the user made returned an error status.
    Ucs {
        /// The call.
        call: &'static str,
        /// Its status.
        status: UcsStatus,
    },
}

impl fmt::Display for UctError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UctError::Cm(e) => write!(f, "{e}"),
            UctError::Ucs { call, status } => write!(f, "{call} returned {status:?}"),
        }
    }
}

impl std::error::Error for UctError {}

impl From<CmError> for UctError {
    fn from(e: CmError) -> Self {
        UctError::Cm(e)
    }
}

/// How the client's connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientEnd {
    /// Connected, then disconnected after a disconnect callback with this status (`None`: the
    /// user disconnected first).
    Disconnected(Option<UcsStatus>),
    /// The connect callback reported this failure.
    ConnectFailed(UcsStatus),
}

/// The endpoint's flags (`UCT_RDMACM_CM_EP_*`).
#[derive(Clone, Copy, Debug, Default)]
struct Flags {
    conn_cb_invoked: bool,
    failed: bool,
    got_disconnect: bool,
    disconnecting: bool,
}

/// What the user's callbacks recorded for its main thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Callback {
    /// The connect callback, with its status.
    Connect(Result<(), UcsStatus>),
    /// The disconnect callback, with the endpoint's status.
    Disconnect(UcsStatus),
}

/// The client endpoint (`uct_rdmacm_cm_ep_t`).
struct ClientEp<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    id: IdHandle,
    flags: Flags,
    status: Option<UcsStatus>,
    /// Callbacks made, for the user's main thread.
    callbacks: Vec<Callback>,
    variant: Variant,
}

impl<B: CmBackend> ClientEp<'_, B> {
    /// `uct_rdmacm_cm_ep_error_cb`.
    fn error_cb(&mut self, status: UcsStatus) {
        if self.flags.failed {
            return;
        }
        self.status = Some(status);
        if self.flags.conn_cb_invoked {
            self.callbacks.push(Callback::Disconnect(status));
        } else {
            self.callbacks.push(Callback::Connect(Err(status)));
        }
    }

    /// `uct_rdmacm_cm_ep_set_failed`.
    fn set_failed(&mut self, status: UcsStatus) {
        self.error_cb(status);
        self.flags.failed = true;
    }

    /// `uct_rdmacm_cm_handle_event_disconnected`.
    fn on_disconnected(&mut self) {
        self.flags.got_disconnect = true;
        self.error_cb(UcsStatus::ConnectionReset);
    }

    /// `uct_rdmacm_cm_handle_error_event`.
    fn on_error_event(&mut self, kind: EventKind) {
        let status = match kind {
            EventKind::Rejected => UcsStatus::Rejected,
            _ => UcsStatus::IoError,
        };
        let connected = self.flags.conn_cb_invoked && !self.flags.failed;
        if self.variant == Variant::Fixed && connected {
            self.on_disconnected();
        } else {
            self.set_failed(status);
        }
    }

    /// `uct_rdmacm_cm_process_event` for the client's id.
    fn process(&mut self, kind: EventKind) -> Result<(), CmError> {
        match kind {
            EventKind::AddrResolved => {
                if let Err(e) = self.cm.resolve_route(self.id, RESOLVE_TIMEOUT) {
                    self.refused(e, Call::ResolveRoute)?;
                }
            }
            EventKind::RouteResolved => {
                let param = ConnParam {
                    qp_num: ANNOUNCED_QPN,
                    ..ConnParam::default()
                };
                if let Err(e) = self.cm.connect(self.id, Some(&param)) {
                    self.refused(e, Call::Connect)?;
                }
            }
            EventKind::ConnectResponse if !self.flags.got_disconnect => {
                self.flags.conn_cb_invoked = true;
                self.callbacks.push(Callback::Connect(Ok(())));
            }
            EventKind::Disconnected => self.on_disconnected(),
            EventKind::Rejected
            | EventKind::Unreachable
            | EventKind::AddrError
            | EventKind::RouteError
            | EventKind::DeviceRemoval
            | EventKind::AddrChange
            | EventKind::ConnectError => self.on_error_event(kind),
            _ => {}
        }
        Ok(())
    }

    /// A call the CM refused after a fault (the device removed): the endpoint failed.
    fn refused(&mut self, e: CmError, call: Call) -> Result<(), CmError> {
        if allowed(call, e.errno) {
            self.set_failed(UcsStatus::IoError);
            Ok(())
        } else {
            Err(e)
        }
    }

    /// `uct_cm_client_ep_conn_notify`: `rdma_establish`.
    fn conn_notify(&mut self) -> Result<(), CmError> {
        match self.cm.establish(self.id) {
            Ok(()) => Ok(()),
            // The connection already ended (its REJECTED is queued) or the device is gone.
            Err(e) if matches!(e.errno, Errno::EINVAL | Errno::ENXIO) => {
                self.set_failed(UcsStatus::IoError);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// `uct_ep_disconnect`.
    fn disconnect(&mut self) -> Result<(), UctError> {
        let ucs = |status| UctError::Ucs {
            call: "uct_ep_disconnect",
            status,
        };
        if self.flags.failed {
            return Err(ucs(self.status.unwrap_or(UcsStatus::IoError)));
        }
        if self.flags.disconnecting {
            return match self.flags.got_disconnect {
                true => Err(ucs(UcsStatus::NotConnected)),
                false => Ok(()),
            };
        }
        if !self.flags.conn_cb_invoked {
            return Err(ucs(UcsStatus::Busy));
        }
        self.flags.disconnecting = true;
        match self.cm.disconnect(self.id) {
            Ok(()) => Ok(()),
            Err(e) if allowed(Call::Disconnect, e.errno) => Ok(()),
            Err(_) => Err(ucs(UcsStatus::IoError)),
        }
    }
}

/// A UCP-like user of a UCX client endpoint: connects to `server`, confirms the connection
/// when the connect callback reports it, disconnects after a second of use, answers a
/// disconnect callback with `uct_ep_disconnect`, and destroys the endpoint. With the buggy
/// logic, a REJECTED after the CONNECT_RESPONSE makes that `uct_ep_disconnect` fail.
pub fn client<B: CmBackend>(
    cm: &B,
    server: SocketAddr,
    variant: Variant,
) -> Result<ClientEnd, UctError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut ep = ClientEp {
        cm,
        channel,
        id,
        flags: Flags::default(),
        status: None,
        callbacks: Vec::new(),
        variant,
    };
    let ended = run_user(&mut ep, server);
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    ended
}

/// The user's main thread: handles the endpoint's events and then runs what its callbacks
/// asked for, until the connection ended.
fn run_user<B: CmBackend>(
    ep: &mut ClientEp<'_, B>,
    server: SocketAddr,
) -> Result<ClientEnd, UctError> {
    ep.cm.resolve_addr(ep.id, None, server, RESOLVE_TIMEOUT)?;
    let mut disconnected_by_user = false;
    loop {
        match ep.cm.get_cm_event(ep.channel, Wait::Timeout(QUIET)) {
            Ok(event) => {
                let kind = event.kind();
                ep.cm.ack_cm_event(event)?;
                ep.process(kind)?;
            }
            Err(e) if e.errno == Errno::ETIMEDOUT => {
                if !ep.flags.conn_cb_invoked {
                    continue;
                }
                if disconnected_by_user {
                    // The peer never answered: the endpoint is destroyed anyway.
                    return Ok(ClientEnd::Disconnected(None));
                }
                ep.disconnect()?;
                disconnected_by_user = true;
            }
            Err(e) => return Err(e.into()),
        }
        for callback in std::mem::take(&mut ep.callbacks) {
            match callback {
                Callback::Connect(Ok(())) => ep.conn_notify()?,
                Callback::Connect(Err(status)) => return Ok(ClientEnd::ConnectFailed(status)),
                // The user's own disconnect completed.
                Callback::Disconnect(_) if disconnected_by_user => {
                    return Ok(ClientEnd::Disconnected(None))
                }
                Callback::Disconnect(status) => {
                    ep.disconnect()?;
                    return Ok(ClientEnd::Disconnected(Some(status)));
                }
            }
        }
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

/// A server that accepts each connection request and closes its side at once, before the
/// client's RTU can reach it (its CM then rejects the connection, REJ reason 28). Runs until
/// `quiet` passes without an event; returns how many requests it accepted.
pub fn closing_server<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    quiet: Duration,
) -> Result<usize, CmError> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 8)?;
    let mut accepted = 0;
    loop {
        let event = match cm.get_cm_event(channel, Wait::Timeout(quiet)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => break,
            Err(e) => return Err(e),
        };
        let (kind, id) = (event.kind(), event.id());
        cm.ack_cm_event(event)?;
        if kind != EventKind::ConnectRequest {
            continue;
        }
        let qp = tolerate(
            cm.create_qp(id, &QpInitAttr::new(QpType::Rc)),
            Call::CreateQp,
        )?;
        if qp.is_some() {
            if tolerate(cm.accept(id, None), Call::Accept)?.is_some() {
                accepted += 1;
            }
            cm.destroy_qp(id)?;
        }
        cm.destroy_id(id)?;
    }
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(accepted)
}
