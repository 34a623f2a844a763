//! When a wait of the real backend ends, read from the clock only once the wait really has to
//! block: a call whose event or completion is already there never reads the clock. And the
//! clock it reads is the coarse monotonic clock (`ffi::monotonic_coarse`), which the vDSO
//! serves from memory. (The precise clocks are cheap on hardware, through the vDSO too, but
//! in a VM without a stable TSC, as under QEMU's software emulation with an HPET clock source,
//! each read is a system call that reads an emulated timer, costing about as much as the rest
//! of a ping of `rping`: one per blocking wait.) The coarse clock lags by up to a tick, so the
//! deadline is its reading plus a tick plus the timeout: a wait never ends early, and one that
//! times out may last up to about two ticks (8 ms at 250 Hz) longer than asked.

use std::time::{Duration, Instant};

use crate::ffi;

/// When a wait ends.
pub(crate) enum Deadline {
    /// Never (`Wait::Block`, or a timeout too large to represent).
    Never,
    /// At once (`Wait::NonBlocking`).
    Now,
    /// This long after the wait first has to block (the clock not read yet).
    After(Duration),
    /// When the coarse monotonic clock reads this.
    AtCoarse(Duration),
    /// At this instant (a kernel without the coarse clock).
    At(Instant),
}

impl Deadline {
    /// The deadline of `wait`, not yet anchored to the clock.
    pub(crate) fn of(wait: cmtwin::Wait) -> Deadline {
        match wait {
            cmtwin::Wait::Block => Deadline::Never,
            cmtwin::Wait::NonBlocking => Deadline::Now,
            cmtwin::Wait::Timeout(d) => Deadline::After(d),
        }
    }

    /// The timeout of the next `poll` in milliseconds, rounded up (-1: forever); `None` once
    /// the wait is over. The first call of a timed wait reads the clock and anchors the
    /// deadline.
    pub(crate) fn poll_timeout(&mut self) -> Option<i32> {
        match *self {
            Deadline::Never => Some(-1),
            Deadline::Now => None,
            Deadline::After(d) => {
                *self = match (ffi::monotonic_coarse(), ffi::monotonic_coarse_lag()) {
                    (Some(now), Some(lag)) => now
                        .checked_add(lag)
                        .and_then(|t| t.checked_add(d))
                        .map_or(Deadline::Never, Deadline::AtCoarse),
                    _ => Instant::now()
                        .checked_add(d)
                        .map_or(Deadline::Never, Deadline::At),
                };
                (!d.is_zero()).then(|| ms_ceil(d))
            }
            Deadline::AtCoarse(t) => {
                let left =
                    ffi::monotonic_coarse().map_or(Duration::ZERO, |now| t.saturating_sub(now));
                (!left.is_zero()).then(|| ms_ceil(left))
            }
            Deadline::At(t) => {
                let left = t.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| ms_ceil(left))
            }
        }
    }
}

/// `d` in whole milliseconds, rounded up, as poll wants it.
fn ms_ceil(d: Duration) -> i32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    i32::try_from(ms).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmtwin::Wait;

    #[test]
    fn timeouts_round_up_and_end() {
        assert_eq!(Deadline::of(Wait::Block).poll_timeout(), Some(-1));
        assert_eq!(Deadline::of(Wait::NonBlocking).poll_timeout(), None);
        assert_eq!(
            Deadline::of(Wait::Timeout(Duration::ZERO)).poll_timeout(),
            None
        );
        let mut d = Deadline::of(Wait::Timeout(Duration::from_micros(1500)));
        assert_eq!(d.poll_timeout(), Some(2), "1.5 ms rounds up to 2");
        assert!(
            matches!(d, Deadline::AtCoarse(_) | Deadline::At(_)),
            "anchored at the first poll"
        );
        let mut huge = Deadline::of(Wait::Timeout(Duration::MAX));
        assert_eq!(huge.poll_timeout(), Some(i32::MAX));
        assert!(matches!(huge, Deadline::Never));
    }

    #[test]
    fn a_timed_wait_never_ends_early() {
        let asked = Duration::from_millis(30);
        let start = Instant::now();
        let mut d = Deadline::of(Wait::Timeout(asked));
        while let Some(ms) = d.poll_timeout() {
            std::thread::sleep(Duration::from_millis(ms as u64));
        }
        assert!(
            start.elapsed() >= asked,
            "ended after {:?}",
            start.elapsed()
        );
    }
}
