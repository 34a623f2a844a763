//! Event channels: create, destroy, fetch (with librdmacm's processing of §5.4) and acknowledge.

use cmtwin::{
    AckTicket, Call, ChannelHandle, CmError, CmEvent, Errno, EventInfo, EventKind, IdHandle, Result,
};

use crate::store::OptKey;
use crate::trace::{Entry, EventDrop, TraceKind};
use crate::world::{AddrinfoState, ChanKey, Channel, HostKey, IdKey, Outstanding, World};

impl World {
    /// `rdma_create_event_channel`.
    pub(crate) fn create_event_channel(&mut self, host: HostKey) -> Result<ChannelHandle> {
        let key = self.fresh_key();
        let owner = self.caller_group();
        self.kernel.channels.insert(
            key,
            Channel {
                host,
                owner,
                queue: Default::default(),
                private_for: None,
            },
        );
        Ok(self.channel_handle(key))
    }

    /// The private channel of a synchronous id.
    pub(crate) fn new_private_channel(&mut self, host: HostKey, id: IdKey) -> ChanKey {
        let key = self.fresh_key();
        let owner = self.caller_group();
        self.kernel.channels.insert(
            key,
            Channel {
                host,
                owner,
                queue: Default::default(),
                private_for: Some(id),
            },
        );
        key
    }

    /// `rdma_destroy_event_channel`: refused while ids use it.
    pub(crate) fn destroy_event_channel(&mut self, host: HostKey, ch: ChannelHandle) -> Result<()> {
        let call = Call::DestroyEventChannel;
        let key = self.chan_key(host, call, ch)?;
        let users: Vec<String> = self
            .kernel
            .ids
            .iter()
            .filter(|(_, i)| i.channel == key)
            .map(|(k, _)| self.id_handle(*k).to_string())
            .collect();
        if !users.is_empty() {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("ids still use the channel: {}", users.join(", ")),
            ));
        }
        self.kernel.channels.remove(&key);
        Ok(())
    }

    /// Whether the channel has an event to fetch.
    pub(crate) fn channel_ready(&self, key: ChanKey) -> bool {
        self.kernel
            .channels
            .get(&key)
            .is_some_and(|c| !c.queue.is_empty())
    }

    /// Takes the head of the channel's queue and processes it as librdmacm does; `None` when
    /// the queue is empty.
    pub(crate) fn fetch_event(&mut self, key: ChanKey) -> Option<CmEvent> {
        // Besides the event and its host: whether the event is counted against its owner
        // (every event but a CONNECT_REQUEST, counted against the listener), which is then
        // counted through the owner's lookup here (nothing below reads the count before the
        // ticket is issued); and, for a CONNECT_RESPONSE, the owner's endpoint if it has a
        // QP.
        let (q, host, counted_here, with_qp) = loop {
            let channel = self.kernel.channels.get_mut(&key)?;
            let (q, host) = (channel.pop()?, channel.host);
            let owner = self.id_mut(q.owner);
            owner.queued -= 1;
            if q.info.kind == EventKind::ConnectRequest {
                owner.request_queued_on = OptKey::NONE;
            }
            // After a CONNECT_ERROR librdmacm acknowledges the id's REJECTED and DISCONNECTED
            // itself and goes on to the next event (cma.c, `connect_error`).
            let swallowed = owner.connect_error
                && matches!(q.info.kind, EventKind::Rejected | EventKind::Disconnected);
            if !swallowed {
                if matches!(
                    q.info.kind,
                    EventKind::AddrResolved | EventKind::ConnectRequest
                ) {
                    // librdmacm copies the kernel's addresses as it processes these events
                    // (ucma_process_addr_resolved, ucma_process_conn_req): the resolved
                    // source, the new id's addresses.
                    owner.refresh_user_addrs();
                }
                let mut with_qp = None;
                if q.info.kind == EventKind::ConnectResponse {
                    if let cmtwin::EventParam::Conn(rep) = q.info.param {
                        // What rdma_init_qp_attr will take the peer's QP number from.
                        owner.rep_conn = Some(rep);
                    }
                    if owner.qp().is_some() {
                        with_qp = Some(owner.ep.get());
                    }
                }
                let counted_here = q.counted_against == q.owner;
                if counted_here {
                    owner.unacked += 1;
                }
                break (q, host, counted_here, with_qp);
            }
            let entry = Entry::EventDropped {
                kind: q.info.kind,
                id: q.info.id,
                why: EventDrop::AfterConnectError,
            };
            self.record(Some(host), TraceKind::Drop, entry);
        };
        let mut info = q.info;
        if info.kind == EventKind::ConnectRequest {
            self.adopt_listener_mode(q.owner, q.counted_against);
            // librdmacm gives the new id the listener's context as it processes the request.
            if let Some(context) = self.kernel.ids.get(&q.counted_against).map(|l| l.context) {
                self.id_mut(q.owner).context = context;
            }
            if let Some(l) = self
                .kernel
                .ids
                .get_mut(&q.counted_against)
                .and_then(|i| i.listen_mut())
            {
                l.pending = l.pending.saturating_sub(1);
            }
        }
        // ESTABLISHED or CONNECT_ERROR, made by librdmacm inside this call.
        let made_at_fetch = with_qp.is_some();
        if let Some(ep) = with_qp {
            // librdmacm moves the QP to RTR/RTS and sends the RTU from inside get_cm_event.
            // An id whose kernel side is gone (its device unregistered since the event was
            // queued: ucma's teardown destroyed it) fails librdmacm's rdma_init_qp_attr with
            // ENXIO, and the event becomes CONNECT_ERROR.
            let connected = ep.is_some_and(|ep| {
                self.connect_qp(q.owner, None) && self.drive(ep, |e, out| e.send_rtu(out))
            });
            if connected {
                info.kind = EventKind::Established;
            } else {
                info.kind = EventKind::ConnectError;
                info.status = -1;
                self.qp_to_error(q.owner);
                self.id_mut(q.owner).connect_error = true;
            }
        }
        if info.kind == EventKind::Rejected {
            // librdmacm moves the QP to ERROR as it hands out a REJECTED.
            self.qp_to_error(q.owner);
        }
        if info.kind == EventKind::AddrinfoError {
            // librdmacm's processing of ADDRINFO_ERROR ends the resolution (§10.3).
            if let Some(id) = self.kernel.ids.get_mut(&q.owner) {
                *id.addrinfo_mut() = AddrinfoState::None;
            }
        }
        let ticket = self.kernel.next_ticket;
        self.kernel.next_ticket += 1;
        if !counted_here {
            if let Some(counted) = self.kernel.ids.get_mut(&q.counted_against) {
                counted.unacked += 1;
            }
        }
        self.kernel.outstanding.insert(
            ticket,
            Outstanding {
                host,
                counted_against: q.counted_against,
                owner: q.owner,
                kind: info.kind,
                membership: q.membership,
            },
        );
        let entry = Entry::Delivered {
            kind: info.kind,
            status: info.status,
            id: info.id,
            ticket,
        };
        self.record(Some(host), TraceKind::Deliver, entry);
        if made_at_fetch && self.plan.is_some() {
            // The kernel queued a CONNECT_RESPONSE; the application sees the event librdmacm
            // made of it now, and a fault plan watching for that kind fires now.
            self.plan_event_queued(host, info.kind);
        }
        Some(CmEvent::new(info, AckTicket(self.stamp(ticket))))
    }

    /// librdmacm creates a request's id on the listener's channel, and moves it to a private
    /// channel of its own if the listener is synchronous (§5.4): the child follows the mode the
    /// listener has when the request is fetched, not when it arrived.
    fn adopt_listener_mode(&mut self, child: IdKey, listener: IdKey) {
        let (Some(l), Some(c)) = (self.kernel.ids.get(&listener), self.kernel.ids.get(&child))
        else {
            return;
        };
        let (l_sync, l_channel, c_sync, c_channel, host) =
            (l.sync, l.channel, c.sync, c.channel, c.host);
        if l_sync && !c_sync {
            let private = self.new_private_channel(host, child);
            let c = self.id_mut(child);
            c.channel = private;
            c.sync = true;
        } else if !l_sync && c_sync {
            if self
                .kernel
                .channels
                .get(&c_channel)
                .is_some_and(|ch| ch.private_for == Some(child))
            {
                self.kernel.channels.remove(&c_channel);
            }
            let c = self.id_mut(child);
            c.channel = l_channel;
            c.sync = false;
        }
    }

    /// The outstanding ticket of `event` (id `id`, kind `kind`, stamped ticket `raw`), if
    /// it is one of this fabric's and names the very event it was issued for; `host`, if
    /// given, must be the host that fetched it.
    fn outstanding_ticket(
        &self,
        host: Option<HostKey>,
        raw: u64,
        kind: EventKind,
        id: IdHandle,
    ) -> Option<u64> {
        let owner = self.unstamp(id.raw());
        self.unstamp(raw).filter(|t| {
            self.kernel
                .outstanding
                .get(t)
                .is_some_and(|o| ticket_matches(o, host, kind, owner))
        })
    }

    /// Takes the outstanding event behind ticket `raw` out when it is the one fetched on
    /// `host` as `kind` for `id` (one lookup: every acknowledgement goes through here).
    fn take_outstanding(
        &mut self,
        host: HostKey,
        raw: u64,
        kind: EventKind,
        id: IdHandle,
    ) -> Option<u64> {
        let ticket = self.unstamp(raw)?;
        let owner = self.unstamp(id.raw());
        let o = (self.kernel.outstanding)
            .remove_if(&ticket, |o| ticket_matches(o, Some(host), kind, owner))?;
        self.released(&o);
        Some(ticket)
    }

    /// `rdma_ack_cm_event`: the event must be an outstanding one of this host.
    pub(crate) fn ack_cm_event(&mut self, host: HostKey, event: &CmEvent) -> Result<()> {
        let raw = event.ticket().0;
        match self.take_outstanding(host, raw, event.kind(), event.id()) {
            Some(ticket) => {
                let entry = Entry::Acked {
                    kind: event.kind(),
                    id: event.id(),
                    ticket,
                };
                self.record(Some(host), TraceKind::Ack, entry);
                Ok(())
            }
            None => Err(CmError::new(
                Call::AckCmEvent,
                Errno::EINVAL,
                format!(
                    "ticket {} is not an outstanding event of this host",
                    raw & crate::world::SERIAL_MASK
                ),
            )),
        }
    }

    /// An event dropped without acknowledgement: acknowledged now, on the host that fetched
    /// it, if it is still outstanding (a ticket of another fabric, or made up, is ignored).
    pub(crate) fn ack_dropped_event(&mut self, info: &EventInfo, ticket: AckTicket) {
        let Some(ticket) = self.outstanding_ticket(None, ticket.0, info.kind, info.id) else {
            return;
        };
        let Some(o) = self.release_ticket(ticket) else {
            return;
        };
        let (kind, id) = (info.kind, info.id);
        self.record_text(Some(o.host), TraceKind::Ack, |_| {
            format!("{kind} on {id} ticket {ticket} (dropped)")
        });
    }

    /// Fetched, unacknowledged events that hold up a destroy of `id` (or a migrate).
    pub(crate) fn unacked_of(&self, id: IdKey) -> Vec<String> {
        if self.kernel.ids.get(&id).is_some_and(|i| i.unacked == 0) {
            return Vec::new();
        }
        self.kernel
            .outstanding
            .iter()
            .filter(|(_, o)| o.counted_against == id)
            .map(|(t, o)| format!("{} (ticket {t}, {})", o.kind, self.id_handle(o.owner)))
            .collect()
    }
}

/// Whether the outstanding event `o` is the one fetched on `host` (any, for `None`) as `kind`
/// for the id of serial `owner` (`None`: a handle of another fabric, which matches nothing).
fn ticket_matches(
    o: &Outstanding,
    host: Option<HostKey>,
    kind: EventKind,
    owner: Option<IdKey>,
) -> bool {
    (host.is_none() || host == Some(o.host)) && o.kind == kind && owner == Some(o.owner)
}
