//! The lifecycle driver's own bookkeeping, laid out so that the driver's work stays small beside
//! the engine's at 100k connections in flight: its tables are swept in the order events arrive
//! (each endpoint's ids in the order they were made), so they are kept in that order.

use std::ops::{Index, IndexMut};

use cmtwin::IdHandle;

/// Ids to connection numbers, one list per endpoint (0 the server, `k + 1` client host `k`),
/// each sorted by id, searched from where the last lookup left off, else by bisection.
///
/// Any handle values work; each endpoint's events arrive about in the order its ids were
/// made, and the simulator's handles grow in that order, so an insert appends and a lookup
/// most often finds its id just after the last one found: the lookups sweep each list front
/// to back, reading a line for several of them, where a hash table read a cold group of
/// control bytes and a cold slot for nearly every one.
pub(crate) struct Owners {
    lists: Vec<Vec<(IdHandle, u32)>>,
    /// Per list, the place after the last id found.
    fingers: Vec<usize>,
}

impl Owners {
    /// `endpoints` empty lists, each with room for `per_endpoint` ids.
    pub(crate) fn new(endpoints: usize, per_endpoint: impl Fn(usize) -> usize) -> Self {
        Owners {
            lists: (0..endpoints)
                .map(|e| Vec::with_capacity(per_endpoint(e)))
                .collect(),
            fingers: vec![0; endpoints],
        }
    }

    /// Records that `id` of `endpoint` belongs to connection `conn` (replacing what it said).
    pub(crate) fn insert(&mut self, endpoint: u8, id: IdHandle, conn: u32) {
        let list = &mut self.lists[usize::from(endpoint)];
        if list.last().is_none_or(|(last, _)| *last < id) {
            list.push((id, conn));
            return;
        }
        let at = list.partition_point(|(i, _)| *i < id);
        match list.get_mut(at) {
            Some(entry) if entry.0 == id => entry.1 = conn,
            _ => list.insert(at, (id, conn)),
        }
    }

    /// The connection `id` of `endpoint` belongs to, if it was recorded.
    pub(crate) fn get(&mut self, endpoint: u8, id: IdHandle) -> Option<u32> {
        let e = usize::from(endpoint);
        let list = self.lists.get(e)?;
        let finger = self.fingers[e];
        let at = match list.get(finger) {
            Some((next, _)) if *next == id => finger,
            _ => list.partition_point(|(i, _)| *i < id),
        };
        let (found, conn) = *list.get(at)?;
        if found != id {
            return None;
        }
        self.fingers[e] = at + 1;
        Some(conn)
    }
}

/// One record per connection, indexed by connection number but stored host by host
/// (connection `c` runs on client host `c % hosts`): a client host's events, which come in its
/// connections' order, then read neighbouring records.
pub(crate) struct ByHost<T> {
    records: Vec<T>,
    hosts: usize,
    per_host: usize,
    len: usize,
}

impl<T: Clone + Default> ByHost<T> {
    /// `len` default records for connections spread over `hosts` hosts.
    pub(crate) fn new(len: usize, hosts: usize) -> Self {
        let per_host = len.div_ceil(hosts);
        ByHost {
            records: vec![T::default(); per_host * hosts],
            hosts,
            per_host,
            len,
        }
    }
}

impl<T> ByHost<T> {
    /// How many connections there are.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn place(&self, conn: usize) -> usize {
        assert!(conn < self.len, "connection {conn} of {}", self.len);
        (conn % self.hosts) * self.per_host + conn / self.hosts
    }
}

impl<T> Index<usize> for ByHost<T> {
    type Output = T;

    fn index(&self, conn: usize) -> &T {
        &self.records[self.place(conn)]
    }
}

impl<T> IndexMut<usize> for ByHost<T> {
    fn index_mut(&mut self, conn: usize) -> &mut T {
        let place = self.place(conn);
        &mut self.records[place]
    }
}

#[cfg(test)]
mod tests {
    use cmtwin::IdHandle;

    use super::{ByHost, Owners};

    #[test]
    fn owners_find_what_was_recorded_in_any_order() {
        let mut owners = Owners::new(3, |_| 2);
        for (endpoint, raw, conn) in [(1, 40, 4), (1, 10, 1), (2, 10, 7), (1, 25, 2), (0, 5, 9)] {
            owners.insert(endpoint, IdHandle::from_raw(raw), conn);
        }
        assert_eq!(owners.get(1, IdHandle::from_raw(10)), Some(1));
        assert_eq!(owners.get(1, IdHandle::from_raw(25)), Some(2));
        assert_eq!(owners.get(1, IdHandle::from_raw(40)), Some(4));
        assert_eq!(owners.get(2, IdHandle::from_raw(10)), Some(7));
        assert_eq!(owners.get(0, IdHandle::from_raw(5)), Some(9));
        // Another endpoint's id, an id never recorded, an endpoint that does not exist.
        assert_eq!(owners.get(0, IdHandle::from_raw(10)), None);
        assert_eq!(owners.get(1, IdHandle::from_raw(11)), None);
        assert_eq!(owners.get(3, IdHandle::from_raw(10)), None);
        owners.insert(1, IdHandle::from_raw(25), 3);
        assert_eq!(owners.get(1, IdHandle::from_raw(25)), Some(3));
        assert_eq!(owners.lists[1].len(), 3);
        // The next id in order is found from the finger, an earlier one by bisection.
        assert_eq!(owners.fingers[1], 2);
        assert_eq!(owners.get(1, IdHandle::from_raw(40)), Some(4));
        assert_eq!(owners.get(1, IdHandle::from_raw(10)), Some(1));
        assert_eq!(owners.fingers[1], 1);
    }

    #[test]
    fn records_of_one_host_are_neighbours() {
        let mut conns: ByHost<u32> = ByHost::new(10, 4);
        for c in 0..10 {
            conns[c] = c as u32 * 10;
        }
        assert_eq!(conns.len(), 10);
        assert_eq!(
            (0..10).map(|c| conns[c]).collect::<Vec<_>>(),
            [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
        );
        // Host 1's connections 1, 5 and 9 sit side by side.
        assert_eq!(conns.records[3..6], [10, 50, 90]);
    }
}
