//! The trace: every call with its result, every event, wire message and fault, with virtual time
//! and host, kept as structured records and turned into text only when someone asks for it. The
//! same seed and configuration give a byte-identical text.
//!
//! Recording is free when tracing is off: callers build an [`Entry`] only after
//! [`Trace::is_on`] said yes (see `World::record`), and entries of the hot paths hold plain
//! values (handles, kinds, numbers), never formatted text.

use std::fmt;
use std::net::IpAddr;

use cmtwin::{Call, ChannelHandle, Errno, EventKind, IdHandle};

use crate::cm::messages::MessageHead;
use crate::engine::timeline::SimTime;

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

/// The arguments of a traced call.
#[derive(Clone, Debug)]
pub(crate) enum Args {
    None,
    Id(IdHandle),
    Chan(ChannelHandle),
    /// Anything else, formatted when the record was made (tracing on only).
    Text(String),
}

impl fmt::Display for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Args::None => Ok(()),
            Args::Id(id) => write!(f, "{id}"),
            Args::Chan(ch) => write!(f, "{ch}"),
            Args::Text(t) => f.write_str(t),
        }
    }
}

/// A call's result as the trace shows it.
#[derive(Clone, Debug)]
pub(crate) enum Shown {
    /// Success without a value.
    Zero,
    Errno(Errno),
    Id(IdHandle),
    Chan(ChannelHandle),
    Number(u32),
    Text(String),
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Zero => f.write_str("0"),
            Shown::Errno(e) => write!(f, "{e}"),
            Shown::Id(id) => write!(f, "{id}"),
            Shown::Chan(ch) => write!(f, "{ch}"),
            Shown::Number(n) => write!(f, "{n}"),
            Shown::Text(t) => f.write_str(t),
        }
    }
}

/// A call's successful value, as the trace shows it.
pub(crate) trait TraceValue {
    fn shown(&self) -> Shown;
}

impl TraceValue for () {
    fn shown(&self) -> Shown {
        Shown::Zero
    }
}

impl TraceValue for IdHandle {
    fn shown(&self) -> Shown {
        Shown::Id(*self)
    }
}

impl TraceValue for ChannelHandle {
    fn shown(&self) -> Shown {
        Shown::Chan(*self)
    }
}

impl TraceValue for u32 {
    fn shown(&self) -> Shown {
        Shown::Number(*self)
    }
}

impl TraceValue for Vec<cmtwin::AddrInfo> {
    fn shown(&self) -> Shown {
        Shown::Text(format!("{self:?}"))
    }
}

/// Why a wire message was discarded or noted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WireNote {
    None,
    /// Lost to a targeted fault.
    Targeted,
    NobodyOwns(IpAddr),
    NoSuchRequest,
    EndpointGone,
    /// For an endpoint that is gone; the receiving CM answers it itself.
    AnsweredByCm,
    DeviceRemoved,
}

/// Why an event was discarded.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EventDrop {
    Unaccepted,
    Removed,
    /// librdmacm swallows it after the id's CONNECT_ERROR.
    AfterConnectError,
    /// The id's destroy has begun (the rdma_cm hands out nothing more of it).
    Destroying,
}

/// What a record says, as values.
#[derive(Clone, Debug)]
pub(crate) enum Entry {
    Call {
        call: Call,
        args: Args,
        result: Shown,
    },
    /// `rdma_get_request(listener) -> result`.
    GetRequest {
        listen: IdHandle,
        result: Shown,
    },
    /// A call on a synchronous id returning once its event came (librdmacm's
    /// `ucma_complete`): the call's own result, after the `Call` entry of its command.
    SyncReturn {
        call: Call,
        id: IdHandle,
        kind: EventKind,
        status: i32,
        result: Shown,
    },
    /// A failed `rdma_get_cm_event`.
    GetEventFailed {
        channel: ChannelHandle,
        wait: cmtwin::Wait,
        errno: Errno,
    },
    Queued {
        kind: EventKind,
        status: i32,
        id: IdHandle,
        len: usize,
    },
    Delivered {
        kind: EventKind,
        status: i32,
        id: IdHandle,
        ticket: u64,
    },
    Acked {
        kind: EventKind,
        id: IdHandle,
        ticket: u64,
    },
    EventDropped {
        kind: EventKind,
        id: IdHandle,
        why: EventDrop,
    },
    BacklogFull {
        listener: IdHandle,
    },
    Wire {
        msg: MessageHead,
        note: WireNote,
    },
    /// Anything rare (faults, scheduling), formatted when made (tracing on only).
    Text(String),
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Call { call, args, result } => {
                write!(f, "{}({args}) -> {result}", call.name())
            }
            Entry::GetRequest { listen, result } => {
                write!(f, "rdma_get_request({listen}) -> {result}")
            }
            Entry::SyncReturn {
                call,
                id,
                kind,
                status,
                result,
            } => write!(
                f,
                "{}({id}) returns {result} with {kind} status {status}",
                call.name()
            ),
            Entry::GetEventFailed {
                channel,
                wait,
                errno,
            } => write!(f, "rdma_get_cm_event({channel}, {wait:?}) -> {errno}"),
            Entry::Queued {
                kind,
                status,
                id,
                len,
            } => write!(f, "{kind} status {status} on {id} ({len} bytes)"),
            Entry::Delivered {
                kind,
                status,
                id,
                ticket,
            } => write!(f, "{kind} status {status} on {id} ticket {ticket}"),
            Entry::Acked { kind, id, ticket } => write!(f, "{kind} on {id} ticket {ticket}"),
            Entry::EventDropped { kind, id, why } => match why {
                EventDrop::Unaccepted => write!(f, "{kind} for unaccepted {id} dropped"),
                EventDrop::Removed => write!(f, "{kind} for removed {id} dropped"),
                EventDrop::Destroying => write!(f, "{kind} for {id} being destroyed dropped"),
                EventDrop::AfterConnectError => {
                    write!(
                        f,
                        "{kind} for {id} swallowed by librdmacm after CONNECT_ERROR"
                    )
                }
            },
            Entry::BacklogFull { listener } => {
                write!(f, "request dropped: backlog of {listener} full")
            }
            Entry::Wire { msg, note } => match note {
                WireNote::None => write!(f, "{msg}"),
                WireNote::Targeted => write!(f, "{msg} (targeted fault)"),
                WireNote::NobodyOwns(ip) => write!(f, "{msg}: nobody owns {ip}"),
                WireNote::NoSuchRequest => write!(f, "{msg}: no such request"),
                WireNote::EndpointGone => write!(f, "{msg}: endpoint gone"),
                WireNote::AnsweredByCm => write!(f, "{msg}: endpoint gone, answered by the CM"),
                WireNote::DeviceRemoved => write!(f, "{msg}: device removed"),
            },
            Entry::Text(t) => f.write_str(t),
        }
    }
}

/// One record as kept: values, no text.
#[derive(Clone, Debug)]
struct Record {
    time: SimTime,
    /// The host's index, `None` for fabric-wide records.
    host: Option<u32>,
    kind: TraceKind,
    entry: Entry,
}

/// One record of the trace, as text.
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
#[derive(Debug, Default)]
pub(crate) struct Trace {
    on: bool,
    records: Vec<Record>,
    /// Host names by index, for rendering.
    host_names: Vec<String>,
}

impl Trace {
    /// A trace that keeps records only when `on`.
    pub(crate) fn new(on: bool) -> Self {
        Trace {
            on,
            ..Trace::default()
        }
    }

    /// Whether records are kept (build entries only when this says yes).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// Names host `index` for rendering.
    pub(crate) fn name_host(&mut self, host: crate::topology::HostKey, name: &str) {
        let index = host as usize;
        if self.host_names.len() <= index {
            self.host_names.resize(index + 1, String::new());
        }
        self.host_names[index] = name.to_string();
    }

    /// Appends a record (a no-op when tracing is off).
    pub(crate) fn push(
        &mut self,
        time: SimTime,
        host: Option<crate::topology::HostKey>,
        kind: TraceKind,
        entry: Entry,
    ) {
        if self.on {
            self.records.push(Record {
                time,
                host,
                kind,
                entry,
            });
        }
    }

    fn render(&self, r: &Record) -> TraceRecord {
        TraceRecord {
            time: r.time,
            host: r
                .host
                .map_or("fabric", |h| self.host_names[h as usize].as_str())
                .to_string(),
            kind: r.kind,
            text: r.entry.to_string(),
        }
    }

    /// Every record, as text records.
    pub(crate) fn records(&self) -> Vec<TraceRecord> {
        self.records.iter().map(|r| self.render(r)).collect()
    }

    /// The trace as text, one record a line.
    pub(crate) fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for r in &self.records {
            let host = r
                .host
                .map_or("fabric", |h| self.host_names[h as usize].as_str());
            // Infallible: writing to a String.
            let _ = writeln!(out, "{} {:<8} {:<7} {}", r.time, host, r.kind, r.entry);
        }
        out
    }
}
