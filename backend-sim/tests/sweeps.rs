//! Sweeps: runs spread over threads, shards that partition the seeds, failing plans reduced to
//! the fault that matters, replay lines and diagrams of failing runs.

use std::collections::BTreeSet;
use std::sync::Mutex;

use cmtwin::Transport;
use cmtwin_sim::scenarios::{connect_teardown, space};
use cmtwin_sim::sweep::{Outcome, RunContext, Shard, Sweep};
use cmtwin_sim::{FaultAction, FaultPlan, MessageChance, MessageKind, Trigger};

#[test]
fn shards_partition_the_seeds() {
    let mut union = Vec::new();
    for index in 1..=3 {
        let seen = Mutex::new(Vec::new());
        let report = Sweep::new("shards", |ctx: &RunContext| -> Outcome {
            seen.lock().unwrap().push(ctx.seed());
            Ok(())
        })
        .seeds(100..110)
        .shard(Shard { index, count: 3 })
        .threads(2)
        .quiet()
        .run();
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(report.runs, seen.len());
        union.extend(seen);
    }
    union.sort();
    assert_eq!(union, (100..110).collect::<Vec<_>>());
    assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
    let nonsense = std::panic::catch_unwind(|| {
        Sweep::new("x", |_: &RunContext| -> Outcome { Ok(()) })
            .shard(Shard { index: 0, count: 0 })
            .quiet()
            .run()
    })
    .unwrap_err();
    assert_eq!(
        nonsense.downcast_ref::<String>().map(String::as_str),
        Some("shard 0/0 does not exist: the index counts from 1 to the number of shards")
    );
    for bad in ["0/4", "5/4", "1", "a/b", "1/0"] {
        assert_eq!(
            bad.parse::<Shard>(),
            Err(format!(
                "{bad:?} is not a shard: write i/n with 1 <= i <= n, e.g. 2/4"
            ))
        );
    }
}

/// A scenario that fails when the client's device is removed while it is connected.
fn fails_on_device_removal(ctx: &RunContext) -> Outcome {
    connect_teardown(ctx, Transport::Roce)?;
    let trace = ctx.trace().ok_or("no fabric")?;
    if trace
        .iter()
        .any(|r| r.text.starts_with("RDMA_CM_EVENT_DEVICE_REMOVAL"))
    {
        return Err("the client's device went away".into());
    }
    Ok(())
}

#[test]
fn a_failing_plan_is_reduced_to_the_fault_that_matters() {
    let removal = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 1 },
        FaultAction::RemoveDevice {
            host: "client".into(),
        },
    );
    let plan = FaultPlan::new()
        .chance(MessageChance {
            delay: 0.5,
            delay_max_ms: 3,
            ..MessageChance::new(MessageKind::Req)
        })
        .scheduled(
            Trigger::Time { at_ms: 0 },
            FaultAction::AddressChange {
                host: "server".into(),
            },
        )
        .scheduled(
            Trigger::Time { at_ms: 1 },
            FaultAction::RemoveDevice {
                host: "client".into(),
            },
        )
        .chance(MessageChance {
            duplicate: 1.0,
            ..MessageChance::new(MessageKind::Drep)
        });
    let dir = std::env::temp_dir().join(format!("cmtwin-sweep-test-{}", std::process::id()));
    let report = Sweep::new("reduce", fails_on_device_removal)
        .seeds(0..6)
        .plan(plan)
        .svg_dir(&dir)
        .replay_command("cargo test -p demo --test t -- t --exact")
        .quiet()
        .run();
    assert_eq!(report.runs, 6);
    assert_eq!(report.failures.len(), 6);
    for f in &report.failures {
        assert_eq!(f.faults_before, 4);
        assert_eq!(f.plan, removal, "seed {}", f.seed);
        assert_eq!(f.error, "the client's device went away");
        assert_eq!(
            f.replay,
            format!(
                "CMTWIN_SEED={} CMTWIN_PLAN='{}' cargo test -p demo --test t -- t --exact",
                f.seed,
                removal.to_json()
            )
        );
        let svg = f.svg.as_ref().expect("a diagram");
        assert_eq!(*svg, dir.join(format!("reduce-seed{}.svg", f.seed)));
        let text = std::fs::read_to_string(svg).unwrap();
        assert!(text.contains("fault plan #1 fires: at 1 ms: remove the device of client"));
    }
    let summary = report.summary();
    assert!(summary.starts_with("6 runs, 6 failed\nseed 0: the client's device went away\n"));
    assert!(summary.contains("plan reduced from 4 to 1 faults"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_panicking_scenario_is_a_failure_not_a_crash() {
    let report = Sweep::new("panics", |ctx: &RunContext| -> Outcome {
        assert!(ctx.seed() != 3, "seed three is cursed");
        Ok(())
    })
    .seeds(0..5)
    .quiet()
    .run();
    let failed: Vec<(u64, &str)> = report
        .failures
        .iter()
        .map(|f| (f.seed, f.error.as_str()))
        .collect();
    assert_eq!(failed, [(3, "panicked: seed three is cursed")]);
    assert!(report.failures[0].svg.is_none(), "no fabric, no diagram");
}

/// The bundled scenario holds under 150 swarm plans on RoCE and InfiniBand, and the plans
/// reach the faults they name.
#[test]
fn the_bundled_scenarios_hold_under_swarm_plans() {
    for s in cmtwin_sim::scenarios::SCENARIOS {
        let report = Sweep::new(s.name, s.run)
            .seeds(0..150)
            .swarm((s.space)())
            .quiet()
            .run();
        assert_eq!(report.runs, 150);
        assert!(report.failures.is_empty(), "{}", report.summary());
    }
    let mut fired = BTreeSet::new();
    for seed in 0..150 {
        let ctx = RunContext::new(seed, FaultPlan::swarm(seed, &space()));
        connect_teardown(&ctx, Transport::Roce).unwrap();
        for r in ctx.trace().unwrap() {
            if let Some(rest) = r.text.strip_prefix("RDMA_CM_EVENT_") {
                fired.insert(rest.split(' ').next().unwrap().to_string());
            }
        }
    }
    for kind in [
        "DEVICE_REMOVAL",
        "ADDR_CHANGE",
        "UNREACHABLE",
        "REJECTED",
        "TIMEWAIT_EXIT",
    ] {
        assert!(fired.contains(kind), "{kind} never happened: {fired:?}");
    }
}

/// Without a replay command, a failure's line reruns the calling test with the seed only.
#[test]
fn replay_lines_name_the_calling_test() {
    let report = Sweep::new("replay", |ctx: &RunContext| -> Outcome {
        match ctx.seed() {
            4 => Err("four".into()),
            _ => Ok(()),
        }
    })
    .seeds(0..6)
    .quiet()
    .run();
    let lines: Vec<&str> = report.failures.iter().map(|f| f.replay.as_str()).collect();
    assert_eq!(
        lines,
        ["CMTWIN_SEED=4 cargo test -p cmtwin-sim --test sweeps -- 'replay_lines_name_the_calling_test' --exact"]
    );
}

/// A scenario whose fabric run fails (returned, or unwrapped into a panic) is reported with
/// one replay instruction, the sweep's: the fabric's own line (a bare `cargo test` with the
/// plan before reduction) is taken out of the error, which keeps the processes' failures.
#[test]
fn a_failed_fabric_run_leaves_the_sweep_one_replay_line() {
    let fails = |ctx: &RunContext| -> Result<(), cmtwin_sim::SimError> {
        let fabric = ctx
            .build(
                ctx.builder()
                    .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()]),
            )
            .unwrap();
        fabric.spawn("a", "fails", |_| {
            Err(cmtwin::CmError::new(
                cmtwin::Call::Connect,
                cmtwin::Errno::EINVAL,
                "on purpose",
            ))
        });
        fabric.run()
    };
    let report = Sweep::new("fabric-replay", |ctx: &RunContext| -> Outcome {
        match ctx.seed() {
            1 => Ok(fails(ctx)?),
            _ => {
                fails(ctx)
                    .map_err(|e| e.to_string())
                    .expect("seed 2 panics");
                Ok(())
            }
        }
    })
    .seeds(1..3)
    .replay_command("cargo test -p demo --test t -- t --exact")
    .quiet()
    .run();
    let failed: Vec<(u64, &str, &str)> = report
        .failures
        .iter()
        .map(|f| (f.seed, f.error.as_str(), f.replay.as_str()))
        .collect();
    let why = "simulation failed:\nprocess fails failed: rdma_connect: EINVAL (22): on purpose";
    let panicked = format!("panicked: seed 2 panics: \"{}\"", why.replace('\n', "\\n"));
    assert_eq!(
        failed,
        [
            (
                1,
                why,
                "CMTWIN_SEED=1 cargo test -p demo --test t -- t --exact"
            ),
            (
                2,
                panicked.as_str(),
                "CMTWIN_SEED=2 cargo test -p demo --test t -- t --exact"
            ),
        ]
    );
    assert_eq!(
        report.summary().matches("CMTWIN_SEED=").count(),
        2,
        "{}",
        report.summary()
    );
}

/// Only the first failures are reduced and drawn; the rest keep their plan and error.
#[test]
fn only_the_first_failures_are_reduced() {
    let plan = FaultPlan::new()
        .scheduled(
            Trigger::Time { at_ms: 0 },
            FaultAction::AddressChange {
                host: "server".into(),
            },
        )
        .scheduled(
            Trigger::Time { at_ms: 1 },
            FaultAction::RemoveDevice {
                host: "client".into(),
            },
        );
    let report = Sweep::new("cap", fails_on_device_removal)
        .seeds(10..13)
        .plan(plan.clone())
        .max_reduced(1)
        .svg_dir(std::env::temp_dir().join(format!("cmtwin-cap-{}", std::process::id())))
        .quiet()
        .run();
    let shape: Vec<(u64, bool, usize, bool)> = report
        .failures
        .iter()
        .map(|f| (f.seed, f.reduced, f.plan.faults.len(), f.svg.is_some()))
        .collect();
    assert_eq!(
        shape,
        [
            (10, true, 1, true),
            (11, false, 2, false),
            (12, false, 2, false)
        ]
    );
    let schedule = cmtwin_sim::SchedConfig::drawn(11).describe();
    assert!(report.summary().contains(&format!(
        "seed 11: the client's device went away\n  2 faults in the plan (not reduced), \
         schedule {schedule}\n"
    )));
    assert!(report
        .failures
        .iter()
        .all(|f| f.error == "the client's device went away"));
    std::fs::remove_dir_all(report.failures[0].svg.as_ref().unwrap().parent().unwrap()).unwrap();
}
