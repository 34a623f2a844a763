//! A FIFO that costs one pointer until it first holds something.
//!
//! Every QP has a send and a receive queue, every CQ a queue of completions, every completion
//! channel a queue of CQ events; most of them stay empty for their whole life (the CQs and
//! channels `rdma_create_qp` makes for an id that never sends, a receive queue of a QP that only
//! sends). A `VecDeque` is 32 bytes even when empty; this is 8, and allocates the deque on the
//! first mutable use, keeping it from then on.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut, RangeBounds};

/// A `VecDeque` made on first mutable use. Reads of one never written see an empty deque.
// Boxing the collection is the point: one pointer while unused, instead of its 32 bytes.
#[allow(clippy::box_collection)]
pub(crate) struct LazyDeque<T>(Option<Box<VecDeque<T>>>);

impl<T> Default for LazyDeque<T> {
    fn default() -> Self {
        LazyDeque(None)
    }
}

impl<T> LazyDeque<T> {
    /// Takes the oldest element (allocating nothing when there is none).
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        self.0.as_mut()?.pop_front()
    }

    /// Removes the elements in `range` and yields them (allocating nothing when there are
    /// none).
    pub(crate) fn drain<R: RangeBounds<usize>>(
        &mut self,
        range: R,
    ) -> impl Iterator<Item = T> + '_ {
        self.0
            .as_mut()
            .map(|deque| deque.drain(range))
            .into_iter()
            .flatten()
    }

    /// Keeps only the elements `keep` accepts (allocating nothing when there are none).
    pub(crate) fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        if let Some(deque) = self.0.as_mut() {
            deque.retain(keep);
        }
    }
}

impl<T> Deref for LazyDeque<T> {
    type Target = VecDeque<T>;

    fn deref(&self) -> &VecDeque<T> {
        match &self.0 {
            Some(deque) => deque,
            None => const { &VecDeque::new() },
        }
    }
}

impl<T> DerefMut for LazyDeque<T> {
    fn deref_mut(&mut self) -> &mut VecDeque<T> {
        self.0.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::LazyDeque;

    #[test]
    fn reads_and_pops_of_an_unused_deque_allocate_nothing() {
        let mut d: LazyDeque<u32> = LazyDeque::default();
        assert!(d.is_empty());
        assert_eq!(d.len(), 0);
        assert_eq!(d.pop_front(), None);
        assert_eq!(d.drain(..).count(), 0);
        d.retain(|_| false);
        assert!(d.0.is_none(), "still unallocated");
    }

    #[test]
    fn behaves_as_a_fifo_once_used() {
        let mut d: LazyDeque<u32> = LazyDeque::default();
        d.push_back(1);
        d.push_back(2);
        d.push_back(3);
        d.push_back(4);
        assert_eq!(d.drain(3..).collect::<Vec<_>>(), vec![4]);
        d.retain(|&x| x != 2);
        assert_eq!(d.iter().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(d[1], 3);
        assert_eq!(d.pop_front(), Some(1));
        assert_eq!(d.pop_front(), Some(3));
        assert_eq!(d.pop_front(), None);
        assert!(d.0.is_some(), "kept once made");
    }
}
