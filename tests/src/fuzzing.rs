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
use cmtwin_sim::{Fault, FaultAction, FaultPlan, SimConfig};

use crate::cm_model::op::Chunk;
use crate::cm_model::CaseStats;
use crate::random_calls::{self, Op};
use crate::SimBed;

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

/// Target `verbs_sequences`: a fabric seed and up to [`MAX_OPS`] random data path calls,
/// checked by the contract of [`crate::random_verbs`] (the property test's), final checks
/// included, on fabrics without trace; a failing input's seed and ops replay with the trace
/// on through [`crate::random_verbs::run`].
///
/// # Panics
///
/// When the simulator breaks the data path's contract or one of its own invariants.
pub fn verbs_sequences(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((seed, ops)) = <(u64, Vec<crate::random_verbs::Op>)>::arbitrary(&mut u) else {
        return;
    };
    crate::random_verbs::run_untraced(seed, &ops[..ops.len().min(MAX_OPS)]);
}

/// Ops of a `cm_model` input beyond this many are ignored (the proptest's cases have up to
/// about 60).
pub const MAX_MODEL_OPS: usize = 80;

/// Target `cm_model`: a transport, a fabric seed and a sequence of lifecycles and single ops
/// ([`Chunk`]), run by the CM model (`crate::cm_model`, the same driver as
/// `tests/sim_model.rs`) on a simulated bed without trace: every call's exact result and every
/// event predicted is checked.
///
/// # Panics
///
/// When the simulator and the model disagree; the message names the op and gives the line
/// that replays the case (with `CMTWIN_MODEL_VERBOSE=1` to see every call and event).
pub fn cm_model(data: &[u8]) {
    let Some((transport, seed, ops)) = model_case(data) else {
        return;
    };
    if let Err(e) = run_model_case(transport, seed, &ops) {
        panic!(
            "the CM model disagrees with the simulator: {e}\nreplay: \
             cmtwin_tests::cm_model::run_case(&SimBed::with_transport({seed}, \
             Transport::{transport:?}), &{ops:?}) (with cmtwin_tests::cm_model::op::{{Op::*, \
             Target::*, OverMaxCall::*, LossyCall::*}})"
        );
    }
}

/// What a `cm_model` input covers (the events reached, the faults applied), `None` if the
/// bytes make no case or the case fails: for choosing starting inputs.
pub fn cm_model_stats(data: &[u8]) -> Option<CaseStats> {
    let (transport, seed, ops) = model_case(data)?;
    run_model_case(transport, seed, &ops).ok()
}

/// A `cm_model` input's transport, fabric seed and ops (at most [`MAX_MODEL_OPS`]): chunks
/// until the bytes run out, so every byte counts.
fn model_case(data: &[u8]) -> Option<(Transport, u64, Vec<crate::cm_model::Op>)> {
    let mut u = Unstructured::new(data);
    let (which, seed) = <(u8, u64)>::arbitrary(&mut u).ok()?;
    let mut chunks = Vec::new();
    while !u.is_empty() {
        chunks.push(Chunk::arbitrary(&mut u).ok()?);
    }
    let transport =
        [Transport::Roce, Transport::InfiniBand, Transport::Iwarp][usize::from(which % 3)];
    let mut ops = Chunk::ops(&chunks);
    ops.truncate(MAX_MODEL_OPS);
    Some((transport, seed, ops))
}

/// Runs a case on a simulated bed without trace.
fn run_model_case(
    transport: Transport,
    seed: u64,
    ops: &[crate::cm_model::Op],
) -> Result<CaseStats, String> {
    let config = SimConfig {
        trace: false,
        ..SimConfig::default()
    };
    crate::cm_model::run_case(&SimBed::with_config(seed, transport, config), ops)
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
