//! A growable array kept in fixed-size chunks: growing it allocates one more chunk and moves
//! nothing, where a `Vec` that doubles copies everything it holds (at 100k pending actions,
//! megabytes through the cache on every doubling).

use std::ops::{Index, IndexMut};

/// Places per chunk (a power of two).
const CHUNK_BITS: u32 = 8;
const CHUNK: usize = 1 << CHUNK_BITS;

/// A growable array of `T` in chunks of [`CHUNK`] places; only the chunks' pointers move as
/// it grows.
pub(super) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Chunked<T> {
    pub(super) fn new() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// How many places there are.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a place holding `value` at the end.
    pub(super) fn push(&mut self, value: T) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let last = self.chunks.last_mut().expect("a chunk with room");
        last.push(value);
        self.len += 1;
    }

    /// Every place, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_keep_their_values_across_chunks() {
        let mut c = Chunked::new();
        assert!(c.is_empty());
        let n = 3 * CHUNK + 5;
        for i in 0..n {
            c.push(i * 7);
        }
        assert_eq!(c.len(), n);
        assert_eq!(c.chunks.len(), 4);
        assert_eq!(c[0], 0);
        assert_eq!(c[CHUNK], CHUNK * 7);
        assert_eq!(c[n - 1], (n - 1) * 7);
        c[CHUNK + 1] = 1;
        assert_eq!(c[CHUNK + 1], 1);
        assert_eq!(c.iter().count(), n);
        assert_eq!(c.iter().nth(2 * CHUNK), Some(&(2 * CHUNK * 7)));
    }
}
