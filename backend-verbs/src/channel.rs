//! Event channels: `rdma_create_event_channel`, `rdma_destroy_event_channel`,
//! `rdma_get_cm_event` (with the three kinds of wait) and `rdma_ack_cm_event`.
//!
//! The channel fd is kept in O_NONBLOCK mode; every wait is a `poll` on the channel fd and the
//! channel's eventfd (injected events), followed by a non-blocking fetch. Because librdmacm may
//! discard an event it fetched (§5.4), a readable fd can still yield nothing: the loop then
//! waits again (until the deadline for timed waits).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cmtwin::{Call, ChannelHandle, CmEvent, EventKind, Result, Wait};

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

    pub(crate) fn get_cm_event_impl(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent> {
        let call = Call::GetCmEvent;
        let chan = self.channel_obj(call, channel)?;
        // A timeout too large to represent is a blocking wait.
        let (wait, deadline) = match wait {
            Wait::Timeout(d) => match Instant::now().checked_add(d) {
                Some(dl) => (wait, Some(dl)),
                None => (Wait::Block, None),
            },
            other => (other, None),
        };
        loop {
            let fetched = {
                let _fetch = lock(&chan.fetch);
                chan.raw.get_event()
            };
            match fetched {
                Ok(raw) => {
                    if let Some(ev) = self.translate(&chan, raw)? {
                        return Ok(ev);
                    }
                    continue;
                }
                Err(libc::EAGAIN) => {}
                Err(libc::EINTR) => continue,
                Err(e) => return Err(c_err(call, e)),
            }
            if let Some(inj) = chan.pop_injected() {
                let mut reg = self.reg();
                // Injected events of destroyed ids are purged at destroy; check anyway.
                if reg.id(inj.id).is_none() {
                    continue;
                }
                let ticket = reg
                    .new_ticket(inj.id, inj.info.kind)
                    .map_err(|_| keys_exhausted(call))?;
                return Ok(CmEvent::new(inj.info, ticket));
            }
            let timeout_ms = match wait {
                Wait::NonBlocking => {
                    return Err(err(
                        call,
                        libc::EAGAIN,
                        format!("no event is queued on {channel}"),
                    ))
                }
                Wait::Block => -1,
                Wait::Timeout(d) => {
                    let left = deadline
                        .map(|dl| dl.saturating_duration_since(Instant::now()))
                        .unwrap_or_default();
                    if left.is_zero() {
                        return Err(err(
                            call,
                            libc::ETIMEDOUT,
                            format!("no event on {channel} within {d:?}"),
                        ));
                    }
                    ms_ceil(left)
                }
            };
            ffi::poll_readable(&[chan.raw.fd(), chan.wake.fd()], timeout_ms)
                .map_err(|e| err(call, e, "poll on the channel fd failed"))?;
        }
    }

    /// Registers a fetched kernel event and acks it in C. `None` if the event is for an id the
    /// application no longer has (it is being destroyed): such events are dropped. ENFILE if
    /// the process ran out of handle values (the event is dropped; a request is refused).
    fn translate(&self, chan: &Arc<ChannelObj>, mut raw: RawEvent) -> Result<Option<CmEvent>> {
        let snap = raw.snapshot();
        let kind = EventKind::from_raw(snap.kind);
        let mut reg = self.reg();
        let (id, listen_id, ud) = if kind == EventKind::ConnectRequest {
            let child = raw.take_child();
            match (reg.id_by_addr(snap.listen_id), child) {
                (Some(listener), Some(child)) => {
                    let ps = reg
                        .id(listener)
                        .map(|l| lock(&l.state).port_space)
                        .unwrap_or(cmtwin::PortSpace(child.port_space()));
                    let ud = child.qp_type() == QPT_UD;
                    let mut state = IdState::new(Some(Arc::clone(chan)), ps);
                    state.unaccepted = true;
                    match reg.insert_id(child, state) {
                        Ok(obj) => (obj.handle, Some(listener), ud),
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
                    (h, None, ud)
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
            event_info(&snap, id, listen_id, ud),
            ticket,
        )))
    }

    pub(crate) fn ack_cm_event_impl(&self, event: CmEvent) -> Result<()> {
        let ticket = event.ticket();
        match self.reg().ack(ticket) {
            Some(_) => Ok(()),
            None => Err(err(
                Call::AckCmEvent,
                libc::EINVAL,
                format!(
                    "{} of {} (ticket {:#x}) is not an outstanding event of this backend \
                     (already acknowledged, or issued by another backend)",
                    event.kind(),
                    event.id(),
                    ticket.0
                ),
            )),
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

/// `d` in whole milliseconds, rounded up, as poll wants it.
fn ms_ceil(d: Duration) -> i32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    i32::try_from(ms).unwrap_or(i32::MAX)
}
