//! The fuzz targets' inputs replayed as ordinary tests on stable: every file under
//! `fuzz/seeds/<target>/` (kept in git: starting inputs and the crashes of past campaigns,
//! which are regression tests) and, when a campaign ran here, under `fuzz/corpus/<target>/`,
//! through the same function as the cargo-fuzz target (`cmtwin_tests::fuzzing`).

use std::path::{Path, PathBuf};

/// The files of `fuzz/<dir>/<target>/`, sorted; none if the directory is absent.
fn inputs(dir: &str, target: &str) -> Vec<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&path) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Replays the seeds (at least one must exist) and any local corpus of `target` through
/// `body`, naming the input that fails.
fn replay(target: &str, body: fn(&[u8])) {
    let seeds = inputs("seeds", target);
    assert!(!seeds.is_empty(), "fuzz/seeds/{target}/ has no input");
    for file in seeds.iter().chain(inputs("corpus", target).iter()) {
        let data = std::fs::read(file).expect("a readable input");
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(outcome.is_ok(), "{} fails its target", file.display());
    }
    eprintln!("{target}: {} seeds replayed", seeds.len());
}

#[test]
fn fault_plan_inputs_replay() {
    replay("fault_plans", cmtwin_tests::fuzzing::fault_plans);
}

#[test]
fn call_sequence_inputs_replay() {
    replay("call_sequences", cmtwin_tests::fuzzing::call_sequences);
}

#[test]
fn cm_model_inputs_replay() {
    replay("cm_model", cmtwin_tests::fuzzing::cm_model);
}

#[test]
fn verbs_sequence_inputs_replay() {
    replay("verbs_sequences", cmtwin_tests::fuzzing::verbs_sequences);
}
