//! The simulator against real librdmacm, scenario by scenario: the normalized traces
//! ([`crate::recording`]) of each conformance scenario on a real bed and on its simulated twin,
//! compared line by line, and the fidelity table made of the comparisons.
//!
//! On a real bed, `tests/verbs_conformance.rs` writes into a directory per bed (when
//! `CMTWIN_FIDELITY_DIR` is set; `scripts/verbs-tests-in-vm` sets it) a `BED` file naming the
//! bed ([`write_bed`]), one `<area>::<name>.trace` per scenario run ([`write_trace`]) and one
//! `<area>::<name>.ignored` per scenario the bed cannot run, holding the reason. The `fidelity`
//! program (`src/bin/fidelity.rs`) then runs each traced scenario on the twin, compares
//! ([`compare`]), looks each difference up in the list of known ones (`tests/fidelity-known.txt`,
//! [`Known`]) and writes the table.
//!
//! Two traces are identical when they have the same lines in the same order and every
//! interval between lines matches within [`crate::bed::twin_window`] (timers on a real kernel
//! run a little late; an interval under [`crate::recording::TIMER_INTERVAL`] counts as zero).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;
use std::time::Duration;

use cmtwin::Transport;

use crate::bed::twin_window;
use crate::bed_id::{transport_name, BedId};
use crate::recording::RecordingBed;
use crate::TestBed;

/// The file of a bed's directory that names the bed.
pub const BED_FILE: &str = "BED";

/// The last line of a trace whose scenario failed (its message precedes it as a comment).
pub const FAILED_LINE: &str = "scenario failed";

/// Writes `dir/BED`: the bed's driver, transport and kernel release, one `key=value` a line.
pub fn write_bed(dir: &Path, id: &BedId) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let text = format!(
        "driver={}\ntransport={}\nkernel={}\n",
        id.driver,
        transport_name(id.transport),
        id.kernel_release
    );
    fs::write(dir.join(BED_FILE), text)
}

/// Reads the bed a directory written by [`write_bed`] names.
pub fn read_bed(dir: &Path) -> io::Result<BedId> {
    let text = fs::read_to_string(dir.join(BED_FILE))?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
            .ok_or_else(|| {
                let why = format!("{}: no {key}= line", dir.join(BED_FILE).display());
                io::Error::new(io::ErrorKind::InvalidData, why)
            })
    };
    let transport = match field("transport")?.as_str() {
        "roce" => Transport::Roce,
        "infiniband" => Transport::InfiniBand,
        "iwarp" => Transport::Iwarp,
        other => {
            let why = format!("unknown transport {other:?}");
            return Err(io::Error::new(io::ErrorKind::InvalidData, why));
        }
    };
    Ok(BedId {
        driver: field("driver")?,
        transport,
        kernel_release: field("kernel")?,
    })
}

/// Writes the trace of `scenario` recorded on `bed` to `dir/<scenario>.trace`, ending in
/// [`FAILED_LINE`] (after the failure's message as a `#` comment) if the scenario failed.
pub fn write_trace<T: TestBed>(
    dir: &Path,
    scenario: &str,
    bed: &RecordingBed<T>,
    failure: Option<&str>,
) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(
        dir.join(format!("{scenario}.trace")),
        trace_text(bed, failure),
    )
}

/// The trace of a finished scenario: the recorded lines, and if it failed its message as
/// comments and [`FAILED_LINE`].
pub fn trace_text<T: TestBed>(bed: &RecordingBed<T>, failure: Option<&str>) -> String {
    let mut text = bed.recorder().text();
    if let Some(message) = failure {
        for line in message.lines() {
            let _ = writeln!(text, "# {line}");
        }
        text.push_str(FAILED_LINE);
        text.push('\n');
    }
    text
}

/// Writes `dir/<scenario>.ignored`: why the bed cannot run the scenario.
pub fn write_ignored(dir: &Path, scenario: &str, reason: &str) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(
        dir.join(format!("{scenario}.ignored")),
        format!("{reason}\n"),
    )
}

/// A line of a trace: what it says and the interval before it (zero when not shown).
#[derive(Clone, Debug, PartialEq)]
struct TraceLine<'a> {
    text: &'a str,
    after: Duration,
}

fn parse(trace: &str) -> Vec<TraceLine<'_>> {
    trace
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.rsplit_once("  +") {
            Some((text, secs)) => match secs.strip_suffix('s').map(str::parse::<f64>) {
                Some(Ok(s)) if s.is_finite() && s >= 0.0 => TraceLine {
                    text,
                    after: Duration::from_secs_f64(s),
                },
                _ => TraceLine {
                    text: l,
                    after: Duration::ZERO,
                },
            },
            None => TraceLine {
                text: l,
                after: Duration::ZERO,
            },
        })
        .collect()
}

/// Where two traces part: the 1-based line number and each side's line there (`None` past
/// the end of that trace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The first line that differs, counted from 1 (comment lines not counted).
    pub line: usize,
    /// The simulator's line there.
    pub sim: Option<String>,
    /// The real bed's line there.
    pub real: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |l: &Option<String>| l.clone().unwrap_or_else(|| "(end of trace)".into());
        write!(
            f,
            "line {}: simulator `{}`, real `{}`",
            self.line,
            side(&self.sim),
            side(&self.real)
        )
    }
}

/// The first difference between the simulator's trace and the real bed's, or `None` if they
/// are identical: the same lines, each interval of the real one within [`twin_window`] of
/// the simulator's.
pub fn compare(sim: &str, real: &str) -> Option<Difference> {
    first_difference(&parse(sim), &parse(real), 0)
}

/// The first difference at or after line index `from`.
fn first_difference(s: &[TraceLine<'_>], r: &[TraceLine<'_>], from: usize) -> Option<Difference> {
    let show = |l: &TraceLine<'_>| {
        if l.after.is_zero() {
            l.text.to_string()
        } else {
            format!("{}  +{:.3}s", l.text, l.after.as_secs_f64())
        }
    };
    (from..s.len().max(r.len())).find_map(|i| {
        let (a, b) = (s.get(i), r.get(i));
        let same = match (a, b) {
            (Some(a), Some(b)) => a.text == b.text && twin_window(a.after).contains(&b.after),
            _ => false,
        };
        (!same).then(|| Difference {
            line: i + 1,
            sim: a.map(show),
            real: b.map(show),
        })
    })
}

/// Whether a difference is in timing only (the same line, another interval before it): the
/// traces are still in step after it.
fn timing_only(s: &[TraceLine<'_>], r: &[TraceLine<'_>], d: &Difference) -> bool {
    matches!((s.get(d.line - 1), r.get(d.line - 1)), (Some(a), Some(b)) if a.text == b.text)
}

/// A known difference: the beds and scenarios it covers, text the first differing line
/// shows, and why the simulator differs there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    /// A bed name (`rxe-6.1`), or a pattern with `*` at its start or end (`siw-*`, `*-6.12`,
    /// `*`).
    pub beds: String,
    /// A scenario (`area::name`), or a pattern with `*` at its end (`ud::*`).
    pub scenarios: String,
    /// Text that the first differing line contains, on the simulator's side or the real
    /// bed's (`EBUSY  +2.0`): the entry explains that difference only.
    pub shows: String,
    /// Why: an rxe or siw limitation, a timing-dependent kernel ordering, a design choice.
    pub reason: String,
}

impl Known {
    /// Parses the list: one known difference a line, `BEDS | SCENARIOS | SHOWS | REASON`;
    /// `#` starts a comment line.
    pub fn parse_list(text: &str) -> Result<Vec<Known>, String> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|(n, l)| {
                let fields: Vec<&str> = l.splitn(4, " | ").map(str::trim).collect();
                match fields[..] {
                    [beds, scenarios, shows, reason]
                        if ![beds, scenarios, shows, reason].contains(&"") =>
                    {
                        Ok(Known {
                            beds: beds.to_string(),
                            scenarios: scenarios.to_string(),
                            shows: shows.to_string(),
                            reason: reason.to_string(),
                        })
                    }
                    _ => Err(format!(
                        "line {}: expected BEDS | SCENARIOS | SHOWS | REASON, none empty",
                        n + 1
                    )),
                }
            })
            .collect()
    }

    /// Whether this entry explains `difference` in `scenario` on `bed`.
    pub fn explains(&self, bed: &str, scenario: &str, difference: &Difference) -> bool {
        let shows = |line: &Option<String>| line.as_ref().is_some_and(|l| l.contains(&self.shows));
        matches(&self.beds, bed)
            && matches(&self.scenarios, scenario)
            && (shows(&difference.sim) || shows(&difference.real))
    }
}

/// `*` alone matches anything; a leading or trailing `*` matches a suffix or a prefix.
fn matches(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(prefix) = pattern.strip_suffix('*') {
        return name.starts_with(prefix);
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        return name.ends_with(suffix);
    }
    pattern == name
}

/// What the comparison of one scenario on one bed found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The traces are identical.
    Identical,
    /// They differ, for a known reason.
    Explained {
        /// Where.
        difference: Difference,
        /// Why (the [`Known`] entry's reason).
        reason: String,
    },
    /// They differ and no known difference covers it.
    Unexplained(Difference),
    /// The real bed cannot run the scenario (its reason).
    IgnoredOnReal(String),
    /// The twin cannot run the scenario though the real bed ran it (its reason).
    IgnoredOnSim(String),
    /// The real bed has no trace and no reason: the scenario was not run (a filtered run).
    NotRun,
}

impl Outcome {
    /// The outcome of comparing `sim` with `real` on `bed` for `scenario`, given the known
    /// differences. A known difference in timing only (the same line, another interval) leaves
    /// the traces in step, so the comparison goes on after it: every later difference must be
    /// known too, and the outcome names the first that is not. A difference of lines ends the
    /// comparison (what follows cannot be matched line by line).
    pub fn of(sim: &str, real: &str, bed: &str, scenario: &str, known: &[Known]) -> Outcome {
        let (s, r) = (parse(sim), parse(real));
        let mut explained: Option<(Difference, String)> = None;
        let mut from = 0;
        while let Some(difference) = first_difference(&s, &r, from) {
            let Some(k) = known
                .iter()
                .find(|k| k.explains(bed, scenario, &difference))
            else {
                return Outcome::Unexplained(difference);
            };
            let in_step = timing_only(&s, &r, &difference);
            from = difference.line;
            explained.get_or_insert((difference, k.reason.clone()));
            if !in_step {
                break;
            }
        }
        match explained {
            None => Outcome::Identical,
            Some((difference, reason)) => Outcome::Explained { difference, reason },
        }
    }

    /// Whether the scenario was compared (ran on both).
    pub fn compared(&self) -> bool {
        matches!(
            self,
            Outcome::Identical | Outcome::Explained { .. } | Outcome::Unexplained(_)
        )
    }
}

/// One bed's comparisons, scenario by scenario in the suite's order.
#[derive(Clone, Debug)]
pub struct BedReport {
    /// The real bed's name (`rxe-6.1`).
    pub bed: String,
    /// `(scenario, outcome)`.
    pub rows: Vec<(String, Outcome)>,
}

impl BedReport {
    /// How many scenarios were compared, identical, and explained.
    pub fn counts(&self) -> (usize, usize, usize) {
        let compared = self.rows.iter().filter(|(_, o)| o.compared()).count();
        let identical = self
            .rows
            .iter()
            .filter(|(_, o)| *o == Outcome::Identical)
            .count();
        let explained = self
            .rows
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Explained { .. }))
            .count();
        (compared, identical, explained)
    }

    /// The summary line: identical and explained as counts and rates of the compared ones.
    pub fn summary(&self) -> String {
        let (compared, identical, explained) = self.counts();
        let pct = |n: usize| {
            if compared == 0 {
                0.0
            } else {
                100.0 * n as f64 / compared as f64
            }
        };
        format!(
            "{}: {compared} scenarios compared, {identical} identical ({:.1}%), {explained} \
             explained, {} unexplained; identical or explained {:.1}%",
            self.bed,
            pct(identical),
            compared - identical - explained,
            pct(identical + explained)
        )
    }
}

/// The fidelity table in Markdown: the summary per bed, one row per scenario and one column
/// per bed, and the reasons and differences as numbered notes.
pub fn table(reports: &[BedReport]) -> String {
    let mut notes: Vec<String> = Vec::new();
    let mut note = |text: String| {
        let n = match notes.iter().position(|t| *t == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text);
                notes.len()
            }
        };
        format!("[{n}]")
    };
    let mut out = String::from("## Match rate\n\n");
    for r in reports {
        let _ = writeln!(out, "* {}", r.summary());
    }
    out.push_str(
        "\n## Per scenario\n\n`=` identical; `≈ [n]` differs for the known reason n; \
         `≠ [n]` differs with no known reason (n: where); `ignored [n]` the real bed cannot \
         run it (n: why); `-` not run.\n\n| scenario |",
    );
    for r in reports {
        let _ = write!(out, " {} |", r.bed);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(reports.len()));
    out.push('\n');
    let names: Vec<&String> = reports.first().map_or(Vec::new(), |r| {
        r.rows.iter().map(|(name, _)| name).collect()
    });
    for name in names {
        let _ = write!(out, "| {name} |");
        for r in reports {
            let cell = match r.rows.iter().find(|(n, _)| n == name).map(|(_, o)| o) {
                Some(Outcome::Identical) => "=".to_string(),
                Some(Outcome::Explained { reason, .. }) => format!("≈ {}", note(reason.clone())),
                Some(Outcome::Unexplained(d)) => format!("≠ {}", note(d.to_string())),
                Some(Outcome::IgnoredOnReal(why)) => format!("ignored {}", note(why.clone())),
                Some(Outcome::IgnoredOnSim(why)) => {
                    format!("twin ignores {}", note(why.clone()))
                }
                Some(Outcome::NotRun) | None => "-".to_string(),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out.push_str("\n## Notes\n\n");
    for (i, text) in notes.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", i + 1, text.replace('|', "\\|"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_traces_compare_equal_and_intervals_get_the_twin_window() {
        let sim = "S listen(id1, 1) = ok\nC get_cm_event(ch2, block) = TIMEWAIT_EXIT  +2.200s\n";
        assert_eq!(compare(sim, sim), None);
        // 10% more plus half a second is still the twin's interval; a tenth of a second past
        // it is not.
        let late = sim.replace("2.200s", "2.920s");
        assert_eq!(compare(sim, &late), None);
        let later = sim.replace("2.200s", "3.021s");
        let d = compare(sim, &later).expect("an interval past the window differs");
        assert_eq!(d.line, 2);
        assert_eq!(
            d.real.as_deref(),
            Some("C get_cm_event(ch2, block) = TIMEWAIT_EXIT  +3.021s")
        );
        // A shown interval against none (under 100 ms) on the other side.
        let early = sim.replace("  +2.200s", "");
        assert_eq!(compare(sim, &early).map(|d| d.line), Some(2));
    }

    #[test]
    fn a_known_timing_difference_does_not_hide_a_later_one() {
        let known = Known::parse_list("* | a::b | EBUSY  +2.0 | waits for an ack\n").unwrap();
        let sim = "C destroy_id(id1) = EBUSY\nC ack = ok\nC destroy_id(id1) = ok\n";
        let late = "C destroy_id(id1) = EBUSY  +2.001s\nC ack = ok\nC destroy_id(id1) = ok\n";
        assert!(matches!(
            Outcome::of(sim, late, "rxe-6.1", "a::b", &known),
            Outcome::Explained { ref difference, .. } if difference.line == 1
        ));
        let worse = late.replace("C destroy_id(id1) = ok", "C destroy_id(id1) = EINVAL");
        assert_eq!(
            Outcome::of(sim, &worse, "rxe-6.1", "a::b", &known),
            Outcome::Unexplained(Difference {
                line: 3,
                sim: Some("C destroy_id(id1) = ok".into()),
                real: Some("C destroy_id(id1) = EINVAL".into())
            })
        );
    }

    #[test]
    fn comments_are_skipped_and_a_missing_line_is_a_difference() {
        let sim = "S listen(id1, 1) = ok\n";
        let real = "# failure: boom\nS listen(id1, 1) = ok\nscenario failed\n";
        let d = compare(sim, real).expect("the failure line differs");
        assert_eq!(
            d,
            Difference {
                line: 2,
                sim: None,
                real: Some(FAILED_LINE.to_string())
            }
        );
        assert_eq!(compare(sim, "# a comment\nS listen(id1, 1) = ok\n"), None);
    }

    #[test]
    fn known_differences_match_by_bed_scenario_and_line() {
        let list = "# comment\nsiw-* | ud::* | EINVAL | iWARP has no UD\n\
                    *-6.12 | timewait::x | +0.5 | shorter\n";
        let known = Known::parse_list(list).expect("a valid list");
        assert_eq!(known.len(), 2);
        assert_eq!(known[0].reason, "iWARP has no UD");
        let d = |sim: &str, real: &str| Difference {
            line: 1,
            sim: Some(sim.into()),
            real: Some(real.into()),
        };
        assert!(known[0].explains("siw-6.1", "ud::b", &d("S a = ok", "S a = EINVAL")));
        assert!(!known[0].explains("rxe-6.1", "ud::b", &d("S a = ok", "S a = EINVAL")));
        assert!(!known[0].explains("siw-6.1", "ud::b", &d("S a = ok", "S a = ENOENT")));
        assert!(known[1].explains("rxe-6.12", "timewait::x", &d("a  +0.5s", "a")));
        assert!(!known[1].explains("rxe-6.12", "timewait::y", &d("a  +0.5s", "a")));
        assert_eq!(
            Known::parse_list("rxe-6.1 | connect::a | EINVAL |\n"),
            Err("line 1: expected BEDS | SCENARIOS | SHOWS | REASON, none empty".to_string())
        );
        let sim = "S a = ok\n";
        assert_eq!(
            Outcome::of(sim, "S a = EINVAL\n", "siw-6.1", "ud::b", &known),
            Outcome::Explained {
                difference: d("S a = ok", "S a = EINVAL"),
                reason: "iWARP has no UD".into()
            }
        );
        assert!(matches!(
            Outcome::of(sim, "S a = EINVAL\n", "rxe-6.1", "ud::b", &known),
            Outcome::Unexplained(_)
        ));
    }
}
