//! Seeds and replay from the environment (`CMTWIN_SEED`, `CMTWIN_PLAN`). One test only: the
//! environment is shared by every test of a binary.

use std::panic::catch_unwind;
use std::sync::Mutex;

use cmtwin_sim::replay::{random_seed, replay_line, run_seeded, TestTarget};
use cmtwin_sim::sweep::{Outcome, RunContext, Sweep};
use cmtwin_sim::{seeded_test, FaultAction, FaultPlan, Trigger};

fn plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 7 },
        FaultAction::AddressChange {
            host: "it's".into(),
        },
    )
}

#[test]
fn seeds_and_plans_come_from_the_environment() {
    // The line that reruns this very test.
    let target = TestTarget::current(env!("CARGO_PKG_NAME"));
    assert_eq!(
        target.command(),
        "cargo test -p cmtwin-sim --test replay_env -- 'seeds_and_plans_come_from_the_environment' --exact"
    );
    assert_eq!(
        replay_line(&target.command(), 12, &plan()),
        format!(
            "CMTWIN_SEED=12 CMTWIN_PLAN='{}' {}",
            plan().to_json().replace('\'', r"'\''"),
            target.command()
        )
    );
    assert_eq!(
        replay_line("cargo test", 5, &FaultPlan::new()),
        "CMTWIN_SEED=5 cargo test"
    );

    // Unset: a random seed, and the default plan of that seed.
    std::env::remove_var("CMTWIN_SEED");
    std::env::remove_var("CMTWIN_PLAN");
    let seen = Mutex::new(None);
    seeded_test!(
        |seed| FaultPlan::new().scheduled(
            Trigger::Time { at_ms: seed % 1000 },
            FaultAction::AddressChange { host: "a".into() }
        ),
        |seed, plan: &FaultPlan| -> Result<(), String> {
            *seen.lock().unwrap() = Some((seed, plan.clone()));
            Ok(())
        }
    );
    let (seed, got) = seen.lock().unwrap().take().unwrap();
    assert_eq!(
        got.to_json(),
        format!(
            r#"{{"faults":[{{"type":"scheduled","when":{{"on":"time","at_ms":{}}},"action":{{"do":"address_change","host":"a"}}}}]}}"#,
            seed % 1000
        )
    );
    assert_ne!(random_seed(), random_seed());

    // Set: exactly that seed and plan (inline JSON, then a file).
    std::env::set_var("CMTWIN_SEED", "77");
    std::env::set_var("CMTWIN_PLAN", plan().to_json());
    seeded_test!(|seed, p: &FaultPlan| -> Result<(), String> {
        *seen.lock().unwrap() = Some((seed, p.clone()));
        Ok(())
    });
    assert_eq!(seen.lock().unwrap().take(), Some((77, plan())));
    let file = std::env::temp_dir().join(format!("cmtwin-plan-{}.json", std::process::id()));
    std::fs::write(&file, plan().to_json_pretty()).unwrap();
    std::env::set_var("CMTWIN_PLAN", &file);
    seeded_test!(|seed, p: &FaultPlan| -> Result<(), String> {
        *seen.lock().unwrap() = Some((seed, p.clone()));
        Ok(())
    });
    assert_eq!(seen.lock().unwrap().take(), Some((77, plan())));
    std::fs::remove_file(&file).unwrap();

    // A failing body fails the test with its error.
    std::env::remove_var("CMTWIN_PLAN");
    let failed = catch_unwind(|| {
        run_seeded("cmtwin-sim", |_| FaultPlan::new(), |_, _| Err("boom"));
    })
    .unwrap_err();
    assert_eq!(
        failed.downcast_ref::<String>().map(String::as_str),
        Some("boom")
    );

    // A sweep with CMTWIN_SEED set runs that seed only.
    let seeds = Mutex::new(Vec::new());
    let report = Sweep::new("one", |ctx: &RunContext| -> Outcome {
        seeds.lock().unwrap().push((ctx.seed(), ctx.plan().clone()));
        Ok(())
    })
    .seeds(0..50)
    .plan(plan())
    .quiet()
    .run();
    assert_eq!(report.runs, 1);
    assert_eq!(*seeds.lock().unwrap(), [(77, plan())]);

    // Unreadable values are clear errors.
    std::env::set_var("CMTWIN_SEED", "seventy");
    let failed =
        catch_unwind(|| run_seeded("x", |_| FaultPlan::new(), |_, _| Ok::<(), String>(())))
            .unwrap_err();
    assert_eq!(
        failed.downcast_ref::<String>().map(String::as_str),
        Some("CMTWIN_SEED=\"seventy\" is not a seed (an unsigned 64-bit number): invalid digit found in string")
    );
    std::env::set_var("CMTWIN_SEED", "1");
    std::env::set_var("CMTWIN_PLAN", "{\"faults\": 3}");
    let failed =
        catch_unwind(|| run_seeded("x", |_| FaultPlan::new(), |_, _| Ok::<(), String>(())))
            .unwrap_err();
    assert_eq!(
        failed.downcast_ref::<String>().map(String::as_str),
        Some("CMTWIN_PLAN: not a fault plan: invalid type: integer `3`, expected a sequence at line 1 column 12")
    );
    std::env::remove_var("CMTWIN_SEED");
    std::env::remove_var("CMTWIN_PLAN");
}
