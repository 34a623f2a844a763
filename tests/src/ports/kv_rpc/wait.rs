//! Waiting, on one thread, for whichever comes first of a completion and a CM event: block on
//! the completion channel for a slice, look at the CM channel between slices. A busy
//! connection's completions end each slice at once; a quiet one's slices double up to
//! [`SLICE`]'s longest, so that idle waiting costs little while a CM event waits at most that.

use std::time::Duration;

use cmtwin::verbs::{DataPath, WorkCompletion};
use cmtwin::{CompChannelHandle, CqHandle, Errno, Result, Wait};

use super::SLICE;

/// The slice of the next wait on a completion channel.
#[derive(Clone, Copy, Debug)]
pub struct Slices {
    current: Duration,
}

impl Default for Slices {
    fn default() -> Self {
        Slices { current: SLICE.0 }
    }
}

impl Slices {
    /// Something happened: the next slice is the shortest again.
    pub fn reset(&mut self) {
        self.current = SLICE.0;
    }

    /// Blocks on `channel` for one slice, never past `until` (virtual or real time of `cm`).
    /// Returns the CQ whose event came, the event acknowledged and the CQ armed again when
    /// `known(cq)` (an event of a CQ destroyed meanwhile is let go); `None` after a quiet slice.
    pub fn wait_cq<B: DataPath>(
        &mut self,
        cm: &B,
        channel: CompChannelHandle,
        until: Duration,
        known: impl Fn(CqHandle) -> bool,
    ) -> Result<Option<CqHandle>> {
        let left = until.saturating_sub(cm.now());
        let slice = self.current.min(left).max(LOOK);
        let fired = cq_event(cm, channel, slice, known)?;
        match fired {
            Some(_) => self.reset(),
            None => self.current = (self.current * 2).min(SLICE.1),
        }
        Ok(fired)
    }
}

/// How long a look for an already queued CQ event blocks: a non-blocking look would be a
/// busy-poll (see the module's documentation).
const LOOK: Duration = Duration::from_micros(1);

/// A CQ event already queued on `channel`, if any, handled as [`Slices::wait_cq`] does.
pub fn queued_cq_event<B: DataPath>(
    cm: &B,
    channel: CompChannelHandle,
    known: impl Fn(CqHandle) -> bool,
) -> Result<Option<CqHandle>> {
    cq_event(cm, channel, LOOK, known)
}

fn cq_event<B: DataPath>(
    cm: &B,
    channel: CompChannelHandle,
    wait: Duration,
    known: impl Fn(CqHandle) -> bool,
) -> Result<Option<CqHandle>> {
    match cm.get_cq_event(channel, Wait::Timeout(wait)) {
        Ok(cq) => {
            if known(cq) {
                cm.ack_cq_events(cq, 1)?;
                cm.req_notify_cq(cq, false)?;
            }
            Ok(Some(cq))
        }
        Err(e) if e.errno == Errno::ETIMEDOUT => Ok(None),
        Err(e) => Err(e),
    }
}

/// Polls `cq` into `wc` until a poll returns fewer than `wc.len()` completions (the CQ is
/// then empty), handing each batch to `take`; stops early when `take` says so (false).
pub fn poll_all<B: DataPath>(
    cm: &B,
    cq: CqHandle,
    wc: &mut [WorkCompletion],
    mut take: impl FnMut(&[WorkCompletion]) -> Result<bool>,
) -> Result<()> {
    loop {
        let n = cm.poll_cq(cq, wc)?;
        if n > 0 && !take(&wc[..n])? {
            return Ok(());
        }
        if n < wc.len() {
            return Ok(());
        }
    }
}
