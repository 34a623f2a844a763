//! `enum ibv_qp_attr_mask`: which attributes of a [`super::QpAttr`] an `ibv_modify_qp` takes.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Not};

/// `enum ibv_qp_attr_mask`: the attributes `modify_qp_with_mask` takes from its
/// [`QpAttr`](super::QpAttr), with libibverbs' bit values. The others are not read.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QpAttrMask(pub u32);

/// The names of the bits, in bit order, for `Debug` and error messages.
const NAMES: [(QpAttrMask, &str); 22] = [
    (QpAttrMask::STATE, "STATE"),
    (QpAttrMask::CUR_STATE, "CUR_STATE"),
    (QpAttrMask::EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"),
    (QpAttrMask::ACCESS_FLAGS, "ACCESS_FLAGS"),
    (QpAttrMask::PKEY_INDEX, "PKEY_INDEX"),
    (QpAttrMask::PORT, "PORT"),
    (QpAttrMask::QKEY, "QKEY"),
    (QpAttrMask::AV, "AV"),
    (QpAttrMask::PATH_MTU, "PATH_MTU"),
    (QpAttrMask::TIMEOUT, "TIMEOUT"),
    (QpAttrMask::RETRY_CNT, "RETRY_CNT"),
    (QpAttrMask::RNR_RETRY, "RNR_RETRY"),
    (QpAttrMask::RQ_PSN, "RQ_PSN"),
    (QpAttrMask::MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
    (QpAttrMask::ALT_PATH, "ALT_PATH"),
    (QpAttrMask::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    (QpAttrMask::SQ_PSN, "SQ_PSN"),
    (QpAttrMask::MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
    (QpAttrMask::PATH_MIG_STATE, "PATH_MIG_STATE"),
    (QpAttrMask::CAP, "CAP"),
    (QpAttrMask::DEST_QPN, "DEST_QPN"),
    (QpAttrMask::RATE_LIMIT, "RATE_LIMIT"),
];

impl QpAttrMask {
    /// No attribute.
    pub const EMPTY: QpAttrMask = QpAttrMask(0);
    /// `IBV_QP_STATE`: move to `qp_state`.
    pub const STATE: QpAttrMask = QpAttrMask(1);
    /// `IBV_QP_CUR_STATE`: `cur_qp_state` is the state the transition starts from.
    pub const CUR_STATE: QpAttrMask = QpAttrMask(1 << 1);
    /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`: `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: QpAttrMask = QpAttrMask(1 << 2);
    /// `IBV_QP_ACCESS_FLAGS`: `access`.
    pub const ACCESS_FLAGS: QpAttrMask = QpAttrMask(1 << 3);
    /// `IBV_QP_PKEY_INDEX`: `pkey_index`.
    pub const PKEY_INDEX: QpAttrMask = QpAttrMask(1 << 4);
    /// `IBV_QP_PORT`: the port, `ah_attr.port_num`.
    pub const PORT: QpAttrMask = QpAttrMask(1 << 5);
    /// `IBV_QP_QKEY`: `qkey`.
    pub const QKEY: QpAttrMask = QpAttrMask(1 << 6);
    /// `IBV_QP_AV`: the path to the peer, `ah_attr`.
    pub const AV: QpAttrMask = QpAttrMask(1 << 7);
    /// `IBV_QP_PATH_MTU`: `path_mtu`.
    pub const PATH_MTU: QpAttrMask = QpAttrMask(1 << 8);
    /// `IBV_QP_TIMEOUT`: `timeout`.
    pub const TIMEOUT: QpAttrMask = QpAttrMask(1 << 9);
    /// `IBV_QP_RETRY_CNT`: `retry_cnt`.
    pub const RETRY_CNT: QpAttrMask = QpAttrMask(1 << 10);
    /// `IBV_QP_RNR_RETRY`: `rnr_retry`.
    pub const RNR_RETRY: QpAttrMask = QpAttrMask(1 << 11);
    /// `IBV_QP_RQ_PSN`: `rq_psn`.
    pub const RQ_PSN: QpAttrMask = QpAttrMask(1 << 12);
    /// `IBV_QP_MAX_QP_RD_ATOMIC`: `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 13);
    /// `IBV_QP_ALT_PATH`: the alternate path (which [`super::QpAttr`] does not carry).
    pub const ALT_PATH: QpAttrMask = QpAttrMask(1 << 14);
    /// `IBV_QP_MIN_RNR_TIMER`: `min_rnr_timer`.
    pub const MIN_RNR_TIMER: QpAttrMask = QpAttrMask(1 << 15);
    /// `IBV_QP_SQ_PSN`: `sq_psn`.
    pub const SQ_PSN: QpAttrMask = QpAttrMask(1 << 16);
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`: `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 17);
    /// `IBV_QP_PATH_MIG_STATE`: the path migration state (passed as `IBV_MIG_MIGRATED`, which
    /// [`super::QpAttr`] does not carry otherwise).
    pub const PATH_MIG_STATE: QpAttrMask = QpAttrMask(1 << 18);
    /// `IBV_QP_CAP`: new capacities (no transition of an RC, UC or UD QP takes them).
    pub const CAP: QpAttrMask = QpAttrMask(1 << 19);
    /// `IBV_QP_DEST_QPN`: `dest_qp_num`.
    pub const DEST_QPN: QpAttrMask = QpAttrMask(1 << 20);
    /// `IBV_QP_RATE_LIMIT` (raw packet QPs only; the drivers here refuse it, EOPNOTSUPP).
    pub const RATE_LIMIT: QpAttrMask = QpAttrMask(1 << 25);
    /// The bits a driver takes at all (`IB_QP_ATTR_STANDARD_BITS`: STATE to DEST_QPN); rxe
    /// and siw refuse any other with EOPNOTSUPP.
    pub const STANDARD: QpAttrMask = QpAttrMask((1 << 21) - 1);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: QpAttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set here.
    pub const fn intersects(self, other: QpAttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits set here and not in `other`.
    pub const fn without(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & !other.0)
    }
}

impl BitOr for QpAttrMask {
    type Output = QpAttrMask;

    fn bitor(self, rhs: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | rhs.0)
    }
}

impl BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, rhs: QpAttrMask) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for QpAttrMask {
    type Output = QpAttrMask;

    fn bitand(self, rhs: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & rhs.0)
    }
}

impl Not for QpAttrMask {
    type Output = QpAttrMask;

    fn not(self) -> QpAttrMask {
        QpAttrMask(!self.0)
    }
}

/// The bits by name (`STATE | TIMEOUT`), unnamed ones in hexadecimal, `EMPTY` for none.
impl fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("EMPTY");
        }
        let mut rest = *self;
        let mut first = true;
        for (bit, name) in NAMES {
            if self.contains(bit) {
                f.write_str(if first { "" } else { " | " })?;
                f.write_str(name)?;
                rest = rest.without(bit);
                first = false;
            }
        }
        if !rest.is_empty() {
            write!(f, "{}{:#x}", if first { "" } else { " | " }, rest.0)?;
        }
        Ok(())
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QpAttrMask({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::QpAttrMask as M;

    #[test]
    fn bits_have_libibverbs_values_and_print_by_name() {
        assert_eq!(M::DEST_QPN.0, 0x10_0000);
        assert_eq!(M::RATE_LIMIT.0, 0x200_0000);
        assert_eq!(M::STANDARD.0, 0x1f_ffff);
        let m = M::STATE | M::MIN_RNR_TIMER | M(1 << 30);
        assert_eq!(m.to_string(), "STATE | MIN_RNR_TIMER | 0x40000000");
        assert_eq!(format!("{:?}", M::EMPTY), "QpAttrMask(EMPTY)");
        assert!(m.contains(M::STATE) && !m.contains(M::STATE | M::TIMEOUT));
        assert_eq!(m.without(M(1 << 30)) & !M::STATE, M::MIN_RNR_TIMER);
    }
}
