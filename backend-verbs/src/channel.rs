//! Event channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event` (with the three kinds of wait) and `rdma_ack_cm_event`.
//!
//! The channel fd is kept in O_NONBLOCK mode; every wait is a `poll` on the channel fd and the
//! channel's eventfd (injected events), followed by a non-blocking fetch. Because librdmacm may
//! discard an event it fetched (§5.4), a readable fd can still yield nothing: the loop then
//! waits again (until the deadline for timed waits).

use std::os::fd::RawFd;
use std::sync::Arc;

use cmtwin::{Call, ChannelHandle, CmEvent, EventKind, PortSpace, Result, Wait};

use crate::deadline::Deadline;
use crate::events::event_info;
use crate::ffi::{self, EventFd, RawChannel, RawEvent, RawId, QPT_UD};
use crate::registry::{lock, AddrinfoState, ChannelObj, IdState, TakeError};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn create_event_channel_impl(&self) -> Result<ChannelHandle> {
        let raw = RawChannel::create().map_err(|e| match e {
            libc::ENODEV => err(
                Call::CreateEventChannel,
                e,
                "no RDMA device was found: librdmacm needs at least one RDMA device \
                 (hardware, or Soft-RoCE: `rdma link add rxe0 type rxe netdev <if>`)",
            ),
            e => c_err(Call::CreateEventChannel, e),
        })?;
        let wake = match EventFd::new() {
            Ok(w) => w,
            Err(e) => {
                raw.destroy();
                return Err(err(Call::CreateEventChannel, e, "eventfd failed"));
            }
        };
        self.reg().insert_channel(raw, wake).map_err(|raw| {
            raw.destroy();
            keys_exhausted(Call::CreateEventChannel)
        })
    }

    pub(crate) fn destroy_event_channel_impl(&self, channel: ChannelHandle) -> Result<()> {
        let call = Call::DestroyEventChannel;
        let obj = {
            let mut reg = self.reg();
            let users: Vec<String> = reg
                .ids()
                .filter(|o| {
                    lock(&o.state)
                        .channel
                        .as_ref()
                        .is_some_and(|c| c.handle == channel)
                })
                .map(|o| o.handle.to_string())
                .collect();
            if !users.is_empty() {
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!(
                        "{channel} still has ids ({}); destroy them first",
                        users.join(", ")
                    ),
                ));
            }
            match reg.take_channel(channel) {
                Ok(obj) => obj,
                Err(TakeError::Unknown) => {
                    drop(reg);
                    return self.channel_obj(call, channel).map(|_| ());
                }
                Err(TakeError::InUse(n)) => {
                    return Err(err(
                        call,
                        libc::EBUSY,
                        format!(
                        "{channel} is in use by {n} other call(s) (e.g. a waiting get_cm_event)"
                    ),
                    ))
                }
            }
        };
        obj.raw.destroy();
        Ok(())
    }

    /// The live channels `channels` (EBADF for any other; EINVAL for none at all).
    fn channel_objs(&self, call: Call, channels: &[ChannelHandle]) -> Result<Vec<Arc<ChannelObj>>> {
        if channels.is_empty() {
            return Err(err(call, libc::EINVAL, "no channel to wait on"));
        }
        channels
            .iter()
            .map(|&h| self.channel_obj(call, h))
            .collect()
    }

    /// `rdma_get_cm_event` on the first of `channels` that has an event, waiting as `wait`
    /// says on all of them at once (one `poll` on every channel fd and eventfd).
    pub(crate) fn get_cm_event_any_impl(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)> {
        let call = Call::GetCmEvent;
        let chans = self.channel_objs(call, channels)?;
        let mut deadline = Deadline::of(wait);
        loop {
            for chan in &chans {
                if let Some(ev) = self.try_fetch(chan)? {
                    return Ok((chan.handle, ev.with_release(self.release_path())));
                }
            }
            let timeout_ms = match deadline.poll_timeout() {
                Some(ms) => ms,
                None => {
                    let (errno, why) = match wait {
                        Wait::NonBlocking => (libc::EAGAIN, "no event is queued"),
                        _ => (libc::ETIMEDOUT, "no event arrived in time"),
                    };
                    return Err(err(call, errno, format!("{why} on {}", list(channels))));
                }
            };
            ffi::poll_readable(&fds_of(&chans), timeout_ms)
                .map_err(|e| err(call, e, "poll on the channel fds failed"))?;
        }
    }

    /// Which of `channels` are readable (the kernel queued an event, which librdmacm may still
    /// discard, or the backend injected one), after waiting as `wait` says.
    pub(crate) fn poll_channels_impl(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<Vec<ChannelHandle>> {
        let call = Call::Poll;
        let chans = self.channel_objs(call, channels)?;
        let mut deadline = Deadline::of(wait);
        loop {
            let timeout_ms = deadline.poll_timeout().unwrap_or(0);
            let readable = ffi::poll_which(&fds_of(&chans), timeout_ms)
                .map_err(|e| err(call, e, "poll on the channel fds failed"))?;
            let ready: Vec<ChannelHandle> = (chans.iter().zip(readable.chunks(2)))
                .filter(|(_, r)| r.iter().any(|&x| x))
                .map(|(c, _)| c.handle)
                .collect();
            if !ready.is_empty() || deadline.poll_timeout().is_none() {
                return Ok(ready);
            }
        }
    }

    /// A non-blocking fetch from `chan`: a kernel event (skipping those librdmacm or the
    /// backend discards), else an injected one, else `None`.
    fn try_fetch(&self, chan: &Arc<ChannelObj>) -> Result<Option<CmEvent>> {
        let call = Call::GetCmEvent;
        loop {
            let fetched = {
                let _fetch = lock(&chan.fetch);
                chan.raw.get_event()
            };
            match fetched {
                Ok(raw) => {
                    if let Some(ev) = self.translate(chan, raw)? {
                        return Ok(Some(ev));
                    }
                }
                Err(libc::EAGAIN) => break,
                Err(libc::EINTR) => {}
                Err(e) => return Err(c_err(call, e)),
            }
        }
        while let Some(inj) = chan.pop_injected() {
            let mut reg = self.reg();
            // Injected events of destroyed ids are purged at destroy; check anyway.
            if reg.id(inj.id).is_none() {
                continue;
            }
            let ticket = reg
                .new_ticket(inj.id, inj.info.kind)
                .map_err(|_| keys_exhausted(call))?;
            return Ok(Some(CmEvent::new(inj.info, ticket)));
        }
        Ok(None)
    }

    /// Registers a fetched kernel event and acks it in C. `None` if the event is for an id the
    /// application no longer has (it is being destroyed): such events are dropped. ENFILE if
    /// the process ran out of handle values (the event is dropped; a request is refused).
    fn translate(&self, chan: &Arc<ChannelObj>, mut raw: RawEvent) -> Result<Option<CmEvent>> {
        let snap = raw.snapshot();
        let kind = EventKind::from_raw(snap.kind);
        let mut reg = self.reg();
        let (id, listen_id, ud, ps) = if kind == EventKind::ConnectRequest {
            let child = raw.take_child();
            match (reg.id_by_addr(snap.listen_id), child) {
                (Some(listener), Some(child)) => {
                    let ps = reg
                        .id(listener)
                        .map(|l| lock(&l.state).port_space)
                        .unwrap_or(PortSpace(child.port_space()));
                    let ud = child.qp_type() == QPT_UD;
                    let mut state = IdState::new(Some(Arc::clone(chan)), ps);
                    state.unaccepted = true;
                    match reg.insert_id(child, state) {
                        Ok(obj) => (obj.handle, Some(listener), ud, ps),
                        Err(child) => {
                            drop(reg);
                            drop_event(raw, Some(child));
                            return Err(keys_exhausted(Call::GetCmEvent));
                        }
                    }
                }
                // The listener is being destroyed: refuse the request (the peer gets
                // REJECTED 28) and drop the event.
                (None, child) => {
                    drop(reg);
                    drop_event(raw, child);
                    return Ok(None);
                }
                (Some(_), None) => {
                    drop(reg);
                    drop_event(raw, None);
                    return Ok(None);
                }
            }
        } else {
            match reg.id_by_addr(snap.id).and_then(|h| reg.id(h)) {
                Some(obj) => {
                    let h = obj.handle;
                    let ud = obj.raw.qp_type() == QPT_UD;
                    match kind {
                        EventKind::AddrinfoError => lock(&obj.state).addrinfo = AddrinfoState::Idle,
                        EventKind::DeviceRemoval => lock(&obj.state).device_removed = true,
                        _ => {}
                    }
                    (h, None, ud, PortSpace(obj.raw.port_space()))
                }
                None => {
                    drop(reg);
                    drop_event(raw, None);
                    return Ok(None);
                }
            }
        };
        let owner = listen_id.unwrap_or(id);
        let Ok(ticket) = reg.new_ticket(owner, kind) else {
            // A request's new id goes again: the application never saw it.
            let child = listen_id.and_then(|_| reg.take_id(id).ok()).map(|o| o.raw);
            drop(reg);
            drop_event(raw, child);
            return Err(keys_exhausted(Call::GetCmEvent));
        };
        drop(reg);
        raw.ack();
        Ok(Some(CmEvent::new(
            event_info(&snap, id, ps, listen_id, ud),
            ticket,
        )))
    }

    pub(crate) fn ack_cm_event_impl(&self, mut event: CmEvent) -> Result<()> {
        let ticket = event.ticket();
        let acked = self.reg().ack(ticket).is_some();
        if acked {
            self.notify_acked();
            event.disarm();
            return Ok(());
        }
        // Refused: the event is dropped at the end of this call, which releases it at the
        // backend that issued it, if that is another one.
        {
            Err(err(
                Call::AckCmEvent,
                libc::EINVAL,
                format!(
                    "{} of {} (ticket {:#x}) is not an outstanding event of this backend \
                     (already acknowledged, or issued by another backend)",
                    event.kind(),
                    event.id(),
                    ticket.0
                ),
            ))
        }
    }
}

/// Acks a fetched event that will not reach the application and destroys the request's new id
/// that came with it, if any (the peer is then rejected).
fn drop_event(raw: RawEvent, child: Option<RawId>) {
    raw.ack();
    if let Some(child) = child {
        let _ = child.destroy();
    }
}

/// Every fd a wait on `chans` polls: each channel's fd, then its eventfd.
fn fds_of(chans: &[Arc<ChannelObj>]) -> Vec<RawFd> {
    chans
        .iter()
        .flat_map(|c| [c.raw.fd(), c.wake.fd()])
        .collect()
}

/// `[ch#1, ch#2]`, for error messages.
fn list(channels: &[ChannelHandle]) -> String {
    let names: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
    format!("[{}]", names.join(", "))
}
