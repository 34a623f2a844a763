//! libfabric verbs provider: one id leaked per rejected connection request
//! (<https://github.com/ofiwg/libfabric/pull/9622>).
//!
//! libfabric's verbs passive endpoint turns each CONNECT_REQUEST into a connection-request
//! handle carrying the request's new id and hands it to the application, which accepts it (the
//! id then lives with the endpoint it opens) or rejects it. The reject path called
//! `rdma_reject` on the handle's id and freed the handle, but never destroyed the id: each
//! rejected request leaked one id (visible as a growing `cm_id` count in `rdma res`). The fix
//! destroys the id right after the reject.
//!
//! On cmtwin the leak is caught when the passive endpoint closes: destroying its channel fails
//! with EBUSY naming every id still on it, one per rejected request.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, Wait};

use crate::Variant;

/// A connection-request handle (`struct vrb_connreq`): what the application gets for a
/// CONNECT_REQUEST.
pub struct ConnReq {
    id: IdHandle,
}

/// The passive endpoint: its event channel and listening id.
pub struct PassiveEndpoint<'a, B: CmBackend> {
    cm: &'a B,
    channel: ChannelHandle,
    listener: IdHandle,
}

impl<'a, B: CmBackend> PassiveEndpoint<'a, B> {
    /// Opens the endpoint and listens on `addr`.
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

    /// Reads the endpoint's event queue (`fi_eq_sread`) until its next connection request
    /// (`FI_CONNREQ`); `None` once `quiet` passes without any event.
    pub fn next_connreq(&self, quiet: Duration) -> Result<Option<ConnReq>, CmError> {
        loop {
            let event = match self.cm.get_cm_event(self.channel, Wait::Timeout(quiet)) {
                Ok(event) => event,
                Err(e) if e.errno == Errno::ETIMEDOUT => return Ok(None),
                Err(e) => return Err(e),
            };
            let request =
                (event.kind() == EventKind::ConnectRequest).then(|| ConnReq { id: event.id() });
            self.cm.ack_cm_event(event)?;
            if request.is_some() {
                return Ok(request);
            }
        }
    }

    /// `fi_reject` (`vrb_msg_ep_reject`): rejects the request and releases its handle.
    pub fn reject(&self, connreq: ConnReq, variant: Variant) -> Result<(), CmError> {
        match self.cm.reject(connreq.id, &[]) {
            Ok(()) => {}
            // The request already ended (timed out, device removed): only the id is left.
            Err(e) if matches!(e.errno, Errno::EINVAL | Errno::ENXIO) => {}
            Err(e) => return Err(e),
        }
        match variant {
            // The handle is freed; its id is forgotten.
            Variant::Buggy => Ok(()),
            Variant::Fixed => self.cm.destroy_id(connreq.id),
        }
    }

    /// `fi_close` of the endpoint: the listening id, then the channel.
    pub fn close(self) -> Result<(), CmError> {
        self.cm.destroy_id(self.listener)?;
        self.cm.destroy_event_channel(self.channel)
    }
}

/// An application that rejects every connection request: listens on `addr`, rejects each
/// request as it comes until `quiet` passes without one, then closes the endpoint. Returns how
/// many requests it rejected.
pub fn rejecting_server<B: CmBackend>(
    cm: &B,
    addr: SocketAddr,
    quiet: Duration,
    variant: Variant,
) -> Result<usize, CmError> {
    let pep = PassiveEndpoint::listen(cm, addr)?;
    let mut rejected = 0;
    while let Some(connreq) = pep.next_connreq(quiet)? {
        pep.reject(connreq, variant)?;
        rejected += 1;
    }
    pep.close()?;
    Ok(rejected)
}
