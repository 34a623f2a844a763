//! How the fabric schedules its processes: which runnable process goes next (the seeded
//! choice point), whether a process may be preempted at a yield point (every trait call and
//! every operation of `cmtwin::sync`), and how long a woken process waits before it runs.
//!
//! A real thread does not run the instant it is woken, and a real kernel preempts: bugs
//! between a CM thread and its workers (a shared slot overwritten by the next
//! CONNECT_REQUEST before a worker took it) need both. A sweep draws one schedule per seed
//! ([`SchedConfig::drawn`]), so a plain sweep over seeds explores interleavings.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::FabricError;

/// Which runnable process the scheduler picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedPolicy {
    /// The next process after the current one, in the order processes were registered.
    RoundRobin,
    /// A uniform seeded choice among the runnable processes.
    Random,
    /// Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010): each process gets a
    /// seeded priority and the highest-priority runnable process runs; at `depth - 1` seeded
    /// change points among the first `steps` scheduling decisions, the running process drops
    /// below every other. A bug that needs `d` ordering constraints shows with probability
    /// at least `1 / (n · steps^(d-1))` per seed.
    Pct {
        /// The bug depth aimed at (1 to 8).
        depth: u32,
        /// Over how many scheduling decisions the change points are spread.
        steps: u64,
    },
}

/// The scheduling knobs of a fabric (`SimConfig::schedule`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedConfig {
    /// Which runnable process goes next.
    pub policy: SchedPolicy,
    /// Probability that a process is preempted at a yield point (`Random` and `RoundRobin`;
    /// under `Pct` every yield point is a decision).
    pub preempt: f64,
    /// A woken process runs after a seeded delay of 0 up to this much virtual time (its
    /// wake-up latency); zero runs it before virtual time moves.
    pub wake_latency: Duration,
}

/// The longest wake-up latency a configuration may ask for.
pub const MAX_WAKE_LATENCY: Duration = Duration::from_secs(1);
/// The deepest PCT depth a configuration may ask for.
pub const MAX_PCT_DEPTH: u32 = 8;

/// The ChaCha stream schedules are drawn from (apart from every stream of a fabric and of
/// swarm plans).
const SCHEDULE_STREAM: u64 = 1 << 34;

impl Default for SchedConfig {
    /// Seeded random choice, no preemption, no wake-up latency.
    fn default() -> Self {
        SchedConfig {
            policy: SchedPolicy::Random,
            preempt: 0.0,
            wake_latency: Duration::ZERO,
        }
    }
}

impl SchedConfig {
    /// Round-robin, no preemption, no latency: processes hand over only when they block.
    pub fn round_robin() -> Self {
        SchedConfig {
            policy: SchedPolicy::RoundRobin,
            ..SchedConfig::default()
        }
    }

    /// The schedule a sweep gives `seed`: a policy (random or PCT of depth 2 or 3), a
    /// preemption probability (0, 1 %, 10 % or 50 %) and a wake-up latency (0, 10 µs, 100 µs or
    /// 1 ms), drawn from the seed alone.
    pub fn drawn(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(SCHEDULE_STREAM);
        let policy = match rng.gen_range(0..3) {
            0 => SchedPolicy::Random,
            n => SchedPolicy::Pct {
                depth: n + 1,
                steps: 200,
            },
        };
        let preempt = [0.0, 0.01, 0.1, 0.5][rng.gen_range(0..4)];
        let wake_latency = [0, 10, 100, 1000][rng.gen_range(0..4)];
        SchedConfig {
            policy,
            preempt,
            wake_latency: Duration::from_micros(wake_latency),
        }
    }

    /// Refuses a preemption probability outside 0..=1, a wake-up latency above
    /// [`MAX_WAKE_LATENCY`], and a PCT depth outside 1..=[`MAX_PCT_DEPTH`] or with no steps.
    pub fn validate(&self) -> Result<(), FabricError> {
        let refuse = FabricError::refuse_config;
        if !(0.0..=1.0).contains(&self.preempt) {
            return refuse(
                "schedule.preempt",
                self.preempt.to_string(),
                "a probability between 0 and 1",
            );
        }
        if self.wake_latency > MAX_WAKE_LATENCY {
            return refuse(
                "schedule.wake_latency",
                format!("{:?}", self.wake_latency),
                "at most 1 s",
            );
        }
        if let SchedPolicy::Pct { depth, steps } = self.policy {
            if !(1..=MAX_PCT_DEPTH).contains(&depth) || steps == 0 {
                return refuse(
                    "schedule.policy",
                    format!("{:?}", self.policy),
                    "PCT needs a depth of 1 to 8 and at least one step",
                );
            }
        }
        Ok(())
    }

    /// A short form for replay lines and reports, e.g. `pct(2/200),preempt=0.1,wake<=100µs`.
    pub fn describe(&self) -> String {
        let policy = match self.policy {
            SchedPolicy::RoundRobin => "round-robin".to_string(),
            SchedPolicy::Random => "random".to_string(),
            SchedPolicy::Pct { depth, steps } => format!("pct({depth}/{steps})"),
        };
        format!(
            "{policy},preempt={},wake<={:?}",
            self.preempt, self.wake_latency
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_schedules_depend_on_the_seed_only_and_are_valid() {
        for seed in 0..200 {
            let s = SchedConfig::drawn(seed);
            assert_eq!(s, SchedConfig::drawn(seed));
            s.validate().unwrap();
        }
        let distinct: std::collections::BTreeSet<String> =
            (0..200).map(|s| SchedConfig::drawn(s).describe()).collect();
        assert!(distinct.len() > 20, "{distinct:?}");
    }

    #[test]
    fn out_of_range_knobs_are_refused_naming_the_field() {
        let bad = [
            SchedConfig {
                preempt: 1.5,
                ..SchedConfig::default()
            },
            SchedConfig {
                wake_latency: Duration::from_secs(2),
                ..SchedConfig::default()
            },
            SchedConfig {
                policy: SchedPolicy::Pct { depth: 0, steps: 5 },
                ..SchedConfig::default()
            },
            SchedConfig {
                policy: SchedPolicy::Pct { depth: 2, steps: 0 },
                ..SchedConfig::default()
            },
        ];
        for (cfg, field) in bad.iter().zip([
            "schedule.preempt",
            "schedule.wake_latency",
            "schedule.policy",
            "schedule.policy",
        ]) {
            match cfg.validate() {
                Err(FabricError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{cfg:?}: {other:?}"),
            }
        }
    }
}
