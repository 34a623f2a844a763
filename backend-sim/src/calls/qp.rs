//! QPs on ids: `rdma_create_qp` and `rdma_destroy_qp`. A QP decides whether a REP becomes
//! CONNECT_RESPONSE or, through librdmacm's processing, ESTABLISHED.

use cmtwin::{Call, CmError, Errno, IdHandle, QpInitAttr, Result, Transport};

use crate::rng::Stream;
use crate::world::{HostKey, World};

impl World {
    /// `rdma_create_qp`: returns the new QP's number.
    pub(crate) fn create_qp(
        &mut self,
        host: HostKey,
        h: IdHandle,
        attr: &QpInitAttr,
    ) -> Result<u32> {
        let call = Call::CreateQp;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let id = self.id(key);
        if id.device.is_none() {
            return Err(CmError::new(call, Errno::EINVAL, "the id has no device"));
        }
        if id.qp.is_some() {
            return Err(CmError::new(call, Errno::EINVAL, "the id already has a QP"));
        }
        if attr.qp_type.is_connected() != id.qp_type.is_connected() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{:?} QP on a {:?} id", attr.qp_type, id.ps),
            ));
        }
        if !attr.qp_type.is_connected() && self.transport_of(key) == Some(Transport::Iwarp) {
            // iWARP devices have only connected QPs; their drivers refuse the rest (siw,
            // cxgb4: -EOPNOTSUPP), so UD ids cannot get a QP, and their connect then fails too.
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                format!("{:?} QPs do not exist on iWARP", attr.qp_type),
            ));
        }
        let dev = self.id(key).device.expect("an id with a QP has a device");
        let rng = &mut self.rng;
        let draw = || rng.range(Stream::Numbers, 0x10, 0xFF_FFFE) as u32;
        let qpn = self.topo.devices[dev].qpns.next(draw);
        self.id_mut(key).qp = Some(qpn);
        Ok(qpn)
    }

    /// `rdma_destroy_qp`.
    pub(crate) fn destroy_qp(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::DestroyQp;
        let key = self.id_key(host, call, h)?;
        if self.id_mut(key).qp.take().is_none() {
            return Err(CmError::new(call, Errno::EINVAL, "the id has no QP"));
        }
        Ok(())
    }
}
