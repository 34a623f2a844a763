//! The QP an iWARP connection's CM drives: the id's own, or, for an id without one, the QP
//! made apart (`ibv_create_qp`) whose number `rdma_connect` or `rdma_accept` named. cma.c
//! (`cma_connect_iw`, `cma_accept_iw`) passes `conn_param->qp_num` when the id has no QP;
//! iwcm.c (`iw_cm_connect`, `iw_cm_accept`) looks it up on the id's device with the driver's
//! `iw_get_qp` (siw: `siw_get_base_qp`) and refuses a number it does not know (EINVAL); the
//! driver then moves that QP itself (siw_cm.c: to RTS when MPA completes, out of it when the
//! connection closes).

use cmtwin::verbs::{AccessFlags, QpAttr, QpState};
use cmtwin::{Call, CmError, Errno, Result, Transport};

use super::rc::RcParams;
use super::tcp_timer::TcpPath;
use super::ObjKey;
use crate::cm::endpoint::{Endpoint, Output};
use crate::config::KernelProfile;
use crate::topology::DevKey;
use crate::world::{CmState, HostKey, IdKey, World};

impl World {
    /// `iw_get_qp`: the QP numbered `qpn` on device `dev` of `host` (any QP of the device, as
    /// siw's lookup finds it), or EINVAL naming `call`.
    pub(crate) fn iw_get_qp(
        &self,
        call: Call,
        host: HostKey,
        dev: DevKey,
        qpn: u32,
    ) -> Result<ObjKey> {
        self.verbs
            .qp_by_num
            .get(&(host, qpn))
            .copied()
            .filter(|q| self.verbs.qps[q].dev == dev)
            .ok_or_else(|| {
                CmError::new(
                    call,
                    Errno::EINVAL,
                    format!("no QP {qpn} on the id's device (iw_get_qp): name the QP in qp_num"),
                )
            })
    }

    /// The QP id `id`'s connection moves: the id's own, else the external QP its iWARP CM
    /// holds.
    pub(crate) fn cm_qp(&self, id: IdKey) -> Option<ObjKey> {
        if let Some(q) = self.qp_of(id) {
            return Some(q);
        }
        let i = self.kernel.ids.get(&id)?;
        let q = *self.verbs.qp_by_num.get(&(i.host, i.iw_qp()?))?;
        (Some(self.verbs.qps[&q].dev) == i.device).then_some(q)
    }

    /// The number of the QP id `id`'s connection moves (see [`World::cm_qp`]).
    pub(crate) fn cm_qp_num(&self, id: IdKey) -> Option<u32> {
        self.cm_qp(id).map(|q| self.verbs.qps[&q].qpn)
    }

    /// The state of the QP id `id`'s connection moves, if any.
    pub(crate) fn cm_qp_state(&self, id: IdKey) -> Option<QpState> {
        self.cm_qp(id).map(|q| self.verbs.qps[&q].machine.state())
    }

    /// siw moving a connection's QP to RTS as MPA completes (`siw_accept` on the passive
    /// side, `siw_proc_mpareply` on the active one), from any state up to RTR (siw's IDLE
    /// covers RESET and INIT); false from a later state, which siw refuses (EINVAL).
    pub(crate) fn iw_qp_to_rts(&mut self, id: IdKey) -> bool {
        let Some(q) = self.cm_qp(id) else {
            return false;
        };
        let Some(c) = self.connection_attrs(id) else {
            return false;
        };
        if !matches!(
            self.verbs.qps[&q].machine.state(),
            QpState::Reset | QpState::Init | QpState::Rtr
        ) {
            return false;
        }
        self.verbs.qps.get_mut(&q).expect("indexed QP").peer = Some(c.peer);
        let params: RcParams = c.params;
        // TCP's round trip on the simulated wire: the fixed latency both ways.
        let rtt = self.cfg.wire_latency.saturating_mul(2);
        let tcp = TcpPath::new(rtt, self.cfg.kernel_hz);
        self.drive_qp(q, |m, _, out| m.iw_rts(params, tcp, out))
    }

    /// Moves the QP id `id`'s connection moves to ERROR, flushing its outstanding requests
    /// (the iWARP CM's `iwcm_modify_qp_err` and siw's close of the connection).
    pub(crate) fn cm_qp_to_error(&mut self, id: IdKey) {
        if let Some(q) = self.cm_qp(id) {
            self.drive_qp(q, |m, _, out| m.enter_error(out));
        }
    }

    /// `rdma_init_qp_attr` of an RC id on iWARP (cma.c `rdma_init_qp_attr`, iwcm.c
    /// `iw_cm_init_qp_attr`): the id's port in every answer; before the connection has an
    /// iWARP CM id (before `connect`, or before a request), no access for any state; once
    /// it has one, remote write and read for INIT and RTR, and nothing more for RTS (siw
    /// needs no peer QP number, path or retry counts: MPA sets the QP up). A listener's
    /// iWARP CM id gives nothing (EINVAL).
    pub(crate) fn iw_init_qp_attr(&self, key: IdKey, state: QpState) -> Result<QpAttr> {
        let call = Call::InitQpAttr;
        let mut attr = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        attr.ah_attr.port_num = 1;
        match self.id(key).state {
            CmState::Listen => Err(CmError::new(
                call,
                Errno::EINVAL,
                "a listener's iWARP CM id gives no QP attributes (iw_cm_init_qp_attr)",
            )),
            CmState::Connect | CmState::Disconnect => {
                if state != QpState::Rts {
                    attr.access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
                }
                Ok(attr)
            }
            _ => Ok(attr),
        }
    }

    /// `ibv_modify_qp` of a siw QP (siw_verbs.c `siw_verbs_modify_qp`, siw_qp.c
    /// `siw_qp_modify`). siw keeps only the state and the access flags; RESET and INIT are
    /// both its IDLE, so RESET, INIT and RTR change nothing, and an ERROR QP stays as it is.
    /// RTS is the iWARP CM's to give (siw needs the connection's socket: EINVAL). ERROR
    /// flushes; from RTS it also drops the connection, which both sides see as
    /// DISCONNECTED.
    pub(crate) fn siw_modify(&mut self, q: ObjKey, to: QpState) -> Result<()> {
        let call = Call::ModifyQp;
        let from = self.verbs.qps[&q].machine.state();
        match (from, to) {
            (_, QpState::Sqd | QpState::Sqe) => Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{to:?} is not modelled"),
            )),
            (QpState::Error, _) => Ok(()),
            (QpState::Sqd, QpState::Reset | QpState::Init) => {
                // siw_qp_nextstate_from_close: CLOSING → IDLE.
                self.reset_qp(q);
                Ok(())
            }
            (QpState::Rts, QpState::Error) => {
                self.siw_orphan_stream(q);
                self.drive_qp(q, |m, _, out| m.enter_error(out));
                self.siw_drop_connection_of(q);
                Ok(())
            }
            (_, QpState::Error) => {
                self.drive_qp(q, |m, _, out| m.enter_error(out));
                Ok(())
            }
            (QpState::Rts, _) => Ok(()),
            (_, QpState::Rts) => Err(CmError::new(
                call,
                Errno::EINVAL,
                "siw moves a QP to RTS only with its connection (rdma_connect, rdma_accept)",
            )),
            _ => Ok(()),
        }
    }

    /// The TCP connection under QP `q` ended without a close: TCP gave it up
    /// (`tcp_write_err`: the socket closes without a word to the peer, which meets a reset
    /// when it next sends) or a reset came. siw takes that as the connection's close
    /// (`siw_cm_llp_state_change`, then the iWARP CM's close): DISCONNECTED here, the QP in
    /// ERROR with its receives flushed.
    pub(crate) fn siw_tcp_lost(&mut self, q: ObjKey) {
        self.drive_endpoints_of_qp(q, Endpoint::iw_connection_lost);
    }

    /// siw_qp_cm_drop: the connection whose QP is `q` closes (DISCONNECTED here, a FIN to
    /// the peer).
    pub(crate) fn siw_drop_connection_of(&mut self, q: ObjKey) {
        self.drive_endpoints_of_qp(q, Endpoint::disconnect);
    }

    /// Gives `input` to the CM endpoint of every id whose QP is `q`, in the ids' order.
    fn drive_endpoints_of_qp(&mut self, q: ObjKey, input: fn(&mut Endpoint, &mut Vec<Output>)) {
        let ids: Vec<IdKey> = (self.kernel.ids.keys_sorted().into_iter())
            .filter(|id| self.cm_qp(*id) == Some(q))
            .collect();
        for id in ids {
            if let Some(ep) = self.id(id).ep.get() {
                self.drive(ep, input);
            }
        }
    }

    /// What `ibv_query_qp` reports of a siw QP in `state` (measured on siw): on Linux 6.12
    /// siw's own state, RESET and INIT both being its IDLE (reported as INIT) and its
    /// CLOSING as SQD; on Linux 6.1 always RESET, whatever the QP does.
    pub(crate) fn siw_reported_state(&self, state: QpState) -> QpState {
        match (self.cfg.kernel, state) {
            (KernelProfile::Linux61, _) => QpState::Reset,
            (_, QpState::Reset) => QpState::Init,
            (_, s) => s,
        }
    }

    /// `rdma_disconnect` on iWARP: librdmacm moves the id's QP to SQD and the iWARP CM the
    /// QP it holds (iwcm.c `iw_cm_disconnect`, `iwcm_modify_qp_sqd`); siw's CLOSING flushes
    /// the outstanding receives (measured) and reads as SQD.
    pub(crate) fn cm_qp_close(&mut self, id: IdKey) {
        if let Some(q) = self.cm_qp(id) {
            if self.verbs.qps[&q].machine.state() == QpState::Rts {
                self.siw_orphan_stream(q);
                self.drive_qp(q, |m, _, out| m.siw_close(out));
            }
        }
    }

    /// The connection of id `id` closed (siw_qp_llp_close): a QP still up goes to ERROR, its
    /// queues flushed; one this side closed stays CLOSING, one whose failed READ response
    /// dropped the connection stays in RTS (measured on siw).
    pub(crate) fn cm_qp_connection_closed(&mut self, id: IdKey) {
        if let Some(q) = self.cm_qp(id) {
            let m = &self.verbs.qps[&q].machine;
            if m.state() != QpState::Sqd && !m.siw_dropped_by_send() {
                self.drive_qp(q, |m, _, out| m.enter_error(out));
            }
        }
    }

    /// `ibv_destroy_qp` of QP `q` on siw (`siw_destroy_qp`): the QP is moved to ERROR
    /// first, which from RTS drops the connection it carries, as `siw_modify` does (both
    /// sides see DISCONNECTED). Nothing on other transports: there the CM's connection
    /// outlives its QP.
    /// Returns whether it did anything (moved the QP and dropped its connection).
    pub(crate) fn siw_destroy_qp(&mut self, q: ObjKey) -> bool {
        let qp = &self.verbs.qps[&q];
        if self.topo.devices[qp.dev].transport != Transport::Iwarp {
            return false;
        }
        if qp.machine.state() != QpState::Rts {
            return false;
        }
        self.siw_orphan_stream(q);
        self.drive_qp(q, |m, _, out| m.enter_error(out));
        self.siw_drop_connection_of(q);
        true
    }

    /// An external QP is destroyed: the iWARP connections that hold it and still wait for
    /// their MPA reply lose their TCP connection (see `Endpoint::iw_qp_destroyed`).
    pub(crate) fn iw_qp_destroyed(&mut self, q: ObjKey) {
        let ids: Vec<IdKey> = (self.kernel.ids.keys_sorted().into_iter())
            .filter(|id| self.qp_of(*id).is_none() && self.cm_qp(*id) == Some(q))
            .collect();
        for id in ids {
            if let Some(ep) = self.id(id).ep.get() {
                self.drive(ep, |e, out| e.iw_qp_destroyed(out));
            }
        }
    }
}
