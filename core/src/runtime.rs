//! The scheduler under [`crate::thread`] and [`crate::sync`]: on a simulated fabric, the
//! fabric's own (seeded, virtual-time) scheduler; everywhere else, the operating system's.
//!
//! A backend whose threads are scheduled by something other than the OS (the simulator)
//! implements [`Runtime`] and enters it on each thread it runs ([`enter`]). The threads and
//! primitives of this crate ask [`current`] at every operation: when a runtime is entered
//! they block, wake and spawn through it, so that which thread runs next stays the
//! simulator's (seeded) decision and a deadlock is reported instead of hanging; when none is,
//! they are std's threads, mutexes and condition variables.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Call, Result};

/// Describes, when a deadlock is reported, what a blocked thread waits for (it reads the
/// primitive's state then, e.g. which thread holds a mutex).
pub type Describe = Arc<dyn Fn() -> String + Send + Sync>;

/// How a wait through a [`Runtime`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// Another thread woke the key waited on ([`Runtime::wake`]).
    Notified,
    /// The wait's timeout passed first.
    TimedOut,
}

/// A scheduler that runs threads one at a time and decides which runs next (a simulated
/// fabric's). Every method is called from a thread the runtime runs (one it entered).
pub trait Runtime: Send + Sync {
    /// A number that tells this runtime apart from every other one of the process (a
    /// primitive used under one runtime may not be used under another).
    fn identity(&self) -> u64;

    /// Whether threads of this runtime may still run (a primitive it used becomes free for
    /// ordinary threads when it no longer is).
    fn running(&self) -> bool;

    /// The name of the calling thread, for deadlock reports.
    fn thread_name(&self) -> String;

    /// A scheduling point: the runtime may run another thread before returning.
    fn yield_point(&self);

    /// Gives way: another thread that can run goes first; when none can, the runtime moves
    /// on (a simulator runs its next timed action), so that a thread spinning on a flag
    /// cannot stall the others.
    fn yield_now(&self);

    /// Blocks the caller until [`Runtime::wake`] names `key`, or until `timeout` (virtual
    /// time on a simulator) passes. Fails with EDEADLK (naming `call` and what `what` says)
    /// when nothing can ever wake it.
    fn block(
        &self,
        call: Call,
        key: u64,
        timeout: Option<Duration>,
        what: Describe,
    ) -> Result<Woken>;

    /// Wakes up to `count` threads blocked on `key`, in the order they blocked.
    fn wake(&self, key: u64, count: usize);

    /// Starts `body` as a new thread named `name`, of the caller's host.
    fn spawn(&self, name: &str, body: Box<dyn FnOnce() + Send>) -> Result<()>;

    /// A random number for the application, from the runtime's seed.
    fn random_u64(&self) -> u64;
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Runtime>>> = const { RefCell::new(None) };
}

/// Makes `runtime` the one the calling thread's threads and primitives use, until the
/// returned guard is dropped (a backend calls this on each thread it runs).
pub fn enter(runtime: Arc<dyn Runtime>) -> EnterGuard {
    let previous = CURRENT.with(|c| c.replace(Some(runtime)));
    EnterGuard { previous }
}

/// The runtime the calling thread runs under, if any.
pub fn current() -> Option<Arc<dyn Runtime>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Restores the calling thread's previous runtime when dropped (see [`enter`]).
#[must_use = "the runtime is left as soon as the guard is dropped"]
pub struct EnterGuard {
    previous: Option<Arc<dyn Runtime>>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A number no other primitive of this process has (the key it blocks and wakes on).
pub(crate) fn new_key() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
