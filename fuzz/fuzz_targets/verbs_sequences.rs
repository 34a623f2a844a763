//! Random data path call sequences on the simulator, checked against the same contract as
//! `tests/tests/sim_verbs_proptest.rs` (`cmtwin_tests::random_verbs`): a fabric seed and up to
//! `MAX_OPS` ops built from the fuzzer's bytes with `arbitrary`, run by
//! `cmtwin_tests::fuzzing::verbs_sequences` (which `tests/tests/fuzz_inputs.rs` also replays
//! on stable). The simulator's own invariants are checked after every call and step (debug
//! assertions are on in fuzz builds).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cmtwin_tests::fuzzing::verbs_sequences(data));
