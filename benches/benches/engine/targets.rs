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
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A Markdown table of every figure of `run`, with the target and whether it is met.
pub fn table(run: &Results) -> String {
    let mut out = format!(
        "| measure | n | {} ({}) | unit | target | met |\n|---|---:|---:|---|---|---|\n",
        run.label, run.date
    );
    for r in &run.records {
        let (target, met) = match bound_of(&r.measure, r.n) {
            Some(Bound::AtLeast(b)) => (format!(">= {}", readable(b)), r.value >= b),
            Some(Bound::AtMost(b)) => (format!("<= {}", readable(b)), r.value <= b),
            None => (String::new(), true),
        };
        let mark = match (target.is_empty(), met) {
            (true, _) => "",
            (false, true) => "yes",
            (false, false) => "no",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {target} | {mark} |",
            r.measure,
            r.n,
            readable(r.value),
            r.unit
        );
    }
    out
}
