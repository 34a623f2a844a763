//! Places for objects in fixed-size chunks, reused through a free list: putting an object in
//! allocates nothing but one chunk per [`CHUNK`] places, and taking one out frees nothing, where
//! a `Box` per object costs a `malloc` and a `free` (CQs and completion channels: 8 per
//! connection lifecycle).

/// Places per chunk (a power of two): small enough that a fabric of a few objects holds little,
/// large enough that a chunk's allocation is rare.
const CHUNK_BITS: u32 = 6;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Objects in numbered places. A place once made lives as long as the slab; a freed place is
/// the next one [`Slab::put`] fills (last freed, first filled).
pub(crate) struct Slab<T> {
    chunks: Vec<Box<[Option<T>; CHUNK]>>,
    /// Places made so far (filled or free).
    made: usize,
    /// Free places, the last freed at the end.
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            chunks: Vec::new(),
            made: 0,
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Puts `value` in a free place, or a new one, and says which.
    pub(crate) fn put(&mut self, value: T) -> u32 {
        if let Some(place) = self.free.pop() {
            let slot = self.slot_mut(place);
            debug_assert!(slot.is_none(), "a free place is empty");
            *slot = Some(value);
            return place;
        }
        if self.made % CHUNK == 0 {
            self.chunks.push(empty_chunk());
        }
        let place = u32::try_from(self.made).expect("fewer than 2^32 objects at once");
        *self.slot_mut(place) = Some(value);
        self.made += 1;
        place
    }

    /// Takes the object out of `place` (filled), leaving the place free.
    pub(crate) fn take(&mut self, place: u32) -> T {
        let value = self.slot_mut(place).take().expect("a filled place");
        self.free.push(place);
        value
    }

    /// The object in `place` (filled).
    #[inline]
    pub(crate) fn get(&self, place: u32) -> &T {
        self.chunks[place as usize >> CHUNK_BITS][place as usize & (CHUNK - 1)]
            .as_ref()
            .expect("a filled place")
    }

    /// The object in `place` (filled), to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, place: u32) -> &mut T {
        self.slot_mut(place).as_mut().expect("a filled place")
    }

    /// The place `place` (made), filled or not. The mask keeps the index inside the chunk's
    /// array, so only the chunk's number is checked.
    #[inline]
    fn slot_mut(&mut self, place: u32) -> &mut Option<T> {
        &mut self.chunks[place as usize >> CHUNK_BITS][place as usize & (CHUNK - 1)]
    }

    /// Every object, in the order of their places.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter()).flatten()
    }
}

/// A chunk of [`CHUNK`] empty places, made on the heap (not built on the stack and moved).
fn empty_chunk<T>() -> Box<[Option<T>; CHUNK]> {
    let places: Box<[Option<T>]> = (0..CHUNK).map(|_| None).collect();
    places
        .try_into()
        .unwrap_or_else(|_| unreachable!("CHUNK places"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_keep_their_objects_across_chunks_and_freed_places_are_refilled_last_first() {
        let mut slab = Slab::default();
        let n = 2 * CHUNK + 3;
        let places: Vec<u32> = (0..n).map(|i| slab.put(i * 10)).collect();
        assert_eq!(places, (0..n as u32).collect::<Vec<_>>());
        assert_eq!(*slab.get(CHUNK as u32 + 1), (CHUNK + 1) * 10);
        *slab.get_mut(5) += 1;
        assert_eq!(slab.take(5), 51);
        assert_eq!(slab.take(CHUNK as u32), CHUNK * 10);
        assert_eq!(slab.iter().count(), n - 2);
        assert_eq!(slab.put(7), CHUNK as u32);
        assert_eq!(slab.put(8), 5);
        assert_eq!(slab.put(9), n as u32);
        assert_eq!(*slab.get(5), 8);
        assert_eq!(slab.chunks.len(), 3);
        let all: Vec<usize> = slab.iter().copied().collect();
        assert_eq!(all.len(), n + 1);
        assert_eq!(all[5], 8);
        assert_eq!(all[CHUNK], 7);
        assert_eq!(all[n], 9);
    }
}
