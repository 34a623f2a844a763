//! A condition variable whose waits are scheduling points of a simulated fabric.

use std::sync::PoisonError;
use std::time::Duration;

use super::{Binding, MutexGuard, Sched};
use crate::error::{Call, Result};
use crate::runtime::Woken;

/// A condition variable (std's `Condvar` with the scheduling of [`crate::sync`]), used with
/// a [`super::Mutex`]. As with std's, a wait may end without a notification: wait in a loop
/// that checks the condition.
pub struct Condvar {
    binding: Binding,
    os: std::sync::Condvar,
}

impl Condvar {
    /// A condition variable, labelled in deadlock reports by where it was created.
    #[track_caller]
    pub fn new() -> Self {
        Condvar {
            binding: Binding::new("condition variable"),
            os: std::sync::Condvar::new(),
        }
    }

    /// A condition variable labelled `name` in deadlock reports.
    pub fn named(name: &str) -> Self {
        Condvar {
            binding: Binding::labelled(format!("condition variable '{name}'")),
            os: std::sync::Condvar::new(),
        }
    }

    /// Releases `guard`'s mutex, waits for a notification, and takes the mutex again.
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> Result<MutexGuard<'a, T>> {
        self.wait_inner(guard, None).map(|(guard, _)| guard)
    }

    /// As [`Condvar::wait`], giving up after `timeout` (virtual time in a simulated process);
    /// the flag says whether the timeout passed.
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> Result<(MutexGuard<'a, T>, bool)> {
        self.wait_inner(guard, Some(timeout))
    }

    fn wait_inner<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Option<Duration>,
    ) -> Result<(MutexGuard<'a, T>, bool)> {
        let mutex = guard.mutex();
        match self.binding.sched(Call::CondvarWait)? {
            Sched::Os => {
                let inner = guard.take_os();
                let (inner, timed_out) = match timeout {
                    None => (
                        self.os.wait(inner).unwrap_or_else(PoisonError::into_inner),
                        false,
                    ),
                    Some(t) => {
                        let (inner, r) = self
                            .os
                            .wait_timeout(inner, t)
                            .unwrap_or_else(PoisonError::into_inner);
                        (inner, r.timed_out())
                    }
                };
                Ok((MutexGuard::from_os(mutex, inner), timed_out))
            }
            Sched::Sim(rt) => {
                // Nothing runs between the release and the block: no notification is lost.
                drop(guard);
                let mutex_label = mutex.binding().label();
                let what = self.binding.describe(Call::CondvarWait, move || {
                    format!(" (with the {mutex_label})")
                });
                let woken = rt.block(Call::CondvarWait, self.binding.key(), timeout, what)?;
                Ok((mutex.lock()?, woken == Woken::TimedOut))
            }
        }
    }

    /// Wakes one waiting thread, if any.
    pub fn notify_one(&self) -> Result<()> {
        self.notify(1)
    }

    /// Wakes every waiting thread.
    pub fn notify_all(&self) -> Result<()> {
        self.notify(usize::MAX)
    }

    fn notify(&self, count: usize) -> Result<()> {
        match self.binding.sched(Call::CondvarWait)? {
            Sched::Os if count == 1 => self.os.notify_one(),
            Sched::Os => self.os.notify_all(),
            Sched::Sim(rt) => rt.wake(self.binding.key(), count),
        }
        Ok(())
    }
}

impl Default for Condvar {
    #[track_caller]
    fn default() -> Self {
        Condvar::new()
    }
}

impl std::fmt::Debug for Condvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condvar")
            .field("label", &self.binding.label())
            .finish_non_exhaustive()
    }
}
