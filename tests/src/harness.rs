//! The conformance suite as a test binary (`harness = false`, run by `cargo test` and
//! `cargo nextest` alike through [`libtest_mimic`]): one trial per bed and scenario, built at
//! run time from the bed's capabilities. A scenario the bed cannot run is an ignored trial
//! whose kind is the reason (`test [iWARP has no UD ...] iwarp::ud::... ignored`); it is never
//! run and never counted as passed.

use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};

use crate::conformance::{scenarios, Scenario};
use crate::TestBed;

/// The trials of every scenario on beds made by `make(seed)`: each trial builds one bed per
/// seed and runs its scenario on it. Names are `prefix` + `area::name` (`prefix` is empty or
/// ends in `::`). The first seed's bed is built once here to ask it what it lacks.
pub fn bed_trials<T, F>(prefix: &str, seeds: Vec<u64>, make: F) -> Vec<Trial>
where
    T: TestBed + 'static,
    F: Fn(u64) -> T + Send + Sync + 'static,
{
    let first = *seeds.first().expect("at least one seed");
    let probe = make(first);
    let make = Arc::new(make);
    let seeds = Arc::new(seeds);
    scenarios::<T>()
        .into_iter()
        .map(|scenario| {
            let name = format!("{prefix}{}", scenario.name);
            match unmet(&probe, &scenario) {
                Some(reason) => ignored_trial(name, reason),
                None => {
                    let (make, seeds) = (Arc::clone(&make), Arc::clone(&seeds));
                    Trial::test(name, move || {
                        for &seed in seeds.iter() {
                            if seeds.len() > 1 {
                                eprintln!("{} with seed {seed}", scenario.name);
                            }
                            let bed = make(seed);
                            (scenario.run)(&bed);
                        }
                        Ok(())
                    })
                }
            }
        })
        .collect()
}

/// Every scenario's trial, ignored for `reason` (a bed that cannot be made here at all, such
/// as the real backend on a machine without RDMA).
pub fn unavailable_trials<T: TestBed>(prefix: &str, reason: &str) -> Vec<Trial> {
    scenarios::<T>()
        .into_iter()
        .map(|s| ignored_trial(format!("{prefix}{}", s.name), reason.to_string()))
        .collect()
}

/// The reason `bed` cannot run `scenario`: the first of its needs the bed lacks.
pub fn unmet<T: TestBed>(bed: &T, scenario: &Scenario<T>) -> Option<String> {
    scenario
        .needs
        .iter()
        .find_map(|&need| bed.lacks(need).map(|why| format!("needs {need}: {why}")))
}

/// A trial that is ignored, with `reason` as its kind. Run anyway (`--ignored`), it fails
/// naming the reason rather than pass.
fn ignored_trial(name: String, reason: String) -> Trial {
    // libtest's list format is `name: test`; keep the kind free of ": " so that runners
    // parsing it (nextest) see the whole kind and name.
    let kind = reason.replace(": ", " - ");
    Trial::test(name, move || {
        Err(Failed::from(format!(
            "this bed cannot run the scenario: {reason}"
        )))
    })
    .with_ignored_flag(true)
    .with_kind(kind)
}

/// Parses the command line and runs `trials`, with at most `max_threads` threads if given
/// (the real backend's scenarios share one kernel's port space and device).
pub fn run(trials: Vec<Trial>, max_threads: Option<usize>) -> ! {
    let mut args = Arguments::from_args();
    if let Some(max) = max_threads {
        args.test_threads = Some(args.test_threads.map_or(max, |n| n.min(max)));
    }
    libtest_mimic::run(&args, trials).exit()
}
