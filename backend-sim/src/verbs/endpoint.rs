//! `rdma_create_ep` on the simulator: librdmacm's composition ([`cmtwin::ep`]) with the
//! listener keeping the QP attributes (and so the PD, CQs and SRQ they name) for
//! `get_request`, and an active endpoint's granted capacities read as `query_qp_cap` reads
//! them (what `ibv_create_qp` writes back on the simulated devices).

use cmtwin::ep::{create_ep_with, EpQpAttr};
use cmtwin::verbs::DataPath;
use cmtwin::{AddrInfo, Call, CmError, Errno, IdHandle, QpCap, Result};

use crate::backend::SimBackend;

impl SimBackend {
    /// `rdma_create_ep` with `qp_init` in either form, written back as
    /// [`create_ep_with`] says.
    pub(crate) fn create_ep_of(
        &self,
        info: &AddrInfo,
        qp_init: Option<&mut EpQpAttr>,
    ) -> Result<IdHandle> {
        let keep = |id, attr| {
            let call = Call::CreateEp;
            let mut w = self.lock(call)?;
            let key = w.id_key(self.host, call, id)?;
            w.id_mut(key).set_request_qp(attr);
            Ok(())
        };
        create_ep_with(self, info, qp_init, keep, |id, attr| self.ep_qp(id, attr))
    }

    /// The endpoint's QP of `attr`, and the capacities the device granted it.
    fn ep_qp(&self, id: IdHandle, attr: &EpQpAttr) -> Result<QpCap> {
        attr.create_qp_on(self, id)?;
        let qp = self.qp(id)?.ok_or_else(|| {
            CmError::new(Call::CreateEp, Errno::EIO, format!("{id} lost its new QP"))
        })?;
        self.query_qp_cap(qp)
    }
}
