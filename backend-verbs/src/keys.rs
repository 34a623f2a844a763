//! The values of handles and ack tickets: 64-bit keys that are never issued twice in a process.
//!
//! Every key of every backend value comes from one process-wide 64-bit counter, so a key that
//! was issued once (to an id, a channel or an event) is never issued again: a stale handle or
//! ticket can never name a newer object, however many objects a long-running process creates,
//! and a handle of one backend value can never name an object of another. At one key per
//! nanosecond the counter would last 584 years; should it ever run out, issuing fails (the
//! caller reports an error) instead of wrapping.
//!
//! Each backend value takes keys from the counter in chunks of [`CHUNK`] and remembers which
//! ranges it was given, so that an unknown key can still be told apart as "issued here, no
//! longer live" or "issued by another backend value" (the two get different error details).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many keys a backend value takes from the process-wide counter at a time.
pub(crate) const CHUNK: u64 = 1 << 20;

/// The start of the next chunk to hand out, process-wide. Key 0 is never issued.
static NEXT_CHUNK: AtomicU64 = AtomicU64::new(1);

/// Takes the next chunk from `counter`: `None` once fewer than [`CHUNK`] keys are left.
pub(crate) fn take_chunk(counter: &AtomicU64) -> Option<Range<u64>> {
    let start = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
            s.checked_add(CHUNK)
        })
        .ok()?;
    Some(start..start + CHUNK)
}

/// All keys ran out (2^64 of them): nothing more can be registered in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeysExhausted;

/// The keys of one backend value.
#[derive(Debug)]
pub(crate) struct KeySource {
    /// Where chunks come from (the process-wide counter, except in unit tests).
    counter: &'static AtomicU64,
    /// The keys not issued yet of the current chunk.
    current: Range<u64>,
    /// Every chunk taken, adjacent chunks merged, in increasing order (the counter only grows).
    taken: Vec<Range<u64>>,
}

impl KeySource {
    /// A source that has taken no chunk yet (a backend value that never registers anything
    /// uses up no keys).
    pub(crate) fn new() -> Self {
        Self::from_counter(&NEXT_CHUNK)
    }

    /// A source drawing its chunks from `counter` instead of the process-wide one.
    pub(crate) fn from_counter(counter: &'static AtomicU64) -> Self {
        KeySource {
            counter,
            current: 0..0,
            taken: Vec::new(),
        }
    }

    /// A key never issued before in this process.
    pub(crate) fn issue(&mut self) -> Result<u64, KeysExhausted> {
        if self.current.is_empty() {
            let chunk = take_chunk(self.counter).ok_or(KeysExhausted)?;
            match self.taken.last_mut() {
                Some(last) if last.end == chunk.start => last.end = chunk.end,
                _ => self.taken.push(chunk.clone()),
            }
            self.current = chunk;
        }
        let key = self.current.start;
        self.current.start += 1;
        Ok(key)
    }

    /// Whether `key` lies in a chunk this source took (issued here, or about to be).
    pub(crate) fn is_mine(&self, key: u64) -> bool {
        let i = self.taken.partition_point(|r| r.end <= key);
        self.taken.get(i).is_some_and(|r| r.contains(&key))
    }

    /// Issues none of the next `n` keys, as if `n` objects had been registered meanwhile.
    /// Only for a source with a counter of its own (unit tests).
    #[cfg(test)]
    pub(crate) fn skip(&mut self, n: u64) {
        let next = self.current.start + n;
        self.current = 0..0;
        self.counter.store(next, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter of the test's own, leaked so that the source can keep a `'static` borrow.
    fn counter_at(start: u64) -> &'static AtomicU64 {
        Box::leak(Box::new(AtomicU64::new(start)))
    }

    #[test]
    fn keys_run_on_past_the_32_bit_boundary() {
        let counter = counter_at((1 << 32) - 2);
        let mut keys = KeySource::from_counter(counter);
        let issued: Vec<u64> = (0..4).map(|_| keys.issue().unwrap()).collect();
        assert_eq!(
            issued,
            [(1 << 32) - 2, (1 << 32) - 1, 1 << 32, (1 << 32) + 1]
        );
        assert!(issued.iter().all(|&k| keys.is_mine(k)));
        assert!(!keys.is_mine((1 << 32) - 3));
        assert!(!keys.is_mine(1));
    }

    #[test]
    fn two_sources_never_share_a_key_and_know_their_own() {
        let counter = counter_at(1);
        let mut a = KeySource::from_counter(counter);
        let mut b = KeySource::from_counter(counter);
        let ka = a.issue().unwrap();
        let kb = b.issue().unwrap();
        assert_eq!((ka, kb), (1, 1 + CHUNK));
        assert!(a.is_mine(ka) && !a.is_mine(kb));
        assert!(b.is_mine(kb) && !b.is_mine(ka));
        // a's whole first chunk, then a second one after b's: keys stay unique and a's ranges
        // are two (not merged across b's chunk).
        let rest: Vec<u64> = (0..CHUNK).map(|_| a.issue().unwrap()).collect();
        assert_eq!(rest[rest.len() - 2], CHUNK);
        assert_eq!(rest[rest.len() - 1], 1 + 2 * CHUNK);
        assert_eq!(a.taken, [1..1 + CHUNK, 1 + 2 * CHUNK..1 + 3 * CHUNK]);
        assert!(!a.is_mine(kb) && a.is_mine(1 + 2 * CHUNK));
    }

    #[test]
    fn adjacent_chunks_are_merged() {
        let counter = counter_at(1);
        let mut a = KeySource::from_counter(counter);
        for _ in 0..=CHUNK {
            a.issue().unwrap();
        }
        assert_eq!(a.taken.len(), 1);
        assert_eq!(a.taken[0], 1..1 + 2 * CHUNK);
    }

    #[test]
    fn the_counter_ends_in_an_error_not_a_wrap() {
        let counter = counter_at(u64::MAX - CHUNK - 1);
        let mut keys = KeySource::from_counter(counter);
        for expected in u64::MAX - CHUNK - 1..u64::MAX - 1 {
            assert_eq!(keys.issue(), Ok(expected));
        }
        assert_eq!(keys.issue(), Err(KeysExhausted));
        assert_eq!(keys.issue(), Err(KeysExhausted));
        assert_eq!(counter.load(Ordering::Relaxed), u64::MAX - 1);
    }
}
