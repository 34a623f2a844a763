//! Async protocol code on both backends: `async fn`s that await CM events and sleeps, run by a
//! small executor that waits through the backend itself.
//!
//! The executor polls its tasks in the order they were spawned; when every task waits, it asks
//! the backend to wait for all of them at once: `poll_channels` on every channel a task awaits,
//! bounded by the earliest sleep. On the simulator that wait is a scheduling decision of the
//! fabric in virtual time, so a seed still fixes the whole run and many connections share one
//! simulated process (tasks cost no OS thread); on the real backend it is `poll(2)` on the
//! channels' fds. The same `async fn` runs on both.
//!
//! ```
//! use std::time::Duration;
//! use cmtwin::task::{block_on, CmAsync};
//! use cmtwin::CmBackend;
//! use cmtwin_sim::Fabric;
//!
//! let fabric = Fabric::builder(1).host("a", cmtwin::Transport::Roce, &["10.0.0.1".parse()?]).build()?;
//! let cm = fabric.backend("a");
//! let woke = block_on(&cm, async {
//!     cm.sleep_for(Duration::from_millis(3)).await?;
//!     Ok::<_, cmtwin::CmError>(cm.now())
//! })??;
//! assert_eq!(woke, Duration::from_millis(3));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Futures of other libraries may be awaited too: their wakers end the executor's wait when
//! no task awaits a channel or a sleep; while one does, a waker is noticed when that wait
//! ends. Inside `Fabric::run` a waker must come from the fabric's own processes (a task, a
//! `cmtwin::thread`): no other thread runs meanwhile, so a wait that only an ordinary OS
//! thread could end fails with EDEADLK. The helpers here run only under this executor
//! (elsewhere they fail with EINVAL).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::error::{Call, CmError, Errno, Result};
use crate::event::CmEvent;
use crate::event_kind::EventKind;
use crate::handle::ChannelHandle;
use crate::params::Wait;
use crate::sync::Semaphore;
use crate::CmBackend;

/// What the tasks of the running executor wait for, gathered while they are polled.
#[derive(Default)]
struct Interest {
    channels: BTreeSet<ChannelHandle>,
    deadline: Option<Duration>,
}

thread_local! {
    /// The interest of the executor running on this thread, if any.
    static INTEREST: RefCell<Option<Interest>> = const { RefCell::new(None) };
}

/// Records `f`'s change to the running executor's interest; false when no executor runs.
fn register(f: impl FnOnce(&mut Interest)) -> bool {
    INTEREST.with(|i| match i.borrow_mut().as_mut() {
        Some(interest) => {
            f(interest);
            true
        }
        None => false,
    })
}

/// The error of a helper awaited outside the executor.
fn outside(call: Call) -> CmError {
    CmError::new(
        call,
        Errno::EINVAL,
        "cmtwin's async helpers run under cmtwin::task::block_on or an Executor",
    )
}

/// Async forms of the waits of [`CmBackend`], for every backend.
pub trait CmAsync: CmBackend + Sized {
    /// The next event of `channel` (`rdma_get_cm_event` awaited).
    fn event(&self, channel: ChannelHandle) -> EventFuture<'_, Self> {
        self.event_any(vec![channel])
    }

    /// The next event of whichever of `channels` has one first, with its channel.
    fn event_any(&self, channels: Vec<ChannelHandle>) -> EventFuture<'_, Self> {
        EventFuture { cm: self, channels }
    }

    /// Waits `duration` (virtual time on the simulator) from the future's first poll, not
    /// from its creation (made at 0 and first awaited at 10 ms, a 5 ms sleep ends at 15 ms).
    fn sleep_for(&self, duration: Duration) -> SleepFuture<'_, Self> {
        SleepFuture {
            cm: self,
            duration,
            deadline: None,
        }
    }

    /// The next event of `channel`, acknowledged; fails with EBADE naming what came when it is
    /// not of `kind` (the async form of [`crate::expect_event`]'s check).
    fn expect(
        &self,
        channel: ChannelHandle,
        kind: EventKind,
    ) -> impl Future<Output = Result<crate::EventInfo>> {
        async move {
            let event = self.event(channel).await?;
            let info = event.info().clone();
            self.ack_cm_event(event)?;
            if info.kind != kind {
                return Err(CmError::new(
                    Call::GetCmEvent,
                    Errno::EBADE,
                    format!(
                        "expected {kind}, got {} (status {}) on {}",
                        info.kind, info.status, info.id
                    ),
                ));
            }
            Ok(info)
        }
    }
}

impl<B: CmBackend> CmAsync for B {}

/// The future of [`CmAsync::event`] and [`CmAsync::event_any`].
pub struct EventFuture<'a, B> {
    cm: &'a B,
    channels: Vec<ChannelHandle>,
}

impl<B: CmBackend> Future for EventFuture<'_, B> {
    type Output = Result<CmEvent>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.cm.try_get_cm_event(&self.channels) {
            Ok(Some((_, event))) => Poll::Ready(Ok(event)),
            Ok(None) => {
                let channels = &self.channels;
                if register(|i| i.channels.extend(channels.iter().copied())) {
                    Poll::Pending
                } else {
                    Poll::Ready(Err(outside(Call::GetCmEvent)))
                }
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// The future of [`CmAsync::sleep_for`].
pub struct SleepFuture<'a, B> {
    cm: &'a B,
    duration: Duration,
    deadline: Option<Duration>,
}

impl<B: CmBackend> Future for SleepFuture<'_, B> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let now = self.cm.now();
        let duration = self.duration;
        let deadline = *self.deadline.get_or_insert(now.saturating_add(duration));
        if now >= deadline {
            return Poll::Ready(Ok(()));
        }
        let earliest = |i: &mut Interest| {
            i.deadline = Some(i.deadline.map_or(deadline, |d| d.min(deadline)));
        };
        if register(earliest) {
            Poll::Pending
        } else {
            Poll::Ready(Err(outside(Call::Sleep)))
        }
    }
}

/// A task's waker: marks the executor woken and ends a waker-only wait.
struct TaskWaker {
    woken: Arc<AtomicBool>,
    signal: Arc<Semaphore>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::SeqCst) {
            // From a thread the signal may not be used from, the flag alone tells the
            // executor at the end of its current wait.
            let _ = self.signal.release();
        }
    }
}

/// A boxed task.
type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Spawns tasks onto an [`Executor`] from inside its tasks.
#[derive(Clone)]
pub struct Spawner<'a> {
    new: Rc<RefCell<Vec<Task<'a>>>>,
}

impl<'a> Spawner<'a> {
    /// Adds `task`; it is first polled in the executor's next round.
    pub fn spawn(&self, task: impl Future<Output = ()> + 'a) {
        self.new.borrow_mut().push(Box::pin(task));
    }
}

/// Runs tasks on one thread (one simulated process, or one OS thread), waiting through `cm`.
pub struct Executor<'a, B: CmBackend> {
    cm: &'a B,
    tasks: Vec<Option<Task<'a>>>,
    spawner: Spawner<'a>,
    woken: Arc<AtomicBool>,
    signal: Arc<Semaphore>,
}

impl<'a, B: CmBackend> Executor<'a, B> {
    /// An executor waiting through `cm`.
    pub fn new(cm: &'a B) -> Self {
        Executor {
            cm,
            tasks: Vec::new(),
            spawner: Spawner {
                new: Rc::new(RefCell::new(Vec::new())),
            },
            woken: Arc::new(AtomicBool::new(false)),
            signal: Arc::new(Semaphore::named("executor wake-ups", 0)),
        }
    }

    /// Adds `task` (polled in spawn order).
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'a) {
        self.spawner.spawn(task);
    }

    /// A handle that spawns tasks from inside tasks.
    pub fn spawner(&self) -> Spawner<'a> {
        self.spawner.clone()
    }

    /// Runs every task to completion. Fails with EINVAL when an executor already runs on this
    /// thread, and with the error of the backend's wait (EDEADLK on the simulator when nothing
    /// can wake any task). A channel a task awaits and another task destroys fails only the
    /// awaiting task's future (EBADF), not the run. The executor waits on the channels its
    /// tasks await through `cm`, so they must be channels of `cm`'s backend (on the
    /// simulator, of the same host): a task awaiting another backend's channel (another host's,
    /// whose futures wait through that host's backend) fails the run with EBADF naming the
    /// channel, where it would otherwise keep the executor polling for ever. Give each host its
    /// own executor, in a process of that host (`Fabric::spawn`).
    pub fn run(mut self) -> Result<()> {
        let running = INTEREST.with(|i| i.borrow().is_some());
        if running {
            return Err(CmError::new(
                Call::Poll,
                Errno::EINVAL,
                "an executor already runs on this thread (await the future instead)",
            ));
        }
        let _running = Running::enter();
        // Whether the last wait ended on a channel `cm` does not know, with no task finished
        // or woken since: a channel another task destroyed fails its awaiting task's next
        // poll; one of another backend never does.
        let mut unknown_channel = false;
        loop {
            self.tasks
                .extend(self.spawner.new.borrow_mut().drain(..).map(Some));
            self.woken.store(false, Ordering::SeqCst);
            while self.signal.try_acquire()? {}
            let finished_some = self.poll_round();
            if self.tasks.iter().all(Option::is_none) && self.spawner.new.borrow().is_empty() {
                return Ok(());
            }
            let interest = INTEREST.with(|i| i.replace(Some(Interest::default())));
            let interest = interest.unwrap_or_default();
            let woken = self.woken.load(Ordering::SeqCst);
            let again = finished_some || woken || !self.spawner.new.borrow().is_empty();
            if !again {
                unknown_channel = self.wait(interest, unknown_channel)?;
                continue;
            }
            unknown_channel = false;
            if woken && !finished_some {
                // Tasks woke themselves (a task polling memory or a CQ and yielding): a spin,
                // which lets time move towards the earliest sleep (on the simulator, as a poll
                // in vain does), so that the sleep ends and what the spin waits for can come.
                self.cm.spin(interest.deadline)?;
            }
        }
    }

    /// Polls every live task once; whether one finished.
    fn poll_round(&mut self) -> bool {
        let waker = Waker::from(Arc::new(TaskWaker {
            woken: Arc::clone(&self.woken),
            signal: Arc::clone(&self.signal),
        }));
        let mut cx = Context::from_waker(&waker);
        let mut finished = false;
        for slot in &mut self.tasks {
            if let Some(task) = slot {
                if task.as_mut().poll(&mut cx).is_ready() {
                    *slot = None;
                    finished = true;
                }
            }
        }
        self.tasks.retain(Option::is_some);
        finished
    }

    /// Waits for what the tasks wait for: their channels, bounded by the earliest sleep; or
    /// that sleep; or a waker. True when the wait ended on a channel `cm` does not know;
    /// `again`: the previous wait did too, and no task has moved since.
    fn wait(&self, interest: Interest, again: bool) -> Result<bool> {
        let left = interest.deadline.map(|d| d.saturating_sub(self.cm.now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(false);
        }
        if !interest.channels.is_empty() {
            let channels: Vec<ChannelHandle> = interest.channels.into_iter().collect();
            let wait = left.map_or(Wait::Block, Wait::Timeout);
            return match self.cm.poll_channels(&channels, wait) {
                // A task destroyed a channel another task awaits: that task learns it from
                // its own next poll (EBADF, as `get_cm_event` on it would); the others go on.
                Err(e) if e.errno == Errno::EBADF && !again => Ok(true),
                // The channel is still there for the task's own backend: it is another's.
                Err(e) if e.errno == Errno::EBADF => Err(CmError::new(
                    Call::Poll,
                    Errno::EBADF,
                    format!(
                        "a task awaits a channel the executor's backend does not know ({}): \
                         the tasks of one executor await channels of the backend it waits \
                         through (on the simulator, one host); give each host an executor \
                         of its own",
                        e.detail
                    ),
                )),
                r => r.map(|_| false),
            };
        }
        match left {
            Some(left) => self.cm.sleep(left).map(|()| false),
            None => self.signal.acquire().map(|()| false),
        }
    }
}

/// Marks an executor running on this thread while alive.
struct Running;

impl Running {
    fn enter() -> Self {
        INTEREST.with(|i| *i.borrow_mut() = Some(Interest::default()));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        INTEREST.with(|i| *i.borrow_mut() = None);
    }
}

/// Runs `future` to completion on this thread, waiting through `cm`, and returns its output.
/// Fails as [`Executor::run`] does.
pub fn block_on<'a, B: CmBackend, F: Future + 'a>(cm: &'a B, future: F) -> Result<F::Output> {
    let out = Rc::new(RefCell::new(None));
    let slot = Rc::clone(&out);
    let mut executor = Executor::new(cm);
    executor.spawn(async move {
        let value = future.await;
        *slot.borrow_mut() = Some(value);
    });
    executor.run()?;
    let value = out.borrow_mut().take();
    value.ok_or_else(|| CmError::new(Call::Poll, Errno::EINVAL, "the future did not finish"))
}
