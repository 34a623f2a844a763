//! The fuzz targets' bodies, one function per target, shared by cargo-fuzz (`fuzz/`, nightly)
//! and by the replay of their inputs as ordinary tests on stable (`tests/tests/fuzz_inputs.rs`):
//! an input that crashed a campaign, kept under `fuzz/seeds/<target>/`, is a regression test.
//!
//! A user fuzzes their own protocol the same way: a function from bytes to a run of the
//! simulator (a seed and a [`FaultPlan`] drawn from the bytes, the protocol run on a fabric
//! built by [`RunContext`]) that panics when the protocol's property breaks; `fuzz/README.md`
//! shows the few lines of the target.

use arbitrary::{Arbitrary, Unstructured};
use cmtwin::Transport;
use cmtwin_sim::scenarios::connect_teardown;
use cmtwin_sim::sweep::RunContext;
use cmtwin_sim::{Fault, FaultAction, FaultPlan};

use crate::random_calls::{self, Op};

/// Ops beyond this many are ignored (the proptest draws 40).
pub const MAX_OPS: usize = 64;

/// Target `call_sequences`: a fabric seed and up to [`MAX_OPS`] random CM calls, checked by
/// the model of [`random_calls`] (the property test's), final checks included. The fabric
/// keeps no trace (nothing here reads it); a failing input's seed and ops replay with the trace
/// on through [`random_calls::run`].
///
/// # Panics
///
/// When the simulator breaks the CM's contract or one of its own invariants.
pub fn call_sequences(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((seed, ops)) = <(u64, Vec<Op>)>::arbitrary(&mut u) else {
        return;
    };
    random_calls::run_untraced(seed, &ops[..ops.len().min(MAX_OPS)]);
}

/// Target `fault_plans`: the first byte picks a transport and a seed, the rest is read as a
/// fault plan in JSON. A plan that parses must validate or be refused with a reason, survive
/// its own JSON round trip, and, if valid, the connect/teardown scenario must hold under it
/// (every call succeeds or fails with an errno the CM gives there, everything can be
/// destroyed; under a power cycle or a process crash, which the scenario does not model, only
/// the simulator's own checks), twice with the same trace.
///
/// # Panics
///
/// When a valid plan breaks the scenario, the round trip changes the plan, or the simulator
/// panics.
pub fn fault_plans(data: &[u8]) {
    let Some((&first, json)) = data.split_first() else {
        return;
    };
    let transport = match first % 3 {
        0 => Transport::Roce,
        1 => Transport::InfiniBand,
        _ => Transport::Iwarp,
    };
    let seed = u64::from(first);
    let Ok(plan) = FaultPlan::from_json_bytes(json) else {
        return;
    };
    let again = FaultPlan::from_json(&plan.to_json()).expect("a plan's own JSON parses");
    assert_eq!(again, plan, "the JSON round trip changed the plan");
    // A plan the scenario's fabric refuses (a host or device it does not have) is no finding.
    let fabric = cmtwin_sim::Fabric::builder(seed)
        .host("server", transport, &["10.0.0.1".parse().expect("literal")])
        .host("client", transport, &["10.0.0.2".parse().expect("literal")])
        .plan(plan.clone())
        .build();
    if plan.validate().is_err() || fabric.is_err() {
        return;
    }
    let run = || {
        let ctx = RunContext::new(seed, plan.clone());
        let outcome = connect_teardown(&ctx, transport).map_err(|e| e.to_string());
        (outcome, ctx.trace())
    };
    let (outcome, trace) = run();
    // The scenario drives both hosts' applications from one thread: a host that loses power
    // or an application that crashes takes that side with it, which the scenario does not
    // model, so under those faults only the simulator's own checks and determinism apply.
    let kills_a_side = plan.faults.iter().any(|f| {
        matches!(
            f,
            Fault::Scheduled {
                action: FaultAction::PowerOff { .. }
                    | FaultAction::PowerOn { .. }
                    | FaultAction::CrashProcess { .. },
                ..
            }
        )
    });
    if let (Err(e), false) = (&outcome, kills_a_side) {
        panic!("seed {seed}, {transport:?}, plan {}: {e}", plan.to_json());
    }
    assert_eq!(trace, run().1, "the same input gave two traces");
}
