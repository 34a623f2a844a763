//! Checked handles to ids, event channels and the verbs objects of the data path.
//!
//! A handle is a plain number; the backend that issued it looks it up in its registry of live
//! objects on every call, so a stale handle (its object destroyed) or a foreign one (issued by
//! another backend value) is an error, never a dangling pointer.

use std::fmt;

/// A handle to an `rdma_cm_id`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdHandle(u64);

/// A handle to an event channel (`struct rdma_event_channel`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelHandle(u64);

/// A handle to a protection domain (`struct ibv_pd`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PdHandle(u64);

/// A handle to a registered memory region (`struct ibv_mr`); its memory is reached only
/// through the backend (see [`crate::verbs::MemoryRegion`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MrHandle(u64);

/// A handle to a completion queue (`struct ibv_cq`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CqHandle(u64);

/// A handle to a QP (`struct ibv_qp`): an id's (`id->qp`) or one made apart from any id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QpHandle(u64);

/// A handle to a shared receive queue (`struct ibv_srq`): receives any QP attached to it
/// consumes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SrqHandle(u64);

/// A handle to a completion channel (`struct ibv_comp_channel`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CompChannelHandle(u64);

/// A handle to an address handle (`struct ibv_ah`): where a UD send goes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AhHandle(u64);

macro_rules! handle_impls {
    ($ty:ident, $prefix:literal) => {
        impl $ty {
            /// Wraps a backend's raw handle value (for backend implementors).
            pub const fn from_raw(raw: u64) -> Self {
                $ty(raw)
            }

            /// The backend's raw handle value.
            pub const fn raw(self) -> u64 {
                self.0
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // Only the backend-local part: which backend value issued the handle (the high
                // half) is an implementation detail that must not reach a simulator's trace.
                write!(f, concat!($prefix, "{}"), self.0 & 0xffff_ffff)
            }
        }
    };
}

handle_impls!(IdHandle, "id");
handle_impls!(ChannelHandle, "ch");
handle_impls!(PdHandle, "pd");
handle_impls!(MrHandle, "mr");
handle_impls!(CqHandle, "cq");
handle_impls!(QpHandle, "qp");
handle_impls!(CompChannelHandle, "cc");
handle_impls!(AhHandle, "ah");
handle_impls!(SrqHandle, "srq");
