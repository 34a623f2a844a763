//! Threads that run both on a simulated fabric and on the real backend: in a simulated
//! process, [`spawn`] starts another process of the same host, scheduled by the fabric (seeded,
//! in virtual time, joined by its run); in an ordinary thread it is std's `thread::spawn`.
//! Thread-per-connection servers, as rping and cmatose write them, are written once with it.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, PoisonError};

use crate::error::{Call, CmError, Errno, Result};
use crate::sync::{Binding, Sched};

/// Starts `body` as a new thread named `name`: a process of the caller's host when the caller
/// is a simulated process, an OS thread otherwise.
pub fn spawn<T, F>(name: &str, body: F) -> Result<JoinHandle<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let binding = Binding::labelled(format!("thread '{name}'"));
    match binding.sched(Call::Spawn)? {
        Sched::Os => {
            let handle = std::thread::Builder::new()
                .name(name.to_string())
                .spawn(body)
                .map_err(|e| CmError::new(Call::Spawn, Errno::EAGAIN, e.to_string()))?;
            Ok(JoinHandle {
                name: name.to_string(),
                inner: Inner::Os(handle),
            })
        }
        Sched::Sim(rt) => {
            let slot: Arc<Slot<T>> = Arc::new(std::sync::Mutex::new(None));
            let key = binding.key();
            let (child_slot, child_rt) = (Arc::clone(&slot), Arc::clone(&rt));
            rt.spawn(
                name,
                Box::new(move || {
                    let outcome = catch_unwind(AssertUnwindSafe(body));
                    let (stored, payload) = match outcome {
                        Ok(value) => (Ok(value), None),
                        Err(payload) => (Err(panic_text(payload.as_ref())), Some(payload)),
                    };
                    *child_slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(stored);
                    child_rt.wake(key, usize::MAX);
                    if let Some(payload) = payload {
                        // The run reports the panic too, as for every process.
                        resume_unwind(payload);
                    }
                }),
            )?;
            Ok(JoinHandle {
                name: name.to_string(),
                inner: Inner::Sim { slot, binding },
            })
        }
    }
}

/// What a finished simulated thread left: its value, or the text of its panic.
type Slot<T> = std::sync::Mutex<Option<std::result::Result<T, String>>>;

/// Waits for a thread started by [`spawn`].
pub struct JoinHandle<T> {
    name: String,
    inner: Inner<T>,
}

enum Inner<T> {
    Os(std::thread::JoinHandle<T>),
    Sim {
        slot: Arc<Slot<T>>,
        binding: Binding,
    },
}

impl<T> JoinHandle<T> {
    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the thread to finish and returns its value. Fails with ECANCELED when it
    /// panicked (naming the panic), EDEADLK in a simulated process when it can never finish.
    pub fn join(self) -> Result<T> {
        let call = Call::Join;
        let panicked = |text: String| {
            CmError::new(
                call,
                Errno::ECANCELED,
                format!("thread '{}' panicked{text}", self.name),
            )
        };
        match self.inner {
            Inner::Os(handle) => handle
                .join()
                .map_err(|payload| panicked(panic_text(payload.as_ref()))),
            Inner::Sim { slot, binding } => {
                let rt = match binding.sched(call)? {
                    Sched::Sim(rt) => rt,
                    Sched::Os => {
                        return Err(CmError::new(
                            call,
                            Errno::EPERM,
                            format!(
                                "thread '{}' is a simulated process: only a process of its \
                                 fabric may join it",
                                self.name
                            ),
                        ))
                    }
                };
                rt.yield_point();
                loop {
                    if let Some(done) = slot.lock().unwrap_or_else(PoisonError::into_inner).take() {
                        return done.map_err(panicked);
                    }
                    let what = binding.describe(call, String::new);
                    rt.block(call, binding.key(), None, what)?;
                }
            }
        }
    }
}

/// Gives way: in a simulated process, another process that can run goes first (when none can,
/// virtual time moves to the fabric's next action, so a thread spinning on a flag cannot stall
/// the simulation); in an ordinary thread, std's `yield_now`.
pub fn yield_now() {
    match crate::runtime::current() {
        Some(rt) => rt.yield_now(),
        None => std::thread::yield_now(),
    }
}

/// A random number for the application: in a simulated process, drawn from the fabric's seed
/// (so a seed still fixes the whole run); in an ordinary thread, from std's per-process
/// random hashing keys.
pub fn random_u64() -> u64 {
    match crate::runtime::current() {
        Some(rt) => rt.random_u64(),
        None => {
            use std::hash::{BuildHasher, Hasher};
            use std::sync::atomic::{AtomicU64, Ordering};
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.finish()
        }
    }
}

/// `": <text>"` for a panic's usual string payloads, empty otherwise.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        format!(": {s}")
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        format!(": {s}")
    } else {
        String::new()
    }
}
