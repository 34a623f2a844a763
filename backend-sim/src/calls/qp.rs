//! QPs on ids: `rdma_create_qp` and `rdma_destroy_qp`. A QP decides whether a REP becomes
//! CONNECT_RESPONSE or, through librdmacm's processing, ESTABLISHED. The QP itself, its CQs
//! and its data path are in `verbs/`.

use cmtwin::{Call, CmError, Errno, IdHandle, QpInitAttr, QpType, Result, Transport};

use crate::world::{CmState, HostKey, IdKey, World};

impl World {
    /// The checks `rdma_create_qp` makes on id `key` before creating a QP of `qp_type`.
    pub(crate) fn check_qp_allowed(&self, call: Call, key: IdKey, qp_type: QpType) -> Result<()> {
        // The id is looked up once for all the checks (both ids of a connection make a QP).
        let id = self.id(key);
        if id.state == CmState::DeviceRemoval {
            return Err(crate::world::removed_error(call));
        }
        if id.librdmacm_device().is_none() {
            return Err(CmError::new(call, Errno::EINVAL, "the id has no device"));
        }
        if id.qp().is_some() {
            return Err(CmError::new(call, Errno::EINVAL, "the id already has a QP"));
        }
        if qp_type.is_connected() != id.qp_type.is_connected() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{qp_type:?} QP on a {:?} id", id.ps),
            ));
        }
        let transport = id.device.map(|d| self.topo.devices[d].transport);
        if let Some(transport) = transport {
            if !crate::verbs::makes_qp_type(transport, qp_type) {
                // iWARP devices have only RC QPs; their drivers refuse the rest (siw, cxgb4:
                // -EOPNOTSUPP) as the QP is made, before librdmacm moves it: UD ids cannot get
                // a QP (and their connect then fails too), nor can a UC QP be made.
                return Err(CmError::new(
                    call,
                    Errno::EOPNOTSUPP,
                    format!("{qp_type:?} QPs do not exist on iWARP"),
                ));
            }
        }
        if qp_type.is_connected() {
            // librdmacm moves the new QP to INIT with `rdma_init_qp_attr`; if that fails, it
            // destroys the QP again.
            self.cm_gives_qp_attrs(call, id, transport)?;
        }
        Ok(())
    }

    /// `rdma_init_qp_attr` of a connected id on IB and RoCE asks its IB CM id, which answers
    /// only from the REQ to the established connection (cm.c `cm_init_qp_init_attr`): EINVAL
    /// once the request was abandoned or the connection is over. A listener's CM id (the IB
    /// CM's or the iWARP CM's, made by `rdma_listen` on a device) is in LISTEN, where neither
    /// gives attributes: EINVAL on every transport. Other ids without an IB CM id yet, and
    /// iWARP ids, pass.
    pub(crate) fn check_cm_gives_qp_attrs(&self, call: Call, key: IdKey) -> Result<()> {
        self.cm_gives_qp_attrs(call, self.id(key), self.transport_of(key))
    }

    /// [`World::check_cm_gives_qp_attrs`] of id `id` on a device of `transport`.
    fn cm_gives_qp_attrs(
        &self,
        call: Call,
        id: &crate::kernel::Id,
        transport: Option<Transport>,
    ) -> Result<()> {
        if id.state == CmState::Listen {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "rdma_init_qp_attr: a listener's CM id gives no QP attributes (LISTEN)",
            ));
        }
        let Some(ep) = id.ep.get() else {
            return Ok(());
        };
        let state = self.ep_state(ep);
        if transport == Some(Transport::Iwarp) || state.gives_qp_attrs() {
            return Ok(());
        }
        Err(CmError::new(
            call,
            Errno::EINVAL,
            format!("rdma_init_qp_attr: no QP attributes in IB CM state {state:?}"),
        ))
    }

    /// `rdma_create_qp`: returns the new QP's number.
    pub(crate) fn create_qp(
        &mut self,
        host: HostKey,
        h: IdHandle,
        attr: &QpInitAttr,
    ) -> Result<u32> {
        let call = Call::CreateQp;
        let key = self.id_key(host, call, h)?;
        self.check_qp_allowed(call, key, attr.qp_type)?;
        let dev = self.id(key).device.expect("an id with a QP has a device");
        let transport = self.topo.devices[dev].transport;
        crate::verbs::check_cap_maxima(call, &attr.cap, transport)?;
        crate::verbs::check_librdmacm_cqs(call, &attr.cap, transport)?;
        let qpn = self.draw_qp_number(host, dev);
        self.id_mut(key).set_qp(Some(qpn));
        self.attach_qp(key, qpn, attr);
        Ok(qpn)
    }

    /// `rdma_destroy_qp`.
    pub(crate) fn destroy_qp(&mut self, host: HostKey, h: IdHandle) -> Result<()> {
        let call = Call::DestroyQp;
        let (key, id) = self.id_entry(host, call, h)?;
        if id.qp().is_none() {
            return Err(CmError::new(call, Errno::EINVAL, "the id has no QP"));
        }
        if let Some(q) = self.qp_of_found(key, id) {
            if self.siw_destroy_qp(q) {
                // siw's teardown drove connections: look the id's QP up again.
                self.remove_qp_of(key);
            } else {
                self.remove_qp(q);
            }
        }
        self.id_mut(key).set_qp(None);
        Ok(())
    }
}
