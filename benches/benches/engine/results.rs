//! The figures of one run of the engine report, as records `(measure, n, value, unit)` under a
//! label, and their CSV form: `results/<label>.csv`, one file per label, so that runs of
//! different engines sit side by side.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// One figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// What was measured (e.g. `lifecycles_per_cpu_s`).
    pub measure: String,
    /// Connections in flight, or blocked processes for switches.
    pub n: u64,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: String,
}

/// All figures of one labelled run.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// Names the run (e.g. `before`, `after`).
    pub label: String,
    /// The day it ran, YYYY-MM-DD (UTC).
    pub date: String,
    /// Its figures, in the order measured.
    pub records: Vec<Record>,
}

const HEADER: &str = "label,date,measure,n,value,unit";

impl Results {
    /// An empty run.
    pub fn new(label: &str, date: &str) -> Self {
        Results {
            label: label.to_string(),
            date: date.to_string(),
            records: Vec::new(),
        }
    }

    /// Adds a figure.
    pub fn add(&mut self, measure: &str, n: u64, value: f64, unit: &str) {
        self.records.push(Record {
            measure: measure.to_string(),
            n,
            value,
            unit: unit.to_string(),
        });
    }

    /// The figure `measure` at `n`, if measured.
    pub fn get(&self, measure: &str, n: u64) -> Option<f64> {
        self.records
            .iter()
            .find(|r| r.measure == measure && r.n == n)
            .map(|r| r.value)
    }

    /// The `(n, value)` points of `measure`, in the order measured.
    pub fn series(&self, measure: &str) -> Vec<(u64, f64)> {
        self.records
            .iter()
            .filter(|r| r.measure == measure)
            .map(|r| (r.n, r.value))
            .collect()
    }

    /// The CSV text.
    pub fn to_csv(&self) -> String {
        let mut out = format!("{HEADER}\n");
        for r in &self.records {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{}",
                self.label, self.date, r.measure, r.n, r.value, r.unit
            );
        }
        out
    }

    /// Parses the CSV text written by `to_csv`.
    pub fn from_csv(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!("the first line is not {HEADER:?}"));
        }
        let mut results = Results::default();
        for (i, line) in lines.enumerate() {
            let f: Vec<&str> = line.split(',').collect();
            let [label, date, measure, n, value, unit] = f[..] else {
                return Err(format!("line {}: expected 6 fields: {line:?}", i + 2));
            };
            let bad = |what: &str| format!("line {}: bad {what} in {line:?}", i + 2);
            results.label = label.to_string();
            results.date = date.to_string();
            results.add(
                measure,
                n.parse().map_err(|_| bad("n"))?,
                value.parse().map_err(|_| bad("value"))?,
                unit,
            );
        }
        Ok(results)
    }

    /// Every run saved in `dir` (`*.csv`), oldest file first (then by label): a run made
    /// after another gets the column and colour after it.
    pub fn load_all(dir: &Path) -> Result<Vec<Results>, String> {
        let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut runs = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().is_none_or(|e| e != "csv") {
                continue;
            }
            let modified = fs::metadata(&path)
                .and_then(|m| m.modified())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let run = Results::from_csv(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            runs.push((modified, run));
        }
        runs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.label.cmp(&b.1.label)));
        Ok(runs.into_iter().map(|(_, run)| run).collect())
    }
}

/// Whether `label` can name a results file: letters, digits, `-`, `_`, `.`.
pub fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && !label.starts_with('.')
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date `days` days after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
