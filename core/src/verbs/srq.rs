//! Shared receive queues: their attributes (`struct ibv_srq_attr`) and which of them
//! `modify_srq` changes (`enum ibv_srq_attr_mask`).

/// The attributes of a shared receive queue (`struct ibv_srq_attr`): what `create_srq` asks
/// for, what it grants, what `query_srq` reads and what `modify_srq` sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// How many receives the queue holds.
    pub max_wr: u32,
    /// Scatter/gather entries per receive.
    pub max_sge: u32,
    /// The limit: armed (non-zero), the device raises IBV_EVENT_SRQ_LIMIT_REACHED once when
    /// fewer receives than this are posted, and disarms it (reads 0 again).
    pub srq_limit: u32,
}

impl SrqAttr {
    /// An SRQ of `max_wr` receives of `max_sge` entries, its limit not armed.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        SrqAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        }
    }
}

/// Which attributes `modify_srq` changes (`enum ibv_srq_attr_mask`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SrqAttrMask(pub u32);

impl SrqAttrMask {
    /// `IBV_SRQ_MAX_WR`: resize the queue to `max_wr` receives.
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1);
    /// `IBV_SRQ_LIMIT`: arm the limit at `srq_limit` (0 disarms it).
    pub const LIMIT: SrqAttrMask = SrqAttrMask(2);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: SrqAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SrqAttrMask {
    type Output = SrqAttrMask;

    fn bitor(self, rhs: SrqAttrMask) -> SrqAttrMask {
        SrqAttrMask(self.0 | rhs.0)
    }
}
