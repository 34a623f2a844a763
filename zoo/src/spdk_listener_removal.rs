//! SPDK nvmf target: DEVICE_REMOVAL on a listening id handled as if its context were a qpair
//! (<https://github.com/spdk/spdk/issues/1184>).
//!
//! The NVMe-oF target's RDMA transport has one event channel for its listening ids and the
//! ids of its qpairs. A listening id's context is its port (`struct spdk_nvmf_rdma_port`); a
//! qpair id's context is its qpair. The CM event handler treated DEVICE_REMOVAL like
//! DISCONNECTED: it took the id's context for a qpair and started disconnecting it. When the
//! RDMA device under a listener goes away (the issue removed a Soft-RoCE device), the CM
//! delivers DEVICE_REMOVAL on the listening id too, and the handler used the port as a qpair:
//! the target crashed. The fix tells the two apart by whether the event's id has a QP: with
//! one, the qpair is disconnected; without, the port is removed (the handler acknowledges the
//! event itself, then the listening id is destroyed).
//!
//! The port keeps the target's records (ports and qpairs) in one table keyed by the context
//! set on each id; the buggy handler taking a port record for a qpair is reported as
//! [`Caught::ContextOfAnotherType`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

pub use crate::caught::Caught;
use crate::Variant;

/// What a context names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Record {
    /// A listening port and its id.
    Port { id: IdHandle },
    /// A qpair: its id and whether its QP was created.
    Qpair { id: IdHandle, qp: bool },
}

/// How a target's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetEnd {
    /// Qpairs the target accepted.
    pub qpairs: usize,
    /// Whether its listening port was removed with its device.
    pub port_removed: bool,
}

/// The RDMA transport of the target: its channel and the records ids' contexts name.
struct Transport<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    records: BTreeMap<u64, Record>,
    next_context: u64,
    qpairs: usize,
    port_removed: bool,
}

/// Accepts `result` of `call` if it succeeded or failed as the CM may fail it after faults.
fn tolerate<T>(result: Result<T, CmError>, call: Call) -> Result<Option<T>, CmError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.call == call && allowed(call, e.errno) => Ok(None),
        Err(e) => Err(e),
    }
}

impl<B: CmBackend> Transport<'_, B> {
    /// A new record, named by the context set on its id.
    fn insert(&mut self, record: Record) -> u64 {
        let context = self.next_context;
        self.next_context += 1;
        self.records.insert(context, record);
        context
    }

    /// `nvmf_rdma_connect`: a qpair for the request, accepted.
    fn on_request(&mut self, id: IdHandle) -> Result<(), CmError> {
        let qp = tolerate(
            self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc)),
            Call::CreateQp,
        )?
        .is_some();
        let context = self.insert(Record::Qpair { id, qp });
        self.cm.set_context(id, context)?;
        self.qpairs += 1;
        if qp {
            tolerate(self.cm.accept(id, None), Call::Accept)?;
        }
        Ok(())
    }

    /// `nvmf_rdma_disconnect`: the id's context taken for a qpair, which is disconnected
    /// (destroyed: its QP, then its id).
    fn disconnect_qpair(&mut self, kind: EventKind, id: IdHandle) -> Result<(), Caught> {
        let context = self.cm.context(id)?;
        match self.records.get(&context).copied() {
            Some(Record::Qpair { id, qp }) => {
                self.records.remove(&context);
                if qp {
                    self.cm.destroy_qp(id)?;
                }
                self.cm.destroy_id(id)?;
                Ok(())
            }
            Some(Record::Port { .. }) => Err(Caught::ContextOfAnotherType {
                kind,
                context,
                is: "listening port",
                taken_for: "qpair",
            }),
            None => Err(Caught::EventOnFreedRecord { kind, context }),
        }
    }

    /// `nvmf_rdma_handle_cm_event_port_removal`: the port's record and its listening id go.
    /// (A qpair whose QP could not be created has no QP either: its id goes the same way.)
    fn remove_port(&mut self, id: IdHandle) -> Result<(), CmError> {
        let context = self.cm.context(id)?;
        if let Some(Record::Port { .. }) = self.records.remove(&context) {
            self.port_removed = true;
        }
        self.cm.destroy_id(id)
    }

    /// Destroys every qpair and port left, then the channel.
    fn shut_down(self) -> Result<TargetEnd, CmError> {
        for record in self.records.values() {
            match *record {
                Record::Qpair { id, qp } => {
                    if qp {
                        self.cm.destroy_qp(id)?;
                    }
                    self.cm.destroy_id(id)?;
                }
                Record::Port { id } => self.cm.destroy_id(id)?,
            }
        }
        self.cm.destroy_event_channel(self.channel)?;
        Ok(TargetEnd {
            qpairs: self.qpairs,
            port_removed: self.port_removed,
        })
    }
}

/// An NVMe-oF target listening on `addr`: accepts every host, disconnects qpairs as the CM
/// reports their end, and handles the CM's events (`nvmf_process_cm_event`) until `quiet`
/// passes without one, then shuts down.
pub fn target<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    quiet: Duration,
    variant: Variant,
) -> Result<TargetEnd, Caught> {
    let channel = cm.create_event_channel()?;
    let mut transport = Transport {
        cm,
        channel,
        records: BTreeMap::new(),
        next_context: 1,
        qpairs: 0,
        port_removed: false,
    };
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    let context = transport.insert(Record::Port { id: listener });
    cm.set_context(listener, context)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 8)?;
    loop {
        let event = match cm.get_cm_event(channel, Wait::Timeout(quiet)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => break,
            Err(e) => return Err(e.into()),
        };
        let (kind, id) = (event.kind(), event.id());
        match kind {
            EventKind::ConnectRequest => {
                let accepted = transport.on_request(id);
                cm.ack_cm_event(event)?;
                accepted?;
            }
            EventKind::DeviceRemoval if variant == Variant::Fixed && cm.qp_num(id)?.is_none() => {
                // No QP: the event is the listening port's.
                cm.ack_cm_event(event)?;
                transport.remove_port(id)?;
            }
            EventKind::Disconnected
            | EventKind::DeviceRemoval
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::ConnectError => {
                cm.ack_cm_event(event)?;
                transport.disconnect_qpair(kind, id)?;
            }
            _ => cm.ack_cm_event(event)?,
        }
    }
    Ok(transport.shut_down()?)
}
