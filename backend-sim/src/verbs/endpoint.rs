//! `rdma_create_ep` on the simulator: librdmacm's composition ([`cmtwin::ep`]) with the
//! listener keeping the QP attributes (and so the PD, CQs and SRQ they name) for
//! `get_request`, and an active endpoint's granted capacities as `ibv_create_qp` writes them
//! back on the device the simulator stands for (see [`World::created_cap`]).

use cmtwin::ep::{create_ep_with, EpQpAttr};
use cmtwin::verbs::DataPath;
use cmtwin::{AddrInfo, Call, CmError, Errno, IdHandle, QpCap, QpHandle, Result, Transport};

use crate::backend::SimBackend;
use crate::config::KernelProfile;
use crate::world::{HostKey, World};

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

    /// The endpoint's QP of `attr`, and the capacities written back.
    fn ep_qp(&self, id: IdHandle, attr: &EpQpAttr) -> Result<QpCap> {
        attr.create_qp_on(self, id)?;
        let qp = self.qp(id)?.ok_or_else(|| {
            CmError::new(Call::CreateEp, Errno::EIO, format!("{id} lost its new QP"))
        })?;
        let w = self.lock(Call::CreateEp)?;
        w.created_cap(self.host, qp, &attr.cap())
    }
}

impl World {
    /// What `ibv_create_qp` writes back into `attr->cap` for QP `h`, made of `asked`: the
    /// entries and inline room it has; the depths it holds on rxe since Linux 6.4
    /// (`rxe_init_sq` and `rxe_init_rq` copy them back, so on the 6.12 profile), the depths
    /// asked on rxe's Linux 6.1 (`rxe_qp_init_req` copies back only the entries and inline
    /// room); the receive capacities asked whatever the kernel on a QP of an SRQ (rxe makes
    /// no receive queue then). siw (iWARP): the capacities asked, all of them (`siw_create_qp`
    /// writes nothing back; measured on siw-6.1: 3 and 5 requests asked are written back so,
    /// where `query_qp_cap` reads 4 and 8).
    pub(crate) fn created_cap(&self, host: HostKey, h: QpHandle, asked: &QpCap) -> Result<QpCap> {
        let q = self.qp_key(host, Call::CreateEp, h)?;
        let qp = &self.verbs.qps[&q];
        let made = qp.machine.cap();
        if self.topo.devices[qp.dev].transport == Transport::Iwarp {
            return Ok(*asked);
        }
        let on_srq = self.verbs.srq_of_qp.contains_key(&q);
        let linux61 = self.cfg.kernel == KernelProfile::Linux61;
        Ok(QpCap {
            max_send_wr: if linux61 {
                asked.max_send_wr
            } else {
                made.max_send_wr
            },
            max_recv_wr: if linux61 || on_srq {
                asked.max_recv_wr
            } else {
                made.max_recv_wr
            },
            max_recv_sge: if on_srq {
                asked.max_recv_sge
            } else {
                made.max_recv_sge
            },
            ..made
        })
    }
}
