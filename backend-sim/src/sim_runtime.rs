//! The fabric's scheduler as the runtime of `cmtwin::thread` and `cmtwin::sync`: a process's
//! primitives block, wake and spawn through it, so that their waits are scheduling decisions
//! of the fabric (seeded, in virtual time) and appear in its deadlock reports.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use cmtwin::runtime::{Describe, Runtime, Woken};
use cmtwin::{Call, CmError, Errno};
use rand::RngCore;

use crate::polling::{Livelocked, LIVELOCK_REPORT};
use crate::process::{
    block, current_process, enter_process, wait_for_first_baton, was_notified, yield_now,
    yield_point, Cond, Crashed, Shared, Waiting,
};
use crate::rng::Stream;
use crate::run::panic_message;
use crate::trace::TraceKind;

/// The runtime of the processes of one fabric's run.
pub(crate) struct SimRuntime {
    pub shared: Arc<Shared>,
    pub fabric_no: u32,
}

impl SimRuntime {
    /// The calling process's index (every method is called from one of the run's processes).
    fn me(&self, w: &crate::world::World) -> Option<usize> {
        current_process(w.fabric_no)
    }
}

impl Runtime for SimRuntime {
    fn identity(&self) -> u64 {
        u64::from(self.fabric_no) + 1
    }

    fn running(&self) -> bool {
        self.shared.lock().sched.running()
    }

    fn thread_name(&self) -> String {
        let w = self.shared.lock();
        match self.me(&w) {
            Some(me) => w.sched.name_of(me).to_string(),
            None => "(not a process)".to_string(),
        }
    }

    fn yield_point(&self) {
        let mut w = self.shared.lock();
        w.sched.note_change();
        drop(yield_point(w));
    }

    /// A process that cannot be told by an error that the run is livelocked ends with the
    /// report (its run gives it as the process's failure).
    fn yield_now(&self) {
        if yield_now(self.shared.lock()).is_err() {
            std::panic::resume_unwind(Box::new(Livelocked));
        }
    }

    fn block(
        &self,
        call: Call,
        key: u64,
        timeout: Option<Duration>,
        what: Describe,
    ) -> cmtwin::Result<Woken> {
        let w = self.shared.lock();
        let deadline = timeout.and_then(|t| w.now.deadline_after(t));
        let cond = Cond {
            channels: Vec::new(),
            deadline,
            keys: vec![key],
            what: Waiting::Primitive(what),
        };
        let (w, r) = block(w, cond);
        r.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
        let notified = self.me(&w).is_some_and(|me| was_notified(&w, me));
        Ok(if notified {
            Woken::Notified
        } else {
            Woken::TimedOut
        })
    }

    fn wake(&self, key: u64, count: usize) {
        self.shared.lock().wake_key(key, count);
    }

    fn spawn(&self, name: &str, body: Box<dyn FnOnce() + Send>) -> cmtwin::Result<()> {
        let mut w = self.shared.lock();
        if !w.sched.running() || self.me(&w).is_none() {
            return Err(CmError::new(
                Call::Spawn,
                Errno::EPERM,
                "only a process of a running fabric may spawn a simulated thread",
            ));
        }
        let parent = self.me(&w).expect("checked above");
        let index = w.register_process(name.to_string(), parent);
        w.record_text(None, TraceKind::Sched, |_| format!("spawn process {name}"));
        let child = SimRuntime {
            shared: Arc::clone(&self.shared),
            fabric_no: self.fabric_no,
        };
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || child.run_spawned(index, body));
        match thread {
            Ok(handle) => {
                drop(w);
                self.shared
                    .spawned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(handle);
                Ok(())
            }
            Err(e) => {
                w.sched.mark_done(index);
                Err(CmError::new(Call::Spawn, Errno::EAGAIN, e.to_string()))
            }
        }
    }

    fn random_u64(&self) -> u64 {
        self.shared.lock().rng.get(Stream::User).next_u64()
    }
}

impl SimRuntime {
    /// The OS thread of spawned process `index`: waits for the baton, runs `body` under this
    /// runtime, and hands the baton on.
    fn run_spawned(self, index: usize, body: Box<dyn FnOnce() + Send>) -> Result<(), String> {
        enter_process(self.fabric_no, index);
        let shared = Arc::clone(&self.shared);
        if wait_for_first_baton(shared.lock(), index) {
            shared.lock().exit_process(index);
            return Ok(());
        }
        let name = shared.lock().sched.name_of(index).to_string();
        let _runtime = cmtwin::runtime::enter(Arc::new(self));
        let outcome = match catch_unwind(AssertUnwindSafe(body)) {
            Ok(()) => Ok(()),
            Err(payload) if payload.is::<Crashed>() => Ok(()),
            Err(payload) if payload.is::<Livelocked>() => {
                Err(format!("process {name} failed: {LIVELOCK_REPORT}"))
            }
            Err(payload) => Err(format!(
                "process {name} panicked{}",
                panic_message(payload.as_ref())
            )),
        };
        shared.lock().exit_process(index);
        outcome
    }
}
