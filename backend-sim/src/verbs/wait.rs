//! Blocking waits of the data path (a completion channel's CQ events, a host's asynchronous
//! events, several sources at once), through the scheduler: a simulated process blocks on the
//! objects' wait keys (and CM channels), which the world wakes when it queues an event there;
//! a thread driving the fabric outside `Fabric::run` runs the timeline inline until the event
//! comes.

use cmtwin::runtime::Describe;
use cmtwin::{Call, CmError, Errno, Result, Wait};

use crate::engine::timeline::SimTime;
use crate::handoff::WorldGuard;
use crate::kernel::ChanKey;
use crate::process::{block, current_process, yield_now, Cond, Waiting};
use crate::world::World;

/// What a wait is woken by: wait keys the world wakes (`wake_all`) and CM channels whose
/// events it queues.
#[derive(Clone, Default)]
pub(crate) struct WaitOn {
    /// The wait keys.
    pub keys: Vec<u64>,
    /// The CM channels.
    pub channels: Vec<ChanKey>,
}

impl WaitOn {
    /// A wait on one key.
    pub(crate) fn key(key: u64) -> Self {
        WaitOn {
            keys: vec![key],
            channels: Vec::new(),
        }
    }
}

/// Takes what `take` finds, waiting as `wait` says for the world to wake what `on` names
/// (`what` names the wait in a deadlock report). An unproductive poll of a process yields
/// first and looks again.
pub(crate) fn wait_for<'a, T>(
    mut w: WorldGuard<'a>,
    call: Call,
    wait: Wait,
    on: WaitOn,
    what: Describe,
    mut take: impl FnMut(&mut World) -> Result<Option<T>>,
) -> Result<T> {
    if let Some(v) = take(&mut w)? {
        return Ok(v);
    }
    let deadline = match wait {
        Wait::Block => None,
        Wait::Timeout(d) if !d.is_zero() => w.now.deadline_after(d),
        _ => {
            let mut w = yield_now(w).map_err(|m| CmError::new(call, Errno::EDEADLK, m))?;
            return take(&mut w)?.ok_or_else(|| nothing(call, wait));
        }
    };
    loop {
        w = if current_process(w.fabric_no).is_some() {
            let cond = Cond {
                channels: on.channels.clone(),
                deadline,
                keys: on.keys.clone(),
                what: Waiting::Primitive(what.clone()),
            };
            let (woken, r) = block(w, cond);
            r.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
            woken
        } else {
            step_inline(w, call, deadline, &what)?
        };
        if let Some(v) = take(&mut w)? {
            return Ok(v);
        }
        if deadline.is_some_and(|d| w.now >= d) {
            return Err(nothing(call, wait));
        }
    }
}

/// Outside `Fabric::run`: runs the timeline's next action (a wake-up at the deadline is
/// scheduled so that time can reach it).
fn step_inline<'a>(
    mut w: WorldGuard<'a>,
    call: Call,
    deadline: Option<SimTime>,
    what: &Describe,
) -> Result<WorldGuard<'a>> {
    if let Some(d) = deadline {
        if w.now < d && w.timeline.peek_time().is_none_or(|t| t > d) {
            w.wake_at(d);
        }
    }
    if w.only_endless_retries().is_some() || !w.step() {
        return Err(CmError::new(
            call,
            Errno::EDEADLK,
            format!(
                "deadlock: blocked in {} and nothing left in the timeline can produce it",
                what()
            ),
        ));
    }
    Ok(w)
}

/// EAGAIN or ETIMEDOUT: nothing came.
fn nothing(call: Call, wait: Wait) -> CmError {
    match wait {
        Wait::NonBlocking => CmError::new(call, Errno::EAGAIN, "no event queued"),
        _ => CmError::new(call, Errno::ETIMEDOUT, "no event within the timeout"),
    }
}
