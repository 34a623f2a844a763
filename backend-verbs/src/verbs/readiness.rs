//! `DataPath::poll_sources`: one `poll(2)` on the fds of CM channels, completion channels and
//! the devices' asynchronous events together.

use std::os::fd::RawFd;
use std::sync::Arc;

use cmtwin::verbs::PollSource;
use cmtwin::{Call, Result, Wait};

use crate::deadline::Deadline;
use crate::{c_err, err, ffi, VerbsBackend};

/// How long a wait that includes the asynchronous events polls before it looks again for
/// devices this backend has come to use meanwhile (as `get_async_event` does).
const ASYNC_RELOOK_MS: i32 = 1000;

/// What one source adds to a poll: the objects kept alive while their fds are polled, and
/// the fds.
struct Watched {
    /// The CM channel or completion channel polled (dropped after the poll).
    _hold: Option<Arc<dyn Send + Sync>>,
    fds: Vec<RawFd>,
}

impl VerbsBackend {
    pub(crate) fn poll_sources_impl(
        &self,
        sources: &[PollSource],
        wait: Wait,
    ) -> Result<Vec<PollSource>> {
        let call = Call::Poll;
        if sources.is_empty() {
            return Err(err(call, libc::EINVAL, "no source to wait on"));
        }
        let wants_async = sources.contains(&PollSource::Async);
        let mut deadline = Deadline::of(wait);
        loop {
            let watched = sources
                .iter()
                .map(|&s| self.watch(call, s))
                .collect::<Result<Vec<Watched>>>()?;
            let async_pending = wants_async && self.async_pending(call)?;
            let timeout_ms = match deadline.poll_timeout() {
                _ if async_pending => 0,
                None => 0,
                Some(-1) if wants_async => ASYNC_RELOOK_MS,
                Some(ms) if wants_async => ms.min(ASYNC_RELOOK_MS),
                Some(ms) => ms,
            };
            let fds: Vec<RawFd> = watched.iter().flat_map(|w| w.fds.iter().copied()).collect();
            let readable = ffi::poll_which(&fds, timeout_ms)
                .map_err(|e| err(call, e, "poll on the sources' fds failed"))?;
            // Asynchronous events are ready only once routed to this backend's inbox (a
            // device's fd is shared with every backend value of the process).
            let async_ready = wants_async && self.async_pending(call)?;
            let mut at = 0;
            let mut ready = Vec::new();
            for (&source, w) in sources.iter().zip(&watched) {
                let any = readable[at..at + w.fds.len()].iter().any(|&r| r);
                at += w.fds.len();
                let is_ready = match source {
                    PollSource::Async => async_ready,
                    _ => any,
                };
                if is_ready {
                    ready.push(source);
                }
            }
            if !ready.is_empty() || deadline.poll_timeout().is_none() {
                return Ok(ready);
            }
        }
    }

    /// The fds that become readable when `source` has something to fetch.
    fn watch(&self, call: Call, source: PollSource) -> Result<Watched> {
        Ok(match source {
            PollSource::Cm(h) => {
                let chan = self.channel_obj(call, h)?;
                let fds = vec![chan.raw.fd(), chan.wake.fd()];
                Watched {
                    _hold: Some(chan),
                    fds,
                }
            }
            PollSource::Completion(h) => {
                let chan = self.comp_channel(call, h)?;
                let fds = vec![chan.raw.fd()];
                Watched {
                    _hold: Some(chan),
                    fds,
                }
            }
            PollSource::Async => {
                let inbox = &self.shared.inbox;
                let wake = inbox.wake.as_ref().map_err(|e| c_err(call, *e))?;
                let mut fds = vec![wake.fd()];
                for ctx in self.contexts() {
                    fds.push(ctx.async_fd().map_err(|e| c_err(call, e))?);
                }
                Watched { _hold: None, fds }
            }
        })
    }

    /// Whether this backend has an asynchronous event to fetch, after reading what its
    /// devices have queued.
    fn async_pending(&self, call: Call) -> Result<bool> {
        for ctx in self.contexts() {
            super::async_events::pump(ctx).map_err(|e| c_err(call, e))?;
        }
        Ok(!self.shared.inbox.is_empty())
    }
}
