//! Randomness: ChaCha streams derived from the run's seed, one per concern, so that drawing more
//! from one concern (a new fault, say) never shifts the draws of another.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The concerns that draw random numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stream {
    /// Wire latency jitter.
    Latency = 1,
    /// Message loss decisions.
    Loss = 2,
    /// Ephemeral ports.
    Ports = 3,
    /// QP numbers and PSNs.
    Numbers = 4,
    /// Scheduling decisions: which process runs, preemptions, wake-up latencies.
    Sched = 5,
    /// Random numbers the application asks for (`cmtwin::thread::random_u64`).
    User = 6,
    /// Data packets' latency jitter.
    DataLatency = 7,
    /// Data packets' loss decisions.
    DataLoss = 8,
}

/// One ChaCha generator per stream, all derived from one seed.
pub(crate) struct Streams {
    gens: Vec<ChaCha8Rng>,
}

impl Streams {
    pub(crate) fn new(seed: u64) -> Self {
        let gens = (0..9)
            .map(|i| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                rng.set_stream(i);
                rng
            })
            .collect();
        Streams { gens }
    }

    pub(crate) fn get(&mut self, s: Stream) -> &mut ChaCha8Rng {
        &mut self.gens[s as usize]
    }

    /// A uniform draw in `lo..=hi` from stream `s`.
    pub(crate) fn range(&mut self, s: Stream, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        self.get(s).gen_range(lo..=hi)
    }

    /// True with probability `p` from stream `s` (no draw when `p` is 0).
    pub(crate) fn chance(&mut self, s: Stream, p: f64) -> bool {
        p > 0.0 && self.get(s).gen_bool(p.min(1.0))
    }
}
