//! A well-behaved passive side: listens, accepts every request, answers a disconnect, and
//! tears everything down once it has been quiet for a while. The ported active sides run
//! against it.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType, Wait,
};
use cmtwin_sim::scenarios::allowed;

/// How the peer behaves.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Disconnect each connection as soon as it is ESTABLISHED (a target shutting down).
    pub disconnect_first: bool,
    /// Reject every request instead of accepting it (a consumer reject, REJ reason 28).
    pub reject_all: bool,
    /// How long without any event before the peer tears down and exits (virtual time).
    pub linger: Duration,
}

/// One accepted or rejected connection request of the peer.
struct Child {
    id: IdHandle,
    qp: bool,
}

/// Accepts `result` of `call` if it succeeded or failed as the CM may fail it once faults
/// changed the id under the peer's feet ([`allowed`]); other errors are returned.
fn tolerate<T>(result: Result<T, CmError>, call: Call) -> Result<Option<T>, CmError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.call == call && allowed(call, e.errno) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Runs the peer on `cm` until it has been quiet for `config.linger`, then destroys every QP,
/// id and its channel. Returns the number of connection requests it saw.
pub fn serve<B: CmBackend>(cm: &B, config: &PeerConfig) -> Result<usize, CmError> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, config.addr)?;
    cm.listen(listener, 8)?;
    let mut children: Vec<Child> = Vec::new();
    loop {
        let event = match cm.get_cm_event(channel, Wait::Timeout(config.linger)) {
            Ok(event) => event,
            Err(e) if e.errno == Errno::ETIMEDOUT => break,
            Err(e) => return Err(e),
        };
        let (kind, id) = (event.kind(), event.id());
        cm.ack_cm_event(event)?;
        match kind {
            EventKind::ConnectRequest if config.reject_all => {
                children.push(Child { id, qp: false });
                tolerate(cm.reject(id, &[]), Call::Reject)?;
            }
            EventKind::ConnectRequest => {
                let qp = tolerate(
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc)),
                    Call::CreateQp,
                )?;
                children.push(Child {
                    id,
                    qp: qp.is_some(),
                });
                if qp.is_some() {
                    tolerate(cm.accept(id, None), Call::Accept)?;
                }
            }
            EventKind::Established if config.disconnect_first => {
                tolerate(cm.disconnect(id), Call::Disconnect)?;
            }
            EventKind::Disconnected => {
                tolerate(cm.disconnect(id), Call::Disconnect)?;
            }
            _ => {}
        }
    }
    let requests = children.len();
    for child in children {
        if child.qp {
            cm.destroy_qp(child.id)?;
        }
        cm.destroy_id(child.id)?;
    }
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(requests)
}
