//! Keyed storage for the world's objects (ids, channels, endpoints, outstanding events).
//!
//! Keys are serial numbers drawn from one counter per fabric and never reused, so a stale key
//! can never reach a newer object (the serial is its own generation). Lookups are O(1) in a
//! hash table with a fixed, seedless hasher; iteration, which could leak the table's layout
//! into behaviour, is only offered in ascending key order (creation order), the order the
//! trace and the event queues follow.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Index;

use crate::slab::Slab;

/// Keys that differ only in their low `BLOCK_BITS` bits (a block) share a home bucket.
const BLOCK_BITS: u32 = 4;

/// A multiplicative hasher for serial-number keys: fast, and the same on every run.
///
/// Each word written is mixed in turned right by [`BLOCK_BITS`], then multiplied by an odd
/// constant. The bucket a table starts its search at comes from the low bits of the hash,
/// which are a one-to-one function of the low bits of the turned word: keys of one block
/// (objects made one after the other) start at one bucket and sit in neighbouring ones, so a
/// sweep over them in creation order, as a burst of connections makes, reads each line of a
/// large table's control bytes and slots once for several objects, not once per object; the
/// blocks are scattered over the table as a multiplicative hash scatters keys. The top bits,
/// from which the table takes its 7-bit tag, differ between the keys of a block (their low
/// bits, turned to the top, are multiplied by an odd number there), so a lookup compares one
/// key, not a block's.
#[derive(Default)]
pub(crate) struct SerialHasher(u64);

impl Hasher for SerialHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n)
            .rotate_right(BLOCK_BITS)
            .wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

/// An index from small keys (serials, host numbers, QP numbers, ports) to values: O(1)
/// lookups with [`SerialHasher`]. Its iteration order depends on the table's layout, so
/// behaviour and traces must only ever look keys up in it, never walk it.
pub(crate) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<SerialHasher>>;

/// Objects by serial key.
pub(crate) struct Store<T> {
    map: HashMap<u64, T, BuildHasherDefault<SerialHasher>>,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            map: HashMap::default(),
        }
    }
}

impl<T> Store<T> {
    pub(crate) fn get(&self, key: &u64) -> Option<&T> {
        self.map.get(key)
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut T> {
        self.map.get_mut(key)
    }

    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn insert(&mut self, key: u64, value: T) {
        let old = self.map.insert(key, value);
        debug_assert!(old.is_none(), "serial keys are never reused");
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<T> {
        self.map.remove(key)
    }

    /// How many objects there are.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The keys, ascending.
    pub(crate) fn keys_sorted(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.map.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// Every (key, object) in no particular order: only for questions whose answer does not
    /// depend on the order (the invariant checks).
    pub(crate) fn iter_unordered(&self) -> impl Iterator<Item = (&u64, &T)> {
        self.map.iter()
    }

    /// Every (key, object), in ascending key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u64, &T)> {
        let mut all: Vec<(&u64, &T)> = self.map.iter().collect();
        all.sort_unstable_by_key(|(k, _)| **k);
        all.into_iter()
    }
}

impl<T> Index<&u64> for Store<T> {
    type Output = T;

    fn index(&self, key: &u64) -> &T {
        &self.map[key]
    }
}

impl<'a, T> IntoIterator for &'a Store<T> {
    type Item = (&'a u64, &'a T);
    type IntoIter = std::vec::IntoIter<(&'a u64, &'a T)>;

    fn into_iter(self) -> Self::IntoIter {
        let mut all: Vec<(&u64, &T)> = self.map.iter().collect();
        all.sort_unstable_by_key(|(k, _)| **k);
        all.into_iter()
    }
}

/// The hash of serial `key`, as [`KeyMap`]s and [`Store`]s compute it.
fn serial_hash(key: u64) -> u64 {
    let mut h = SerialHasher::default();
    h.write_u64(key);
    h.finish()
}

/// An object of a [`BoxedStore`] with its key, in one allocation.
struct Slot<T> {
    key: u64,
    value: T,
}

/// Objects by serial key, each in an allocation of its own that also holds its key, so that
/// the table holds one pointer per bucket (a [`Store`] of boxes holds the key too: twice the
/// table for the same objects). For the large objects of which there is one per connection
/// (ids, endpoints, QPs): growing the table moves pointers, and a table
/// at half its load weighs 9 bytes a bucket, not 17. Same contract as [`Store`].
pub(crate) struct BoxedStore<T> {
    table: hashbrown::HashTable<Box<Slot<T>>>,
}

impl<T> Default for BoxedStore<T> {
    fn default() -> Self {
        BoxedStore {
            table: hashbrown::HashTable::new(),
        }
    }
}

impl<T> BoxedStore<T> {
    pub(crate) fn get(&self, key: &u64) -> Option<&T> {
        self.table
            .find(serial_hash(*key), |s| s.key == *key)
            .map(|s| &s.value)
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut T> {
        self.table
            .find_mut(serial_hash(*key), |s| s.key == *key)
            .map(|s| &mut s.value)
    }

    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn insert(&mut self, key: u64, value: T) {
        debug_assert!(!self.contains_key(&key), "serial keys are never reused");
        self.table
            .insert_unique(serial_hash(key), Box::new(Slot { key, value }), |s| {
                serial_hash(s.key)
            });
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<T> {
        match self.table.find_entry(serial_hash(*key), |s| s.key == *key) {
            Ok(found) => Some(found.remove().0.value),
            Err(_) => None,
        }
    }

    /// How many objects there are.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The keys, ascending.
    pub(crate) fn keys_sorted(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.table.iter().map(|s| s.key).collect();
        keys.sort_unstable();
        keys
    }

    /// Every (key, object) in no particular order: only for questions whose answer does not
    /// depend on the order (the invariant checks).
    pub(crate) fn iter_unordered(&self) -> impl Iterator<Item = (&u64, &T)> {
        self.table.iter().map(|s| (&s.key, &s.value))
    }

    /// Every (key, object), in ascending key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u64, &T)> {
        let mut all: Vec<(&u64, &T)> = self.iter_unordered().collect();
        all.sort_unstable_by_key(|(k, _)| **k);
        all.into_iter()
    }
}

impl<T> Index<&u64> for BoxedStore<T> {
    type Output = T;

    fn index(&self, key: &u64) -> &T {
        self.get(key).expect("a live key")
    }
}

impl<'a, T> IntoIterator for &'a BoxedStore<T> {
    type Item = (&'a u64, &'a T);
    type IntoIter = std::vec::IntoIter<(&'a u64, &'a T)>;

    fn into_iter(self) -> Self::IntoIter {
        in_key_order(self.iter_unordered())
    }
}

/// An object of a [`SlabStore`] with its key, in one place of its slab.
struct Place<T> {
    key: u64,
    value: T,
}

/// Objects by serial key, each in a place of a [`Slab`] that also holds its key, so that the
/// table holds one 4-byte place number per bucket. For the small objects of which there are
/// several per connection (CQs and completion channels: librdmacm makes two of each for
/// every QP it creates without them): making or dropping one allocates and frees nothing
/// (a `Box` each cost a `malloc` and a `free`, more than the object's own work), and a table
/// at half its load weighs 5 bytes a bucket, not 9 as a [`BoxedStore`]'s. A dropped object's
/// place is kept for the next object: the slab never shrinks while the store lives. For the
/// large objects a `Box` each stays cheaper: a slab moves them in and out of their place
/// by copy, and each lookup decodes the place. Same contract as [`Store`].
pub(crate) struct SlabStore<T> {
    table: hashbrown::HashTable<u32>,
    slab: Slab<Place<T>>,
}

impl<T> Default for SlabStore<T> {
    fn default() -> Self {
        SlabStore {
            table: hashbrown::HashTable::new(),
            slab: Slab::default(),
        }
    }
}

impl<T> SlabStore<T> {
    /// The place of the object of `key`, if there is one.
    #[inline]
    fn place(&self, key: u64) -> Option<u32> {
        let slab = &self.slab;
        self.table
            .find(serial_hash(key), |&p| slab.get(p).key == key)
            .copied()
    }

    #[inline]
    pub(crate) fn get(&self, key: &u64) -> Option<&T> {
        self.place(*key).map(|p| &self.slab.get(p).value)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut T> {
        self.place(*key).map(|p| &mut self.slab.get_mut(p).value)
    }

    #[inline]
    pub(crate) fn contains_key(&self, key: &u64) -> bool {
        self.place(*key).is_some()
    }

    pub(crate) fn insert(&mut self, key: u64, value: T) {
        debug_assert!(!self.contains_key(&key), "serial keys are never reused");
        let place = self.slab.put(Place { key, value });
        let slab = &self.slab;
        self.table
            .insert_unique(serial_hash(key), place, |&p| serial_hash(slab.get(p).key));
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<T> {
        let slab = &self.slab;
        let place = match self
            .table
            .find_entry(serial_hash(*key), |&p| slab.get(p).key == *key)
        {
            Ok(found) => found.remove().0,
            Err(_) => return None,
        };
        Some(self.slab.take(place).value)
    }

    /// How many objects there are.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Every (key, object) in no particular order: only for questions whose answer does not
    /// depend on the order (the invariant checks).
    pub(crate) fn iter_unordered(&self) -> impl Iterator<Item = (&u64, &T)> {
        self.slab.iter().map(|s| (&s.key, &s.value))
    }
}

impl<T> Index<&u64> for SlabStore<T> {
    type Output = T;

    #[inline]
    fn index(&self, key: &u64) -> &T {
        self.get(key).expect("a live key")
    }
}

impl<'a, T> IntoIterator for &'a SlabStore<T> {
    type Item = (&'a u64, &'a T);
    type IntoIter = std::vec::IntoIter<(&'a u64, &'a T)>;

    fn into_iter(self) -> Self::IntoIter {
        in_key_order(self.iter_unordered())
    }
}

/// A serial key or none, in one word: serial keys count from 1, so 0 is free to mean none
/// (an `Option<u64>` takes two words).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OptKey(u64);

impl OptKey {
    /// No key.
    pub(crate) const NONE: OptKey = OptKey(0);

    /// Key `key` (never 0).
    pub(crate) fn some(key: u64) -> Self {
        debug_assert!(key != 0, "serial keys count from 1");
        OptKey(key)
    }

    /// The key, if there is one.
    pub(crate) fn get(self) -> Option<u64> {
        (self.0 != 0).then_some(self.0)
    }

    /// The key, if there is one, leaving none.
    pub(crate) fn take(&mut self) -> Option<u64> {
        std::mem::take(self).get()
    }
}

impl std::fmt::Debug for OptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A store's entries in key order (what iterating a store by reference gives).
fn in_key_order<'a, T>(
    entries: impl Iterator<Item = (&'a u64, &'a T)>,
) -> std::vec::IntoIter<(&'a u64, &'a T)> {
    let mut all: Vec<(&u64, &T)> = entries.collect();
    all.sort_unstable_by_key(|(k, _)| **k);
    all.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slab's place costs the object, its key and, for an object with no spare value to
    /// mark an empty place (a completion channel), one word more (the heap per connected id
    /// counts these places).
    #[test]
    fn a_place_of_a_cq_or_a_completion_channel_keeps_its_size() {
        use std::mem::size_of;
        assert_eq!(size_of::<Option<Place<crate::verbs::Cq>>>(), 48 + 8);
        assert_eq!(
            size_of::<Option<Place<crate::verbs::CompChannel>>>(),
            24 + 8 + 8
        );
    }

    /// The 16 keys of a block share every bucket bit of their hash (a home bucket in any
    /// table) and differ in the 7-bit tag; neighbouring blocks start elsewhere.
    #[test]
    fn the_keys_of_a_block_share_a_home_and_not_a_tag() {
        const BUCKET_BITS: u64 = (1 << 57) - 1;
        for block in [0u64, 1, 2, 77, 1 << 20, (1 << 36) + 5] {
            let hashes: Vec<u64> = (0..16).map(|low| serial_hash((block << 4) | low)).collect();
            let home = hashes[0] & BUCKET_BITS;
            assert!(
                hashes.iter().all(|h| h & BUCKET_BITS == home),
                "block {block}"
            );
            let mut tags: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
            tags.sort_unstable();
            tags.dedup();
            assert_eq!(tags.len(), 16, "block {block}");
            let next = serial_hash((block + 1) << 4) & BUCKET_BITS;
            assert_ne!(next & 0xffff, home & 0xffff, "block {block}");
        }
    }
}
