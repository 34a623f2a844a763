//! Readiness of the sources an event loop polls together (`DataPath::poll_sources`): CM
//! channels, completion channels and the host's asynchronous events, and what wakes a wait
//! on them.

use cmtwin::verbs::PollSource;
use cmtwin::{Call, CmError, Errno, Result};

use super::wait::WaitOn;
use super::{async_wait_key, comp_channel_wait_key};
use crate::world::{HostKey, World};

impl World {
    /// What wakes a wait on `sources` of host `host`: their CM channels and the wait keys of
    /// their completion channels and asynchronous events, each checked live.
    ///
    /// * EINVAL: no source. EBADF: a channel or completion channel that is not live.
    pub(crate) fn sources_wait_on(
        &self,
        host: HostKey,
        call: Call,
        sources: &[PollSource],
    ) -> Result<WaitOn> {
        if sources.is_empty() {
            return Err(CmError::new(call, Errno::EINVAL, "no source to wait on"));
        }
        let mut on = WaitOn::default();
        for source in sources {
            match *source {
                PollSource::Cm(h) => on.channels.push(self.chan_key(host, call, h)?),
                PollSource::Completion(h) => {
                    let key = self.comp_channel_key(host, call, h)?;
                    on.keys.push(comp_channel_wait_key(key));
                }
                PollSource::Async => on.keys.push(async_wait_key(host)),
            }
        }
        Ok(on)
    }

    /// The sources among `sources` whose fetch would not wait, in the order given.
    ///
    /// * EBADF: a channel or completion channel that is no longer live.
    pub(crate) fn sources_ready(
        &self,
        host: HostKey,
        call: Call,
        sources: &[PollSource],
    ) -> Result<Vec<PollSource>> {
        let mut ready = Vec::new();
        for &source in sources {
            if self.source_ready(host, call, source)? {
                ready.push(source);
            }
        }
        Ok(ready)
    }

    /// Whether `get_cm_event`, `get_cq_event` or `get_async_event` would find something.
    fn source_ready(&self, host: HostKey, call: Call, source: PollSource) -> Result<bool> {
        Ok(match source {
            PollSource::Cm(h) => self.channel_ready(self.chan_key(host, call, h)?),
            PollSource::Completion(h) => {
                let key = self.comp_channel_key(host, call, h)?;
                !self.verbs.channels[&key].events.is_empty()
            }
            PollSource::Async => {
                (self.verbs.async_events.get(&host)).is_some_and(|q| !q.is_empty())
            }
        })
    }
}
