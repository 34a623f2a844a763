//! The kernel's table of QP state transitions (drivers/infiniband/core/verbs.c,
//! `qp_state_table` and `ib_modify_qp_is_ok`): which transitions exist, and which attributes
//! each requires and allows, per QP type. rxe checks every `ibv_modify_qp` against it; siw
//! does not (see [`super::DataPath::modify_qp_with_mask`]).

use std::fmt;

use super::{QpAttrMask as M, QpState};
use crate::QpType;

/// What a transition of the table asks of the attribute mask, `IBV_QP_STATE` aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTransition {
    /// The attributes the transition must be given.
    pub required: M,
    /// The attributes it may be given besides.
    pub optional: M,
}

/// Why the table refuses a modification (`ib_modify_qp_is_ok` false: EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpModifyRefusal {
    /// `IBV_QP_CUR_STATE` names a state other than RTR, RTS, SQD and SQE.
    CurState(QpState),
    /// The table has no such transition.
    NoTransition(QpState, QpState),
    /// Required attributes are missing from the mask.
    Missing(QpState, QpState, M),
    /// The mask has attributes the transition does not take.
    NotAllowed(QpState, QpState, M),
}

impl fmt::Display for QpModifyRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QpModifyRefusal::CurState(s) => write!(
                f,
                "IBV_QP_CUR_STATE {s:?}: only RTR, RTS, SQD or SQE may be named"
            ),
            QpModifyRefusal::NoTransition(a, b) => write!(f, "no transition {a:?} -> {b:?}"),
            QpModifyRefusal::Missing(a, b, m) => {
                write!(f, "{a:?} -> {b:?} requires {m}, missing from the mask")
            }
            QpModifyRefusal::NotAllowed(a, b, m) => {
                write!(f, "{a:?} -> {b:?} does not take {m}")
            }
        }
    }
}

/// The transition `from` → `to` of a QP of type `qp_type`, if the kernel's table has it.
pub fn qp_transition(qp_type: QpType, from: QpState, to: QpState) -> Option<QpTransition> {
    use QpState::*;
    let none = M::EMPTY;
    let by_type = |ud: M, uc: M, rc: M| match qp_type {
        QpType::Ud => ud,
        QpType::Uc => uc,
        QpType::Rc => rc,
    };
    let t = |required, optional| Some(QpTransition { required, optional });
    let sqd_rts_opt = by_type(
        M::CUR_STATE | M::QKEY,
        M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
        M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
    );
    let init_keys = by_type(
        M::PKEY_INDEX | M::PORT | M::QKEY,
        M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    );
    match (from, to) {
        (_, Reset) => t(none, none),
        (Reset, Error) => None,
        (_, Error) => t(none, none),
        (Reset, Init) => t(init_keys, none),
        (Init, Init) => t(none, init_keys),
        (Init, Rtr) => {
            let uc = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            let required = by_type(none, uc, uc | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER);
            let connected = M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX;
            let optional = by_type(M::PKEY_INDEX | M::QKEY, connected, connected);
            t(required, optional)
        }
        (Rtr, Rts) => {
            let rc = M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
            t(by_type(M::SQ_PSN, M::SQ_PSN, rc), sqd_rts_opt)
        }
        (Rts | Sqd, Rts) => t(none, sqd_rts_opt),
        (Rts, Sqd) => t(none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => {
            let uc = M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE;
            let rc = uc
                | M::PORT
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER;
            t(none, by_type(M::PKEY_INDEX | M::QKEY, uc, rc))
        }
        (Sqe, Rts) => t(
            none,
            by_type(M::CUR_STATE | M::QKEY, M::CUR_STATE | M::ACCESS_FLAGS, none),
        ),
        _ => None,
    }
}

/// `ib_modify_qp_is_ok`: whether a QP of type `qp_type` may go from `cur` to `next` with the
/// attributes of `mask` (`IBV_QP_STATE` is always allowed).
pub fn modify_qp_is_ok(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
    mask: M,
) -> Result<(), QpModifyRefusal> {
    use QpState::*;
    if mask.contains(M::CUR_STATE) && !matches!(cur, Rtr | Rts | Sqd | Sqe) {
        return Err(QpModifyRefusal::CurState(cur));
    }
    let t = qp_transition(qp_type, cur, next).ok_or(QpModifyRefusal::NoTransition(cur, next))?;
    let missing = t.required.without(mask);
    if !missing.is_empty() {
        return Err(QpModifyRefusal::Missing(cur, next, missing));
    }
    let extra = mask.without(t.required | t.optional | M::STATE);
    if !extra.is_empty() {
        return Err(QpModifyRefusal::NotAllowed(cur, next, extra));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rts_to_rts_takes_the_rnr_timer_on_rc_only_and_never_the_timeout() {
        let rnr = M::STATE | M::MIN_RNR_TIMER;
        assert_eq!(
            modify_qp_is_ok(QpType::Rc, QpState::Rts, QpState::Rts, rnr),
            Ok(())
        );
        assert_eq!(
            modify_qp_is_ok(QpType::Uc, QpState::Rts, QpState::Rts, rnr),
            Err(QpModifyRefusal::NotAllowed(
                QpState::Rts,
                QpState::Rts,
                M::MIN_RNR_TIMER
            ))
        );
        let timeout = M::TIMEOUT;
        assert!(modify_qp_is_ok(QpType::Rc, QpState::Rts, QpState::Rts, timeout).is_err());
        assert!(modify_qp_is_ok(QpType::Rc, QpState::Sqd, QpState::Sqd, timeout).is_ok());
    }

    #[test]
    fn init_to_rtr_needs_the_path_and_reset_has_no_way_to_error() {
        let some = M::STATE | M::AV | M::PATH_MTU | M::RQ_PSN;
        let r = modify_qp_is_ok(QpType::Rc, QpState::Init, QpState::Rtr, some);
        let missing = M::DEST_QPN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        assert_eq!(
            r,
            Err(QpModifyRefusal::Missing(
                QpState::Init,
                QpState::Rtr,
                missing
            ))
        );
        assert_eq!(
            modify_qp_is_ok(QpType::Ud, QpState::Init, QpState::Rtr, M::STATE),
            Ok(())
        );
        assert!(modify_qp_is_ok(QpType::Rc, QpState::Reset, QpState::Error, M::STATE).is_err());
        let cur = M::STATE | M::CUR_STATE;
        assert_eq!(
            modify_qp_is_ok(QpType::Rc, QpState::Init, QpState::Init, cur),
            Err(QpModifyRefusal::CurState(QpState::Init))
        );
    }
}
