//! The engine report: everything issue 6 asks the simulator engine to reach, measured in one run
//! and set beside its targets, in process CPU time, single-threaded, tracing off.
//!
//! * full RC lifecycles with 1k, 10k, 100k connections in flight, driven from an event loop
//!   (`cmtwin_benches::lifecycle`): lifecycles and CM events per CPU-second, cost against 1k;
//! * turmoil's TCP connect + 5-byte echo + close at the same sizes, each repetition run right
//!   after cmtwin's, and the ratio of the rates;
//! * process switches between two simulated processes with 0 and 100 others blocked;
//! * heap per connected id and allocations per lifecycle, from the `cmtwin-heap` program
//!   (a counting allocator there, so that none slows the timed runs here).
//!
//! Prints a Markdown table, writes `results/<label>.csv`, and rewrites `results/table.md` and
//! `results/lifecycle-cost.svg` from every `results/*.csv`. Run with
//! `CMTWIN_BENCH_LABEL=<label> cargo bench -p cmtwin-benches --bench engine`; see BENCHMARKS.md
//! for the other knobs.

mod plot;
mod results;
mod targets;
mod turmoil_echo;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use cmtwin_benches::cpu;
use cmtwin_benches::lifecycle::{run_lifecycles, EVENTS_PER_LIFECYCLE};
use cmtwin_benches::switch::process_switch;
use cmtwin_benches::topology::bench_fabric;

use results::{today, valid_label, Results};

/// The knobs of a run, from the environment.
struct Settings {
    label: String,
    sizes: Vec<u64>,
    heap_sizes: Vec<u64>,
    switch_round_trips: u64,
}

/// Reads a comma-separated list of positive numbers from `var` (empty: none), or gives
/// `default`.
fn list(var: &str, default: &[u64]) -> Result<Vec<u64>, String> {
    let text = match std::env::var(var) {
        Err(_) => return Ok(default.to_vec()),
        Ok(text) if text.trim().is_empty() => return Ok(Vec::new()),
        Ok(text) => text,
    };
    text.split(',')
        .map(|s| match s.trim().parse::<u64>() {
            Ok(0) => Err(format!("{var}={text:?}: 0 is not a count")),
            Ok(n) => Ok(n),
            Err(e) => Err(format!("{var}={text:?}: {e}")),
        })
        .collect()
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let label = std::env::var("CMTWIN_BENCH_LABEL").unwrap_or_else(|_| "current".into());
        if !valid_label(&label) {
            return Err(format!(
                "CMTWIN_BENCH_LABEL={label:?}: use letters, digits, '-', '_', '.'"
            ));
        }
        let var = "CMTWIN_BENCH_SWITCH_ROUND_TRIPS";
        let switch_round_trips = match list(var, &[2000])?[..] {
            [n] => n,
            _ => return Err(format!("{var} takes one number")),
        };
        Ok(Settings {
            label,
            sizes: list("CMTWIN_BENCH_SIZES", &[1000, 10_000, 100_000])?,
            heap_sizes: list("CMTWIN_BENCH_HEAP_SIZES", &[1000, 10_000, 100_000])?,
            switch_round_trips,
        })
    }
}

/// Repetitions at one size: at most `MAX_REPETITIONS`, and no new one once the size has taken
/// `REPETITION_BUDGET` of CPU (so a slow engine runs 100k once, a fast one five times).
const MAX_REPETITIONS: usize = 5;
const REPETITION_BUDGET: Duration = Duration::from_secs(20);

/// Connections of the untimed warm-up wave.
const WARM_UP: u64 = 1000;

/// Waves of `n` lifecycles per repetition: at least `MIN_LIFECYCLES` lifecycles, so that a
/// repetition at small sizes lasts long enough to time.
fn waves(n: u64) -> u64 {
    const MIN_LIFECYCLES: u64 = 10_000;
    MIN_LIFECYCLES.div_ceil(n.max(1))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => v[len / 2],
        len => (v[len / 2 - 1] + v[len / 2]) / 2.0,
    }
}

fn per_second(count: f64, cpu: Duration) -> f64 {
    count / cpu.as_secs_f64()
}

/// `waves` waves of `n` lifecycles on fresh fabrics; returns the CM events and the CPU time
/// of the waves themselves (building and dropping the fabrics excluded).
fn cmtwin_waves(n: u64, waves: u64, seed: u64) -> Result<(u64, Duration), String> {
    let (mut events, mut cpu) = (0, Duration::ZERO);
    for wave in 0..waves {
        let fabric = bench_fabric(seed + wave);
        let (counts, spent) = cpu::measure(|| run_lifecycles(&fabric, n as usize, None));
        let counts = counts.map_err(|e| format!("cmtwin, n = {n}: {e}"))?;
        drop(fabric);
        if counts.lifecycles != n || counts.events != n * EVENTS_PER_LIFECYCLE {
            return Err(format!("cmtwin, n = {n}: {counts:?}"));
        }
        events += counts.events;
        cpu += spent;
    }
    Ok((events, cpu))
}

/// `waves` turmoil runs of `n` connections; returns their CPU time.
fn turmoil_waves(n: u64, waves: u64, seed: u64) -> Result<Duration, String> {
    let mut cpu = Duration::ZERO;
    for wave in 0..waves {
        let (done, spent) = cpu::measure(|| turmoil_echo::run(n as usize, seed + wave));
        let done = done?;
        if done as u64 != n {
            return Err(format!("turmoil, n = {n}: {done} connections completed"));
        }
        cpu += spent;
    }
    Ok(cpu)
}

/// cmtwin's and turmoil's runs at `n`, interleaved; records the medians.
fn lifecycles_at(n: u64, out: &mut Results) -> Result<(), String> {
    let (mut ours, mut events, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    let waves = waves(n);
    let lifecycles = (n * waves) as f64;
    let mut spent = Duration::ZERO;
    for rep in 0..MAX_REPETITIONS {
        if spent >= REPETITION_BUDGET {
            break;
        }
        let seed = 1000 * (rep as u64 + 1);
        let (cm_events, cpu) = cmtwin_waves(n, waves, seed)?;
        ours.push(per_second(lifecycles, cpu));
        events.push(per_second(cm_events as f64, cpu));
        let turmoil_cpu = turmoil_waves(n, waves, seed)?;
        theirs.push(per_second(lifecycles, turmoil_cpu));
        spent += cpu + turmoil_cpu;
        eprintln!(
            "n = {n}, repetition {rep} ({waves} waves): cmtwin {:.0}/s, turmoil {:.0}/s",
            ours[rep], theirs[rep]
        );
    }
    out.add("repetitions", n, ours.len() as f64, "runs");
    let (ours, events, theirs) = (median(ours), median(events), median(theirs));
    out.add("lifecycles_per_cpu_s", n, ours, "1/s");
    out.add("cm_events_per_cpu_s", n, events, "1/s");
    out.add("cpu_us_per_lifecycle", n, 1e6 / ours, "us");
    out.add("turmoil_connections_per_cpu_s", n, theirs, "1/s");
    out.add("turmoil_cpu_us_per_connection", n, 1e6 / theirs, "us");
    out.add("ratio_cmtwin_over_turmoil", n, ours / theirs, "x");
    Ok(())
}

/// Cost per lifecycle at each size against 1k.
fn relative_costs(out: &mut Results) {
    let Some(base) = out.get("cpu_us_per_lifecycle", 1000) else {
        return;
    };
    for (n, cost) in out.series("cpu_us_per_lifecycle") {
        if n != 1000 {
            out.add("cost_per_lifecycle_vs_1k", n, cost / base, "x");
        }
    }
}

/// Process switch runs per number of blocked processes (the median is kept).
const SWITCH_REPETITIONS: usize = 3;

fn switches(round_trips: u64, out: &mut Results) -> Result<(), String> {
    for blocked in [0u64, 100] {
        let (mut cpu, mut wall) = (Vec::new(), Vec::new());
        for _ in 0..SWITCH_REPETITIONS {
            let run = process_switch(blocked as usize, round_trips)?;
            let per = |d: Duration| d.as_secs_f64() * 1e6 / run.switches as f64;
            cpu.push(per(run.cpu));
            wall.push(per(run.wall));
        }
        let (cpu, wall) = (median(cpu), median(wall));
        out.add("switch_cpu_us", blocked, cpu, "us");
        out.add("switch_wall_us", blocked, wall, "us");
        eprintln!("process switch, {blocked} blocked: {cpu:.1} us CPU, {wall:.1} us wall");
    }
    Ok(())
}

/// Runs the `cmtwin-heap` program and records its figures.
fn heap(sizes: &[u64], out: &mut Results) -> Result<(), String> {
    if sizes.is_empty() {
        return Ok(());
    }
    let program = env!("CARGO_BIN_EXE_cmtwin-heap");
    let output = Command::new(program)
        .args(sizes.iter().map(u64::to_string))
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{program} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let f: Vec<&str> = line.split(',').collect();
        let parsed = match f[..] {
            [measure, n, value, unit] => n
                .parse()
                .ok()
                .zip(value.parse().ok())
                .map(|(n, v)| (measure, n, v, unit)),
            _ => None,
        };
        let (measure, n, value, unit) =
            parsed.ok_or_else(|| format!("{program} printed {line:?}"))?;
        out.add(measure, n, value, unit);
    }
    Ok(())
}

/// Records the machine's 1-minute load average (`n` = 0 at the start, 1 at the end): CPU time
/// is less disturbed by neighbours than wall time, but not immune (caches, and the process
/// switches, which wait for the OS scheduler).
fn record_load(out: &mut Results, when: u64) {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok());
    if let Some(load) = load {
        out.add("load_average_1min", when, load, "");
    }
}

fn results_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results")
}

fn run() -> Result<(), String> {
    let settings = Settings::from_env()?;
    let mut out = Results::new(&settings.label, &today());
    record_load(&mut out, 0);
    // One untimed wave of each first: the process's first run pays for growing its heap.
    cmtwin_waves(WARM_UP, 1, 1)?;
    turmoil_waves(WARM_UP, 1, 1)?;
    for &n in &settings.sizes {
        lifecycles_at(n, &mut out)?;
    }
    relative_costs(&mut out);
    switches(settings.switch_round_trips, &mut out)?;
    heap(&settings.heap_sizes, &mut out)?;
    record_load(&mut out, 1);
    let dir = results_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let csv = dir.join(format!("{}.csv", settings.label));
    std::fs::write(&csv, out.to_csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
    let runs = Results::load_all(&dir)?;
    let table = targets::table(&runs, &out);
    println!("{table}");
    let md = dir.join("table.md");
    std::fs::write(&md, &table).map_err(|e| format!("{}: {e}", md.display()))?;
    let svg = dir.join("lifecycle-cost.svg");
    std::fs::write(&svg, plot::lifecycle_cost_svg(&runs))
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    println!(
        "wrote {}, {} and {}",
        csv.display(),
        md.display(),
        svg.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine report: {e}");
            ExitCode::FAILURE
        }
    }
}
