//! A FIFO kept in chunks of at most [`CHUNK`] elements, for the event channels' queues.
//!
//! A burst of events queued at once (100k ADDR_RESOLVED on a few channels) grew a `VecDeque`
//! by doubling, copying everything it held each time, and shrinking it again as the burst was
//! fetched copied it once more: megabytes through the cache. Here growing allocates one more
//! chunk and moves nothing, and a chunk fetched empty is freed, so the memory of a burst is
//! given back as it is fetched without copying what is left. The first chunk grows as a
//! `VecDeque` does (a channel that never holds more than a few events keeps a small one), and
//! once it is the only one it shrinks as it is drained, as the `VecDeque` did, so that a
//! channel keeps room for a few events only.

use std::collections::VecDeque;

/// Elements per chunk at most (about 10 KB of queued events).
const CHUNK: usize = 64;

/// The room a queue's only chunk keeps however far it is drained.
const KEPT_CAPACITY: usize = 16;

/// A FIFO of `T` in chunks. No chunk is empty unless it is the only one.
pub(crate) struct ChunkedQueue<T> {
    chunks: VecDeque<VecDeque<T>>,
    len: usize,
}

impl<T> Default for ChunkedQueue<T> {
    fn default() -> Self {
        ChunkedQueue {
            chunks: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> ChunkedQueue<T> {
    /// How many elements are queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether none is.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value` at the back.
    #[inline]
    pub(crate) fn push_back(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push_back(value),
            _ => self.push_in_new_chunk(value),
        }
        self.len += 1;
    }

    /// Appends `value` in a chunk of its own: the first grows as a `VecDeque` does, the
    /// others are made at their full size.
    #[cold]
    fn push_in_new_chunk(&mut self, value: T) {
        let mut chunk = if self.chunks.is_empty() {
            VecDeque::new()
        } else {
            VecDeque::with_capacity(CHUNK)
        };
        chunk.push_back(value);
        self.chunks.push_back(chunk);
    }

    /// Takes the oldest element; a chunk left empty is freed unless it is the last.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let first = self.chunks.front_mut()?;
        let value = first.pop_front()?;
        self.len -= 1;
        if first.len() < first.capacity() / 4 {
            self.give_back();
        }
        Some(value)
    }

    /// Frees the first chunk once it is fetched empty, unless it is the only one; the only
    /// one, drained below a quarter of its room, gives half of it back (down to
    /// [`KEPT_CAPACITY`]), moving the few events it still holds.
    #[cold]
    fn give_back(&mut self) {
        let only = self.chunks.len() == 1;
        let first = &mut self.chunks[0];
        if !only {
            if first.is_empty() {
                self.chunks.pop_front();
            }
        } else if first.capacity() > KEPT_CAPACITY {
            first.shrink_to(first.capacity() / 2);
        }
    }

    /// Every element, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Keeps only the elements for which `keep` is true, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for chunk in &mut self.chunks {
            chunk.retain(&mut keep);
        }
        self.drop_empty_chunks();
    }

    /// Removes the elements for which `take` is true and returns them, oldest first; the
    /// others keep their order.
    pub(crate) fn take_where(&mut self, mut take: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut taken = Vec::new();
        for chunk in &mut self.chunks {
            // One turn through the chunk: each element is taken or put back at the end.
            for _ in 0..chunk.len() {
                let value = chunk.pop_front().expect("counted");
                if take(&value) {
                    taken.push(value);
                } else {
                    chunk.push_back(value);
                }
            }
        }
        self.drop_empty_chunks();
        taken
    }

    /// Recounts the elements and frees the empty chunks, keeping one if all are.
    fn drop_empty_chunks(&mut self) {
        let kept = self.chunks.pop_front();
        self.chunks.retain(|c| !c.is_empty());
        if let Some(first) = kept {
            if !first.is_empty() || self.chunks.is_empty() {
                self.chunks.push_front(first);
            }
        }
        self.len = self.chunks.iter().map(VecDeque::len).sum();
    }
}

impl<T> Extend<T> for ChunkedQueue<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        for value in values {
            self.push_back(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ChunkedQueue, CHUNK, KEPT_CAPACITY};

    fn contents(q: &ChunkedQueue<usize>) -> Vec<usize> {
        q.iter().copied().collect()
    }

    #[test]
    fn a_burst_spans_chunks_and_comes_out_in_order() {
        let mut q = ChunkedQueue::default();
        q.extend(0..3 * CHUNK + 5);
        assert_eq!(q.len(), 3 * CHUNK + 5);
        assert_eq!(q.chunks.len(), 4);
        assert_eq!(q.chunks[1].capacity(), CHUNK);
        let out: Vec<usize> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(out, (0..3 * CHUNK + 5).collect::<Vec<_>>());
        assert!(q.is_empty());
        // Fetched chunks were freed; the last is kept, empty, with a little room.
        assert_eq!(q.chunks.len(), 1);
        assert_eq!(q.chunks[0].capacity(), KEPT_CAPACITY);
        assert_eq!(q.pop_front(), None);
    }

    #[test]
    fn chunks_are_freed_as_they_are_fetched() {
        let mut q = ChunkedQueue::default();
        q.extend(0..2 * CHUNK);
        for _ in 0..CHUNK {
            q.pop_front();
        }
        assert_eq!(q.chunks.len(), 1);
        assert_eq!(q.len(), CHUNK);
        assert_eq!(q.pop_front(), Some(CHUNK));
    }

    #[test]
    fn retain_and_take_keep_the_order_and_the_count() {
        let mut q = ChunkedQueue::default();
        q.extend(0..2 * CHUNK + 10);
        q.retain(|v| v % 3 != 0);
        let kept: Vec<usize> = (0..2 * CHUNK + 10).filter(|v| v % 3 != 0).collect();
        assert_eq!(contents(&q), kept);
        assert_eq!(q.len(), kept.len());
        let taken = q.take_where(|v| v % 2 == 0);
        assert_eq!(
            taken,
            kept.iter()
                .copied()
                .filter(|v| v % 2 == 0)
                .collect::<Vec<_>>()
        );
        let left: Vec<usize> = kept.iter().copied().filter(|v| v % 2 != 0).collect();
        assert_eq!(contents(&q), left);
        assert_eq!(q.len(), left.len());
        // Pushing after a retain goes on at the back, in order.
        q.push_back(1_000);
        assert_eq!(q.iter().last(), Some(&1_000));
        assert_eq!(q.len(), left.len() + 1);
    }

    #[test]
    fn emptied_by_retain_it_keeps_one_chunk() {
        let mut q = ChunkedQueue::default();
        q.extend(0..2 * CHUNK);
        q.retain(|_| false);
        assert!(q.is_empty());
        assert_eq!(q.chunks.len(), 1);
        q.push_back(7);
        assert_eq!(q.pop_front(), Some(7));
        assert_eq!(q.len(), 0);
    }
}
