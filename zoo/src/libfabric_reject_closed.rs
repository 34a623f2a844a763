//! libfabric verbs provider: `fi_reject` through an id already destroyed with its endpoint
//! (<https://github.com/ofiwg/libfabric/commit/de5b92d00eec91338d451e0a55818b3b0a2abaa5>).
//!
//! A CONNECT_REQUEST reaches the application as a connection-request handle holding the
//! request's id. Opening an endpoint on that handle (`fi_endpoint`) moves the id to the
//! endpoint, which destroys it when it is closed (`fi_close`) — but the handle kept its copy of
//! the id. An application that opens the endpoint, then decides against the connection, closes
//! the endpoint and rejects the handle made `fi_reject` call `rdma_reject` on the destroyed id
//! (a use after free in C). The fix clears the handle's id when the endpoint takes it, and
//! `fi_reject` on a handle without an id returns `-FI_EBUSY` without touching the CM (the
//! endpoint's close already ended the request: the CM rejects it when the id is destroyed).
//!
//! On cmtwin, ids are stamped handles: the buggy `rdma_reject` fails with ENOENT naming the
//! stale handle.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

use crate::Variant;

/// A connection-request handle (`struct vrb_connreq`).
pub struct ConnReq {
    id: Option<IdHandle>,
}

/// An endpoint opened on a connection request (`struct vrb_ep`).
pub struct Endpoint {
    id: IdHandle,
    qp: bool,
}

/// What `fi_reject` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectResult {
    /// The request was rejected through its id.
    Rejected,
    /// `-FI_EBUSY`: the handle's id belongs to an endpoint (the fixed logic).
    Busy,
}

/// The passive endpoint: its event channel and listening id.
pub struct PassiveEndpoint<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    listener: IdHandle,
}

impl<'a, B: CmBackend> PassiveEndpoint<'a, B> {
    /// Opens the passive endpoint and listens on `addr`.
    pub fn listen(cm: &'a B, addr: SocketAddr) -> Result<Self, CmError> {
        let channel = cm.create_event_channel()?;
        let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        let pep = PassiveEndpoint {
            cm,
            channel,
            listener,
        };
        cm.bind_addr(listener, addr)?;
        cm.listen(listener, 8)?;
        Ok(pep)
    }

    /// `fi_eq_sread` until the next connection request; `None` once `quiet` passes without
    /// any event.
    pub fn next_connreq(&self, quiet: Duration) -> Result<Option<ConnReq>, CmError> {
        loop {
            let event = match self.cm.get_cm_event(self.channel, Wait::Timeout(quiet)) {
                Ok(event) => event,
                Err(e) if e.errno == Errno::ETIMEDOUT => return Ok(None),
                Err(e) => return Err(e),
            };
            let id = (event.kind() == EventKind::ConnectRequest).then(|| event.id());
            self.cm.ack_cm_event(event)?;
            if let Some(id) = id {
                return Ok(Some(ConnReq { id: Some(id) }));
            }
        }
    }

    /// `fi_endpoint` on a connection request (`vrb_open_ep`): the endpoint owns the id and
    /// creates its QP. The fixed logic clears the handle's id.
    pub fn open_ep(&self, connreq: &mut ConnReq, variant: Variant) -> Result<Endpoint, CmError> {
        let id = connreq
            .id
            .ok_or_else(|| CmError::new(Call::CreateQp, Errno::EINVAL, "the handle has no id"))?;
        if variant == Variant::Fixed {
            connreq.id = None;
        }
        let qp = match self.cm.create_qp(id, &QpInitAttr::new(QpType::Rc)) {
            Ok(_) => true,
            Err(e) if allowed(Call::CreateQp, e.errno) => false,
            Err(e) => return Err(e),
        };
        Ok(Endpoint { id, qp })
    }

    /// `fi_close` of an endpoint: its QP and id are destroyed.
    pub fn close_ep(&self, ep: Endpoint) -> Result<(), CmError> {
        if ep.qp {
            self.cm.destroy_qp(ep.id)?;
        }
        self.cm.destroy_id(ep.id)
    }

    /// `fi_reject` (`vrb_msg_ep_reject`): rejects through the handle's id, if it still has
    /// one, and frees the handle.
    pub fn reject(&self, connreq: ConnReq) -> Result<RejectResult, CmError> {
        let Some(id) = connreq.id else {
            return Ok(RejectResult::Busy);
        };
        match self.cm.reject(id, &[]) {
            Ok(()) => {}
            // The request already ended (timed out, device removed).
            Err(e) if e.call == Call::Reject && matches!(e.errno, Errno::EINVAL | Errno::ENXIO) => {
            }
            Err(e) => return Err(e),
        }
        // The handle's id stays with the request (destroyed here, as libfabric PR 9622 does).
        self.cm.destroy_id(id)?;
        Ok(RejectResult::Rejected)
    }

    /// `fi_close` of the passive endpoint.
    pub fn close(self) -> Result<(), CmError> {
        self.cm.destroy_id(self.listener)?;
        self.cm.destroy_event_channel(self.channel)
    }
}

/// An application that turns every connection down after opening its endpoint: for each
/// request it opens the endpoint, closes it (it cannot serve the connection after all), then
/// rejects the request (`fi_endpoint`, `fi_close`, `fi_reject`), until `quiet` passes without
/// a request. Returns what each `fi_reject` returned.
pub fn refusing_server<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    quiet: Duration,
    variant: Variant,
) -> Result<Vec<RejectResult>, CmError> {
    let pep = PassiveEndpoint::listen(cm, addr)?;
    let mut results = Vec::new();
    while let Some(mut connreq) = pep.next_connreq(quiet)? {
        let ep = pep.open_ep(&mut connreq, variant)?;
        pep.close_ep(ep)?;
        results.push(pep.reject(connreq)?);
    }
    pep.close()?;
    Ok(results)
}
