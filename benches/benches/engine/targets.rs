//! The engine's targets (issue 6) and the table that sets the measured figures beside them.

use std::fmt::Write as _;

use crate::results::Results;

/// Which way a figure must go.
#[derive(Clone, Copy)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// A target: a figure at an `n` (all measured `n` when `None`) and its bound.
struct Target {
    measure: &'static str,
    n: Option<u64>,
    bound: Bound,
}

const TARGETS: [Target; 7] = [
    Target {
        measure: "lifecycles_per_cpu_s",
        n: Some(1000),
        bound: Bound::AtLeast(200_000.0),
    },
    Target {
        measure: "cm_events_per_cpu_s",
        n: Some(1000),
        bound: Bound::AtLeast(2_000_000.0),
    },
    Target {
        measure: "ratio_cmtwin_over_turmoil",
        n: None,
        bound: Bound::AtLeast(20.0),
    },
    Target {
        measure: "cost_per_lifecycle_vs_1k",
        n: Some(100_000),
        bound: Bound::AtMost(2.0),
    },
    Target {
        measure: "heap_per_connected_id",
        n: None,
        bound: Bound::AtMost(1024.0),
    },
    Target {
        measure: "switch_cpu_us",
        n: Some(0),
        bound: Bound::AtMost(5.0),
    },
    Target {
        measure: "switch_cpu_us",
        n: Some(100),
        bound: Bound::AtMost(5.0),
    },
];

/// The bound on `measure` at `n`, if there is one.
fn bound_of(measure: &str, n: u64) -> Option<Bound> {
    TARGETS
        .iter()
        .find(|t| t.measure == measure && t.n.is_none_or(|tn| tn == n))
        .map(|t| t.bound)
}

/// A figure in a readable form: thousands grouped, a few significant digits.
pub fn readable(v: f64) -> String {
    if v.abs() >= 1000.0 {
        let digits = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 && c.is_ascii_digit() {
                out.push(' ');
            }
            out.push(c);
        }
        out
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The target of `measure` at `n` as text, and whether `value` meets it (`None`: no target).
fn judge(measure: &str, n: u64, value: f64) -> Option<(String, bool)> {
    match bound_of(measure, n)? {
        Bound::AtLeast(b) => Some((format!(">= {}", readable(b)), value >= b)),
        Bound::AtMost(b) => Some((format!("<= {}", readable(b)), value <= b)),
    }
}

/// A Markdown table of every figure, one column per run in `runs`, then the target and whether
/// `current` meets it. Rows follow `current`'s order, then figures only other runs have.
pub fn table(runs: &[Results], current: &Results) -> String {
    let mut rows: Vec<(&str, u64, &str)> = Vec::new();
    for r in std::iter::once(current)
        .chain(runs)
        .flat_map(|run| &run.records)
    {
        if !rows.iter().any(|(m, n, _)| *m == r.measure && *n == r.n) {
            rows.push((&r.measure, r.n, &r.unit));
        }
    }
    let mut out = String::from("| measure | n | unit |");
    for run in runs {
        let _ = write!(out, " {} ({}) |", run.label, run.date);
    }
    let _ = writeln!(out, " target | met ({}) |", current.label);
    let _ = writeln!(out, "|---|---:|---|{}---|---|", "---:|".repeat(runs.len()));
    for (measure, n, unit) in rows {
        let _ = write!(out, "| {measure} | {n} | {unit} |");
        for run in runs {
            let cell = run.get(measure, n).map(readable).unwrap_or_default();
            let _ = write!(out, " {cell} |");
        }
        let verdict = current.get(measure, n).and_then(|v| judge(measure, n, v));
        let (target, met) = match verdict {
            Some((target, met)) => (target, if met { "yes" } else { "no" }),
            None => (String::new(), ""),
        };
        let _ = writeln!(out, " {target} | {met} |");
    }
    out
}
