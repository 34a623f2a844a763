//! The trace: every call with its result, every event, wire message and fault, with virtual time
//! and host. The same seed and configuration give a byte-identical trace.

use std::fmt;

use crate::time::SimTime;

/// What a trace record is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// An application call and its result.
    Call,
    /// An event queued by the kernel on a channel.
    Queue,
    /// An event handed to the application by `get_cm_event`.
    Deliver,
    /// An event acknowledged.
    Ack,
    /// A CM message put on the wire.
    Send,
    /// A CM message arriving.
    Recv,
    /// A CM message lost on the wire.
    Loss,
    /// An event or message discarded, as the kernel discards it.
    Drop,
    /// A fault injected by the fabric.
    Fault,
    /// Scheduling of simulated processes.
    Sched,
}

impl fmt::Display for TraceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            TraceKind::Call => "call",
            TraceKind::Queue => "queue",
            TraceKind::Deliver => "deliver",
            TraceKind::Ack => "ack",
            TraceKind::Send => "send",
            TraceKind::Recv => "recv",
            TraceKind::Loss => "loss",
            TraceKind::Drop => "drop",
            TraceKind::Fault => "fault",
            TraceKind::Sched => "sched",
        };
        f.write_str(s)
    }
}

/// One record of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Virtual time.
    pub time: SimTime,
    /// The host's name (`fabric` for fabric-wide records).
    pub host: String,
    /// What the record is about.
    pub kind: TraceKind,
    /// The details.
    pub text: String,
}

impl fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:<8} {:<7} {}",
            self.time, self.host, self.kind, self.text
        )
    }
}

/// The records of a run, in order.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    records: Vec<TraceRecord>,
}

impl Trace {
    pub(crate) fn push(&mut self, time: SimTime, host: String, kind: TraceKind, text: String) {
        self.records.push(TraceRecord {
            time,
            host,
            kind,
            text,
        });
    }

    /// All records.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The trace as text, one record a line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for r in &self.records {
            out.push_str(&r.to_string());
            out.push('\n');
        }
        out
    }
}
