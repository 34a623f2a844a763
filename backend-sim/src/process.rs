//! Simulated processes: protocol code of several hosts, each on its own OS thread, run one at a
//! time. A baton (the `current` process, under the world's mutex) decides who runs; the OS never
//! does. Each process waits for the baton on a flag and a condition variable of its own
//! (`handoff.rs`: it polls, then sleeps), and passing the baton tells only the process that
//! receives it.
//!
//! A process runs until it blocks (waiting for an event, sleeping, a synchronous call, a
//! primitive of `cmtwin::sync`), yields (an unproductive poll) or is preempted at a yield point
//! (every trait call and primitive operation, as `SchedConfig` asks); then the scheduler's one
//! choice point picks the next process that can run (seeded random, PCT priorities or
//! round-robin), and when none can the timeline advances until one can. A woken process may run
//! only after a seeded wake-up latency. If nothing is left that could wake a blocked process,
//! every blocked process gets an EDEADLK error naming what it waited for.
//!
//! Processes may be registered while the run is in progress (`cmtwin::thread::spawn` from a
//! process), and primitives block on keys (`block` with `Cond::key`, woken by `wake_key`).
//!
//! Finding the next process costs O(log n) in the number of processes: the scheduler keeps the
//! set of processes that may be able to run (candidates, checked when picked), the waiters of
//! each channel (made candidates when an event is queued there) and the waiters of each deadline
//! (made candidates when time reaches it), instead of scanning every process.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use cmtwin::runtime::Describe;

use crate::engine::timeline::{SimTime, TimerKey};
use crate::handoff::{Wake, WorldGuard};
use crate::polling::{StandingPolls, VainPolls, LIVELOCK_REPORT, POLLS_BEFORE_TIME_MOVES};
use crate::rng::Stream;
use crate::schedule::{SchedConfig, SchedPolicy};
use crate::topology::HostKey;
use crate::trace::TraceKind;
use crate::verbs::EndlessRetries;
use crate::world::{Action, ChanKey, World};

/// What a blocked caller waits for: an event on any of its channels, a deadline, a wake-up
/// of its key, or any of these.
#[derive(Clone)]
pub(crate) struct Cond {
    /// Channels whose event (or removal) ends the wait; empty for a plain sleep.
    pub channels: Vec<ChanKey>,
    pub deadline: Option<SimTime>,
    /// The keys whose wake-up ends the wait (a `cmtwin::sync` primitive's, a completion
    /// channel's, ...); empty for none.
    pub keys: Vec<u64>,
    /// For the deadlock report (text only when one is made).
    pub what: Waiting,
}

/// The blocking call a caller is in, as a deadlock report names it.
#[derive(Clone)]
pub(crate) enum Waiting {
    /// A call on a synchronous id waiting for the event that completes it.
    SyncCall(cmtwin::Call, cmtwin::IdHandle),
    /// `rdma_get_cm_event` on the condition's channels.
    Events,
    /// Waiting for the condition's channels to be ready (`poll_channels`).
    Polling,
    /// A sleep.
    Sleep(std::time::Duration),
    /// An operation of a `cmtwin::sync` primitive or a join, described by the primitive.
    Primitive(Describe),
    /// `rdma_destroy_id` waiting for the acknowledgement of the id's fetched events.
    Acks(cmtwin::IdHandle),
    /// A call on an id that blocks in the kernel for the reason given (a deadline ends it).
    InCall(cmtwin::Call, cmtwin::IdHandle, &'static str),
}

/// The key a process waiting in `rdma_destroy_id` for the acknowledgements of id `id`'s
/// events blocks on (apart from every key of `cmtwin::sync`, which count up from 1).
pub(crate) fn acks_key(id: crate::kernel::IdKey) -> u64 {
    (1 << 63) | id
}

/// The key a process waiting in `rdma_destroy_id` for the MPA reply of iWARP id `id` blocks
/// on (apart from [`acks_key`] and every key of `cmtwin::sync`).
pub(crate) fn mpa_reply_key(id: crate::kernel::IdKey) -> u64 {
    (1 << 62) | id
}

/// How many other processes of a deadlock each one's report names.
const DEADLOCK_OTHERS_NAMED: usize = 3;

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
        match &self.what {
            Waiting::SyncCall(call, id) => format!("{} on synchronous {id}", call.name()),
            Waiting::Events => format!("rdma_get_cm_event on {}", channels()),
            Waiting::Polling => format!("poll on {}", channels()),
            Waiting::Sleep(d) => format!("sleep({d:?})"),
            Waiting::Primitive(describe) => describe(),
            Waiting::Acks(id) => {
                format!("rdma_destroy_id on {id}, waiting for the acknowledgement of its events")
            }
            Waiting::InCall(call, id, why) => format!("{} on {id} ({why})", call.name()),
        }
    }

    /// Whether the wait is over (`notified`: the process's key was woken).
    fn satisfied(&self, w: &World, notified: bool) -> bool {
        self.channels
            .iter()
            .any(|&c| w.channel_ready(c) || !w.kernel.channels.contains_key(&c))
            || self.deadline.is_some_and(|d| w.now >= d)
            || (!self.keys.is_empty() && notified)
    }
}

/// The state of one simulated process.
#[derive(Clone)]
pub(crate) enum ProcState {
    Runnable,
    Blocked(Cond),
    /// Its wait is over; it runs once virtual time reaches its wake-up latency's end.
    Waking(SimTime),
    /// Woken only to be told that it can never be woken otherwise.
    Deadlocked(String),
    Done,
}

/// One simulated process.
pub(crate) struct Proc {
    pub name: String,
    pub state: ProcState,
    /// Where the process's thread waits while another process holds the baton.
    pub wake: Arc<Wake>,
    /// Whether the key it blocks on was woken (`wake_key`).
    notified: bool,
    /// Its PCT priority (higher runs first).
    priority: u64,
    /// The top-level process it belongs to (itself, or the one whose thread spawned it):
    /// what a process crash takes down together, and what owns its channels.
    group: usize,
    /// Whether its process crashed: it unwinds as soon as it runs again.
    crashed: bool,
    /// The host it runs on.
    host: HostKey,
}

impl Proc {
    /// A runnable process named `name`, of group `group`, on host `host`.
    pub(crate) fn new(name: String, group: usize, host: HostKey) -> Self {
        Proc {
            host,
            name,
            state: ProcState::Runnable,
            wake: Arc::new(Wake::default()),
            notified: false,
            priority: 0,
            group,
            crashed: false,
        }
    }
}

/// The payload a crashed process unwinds with (its run reports a crash, not a failure).
pub(crate) struct Crashed;

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
    /// The blocked processes waiting on each primitive's key, in the order they blocked.
    key_waiters: BTreeMap<u64, VecDeque<usize>>,
    /// The knobs of the run.
    config: SchedConfig,
    /// Scheduling decisions made so far (PCT's step count).
    decisions: u64,
    /// PCT's change points still ahead, latest first.
    change_points: Vec<u64>,
    /// The priority the next process lowered at a change point gets.
    next_low: u64,
    /// The scratch list of runnable processes a decision picks from.
    ready: Vec<usize>,
    /// Whose last poll in vain (`yield_now`) still stands.
    standing: StandingPolls,
    /// Each process's run of vain polls since anything last changed (livelock detection).
    vain_polls: VainPolls,
}

impl Scheduler {
    /// Installs the processes of a run, all runnable, and marks the run in progress.
    pub(crate) fn start(&mut self, procs: Vec<Proc>, config: SchedConfig) {
        *self = Scheduler {
            live: procs.len(),
            candidates: (0..procs.len()).collect(),
            procs,
            config,
            running: true,
            ..Scheduler::default()
        };
    }

    /// The group of process `index`.
    pub(crate) fn group_of(&self, index: usize) -> usize {
        self.procs[index].group
    }

    /// The top-level process named `name`, if the run has one.
    pub(crate) fn top_level(&self, name: &str) -> Option<usize> {
        (0..self.procs.len()).find(|&i| self.procs[i].group == i && self.procs[i].name == name)
    }

    /// Marks every live process of `group` crashed; a blocked one is woken to unwind.
    pub(crate) fn crash_group(&mut self, group: usize) {
        for j in 0..self.procs.len() {
            let p = &self.procs[j];
            if p.group != group || matches!(p.state, ProcState::Done) {
                continue;
            }
            self.unregister_wait(j);
            self.procs[j].crashed = true;
            self.procs[j].state = ProcState::Runnable;
            self.candidates.insert(j);
        }
    }

    /// Whether a process of `group` has not finished yet.
    pub(crate) fn group_live(&self, group: usize) -> bool {
        (self.procs.iter()).any(|p| p.group == group && !matches!(p.state, ProcState::Done))
    }

    /// Registers one more process (a thread spawned while the run is in progress); its
    /// index.
    fn register(&mut self, proc: Proc) -> usize {
        let index = self.procs.len();
        self.procs.push(proc);
        self.live += 1;
        self.candidates.insert(index);
        index
    }

    /// Forgets the processes of a finished run.
    pub(crate) fn finish(&mut self) {
        *self = Scheduler::default();
    }

    /// Whether `Fabric::run` is in progress.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// A process did something a poll may observe (a call that is not a poll, an operation
    /// of a primitive): every run of vain polls ends.
    pub(crate) fn note_change(&mut self) {
        self.vain_polls.changed();
        self.standing.changed_by(self.current);
    }

    /// Where process `index` waits for the baton.
    pub(crate) fn wake_of(&self, index: usize) -> Arc<Wake> {
        Arc::clone(&self.procs[index].wake)
    }

    /// The name of process `index`.
    pub(crate) fn name_of(&self, index: usize) -> &str {
        &self.procs[index].name
    }

    /// Tells the thread of the process holding the baton, if any, that it does.
    fn notify_current(&self) {
        if let Some(c) = self.current {
            self.procs[c].wake.hand();
        }
    }

    /// Marks process `index` done.
    pub(crate) fn mark_done(&mut self, index: usize) {
        // What the thread wrote since its last call may be what another one polls for.
        self.note_change();
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
        for &key in &cond.keys {
            self.key_waiters.entry(key).or_default().push_back(index);
        }
        self.candidates.remove(&index);
        self.procs[index].notified = false;
        self.procs[index].state = ProcState::Blocked(cond);
    }

    /// Wakes every process blocked on `key`.
    pub(crate) fn wake_all(&mut self, key: u64) {
        self.wake_key(key, usize::MAX);
    }

    /// Wakes up to `count` of the processes blocked on `key`, in the order they blocked.
    fn wake_key(&mut self, key: u64, count: usize) {
        let Some(waiters) = self.key_waiters.get_mut(&key) else {
            return;
        };
        let n = count.min(waiters.len());
        let woken: Vec<usize> = waiters.drain(..n).collect();
        if waiters.is_empty() {
            self.key_waiters.remove(&key);
        }
        for j in woken {
            self.procs[j].notified = true;
            self.candidates.insert(j);
        }
    }

    /// Removes process `index` from the waiter lists of its condition, if it is blocked or
    /// waking.
    fn unregister_wait(&mut self, index: usize) {
        let cond = match &self.procs[index].state {
            ProcState::Blocked(cond) => cond,
            ProcState::Waking(at) => {
                self.deadlines.remove(&(*at, index));
                return;
            }
            _ => return,
        };
        for key in &cond.keys {
            if let Some(waiters) = self.key_waiters.get_mut(key) {
                waiters.retain(|&j| j != index);
                if waiters.is_empty() {
                    self.key_waiters.remove(key);
                }
            }
        }
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

/// The world and the mutex around it, shared by the fabric, its backends and its processes,
/// and the OS threads of the processes spawned while a run is in progress (its run joins
/// them).
pub(crate) struct Shared {
    pub world: Mutex<World>,
    pub spawned: Mutex<Vec<JoinHandle<Result<(), String>>>>,
}

impl Shared {
    /// Shares `world`.
    pub(crate) fn new(world: World) -> Self {
        Shared {
            world: Mutex::new(world),
            spawned: Mutex::new(Vec::new()),
        }
    }

    /// Locks the world (a panicking process does not poison it for the others).
    #[inline]
    pub(crate) fn lock(&self) -> WorldGuard<'_> {
        WorldGuard::new(self, self.world.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl World {
    /// Whether process `j` can run now; a blocked process whose wait is over is made runnable,
    /// or waking when the schedule draws it a wake-up latency.
    fn take_if_ready(&mut self, j: usize) -> bool {
        if !self.can_run(j) {
            // Not runnable until its channel, key or deadline signals it again.
            self.sched.candidates.remove(&j);
            return false;
        }
        match self.sched.procs[j].state {
            ProcState::Blocked(_) => {
                self.sched.unregister_wait(j);
                let latency = self.draw_wake_latency();
                if latency > 0 {
                    let at = self.now.after(std::time::Duration::from_nanos(latency));
                    self.sched.procs[j].state = ProcState::Waking(at);
                    self.sched.deadlines.insert((at, j));
                    self.sched.candidates.remove(&j);
                    self.timeline.schedule(at, Action::Wake);
                    return false;
                }
                self.sched.procs[j].state = ProcState::Runnable;
            }
            ProcState::Waking(_) => {
                self.sched.unregister_wait(j);
                self.sched.procs[j].state = ProcState::Runnable;
            }
            _ => {}
        }
        true
    }

    /// A woken process's wake-up latency, in nanoseconds (no draw when the schedule has none).
    fn draw_wake_latency(&mut self) -> u64 {
        let max = self.sched.config.wake_latency.as_nanos() as u64;
        if max == 0 {
            return 0;
        }
        self.rng.range(Stream::Sched, 0, max)
    }

    /// The scheduler's choice point: the process that runs next among those that can run now,
    /// other than `skip`, as the schedule's policy says; `None` when none can.
    /// Whether process `j` could run now (runnable, its wake-up latency over, or its wait
    /// satisfied).
    fn can_run(&self, j: usize) -> bool {
        let notified = self.sched.procs[j].notified;
        match &self.sched.procs[j].state {
            ProcState::Runnable | ProcState::Deadlocked(_) => true,
            ProcState::Waking(at) => self.now >= *at,
            ProcState::Blocked(c) => c.satisfied(self, notified),
            ProcState::Done => false,
        }
    }

    /// Whether every process that could run now has polled in vain, with its poll still
    /// standing (`polling.rs`): then only the timeline can change anything.
    fn only_pollers_can_run(&self) -> bool {
        (0..self.sched.procs.len()).all(|j| self.sched.standing.stands(j) || !self.can_run(j))
    }

    /// Whether every process that could run now has polled in vain, over and over, since
    /// anything last changed (see `polling.rs`); asked only when the timeline is empty.
    fn input_waiting_for(&self, me: usize) -> bool {
        let p = &self.sched.procs[me];
        self.sched.vain_polls.run_length(me) <= POLLS_BEFORE_TIME_MOVES
            && self.input_waiting(p.group, p.host)
    }

    fn livelocked(&self) -> bool {
        (0..self.sched.procs.len()).all(|j| self.sched.vain_polls.exhausted(j) || !self.can_run(j))
    }

    fn pick_next(&mut self, skip: Option<usize>) -> Option<usize> {
        self.sched.decisions += 1;
        if self.sched.config.policy == SchedPolicy::RoundRobin {
            return self.pick_round_robin(skip);
        }
        let mut ready = std::mem::take(&mut self.sched.ready);
        ready.clear();
        let mut from = 0;
        while let Some(j) = self.sched.candidates.range(from..).next().copied() {
            from = j + 1;
            if Some(j) != skip && self.take_if_ready(j) {
                ready.push(j);
            }
        }
        let chosen = match ready.len() {
            0 => None,
            1 => Some(ready[0]),
            n => Some(match self.sched.config.policy {
                SchedPolicy::Pct { .. } => self.highest_priority(&ready),
                _ => ready[self.rng.range(Stream::Sched, 0, n as u64 - 1) as usize],
            }),
        };
        self.sched.ready = ready;
        chosen
    }

    /// The process of `ready` with the highest PCT priority (ties: the lowest index).
    fn highest_priority(&self, ready: &[usize]) -> usize {
        let procs = &self.sched.procs;
        ready
            .iter()
            .copied()
            .max_by_key(|&j| (procs[j].priority, std::cmp::Reverse(j)))
            .unwrap_or(ready[0])
    }

    /// The first process that can run, in round-robin order after the current one, skipping
    /// `skip`.
    fn pick_round_robin(&mut self, skip: Option<usize>) -> Option<usize> {
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

    /// Draws the PCT priorities of processes `from..` and, at the start of a run, its change
    /// points (no draw under other policies).
    pub(crate) fn draw_priorities(&mut self, from: usize) {
        let SchedPolicy::Pct { depth, steps } = self.sched.config.policy else {
            return;
        };
        let lowest_initial = u64::from(depth);
        for j in from..self.sched.procs.len() {
            self.sched.procs[j].priority = self.rng.range(Stream::Sched, lowest_initial, u64::MAX);
        }
        if from == 0 {
            let mut points: Vec<u64> = (1..depth)
                .map(|_| self.rng.range(Stream::Sched, 1, steps))
                .collect();
            points.sort_unstable_by(|a, b| b.cmp(a));
            self.sched.change_points = points;
            self.sched.next_low = lowest_initial - 1;
        }
    }

    /// Under PCT, lowers process `me`'s priority below every other when the decision count
    /// reaches a change point.
    fn pct_change_point(&mut self, me: usize) {
        while let Some(&point) = self.sched.change_points.last() {
            if point > self.sched.decisions {
                break;
            }
            self.sched.change_points.pop();
            self.sched.procs[me].priority = self.sched.next_low;
            self.sched.next_low = self.sched.next_low.saturating_sub(1);
        }
    }

    /// Runs the earliest action of the timeline and makes the processes it may wake
    /// candidates; false when the timeline is empty.
    fn advance(&mut self) -> bool {
        if !self.step() {
            return false;
        }
        self.time_moved();
        true
    }

    /// [`World::advance`], or, when the timeline has nothing due by `horizon` (a time still
    /// ahead), the clock to `horizon`. Whether virtual time moved.
    /// Endless retries in vain alone (`verbs/stuck.rs`) move nothing without a horizon: a poll
    /// in vain then counts toward the livelock, as on an empty timeline.
    pub(crate) fn advance_until(&mut self, horizon: Option<SimTime>) -> bool {
        let Some(h) = horizon.filter(|&h| h > self.now) else {
            return self.only_endless_retries().is_none() && self.advance();
        };
        if self.timeline.peek_time().is_some_and(|at| at <= h) {
            return self.advance();
        }
        self.now = h;
        self.time_moved();
        true
    }

    /// Virtual time moved: every standing poll falls, and the processes whose deadline came
    /// may run.
    fn time_moved(&mut self) {
        self.sched.standing.changed_by(None);
        self.sched.vain_polls.changed();
        let now = self.now;
        self.sched.deadlines_reached(now);
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
            let endless = self.only_endless_retries();
            if endless.is_some() || !self.advance() {
                self.report_deadlock(endless);
            }
        }
    }

    /// Nothing can run and the timeline is empty (`endless`: holds only endless retries in
    /// vain, `verbs/stuck.rs`): every blocked process whose condition does not hold is told so (a
    /// rare path, so a scan of every process is fine).
    fn report_deadlock(&mut self, endless: Option<EndlessRetries>) {
        // (process, what it waits in), for every process nothing can wake.
        let mut stuck: Vec<(usize, String)> = Vec::new();
        for j in 0..self.sched.procs.len() {
            let notified = self.sched.procs[j].notified;
            let ProcState::Blocked(c) = &self.sched.procs[j].state else {
                continue;
            };
            if !c.satisfied(self, notified) {
                stuck.push((j, c.describe(self)));
            }
            self.sched.candidates.insert(j);
        }
        for (j, waits_in) in &stuck {
            let msg = format!(
                "deadlock: process {} blocked in {waits_in} and nothing left can wake it{}",
                self.sched.procs[*j].name,
                self.deadlocked_with(*j, &stuck)
            );
            self.sched.unregister_wait(*j);
            self.sched.procs[*j].state = ProcState::Deadlocked(msg);
        }
        if !stuck.is_empty() {
            self.record_text(None, TraceKind::Sched, |_| match endless {
                Some(kind) => format!(
                    "deadlock: every process is blocked and the timeline holds only {}",
                    kind.describe()
                ),
                None => "deadlock: every process is blocked and the timeline is empty".into(),
            });
        }
    }

    /// The others of a deadlock, for process `me`'s report: each one's own report may never be
    /// read (a thread whose handle nobody joins once `me` gave up), so that `me`'s names the
    /// whole cycle. At most [`DEADLOCK_OTHERS_NAMED`] are named, then how many more.
    fn deadlocked_with(&self, me: usize, stuck: &[(usize, String)]) -> String {
        let others: Vec<String> = stuck
            .iter()
            .filter(|(j, _)| *j != me)
            .map(|(j, waits_in)| format!("process {} in {waits_in}", self.sched.procs[*j].name))
            .collect();
        if others.is_empty() {
            return String::new();
        }
        let named = others.len().min(DEADLOCK_OTHERS_NAMED);
        let more = match others.len() - named {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        format!("; also blocked: {}{more}", others[..named].join("; "))
    }

    /// Schedules a wake-up at `deadline`, so that time can advance to it.
    pub(crate) fn wake_at(&mut self, deadline: SimTime) -> TimerKey {
        self.timeline.schedule(deadline, Action::Wake)
    }

    /// Wakes up to `count` processes blocked on the primitive key `key`.
    pub(crate) fn wake_key(&mut self, key: u64, count: usize) {
        self.sched.wake_key(key, count);
    }

    /// The group of the process calling in, if it is one of a running fabric's processes.
    pub(crate) fn caller_group(&self) -> Option<usize> {
        let me = current_process(self.fabric_no)?;
        self.sched.running().then(|| self.sched.group_of(me))
    }

    /// Registers a process named `name` spawned by running process `parent` (a thread of its
    /// group); its index.
    pub(crate) fn register_process(&mut self, name: String, parent: usize) -> usize {
        let group = self.sched.group_of(parent);
        let host = self.sched.procs[parent].host;
        let index = self.sched.register(Proc::new(name, group, host));
        self.draw_priorities(index);
        index
    }

    /// Marks process `index` done and hands the baton on. When it was the last live process
    /// of its group, the process has exited: as the kernel's `ucma_close` does for each
    /// rdma_cm file of an exiting process, its channel files are closed, destroying each of
    /// their ids as `rdma_destroy_id` does (peers get a DREQ or a REJ).
    pub(crate) fn exit_process(&mut self, index: usize) {
        self.sched.mark_done(index);
        let group = self.sched.group_of(index);
        if !self.sched.group_live(group) {
            self.close_files_of(group);
            self.close_verbs_of(group);
        }
        self.pass_baton();
        self.sched.notify_current();
    }
}

/// Waits until process `me` holds the baton for the first time; whether its process crashed
/// before it ever ran (its body is then not run).
pub(crate) fn wait_for_first_baton(w: WorldGuard<'_>, me: usize) -> bool {
    let wake = w.sched.wake_of(me);
    let w = wake.wait(w, |w| w.sched.current == Some(me));
    w.sched.procs[me].crashed
}

/// Waits until process `me` holds the baton (see [`Wake::wait`]); a process whose process
/// crashed meanwhile unwinds from here (see [`unwind_if_crashed`]).
pub(crate) fn wait_for_baton(w: WorldGuard<'_>, me: usize) -> WorldGuard<'_> {
    let wake = w.sched.wake_of(me);
    let w = wake.wait(w, |w| w.sched.current == Some(me));
    unwind_if_crashed(w, me)
}

/// A process whose process crashed stops here: the world is unlocked and the thread unwinds
/// with [`Crashed`] (its destructors run; its run reports the crash).
pub(crate) fn unwind_if_crashed(w: WorldGuard<'_>, me: usize) -> WorldGuard<'_> {
    if !w.sched.procs[me].crashed {
        return w;
    }
    drop(w);
    std::panic::resume_unwind(Box::new(Crashed))
}

/// Blocks the caller until `cond` holds. In a simulated process the baton goes to the others;
/// elsewhere (a thread driving the fabric outside `Fabric::run`) the timeline runs inline, and
/// other OS threads are not waited for. Fails with the deadlock explanation when nothing can
/// ever satisfy `cond`.
pub(crate) fn block(mut w: WorldGuard<'_>, cond: Cond) -> (WorldGuard<'_>, Result<(), String>) {
    // The wakeup that lets time reach the deadline; cancelled when the wait ends earlier.
    let wake = cond.deadline.map(|d| w.wake_at(d));
    let (mut w, result) = wait_until(w, cond);
    if let Some(key) = wake {
        w.timeline.cancel(key);
    }
    (w, result)
}

/// Blocks until `cond` holds (see [`block`]).
fn wait_until(mut w: WorldGuard<'_>, cond: Cond) -> (WorldGuard<'_>, Result<(), String>) {
    let Some(me) = current_process(w.fabric_no) else {
        loop {
            if cond.satisfied(&w, false) {
                return (w, Ok(()));
            }
            if !w.step_unless_stuck() {
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
    if cond.keys.is_empty() && cond.satisfied(&w, false) {
        return (w, Ok(()));
    }
    w.sched.block_on(me, cond);
    w.pass_baton();
    if w.sched.current != Some(me) {
        w.sched.notify_current();
        w = wait_for_baton(w, me);
    }
    let mut w = unwind_if_crashed(w, me);
    match std::mem::replace(&mut w.sched.procs[me].state, ProcState::Runnable) {
        ProcState::Deadlocked(msg) => (w, Err(msg)),
        _ => (w, Ok(())),
    }
}

/// Whether process `me` shares the run with another live process (one that could still
/// acknowledge an event, release a lock, ...).
pub(crate) fn others_live(w: &World, me: usize) -> bool {
    w.sched.running() && w.sched.live > 1 && w.sched.current == Some(me)
}

/// Whether the key process `me` last blocked on was woken (rather than its deadline passing).
pub(crate) fn was_notified(w: &World, me: usize) -> bool {
    w.sched.procs[me].notified
}

/// Hands the baton from process `me` to process `next` and waits until it comes back.
fn switch_to(mut w: WorldGuard<'_>, me: usize, next: usize) -> WorldGuard<'_> {
    w.sched.current = Some(next);
    w.sched.notify_current();
    wait_for_baton(w, me)
}

/// An unproductive poll of a process: another process that can run goes first (this one gets
/// the baton back when it is picked again), and when none can, or when every one that can has
/// polled in vain since virtual time last moved, the timeline runs its next action. Fails
/// with the livelock report when the timeline is empty and every process that can run keeps
/// polling in vain (`polling.rs`). Outside `Fabric::run` it does nothing.
pub(crate) fn yield_now(w: WorldGuard<'_>) -> Result<WorldGuard<'_>, &'static str> {
    yield_now_until(w, None)
}

/// [`yield_now`] of a process that also waits for `horizon` (an executor's earliest sleep):
/// when virtual time moves, it moves no further than `horizon`, as if that were the
/// timeline's next action.
pub(crate) fn yield_now_until(
    mut w: WorldGuard<'_>,
    horizon: Option<SimTime>,
) -> Result<WorldGuard<'_>, &'static str> {
    let Some(me) = current_process(w.fabric_no) else {
        return Ok(w);
    };
    w.sched.standing.polled_in_vain(me);
    w.sched.vain_polls.polled_in_vain(me);
    match w.pick_next(Some(me)) {
        Some(j) => {
            // Every process that can run is polling in vain: the polls take time, so the
            // timeline's next action runs (else processes that all poll would hand the baton
            // round for ever in one instant of virtual time), unless this one has input
            // waiting elsewhere, which it would see first (`polling.rs`).
            if w.only_pollers_can_run()
                && !w.input_waiting_for(me)
                && !w.advance_until(horizon)
                && w.livelocked()
            {
                return Err(LIVELOCK_REPORT);
            }
            Ok(switch_to(w, me, j))
        }
        None => {
            if !w.input_waiting_for(me) && !w.advance_until(horizon) && w.livelocked() {
                return Err(LIVELOCK_REPORT);
            }
            Ok(unwind_if_crashed(w, me))
        }
    }
}

/// Whether a yield point may hand the baton on: the schedule preempts (PCT, or a chance per
/// call) and this thread is a process of the world's run. When it may not, a yield point
/// leaves everything as it was, and nothing else can run until the caller lets the world go.
#[inline]
pub(crate) fn may_preempt(w: &World) -> bool {
    let preempts =
        matches!(w.sched.config.policy, SchedPolicy::Pct { .. }) || w.sched.config.preempt != 0.0;
    preempts && current_process(w.fabric_no).is_some()
}

/// A yield point of a running process (a trait call, a primitive's operation): the schedule
/// may preempt it here, handing the baton to another process that can run. Under PCT every
/// yield point is a decision (the highest-priority runnable process runs); otherwise a
/// preemption happens with the schedule's probability. Outside `Fabric::run` it does nothing.
#[inline]
pub(crate) fn yield_point(w: WorldGuard<'_>) -> WorldGuard<'_> {
    if may_preempt(&w) {
        preemption_point(w)
    } else {
        w
    }
}

/// A [`yield_point`] that may preempt (see [`may_preempt`]).
fn preemption_point(mut w: WorldGuard<'_>) -> WorldGuard<'_> {
    let pct = matches!(w.sched.config.policy, SchedPolicy::Pct { .. });
    let preempt = w.sched.config.preempt;
    let Some(me) = current_process(w.fabric_no) else {
        return w;
    };
    if pct {
        w.pct_change_point(me);
        let Some(j) = w.pick_next(None) else {
            return w;
        };
        return if j == me { w } else { switch_to(w, me, j) };
    }
    if !w.rng.chance(Stream::Sched, preempt) {
        return w;
    }
    match w.pick_next(Some(me)) {
        Some(j) => switch_to(w, me, j),
        None => w,
    }
}
