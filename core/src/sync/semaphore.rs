//! A counting semaphore whose waits are scheduling points of a simulated fabric.

use std::sync::PoisonError;

use super::{Binding, Sched};
use crate::error::{Call, Result};

/// A counting semaphore (POSIX `sem_t`'s `sem_wait`/`sem_post`, which C RDMA programs hand
/// work between threads with), with the scheduling of [`crate::sync`].
pub struct Semaphore {
    binding: Binding,
    permits: std::sync::Mutex<usize>,
    os: std::sync::Condvar,
}

impl Semaphore {
    /// A semaphore with `permits` permits, labelled in deadlock reports by where it was
    /// created.
    #[track_caller]
    pub fn new(permits: usize) -> Self {
        Semaphore::with_binding(Binding::new("semaphore"), permits)
    }

    /// A semaphore with `permits` permits, labelled `name` in deadlock reports.
    pub fn named(name: &str, permits: usize) -> Self {
        Semaphore::with_binding(Binding::labelled(format!("semaphore '{name}'")), permits)
    }

    fn with_binding(binding: Binding, permits: usize) -> Self {
        Semaphore {
            binding,
            permits: std::sync::Mutex::new(permits),
            os: std::sync::Condvar::new(),
        }
    }

    /// Takes a permit, waiting while there is none (`sem_wait`).
    pub fn acquire(&self) -> Result<()> {
        let call = Call::SemaphoreAcquire;
        match self.binding.sched(call)? {
            Sched::Os => {
                let mut permits = self.permits.lock().unwrap_or_else(PoisonError::into_inner);
                while *permits == 0 {
                    permits = self
                        .os
                        .wait(permits)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                *permits -= 1;
                Ok(())
            }
            Sched::Sim(rt) => {
                rt.yield_point();
                while !self.take_one() {
                    let what = self.binding.describe(call, String::new);
                    rt.block(call, self.binding.key(), None, what)?;
                }
                Ok(())
            }
        }
    }

    /// Takes a permit if there is one (`sem_trywait`).
    pub fn try_acquire(&self) -> Result<bool> {
        if let Sched::Sim(rt) = self.binding.sched(Call::SemaphoreAcquire)? {
            rt.yield_point();
        }
        Ok(self.take_one())
    }

    /// Adds a permit, waking a waiting thread (`sem_post`).
    pub fn release(&self) -> Result<()> {
        let sched = self.binding.sched(Call::SemaphoreAcquire)?;
        *self.permits.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        match sched {
            Sched::Os => self.os.notify_one(),
            Sched::Sim(rt) => {
                rt.wake(self.binding.key(), 1);
                rt.yield_point();
            }
        }
        Ok(())
    }

    /// The permits available now.
    pub fn available(&self) -> usize {
        *self.permits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take_one(&self) -> bool {
        let mut permits = self.permits.lock().unwrap_or_else(PoisonError::into_inner);
        let some = *permits > 0;
        if some {
            *permits -= 1;
        }
        some
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("label", &self.binding.label())
            .field("available", &self.available())
            .finish()
    }
}
