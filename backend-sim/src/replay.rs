//! Seeds and replay for a user's own tests: the seed comes from `CMTWIN_SEED` (random and
//! printed when unset), the plan from `CMTWIN_PLAN` (a file or inline JSON), and a failing run
//! prints the one line that reruns exactly it in the same test binary.

use std::fmt::Display;
use std::hash::{BuildHasher, Hasher};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::plan::FaultPlan;

/// The environment variable holding the seed of a replayed run.
pub const SEED_VAR: &str = "CMTWIN_SEED";
/// The environment variable holding the fault plan of a replayed run: a path to a JSON file,
/// or the JSON itself.
pub const PLAN_VAR: &str = "CMTWIN_PLAN";

/// The seed in `CMTWIN_SEED`, if set. A value that is not a number is an error naming it.
pub fn seed_from_env() -> Result<Option<u64>, String> {
    match std::env::var(SEED_VAR) {
        Ok(v) => v.trim().parse().map(Some).map_err(|e| {
            format!("{SEED_VAR}={v:?} is not a seed (an unsigned 64-bit number): {e}")
        }),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(format!("{SEED_VAR}: {e}")),
    }
}

/// The plan in `CMTWIN_PLAN`, if set: inline JSON when it starts with `{`, else a file path.
pub fn plan_from_env() -> Result<Option<FaultPlan>, String> {
    let value = match std::env::var(PLAN_VAR) {
        Ok(v) => v,
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(e) => return Err(format!("{PLAN_VAR}: {e}")),
    };
    let text = if value.trim_start().starts_with('{') {
        value
    } else {
        std::fs::read_to_string(&value)
            .map_err(|e| format!("{PLAN_VAR}={value:?}: cannot read the plan file: {e}"))?
    };
    FaultPlan::from_json(&text)
        .map(Some)
        .map_err(|e| format!("{PLAN_VAR}: {e}"))
}

/// A fresh seed that differs from run to run (the only place the OS's randomness enters; it is
/// printed so the run can be replayed).
pub fn random_seed() -> u64 {
    // The standard library keys each `RandomState` from the OS's randomness.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x636d_7477_696e);
    h.finish()
}

/// Quotes `text` for a POSIX shell.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Where a test runs: the package, the test binary and the test's name, as far as they can be
/// told from inside the running test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestTarget {
    /// The cargo package (`-p`).
    pub package: String,
    /// `--lib`, `--test <name>`, `--example <name>`, or nothing when unknown.
    pub binary: Option<String>,
    /// The test's full name (libtest names each test's thread after it).
    pub test: Option<String>,
}

impl TestTarget {
    /// The target of the calling test in `package` (pass `env!("CARGO_PKG_NAME")`).
    pub fn current(package: &str) -> TestTarget {
        let crate_name = package.replace('-', "_");
        let binary = std::env::current_exe().ok().and_then(|exe| {
            let stem = exe.file_stem()?.to_str()?.to_string();
            // Test binaries are named `<target>-<16 hex digits>`.
            let target = match stem.rsplit_once('-') {
                Some((t, hash))
                    if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) =>
                {
                    t.to_string()
                }
                _ => return None,
            };
            let in_examples = exe
                .parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "examples");
            Some(if in_examples {
                format!("--example {target}")
            } else if target == crate_name {
                "--lib".to_string()
            } else {
                format!("--test {target}")
            })
        });
        let test = std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .map(str::to_string);
        TestTarget {
            package: package.to_string(),
            binary,
            test,
        }
    }

    /// The command that reruns this test.
    pub fn command(&self) -> String {
        let mut line = format!("cargo test -p {}", self.package);
        if let Some(b) = &self.binary {
            line.push(' ');
            line.push_str(b);
        }
        if let Some(t) = &self.test {
            line.push_str(&format!(" -- {} --exact", shell_quote(t)));
        }
        line
    }
}

/// The line that reruns `command` with `seed` and `plan` (the plan inline, when not empty).
pub fn replay_line(command: &str, seed: u64, plan: &FaultPlan) -> String {
    if plan.is_empty() {
        format!("{SEED_VAR}={seed} {command}")
    } else {
        format!(
            "{SEED_VAR}={seed} {PLAN_VAR}={} {command}",
            shell_quote(&plan.to_json())
        )
    }
}

/// Runs `body` with a seed and a fault plan, the way a user's `#[test]` does (see
/// [`seeded_test!`](crate::seeded_test)): the seed from `CMTWIN_SEED` or random, the plan from
/// `CMTWIN_PLAN` or `default_plan(seed)`. Prints the seed; when `body` fails (returns an
/// error or panics), prints the line that reruns exactly this run and fails the test.
///
/// # Panics
/// When `body` fails (that is how a test fails), or when `CMTWIN_SEED` or `CMTWIN_PLAN` cannot
/// be read (the message says why).
pub fn run_seeded<E: Display>(
    package: &str,
    default_plan: impl FnOnce(u64) -> FaultPlan,
    body: impl FnOnce(u64, &FaultPlan) -> Result<(), E>,
) {
    let seed = seed_from_env()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(random_seed);
    let plan = plan_from_env()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| default_plan(seed));
    let line = replay_line(&TestTarget::current(package).command(), seed, &plan);
    eprintln!(
        "cmtwin: seed {seed}, {} faults in the plan",
        plan.faults.len()
    );
    match catch_unwind(AssertUnwindSafe(|| body(seed, &plan))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("cmtwin: the run failed; replay it with:\n{line}");
            panic!("{e}");
        }
        Err(payload) => {
            eprintln!("cmtwin: the run panicked; replay it with:\n{line}");
            resume_unwind(payload);
        }
    }
}

/// Runs a seeded simulation in a user's `#[test]`: `seeded_test!(|seed, plan| { ... })`, or
/// `seeded_test!(plan_for_seed, |seed, plan| { ... })` with a function giving the plan of a
/// seed when `CMTWIN_PLAN` is unset (e.g. a swarm plan). The body returns a `Result` whose
/// error is `Display`. See [`run_seeded`].
#[macro_export]
macro_rules! seeded_test {
    ($body:expr) => {
        $crate::replay::run_seeded(env!("CARGO_PKG_NAME"), |_| $crate::FaultPlan::new(), $body)
    };
    ($plan:expr, $body:expr) => {
        $crate::replay::run_seeded(env!("CARGO_PKG_NAME"), $plan, $body)
    };
}
