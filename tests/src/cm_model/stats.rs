//! What a run of the model covered: per case, the event kinds reached, the calls made and the
//! errnos predicted (and met: a case that completes met every prediction); summed over a run,
//! with the share of cases reaching each event kind.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cmtwin::{Call, Errno, EventKind};

use super::op::LossyCall;

/// One case's coverage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaseStats {
    /// The event kinds delivered (and checked) in the case.
    pub reached: BTreeSet<EventKind>,
    /// Calls made and checked, per call.
    pub calls: BTreeMap<Call, u64>,
    /// Failures predicted and met, per call and errno.
    pub errnos: BTreeMap<(Call, Errno), u64>,
    /// Events checked.
    pub events: u64,
    /// Ops not made: no such id, or an outcome the model does not predict.
    pub not_made: u64,
    /// Faults applied, per kind (the call whose CM message was lost).
    pub faults: BTreeMap<LossyCall, u64>,
    /// The most active hosts (the client, a third host) connected at once.
    pub hosts_connected: usize,
}

impl CaseStats {
    /// Notes how many active hosts are connected at once.
    pub fn hosts_connected(&mut self, n: usize) {
        self.hosts_connected = self.hosts_connected.max(n);
    }

    /// Counts one fault applied.
    pub fn fault(&mut self, kind: LossyCall) {
        *self.faults.entry(kind).or_default() += 1;
    }

    /// Counts one checked call and, if it failed as predicted, its errno.
    pub fn call(&mut self, call: Call, errno: Option<Errno>) {
        *self.calls.entry(call).or_default() += 1;
        if let Some(errno) = errno {
            *self.errnos.entry((call, errno)).or_default() += 1;
        }
    }

    /// Counts one checked event.
    pub fn event(&mut self, kind: EventKind) {
        self.reached.insert(kind);
        self.events += 1;
    }
}

/// A run's coverage: the sum of its cases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Cases run.
    pub cases: u64,
    /// Cases that reached each event kind.
    pub reached: BTreeMap<EventKind, u64>,
    /// Calls made and checked, per call.
    pub calls: BTreeMap<Call, u64>,
    /// Failures predicted and met, per call and errno.
    pub errnos: BTreeMap<(Call, Errno), u64>,
    /// Events checked.
    pub events: u64,
    /// Ops not made.
    pub not_made: u64,
    /// Faults applied, per kind.
    pub faults: BTreeMap<LossyCall, u64>,
    /// Cases with at least one fault applied.
    pub faulted: u64,
    /// Cases with connections from two active hosts to the server at once.
    pub two_hosts_connected: u64,
}

impl Stats {
    /// Adds one case.
    pub fn add(&mut self, case: &CaseStats) {
        self.cases += 1;
        for kind in &case.reached {
            *self.reached.entry(*kind).or_default() += 1;
        }
        for (call, n) in &case.calls {
            *self.calls.entry(*call).or_default() += n;
        }
        for (key, n) in &case.errnos {
            *self.errnos.entry(*key).or_default() += n;
        }
        self.events += case.events;
        self.not_made += case.not_made;
        for (kind, n) in &case.faults {
            *self.faults.entry(*kind).or_default() += n;
        }
        self.faulted += u64::from(!case.faults.is_empty());
        self.two_hosts_connected += u64::from(case.hosts_connected >= 2);
    }

    /// All faults applied.
    pub fn faults_applied(&self) -> u64 {
        self.faults.values().sum()
    }

    /// The share of cases (0 to 1) that reached `kind`.
    pub fn share(&self, kind: EventKind) -> f64 {
        let n = self.reached.get(&kind).copied().unwrap_or(0);
        n as f64 / self.cases.max(1) as f64
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls: u64 = self.calls.values().sum();
        writeln!(
            f,
            "{} cases, {calls} calls and {} events checked, {} ops drawn but not made",
            self.cases, self.events, self.not_made
        )?;
        write!(f, "cases reaching:")?;
        for (kind, n) in &self.reached {
            write!(
                f,
                " {kind} {:.1}%,",
                100.0 * *n as f64 / self.cases.max(1) as f64
            )?;
        }
        write!(
            f,
            "\nfaults applied: {} in {:.1}% of the cases:",
            self.faults_applied(),
            100.0 * self.faulted as f64 / self.cases.max(1) as f64
        )?;
        for (kind, n) in &self.faults {
            write!(f, " {kind:?} {n},")?;
        }
        write!(
            f,
            "\ncases with two hosts connected to the server at once: {:.1}%",
            100.0 * self.two_hosts_connected as f64 / self.cases.max(1) as f64
        )?;
        write!(f, "\ncalls:")?;
        for (call, n) in &self.calls {
            write!(f, " {call} {n},")?;
        }
        write!(f, "\nerrnos predicted and met:")?;
        for ((call, errno), n) in &self.errnos {
            write!(f, " {call} {errno} {n},")?;
        }
        Ok(())
    }
}
