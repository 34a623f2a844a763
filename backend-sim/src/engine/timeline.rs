//! Virtual time and the discrete-event timeline: actions ordered by (time, sequence number),
//! each behind a key that cancels it. A cancelled action leaves nothing behind that could run,
//! move the clock or hold memory for long: its slot is freed at once, and its entry in the
//! queue is skipped when reached (the queue is compacted when such entries pile up).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::chunked::Chunked;
use super::near::Near;

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

    /// The deadline of a wait of `d` from this time, or `None` (no deadline: the wait ends
    /// only when what it waits for happens) when it lies at or beyond the end of virtual time.
    /// A `Wait::Timeout(Duration::MAX)` or a `sleep(Duration::MAX)` thus waits as librdmacm
    /// and cmtwin-verbs do for a timeout too large for `poll` (for ever), and it never moves
    /// the clock to its end, where every later timer would fire at once.
    pub fn deadline_after(self, d: Duration) -> Option<SimTime> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(d).filter(|&t| t < u64::MAX).map(SimTime)
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

/// Slots kept when the timeline empties (fewer are not worth giving back).
const KEPT_SLOTS: usize = 256;

/// A queue entry: its action's time and sequence number packed into one integer (time in the
/// high half), so that ordering two entries is one comparison, and its slot and generation.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry {
    order: u128,
    slot: u32,
    gen: u32,
}

impl Entry {
    fn new(at: SimTime, seq: u64, slot: u32, gen: u32) -> Self {
        Entry {
            order: (u128::from(at.0) << 64) | u128::from(seq),
            slot,
            gen,
        }
    }

    fn time(&self) -> SimTime {
        SimTime((self.order >> 64) as u64)
    }
}

impl Ord for Entry {
    /// Reversed, so that the max-first queue `Near` pops the earliest (time, sequence number)
    /// first; sequence numbers are unique, so no two entries compare equal.
    fn cmp(&self, other: &Self) -> Ordering {
        other.order.cmp(&self.order)
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Emptied bucket vectors kept for new buckets (a far timer then allocates nothing).
const SPARE_BUCKETS: usize = 4;
/// The largest bucket vector kept (a burst's big buckets are given back).
const SPARE_CAPACITY: usize = 1024;

/// Actions at least this far from the clock wait in coarse buckets instead of the near queue.
const FAR_SHIFT: u32 = 20;
/// How far ahead an action must be to wait in a bucket (2^20 ns ≈ 1 ms).
const FAR_HORIZON: u64 = 1 << FAR_SHIFT;

/// A queue of future actions, popped in (time, insertion order), each cancellable.
///
/// Near actions (wire deliveries, microseconds away) go straight into a priority queue
/// ([`Near`]: mostly a FIFO, as they tend to be scheduled in the order they are due). Far ones
/// (retransmission timers, timewait, timeouts: milliseconds to seconds away, and mostly
/// cancelled before they are due) wait in buckets of about a millisecond and enter the near
/// queue only when their bucket comes due: a cancelled timer then never touches it, and it
/// stays as small as the traffic in flight.
pub(crate) struct Timeline<A> {
    near: Near<Entry>,
    /// Far actions by bucket (time >> FAR_SHIFT).
    far: BTreeMap<u64, Vec<Entry>>,
    /// Emptied bucket vectors, reused for new buckets.
    spare: Vec<Vec<Entry>>,
    /// The time of the last action popped: the timeline's idea of the clock.
    clock: SimTime,
    /// Each slot's generation, apart from its action: whether a queue entry is live is a
    /// question of its generation alone (a slot's generation moves on as its action is taken),
    /// so that dropping stale entries and bringing a bucket in read 4 bytes a slot, 16 slots
    /// a cache line, not the whole action.
    gens: Vec<u32>,
    /// Each slot's action (`None`: free), in chunks: growing moves no action.
    actions: Chunked<Option<A>>,
    free: Vec<u32>,
    /// The generation new slots start at: above every generation a slot given back (when the
    /// timeline emptied) ever had, so that no key of that time names a new action.
    gen_floor: u32,
    next_seq: u64,
    /// Entries (in the near queue or a bucket) whose action was cancelled.
    stale: usize,
    /// Entries held, stale ones included.
    held: usize,
    /// Whether the near queue's head is live and every bucket due before it is in the near
    /// queue (`bring_due_buckets` ran, and nothing since could change that).
    settled: bool,
}

impl<A> Timeline<A> {
    pub(crate) fn new() -> Self {
        Timeline {
            near: Near::new(),
            far: BTreeMap::new(),
            spare: Vec::new(),
            clock: SimTime(0),
            gens: Vec::new(),
            actions: Chunked::new(),
            free: Vec::new(),
            gen_floor: 0,
            next_seq: 0,
            stale: 0,
            held: 0,
            settled: false,
        }
    }

    /// Schedules `action` at `at`.
    pub(crate) fn schedule(&mut self, at: SimTime, action: A) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(s) => {
                self.actions[s as usize] = Some(action);
                s
            }
            None => {
                self.gens.push(self.gen_floor);
                self.actions.push(Some(action));
                u32::try_from(self.gens.len() - 1).expect("fewer than 2^32 pending actions")
            }
        };
        let gen = self.gens[slot as usize];
        let entry = Entry::new(at, seq, slot, gen);
        if at.0.saturating_sub(self.clock.0) >= FAR_HORIZON {
            let spare = &mut self.spare;
            self.far
                .entry(at.0 >> FAR_SHIFT)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push(entry);
            // The new bucket may be due before the near queue's head (an earlier entry in
            // the near queue leaves every due bucket due).
            self.settled = false;
        } else {
            self.near.push(entry);
        }
        self.held += 1;
        TimerKey { slot, gen }
    }

    /// Cancels the action behind `key`, if it is still pending, and returns it.
    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<A> {
        if self.gens.get(key.slot as usize) != Some(&key.gen) {
            return None;
        }
        let action = self.actions[key.slot as usize].take();
        self.settled = false;
        self.release(key.slot);
        self.stale += 1;
        if self.stale > 64 && self.stale > self.held / 2 {
            self.compact();
        }
        action
    }

    fn release(&mut self, slot: u32) {
        let gen = &mut self.gens[slot as usize];
        *gen = gen.wrapping_add(1);
        self.free.push(slot);
        if self.free.len() == self.gens.len() && self.gens.len() > KEPT_SLOTS {
            self.give_back_slots();
        }
    }

    /// Every slot is free (no action pending): gives their memory back, so that a burst of
    /// actions does not hold it for good. Costs one pass over slots that each took a
    /// schedule and a release to fill and empty.
    fn give_back_slots(&mut self) {
        let highest = self.gens.iter().copied().max().unwrap_or(0);
        self.gen_floor = self.gen_floor.max(highest.wrapping_add(1));
        self.gens = Vec::new();
        self.actions = Chunked::new();
        self.free = Vec::new();
    }

    fn is_live(&self, entry: &Entry) -> bool {
        let Entry { slot, gen, .. } = *entry;
        // A slot's generation moves on when its action is taken (run or cancelled), so an
        // entry whose generation is its slot's has its action. A slot given back (see
        // `give_back_slots`) is past the end, or made anew with a higher generation.
        self.gens.get(slot as usize) == Some(&gen)
    }

    /// Drops the entries of cancelled actions, in the near queue and in the buckets.
    fn compact(&mut self) {
        let mut near = std::mem::replace(&mut self.near, Near::new());
        near.retain(|e| self.is_live(e));
        self.near = near;
        let mut far = std::mem::take(&mut self.far);
        far.retain(|_, bucket| {
            bucket.retain(|e| self.is_live(e));
            !bucket.is_empty()
        });
        self.far = far;
        self.held = self.near.len() + self.far.values().map(Vec::len).sum::<usize>();
        self.stale = 0;
    }

    /// Drops cancelled entries at the head of the near queue.
    fn skip_stale(&mut self) {
        while let Some(top) = self.near.peek() {
            if self.is_live(top) {
                return;
            }
            self.near.pop();
            self.stale -= 1;
            self.held -= 1;
        }
    }

    /// Moves into the near queue every bucket that could hold an action due before the near
    /// queue's earliest one (its live actions; the cancelled ones are dropped here).
    fn bring_due_buckets(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        loop {
            self.skip_stale();
            let Some((&bucket, _)) = self.far.first_key_value() else {
                return;
            };
            let starts = SimTime(bucket << FAR_SHIFT);
            if self.near.peek().is_some_and(|e| e.time() < starts) {
                return;
            }
            let mut entries = self.far.remove(&bucket).expect("the first bucket");
            for e in entries.drain(..) {
                if self.is_live(&e) {
                    self.near.push(e);
                } else {
                    self.stale -= 1;
                    self.held -= 1;
                }
            }
            if self.spare.len() < SPARE_BUCKETS && entries.capacity() <= SPARE_CAPACITY {
                self.spare.push(entries);
            }
        }
    }

    /// Removes and returns the earliest pending action.
    pub(crate) fn pop(&mut self) -> Option<(SimTime, A)> {
        self.bring_due_buckets();
        let entry = self.near.pop()?;
        self.settled = false;
        let (at, slot) = (entry.time(), entry.slot);
        self.held -= 1;
        let action = self.actions[slot as usize]
            .take()
            .expect("a live entry has its action");
        self.release(slot);
        self.clock = self.clock.max(at);
        Some((at, action))
    }

    /// The time of the earliest pending action.
    pub(crate) fn peek_time(&mut self) -> Option<SimTime> {
        self.bring_due_buckets();
        self.near.peek().map(Entry::time)
    }

    /// The earliest pending action.
    pub(crate) fn peek(&mut self) -> Option<&A> {
        self.bring_due_buckets();
        let slot = self.near.peek()?.slot;
        self.actions[slot as usize].as_ref()
    }

    /// Every pending action, in no particular order.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &A> {
        self.actions.iter().filter_map(Option::as_ref)
    }

    /// How many actions are pending.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held - self.stale
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
    fn an_emptied_timeline_gives_its_slots_back_and_old_keys_stay_dead() {
        let mut t = Timeline::new();
        let keys: Vec<TimerKey> = (0..1000u64).map(|i| t.schedule(SimTime(i), i)).collect();
        // A cancelled entry stays in the heap after the slots are given back.
        assert_eq!(t.cancel(keys[999]), Some(999));
        for i in 0..999u64 {
            assert_eq!(t.pop(), Some((SimTime(i), i)));
        }
        assert!(t.gens.is_empty(), "{} slots kept", t.gens.len());
        assert!(t.actions.is_empty(), "{} actions kept", t.actions.len());
        let fresh: Vec<TimerKey> = (0..3u64)
            .map(|i| t.schedule(SimTime(2000 + i), i))
            .collect();
        for old in &keys {
            assert_eq!(t.cancel(*old), None, "{old:?} names a new action");
        }
        assert_eq!(t.cancel(fresh[1]), Some(1));
        assert_eq!(t.pop(), Some((SimTime(2000), 0)));
        assert_eq!(t.pop(), Some((SimTime(2002), 2)));
        assert_eq!(t.pop(), None);
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
        assert!(t.held < 200, "the timeline holds {} entries", t.held);
        assert!(t.gens.len() <= 2, "{} slots", t.gens.len());
        assert_eq!(t.pop(), Some((SimTime(10), 0)));
    }

    /// Random schedules near and far from the clock (never before it), cancellations, peeks
    /// and pops come out in (time, insertion) order, as a plain sorted list says.
    #[test]
    fn near_and_far_actions_keep_time_then_insertion_order() {
        use rand::{Rng, SeedableRng};
        for seed in 0..40u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut t = Timeline::new();
            let mut reference: Vec<(u64, u64)> = Vec::new();
            let mut keys = Vec::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for _ in 0..4_000 {
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let spread = [0, 10, 5_000, 1 << 20, 3 << 20, 1 << 31][rng.gen_range(0..6)];
                        let at = now + rng.gen_range(0..=spread);
                        keys.push((t.schedule(SimTime(at), seq), at, seq));
                        reference.push((at, seq));
                        seq += 1;
                    }
                    5 if !keys.is_empty() => {
                        let (key, at, s) = keys[rng.gen_range(0..keys.len())];
                        if t.cancel(key).is_some() {
                            reference.retain(|e| *e != (at, s));
                        }
                    }
                    6 => {
                        let want = reference.iter().min().map(|(at, _)| SimTime(*at));
                        assert_eq!(t.peek_time(), want, "seed {seed}");
                    }
                    _ => {
                        let want = reference.iter().min().copied();
                        let got = t.pop().map(|(at, s)| (at.0, s));
                        assert_eq!(got, want, "seed {seed}");
                        if let Some(w) = want {
                            reference.retain(|e| *e != w);
                            now = w.0;
                        }
                    }
                }
                assert_eq!(t.len(), reference.len(), "seed {seed}");
            }
        }
    }
}
