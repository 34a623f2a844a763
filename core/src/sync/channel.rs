//! An unbounded channel whose receives are scheduling points of a simulated fabric.

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{Binding, Sched};
use crate::error::{Call, CmError, Errno, Result};
use crate::runtime::Woken;

/// The state both ends share.
struct Chan<T> {
    binding: Binding,
    state: std::sync::Mutex<State<T>>,
    os: std::sync::Condvar,
}

struct State<T> {
    queue: VecDeque<T>,
    senders: usize,
    receiver: bool,
}

impl<T> Chan<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An unbounded channel, labelled in deadlock reports by where it was created: the way a CM
/// thread hands ids to worker threads.
#[track_caller]
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        binding: Binding::new("channel"),
        state: std::sync::Mutex::new(State {
            queue: VecDeque::new(),
            senders: 1,
            receiver: true,
        }),
        os: std::sync::Condvar::new(),
    });
    (
        Sender {
            chan: Arc::clone(&chan),
        },
        Receiver { chan },
    )
}

/// The sending end of a [`channel`]; clone it for several senders.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Queues `value` for the receiver. Fails with EPIPE when the receiver is gone.
    pub fn send(&self, value: T) -> Result<()> {
        let call = Call::ChannelSend;
        let sched = self.chan.binding.sched(call)?;
        {
            let mut state = self.chan.state();
            if !state.receiver {
                return Err(CmError::new(
                    call,
                    Errno::EPIPE,
                    format!("the receiver of the {} is gone", self.chan.binding.label()),
                ));
            }
            state.queue.push_back(value);
        }
        match sched {
            Sched::Os => self.chan.os.notify_one(),
            Sched::Sim(rt) => {
                rt.wake(self.chan.binding.key(), 1);
                rt.yield_point();
            }
        }
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.state().senders += 1;
        Sender {
            chan: Arc::clone(&self.chan),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = self.chan.state();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.chan.os.notify_all();
            if let Some(rt) = self.chan.binding.runtime_of_caller() {
                rt.wake(self.chan.binding.key(), usize::MAX);
            }
        }
    }
}

/// The receiving end of a [`channel`].
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Receiver<T> {
    /// The next value, waiting for one. Fails with EPIPE when the queue is empty and every
    /// sender is gone.
    pub fn recv(&self) -> Result<T> {
        match self.recv_inner(None)? {
            Some(value) => Ok(value),
            None => Err(self.closed()),
        }
    }

    /// The next value, waiting at most `timeout` (virtual time in a simulated process). Fails
    /// with ETIMEDOUT when none came, EPIPE when every sender is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T> {
        match self.recv_inner(Some(timeout))? {
            Some(value) => Ok(value),
            None if self.chan.state().senders == 0 => Err(self.closed()),
            None => Err(CmError::new(
                Call::ChannelRecv,
                Errno::ETIMEDOUT,
                format!(
                    "nothing came on the {} in {timeout:?}",
                    self.chan.binding.label()
                ),
            )),
        }
    }

    /// The next value if one is queued.
    pub fn try_recv(&self) -> Result<Option<T>> {
        if let Sched::Sim(rt) = self.chan.binding.sched(Call::ChannelRecv)? {
            rt.yield_point();
        }
        Ok(self.chan.state().queue.pop_front())
    }

    /// Waits for a value; `None` when the channel is closed and empty, or the timeout passed.
    fn recv_inner(&self, timeout: Option<Duration>) -> Result<Option<T>> {
        let call = Call::ChannelRecv;
        match self.chan.binding.sched(call)? {
            Sched::Os => Ok(self.recv_os(timeout)),
            Sched::Sim(rt) => {
                rt.yield_point();
                loop {
                    {
                        let mut state = self.chan.state();
                        if let Some(value) = state.queue.pop_front() {
                            return Ok(Some(value));
                        }
                        if state.senders == 0 {
                            return Ok(None);
                        }
                    }
                    let what = self.chan.binding.describe(call, String::new);
                    let key = self.chan.binding.key();
                    if rt.block(call, key, timeout, what)? == Woken::TimedOut {
                        return Ok(self.chan.state().queue.pop_front());
                    }
                }
            }
        }
    }

    fn recv_os(&self, timeout: Option<Duration>) -> Option<T> {
        // A timeout beyond what the clock can hold is none (`Instant + t` would panic).
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut state = self.chan.state();
        loop {
            if let Some(value) = state.queue.pop_front() {
                return Some(value);
            }
            if state.senders == 0 {
                return None;
            }
            state = match deadline {
                None => self
                    .chan
                    .os
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    let (state, _) = self
                        .chan
                        .os
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner);
                    state
                }
            };
        }
    }

    fn closed(&self) -> CmError {
        CmError::new(
            Call::ChannelRecv,
            Errno::EPIPE,
            format!(
                "the {} is empty and every sender is gone",
                self.chan.binding.label()
            ),
        )
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.chan.state().receiver = false;
    }
}
