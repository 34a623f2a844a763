//! SPDK nvme_rdma: a qpair freed right after `rdma_disconnect`, before its DISCONNECTED
//! (<https://github.com/spdk/spdk/issues/2515>).
//!
//! SPDK's NVMe-oF host gives all qpairs of a controller one event channel. Its event poll
//! fetches every event on that channel, finds the qpair an event belongs to through the id's
//! context (`event->id->context`), and parks the event in that qpair's slot, or in the
//! controller's pending list when the slot is busy. Deleting an I/O qpair called
//! `rdma_disconnect` and freed the qpair without waiting for the DISCONNECTED the disconnect
//! makes the CM deliver; the next poll (for the admin qpair) fetched that event and followed
//! its context into freed memory (an assertion on the qpair's transport type fired in the
//! issue).
//!
//! The port keeps the controller's qpair records in a table keyed by the context given to
//! `create_id`; freeing a record removes it, so an event whose context names no record is the
//! use after free, reported as [`Caught::EventOnFreedRecord`]. The buggy delete frees the record
//! right after `rdma_disconnect` and leaves the id to the controller's teardown; the fixed one
//! waits for the event that ends the qpair's connection, then destroys the id and frees the
//! record.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmEvent, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Wait,
};

pub use crate::caught::Caught;
use crate::Variant;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// The admin qpair's context.
const ADMIN: u64 = 1;
/// The I/O qpair's context.
const IO: u64 = 2;

/// One qpair's record: its id and the event parked for it.
struct QpairRecord {
    id: IdHandle,
    qp: bool,
    connected: bool,
    /// The qpair's event slot (`rqpair->evt`): fetched, not yet processed.
    evt: Option<CmEvent>,
}

/// The controller: one channel for all its qpairs, and the table of qpair records.
struct Ctrlr<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    records: BTreeMap<u64, QpairRecord>,
    /// Events fetched while their qpair's slot was busy (`pending_cm_events`).
    pending: Vec<CmEvent>,
    /// Ids whose records were freed, destroyed with the controller.
    orphans: Vec<IdHandle>,
}

impl<B: CmBackend> Ctrlr<'_, B> {
    /// The event poll (`nvme_rdma_poll_events`): parks pending events in free slots, then
    /// fetches the channel's next event (waiting as `wait` says) and parks it by its id's
    /// context. Returns whether an event was fetched (false: the wait timed out).
    fn poll_events(&mut self, wait: Wait) -> Result<bool, Caught> {
        let mut still = Vec::new();
        for event in std::mem::take(&mut self.pending) {
            let context = self.cm.context(event.id())?;
            match self.records.get_mut(&context) {
                Some(r) if r.evt.is_none() => r.evt = Some(event),
                Some(_) => still.push(event),
                None => return Err(freed(&event, context)),
            }
        }
        self.pending = still;
        let event = match self.cm.get_cm_event(self.channel, wait) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let context = self.cm.context(event.id())?;
        match self.records.get_mut(&context) {
            Some(r) if r.evt.is_none() => r.evt = Some(event),
            Some(_) => self.pending.push(event),
            None => return Err(freed(&event, context)),
        }
        Ok(true)
    }

    /// Takes the event parked for `context`, polling until there is one.
    fn next_event(&mut self, context: u64) -> Result<CmEvent, Caught> {
        loop {
            if let Some(event) = self.record(context).evt.take() {
                return Ok(event);
            }
            self.poll_events(Wait::Block)?;
        }
    }

    /// Creates the qpair `context` and connects it to `target`, until ESTABLISHED or an event
    /// that ends the attempt. Returns whether it connected.
    fn connect_qpair(&mut self, context: u64, target: SocketAddr) -> Result<bool, Caught> {
        let cm = self.cm;
        let id = cm.create_id(Some(self.channel), context, PortSpace::TCP)?;
        self.records.insert(
            context,
            QpairRecord {
                id,
                qp: false,
                connected: false,
                evt: None,
            },
        );
        cm.resolve_addr(id, None, target, RESOLVE_TIMEOUT)?;
        loop {
            let event = self.next_event(context)?;
            let kind = event.kind();
            cm.ack_cm_event(event)?;
            // A call refused because the device went away (its DEVICE_REMOVAL is queued)
            // ends the attempt as the event would.
            let step = match kind {
                EventKind::AddrResolved => cm.resolve_route(id, RESOLVE_TIMEOUT),
                EventKind::RouteResolved => cm
                    .create_qp(id, &QpInitAttr::new(QpType::Rc))
                    .and_then(|_| {
                        self.record(context).qp = true;
                        cm.connect(id, None)
                    }),
                _ => Ok(()),
            };
            if let Err(e) = step {
                crate::connector::gone(e)?;
                return Ok(false);
            }
            match kind {
                EventKind::Established => {
                    self.record(context).connected = true;
                    return Ok(true);
                }
                k if ends_attempt(k) => return Ok(false),
                _ => {}
            }
        }
    }

    fn record(&mut self, context: u64) -> &mut QpairRecord {
        self.records
            .get_mut(&context)
            .expect("the record of a qpair being connected")
    }

    /// Processes the qpair's events for `period` (its keep-alive); returns whether the
    /// connection is still up.
    fn keep_alive(&mut self, context: u64, period: Duration) -> Result<bool, Caught> {
        let until = self.cm.now() + period;
        while self.record(context).connected {
            if let Some(event) = self.record(context).evt.take() {
                let kind = event.kind();
                self.cm.ack_cm_event(event)?;
                if ends_attempt(kind) {
                    self.record(context).connected = false;
                }
                continue;
            }
            let left = until.saturating_sub(self.cm.now());
            if left.is_zero() || !self.poll_events(Wait::Timeout(left))? {
                break;
            }
        }
        Ok(self.record(context).connected)
    }

    /// Deletes the qpair `context` as `variant` does.
    fn delete_qpair(&mut self, context: u64, variant: Variant) -> Result<(), Caught> {
        let (id, connected) = (self.record(context).id, self.record(context).connected);
        let disconnected = self.cm.disconnect(id);
        match variant {
            Variant::Buggy => {
                // Freed right away; the id (and its coming DISCONNECTED) outlives the record.
                let record = self.records.remove(&context).expect("a live record");
                drop(record.evt);
                self.orphans.push(id);
                Ok(())
            }
            Variant::Fixed => {
                if connected && disconnected.is_ok() {
                    loop {
                        let event = self.next_event(context)?;
                        let kind = event.kind();
                        self.cm.ack_cm_event(event)?;
                        if ends_attempt(kind) {
                            break;
                        }
                    }
                }
                self.destroy_qpair(context)
            }
        }
    }

    /// Acknowledges the events parked for `context`, destroys its QP and id, frees its record.
    fn destroy_qpair(&mut self, context: u64) -> Result<(), Caught> {
        let record = self.records.remove(&context).expect("a live record");
        if let Some(event) = record.evt {
            self.cm.ack_cm_event(event)?;
        }
        let (mine, others): (Vec<CmEvent>, Vec<CmEvent>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.id() == record.id);
        self.pending = others;
        for event in mine {
            self.cm.ack_cm_event(event)?;
        }
        if record.qp {
            self.cm.destroy_qp(record.id)?;
        }
        self.cm.destroy_id(record.id)?;
        Ok(())
    }
}

/// The error for `event` whose context names no record.
fn freed(event: &CmEvent, context: u64) -> Caught {
    Caught::EventOnFreedRecord {
        kind: event.kind(),
        context,
    }
}

/// Whether `kind` ends an RC connection (or its attempt) for good.
fn ends_attempt(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::AddrError
            | EventKind::RouteError
            | EventKind::Disconnected
            | EventKind::Rejected
            | EventKind::Unreachable
            | EventKind::ConnectError
            | EventKind::DeviceRemoval
    )
}

/// A host's controller: connects the admin and one I/O qpair to `target`, deletes the I/O
/// qpair as `variant` does, keeps the admin qpair alive for one second, then tears down.
/// Returns whether the I/O qpair had connected.
pub fn controller<B: CmBackend>(
    cm: &B,
    target: SocketAddr,
    variant: Variant,
) -> Result<bool, Caught> {
    let channel = cm.create_event_channel()?;
    let mut ctrlr = Ctrlr {
        cm,
        channel,
        records: BTreeMap::new(),
        pending: Vec::new(),
        orphans: Vec::new(),
    };
    let admin_up = ctrlr.connect_qpair(ADMIN, target)?;
    let io_up = admin_up && ctrlr.connect_qpair(IO, target)?;
    if ctrlr.records.contains_key(&IO) {
        ctrlr.delete_qpair(IO, variant)?;
    }
    if admin_up && ctrlr.keep_alive(ADMIN, Duration::from_secs(1))? {
        ctrlr.delete_qpair(ADMIN, Variant::Fixed)?;
    } else {
        ctrlr.destroy_qpair(ADMIN)?;
    }
    for id in std::mem::take(&mut ctrlr.orphans) {
        cm.destroy_id(id)?;
    }
    cm.destroy_event_channel(channel)?;
    Ok(io_up)
}
