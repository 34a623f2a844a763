//! `ibv_modify_qp` with the application's attribute mask: the attributes the mask names go
//! to the device as given (the kernel and the driver judge them); only `path_mtu` 0 stands
//! for the port's active MTU, as `modify_qp` takes it.

use cmtwin::verbs::{QpAttr, QpAttrMask as M, QpState};
use cmtwin::{Call, QpHandle, Result};

use super::objects::QpObj;
use crate::ffi::QpAttrC;
use crate::{c_err, err, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn modify_qp_with_mask_impl(
        &self,
        h: QpHandle,
        attr: &QpAttr,
        mask: M,
    ) -> Result<()> {
        let call = Call::ModifyQp;
        let qp = self.qp_obj(call, h)?;
        let mut c = masked_to_c(call, &qp, attr, mask)?;
        let bits = i32::try_from(mask.0).map_err(|_| {
            err(
                call,
                libc::EOPNOTSUPP,
                format!("mask {mask}: no such attribute"),
            )
        })?;
        qp.raw.modify(&mut c, bits).map_err(|e| c_err(call, e))?;
        if mask.contains(M::STATE) && attr.qp_state == Some(QpState::Reset) {
            self.discard_requests(h, &qp);
        }
        Ok(())
    }
}

/// The C attributes of `attr` that `mask` names (the others zero).
fn masked_to_c(call: Call, qp: &QpObj, attr: &QpAttr, mask: M) -> Result<QpAttrC> {
    let mut c = crate::ffi::zeroed_qp_attr();
    let has = |bit| mask.contains(bit);
    if has(M::STATE) {
        let s = attr
            .qp_state
            .ok_or_else(|| err(call, libc::EINVAL, "IBV_QP_STATE without qp_state"))?;
        c.qp_state = s as u32;
    }
    if has(M::CUR_STATE) {
        let s = attr
            .cur_qp_state
            .ok_or_else(|| err(call, libc::EINVAL, "IBV_QP_CUR_STATE without cur_qp_state"))?;
        c.cur_qp_state = s as u32;
    }
    let port = attr.ah_attr.port_num;
    c.en_sqd_async_notify = u8::from(attr.en_sqd_async_notify);
    c.qp_access_flags = attr.access.0;
    c.pkey_index = attr.pkey_index;
    c.port_num = port;
    c.qkey = attr.qkey;
    if has(M::AV) {
        crate::ffi::set_ah_attr(&mut c, &attr.ah_attr, port);
    }
    c.path_mtu = match attr.path_mtu {
        0 if has(M::PATH_MTU) => qp.ctx.active_mtu(port.max(1)).map_err(|e| c_err(call, e))?,
        mtu => u32::from(mtu),
    };
    c.timeout = attr.timeout;
    c.retry_cnt = attr.retry_cnt;
    c.rnr_retry = attr.rnr_retry;
    c.rq_psn = attr.rq_psn;
    c.sq_psn = attr.sq_psn;
    c.max_rd_atomic = attr.max_rd_atomic;
    c.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    c.min_rnr_timer = attr.min_rnr_timer;
    c.dest_qp_num = attr.dest_qp_num;
    Ok(c)
}
