//! Synchronous ids (created without a channel): `rdma_get_request` and the id's current event
//! (`id->event`, which librdmacm owns and acks itself; the backend only copies it).

use cmtwin::ep::{create_ep_with, EpQpAttr};
use cmtwin::verbs::DataPath;
use cmtwin::{Call, CmBackend, CmError, EventInfo, EventKind, IdHandle, PortSpace, Result};

use crate::events::event_info;
use crate::ffi::QPT_UD;
use crate::registry::{lock, IdState};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

impl VerbsBackend {
    /// `rdma_get_request`, and the QP that `rdma_create_ep` asked for on the listener
    /// (created here with the backend's own `create_qp` or `create_qp_ex`, so that it is
    /// registered like any other; librdmacm creates it inside the call).
    pub(crate) fn get_request_impl(&self, listen: IdHandle) -> Result<IdHandle> {
        let call = Call::GetRequest;
        let (child, request_qp) = self.take_request(listen)?;
        if let Some(attr) = request_qp {
            if let Err(e) = attr.create_qp_on(self, child) {
                let _ = self.destroy_id(child);
                return Err(CmError::new(call, e.errno, e.detail));
            }
        }
        Ok(child)
    }

    /// `rdma_create_ep` with `qp_init` in either form, composed of the backend's calls as
    /// librdmacm composes it, written back as [`create_ep_with`] says.
    pub(crate) fn create_ep_of(
        &self,
        info: &cmtwin::AddrInfo,
        qp_init: Option<&mut EpQpAttr>,
    ) -> Result<IdHandle> {
        let keep = |id, attr| {
            self.on_id(Call::CreateEp, id, |o| {
                lock(&o.state).request_qp = Some(attr);
                Ok(())
            })
        };
        create_ep_with(self, info, qp_init, keep, |id, attr| {
            attr.create_qp_on(self, id)?;
            let call = Call::CreateEp;
            let qp = self.qp(id)?;
            let qp = qp.ok_or_else(|| err(call, libc::EIO, format!("{id} lost its new QP")))?;
            let created = self.qp_obj(call, qp)?.created;
            created.ok_or_else(|| err(call, libc::EIO, format!("{id}'s QP is not the id's")))
        })
    }

    /// The request `rdma_get_request` takes from `listen`, as a new registered id, and the
    /// QP attributes kept on the listener.
    fn take_request(&self, listen: IdHandle) -> Result<(IdHandle, Option<EpQpAttr>)> {
        let call = Call::GetRequest;
        self.on_id(call, listen, |o| {
            let (sync, listening, ps, request_qp) = {
                let st = lock(&o.state);
                (st.is_sync(), st.listening, st.port_space, st.request_qp)
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
                Ok(obj) => Ok((obj.handle, request_qp)),
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
