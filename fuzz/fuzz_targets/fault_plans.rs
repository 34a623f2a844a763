//! Fault plans from arbitrary bytes: the parser never panics, a plan survives its JSON round
//! trip, and the connect/teardown scenario holds under every valid plan, twice with the same
//! trace (`cmtwin_tests::fuzzing::fault_plans`, replayed on stable by
//! `tests/tests/fuzz_inputs.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cmtwin_tests::fuzzing::fault_plans(data));
