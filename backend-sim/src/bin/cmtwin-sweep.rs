//! `cmtwin-sweep`: sweeps of the bundled scenarios over seeds, each seed with its own swarm
//! fault plan, spread over the machine's cores and optionally sharded.
//!
//! ```text
//! cargo run -p cmtwin-sim --bin cmtwin-sweep -- --seeds 1000 --shard 1/4
//! ```

use std::process::ExitCode;

use cmtwin_sim::scenarios::SCENARIOS;
use cmtwin_sim::sweep::{Shard, Sweep};
use cmtwin_sim::FaultPlan;

const USAGE: &str = "usage: cmtwin-sweep [--seeds N] [--first SEED] [--shard I/N] [--threads N]
                    [--scenario NAME] [--svg-dir DIR] [--no-faults] [--list]
  --seeds N        how many seeds (default 100), from --first (default 0)
  --shard I/N      run only the I-th of N shards (also CMTWIN_SHARD=I/N)
  --threads N      worker threads (default: the machine's cores)
  --scenario NAME  one bundled scenario (default: all; --list names them)
  --svg-dir DIR    where failing runs' sequence diagrams go
  --no-faults      the empty plan instead of each seed's swarm plan
CMTWIN_SEED (and CMTWIN_PLAN) rerun one seed, as the replay lines of failures say.";

/// The command line, parsed.
struct Options {
    seeds: u64,
    first: u64,
    shard: Option<Shard>,
    threads: Option<usize>,
    scenario: Option<String>,
    svg_dir: Option<String>,
    faults: bool,
    list: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        seeds: 100,
        first: 0,
        shard: None,
        threads: None,
        scenario: None,
        svg_dir: None,
        faults: true,
        list: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{arg} {v:?}: not a number"))
        };
        match arg.as_str() {
            "--seeds" => o.seeds = number(value()?)?,
            "--first" => o.first = number(value()?)?,
            "--shard" => o.shard = Some(value()?.parse()?),
            "--threads" => o.threads = Some(number(value()?)? as usize),
            "--scenario" => o.scenario = Some(value()?),
            "--svg-dir" => o.svg_dir = Some(value()?),
            "--no-faults" => o.faults = false,
            "--list" => o.list = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("cmtwin-sweep: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if o.list {
        for s in &SCENARIOS {
            println!("{:<24} {}", s.name, s.about);
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<_> = SCENARIOS
        .iter()
        .filter(|s| o.scenario.as_deref().is_none_or(|n| n == s.name))
        .collect();
    if chosen.is_empty() {
        eprintln!("cmtwin-sweep: no scenario named {:?} (--list)", o.scenario);
        return ExitCode::from(2);
    }
    let mut failed = 0;
    for s in chosen {
        let mut sweep = Sweep::new(s.name, s.run)
            .seeds(o.first..o.first.saturating_add(o.seeds))
            .replay_command(&format!(
                "cargo run -p cmtwin-sim --bin cmtwin-sweep -- --scenario {}",
                s.name
            ));
        sweep = match o.faults {
            true => sweep.swarm((s.space)()),
            false => sweep.plan(FaultPlan::new()),
        };
        if let Some(shard) = o.shard {
            sweep = sweep.shard(shard);
        }
        if let Some(t) = o.threads {
            sweep = sweep.threads(t);
        }
        if let Some(dir) = &o.svg_dir {
            sweep = sweep.svg_dir(dir);
        }
        let report = sweep.run();
        println!("{}: {}", s.name, report.summary());
        failed += report.failures.len();
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
