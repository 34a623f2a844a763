//! Polls in vain: when they let virtual time move, and when they are a livelock.
//!
//! A simulated process that polls (a non-blocking or zero-timeout wait, an empty `poll_cq`, a
//! zero sleep, `cmtwin::thread::yield_now`) and finds nothing gives way to the others, and when
//! none can run, or every one that can has polled in vain with its poll still standing
//! ([`StandingPolls`]: nothing another process did since could be what it looks for), the
//! timeline runs its next action (`process::yield_now`): the shortcut for a process that would
//! spin until then. It is wrong for a process that has something waiting
//! elsewhere (an event on another of its CM channels, a completion in a CQ of its host, a CQ
//! event, an asynchronous event), which it would find at its next look, microseconds later:
//! such a poll leaves virtual time where it is, for at most [`POLLS_BEFORE_TIME_MOVES`] vain
//! polls in a row (a process that never looks there does not stop time for ever).
//!
//! A livelock: when the timeline is empty, no process can be woken, and every process that can
//! run has only polled in vain, over and over, since anything last changed, nothing ever will:
//! on hardware such a program spins for ever. The simulator says so instead: once every process
//! that can run has polled in vain [`VAIN_POLLS_FOR_LIVELOCK`] times in a row with no change in
//! between, the poll fails (EDEADLK for the fabric's calls; `cmtwin::thread::yield_now`, which
//! cannot fail, ends its process with the same report).
//!
//! "A change" is anything a poll could observe: virtual time moving, or a process making a
//! call that is not a poll or wait (it may queue an event or post work without the timeline),
//! or operating a primitive of `cmtwin::sync`. The count is that large so that a process
//! reading memory another process writes between its polls (which the fabric cannot see) has
//! long since seen the write.

use crate::topology::HostKey;
use crate::world::World;

/// Vain polls in a row of a process with input waiting elsewhere after which virtual time
/// moves on all the same.
pub(crate) const POLLS_BEFORE_TIME_MOVES: u32 = 64;

/// Consecutive vain polls of every process that can run, with nothing changed in between,
/// after which the run is declared livelocked.
pub(crate) const VAIN_POLLS_FOR_LIVELOCK: u32 = 10_000;

/// The report given to a process whose poll finds the run livelocked.
pub(crate) const LIVELOCK_REPORT: &str =
    "livelock: every process that can run keeps polling in vain, no process can be woken and \
     nothing is left in the timeline, so nothing can ever change what they poll";

/// The payload a process unwinds with when a poll that cannot fail finds the run livelocked
/// (its run reports it as the process's failure).
pub(crate) struct Livelocked;

/// Whose last poll in vain still stands: a process's does until virtual time moves or
/// another process changes something it could observe (a call that is not a poll or wait, a
/// primitive's operation, the end of a thread, whose last writes its poll may look for). Its
/// own calls leave it standing: they are what it does between its looks. While the poll of
/// every process that can run stands, only the timeline can change anything
/// (`process::yield_now`); a poll that fell must be made again first.
#[derive(Default)]
pub(crate) struct StandingPolls {
    /// Bumped by every change and every move of virtual time.
    epoch: u64,
    /// Per process: the epoch its last poll in vain stands at.
    at: Vec<Option<u64>>,
}

impl StandingPolls {
    /// Process `me` polled in vain: its poll stands.
    pub(crate) fn polled_in_vain(&mut self, me: usize) {
        if self.at.len() <= me {
            self.at.resize(me + 1, None);
        }
        self.at[me] = Some(self.epoch);
    }

    /// Whether process `j`'s last poll in vain still stands.
    pub(crate) fn stands(&self, j: usize) -> bool {
        self.at.get(j).copied().flatten() == Some(self.epoch)
    }

    /// Process `by` (or, for `None`, nobody in particular) changed something: every other
    /// process's poll falls.
    pub(crate) fn changed_by(&mut self, by: Option<usize>) {
        let kept = by.filter(|&p| self.stands(p));
        self.epoch = self.epoch.wrapping_add(1);
        if let Some(p) = kept {
            self.at[p] = Some(self.epoch);
        }
    }
}

/// Each process's run of vain polls since the last change.
#[derive(Default)]
pub(crate) struct VainPolls {
    /// Counts changes (time moving, calls that are not polls); a run of polls is current
    /// while this has not moved since it began.
    changes: u64,
    /// Per process: the change count its run of vain polls began at, and its length.
    runs: Vec<(u64, u32)>,
}

impl VainPolls {
    /// Something a poll could observe may have changed: every run of vain polls ends.
    pub(crate) fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
    }

    /// Process `me` polled in vain: its current run grows by one, or a new one begins.
    pub(crate) fn polled_in_vain(&mut self, me: usize) {
        if self.runs.len() <= me {
            self.runs.resize(me + 1, (0, 0));
        }
        let run = &mut self.runs[me];
        if run.0 == self.changes {
            run.1 = run.1.saturating_add(1);
        } else {
            *run = (self.changes, 1);
        }
    }

    /// How many times in a row process `j` has polled in vain with nothing changed.
    pub(crate) fn run_length(&self, j: usize) -> u32 {
        match self.runs.get(j) {
            Some(&(at, n)) if at == self.changes => n,
            _ => 0,
        }
    }

    /// Whether process `j` has polled in vain at least [`VAIN_POLLS_FOR_LIVELOCK`] times with
    /// nothing changed since its run began.
    pub(crate) fn exhausted(&self, j: usize) -> bool {
        self.run_length(j) >= VAIN_POLLS_FOR_LIVELOCK
    }
}

impl World {
    /// Whether a process of group `group` on host `host` has input waiting that a poll of
    /// something else did not see: an event on a CM channel of its group, a completion in a
    /// CQ of its host, a CQ event on a completion channel of its host, an asynchronous event
    /// of its host. (A scan: asked only for a vain poll that would move virtual time.)
    pub(crate) fn input_waiting(&self, group: usize, host: HostKey) -> bool {
        let cm = self
            .kernel
            .channels
            .iter_unordered()
            .any(|(_, c)| c.owner == Some(group) && !c.queue.is_empty());
        let cqs = || {
            (self.verbs.cqs.iter_unordered()).any(|(_, c)| c.host == host && !c.entries.is_empty())
        };
        let cq_events = || {
            (self.verbs.channels.iter_unordered())
                .any(|(_, c)| c.host == host && !c.events.is_empty())
        };
        let async_events = || {
            self.verbs
                .async_events
                .get(&host)
                .is_some_and(|q| !q.is_empty())
        };
        cm || cqs() || cq_events() || async_events()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vain_poll_stands_until_another_process_changes_something() {
        let mut s = StandingPolls::default();
        assert!(!s.stands(0), "never polled");
        s.polled_in_vain(0);
        s.polled_in_vain(1);
        assert!(s.stands(0) && s.stands(1));
        s.changed_by(Some(1));
        assert!(!s.stands(0), "1's change may be what 0 polls for");
        assert!(s.stands(1), "its own call leaves 1's poll standing");
        s.polled_in_vain(0);
        s.changed_by(None);
        assert!(!s.stands(0) && !s.stands(1), "time moved");
    }

    #[test]
    fn a_run_of_vain_polls_is_exhausted_only_at_the_limit_and_only_while_nothing_changes() {
        let mut v = VainPolls::default();
        for _ in 0..VAIN_POLLS_FOR_LIVELOCK - 1 {
            v.polled_in_vain(1);
        }
        assert!(!v.exhausted(1));
        assert!(!v.exhausted(0), "process 0 never polled");
        v.polled_in_vain(1);
        assert!(v.exhausted(1));
        v.changed();
        assert!(!v.exhausted(1), "a change ends the run");
        v.polled_in_vain(1);
        assert!(!v.exhausted(1), "a new run begins at one poll");
    }
}
