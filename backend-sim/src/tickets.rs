//! The fetched, unacknowledged events of a fabric, by ticket serial.
//!
//! An application that acknowledges each event before it fetches the next (the common loop)
//! never has more than one outstanding: the newest ticket is kept in a slot of its own, and
//! only an event fetched while another is outstanding moves the older one into the table.
//! Fetching and acknowledging such an event then costs no hash-table insert and remove.

use crate::kernel::{IdKey, Outstanding};
use crate::store::Store;

/// Outstanding events by ticket serial: the newest apart, the older ones in a table.
#[derive(Default)]
pub(crate) struct Tickets {
    /// The most recently fetched event, while it is outstanding: its ticket is greater than
    /// every ticket of `older` (tickets are drawn in increasing order).
    newest: Option<(u64, Outstanding)>,
    /// Every other outstanding event.
    older: Store<Outstanding>,
}

impl Tickets {
    /// Records the event fetched with the fresh ticket `ticket`, greater than every ticket
    /// issued before.
    pub(crate) fn insert(&mut self, ticket: u64, o: Outstanding) {
        debug_assert!(
            self.newest.as_ref().is_none_or(|(t, _)| *t < ticket),
            "tickets are issued in increasing order"
        );
        if let Some((t, prev)) = self.newest.replace((ticket, o)) {
            self.older.insert(t, prev);
        }
    }

    /// The outstanding event behind `ticket`.
    pub(crate) fn get(&self, ticket: &u64) -> Option<&Outstanding> {
        match &self.newest {
            Some((t, o)) if t == ticket => Some(o),
            _ => self.older.get(ticket),
        }
    }

    /// Takes the outstanding event behind `ticket` out.
    pub(crate) fn remove(&mut self, ticket: &u64) -> Option<Outstanding> {
        match &self.newest {
            Some((t, _)) if t == ticket => self.newest.take().map(|(_, o)| o),
            _ => self.older.remove(ticket),
        }
    }

    /// Takes the outstanding event behind `ticket` out if `pred` accepts it.
    pub(crate) fn remove_if(
        &mut self,
        ticket: &u64,
        pred: impl FnOnce(&Outstanding) -> bool,
    ) -> Option<Outstanding> {
        if pred(self.get(ticket)?) {
            self.remove(ticket)
        } else {
            None
        }
    }

    /// The tickets of the events counted against id `id`, ascending.
    pub(crate) fn counted_against(&self, id: IdKey) -> Vec<u64> {
        (self.iter())
            .filter(|(_, o)| o.counted_against == id)
            .map(|(t, _)| *t)
            .collect()
    }

    /// How many events are outstanding.
    pub(crate) fn len(&self) -> usize {
        self.older.len() + usize::from(self.newest.is_some())
    }

    /// Every (ticket, event), in no particular order: only for questions whose answer does
    /// not depend on the order (the invariant checks).
    pub(crate) fn iter_unordered(&self) -> impl Iterator<Item = (&u64, &Outstanding)> {
        self.older
            .iter_unordered()
            .chain(self.newest.iter().map(|(t, o)| (t, o)))
    }

    /// Every (ticket, event), in ascending ticket order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u64, &Outstanding)> {
        self.older
            .iter()
            .chain(self.newest.iter().map(|(t, o)| (t, o)))
    }
}

#[cfg(test)]
mod tests {
    use super::Tickets;
    use crate::kernel::Outstanding;
    use cmtwin::EventKind;

    fn fetched(owner: u64) -> Outstanding {
        Outstanding {
            host: 0,
            counted_against: owner,
            owner,
            kind: EventKind::Established,
            membership: None,
        }
    }

    fn tickets_of(t: &Tickets) -> Vec<(u64, u64)> {
        t.iter().map(|(k, o)| (*k, o.owner)).collect()
    }

    #[test]
    fn the_newest_ticket_and_the_older_ones_answer_alike() {
        let mut t = Tickets::default();
        t.insert(1, fetched(10));
        t.insert(2, fetched(20));
        t.insert(3, fetched(30));
        assert_eq!(t.len(), 3);
        assert_eq!(tickets_of(&t), [(1, 10), (2, 20), (3, 30)]);
        assert_eq!(t.get(&3).map(|o| o.owner), Some(30));
        assert_eq!(t.get(&1).map(|o| o.owner), Some(10));
        assert!(t.get(&4).is_none());
        // An older ticket acknowledged first, then the newest, then one already gone.
        assert_eq!(t.remove(&2).map(|o| o.owner), Some(20));
        assert_eq!(t.remove(&3).map(|o| o.owner), Some(30));
        assert!(t.remove(&3).is_none());
        assert_eq!(tickets_of(&t), [(1, 10)]);
        // A ticket after the newest was taken still sorts after the older ones.
        t.insert(4, fetched(40));
        assert_eq!(tickets_of(&t), [(1, 10), (4, 40)]);
        let mut unordered: Vec<u64> = t.iter_unordered().map(|(k, _)| *k).collect();
        unordered.sort_unstable();
        assert_eq!(unordered, [1, 4]);
        assert_eq!(t.len(), 2);
        t.insert(5, fetched(10));
        assert_eq!(t.counted_against(10), [1, 5]);
        assert_eq!(t.counted_against(40), [4]);
        assert!(t.counted_against(20).is_empty());
    }

    #[test]
    fn a_refused_removal_leaves_the_event_outstanding() {
        let mut t = Tickets::default();
        t.insert(1, fetched(10));
        t.insert(2, fetched(20));
        for ticket in [1, 2] {
            assert!(t.remove_if(&ticket, |o| o.owner == 99).is_none());
        }
        assert!(t.remove_if(&5, |_| true).is_none());
        assert_eq!(tickets_of(&t), [(1, 10), (2, 20)]);
        assert_eq!(
            t.remove_if(&2, |o| o.owner == 20).map(|o| o.owner),
            Some(20)
        );
        assert_eq!(
            t.remove_if(&1, |o| o.owner == 10).map(|o| o.owner),
            Some(10)
        );
        assert_eq!(t.len(), 0);
    }
}
