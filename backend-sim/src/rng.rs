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

/// One ChaCha generator per stream, all derived from one seed, each made on its first draw
/// (a short run draws from few streams, and seeding all of them was a twentieth of a fuzz
/// execution); a stream's draws do not depend on when it was made.
pub(crate) struct Streams {
    seed: u64,
    gens: [Option<ChaCha8Rng>; 9],
}

impl Streams {
    pub(crate) fn new(seed: u64) -> Self {
        Streams {
            seed,
            gens: Default::default(),
        }
    }

    pub(crate) fn get(&mut self, s: Stream) -> &mut ChaCha8Rng {
        let seed = self.seed;
        self.gens[s as usize].get_or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(s as u64);
            rng
        })
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
