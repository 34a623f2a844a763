//! Queue pairs: `rdma_create_qp` (the backend's PD of the id's device, CQs created by
//! librdmacm; registered for the data path, see `verbs/qps.rs`) and `rdma_destroy_qp`.
//! `destroy_id` destroys a QP the application left behind.

use cmtwin::{Call, IdHandle, QpInitAttr, QpType, Result};

use crate::ffi::QPT_UD;
use crate::{err, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn create_qp_impl(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32> {
        let call = Call::CreateQp;
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is not attached to an RDMA device (resolve its address first)"),
                ));
            }
            if let Some(n) = o.raw.qp_num() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} already has QP {n:#x}"),
                ));
            }
            let id_is_ud = o.raw.qp_type() == QPT_UD;
            if id_is_ud != (attr.qp_type == QpType::Ud) {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("a {:?} QP does not suit the id's port space", attr.qp_type),
                ));
            }
            let Some(ctx) = o.raw.ctx() else {
                return Err(err(call, libc::EINVAL, format!("{id} has no device")));
            };
            self.create_id_qp(call, o, ctx, &attr.cap, attr.sq_sig_all, attr.qp_type)
        })
    }

    pub(crate) fn destroy_qp_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::DestroyQp;
        self.on_id(call, id, |o| {
            if o.raw.qp_num().is_none() {
                return Err(err(call, libc::EINVAL, format!("{id} has no QP")));
            }
            // Out of the registry first (refused while another thread uses it); its regions
            // are released once librdmacm destroyed it.
            let retired = {
                let mut reg = self.reg();
                reg.verbs.check_id_qp_retirable(call, id)?;
                reg.verbs.retire_id_qp(id)
            };
            o.raw.destroy_qp();
            drop(retired);
            Ok(())
        })
    }

    pub(crate) fn qp_num_impl(&self, id: IdHandle) -> Result<Option<u32>> {
        self.on_id(Call::QpNum, id, |o| Ok(o.raw.qp_num()))
    }
}
