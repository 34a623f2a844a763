//! What an event loop waits on at once: CM event channels, completion channels and the
//! devices' asynchronous events, as a C program polls their file descriptors together.

use crate::{ChannelHandle, CompChannelHandle};

/// One source [`DataPath::poll_sources`](super::DataPath::poll_sources) watches: the file
/// descriptor a C event loop would hand to `poll(2)` or `epoll`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PollSource {
    /// A CM event channel (`channel->fd`): ready when `get_cm_event` has an event to fetch.
    Cm(ChannelHandle),
    /// A completion channel (`comp_channel->fd`): ready when `get_cq_event` has a CQ event
    /// to fetch.
    Completion(CompChannelHandle),
    /// The asynchronous events of the backend's devices (each `context->async_fd`): ready
    /// when `get_async_event` has one.
    Async,
}

impl std::fmt::Display for PollSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PollSource::Cm(c) => write!(f, "{c}"),
            PollSource::Completion(c) => write!(f, "{c}"),
            PollSource::Async => f.write_str("async"),
        }
    }
}

/// `[ch#1, cc#2]`: sources as a trace or an error message lists them.
pub fn list_sources(sources: &[PollSource]) -> String {
    let names: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    format!("[{}]", names.join(", "))
}
