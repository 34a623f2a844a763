//! Simulated processes: protocol code of several hosts, each on its own OS thread, run one at a
//! time. A baton (the `current` process, under the world's mutex) decides who runs; the OS never
//! does. Each process sleeps on a condition variable of its own, and passing the baton wakes
//! only the process that receives it.
//!
//! A process runs until it blocks (waiting for an event, sleeping, a synchronous call) or yields
//! (an unproductive poll); then the next process that can run, in round-robin order of process
//! index, gets the baton, and when none can the timeline advances until one can. If nothing is
//! left that could wake a blocked process, every blocked process gets an EDEADLK error naming
//! what it waited for.
//!
//! Finding the next process costs O(log n) in the number of processes: the scheduler keeps the
//! set of processes that may be able to run (candidates, checked when picked), the waiters of
//! each channel (made candidates when an event is queued there) and the waiters of each deadline
//! (made candidates when time reaches it), instead of scanning every process.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::engine::timeline::{SimTime, TimerKey};
use crate::trace::TraceKind;
use crate::world::{Action, ChanKey, World};

/// What a blocked caller waits for: an event on any of its channels, a deadline, or either.
#[derive(Clone, Debug)]
pub(crate) struct Cond {
    /// Channels whose event (or removal) ends the wait; empty for a plain sleep.
    pub channels: Vec<ChanKey>,
    pub deadline: Option<SimTime>,
    /// For the deadlock report (text only when one is made).
    pub what: Waiting,
}

/// The blocking call a caller is in, as a deadlock report names it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Waiting {
    /// A call on a synchronous id waiting for the event that completes it.
    SyncCall(cmtwin::Call, cmtwin::IdHandle),
    /// `rdma_get_cm_event` on the condition's channels.
    Events,
    /// Waiting for the condition's channels to be ready (`poll_channels`).
    Polling,
    /// A sleep.
    Sleep(std::time::Duration),
}

impl Cond {
    /// What the caller waits in, for a deadlock report.
    fn describe(&self, w: &World) -> String {
        let channels = || {
            let names: Vec<String> = self
                .channels
                .iter()
                .map(|c| w.channel_handle(*c).to_string())
                .collect();
            match names.as_slice() {
                [one] => one.clone(),
                _ => format!("[{}]", names.join(", ")),
            }
        };
        match self.what {
            Waiting::SyncCall(call, id) => format!("{} on synchronous {id}", call.name()),
            Waiting::Events => format!("rdma_get_cm_event on {}", channels()),
            Waiting::Polling => format!("poll on {}", channels()),
            Waiting::Sleep(d) => format!("sleep({d:?})"),
        }
    }
}

impl Cond {
    fn satisfied(&self, w: &World) -> bool {
        self.channels
            .iter()
            .any(|&c| w.channel_ready(c) || !w.kernel.channels.contains_key(&c))
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
    /// Where the process's thread sleeps while another process holds the baton.
    pub wake: Arc<Condvar>,
}

impl Proc {
    /// A runnable process named `name`.
    pub(crate) fn new(name: String) -> Self {
        Proc {
            name,
            state: ProcState::Runnable,
            wake: Arc::new(Condvar::new()),
        }
    }
}

/// The baton and the processes.
#[derive(Default)]
pub(crate) struct Scheduler {
    procs: Vec<Proc>,
    /// The process holding the baton.
    current: Option<usize>,
    /// Whether `Fabric::run` is in progress.
    running: bool,
    /// Processes not yet done.
    live: usize,
    /// Every process that is runnable or deadlocked, and blocked ones that may have become
    /// runnable (their channel got an event or was removed, their deadline passed).
    candidates: BTreeSet<usize>,
    /// The blocked processes waiting on each channel (a process may wait on several).
    chan_waiters: BTreeMap<ChanKey, BTreeSet<usize>>,
    /// The blocked processes waiting for a deadline, by deadline.
    deadlines: BTreeSet<(SimTime, usize)>,
}

impl Scheduler {
    /// Installs the processes of a run, all runnable, and marks the run in progress.
    pub(crate) fn start(&mut self, procs: Vec<Proc>) {
        self.live = procs.len();
        self.candidates = (0..procs.len()).collect();
        self.procs = procs;
        self.current = None;
        self.chan_waiters.clear();
        self.deadlines.clear();
        self.running = true;
    }

    /// Forgets the processes of a finished run.
    pub(crate) fn finish(&mut self) {
        *self = Scheduler::default();
    }

    /// Whether `Fabric::run` is in progress.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// The condition variable process `index` sleeps on.
    pub(crate) fn wake_of(&self, index: usize) -> Arc<Condvar> {
        Arc::clone(&self.procs[index].wake)
    }

    /// The name of process `index`.
    pub(crate) fn name_of(&self, index: usize) -> &str {
        &self.procs[index].name
    }

    /// Wakes the thread of the process holding the baton, if any.
    fn notify_current(&self) {
        if let Some(c) = self.current {
            self.procs[c].wake.notify_one();
        }
    }

    /// Marks process `index` done.
    pub(crate) fn mark_done(&mut self, index: usize) {
        self.unregister_wait(index);
        self.procs[index].state = ProcState::Done;
        self.candidates.remove(&index);
        self.live -= 1;
    }

    /// The waiters of channel `chan` may be able to run: an event was queued there or the
    /// channel was removed.
    pub(crate) fn channel_changed(&mut self, chan: ChanKey) {
        if let Some(waiters) = self.chan_waiters.get(&chan) {
            self.candidates.extend(waiters.iter().copied());
        }
    }

    /// Makes every process whose deadline is `now` or earlier a candidate.
    fn deadlines_reached(&mut self, now: SimTime) {
        while let Some(&(d, p)) = self.deadlines.first() {
            if d > now {
                break;
            }
            self.deadlines.pop_first();
            self.candidates.insert(p);
        }
    }

    /// Registers process `index` as blocked on `cond`.
    fn block_on(&mut self, index: usize, cond: Cond) {
        for &c in &cond.channels {
            self.chan_waiters.entry(c).or_default().insert(index);
        }
        if let Some(d) = cond.deadline {
            self.deadlines.insert((d, index));
        }
        self.candidates.remove(&index);
        self.procs[index].state = ProcState::Blocked(cond);
    }

    /// Removes process `index` from the waiter lists of its condition, if it is blocked.
    fn unregister_wait(&mut self, index: usize) {
        let ProcState::Blocked(cond) = &self.procs[index].state else {
            return;
        };
        for c in &cond.channels {
            if let Some(waiters) = self.chan_waiters.get_mut(c) {
                waiters.remove(&index);
                if waiters.is_empty() {
                    self.chan_waiters.remove(c);
                }
            }
        }
        if let Some(d) = cond.deadline {
            self.deadlines.remove(&(d, index));
        }
    }
}

thread_local! {
    /// The (fabric, process index) the current OS thread runs, if it is a simulated process.
    static CURRENT: Cell<Option<(u32, usize)>> = const { Cell::new(None) };
}

/// Marks this OS thread as process `index` of fabric `fabric_no`.
pub(crate) fn enter_process(fabric_no: u32, index: usize) {
    CURRENT.with(|c| c.set(Some((fabric_no, index))));
}

/// The process of fabric `fabric_no` this OS thread runs, if any.
pub(crate) fn current_process(fabric_no: u32) -> Option<usize> {
    CURRENT
        .with(|c| c.get())
        .filter(|(f, _)| *f == fabric_no)
        .map(|(_, i)| i)
}

/// The world and the mutex around it, shared by the fabric, its backends and its processes.
pub(crate) struct Shared {
    pub world: Mutex<World>,
}

impl Shared {
    /// Locks the world (a panicking process does not poison it for the others).
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl World {
    /// Whether process `j` can run now; a blocked process that can is made runnable.
    fn take_if_ready(&mut self, j: usize) -> bool {
        let ready = match &self.sched.procs[j].state {
            ProcState::Runnable | ProcState::Deadlocked(_) => true,
            ProcState::Blocked(c) => c.satisfied(self),
            ProcState::Done => false,
        };
        if !ready {
            // Not runnable until its channel or deadline signals it again.
            self.sched.candidates.remove(&j);
        } else if let ProcState::Blocked(_) = self.sched.procs[j].state {
            self.sched.unregister_wait(j);
            self.sched.procs[j].state = ProcState::Runnable;
        }
        ready
    }

    /// The first process that can run, in round-robin order after the current one, skipping
    /// `skip`.
    fn pick_next(&mut self, skip: Option<usize>) -> Option<usize> {
        let start = self.sched.current.map_or(0, |c| c + 1);
        let mut from = start;
        let mut wrapped = false;
        loop {
            let next = self.sched.candidates.range(from..).next().copied();
            let j = match next {
                Some(j) if wrapped && j >= start => return None,
                Some(j) => j,
                None if wrapped || start == 0 => return None,
                None => {
                    wrapped = true;
                    from = 0;
                    continue;
                }
            };
            from = j + 1;
            if Some(j) != skip && self.take_if_ready(j) {
                return Some(j);
            }
        }
    }

    /// Runs the earliest action of the timeline and makes the processes it may wake
    /// candidates; false when the timeline is empty.
    fn advance(&mut self) -> bool {
        if !self.step() {
            return false;
        }
        let now = self.now;
        self.sched.deadlines_reached(now);
        true
    }

    /// Gives the baton to the next process that can run, advancing virtual time while none can.
    pub(crate) fn pass_baton(&mut self) {
        loop {
            if let Some(j) = self.pick_next(None) {
                self.sched.current = Some(j);
                return;
            }
            if self.sched.live == 0 {
                self.sched.current = None;
                return;
            }
            if !self.advance() {
                self.report_deadlock();
            }
        }
    }

    /// Nothing can run and the timeline is empty: every blocked process whose condition does
    /// not hold is told so (a rare path, so a scan of every process is fine).
    fn report_deadlock(&mut self) {
        let mut found = false;
        for j in 0..self.sched.procs.len() {
            let ProcState::Blocked(c) = &self.sched.procs[j].state else {
                continue;
            };
            if !c.satisfied(self) {
                let msg = format!(
                    "deadlock: process {} blocked in {} and nothing left can wake it",
                    self.sched.procs[j].name,
                    c.describe(self)
                );
                self.sched.unregister_wait(j);
                self.sched.procs[j].state = ProcState::Deadlocked(msg);
                found = true;
            }
            self.sched.candidates.insert(j);
        }
        if found {
            self.record_text(None, TraceKind::Sched, |_| {
                "deadlock: every process is blocked and the timeline is empty".into()
            });
        }
    }

    /// Schedules a wake-up at `deadline`, so that time can advance to it.
    pub(crate) fn wake_at(&mut self, deadline: SimTime) -> TimerKey {
        self.timeline.schedule(deadline, Action::Wake)
    }

    /// Marks process `index` done and hands the baton on.
    pub(crate) fn exit_process(&mut self, index: usize) {
        self.sched.mark_done(index);
        self.pass_baton();
        self.sched.notify_current();
    }
}

/// Waits on the process's own condition variable until it holds the baton.
pub(crate) fn wait_for_baton(mut w: MutexGuard<'_, World>, me: usize) -> MutexGuard<'_, World> {
    let wake = w.sched.wake_of(me);
    while w.sched.current != Some(me) {
        w = wake.wait(w).unwrap_or_else(|e| e.into_inner());
    }
    w
}

/// Blocks the caller until `cond` holds. In a simulated process the baton goes to the others;
/// elsewhere (a thread driving the fabric outside `Fabric::run`) the timeline runs inline, and
/// other OS threads are not waited for. Fails with the deadlock explanation when nothing can
/// ever satisfy `cond`.
pub(crate) fn block(
    mut w: MutexGuard<'_, World>,
    cond: Cond,
) -> (MutexGuard<'_, World>, Result<(), String>) {
    // The wakeup that lets time reach the deadline; cancelled when the wait ends earlier.
    let wake = cond.deadline.map(|d| w.wake_at(d));
    let (mut w, result) = wait_until(w, cond);
    if let Some(key) = wake {
        w.timeline.cancel(key);
    }
    (w, result)
}

/// Blocks until `cond` holds (see [`block`]).
fn wait_until(
    mut w: MutexGuard<'_, World>,
    cond: Cond,
) -> (MutexGuard<'_, World>, Result<(), String>) {
    let Some(me) = current_process(w.fabric_no) else {
        loop {
            if cond.satisfied(&w) {
                return (w, Ok(()));
            }
            if !w.step() {
                let msg = format!(
                    "deadlock: blocked in {} and nothing left in the timeline can produce it \
                     (outside Fabric::run a blocking call runs the timeline inline and does not \
                     wait for other threads)",
                    cond.describe(&w)
                );
                return (w, Err(msg));
            }
        }
    };
    if cond.satisfied(&w) {
        return (w, Ok(()));
    }
    w.sched.block_on(me, cond);
    w.pass_baton();
    if w.sched.current != Some(me) {
        w.sched.notify_current();
        w = wait_for_baton(w, me);
    }
    match std::mem::replace(&mut w.sched.procs[me].state, ProcState::Runnable) {
        ProcState::Deadlocked(msg) => (w, Err(msg)),
        _ => (w, Ok(())),
    }
}

/// An unproductive poll of a process: the other processes that can run go first (in
/// round-robin order; this one gets the baton back in its turn), and when none can, the
/// timeline runs its next action. Outside `Fabric::run` it does nothing.
pub(crate) fn yield_now(mut w: MutexGuard<'_, World>) -> MutexGuard<'_, World> {
    let Some(me) = current_process(w.fabric_no) else {
        return w;
    };
    match w.pick_next(Some(me)) {
        Some(j) => {
            w.sched.current = Some(j);
            w.sched.notify_current();
            wait_for_baton(w, me)
        }
        None => {
            w.advance();
            w
        }
    }
}
