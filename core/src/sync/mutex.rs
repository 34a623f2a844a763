//! A mutual-exclusion lock whose waits are scheduling points of a simulated fabric.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, PoisonError, TryLockError};

use super::{Binding, Sched};
use crate::error::{Call, Result};
use crate::runtime::Runtime;

/// A mutual-exclusion lock (std's `Mutex` with the scheduling of [`crate::sync`]).
pub struct Mutex<T> {
    binding: Binding,
    /// The thread holding the lock, for deadlock reports (simulated processes only).
    holder: Arc<std::sync::Mutex<Option<String>>>,
    inner: std::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`, labelled in deadlock reports by where it was created.
    #[track_caller]
    pub fn new(value: T) -> Self {
        Mutex::with_binding(Binding::new("mutex"), value)
    }

    /// A mutex holding `value`, labelled `name` in deadlock reports.
    pub fn named(name: &str, value: T) -> Self {
        Mutex::with_binding(Binding::labelled(format!("mutex '{name}'")), value)
    }

    fn with_binding(binding: Binding, value: T) -> Self {
        Mutex {
            binding,
            holder: Arc::new(std::sync::Mutex::new(None)),
            inner: std::sync::Mutex::new(value),
        }
    }

    /// Takes the lock, waiting while another thread holds it. In a simulated process, fails
    /// with EDEADLK when the holder can never release it (the report names the holder).
    pub fn lock(&self) -> Result<MutexGuard<'_, T>> {
        match self.binding.sched(Call::MutexLock)? {
            Sched::Os => {
                let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(self.guard(inner, None))
            }
            Sched::Sim(rt) => {
                rt.yield_point();
                loop {
                    if let Some(inner) = self.try_inner() {
                        return Ok(self.guard(inner, Some(rt)));
                    }
                    let holder = Arc::clone(&self.holder);
                    let what = self.binding.describe(Call::MutexLock, move || {
                        match holder.lock().unwrap_or_else(|e| e.into_inner()).as_deref() {
                            Some(name) => format!(", held by process {name}"),
                            None => String::new(),
                        }
                    });
                    rt.block(Call::MutexLock, self.binding.key(), None, what)?;
                }
            }
        }
    }

    /// Takes the lock if no thread holds it.
    pub fn try_lock(&self) -> Result<Option<MutexGuard<'_, T>>> {
        let rt = match self.binding.sched(Call::MutexLock)? {
            Sched::Os => None,
            Sched::Sim(rt) => Some(rt),
        };
        Ok(self.try_inner().map(|inner| self.guard(inner, rt)))
    }

    /// The value, taking the mutex apart.
    pub fn into_inner(self) -> T {
        self.inner
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn try_inner(&self) -> Option<std::sync::MutexGuard<'_, T>> {
        match self.inner.try_lock() {
            Ok(inner) => Some(inner),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn guard<'a>(
        &'a self,
        inner: std::sync::MutexGuard<'a, T>,
        rt: Option<Arc<dyn Runtime>>,
    ) -> MutexGuard<'a, T> {
        if let Some(rt) = &rt {
            *self.holder.lock().unwrap_or_else(|e| e.into_inner()) = Some(rt.thread_name());
        }
        MutexGuard {
            mutex: self,
            inner: Some(inner),
            rt,
        }
    }

    /// The binding (for [`super::Condvar`]).
    pub(crate) fn binding(&self) -> &Binding {
        &self.binding
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("label", &self.binding.label())
            .finish_non_exhaustive()
    }
}

impl<T: Default> Default for Mutex<T> {
    #[track_caller]
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

/// The lock of a [`Mutex`], released when dropped (waking a thread waiting for it).
pub struct MutexGuard<'a, T> {
    mutex: &'a Mutex<T>,
    inner: Option<std::sync::MutexGuard<'a, T>>,
    rt: Option<Arc<dyn Runtime>>,
}

impl<'a, T> MutexGuard<'a, T> {
    /// The mutex this guard locks.
    pub(crate) fn mutex(&self) -> &'a Mutex<T> {
        self.mutex
    }

    /// Takes std's guard out, to wait on std's condition variable with it.
    pub(crate) fn take_os(mut self) -> std::sync::MutexGuard<'a, T> {
        self.inner.take().expect("a live guard holds std's guard")
    }

    /// Wraps std's guard back after a wait on std's condition variable.
    pub(crate) fn from_os(mutex: &'a Mutex<T>, inner: std::sync::MutexGuard<'a, T>) -> Self {
        MutexGuard {
            mutex,
            inner: Some(inner),
            rt: None,
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner
            .as_deref()
            .expect("a live guard holds std's guard")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner
            .as_deref_mut()
            .expect("a live guard holds std's guard")
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if let Some(rt) = self.rt.take() {
            *self.mutex.holder.lock().unwrap_or_else(|e| e.into_inner()) = None;
            drop(inner);
            rt.wake(self.mutex.binding.key(), 1);
        }
    }
}
