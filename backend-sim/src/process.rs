//! Simulated processes: protocol code of several hosts, each on its own OS thread, run one at a
//! time. A baton (the `current` process, under the world's mutex, with one condition variable)
//! decides who runs; the OS never does. A process runs until it blocks (waiting for an event,
//! sleeping, a synchronous call); then the next runnable process in round-robin order gets the
//! baton, and when none is runnable the timeline advances until one is. If nothing is left that
//! could wake a blocked process, every blocked process gets an EDEADLK error naming what it
//! waited for.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::engine::timeline::{SimTime, TimerKey};
use crate::trace::TraceKind;
use crate::world::{Action, ChanKey, World};

/// What a blocked caller waits for: an event on a channel, a deadline, or either.
#[derive(Clone, Debug)]
pub(crate) struct Cond {
    pub channel: Option<ChanKey>,
    pub deadline: Option<SimTime>,
    /// For the deadlock report.
    pub what: String,
}

impl Cond {
    fn satisfied(&self, w: &World) -> bool {
        self.channel
            .is_some_and(|c| w.channel_ready(c) || !w.channels.contains_key(&c))
            || self.deadline.is_some_and(|d| w.now >= d)
    }
}

/// The state of one simulated process.
#[derive(Clone, Debug)]
pub(crate) enum ProcState {
    Runnable,
    Blocked(Cond),
    /// Woken only to be told that it can never be woken otherwise.
    Deadlocked(String),
    Done,
}

/// One simulated process.
pub(crate) struct Proc {
    pub name: String,
    pub state: ProcState,
}

/// The baton and the processes.
#[derive(Default)]
pub(crate) struct Scheduler {
    pub procs: Vec<Proc>,
    pub current: Option<usize>,
}

/// The world and the condition variable the baton is passed through.
pub(crate) struct Shared {
    pub world: Mutex<World>,
    pub cv: Condvar,
}

thread_local! {
    /// The (fabric, process index) the current OS thread runs, if it is a simulated process.
    static CURRENT: Cell<Option<(u32, usize)>> = const { Cell::new(None) };
}

/// Marks this OS thread as process `index` of fabric `fabric_no`.
pub(crate) fn enter_process(fabric_no: u32, index: usize) {
    CURRENT.with(|c| c.set(Some((fabric_no, index))));
}

fn current_process(fabric_no: u32) -> Option<usize> {
    CURRENT
        .with(|c| c.get())
        .filter(|(f, _)| *f == fabric_no)
        .map(|(_, i)| i)
}

impl World {
    /// Gives the baton to the next process that can run, advancing virtual time while none can.
    pub(crate) fn pass_baton(&mut self) {
        loop {
            let n = self.sched.procs.len();
            let start = self.sched.current.map_or(0, |c| c + 1);
            for i in 0..n {
                let j = (start + i) % n;
                let ready = match &self.sched.procs[j].state {
                    ProcState::Runnable | ProcState::Deadlocked(_) => true,
                    ProcState::Blocked(c) => c.satisfied(self),
                    ProcState::Done => false,
                };
                if ready {
                    if let ProcState::Blocked(_) = self.sched.procs[j].state {
                        self.sched.procs[j].state = ProcState::Runnable;
                    }
                    self.sched.current = Some(j);
                    return;
                }
            }
            if self
                .sched
                .procs
                .iter()
                .all(|p| matches!(p.state, ProcState::Done))
            {
                self.sched.current = None;
                return;
            }
            if !self.step() {
                for p in &mut self.sched.procs {
                    if let ProcState::Blocked(c) = &p.state {
                        let msg = format!(
                            "deadlock: process {} blocked in {} and nothing left can wake it",
                            p.name, c.what
                        );
                        p.state = ProcState::Deadlocked(msg);
                    }
                }
                self.record_text(None, TraceKind::Sched, |_| {
                    "deadlock: every process is blocked and the timeline is empty".into()
                });
            }
        }
    }

    /// Schedules a wake-up at `deadline`, so that time can advance to it.
    pub(crate) fn wake_at(&mut self, deadline: SimTime) -> TimerKey {
        self.timeline.schedule(deadline, Action::Wake)
    }
}

/// Blocks the caller until `cond` holds. In a simulated process the baton goes to the others;
/// elsewhere (a single-threaded test pumping the fabric) the timeline runs inline. Fails with
/// the deadlock explanation when nothing can ever satisfy `cond`.
pub(crate) fn block<'a>(
    shared: &'a Shared,
    mut w: MutexGuard<'a, World>,
    cond: Cond,
) -> (MutexGuard<'a, World>, Result<(), String>) {
    // The wakeup that lets time reach the deadline; cancelled when the wait ends earlier.
    let wake = cond.deadline.map(|d| w.wake_at(d));
    let (mut w, result) = wait_until(shared, w, cond);
    if let Some(key) = wake {
        w.timeline.cancel(key);
    }
    (w, result)
}

/// Blocks until `cond` holds (see [`block`]).
fn wait_until<'a>(
    shared: &'a Shared,
    mut w: MutexGuard<'a, World>,
    cond: Cond,
) -> (MutexGuard<'a, World>, Result<(), String>) {
    let Some(me) = current_process(w.fabric_no) else {
        loop {
            if cond.satisfied(&w) {
                return (w, Ok(()));
            }
            if !w.step() {
                let msg = format!(
                    "deadlock: blocked in {} and nothing left in the simulation can produce it",
                    cond.what
                );
                return (w, Err(msg));
            }
        }
    };
    if cond.satisfied(&w) {
        return (w, Ok(()));
    }
    w.sched.procs[me].state = ProcState::Blocked(cond);
    w.pass_baton();
    shared.cv.notify_all();
    while w.sched.current != Some(me) {
        w = shared.cv.wait(w).unwrap_or_else(|e| e.into_inner());
    }
    match std::mem::replace(&mut w.sched.procs[me].state, ProcState::Runnable) {
        ProcState::Deadlocked(msg) => (w, Err(msg)),
        _ => (w, Ok(())),
    }
}
