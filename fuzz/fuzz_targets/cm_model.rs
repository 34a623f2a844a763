//! The CM model (`cmtwin_tests::cm_model`) on the simulator from arbitrary bytes: a transport,
//! a fabric seed and lifecycles and single ops, every call's exact result and every event
//! predicted checked (`cmtwin_tests::fuzzing::cm_model`, replayed on stable by
//! `tests/tests/fuzz_inputs.rs`). A disagreement panics with the line that replays the case.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cmtwin_tests::fuzzing::cm_model(data));
