//! libevpl rdmacm: a local close recycles the connection's bind while a DISCONNECTED is still
//! owed (<https://github.com/chimera-nas/libevpl/pull/52>).
//!
//! libevpl keeps each connection in a bind, recycled through a free list; the bind's private
//! part holds the RDMA id, whose context leads back to the bind. `evpl_close` marks a bind
//! pending close (aborting if it is already closed) and defers the close to the end of the
//! event loop's iteration, where the protocol's `pending_close` runs and then the core
//! finalizes the bind: marks it CLOSED and returns it to the free list. The rdmacm protocol's
//! `pending_close` called `rdma_disconnect` for a connected id, and destroyed the QP and id
//! otherwise; its DISCONNECTED handler called `evpl_close`.
//!
//! When the peer disconnects, the DISCONNECTED comes first and the close then finds the id no
//! longer connected and destroys it: safe. When the application closes a connected bind
//! itself, `rdma_disconnect` is asynchronous, but the bind is finalized in the same iteration;
//! the DISCONNECTED owed to that disconnect then arrives on the recycled bind, and its
//! handler's `evpl_close` aborts with "bind already closed" (and the id and QP leak). The fix
//! parks a locally closed, connected bind (CLOSE_DEFERRED): the core does not finalize it until
//! its DISCONNECTED clears the flag, and the id and QP are destroyed when it is finalized.
//!
//! The port keeps the binds in a table of slots with a free list; an id's context is its
//! bind's slot (plus one). The abort is a panic, which the simulator reports.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

use crate::Variant;

/// A bind's flags (`EVPL_BIND_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flags {
    pending_closed: bool,
    closed: bool,
    close_deferred: bool,
}

/// One bind: its flags and its rdmacm private part.
#[derive(Debug, Default)]
struct Bind {
    flags: Flags,
    id: Option<IdHandle>,
    qp: bool,
    connected: bool,
}

/// The event loop (`struct evpl`) of a server with its rdmacm listener.
struct Evpl<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    listener: IdHandle,
    binds: Vec<Bind>,
    free: Vec<usize>,
    /// Binds `evpl_close` deferred, whose close has not run yet.
    deferred: Vec<usize>,
    /// `pending_close_binds`.
    pending_close: Vec<usize>,
    /// Ids forgotten by finalized binds (released when the process exits).
    leaked: Vec<(IdHandle, bool)>,
    /// How many binds were finalized.
    finalized: usize,
    variant: Variant,
}

/// Accepts `result` of `call` if it succeeded or failed as the CM may fail it after faults.
fn tolerate<T>(result: Result<T, CmError>, call: Call) -> Result<Option<T>, CmError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.call == call && allowed(call, e.errno) => Ok(None),
        Err(e) => Err(e),
    }
}

impl<B: CmBackend> Evpl<'_, B> {
    /// `evpl_bind_prepare`: a bind from the free list (or a new one), flags cleared.
    fn prepare_bind(&mut self, id: IdHandle) -> usize {
        let bind = Bind {
            id: Some(id),
            ..Bind::default()
        };
        match self.free.pop() {
            Some(slot) => {
                self.binds[slot] = bind;
                slot
            }
            None => {
                self.binds.push(bind);
                self.binds.len() - 1
            }
        }
    }

    /// `evpl_close`.
    fn close(&mut self, slot: usize) {
        let bind = &mut self.binds[slot];
        assert!(!bind.flags.closed, "bind {slot} already closed");
        if !bind.flags.pending_closed {
            bind.flags.pending_closed = true;
            self.deferred.push(slot);
        }
    }

    /// A connection request: a new bind, named by the id's context, accepted.
    fn on_request(&mut self, id: IdHandle) -> Result<(), CmError> {
        let slot = self.prepare_bind(id);
        self.cm.set_context(id, slot as u64 + 1)?;
        let qp = tolerate(
            self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc)),
            Call::CreateQp,
        )?;
        self.binds[slot].qp = qp.is_some();
        if qp.is_some() {
            tolerate(self.cm.accept(id, None), Call::Accept)?;
        }
        Ok(())
    }

    /// `evpl_rdmacm_event_callback` for an event of a connection's id.
    fn on_connection_event(&mut self, kind: EventKind, id: IdHandle) -> Result<(), CmError> {
        let context = self.cm.context(id)?;
        let Some(slot) = context.checked_sub(1).and_then(|s| usize::try_from(s).ok()) else {
            return Ok(());
        };
        match kind {
            EventKind::Established => {
                self.binds[slot].connected = true;
                // The server's application answers and closes the connection.
                self.close(slot);
            }
            EventKind::Disconnected => {
                self.binds[slot].connected = false;
                let flags = &mut self.binds[slot].flags;
                if self.variant == Variant::Fixed && flags.close_deferred {
                    flags.close_deferred = false;
                } else {
                    self.close(slot);
                }
            }
            EventKind::Rejected => self.close(slot),
            _ => {}
        }
        Ok(())
    }

    /// The end of the loop's iteration: the deferred closes run (`pending_close`), then every
    /// pending bind not parked is closed and finalized.
    fn run_closes(&mut self) -> Result<(), CmError> {
        for slot in std::mem::take(&mut self.deferred) {
            self.pending_close(slot)?;
            self.pending_close.push(slot);
        }
        let mut parked = Vec::new();
        for slot in std::mem::take(&mut self.pending_close) {
            if self.binds[slot].flags.close_deferred {
                parked.push(slot);
                continue;
            }
            self.protocol_close(slot)?;
            self.binds[slot].flags.closed = true;
            self.free.push(slot);
            self.finalized += 1;
        }
        self.pending_close = parked;
        Ok(())
    }

    /// `evpl_rdmacm_pending_close`.
    fn pending_close(&mut self, slot: usize) -> Result<(), CmError> {
        let bind = &mut self.binds[slot];
        let Some(id) = bind.id else {
            return Ok(());
        };
        match (self.variant, bind.connected) {
            (Variant::Buggy, true) => {
                tolerate(self.cm.disconnect(id), Call::Disconnect)?;
            }
            (Variant::Buggy, false) => self.destroy_qp(slot)?,
            (Variant::Fixed, true) => {
                bind.flags.close_deferred = true;
                tolerate(self.cm.disconnect(id), Call::Disconnect)?;
            }
            (Variant::Fixed, false) => {}
        }
        Ok(())
    }

    /// `evpl_rdmacm_close`: the fixed logic destroys the QP and id here; the buggy one leaves a
    /// connected id behind.
    fn protocol_close(&mut self, slot: usize) -> Result<(), CmError> {
        match self.variant {
            Variant::Fixed => self.destroy_qp(slot),
            Variant::Buggy => {
                if let Some(id) = self.binds[slot].id.take() {
                    self.leaked.push((id, self.binds[slot].qp));
                }
                Ok(())
            }
        }
    }

    /// `evpl_rdmacm_destroy_qp`: the QP and the id.
    fn destroy_qp(&mut self, slot: usize) -> Result<(), CmError> {
        let bind = &mut self.binds[slot];
        if let Some(id) = bind.id.take() {
            if bind.qp {
                self.cm.destroy_qp(id)?;
            }
            self.cm.destroy_id(id)?;
        }
        Ok(())
    }

    /// The process exits: every id still held or leaked, the listener and the channel.
    fn shut_down(mut self) -> Result<(), CmError> {
        for slot in 0..self.binds.len() {
            self.destroy_qp(slot)?;
        }
        for (id, qp) in std::mem::take(&mut self.leaked) {
            if qp {
                self.cm.destroy_qp(id)?;
            }
            self.cm.destroy_id(id)?;
        }
        self.cm.destroy_id(self.listener)?;
        self.cm.destroy_event_channel(self.channel)
    }
}

/// A libevpl server: listens on `addr`, accepts every connection and closes each as soon as
/// it is established; runs its event loop until `quiet` passes without an event, then exits.
/// Returns how many binds it finalized. With the buggy logic, the DISCONNECTED owed to a
/// local close aborts the loop (a panic).
pub fn server<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    quiet: Duration,
    variant: Variant,
) -> Result<usize, CmError> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let mut evpl = Evpl {
        cm,
        channel,
        listener,
        binds: Vec::new(),
        free: Vec::new(),
        deferred: Vec::new(),
        pending_close: Vec::new(),
        leaked: Vec::new(),
        finalized: 0,
        variant,
    };
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 8)?;
    loop {
        let event = match cm.get_cm_event(channel, Wait::Timeout(quiet)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => break,
            Err(e) => return Err(e),
        };
        let (kind, id) = (event.kind(), event.id());
        let handled = match kind {
            EventKind::ConnectRequest => evpl.on_request(id),
            _ if id == listener => Ok(()),
            _ => evpl.on_connection_event(kind, id),
        };
        cm.ack_cm_event(event)?;
        handled?;
        evpl.run_closes()?;
    }
    let finalized = evpl.finalized;
    evpl.shut_down()?;
    Ok(finalized)
}
