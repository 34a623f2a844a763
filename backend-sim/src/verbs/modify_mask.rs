//! `ibv_modify_qp` with an attribute mask. On RoCE and InfiniBand devices the transition and
//! the mask are judged by the kernel's table (`ib_modify_qp_is_ok`, in `cmtwin::verbs`), the
//! values by uverbs' `modify_qp`, `_ib_modify_qp` and rxe's `rxe_qp_chk_attr`, and SQD is
//! left only once drained (rxe's `rxe_qp_chk_attr`, `__qp_chk_state`); the attributes then apply as rxe's
//! `rxe_qp_from_attr` applies them, before the state's own effect (RESET discards, SQD
//! drains, ERROR flushes, RTS sends what waited). On iWARP devices siw's
//! `siw_verbs_modify_qp` consults no table: a move to the QP's own state, or none, changes
//! nothing. The table is read from the state `IBV_QP_CUR_STATE` names, if any: rxe then
//! moves the QP to RTS whatever its own state (`modify_qp_with_mask`'s
//! `take_named_rts`), an InfiniBand HCA refuses a transition its QP's own state does not
//! lead to, siw ignores the named state (tests/BEDS.md).

use cmtwin::verbs::{modify_qp_is_ok, QpAttr, QpAttrMask as M, QpState};
use cmtwin::{Call, CmError, Errno, QpHandle, QpType, Result, Transport};

use super::modify::{dgid_ip, rnr_timer};
use super::rc::{NamedRts, PathlessFailure};
use super::ObjKey;
use crate::config::KernelProfile;
use crate::world::{HostKey, World};

/// The largest `max_rd_atomic` rxe takes (`max_qp_rd_atom`).
const MAX_QP_RD_ATOM: u8 = 128;
/// `IB_MTU_4096`, the largest path MTU.
const MAX_PATH_MTU: u8 = 5;

impl World {
    /// `ibv_modify_qp(qp, attr, mask)`.
    pub(crate) fn modify_qp_with_mask(
        &mut self,
        host: HostKey,
        h: QpHandle,
        attr: &QpAttr,
        mask: M,
    ) -> Result<()> {
        let call = Call::ModifyQp;
        let q = self.qp_key(host, call, h)?;
        let transport = self.topo.devices[self.verbs.qps[&q].dev].transport;
        let refuse = |errno, why: String| CmError::new(call, errno, why);
        check_values(attr, mask, transport).map_err(|(e, why)| refuse(e, why))?;
        let machine = &self.verbs.qps[&q].machine;
        let (qp_type, actual) = (machine.qp_type(), machine.state());
        let cur = match mask.contains(M::CUR_STATE) {
            true => attr.cur_qp_state.expect("checked"),
            false => actual,
        };
        let next = match mask.contains(M::STATE) {
            true => attr.qp_state.expect("checked"),
            false => cur,
        };
        if transport == Transport::Iwarp {
            if !mask.contains(M::STATE) {
                return Ok(()); // siw ignores every attribute but the state and access flags
            }
            if matches!(next, QpState::Sqd | QpState::Sqe) {
                let why = format!("{next:?} on iWARP (siw closes or terminates the connection)");
                return Err(refuse(Errno::EOPNOTSUPP, why));
            }
            // siw_qp_modify: only the state, as siw moves its QPs (iw_qp.rs).
            return self.siw_modify(q, next);
        }
        if mask.contains(M::STATE) || self.cfg.kernel == KernelProfile::Linux61 {
            // rxe on 6.12 consults the table only with IBV_QP_STATE (`rxe_qp_from_attr`'s
            // `__qp_chk_state`): without it any attribute is taken (measured).
            modify_qp_is_ok(qp_type, cur, next, mask)
                .map_err(|r| refuse(Errno::EINVAL, r.to_string()))?;
        }
        let drained = !self.verbs.qps[&q].machine.draining();
        if mask.contains(M::STATE) && cur == QpState::Sqd && next != QpState::Error && !drained {
            let why = "the QP is still draining in SQD (requests sent are unacknowledged)";
            return Err(refuse(Errno::EINVAL, why.into()));
        }
        let named = mask.contains(M::STATE) && !movable(actual, next);
        // rxe takes the transition from the state IBV_QP_CUR_STATE names (the table allows
        // it only into RTS); an InfiniBand HCA's firmware runs the command of that
        // transition against the QP's own state and fails it.
        if named && (transport != Transport::Roce || next != QpState::Rts) {
            let why = format!(
                "the QP is in {actual:?}, and an InfiniBand HCA moves it to {next:?} only from \
                 a state that leads there (IBV_QP_CUR_STATE named {cur:?})"
            );
            return Err(refuse(Errno::EINVAL, why));
        }
        self.apply_qp_attrs(q, attr, mask)?;
        match (mask.contains(M::STATE), named) {
            (true, false) => self.move_qp(q, next),
            (true, true) => self.take_named_rts(q),
            (false, _) => {}
        }
        Ok(())
    }

    /// rxe's move of QP `q` to RTS from a state IBV_QP_CUR_STATE named, whatever the QP's own
    /// (RESET, INIT or ERROR here): `rxe_qp_from_attr` sets the state and readies the
    /// requester, nothing else. A QP never given a path (no RTR's address vector) fails the
    /// first request its requester takes and enters ERROR: with LOC_QP_OP_ERR on rxe 6.1,
    /// flushed on 6.12. One connected before its ERROR sends again; on 6.1 its responder
    /// stays in error and answers nothing, on 6.12 it answers (measured; tests/BEDS.md).
    fn take_named_rts(&mut self, q: ObjKey) {
        let linux61 = self.cfg.kernel == KernelProfile::Linux61;
        let qp = &self.verbs.qps[&q];
        let how = match (qp.peer.is_none(), linux61) {
            (true, true) => NamedRts::Pathless(PathlessFailure::LocalQpError),
            (true, false) => NamedRts::Pathless(PathlessFailure::Flushed),
            (false, true) if qp.machine.state() == QpState::Error => NamedRts::DeafResponder,
            (false, _) => NamedRts::No,
        };
        self.drive_qp(q, |m, _, out| m.force_rts(how, out));
    }

    /// The attributes of `mask` that the simulator models, applied to QP `q`.
    fn apply_qp_attrs(&mut self, q: ObjKey, attr: &QpAttr, mask: M) -> Result<()> {
        let peer_host = match mask.contains(M::AV) {
            true => Some(
                self.topo
                    .host_of_ip(dgid_ip(&attr.ah_attr))
                    .ok_or_else(|| {
                        CmError::new(
                            Call::ModifyQp,
                            Errno::EINVAL,
                            "the path's destination GID is no host of the fabric",
                        )
                    })?,
            ),
            false => None,
        };
        let qp = self.verbs.qps.get_mut(&q).expect("live QP");
        if let Some(ud) = qp.machine.as_ud() {
            if mask.contains(M::QKEY) {
                ud.set_qkey(attr.qkey);
            }
            return Ok(());
        }
        let (old_host, old_qpn) = qp.peer.unzip();
        if let Some(host) = peer_host.or(old_host) {
            let dest = match mask.contains(M::DEST_QPN) {
                true => attr.dest_qp_num,
                false => old_qpn.unwrap_or(0),
            };
            qp.peer = Some((host, dest));
        }
        let rc = qp.machine.as_rc().expect("an RC or UC QP");
        let given = |bit, v: u8| mask.contains(bit).then_some(v);
        if mask.contains(M::MIN_RNR_TIMER) {
            rc.set_rnr_timer(rnr_timer(attr.min_rnr_timer));
        }
        if mask.intersects(M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY) {
            rc.set_params(
                given(M::TIMEOUT, attr.timeout),
                given(M::RETRY_CNT, attr.retry_cnt),
                given(M::RNR_RETRY, attr.rnr_retry),
            );
        }
        if mask.contains(M::ACCESS_FLAGS) {
            rc.set_access(attr.access.0);
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            rc.set_responder_resources(attr.max_dest_rd_atomic);
            self.verbs.kept_requests.remove(&q);
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            rc.set_initiator_depth(attr.max_rd_atomic);
        }
        if mask.contains(M::SQ_PSN) {
            rc.set_sq_psn(attr.sq_psn);
        }
        if mask.contains(M::RQ_PSN) {
            rc.set_rq_psn(attr.rq_psn);
        }
        Ok(())
    }

    /// Moves QP `q` to `next` (which [`movable`] allows from its state), with the state's
    /// effect.
    fn move_qp(&mut self, q: ObjKey, next: QpState) {
        let moved = match next {
            QpState::Reset => {
                self.reset_qp(q);
                true
            }
            QpState::Error => {
                self.drive_qp(q, |m, _, out| m.enter_error(out));
                true
            }
            QpState::Init => self
                .verbs
                .qps
                .get_mut(&q)
                .expect("live QP")
                .machine
                .init_again(),
            QpState::Rtr => {
                let m = &mut self.verbs.qps.get_mut(&q).expect("live QP").machine;
                m.enter_rtr()
            }
            QpState::Rts => self.drive_qp(q, |m, _, out| m.resume(out)),
            QpState::Sqd => {
                // rxe on 6.12 drains again on every move to SQD (`rxe_qp_sqd`), SQD -> SQD
                // included; on 6.1 only from RTS (`rxe_qp_drain`: not when DRAINED). Measured.
                let again = self.cfg.kernel != KernelProfile::Linux61;
                self.drive_qp(q, |m, _, out| m.drain(again, out))
            }
            QpState::Sqe => false,
        };
        debug_assert!(moved, "movable() allowed the move to {next:?}");
    }
}

/// Whether the simulator's machines move a QP in `actual` to `next`.
fn movable(actual: QpState, next: QpState) -> bool {
    use QpState::*;
    match next {
        Reset | Error => true,
        Init => matches!(actual, Reset | Init),
        Rtr => actual == Init,
        Rts => matches!(actual, Rtr | Rts | Sqd),
        Sqd => matches!(actual, Rts | Sqd),
        Sqe => false,
    }
}

/// The checks of values before any transition is looked at: libibverbs' and uverbs'
/// (`modify_qp`: the states named, the ports), the kernel's (`_ib_modify_qp`: no alternate
/// path on RoCE) and rxe's (`rxe_modify_qp`: the standard bits; `rxe_qp_chk_attr`: path MTU,
/// read depth, timeout). A pkey index is taken whatever it is, as rxe on 6.1 and 6.12 took
/// index 1 of its one-entry table (measured). On iWARP only the checks before the driver and
/// siw's own (the standard bits).
fn check_values(
    attr: &QpAttr,
    mask: M,
    transport: Transport,
) -> std::result::Result<(), (Errno, String)> {
    let einval = |why: String| Err((Errno::EINVAL, why));
    if mask.contains(M::STATE) && attr.qp_state.is_none() {
        return einval("IBV_QP_STATE without qp_state".into());
    }
    if mask.contains(M::CUR_STATE) && attr.cur_qp_state.is_none() {
        return einval("IBV_QP_CUR_STATE without cur_qp_state".into());
    }
    if mask.intersects(M::PORT | M::AV) && attr.ah_attr.port_num != 1 {
        let p = attr.ah_attr.port_num;
        return einval(format!("port {p}: the device has port 1 only"));
    }
    let beyond = mask.without(M::STANDARD);
    if !beyond.is_empty() {
        return Err((
            Errno::EOPNOTSUPP,
            format!("{beyond}: not a driver's attribute"),
        ));
    }
    if transport == Transport::Iwarp {
        return Ok(());
    }
    if mask.contains(M::ALT_PATH) {
        return match transport {
            Transport::Roce => einval("IBV_QP_ALT_PATH: no alternate path on RoCE".into()),
            _ => Err((Errno::EOPNOTSUPP, "alternate paths are not modelled".into())),
        };
    }
    if mask.contains(M::PATH_MTU) && attr.path_mtu > MAX_PATH_MTU {
        return einval(format!("path MTU {} above 4096 (5)", attr.path_mtu));
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > MAX_QP_RD_ATOM {
        let n = attr.max_rd_atomic;
        return einval(format!(
            "max_rd_atomic {n} above the device's {MAX_QP_RD_ATOM}"
        ));
    }
    if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
        return einval(format!("timeout {} above 31", attr.timeout));
    }
    Ok(())
}

/// The mask `modify_qp` gives a move of a QP of type `qp_type` to `to`, with its attributes
/// as `modify_qp` takes them (the port 1 when 0; an RC or UC QP's pkey index 0).
pub(crate) fn transition_mask(qp_type: QpType, to: QpState, attr: &QpAttr) -> (QpAttr, M) {
    let mut a = *attr;
    if a.ah_attr.port_num == 0 {
        a.ah_attr.port_num = 1;
    }
    let ud = qp_type == QpType::Ud;
    let rc = qp_type == QpType::Rc;
    let mask = match to {
        QpState::Init if ud => M::PKEY_INDEX | M::PORT | M::QKEY,
        QpState::Init => {
            a.pkey_index = 0;
            M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT
        }
        QpState::Rtr if ud => M::EMPTY,
        QpState::Rtr => {
            let uc = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            match rc {
                true => uc | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
                false => uc,
            }
        }
        QpState::Rts if rc => {
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        }
        QpState::Rts => M::SQ_PSN,
        _ => M::EMPTY,
    };
    (a, mask | M::STATE)
}
