//! Memory regions that own their buffer, and the process-wide table of registered keys.
//!
//! Every region registered by any backend value of the process is in [`KEYS`], by device
//! context and local key, from just before its keys become valid on the device to just after
//! they stop being valid: `reg_mr` and `dereg_mr` hold the table's write lock across
//! `ibv_reg_mr`/`ibv_dereg_mr`, and every post holds its read lock across `ibv_post_send`/
//! `ibv_post_recv`. So a post either sees the region in the table (and counts itself against
//! it, which makes `dereg_mr` refuse) or runs entirely after the keys died (and the device
//! fails the request without touching the memory) — whatever keys the application puts in
//! its scatter/gather entries, from any number of threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::ffi::RawMr;
use crate::registry::lock;

/// A registered region.
pub(crate) struct Region {
    /// The registration and its buffer.
    pub raw: RawMr,
    /// Its device context's address.
    pub ctx: usize,
    /// Posted requests not known to be complete whose entries name it.
    pub busy: AtomicU32,
    /// Serialises `mr_read`/`mr_write` (the device's own accesses are outside Rust).
    pub cpu: Mutex<()>,
}

impl Region {
    /// Counts one more request using the region.
    pub(crate) fn hold(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// Releases what [`Region::hold`] counted.
    pub(crate) fn release(&self) {
        self.busy.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many requests use it.
    pub(crate) fn busy(&self) -> u32 {
        self.busy.load(Ordering::Acquire)
    }

    /// Copies bytes out (`None`: the range is not inside).
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Option<()> {
        let _cpu = lock(&self.cpu);
        self.raw.read(offset, out)
    }

    /// Copies bytes in (`None`: the range is not inside).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Option<()> {
        let _cpu = lock(&self.cpu);
        self.raw.write(offset, data)
    }
}

/// Releases the regions a finished (or discarded) request held.
pub(crate) fn release_all(holds: &[Arc<Region>]) {
    for r in holds {
        r.release();
    }
}

/// The registered regions of the process by (device context, lkey).
pub(crate) type KeyTable = BTreeMap<(usize, u32), Arc<Region>>;

static KEYS: RwLock<KeyTable> = RwLock::new(BTreeMap::new());

/// The table for a post (shared).
pub(crate) fn keys_for_post() -> RwLockReadGuard<'static, KeyTable> {
    KEYS.read().unwrap_or_else(|p| p.into_inner())
}

/// The table for a registration or deregistration (exclusive).
pub(crate) fn keys_for_change() -> RwLockWriteGuard<'static, KeyTable> {
    KEYS.write().unwrap_or_else(|p| p.into_inner())
}
