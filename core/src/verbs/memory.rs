//! Memory regions: access flags and the descriptor `reg_mr` returns.

use std::fmt;
use std::ops::BitOr;

use crate::MrHandle;

/// `enum ibv_access_flags`: what the device may do with a region.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// No remote access; the device may only read the region (sends from it).
    pub const NONE: AccessFlags = AccessFlags(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: the device may write it (receives, RDMA read targets).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA-write it (needs LOCAL_WRITE).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA-read it.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it (needs LOCAL_WRITE).
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;

    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AccessFlags({:#x})", self.0)
    }
}

/// A registered memory region, as `struct ibv_mr` describes it: the keys, the address the
/// device knows it by, its length and access. A plain descriptor (`Copy`): the memory itself
/// belongs to the backend from `reg_mr` to `dereg_mr`, which hands the buffer back, and is
/// read and written only through `mr_read` and `mr_write`. So no safe sequence of calls can
/// free, move or alias memory the device may still touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// The handle to read, write and deregister it with.
    pub handle: MrHandle,
    /// The local key, for scatter/gather entries of local work requests.
    pub lkey: u32,
    /// The remote key, for peers' RDMA reads and writes.
    pub rkey: u32,
    /// The address of the region's first byte as the device knows it (`mr->addr`): a
    /// scatter/gather entry's `addr`, and a peer's `remote_addr`, lie in
    /// `addr..addr + length`.
    pub addr: u64,
    /// Length in bytes.
    pub length: usize,
    /// The access granted at registration.
    pub access: AccessFlags,
}

impl MemoryRegion {
    /// The device address of byte `offset` of the region.
    pub fn addr_at(&self, offset: usize) -> u64 {
        self.addr + offset as u64
    }

    /// A scatter/gather entry over `len` bytes of the region from `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> crate::verbs::Sge {
        crate::verbs::Sge {
            addr: self.addr_at(offset),
            length: len,
            lkey: self.lkey,
        }
    }
}
