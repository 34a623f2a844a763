//! The conformance suite as a test binary (`harness = false`, run by `cargo test` and
//! `cargo nextest` alike through [`libtest_mimic`]): one trial per bed and scenario, built at
//! run time from the bed's capabilities. A scenario the bed cannot run is an ignored trial
//! whose kind is the reason (`test [iWARP has no UD ...] iwarp::ud::... ignored`); it is never
//! run and never counted as passed.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};

use crate::conformance::{scenarios, Scenario};
use crate::recording::RecordingBed;
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
    trials_of(prefix, &probe, move |scenario: &Scenario<T>| {
        for &seed in &seeds {
            if seeds.len() > 1 {
                eprintln!("{} with seed {seed}", scenario.name);
            }
            let bed = make(seed);
            (scenario.run)(&bed);
        }
    })
}

/// The trials of every scenario on beds made by `make`, each run recorded
/// ([`RecordingBed`]): its normalized trace is written to `dir/<area>::<name>.trace` when the
/// scenario ends, passed or failed ([`crate::fidelity::write_trace`]); the trial's outcome is
/// the scenario's. The reason of each scenario the bed cannot run is written at once to
/// `dir/<area>::<name>.ignored`.
pub fn recorded_trials<T, F>(prefix: &str, dir: PathBuf, make: F) -> Vec<Trial>
where
    T: TestBed + 'static,
    T::Backend: Clone,
    F: Fn() -> T + Send + Sync + 'static,
{
    let probe = RecordingBed::new(make());
    for scenario in scenarios::<RecordingBed<T>>() {
        if let Some(reason) = unmet(&probe, &scenario) {
            if let Err(e) = crate::fidelity::write_ignored(&dir, scenario.name, &reason) {
                eprintln!("cannot write why {} is ignored: {e}", scenario.name);
            }
        }
    }
    trials_of(
        prefix,
        &probe,
        move |scenario: &Scenario<RecordingBed<T>>| {
            let bed = RecordingBed::new(make());
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| (scenario.run)(&bed)));
            let failure = outcome.as_ref().err().map(|p| panic_message(p.as_ref()));
            if let Err(e) =
                crate::fidelity::write_trace(&dir, scenario.name, &bed, failure.as_deref())
            {
                eprintln!("cannot write the trace of {}: {e}", scenario.name);
            }
            if let Err(payload) = outcome {
                panic::resume_unwind(payload);
            }
        },
    )
}

/// The text of a panic's payload (a scenario's failed assertion).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// One trial per scenario: ignored with its reason where `probe` lacks a need, else running
/// `run_one` on the scenario.
fn trials_of<T, R>(prefix: &str, probe: &T, run_one: R) -> Vec<Trial>
where
    T: TestBed + 'static,
    R: Fn(&Scenario<T>) + Send + Sync + 'static,
{
    let run_one = Arc::new(run_one);
    scenarios::<T>()
        .into_iter()
        .map(|scenario| {
            let name = format!("{prefix}{}", scenario.name);
            match unmet(probe, &scenario) {
                Some(reason) => ignored_trial(name, reason),
                None => {
                    let run_one = Arc::clone(&run_one);
                    Trial::test(name, move || {
                        run_one(&scenario);
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
