//! Synchronous ids (created without a channel): `rdma_get_request` and the id's current event
//! (`id->event`, which librdmacm owns and acks itself; the backend only copies it).

use cmtwin::{Call, EventInfo, EventKind, IdHandle, PortSpace, Result};

use crate::events::event_info;
use crate::ffi::QPT_UD;
use crate::registry::{lock, IdState};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn get_request_impl(&self, listen: IdHandle) -> Result<IdHandle> {
        let call = Call::GetRequest;
        self.on_id(call, listen, |o| {
            let (sync, listening, ps) = {
                let st = lock(&o.state);
                (st.is_sync(), st.listening, st.port_space)
            };
            if !sync {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!(
                        "{listen} has an event channel: get_request needs a synchronous listener"
                    ),
                ));
            }
            if !listening {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{listen} is not listening"),
                ));
            }
            lock(&o.state).sync_override = None;
            let child = o.raw.get_request().map_err(|e| c_err(call, e))?;
            let mut state = IdState::new(None, ps);
            state.pending_request_of = Some(listen);
            state.unaccepted = true;
            let registered = self.reg().insert_id(child, state);
            match registered {
                Ok(obj) => Ok(obj.handle),
                Err(child) => {
                    // Its request is refused (the peer gets REJECTED).
                    let _ = child.destroy();
                    Err(keys_exhausted(call))
                }
            }
        })
    }

    pub(crate) fn sync_event_impl(&self, id: IdHandle) -> Result<Option<EventInfo>> {
        self.on_id(Call::SyncEvent, id, |o| {
            if let Some(info) = lock(&o.state).sync_override.clone() {
                return Ok(Some(info));
            }
            let Some(snap) = o.raw.current_event() else {
                return Ok(None);
            };
            let listen = if EventKind::from_raw(snap.kind) == EventKind::ConnectRequest {
                self.reg().id_by_addr(snap.listen_id)
            } else {
                None
            };
            Ok(Some(event_info(
                &snap,
                id,
                PortSpace(o.raw.port_space()),
                listen,
                o.raw.qp_type() == QPT_UD,
            )))
        })
    }
}
