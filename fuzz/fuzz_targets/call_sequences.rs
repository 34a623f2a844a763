//! Random CM call sequences on the simulator, checked against the same model as
//! `tests/tests/sim_proptest.rs` (`cmtwin_tests::random_calls`): the input is a fabric seed and
//! up to [`MAX_OPS`] ops, built from the fuzzer's bytes with `arbitrary`; they run through
//! `random_calls::run` exactly as a proptest case does, final checks included. The simulator's
//! own invariants are checked after every call and step (debug assertions are on in fuzz
//! builds).
#![no_main]

use cmtwin_tests::random_calls::{self, Op};
use libfuzzer_sys::fuzz_target;

/// Ops beyond this many are ignored (the proptest draws 40).
const MAX_OPS: usize = 64;

fuzz_target!(|input: (u64, Vec<Op>)| {
    let (seed, ops) = input;
    random_calls::run(seed, &ops[..ops.len().min(MAX_OPS)]);
});
