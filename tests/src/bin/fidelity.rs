//! `fidelity DIR [--known FILE] [--doc FILE]`: compares the real beds' traces in `DIR` (one
//! directory per bed, written by `tests/verbs_conformance.rs` with `CMTWIN_FIDELITY_DIR=DIR`)
//! with each bed's simulated twin, prints the match rate per bed and every difference no
//! known reason covers, and writes the fidelity table to `DIR/FIDELITY.md` (and to `--doc
//! FILE` too, e.g. `tests/FIDELITY.md`). The twin's traces go to `DIR/<bed>/<scenario>.sim`.
//!
//! Known differences are read from `--known FILE` (default `tests/fidelity-known.txt`, see
//! `cmtwin_tests::fidelity::Known`). Exit status 0 when every bed was compared (whatever the
//! differences: the table reports them), 1 on an error (no bed, an unreadable file), 2 with
//! `--strict` when a difference is unexplained.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cmtwin_tests::bed_id::BedId;
use cmtwin_tests::conformance::scenarios;
use cmtwin_tests::fidelity::{read_bed, table, trace_text, BedReport, Known, Outcome, BED_FILE};
use cmtwin_tests::harness::{panic_message, unmet};
use cmtwin_tests::recording::RecordingBed;
use cmtwin_tests::SimBed;

/// The seed of every twin run.
const SEED: u64 = 1;

struct Options {
    dir: PathBuf,
    known: PathBuf,
    doc: Option<PathBuf>,
    strict: bool,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        dir: PathBuf::new(),
        known: Path::new(env!("CARGO_MANIFEST_DIR")).join("fidelity-known.txt"),
        doc: None,
        strict: false,
    };
    let mut dir = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--known" => options.known = args.next().ok_or("--known needs a file")?.into(),
            "--doc" => options.doc = Some(args.next().ok_or("--doc needs a file")?.into()),
            "--strict" => options.strict = true,
            _ if dir.is_none() && !arg.starts_with("--") => dir = Some(PathBuf::from(arg)),
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    options.dir = dir.ok_or("usage: fidelity DIR [--known FILE] [--doc FILE] [--strict]")?;
    Ok(options)
}

/// The beds recorded in `dir`, in a stable order: by kernel series, then driver.
fn beds(dir: &Path) -> Result<Vec<(PathBuf, BedId)>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut beds = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.join(BED_FILE).is_file() {
            let id = read_bed(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            beds.push((path, id));
        }
    }
    beds.sort_by_key(|(_, id)| (id.kernel_series(), id.driver.clone()));
    Ok(beds)
}

/// Runs `scenario` on the twin of `id`, recorded; its trace (ending in the failure if it
/// failed).
fn twin_trace(
    id: &BedId,
    scenario: &cmtwin_tests::conformance::Scenario<RecordingBed<SimBed>>,
) -> Result<String, String> {
    let config = id.twin_config().ok_or_else(|| {
        format!(
            "the simulator has no profile for kernel {}",
            id.kernel_release
        )
    })?;
    let bed = RecordingBed::new(SimBed::with_config(SEED, id.transport, config));
    if let Some(reason) = unmet(&bed, scenario) {
        return Err(reason);
    }
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| (scenario.run)(&bed)));
    let failure = outcome.err().map(|p| panic_message(p.as_ref()));
    Ok(trace_text(&bed, failure.as_deref()))
}

fn compare_bed(path: &Path, id: &BedId, known: &[Known]) -> Result<BedReport, String> {
    let bed = id.name();
    let mut rows = Vec::new();
    for scenario in scenarios::<RecordingBed<SimBed>>() {
        let name = scenario.name;
        let read = |ext: &str| fs::read_to_string(path.join(format!("{name}.{ext}"))).ok();
        let outcome = match (read("trace"), read("ignored")) {
            (Some(real), _) => match twin_trace(id, &scenario) {
                Ok(sim) => {
                    fs::write(path.join(format!("{name}.sim")), &sim)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    Outcome::of(&sim, &real, &bed, name, known)
                }
                Err(why) => Outcome::IgnoredOnSim(why),
            },
            (None, Some(why)) => Outcome::IgnoredOnReal(why.trim().to_string()),
            (None, None) => Outcome::NotRun,
        };
        rows.push((name.to_string(), outcome));
    }
    Ok(BedReport { bed, rows })
}

const PREAMBLE: &str = "# Fidelity: the simulator against real librdmacm\n\n\
Written by `cargo run -p cmtwin-tests --bin fidelity` from the traces that \
`scripts/verbs-tests-in-vm` records on the real beds (every conformance scenario's calls, \
results, events and timer intervals, normalized: `cmtwin_tests::recording`), each compared \
with the same scenario on the bed's simulated twin (same transport, the kernel's profile, \
seed 1). Identical means the same lines in the same order, with every interval of the real \
run within -10%/+10%+0.5 s of the twin's. Known differences and their reasons: \
`tests/fidelity-known.txt`.\n\n";

fn run(options: &Options) -> Result<bool, String> {
    let known_text = fs::read_to_string(&options.known)
        .map_err(|e| format!("{}: {e}", options.known.display()))?;
    let known =
        Known::parse_list(&known_text).map_err(|e| format!("{}: {e}", options.known.display()))?;
    let beds = beds(&options.dir)?;
    if beds.is_empty() {
        return Err(format!("{}: no bed's traces", options.dir.display()));
    }
    let mut reports = Vec::new();
    for (path, id) in &beds {
        reports.push(compare_bed(path, id, &known)?);
    }
    let mut unexplained = 0;
    for r in &reports {
        println!("fidelity: {}", r.summary());
        for (name, outcome) in &r.rows {
            if let Outcome::Unexplained(d) = outcome {
                unexplained += 1;
                println!("fidelity:   {name} differs, no known reason: {d}");
            }
        }
    }
    let (compared, matched) = reports.iter().fold((0, 0), |(c, m), r| {
        let (compared, identical, explained) = r.counts();
        (c + compared, m + identical + explained)
    });
    println!(
        "fidelity: match rate (identical or explained) {matched}/{compared} = {:.1}% over {} beds",
        100.0 * matched as f64 / compared.max(1) as f64,
        reports.len()
    );
    let doc = format!("{PREAMBLE}{}", table(&reports));
    let out = options.dir.join("FIDELITY.md");
    fs::write(&out, &doc).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("fidelity: table written to {}", out.display());
    if let Some(path) = &options.doc {
        fs::write(path, &doc).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("fidelity: table written to {}", path.display());
    }
    Ok(unexplained == 0)
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fidelity: {e}");
            return ExitCode::from(1);
        }
    };
    // The twin's failed scenarios are reported in the table, not as panic messages.
    panic::set_hook(Box::new(|_| {}));
    match run(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) if options.strict => ExitCode::from(2),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fidelity: {e}");
            ExitCode::from(1)
        }
    }
}
