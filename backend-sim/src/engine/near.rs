//! The timeline's near actions: a priority queue of entries that pops the least first, made
//! of a FIFO run and a binary heap. Most near actions are scheduled in the order they are due
//! (a message sent later arrives later, over the same wire latency): such an entry is
//! appended to the run in O(1) and popped from it in O(1); only an entry due before the run's
//! last one goes into the heap. Pops take the least of the run's front and the heap's top, so
//! the order is exactly that of one heap.

use std::collections::{BinaryHeap, VecDeque};

/// Capacity below which neither part is shrunk.
const KEPT_CAPACITY: usize = 256;

/// A min-queue of `T`: a FIFO run, ascending, and a heap of the rest.
pub(super) struct Near<T: Ord + Copy> {
    /// Entries in ascending order, each greater than every earlier one.
    run: VecDeque<T>,
    /// Entries that came out of order; `BinaryHeap` is a max-heap, so `T` orders the least
    /// entry greatest (as `Reverse` would).
    heap: BinaryHeap<T>,
}

impl<T: Ord + Copy> Near<T> {
    pub(super) fn new() -> Self {
        Near {
            run: VecDeque::new(),
            heap: BinaryHeap::new(),
        }
    }

    /// How many entries are held.
    pub(super) fn len(&self) -> usize {
        self.run.len() + self.heap.len()
    }

    /// Adds `entry`.
    pub(super) fn push(&mut self, entry: T) {
        // Reversed order: "greater" means due earlier.
        match self.run.back() {
            Some(last) if entry >= *last => self.heap.push(entry),
            _ => self.run.push_back(entry),
        }
    }

    /// The entry due first.
    pub(super) fn peek(&self) -> Option<&T> {
        match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(h)) => Some(if h > r { h } else { r }),
            (r, h) => r.or(h),
        }
    }

    /// Removes and returns the entry due first.
    pub(super) fn pop(&mut self) -> Option<T> {
        let from_heap = match (self.run.front(), self.heap.peek()) {
            (Some(r), Some(h)) => h > r,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let entry = if from_heap {
            self.heap.pop()
        } else {
            self.run.pop_front()
        };
        self.shrink();
        entry
    }

    /// Keeps only the entries `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.run.retain(&mut keep);
        let heap = std::mem::take(&mut self.heap);
        let kept: Vec<T> = heap.into_vec().into_iter().filter(|e| keep(e)).collect();
        self.heap = BinaryHeap::from(kept);
    }

    /// Gives back half of what a burst grew, once a part holds less than a quarter of it.
    fn shrink(&mut self) {
        let capacity = self.heap.capacity();
        if capacity > KEPT_CAPACITY && self.heap.len() < capacity / 4 {
            self.heap.shrink_to(capacity / 2);
        }
        let capacity = self.run.capacity();
        if capacity > KEPT_CAPACITY && self.run.len() < capacity / 4 {
            self.run.shrink_to(capacity / 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Near;
    use std::cmp::Reverse;

    /// In order, out of order and interleaved pushes pop in ascending order.
    #[test]
    fn pops_the_least_first_whatever_the_push_order() {
        let mut near = Near::new();
        for v in [5u32, 7, 3, 8, 8, 1, 9, 4] {
            near.push(Reverse(v));
        }
        assert_eq!(near.len(), 8);
        assert_eq!(near.peek(), Some(&Reverse(1)));
        let popped: Vec<u32> = std::iter::from_fn(|| near.pop().map(|Reverse(v)| v)).collect();
        assert_eq!(popped, [1, 3, 4, 5, 7, 8, 8, 9]);
        assert_eq!(near.peek(), None);
    }

    #[test]
    fn retain_keeps_the_order() {
        let mut near = Near::new();
        for v in [2u32, 4, 1, 6, 3, 5] {
            near.push(Reverse(v));
        }
        near.retain(|Reverse(v)| v % 2 == 1);
        let popped: Vec<u32> = std::iter::from_fn(|| near.pop().map(|Reverse(v)| v)).collect();
        assert_eq!(popped, [1, 3, 5]);
    }
}
