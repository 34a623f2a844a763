//! Port spaces and QP types.

use std::fmt;

/// A port space (`enum rdma_port_space`). Any other value makes `create_id` fail with EINVAL,
/// exactly as the kernel answers, so the type admits raw values.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSpace(pub u32);

impl PortSpace {
    /// `RDMA_PS_IPOIB`: UD over an InfiniBand link layer, sharing IPoIB's multicast groups.
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// `RDMA_PS_TCP`: reliable connected (RC) connections.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// `RDMA_PS_UDP`: unreliable datagrams (UD), SIDR resolution, multicast.
    pub const UDP: PortSpace = PortSpace(0x0111);
    /// `RDMA_PS_IB`: native IB service ids; any QP type.
    pub const IB: PortSpace = PortSpace(0x013F);

    /// Whether the kernel knows this port space.
    pub fn is_valid(self) -> bool {
        matches!(
            self,
            PortSpace::IPOIB | PortSpace::TCP | PortSpace::UDP | PortSpace::IB
        )
    }

    /// The QP type librdmacm's `rdma_create_id` gives ids of this port space.
    pub fn default_qp_type(self) -> QpType {
        match self {
            PortSpace::UDP | PortSpace::IPOIB => QpType::Ud,
            _ => QpType::Rc,
        }
    }
}

impl fmt::Debug for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PortSpace::IPOIB => f.write_str("RDMA_PS_IPOIB"),
            PortSpace::TCP => f.write_str("RDMA_PS_TCP"),
            PortSpace::UDP => f.write_str("RDMA_PS_UDP"),
            PortSpace::IB => f.write_str("RDMA_PS_IB"),
            PortSpace(other) => write!(f, "PortSpace({other:#x})"),
        }
    }
}

/// A queue pair type (the subset the CM deals with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
}

impl QpType {
    /// Whether this QP type uses connections (REQ/REP) rather than SIDR.
    pub fn is_connected(self) -> bool {
        !matches!(self, QpType::Ud)
    }
}
