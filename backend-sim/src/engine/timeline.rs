//! Virtual time and the discrete-event timeline: actions ordered by (time, sequence number),
//! each behind a key that cancels it. A cancelled action leaves nothing behind that could run,
//! move the clock or hold memory for long: its slot is freed at once, and its entry in the
//! heap is skipped when reached (the heap is compacted when such entries pile up).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::time::Duration;

/// A point in virtual time, in nanoseconds since the fabric was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// This time plus `d` (saturating: a duration beyond the end of virtual time means "never").
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

/// Names a scheduled action; cancelling with a key whose action already ran or was cancelled
/// does nothing (the slot's generation tells them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    slot: u32,
    gen: u32,
}

struct Slot<A> {
    gen: u32,
    action: Option<A>,
}

/// A queue of future actions, popped in (time, insertion order), each cancellable.
pub(crate) struct Timeline<A> {
    heap: BinaryHeap<Reverse<(SimTime, u64, u32, u32)>>,
    slots: Vec<Slot<A>>,
    free: Vec<u32>,
    next_seq: u64,
    /// Heap entries whose action was cancelled.
    stale: usize,
}

impl<A> Timeline<A> {
    pub(crate) fn new() -> Self {
        Timeline {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            stale: 0,
        }
    }

    /// Schedules `action` at `at`.
    pub(crate) fn schedule(&mut self, at: SimTime, action: A) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize].action = Some(action);
                s
            }
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    action: Some(action),
                });
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 pending actions")
            }
        };
        let gen = self.slots[slot as usize].gen;
        self.heap.push(Reverse((at, seq, slot, gen)));
        TimerKey { slot, gen }
    }

    /// Cancels the action behind `key`, if it is still pending, and returns it.
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<A> {
        let slot = self.slots.get_mut(key.slot as usize)?;
        if slot.gen != key.gen || slot.action.is_none() {
            return None;
        }
        let action = slot.action.take();
        self.release(key.slot);
        self.stale += 1;
        if self.stale > 64 && self.stale > self.heap.len() / 2 {
            self.compact();
        }
        action
    }

    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.gen = s.gen.wrapping_add(1);
        self.free.push(slot);
    }

    fn is_live(&self, slot: u32, gen: u32) -> bool {
        let s = &self.slots[slot as usize];
        s.gen == gen && s.action.is_some()
    }

    /// Drops the heap entries of cancelled actions.
    fn compact(&mut self) {
        let heap = std::mem::take(&mut self.heap);
        let live: Vec<_> = heap
            .into_vec()
            .into_iter()
            .filter(|Reverse((_, _, slot, gen))| self.is_live(*slot, *gen))
            .collect();
        self.heap = BinaryHeap::from(live);
        self.stale = 0;
    }

    /// Drops cancelled entries at the head of the heap.
    fn skip_stale(&mut self) {
        while let Some(Reverse((_, _, slot, gen))) = self.heap.peek() {
            if self.is_live(*slot, *gen) {
                return;
            }
            self.heap.pop();
            self.stale -= 1;
        }
    }

    /// Removes and returns the earliest pending action.
    pub(crate) fn pop(&mut self) -> Option<(SimTime, A)> {
        self.skip_stale();
        let Reverse((at, _, slot, _)) = self.heap.pop()?;
        let action = self.slots[slot as usize]
            .action
            .take()
            .expect("a live heap entry has its action");
        self.release(slot);
        Some((at, action))
    }

    /// The time of the earliest pending action.
    pub(crate) fn peek_time(&mut self) -> Option<SimTime> {
        self.skip_stale();
        self.heap.peek().map(|Reverse((t, ..))| *t)
    }

    /// How many actions are pending.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len() - self.stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut t = Timeline::new();
        t.schedule(SimTime(5), 'a');
        t.schedule(SimTime(1), 'b');
        t.schedule(SimTime(5), 'c');
        assert_eq!(t.pop(), Some((SimTime(1), 'b')));
        assert_eq!(t.pop(), Some((SimTime(5), 'a')));
        assert_eq!(t.pop(), Some((SimTime(5), 'c')));
        assert_eq!(t.pop(), None);
    }

    #[test]
    fn a_cancelled_action_never_runs_nor_moves_the_clock() {
        let mut t = Timeline::new();
        let late = t.schedule(SimTime(3_600_000_000_000), 'x');
        t.schedule(SimTime(2), 'y');
        assert_eq!(t.cancel(late), Some('x'));
        assert_eq!(t.cancel(late), None, "a second cancel does nothing");
        assert_eq!(t.len(), 1);
        assert_eq!(t.pop(), Some((SimTime(2), 'y')));
        assert_eq!(t.peek_time(), None);
        assert_eq!(t.pop(), None);
    }

    #[test]
    fn a_stale_key_does_not_cancel_the_slot_s_next_action() {
        let mut t = Timeline::new();
        let first = t.schedule(SimTime(1), 1);
        assert_eq!(t.pop(), Some((SimTime(1), 1)));
        let second = t.schedule(SimTime(2), 2);
        assert_ne!(first, second);
        assert_eq!(t.cancel(first), None);
        assert_eq!(t.pop(), Some((SimTime(2), 2)));
    }

    #[test]
    fn many_cancellations_leave_the_heap_small() {
        let mut t = Timeline::new();
        t.schedule(SimTime(10), 0u32);
        for i in 0..200_000u32 {
            let k = t.schedule(SimTime(1_000 + u64::from(i)), i);
            t.cancel(k);
        }
        assert_eq!(t.len(), 1);
        assert!(t.heap.len() < 200, "heap holds {} entries", t.heap.len());
        assert!(t.slots.len() <= 2, "{} slots", t.slots.len());
        assert_eq!(t.pop(), Some((SimTime(10), 0)));
    }
}
