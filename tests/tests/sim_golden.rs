//! Golden traces: the trace of every conformance scenario on every simulated bed, compared
//! with the digests recorded in `tests/golden/scenario-traces.txt`. A change of the engine
//! that keeps behaviour keeps every trace byte for byte; a change that alters behaviour on
//! purpose re-records the file (`CMTWIN_BLESS=1 cargo test -p cmtwin-tests --test sim_golden`)
//! and says in its commit which scenarios changed and why.
//!
//! `CMTWIN_TRACE_DIR=<dir>` also writes every trace in full, one file per bed and scenario, to
//! diff two engines' traces line by line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Duration;

use cmtwin::Transport;
use cmtwin_sim::SimConfig;
use cmtwin_tests::conformance::scenarios;
use cmtwin_tests::trace_text::{fnv1a, without_fabric_numbers};
use cmtwin_tests::SimBed;

/// Builds a fresh bed.
type MakeBed = Box<dyn Fn() -> SimBed>;

/// The beds whose traces are recorded: name and constructor.
fn beds() -> Vec<(&'static str, MakeBed)> {
    let lossy = SimConfig {
        wire_jitter: Duration::from_millis(3),
        loss_probability: 0.05,
        ..SimConfig::default()
    };
    vec![
        ("roce-42", Box::new(|| SimBed::new(42))),
        ("roce-7", Box::new(|| SimBed::new(7))),
        (
            "ib-3",
            Box::new(|| SimBed::with_transport(3, Transport::InfiniBand)),
        ),
        (
            "iwarp-5",
            Box::new(|| SimBed::with_transport(5, Transport::Iwarp)),
        ),
        (
            "roce-lossy-9",
            Box::new(move || SimBed::with_config(9, Transport::Roce, lossy.clone())),
        ),
    ]
}

/// One line per bed and scenario: the digest of its trace (fabric numbers blanked), its length
/// in lines, and whether the scenario panicked; or, for a scenario the bed cannot run, why.
fn record_all(dump: Option<&PathBuf>) -> String {
    let mut out = String::new();
    for (bed_name, make) in beds() {
        for scenario in scenarios::<SimBed>() {
            let (name, bed) = (scenario.name, make());
            if let Some(reason) = scenario.unmet_on(&bed) {
                writeln!(out, "{bed_name} {name} ignored ({reason})").expect("write to a string");
                continue;
            }
            let panicked = catch_unwind(AssertUnwindSafe(|| (scenario.run)(&bed))).is_err();
            let trace = without_fabric_numbers(&bed.fabric.trace_text());
            if let Some(dir) = dump {
                std::fs::write(dir.join(format!("{bed_name}--{name}.trace")), &trace)
                    .expect("write the trace");
            }
            writeln!(
                out,
                "{bed_name} {name} {:016x} {} {}",
                fnv1a(trace.as_bytes()),
                trace.lines().count(),
                if panicked { "panicked" } else { "passed" }
            )
            .expect("write to a string");
        }
    }
    out
}

#[test]
fn every_scenario_keeps_its_recorded_trace() {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/scenario-traces.txt");
    let dump = std::env::var_os("CMTWIN_TRACE_DIR").map(PathBuf::from);
    if let Some(dir) = &dump {
        std::fs::create_dir_all(dir).expect("create the trace directory");
    }
    let now = record_all(dump.as_ref());
    if std::env::var_os("CMTWIN_BLESS").is_some() {
        std::fs::write(&golden, &now).expect("write the golden file");
        return;
    }
    let recorded = std::fs::read_to_string(&golden).expect("tests/golden/scenario-traces.txt");
    // Keyed by bed and scenario, so that a scenario added or moved shows as itself.
    let by_key = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .map(|l| {
                let mut parts = l.splitn(3, ' ');
                let key = format!(
                    "{} {}",
                    parts.next().unwrap_or(""),
                    parts.next().unwrap_or("")
                );
                (key, parts.next().unwrap_or("").to_string())
            })
            .collect()
    };
    let (recorded, now) = (by_key(&recorded), by_key(&now));
    let mut differences = Vec::new();
    for (key, was) in &recorded {
        match now.get(key) {
            Some(is) if is == was => {}
            Some(is) => differences.push(format!("  changed {key}: {was} -> {is}")),
            None => differences.push(format!("  gone    {key}: {was}")),
        }
    }
    for (key, is) in &now {
        if !recorded.contains_key(key) {
            differences.push(format!("  new     {key}: {is}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{} scenario traces differ from the recording ({} recorded, {} now):\n{}",
        differences.len(),
        recorded.len(),
        now.len(),
        differences.join("\n")
    );
}
