//! Process CPU time (user + system, every thread of the process), the clock of every rate the
//! engine report gives: wall time on a shared machine measures the neighbours too.

use std::time::Duration;

use cpu_time::ProcessTime;

/// Runs `work` and returns its result with the process CPU time it took.
pub fn measure<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = ProcessTime::now();
    let out = work();
    (out, start.elapsed())
}

/// A CPU-time stopwatch started at `start` and read with `elapsed`.
#[derive(Clone, Copy, Debug)]
pub struct CpuStopwatch(ProcessTime);

impl CpuStopwatch {
    /// Starts the stopwatch now.
    pub fn start() -> Self {
        CpuStopwatch(ProcessTime::now())
    }

    /// Process CPU time since `start`.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}
