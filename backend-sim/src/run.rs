//! `Fabric::run`: the spawned processes, each on an OS thread of its own, run one at a time
//! under the scheduler of `process.rs`; their outcomes (errors, panics, deadlocks) are
//! collected into a `SimError`.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::backend::SimBackend;
use crate::error::{FabricError, SimError};
use crate::fabric::{Fabric, PendingProc};
use crate::polling::{Livelocked, LIVELOCK_REPORT};
use crate::process::{current_process, enter_process, wait_for_first_baton, Crashed, Proc, Shared};
use crate::sim_runtime::SimRuntime;

/// The spawned processes that can start, with their host, and the failures of those that
/// cannot.
type Started = (Vec<(PendingProc, crate::topology::HostKey)>, Vec<String>);

impl Fabric {
    /// Runs every spawned process to completion, one at a time, in virtual time. Fails naming
    /// each process that returned an error, panicked or deadlocked, with the replay line.
    ///
    /// The rule of the run: while it is in progress only the fabric's own processes may call
    /// into the fabric. A call of a [`SimBackend`] from any other thread fails with EPERM
    /// (except `now`, which only reads the clock), fault injection from another thread fails
    /// with [`FabricError::Running`], and driving the timeline (`step`, `run_until`,
    /// `run_for`, `run_until_idle`) is refused for everyone: the run drives it. This keeps the
    /// trace independent of the OS's thread scheduling.
    ///
    /// Refused with [`SimError::Refused`] when called from one of the fabric's processes
    /// ([`FabricError::RunFromProcess`]) or while another thread's `run` of this fabric is in
    /// progress ([`FabricError::AlreadyRunning`]).
    pub fn run(&self) -> Result<(), SimError> {
        let (procs, not_started) = self.start_run()?;
        let fabric_no = self.lock().fabric_no;
        let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = procs
                .into_iter()
                .enumerate()
                .map(|(index, (p, host))| {
                    let shared = Arc::clone(&self.shared);
                    scope.spawn(move || run_process(shared, fabric_no, index, p, host))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("process thread died".into()))
                })
                .collect()
        });
        let spawned = self.join_spawned();
        self.lock().sched.finish();
        let failures: Vec<String> = not_started
            .into_iter()
            .chain(results.into_iter().filter_map(Result::err))
            .chain(spawned.into_iter().filter_map(Result::err))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SimError::Failed {
                failures,
                replay: self.replay_line(),
            })
        }
    }

    /// Joins the OS threads of the processes spawned during the run (a spawned process may
    /// spawn more, so until none is left), in the order they were spawned.
    fn join_spawned(&self) -> Vec<Result<(), String>> {
        let mut outcomes = Vec::new();
        loop {
            let handles = std::mem::take(
                &mut *self
                    .shared
                    .spawned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if handles.is_empty() {
                return outcomes;
            }
            outcomes.extend(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("process thread died".into()))
            }));
        }
    }

    /// Checks that a run may start, takes the spawned processes and hands them to the
    /// scheduler; a process on a host the fabric does not have is reported instead.
    fn start_run(&self) -> Result<Started, SimError> {
        let mut w = self.lock();
        if let Some(p) = current_process(w.fabric_no) {
            let process = w.sched.name_of(p).to_string();
            return Err(FabricError::RunFromProcess { process }.into());
        }
        if w.sched.running() {
            return Err(FabricError::AlreadyRunning.into());
        }
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let mut runnable = Vec::new();
        let mut not_started = Vec::new();
        for p in pending {
            match p.host.clone() {
                Ok(host) => runnable.push((p, host)),
                Err(e) => not_started.push(format!("process {} not started: {e}", p.name)),
            }
        }
        let procs = runnable
            .iter()
            .enumerate()
            .map(|(i, (p, host))| Proc::new(p.name.clone(), i, *host))
            .collect();
        let schedule = w.cfg.schedule;
        w.sched.start(procs, schedule);
        w.draw_priorities(0);
        w.pass_baton();
        Ok((runnable, not_started))
    }
}

/// The thread of process `index`: waits for the baton, runs the body, reports how it ended
/// and hands the baton on.
fn run_process(
    shared: Arc<Shared>,
    fabric_no: u32,
    index: usize,
    p: PendingProc,
    host: crate::topology::HostKey,
) -> Result<(), String> {
    enter_process(fabric_no, index);
    if wait_for_first_baton(shared.lock(), index) {
        shared.lock().exit_process(index);
        return Ok(());
    }
    let _runtime = cmtwin::runtime::enter(Arc::new(SimRuntime {
        shared: Arc::clone(&shared),
        fabric_no,
    }));
    let backend = SimBackend {
        shared: Arc::clone(&shared),
        host,
    };
    let body = p.body;
    let outcome = match catch_unwind(AssertUnwindSafe(move || body(backend))) {
        Ok(Ok(())) => Ok(()),
        Err(payload) if payload.is::<Crashed>() => Ok(()),
        Err(payload) if payload.is::<Livelocked>() => {
            Err(format!("process {} failed: {LIVELOCK_REPORT}", p.name))
        }
        Ok(Err(e)) => Err(format!("process {} failed: {e}", p.name)),
        Err(payload) => Err(format!(
            "process {} panicked{}",
            p.name,
            panic_message(payload.as_ref())
        )),
    };
    shared.lock().exit_process(index);
    outcome
}

/// The message of a panic, for the report: `": <text>"` for the usual string payloads, and a
/// description for a payload of another type (from `std::panic::panic_any`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        format!(": {s}")
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        format!(": {s}")
    } else {
        " with a payload that is not a string (std::panic::panic_any with a value of another \
         type than String or &str); its content cannot be shown"
            .to_string()
    }
}
