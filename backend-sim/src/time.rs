//! Virtual time and the discrete-event timeline: one queue ordered by (time, sequence number).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

/// A point in virtual time, in nanoseconds since the fabric was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// This time plus `d` (saturating).
    pub fn after(self, d: Duration) -> SimTime {
        SimTime(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// As a duration since the start.
    pub fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>6}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Milliseconds as a duration (the CM's timers are in milliseconds).
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A queue of future actions, popped in (time, insertion order).
pub(crate) struct Timeline<A> {
    heap: BinaryHeap<Reverse<(SimTime, u64)>>,
    actions: std::collections::BTreeMap<u64, A>,
    next_seq: u64,
}

impl<A> Timeline<A> {
    pub(crate) fn new() -> Self {
        Timeline {
            heap: BinaryHeap::new(),
            actions: Default::default(),
            next_seq: 0,
        }
    }

    /// Schedules `action` at `at`.
    pub(crate) fn schedule(&mut self, at: SimTime, action: A) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse((at, seq)));
        self.actions.insert(seq, action);
    }

    /// Removes and returns the earliest action.
    pub(crate) fn pop(&mut self) -> Option<(SimTime, A)> {
        let Reverse((at, seq)) = self.heap.pop()?;
        let action = self.actions.remove(&seq).expect("scheduled action");
        Some((at, action))
    }

    /// The time of the earliest action.
    pub(crate) fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }
}
