//! Trace pictures: a trace rendered as an SVG sequence diagram. Hosts are lifelines (with a
//! `fabric` lifeline for fabric-wide records), CM messages are arrows from the sending to the
//! receiving host labelled with their kind, lost messages end in a cross, discarded ones are
//! marked, calls and queued events are notes on their host's lifeline, and faults are red
//! notes. One row per drawn record, top to bottom in trace order, with its virtual time on the
//! left. Queue records are drawn; deliveries, acknowledgements, scheduling and polls that found
//! nothing (EAGAIN) are left out.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::fabric::Fabric;
use crate::trace::{TraceKind, TraceRecord};

const ROW: usize = 20;
const COL: usize = 260;
const LEFT: usize = 120;
const TOP: usize = 50;

/// Escapes text for XML content and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The parts of a message head (`"REQ ep5 -> 10.0.0.1"`, `"REJ ep0 -> ep5 reason 28"`).
struct Head<'a> {
    /// The head itself, without what a record appends after it.
    text: &'a str,
    kind: &'a str,
    to: &'a str,
}

fn head_of(text: &str) -> Option<Head<'_>> {
    let mut words = text.split(' ');
    let kind = words.next()?;
    let _from = words.next()?;
    (words.next()? == "->").then_some(())?;
    let to = words.next()?.trim_end_matches(':');
    // The head ends after its destination, or after "reason N" / "status N".
    let mut end = text.find(" -> ")? + 4 + to.len();
    let rest = &text[end..];
    for code in [" reason ", " status "] {
        if let Some(r) = rest.strip_prefix(code) {
            let digits = r
                .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                .unwrap_or(r.len());
            end += code.len() + digits;
        }
    }
    Some(Head {
        text: &text[..end],
        kind,
        to,
    })
}

/// A message's label: its kind, with its reject reason or SIDR status.
fn label_of(head: &Head<'_>) -> String {
    match head
        .text
        .split_once(" reason ")
        .or(head.text.split_once(" status "))
    {
        Some((_, code)) => format!("{} ({code})", head.kind),
        None => head.kind.to_string(),
    }
}

/// Rendering state: lifelines, rows, the open sends and what was learnt of addresses.
struct Canvas {
    columns: Vec<String>,
    rows: usize,
    body: String,
    /// Sends not yet received: (head text, host column, row).
    in_flight: Vec<(String, usize, usize)>,
    /// Host column of endpoints (`ep5`) and addresses, learnt from sends and receipts.
    places: BTreeMap<String, usize>,
}

impl Canvas {
    fn column(&mut self, host: &str) -> usize {
        if let Some(i) = self.columns.iter().position(|h| h == host) {
            return i;
        }
        self.columns.push(host.to_string());
        self.columns.len() - 1
    }

    fn x(column: usize) -> usize {
        LEFT + COL / 2 + column * COL
    }

    fn y(row: usize) -> usize {
        TOP + row * ROW + ROW / 2
    }

    fn next_row(&mut self, r: &TraceRecord) -> usize {
        let row = self.rows;
        self.rows += 1;
        let _ = writeln!(
            self.body,
            r#"<text class="time" x="4" y="{}">{}</text>"#,
            Canvas::y(row) + 4,
            escape(&r.time.to_string())
        );
        row
    }

    fn note(&mut self, class: &str, column: usize, row: usize, text: &str) {
        let _ = writeln!(
            self.body,
            r#"<text class="{class}" x="{}" y="{}">{}</text>"#,
            Canvas::x(column) + 6,
            Canvas::y(row) + 4,
            escape(text)
        );
    }

    fn arrow(&mut self, class: &str, head: &Head<'_>, from: (usize, usize), to: (usize, usize)) {
        let (x1, y1) = (Canvas::x(from.0), Canvas::y(from.1));
        let (x2, y2) = (Canvas::x(to.0), Canvas::y(to.1));
        let (lx, ly) = ((x1 + x2) / 2, (y1 + y2) / 2);
        let _ = writeln!(
            self.body,
            concat!(
                r#"<g class="{}" data-kind="{}" data-from="{}" data-to="{}">"#,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" marker-end="url(#head)"/>"#,
                r#"<text x="{}" y="{}">{}</text><title>{}</title></g>"#
            ),
            class,
            escape(head.kind),
            escape(&self.columns[from.0]),
            escape(&self.columns[to.0]),
            x1,
            y1,
            x2,
            y2,
            lx,
            ly - 3,
            escape(&label_of(head)),
            escape(head.text)
        );
    }

    /// A message that never arrived: a short arrow towards its destination ending in a cross.
    fn lost(&mut self, head: &Head<'_>, column: usize, row: usize, class: &str) {
        let dest = self.places.get(head.to).copied();
        let x1 = Canvas::x(column);
        let toward_left = dest.is_some_and(|d| d < column);
        let x2 = if toward_left {
            x1 - COL / 3
        } else {
            x1 + COL / 3
        };
        let y = Canvas::y(row);
        let to = dest.map_or("?", |d| self.columns[d].as_str()).to_string();
        let _ = writeln!(
            self.body,
            concat!(
                r#"<g class="{}" data-kind="{}" data-from="{}" data-to="{}">"#,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
                r#"<path class="cross" d="M{} {} l8 8 M{} {} l-8 8"/>"#,
                r#"<text x="{}" y="{}">{} lost</text><title>{}</title></g>"#
            ),
            class,
            escape(head.kind),
            escape(&self.columns[column]),
            escape(&to),
            x1,
            y,
            x2,
            y,
            x2 - 4,
            y - 4,
            x2 + 4,
            y - 4,
            x1.min(x2) + 4,
            y - 4,
            escape(&label_of(head)),
            escape(head.text)
        );
    }

    fn draw(&mut self, r: &TraceRecord) {
        let column = self.column(&r.host);
        match r.kind {
            // Unproductive polls say nothing about the protocol.
            TraceKind::Call
                if r.text.starts_with("rdma_get_cm_event") && r.text.ends_with("EAGAIN (11)") => {}
            TraceKind::Call => {
                let row = self.next_row(r);
                self.note("call", column, row, &r.text);
            }
            TraceKind::Queue => {
                let row = self.next_row(r);
                self.note("event", column, row, &r.text);
            }
            TraceKind::Fault => {
                let row = self.next_row(r);
                self.note("fault", column, row, &format!("⚡ {}", r.text));
            }
            TraceKind::Send => match head_of(&r.text) {
                Some(head) => {
                    let row = self.next_row(r);
                    if let Some(from) = r.text.split(' ').nth(1) {
                        self.places.insert(from.to_string(), column);
                    }
                    self.in_flight.push((head.text.to_string(), column, row));
                }
                None => self.other(r, column),
            },
            TraceKind::Recv | TraceKind::Drop => match head_of(&r.text) {
                Some(head) => self.arrival(r, column, &head),
                None => self.other(r, column),
            },
            TraceKind::Loss => match head_of(&r.text) {
                Some(head) => {
                    let row = self.next_row(r);
                    self.lost(&head, column, row, "message lost");
                }
                None => self.other(r, column),
            },
            TraceKind::Deliver | TraceKind::Ack | TraceKind::Sched => {}
        }
    }

    /// A message received or discarded at `column`: the arrow from its send.
    fn arrival(&mut self, r: &TraceRecord, column: usize, head: &Head<'_>) {
        let row = self.next_row(r);
        self.places.insert(head.to.to_string(), column);
        let sent = self.in_flight.iter().position(|(h, _, _)| h == head.text);
        let class = if r.kind == TraceKind::Drop {
            "message dropped"
        } else {
            "message"
        };
        match sent {
            Some(i) => {
                let (_, from_col, from_row) = self.in_flight.remove(i);
                self.arrow(class, head, (from_col, from_row), (column, row));
            }
            None => self.arrow(class, head, (column, row), (column, row)),
        }
        if r.kind == TraceKind::Drop {
            self.note("fault", column, row, &r.text[head.text.len()..]);
        }
    }

    fn other(&mut self, r: &TraceRecord, column: usize) {
        let row = self.next_row(r);
        self.note("call", column, row, &r.text);
    }
}

/// Renders `records` as an SVG sequence diagram (a complete, standalone SVG document).
pub fn sequence_diagram(records: &[TraceRecord]) -> String {
    let mut canvas = Canvas {
        columns: Vec::new(),
        rows: 0,
        body: String::new(),
        in_flight: Vec::new(),
        places: BTreeMap::new(),
    };
    for r in records {
        canvas.draw(r);
    }
    // Messages still on the wire when the trace ends.
    for (text, column, row) in std::mem::take(&mut canvas.in_flight) {
        if let Some(head) = head_of(&text) {
            canvas.lost(&head, column, row, "message in-flight");
        }
    }
    // Room for the notes of the last lifeline.
    let width = LEFT + canvas.columns.len().max(1) * COL + 2 * COL;
    let height = TOP + canvas.rows * ROW + ROW;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">"#
    );
    svg.push_str(concat!(
        "<style>.call{fill:#222}.event{fill:#1a5fb4}.fault{fill:#c01c28}",
        ".time{fill:#777}.lifeline{stroke:#bbb;stroke-dasharray:4 3}",
        ".message line{stroke:#333}.message text{fill:#333;text-anchor:middle}",
        ".lost line,.in-flight line{stroke:#c01c28;stroke-dasharray:3 2}",
        ".lost text,.in-flight text{fill:#c01c28}.cross{stroke:#c01c28;stroke-width:2}",
        ".dropped line{stroke:#c01c28}.host{font-weight:bold;text-anchor:middle}</style>\n",
        r#"<defs><marker id="head" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto"><path d="M0 0 L8 4 L0 8 z"/></marker></defs>"#,
        "\n"
    ));
    for (i, host) in canvas.columns.iter().enumerate() {
        let x = Canvas::x(i);
        let _ = writeln!(
            svg,
            r#"<text class="host" x="{x}" y="{}">{}</text><line class="lifeline" x1="{x}" y1="{TOP}" x2="{x}" y2="{height}"/>"#,
            TOP - 16,
            escape(host)
        );
    }
    svg.push_str(&canvas.body);
    svg.push_str("</svg>\n");
    svg
}

impl Fabric {
    /// The trace so far as an SVG sequence diagram (see [`sequence_diagram`]).
    pub fn trace_svg(&self) -> String {
        sequence_diagram(&self.trace())
    }

    /// Writes [`Fabric::trace_svg`] to `path`.
    pub fn write_trace_svg(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.trace_svg())
    }
}
