//! The plot of the report: CPU cost of one lifecycle (µs, log scale) against connections in
//! flight (log scale), one solid line per labelled cmtwin run and a dashed one for turmoil in the
//! same run, as a self-contained SVG.

use std::fmt::Write as _;

use crate::results::Results;

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 460.0;
/// Plot area: left, top, right, bottom.
const AREA: (f64, f64, f64, f64) = (80.0, 40.0, 560.0, 400.0);
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

/// The target cost of a lifecycle at 1k in flight (200k lifecycles per CPU-second), in µs.
const TARGET_US: f64 = 5.0;

/// The measures drawn, with their line style and legend suffix.
const LINES: [(&str, &str, &str); 2] = [
    ("cpu_us_per_lifecycle", "", "cmtwin"),
    ("turmoil_cpu_us_per_connection", "6 4", "turmoil"),
];

/// A log10 axis spanning whole decades around the data.
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    fn around(values: impl Iterator<Item = f64>) -> Self {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| *v > 0.0) {
            lo = lo.min(v.log10());
            hi = hi.max(v.log10());
        }
        if !lo.is_finite() {
            return LogAxis { lo: 0.0, hi: 1.0 };
        }
        let (lo, hi) = (lo.floor(), hi.ceil());
        LogAxis {
            lo,
            hi: if hi > lo { hi } else { lo + 1.0 },
        }
    }

    /// Where `v` falls between `from` and `to` (pixels).
    fn place(&self, v: f64, from: f64, to: f64) -> f64 {
        from + (v.log10() - self.lo) / (self.hi - self.lo) * (to - from)
    }

    fn decades(&self) -> impl Iterator<Item = f64> {
        (self.lo as i32..=self.hi as i32).map(|e| 10f64.powi(e))
    }
}

/// A number for a tick label: 1k, 10k, 100k, 0.1, 10...
fn tick_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{}k", v / 1000.0)
    } else {
        format!("{v}")
    }
}

/// The SVG text of the plot of `runs`.
pub fn lifecycle_cost_svg(runs: &[Results]) -> String {
    let points = |r: &Results, m: &str| r.series(m);
    let all: Vec<(u64, f64)> = runs
        .iter()
        .flat_map(|r| LINES.iter().flat_map(move |(m, _, _)| points(r, m)))
        .collect();
    let x = LogAxis::around(all.iter().map(|p| p.0 as f64));
    let y = LogAxis::around(all.iter().map(|p| p.1).chain([TARGET_US]));
    let (l, t, r, b) = AREA;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="14">CPU per lifecycle against connections in flight (single thread, tracing off)</text>"#,
        WIDTH / 2.0
    );
    draw_grid(&mut svg, &x, &y);
    let ty = y.place(TARGET_US, b, t);
    let _ = writeln!(
        svg,
        r##"<line x1="{l}" y1="{ty:.1}" x2="{r}" y2="{ty:.1}" stroke="#888" stroke-dasharray="2 3"/><text x="{}" y="{:.1}" text-anchor="end" fill="#555">target at 1k: {TARGET_US} µs (200k/s)</text>"##,
        r - 6.0,
        ty - 6.0
    );
    for (i, run) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        for (k, (measure, dash, what)) in LINES.iter().enumerate() {
            let pts: Vec<(f64, f64)> = points(run, measure)
                .into_iter()
                .filter(|p| p.0 > 0 && p.1 > 0.0)
                .map(|(n, v)| (x.place(n as f64, l, r), y.place(v, b, t)))
                .collect();
            let legend = format!("{what}, run {} ({})", run.label, run.date);
            draw_line(&mut svg, &pts, colour, dash, &legend, 2 * i + k);
        }
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">connections in flight</text>"#,
        (l + r) / 2.0,
        b + 38.0
    );
    let _ = writeln!(
        svg,
        r#"<text x="22" y="{}" text-anchor="middle" transform="rotate(-90 22 {})">CPU µs per lifecycle (log)</text>"#,
        (t + b) / 2.0,
        (t + b) / 2.0
    );
    svg.push_str("</svg>\n");
    svg
}

fn draw_grid(svg: &mut String, x: &LogAxis, y: &LogAxis) {
    let (l, t, r, b) = AREA;
    let _ = writeln!(
        svg,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        r - l,
        b - t
    );
    for v in x.decades() {
        let px = x.place(v, l, r);
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{t}" x2="{px:.1}" y2="{b}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            b + 18.0,
            tick_label(v)
        );
    }
    for v in y.decades() {
        let py = y.place(v, b, t);
        let _ = writeln!(
            svg,
            r##"<line x1="{l}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            l - 6.0,
            py + 4.0,
            tick_label(v)
        );
    }
}

/// One series: its polyline, its points and its legend entry (slot `slot` of the legend).
fn draw_line(
    svg: &mut String,
    pts: &[(f64, f64)],
    colour: &str,
    dash: &str,
    legend: &str,
    slot: usize,
) {
    if pts.is_empty() {
        return;
    }
    let path: Vec<String> = pts
        .iter()
        .map(|(px, py)| format!("{px:.1},{py:.1}"))
        .collect();
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
        path.join(" ")
    );
    for (px, py) in pts {
        let _ = writeln!(
            svg,
            r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{colour}"/>"#
        );
    }
    let (lx, ly) = (AREA.2 + 16.0, AREA.1 + 14.0 + 20.0 * slot as f64);
    let _ = writeln!(
        svg,
        r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}">{}</text>"#,
        lx + 24.0,
        lx + 30.0,
        ly + 4.0,
        escape(legend)
    );
}

/// Escapes text for SVG.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
