//! Sweeps: a user's scenario run over many seeds (each with a fixed plan or its own swarm
//! plan), spread over the machine's cores, each run in a fabric of its own. Failures are
//! reduced to the smallest plan that still fails (removing one fault at a time), drawn as SVG
//! sequence diagrams and printed as replay lines. A sweep can be split into shards
//! (`CMTWIN_SHARD=i/n` or [`Sweep::shard`]) so CI jobs or machines share one sweep.
//!
//! With `CMTWIN_SEED` set, a sweep runs that one seed only (with `CMTWIN_PLAN`'s plan when
//! set): that is how its replay lines work.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::diagram::sequence_diagram;
use crate::error::FabricError;
use crate::fabric::{Fabric, FabricBuilder};
use crate::plan::{FaultPlan, SwarmSpace};
use crate::process::Shared;
use crate::replay::{plan_from_env, replay_line, seed_from_env, TestTarget};
use crate::schedule::SchedConfig;
use crate::trace::TraceRecord;

/// The environment variable naming the shard of a sweep to run (`i/n`, `i` from 1).
pub const SHARD_VAR: &str = "CMTWIN_SHARD";

/// The result of one run of a scenario: any error fails it.
pub type Outcome = Result<(), Box<dyn std::error::Error>>;

/// What a scenario gets for one run: its seed and plan, and the way to build its fabric so
/// that the plan is applied and the trace can be drawn when the run fails.
pub struct RunContext {
    seed: u64,
    plan: FaultPlan,
    schedule: Option<SchedConfig>,
    world: Mutex<Option<Arc<Shared>>>,
}

impl RunContext {
    /// A context for one run of `seed` with `plan`, whose fabrics keep the schedule of their
    /// builder (sweeps make these; a test may too).
    pub fn new(seed: u64, plan: FaultPlan) -> Self {
        RunContext {
            seed,
            plan,
            schedule: None,
            world: Mutex::new(None),
        }
    }

    /// This context with `schedule` given to every fabric it builds.
    pub fn with_schedule(mut self, schedule: SchedConfig) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// The schedule the run's fabrics get, if the context sets one.
    pub fn schedule(&self) -> Option<SchedConfig> {
        self.schedule
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The run's fault plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// A builder seeded with the run's seed.
    pub fn builder(&self) -> FabricBuilder {
        Fabric::builder(self.seed)
    }

    /// Builds `builder` with the run's plan applied, and keeps the fabric's trace for the
    /// sweep's report.
    pub fn build(&self, builder: FabricBuilder) -> Result<Fabric, FabricError> {
        let builder = match self.schedule {
            Some(schedule) => builder.schedule(schedule),
            None => builder,
        };
        let fabric = builder.plan(self.plan.clone()).build()?;
        *self.world.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&fabric.shared));
        Ok(fabric)
    }

    /// The trace of the fabric built last, if any.
    pub fn trace(&self) -> Option<Vec<TraceRecord>> {
        let world = self.world.lock().unwrap_or_else(|e| e.into_inner());
        world.as_ref().map(|s| s.lock().trace.records())
    }
}

/// One shard of a sweep: the `index`-th (from 1) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 1.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl Shard {
    /// The whole sweep.
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// The shard in `CMTWIN_SHARD`, if set.
    pub fn from_env() -> Result<Option<Shard>, String> {
        match std::env::var(SHARD_VAR) {
            Ok(v) => v.parse().map(Some).map_err(|e| format!("{SHARD_VAR}: {e}")),
            Err(_) => Ok(None),
        }
    }

    /// Whether the run at position `position` of the sweep belongs to this shard (never, for
    /// a shard outside `1..=count`).
    pub fn has(&self, position: u64) -> bool {
        self.is_valid() && position % u64::from(self.count) == u64::from(self.index - 1)
    }

    /// Whether `1 <= index <= count`.
    pub fn is_valid(&self) -> bool {
        self.index >= 1 && self.index <= self.count
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `i/n` with 1 ≤ i ≤ n.
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("{s:?} is not a shard: write i/n with 1 <= i <= n, e.g. 2/4");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<u32>().map_err(|_| bad())?,
            n.trim().parse::<u32>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// Where each run's plan comes from.
#[derive(Clone, Debug)]
enum Plans {
    Fixed(FaultPlan),
    Swarm(SwarmSpace),
}

/// Where each run's schedule comes from.
#[derive(Clone, Copy, Debug)]
enum Schedules {
    /// Drawn from the seed ([`SchedConfig::drawn`]).
    Drawn,
    /// The same for every seed.
    Fixed(SchedConfig),
    /// The one of the scenario's own builder.
    Builder,
}

/// A failing run, reduced.
#[derive(Clone, Debug)]
pub struct SweepFailure {
    /// The run's seed.
    pub seed: u64,
    /// The smallest plan found that still fails with this seed (the original one when the
    /// failure was not reduced, see [`Sweep::max_reduced`]).
    pub plan: FaultPlan,
    /// The schedule the run's fabrics had (`None`: the scenario's own).
    pub schedule: Option<SchedConfig>,
    /// Whether the plan was reduced and the run drawn (see [`Sweep::max_reduced`]).
    pub reduced: bool,
    /// How many faults the original plan had.
    pub faults_before: usize,
    /// The error (or panic) of the reduced run.
    pub error: String,
    /// Records in the reduced run's trace (0 when not reduced).
    pub trace_records: usize,
    /// The reduced run's sequence diagram, if it could be written.
    pub svg: Option<PathBuf>,
    /// The line that reruns the reduced run.
    pub replay: String,
}

/// What a sweep found.
#[derive(Clone, Debug)]
pub struct SweepReport {
    /// Runs made (not counting the reduction's).
    pub runs: usize,
    /// The failures, by seed.
    pub failures: Vec<SweepFailure>,
}

impl SweepReport {
    /// A readable account: counts, then each failure with its replay line and picture.
    pub fn summary(&self) -> String {
        let mut out = format!("{} runs, {} failed", self.runs, self.failures.len());
        for f in &self.failures {
            let reduced = match f.reduced {
                false => format!("{} faults in the plan (not reduced)", f.faults_before),
                true => format!(
                    "plan reduced from {} to {} faults, {} trace records",
                    f.faults_before,
                    f.plan.faults.len(),
                    f.trace_records
                ),
            };
            let svg = f
                .svg
                .as_ref()
                .map(|p| format!(", diagram: {}", p.display()))
                .unwrap_or_default();
            let schedule = f
                .schedule
                .map(|s| format!(", schedule {}", s.describe()))
                .unwrap_or_default();
            out.push_str(&format!(
                "\nseed {}: {}\n  {reduced}{schedule}{svg}\n  replay: {}",
                f.seed, f.error, f.replay
            ));
        }
        let reduced = self.failures.iter().filter(|f| f.reduced);
        if let Some(f) = reduced.min_by_key(|f| (f.trace_records, f.seed)) {
            out.push_str(&format!("\nshortest failing run: seed {}", f.seed));
        }
        out
    }

    /// Panics with [`SweepReport::summary`] if any run failed.
    pub fn assert_ok(&self) {
        assert!(self.failures.is_empty(), "sweep failed: {}", self.summary());
    }
}

/// A sweep of a scenario over seeds.
///
/// ```
/// use cmtwin::{CmBackend, PortSpace, Transport};
/// use cmtwin_sim::sweep::Sweep;
///
/// let report = Sweep::new("bind", |ctx| {
///     let fabric = ctx.build(ctx.builder().host("a", Transport::Roce, &["10.0.0.1".parse()?]))?;
///     let a = fabric.backend("a");
///     let id = a.create_id(None, 0, PortSpace::TCP)?;
///     a.bind_addr(id, "10.0.0.1:0".parse()?)?;
///     Ok(())
/// })
/// .seeds(0..8)
/// .quiet()
/// .run();
/// assert_eq!((report.runs, report.failures.len()), (8, 0));
/// ```
pub struct Sweep<F> {
    name: String,
    scenario: F,
    seeds: Range<u64>,
    plans: Plans,
    schedules: Schedules,
    shard: Option<Shard>,
    threads: Option<usize>,
    svg_dir: Option<PathBuf>,
    progress: bool,
    command: Option<String>,
    max_reduced: usize,
}

impl<F: Fn(&RunContext) -> Outcome + Sync> Sweep<F> {
    /// A sweep named `name` (it names the diagrams) of `scenario`, over seeds 0..100 with the
    /// empty plan and a schedule drawn from each seed ([`SchedConfig::drawn`]: policy,
    /// preemption, wake-up latency), on every core, with the shard of `CMTWIN_SHARD` if set.
    pub fn new(name: &str, scenario: F) -> Self {
        Sweep {
            name: name.to_string(),
            scenario,
            seeds: 0..100,
            plans: Plans::Fixed(FaultPlan::new()),
            schedules: Schedules::Drawn,
            shard: None,
            threads: None,
            svg_dir: None,
            progress: true,
            command: None,
            max_reduced: 10,
        }
    }

    /// The seeds to run.
    pub fn seeds(mut self, seeds: Range<u64>) -> Self {
        self.seeds = seeds;
        self
    }

    /// Every run uses `plan`.
    pub fn plan(mut self, plan: FaultPlan) -> Self {
        self.plans = Plans::Fixed(plan);
        self
    }

    /// Each run uses the swarm plan of its seed over `space`.
    pub fn swarm(mut self, space: SwarmSpace) -> Self {
        self.plans = Plans::Swarm(space);
        self
    }

    /// Every run uses `schedule` instead of one drawn from its seed.
    pub fn schedule(mut self, schedule: SchedConfig) -> Self {
        self.schedules = Schedules::Fixed(schedule);
        self
    }

    /// Every run keeps the schedule of the scenario's own builder (its `SimConfig`).
    pub fn builder_schedule(mut self) -> Self {
        self.schedules = Schedules::Builder;
        self
    }

    /// The schedule the run of `seed` gives its fabrics.
    fn schedule_for(&self, seed: u64) -> Option<SchedConfig> {
        match self.schedules {
            Schedules::Drawn => Some(SchedConfig::drawn(seed)),
            Schedules::Fixed(s) => Some(s),
            Schedules::Builder => None,
        }
    }

    /// Runs only `shard` of the seeds (overrides `CMTWIN_SHARD`).
    pub fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Uses `threads` threads (default: the machine's cores).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
        self
    }

    /// Writes failing runs' diagrams to `dir` (default: `cmtwin-sweep` in the temp dir).
    pub fn svg_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.svg_dir = Some(dir.into());
        self
    }

    /// No progress output.
    pub fn quiet(mut self) -> Self {
        self.progress = false;
        self
    }

    /// Reduces and draws at most the first `n` failures (by seed; default 10); the others are
    /// reported as they failed.
    pub fn max_reduced(mut self, n: usize) -> Self {
        self.max_reduced = n;
        self
    }

    /// The command that replay lines rerun (default: the calling test, as far as it can be
    /// told; see [`TestTarget`]).
    pub fn replay_command(mut self, command: &str) -> Self {
        self.command = Some(command.to_string());
        self
    }

    fn plan_for(&self, seed: u64) -> FaultPlan {
        match &self.plans {
            Plans::Fixed(p) => p.clone(),
            Plans::Swarm(space) => FaultPlan::swarm(seed, space),
        }
    }

    /// One run: its error, if any, and its trace.
    fn run_one(
        &self,
        seed: u64,
        plan: &FaultPlan,
    ) -> (Result<(), String>, Option<Vec<TraceRecord>>) {
        let mut ctx = RunContext::new(seed, plan.clone());
        ctx.schedule = self.schedule_for(seed);
        let result = match catch_unwind(AssertUnwindSafe(|| (self.scenario)(&ctx))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(p) => Err(
                match (p.downcast_ref::<String>(), p.downcast_ref::<&str>()) {
                    (Some(s), _) => format!("panicked: {s}"),
                    (_, Some(s)) => format!("panicked: {s}"),
                    _ => "panicked".to_string(),
                },
            ),
        };
        let result = result.map_err(|e| without_fabric_replay(&e));
        let trace = result.is_err().then(|| ctx.trace()).flatten();
        (result, trace)
    }

    /// The runs of this sweep: (seed, plan), after the shard and `CMTWIN_SEED`.
    fn runs(&self) -> Result<Vec<(u64, FaultPlan)>, String> {
        if let Some(seed) = seed_from_env()? {
            let plan = plan_from_env()?.unwrap_or_else(|| self.plan_for(seed));
            return Ok(vec![(seed, plan)]);
        }
        let shard = match self.shard {
            Some(s) => s,
            None => Shard::from_env()?.unwrap_or(Shard::ALL),
        };
        if !shard.is_valid() {
            return Err(format!(
                "shard {}/{} does not exist: the index counts from 1 to the number of shards",
                shard.index, shard.count
            ));
        }
        Ok(self
            .seeds
            .clone()
            .enumerate()
            .filter(|(i, _)| shard.has(*i as u64))
            .map(|(_, seed)| (seed, self.plan_for(seed)))
            .collect())
    }

    /// Runs the sweep and reports its failures (reduced, drawn, with replay lines); print
    /// [`SweepReport::summary`] or call [`SweepReport::assert_ok`].
    ///
    /// # Panics
    /// When `CMTWIN_SEED`, `CMTWIN_PLAN` or `CMTWIN_SHARD` is set to something unreadable, or
    /// the shard does not exist.
    pub fn run(&self) -> SweepReport {
        let runs = self.runs().unwrap_or_else(|e| panic!("{e}"));
        let total = runs.len();
        let threads = self
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .min(total.max(1));
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let failed = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((seed, plan)) = runs.get(i) else {
                        break;
                    };
                    if let (Err(e), _) = self.run_one(*seed, plan) {
                        let mut f = failed.lock().unwrap_or_else(|e| e.into_inner());
                        f.push((*seed, plan.clone(), e));
                    }
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if self.progress {
                        let f = failed.lock().unwrap_or_else(|e| e.into_inner()).len();
                        self.show_progress(n, total, f);
                    }
                });
            }
        });
        let mut failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
        failed.sort_by_key(|f| f.0);
        let failures = failed
            .into_iter()
            .enumerate()
            .map(|(i, (seed, plan, error))| match i < self.max_reduced {
                true => self.reduce(seed, plan),
                false => self.unreduced(seed, plan, error),
            })
            .collect();
        SweepReport {
            runs: total,
            failures,
        }
    }

    fn show_progress(&self, done: usize, total: usize, failed: usize) {
        let step = (total / 20).max(1);
        if done % step == 0 || done == total {
            let filled = done * 20 / total.max(1);
            eprintln!(
                "sweep {}: [{}{}] {done}/{total} runs, {failed} failed",
                self.name,
                "#".repeat(filled),
                "-".repeat(20 - filled)
            );
        }
    }

    /// A failure beyond those reduced: as it failed, without a diagram.
    fn unreduced(&self, seed: u64, plan: FaultPlan, error: String) -> SweepFailure {
        SweepFailure {
            seed,
            replay: replay_line(&self.command(), seed, &plan),
            schedule: self.schedule_for(seed),
            reduced: false,
            faults_before: plan.faults.len(),
            plan,
            error,
            trace_records: 0,
            svg: None,
        }
    }

    /// The command replay lines rerun.
    fn command(&self) -> String {
        self.command.clone().unwrap_or_else(|| {
            let package = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "<package>".into());
            TestTarget::current(&package).command()
        })
    }

    /// Reduces a failing plan one fault at a time, then reruns the smallest to draw it.
    fn reduce(&self, seed: u64, plan: FaultPlan) -> SweepFailure {
        let faults_before = plan.faults.len();
        let mut plan = plan;
        let mut i = 0;
        while i < plan.faults.len() {
            let smaller = plan.without(i);
            if self.run_one(seed, &smaller).0.is_err() {
                plan = smaller;
            } else {
                i += 1;
            }
        }
        let (result, trace) = self.run_one(seed, &plan);
        let error = match result {
            Err(e) => e,
            Ok(()) => "failed in the sweep but passed when rerun (the scenario is not \
                       deterministic)"
                .to_string(),
        };
        let trace = trace.unwrap_or_default();
        let svg = self.write_svg(seed, &trace);
        SweepFailure {
            seed,
            replay: replay_line(&self.command(), seed, &plan),
            schedule: self.schedule_for(seed),
            plan,
            reduced: true,
            faults_before,
            error,
            trace_records: trace.len(),
            svg,
        }
    }

    fn write_svg(&self, seed: u64, trace: &[TraceRecord]) -> Option<PathBuf> {
        if trace.is_empty() {
            return None;
        }
        let dir = self
            .svg_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("cmtwin-sweep"));
        std::fs::create_dir_all(&dir).ok()?;
        let name: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{name}-seed{seed}.svg"));
        std::fs::write(&path, sequence_diagram(trace)).ok()?;
        Some(path)
    }
}

/// How [`SimError::Failed`](crate::SimError::Failed) opens its text, up to its replay line.
const FABRIC_REPLAY_OPENS: &str = "simulation failed (replay: ";
/// How the fabric's replay line closes in that text.
const FABRIC_REPLAY_CLOSES: &str = "):";

/// A run's error text with the replay line of every failed fabric run in it taken out
/// (`simulation failed (replay: ...):` becomes `simulation failed:`): that line reruns the
/// fabric under a bare `cargo test` with the plan before reduction, while the sweep's own
/// replay line, printed beside the error, reruns the reduced plan with the test's command.
/// One replay instruction per failure, then.
fn without_fabric_replay(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    let mut rest = error;
    while let Some(at) = rest.find(FABRIC_REPLAY_OPENS) {
        let line = &rest[at + FABRIC_REPLAY_OPENS.len()..];
        // The close is the first `):` that ends the line: before a line break, an escaped
        // one (a panic's `{:?}` of the text) or the end.
        let end = line
            .match_indices(FABRIC_REPLAY_CLOSES)
            .find_map(|(i, close)| {
                let after = &line[i + close.len()..];
                let ends = after.is_empty() || after.starts_with('\n') || after.starts_with("\\n");
                ends.then_some(i)
            });
        let Some(end) = end else { break };
        out.push_str(&rest[..at]);
        out.push_str("simulation failed:");
        rest = &line[end + FABRIC_REPLAY_CLOSES.len()..];
    }
    out.push_str(rest);
    out
}
