//! Determinism: the same seed run twice gives a byte-identical trace (DESIGN, "Trace"); this
//! holds for every conformance scenario, for processes, and with random loss and jitter.
//! Different seeds are allowed to differ.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{CmBackend, CmError, PortSpace, QpInitAttr, QpType, Transport};
use cmtwin_sim::SimConfig;
use cmtwin_tests::conformance::scenarios;
use cmtwin_tests::steps::RESOLVE_TIMEOUT;
use cmtwin_tests::trace_text::without_fabric_numbers;
use cmtwin_tests::{SimBed, TestBed};

/// Runs `scenario` on a fresh bed built by `make`, and returns the trace and the panic
/// message, if the scenario panicked.
fn run_once(make: &dyn Fn() -> SimBed, scenario: fn(&SimBed)) -> (String, Option<String>) {
    let bed = make();
    let outcome = catch_unwind(AssertUnwindSafe(|| scenario(&bed)));
    let panic = outcome.err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    });
    (bed.fabric.trace_text(), panic)
}

/// Panics naming the first line where two traces differ.
fn assert_same_trace(name: &str, first: &str, second: &str) {
    if first != second {
        let line = first
            .lines()
            .zip(second.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(first.lines().count().min(second.lines().count()));
        panic!(
            "{name}: traces differ from line {}:\nfirst:  {:?}\nsecond: {:?}",
            line + 1,
            first.lines().nth(line),
            second.lines().nth(line)
        );
    }
}

/// Asserts that every scenario produces the same trace (and the same verdict) twice; with
/// `exact` false, handles' fabric numbers are ignored.
fn assert_every_scenario_replays(make: &dyn Fn() -> SimBed, exact: bool) {
    let probe = make();
    for s in scenarios::<SimBed>() {
        if s.unmet_on(&probe).is_some() {
            continue;
        }
        let (name, scenario) = (s.name, s.run);
        let (mut first, first_panic) = run_once(make, scenario);
        let (mut second, second_panic) = run_once(make, scenario);
        if !exact {
            first = without_fabric_numbers(&first);
            second = without_fabric_numbers(&second);
        }
        assert_eq!(
            first_panic.as_ref().map(|p| without_fabric_numbers(p)),
            second_panic.as_ref().map(|p| without_fabric_numbers(p)),
            "{name}: verdict differs between runs"
        );
        assert_same_trace(name, &first, &second);
    }
}

/// Every conformance scenario on a quiet RoCE fabric replays byte for byte.
#[test]
fn every_scenario_replays_byte_for_byte() {
    assert_every_scenario_replays(&|| SimBed::new(42), true);
}

/// The same, ignoring the fabric number inside handles (which a process-wide counter may
/// assign differently): everything else must replay.
#[test]
fn every_scenario_replays_apart_from_fabric_numbers() {
    assert_every_scenario_replays(&|| SimBed::new(42), false);
}

/// With jitter and message loss drawn from the seed, runs still replay (handles' fabric
/// numbers aside, which `every_scenario_replays_byte_for_byte` covers).
#[test]
fn lossy_jittery_runs_replay_byte_for_byte() {
    let config = SimConfig {
        wire_jitter: Duration::from_millis(3),
        loss_probability: 0.05,
        ..SimConfig::default()
    };
    assert_every_scenario_replays(
        &|| SimBed::with_config(9, Transport::Roce, config.clone()),
        false,
    );
}

/// A run of two processes (the scheduler passes a baton between OS threads) replays byte for
/// byte, whatever the OS does with the threads.
#[test]
fn processes_replay_byte_for_byte() {
    let run = || {
        let bed = SimBed::new(77);
        let addr = bed.server_addr();
        let log = Arc::new(Mutex::new(Vec::new()));
        let server_log = Arc::clone(&log);
        bed.fabric
            .spawn("server", "server", move |cm| -> Result<(), CmError> {
                let listener = cm.create_id(None, 0, PortSpace::TCP)?;
                cm.bind_addr(listener, addr)?;
                cm.listen(listener, 4)?;
                for _ in 0..3 {
                    let child = cm.get_request(listener)?;
                    cm.create_qp(child, &QpInitAttr::new(QpType::Rc))?;
                    cm.accept(child, None)?;
                    server_log
                        .lock()
                        .unwrap()
                        .push(format!("accepted at {:?}", cm.now()));
                    cm.destroy_id(child)?;
                }
                cm.destroy_id(listener)?;
                Ok(())
            });
        for n in 0..3 {
            let client_log = Arc::clone(&log);
            bed.fabric.spawn(
                "client",
                &format!("client{n}"),
                move |cm| -> Result<(), CmError> {
                    cm.sleep(Duration::from_millis(n * 3))?;
                    let id = cm.create_id(None, n, PortSpace::TCP)?;
                    cm.resolve_addr(id, None, addr, RESOLVE_TIMEOUT)?;
                    cm.resolve_route(id, RESOLVE_TIMEOUT)?;
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                    cm.connect(id, None)?;
                    client_log
                        .lock()
                        .unwrap()
                        .push(format!("client{n} connected at {:?}", cm.now()));
                    Ok(())
                },
            );
        }
        bed.fabric.run().expect("processes succeed");
        let log = log.lock().unwrap().clone();
        (bed.fabric.trace_text(), log)
    };
    let (first, first_log) = run();
    let (second, second_log) = run();
    assert_eq!(
        first_log.len(),
        6,
        "three accepts, three connects: {first_log:?}"
    );
    assert_eq!(
        first_log, second_log,
        "process interleaving differs between runs"
    );
    assert_same_trace(
        "processes",
        &without_fabric_numbers(&first),
        &without_fabric_numbers(&second),
    );
    assert_same_trace("processes (byte for byte)", &first, &second);
}

/// The seed reaches the trace: ephemeral ports (and QP numbers) are drawn from it, so across a
/// handful of seeds not every trace is the same.
#[test]
fn seeds_change_the_draws() {
    let traces: Vec<String> = (1..=4)
        .map(|seed| {
            let bed = SimBed::new(seed);
            cmtwin_tests::conformance::connect::accept_establishes_both_sides(&bed);
            bed.fabric.trace_text()
        })
        .collect();
    assert!(
        traces.iter().any(|t| *t != traces[0]),
        "four seeds gave four identical traces: the seed does not reach the draws"
    );
}
