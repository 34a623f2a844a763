//! Queue pairs: `rdma_create_qp` (librdmacm's default PD of the id's device, CQs created by
//! librdmacm) and `rdma_destroy_qp`. `destroy_id` destroys a QP the application left behind.

use cmtwin::{Call, IdHandle, QpInitAttr, QpType, Result};

use crate::ffi::{QpAttrIn, QPT_RC, QPT_UC, QPT_UD};
use crate::{c_err, err, VerbsBackend};

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
            let qp_type = match attr.qp_type {
                QpType::Rc => QPT_RC,
                QpType::Uc => QPT_UC,
                QpType::Ud => QPT_UD,
            };
            o.raw
                .create_qp(&QpAttrIn {
                    qp_type,
                    max_send_wr: attr.cap.max_send_wr,
                    max_recv_wr: attr.cap.max_recv_wr,
                    max_send_sge: attr.cap.max_send_sge,
                    max_recv_sge: attr.cap.max_recv_sge,
                    max_inline_data: attr.cap.max_inline_data,
                    sq_sig_all: attr.sq_sig_all,
                })
                .map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn destroy_qp_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::DestroyQp;
        self.on_id(call, id, |o| {
            if o.raw.destroy_qp() {
                Ok(())
            } else {
                Err(err(call, libc::EINVAL, format!("{id} has no QP")))
            }
        })
    }

    pub(crate) fn qp_num_impl(&self, id: IdHandle) -> Result<Option<u32>> {
        self.on_id(Call::QpNum, id, |o| Ok(o.raw.qp_num()))
    }
}
