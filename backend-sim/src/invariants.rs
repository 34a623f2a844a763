//! Invariants the simulator asserts about itself after every step (in debug builds), as
//! TigerBeetle's VOPR does: a violation is a simulator bug, reported at the step that caused it.

use cmtwin::EventKind;

use crate::store::KeyMap;
use crate::world::World;

/// Worlds up to this many objects are checked after every step and call.
const CHECK_EVERY_STEP_UP_TO: usize = 16;

impl World {
    /// Checks the invariants after a step or call, at a cost that stays constant per step on
    /// average: after every one while the world is small, then after every n-th, n growing
    /// with what a full check walks (the objects, and what the last check found queued and
    /// outstanding: thousands of posted receives on one QP are as many items). A violation
    /// is still caught, a few steps after the one that caused it at worst.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn check_invariants_amortized(&mut self) {
        let objects = self.kernel.ids.len() + self.kernel.channels.len() + self.cm.eps.len();
        let size = objects.max(self.check_cost);
        self.unchecked += 1;
        if size <= CHECK_EVERY_STEP_UP_TO || self.unchecked * CHECK_EVERY_STEP_UP_TO >= size {
            self.unchecked = 0;
            self.check_cost = self.check_invariants();
        }
    }

    /// Panics, naming the invariant, if the world is inconsistent; returns how many items it
    /// walked.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(crate) fn check_invariants(&self) -> usize {
        let verbs = self.check_verbs_invariants();
        let queued: usize = (self.kernel.channels.iter_unordered())
            .map(|(_, c)| c.queue.len())
            .sum();
        let walked = verbs
            + 3 * self.kernel.ids.len()
            + self.kernel.channels.len()
            + self.cm.eps.len()
            + self.cm.passive_by_peer.len()
            + queued
            + self.kernel.outstanding.len();
        for (key, id) in self.kernel.ids.iter_unordered() {
            assert!(
                self.kernel.channels.contains_key(&id.channel),
                "id {key} lives on a channel that does not exist"
            );
            if let Some(ep) = id.ep.get() {
                if let Some(e) = self.cm.eps.get(&ep) {
                    assert_eq!(
                        e.owner,
                        Some(*key),
                        "endpoint {ep} does not point back to its id {key}"
                    );
                }
            }
        }
        for (ep, e) in self.cm.eps.iter_unordered() {
            assert_eq!(
                e.owner.is_some(),
                e.cm.is_owned(),
                "endpoint {ep} and the world disagree on whether an id owns it"
            );
            if let Some(owner) = e.owner {
                let id = self
                    .kernel
                    .ids
                    .get(&owner)
                    .unwrap_or_else(|| panic!("endpoint {ep} owned by dead id {owner}"));
                assert_eq!(
                    id.ep.get(),
                    Some(*ep),
                    "id {owner} does not point to its endpoint {ep}"
                );
            }
        }
        for ((host, peer), ep) in &self.cm.passive_by_peer {
            let e = self
                .cm
                .eps
                .get(ep)
                .unwrap_or_else(|| panic!("index names dead endpoint {ep}"));
            assert!(
                e.host == *host && e.cm.peer() == Some(*peer) && !e.cm.is_active(),
                "endpoint {ep} is indexed wrongly"
            );
        }
        // Counts are only looked up, never walked, so hash maps do (a fifth of a short fuzz
        // run went into building and dropping ordered maps here).
        let mut pending: KeyMap<u64, usize> = KeyMap::default();
        let mut queued: KeyMap<u64, u32> = KeyMap::default();
        let mut requests: KeyMap<u64, u64> = KeyMap::default();
        for (ck, c) in self.kernel.channels.iter_unordered() {
            for q in c.queue.iter() {
                *queued.entry(q.owner).or_default() += 1;
                if q.info.kind == EventKind::ConnectRequest {
                    requests.insert(q.owner, *ck);
                }
                assert!(
                    self.kernel.ids.contains_key(&q.owner),
                    "channel {ck} holds an event of dead id {}",
                    q.owner
                );
                if q.info.kind == EventKind::ConnectRequest {
                    *pending.entry(q.counted_against).or_default() += 1;
                }
            }
        }
        for (key, id) in self.kernel.ids.iter_unordered() {
            if let Some(l) = id.listen() {
                let queued = pending.get(key).copied().unwrap_or(0);
                assert_eq!(
                    l.pending, queued,
                    "listener {key} counts {} pending requests, {queued} are queued",
                    l.pending
                );
                assert!(l.pending <= l.backlog, "listener {key} is over its backlog");
            }
        }
        let mut unacked: KeyMap<u64, u32> = KeyMap::default();
        for (t, o) in self.kernel.outstanding.iter_unordered() {
            assert!(
                self.kernel.ids.contains_key(&o.counted_against),
                "ticket {t} is counted against a dead id"
            );
            *unacked.entry(o.counted_against).or_default() += 1;
        }
        for (key, id) in self.kernel.ids.iter_unordered() {
            let want = queued.get(key).copied().unwrap_or(0);
            assert_eq!(
                id.queued, want,
                "id {key} counts {} queued events",
                id.queued
            );
            let want = unacked.get(key).copied().unwrap_or(0);
            assert_eq!(id.unacked, want, "id {key} counts {} unacked", id.unacked);
            assert_eq!(
                id.request_queued_on.get(),
                requests.get(key).copied(),
                "id {key} misplaces its CONNECT_REQUEST"
            );
        }
        walked
    }

    /// The ordering guarantees of §5.5 for one more event of an id that already reported the
    /// kinds in `reported` (a bit per kind).
    pub(crate) fn check_event_order(reported: u64, kind: EventKind) {
        let had = |k: EventKind| reported & (1 << k.as_raw()) != 0;
        match kind {
            EventKind::Disconnected => assert!(!had(EventKind::Disconnected), "DISCONNECTED twice"),
            EventKind::TimewaitExit => {
                assert!(
                    had(EventKind::Disconnected),
                    "TIMEWAIT_EXIT before DISCONNECTED"
                );
                assert!(!had(EventKind::TimewaitExit), "TIMEWAIT_EXIT twice");
            }
            EventKind::User => {}
            other => assert!(
                !had(EventKind::DeviceRemoval),
                "{other} after DEVICE_REMOVAL"
            ),
        }
    }
}
