//! The world: every host, device, channel, id and IB CM endpoint of a fabric, the timeline of
//! pending actions, and the trace. All state lives here, behind one mutex; the calls of
//! `calls/`, the IB CM of `ibcm.rs` and the wire of `wire.rs` are `impl World` blocks.

use cmtwin::{
    Call, ChannelHandle, CmError, ConnData, Errno, EventInfo, EventKind, EventParam, IdHandle,
    PortSpace, QpType, Result, Transport, UdData,
};

use crate::config::SimConfig;
use crate::endpoints::Endpoints;
use crate::engine::timeline::{SimTime, Timeline, TimerKey};
use crate::process::Scheduler;
use crate::rng::Streams;
use crate::store::OptKey;
use crate::trace::{Entry, EventDrop, Trace, TraceKind};
use crate::wire::{Message, Net};

/// Bits of a handle or ticket that carry the serial; the fabric's number is above them.
pub(crate) const SERIAL_BITS: u32 = 40;
/// The serial part of a handle or ticket.
pub(crate) const SERIAL_MASK: u64 = (1 << SERIAL_BITS) - 1;
/// Fabric numbers fit in the bits above the serial.
pub(crate) const FABRIC_NO_MASK: u32 = (1 << (64 - SERIAL_BITS)) - 1;

pub(crate) use crate::cm::messages::EpKey;
pub(crate) use crate::kernel::{
    AddrinfoState, ChanKey, Channel, CmState, Id, IdKey, Kernel, ListenState, McKey, Membership,
    Outstanding, Queued,
};
pub(crate) use crate::topology::{DevKey, Device, Host, HostKey, Topology};
/// Something the timeline will do.
pub(crate) enum Action {
    /// A CM message arrives.
    Deliver(Message),
    /// An endpoint's timer fires (retransmission or end of timewait).
    EpTimer { ep: EpKey },
    /// Queue an event on an id, if its pending operation was not cancelled.
    IdEvent {
        id: IdKey,
        gen: Option<u64>,
        kind: EventKind,
        status: i32,
        param: EventParam,
        membership: Option<McKey>,
    },
    /// Address resolution finished (success or ADDR_ERROR with this status).
    AddrDone { id: IdKey, gen: u64, status: i32 },
    /// Route resolution finished (success or ROUTE_ERROR with this status).
    RouteDone { id: IdKey, gen: u64, status: i32 },
    /// An SA service query of `resolve_addrinfo` finished with this status.
    AddrinfoDone { id: IdKey, gen: u64, status: i32 },
    /// Nothing: wakes the scheduler at a deadline.
    Wake,
    /// Fault `n` of the armed fault plan (`plan/`) is due.
    PlanFault(usize),
    /// A data packet arrives, or a QP's timer fires (`verbs/`).
    Verbs(crate::verbs::VerbsAction),
}

/// The whole simulated fabric's state.
pub(crate) struct World {
    pub fabric_no: u32,
    pub cfg: SimConfig,
    pub now: SimTime,
    pub timeline: Timeline<Action>,
    pub rng: Streams,
    /// Hosts, devices, addresses.
    pub topo: Topology,
    /// The hosts' rdma_cm state: ids, channels, ports, fetched events.
    pub kernel: Kernel,
    /// The CM endpoints of every connection attempt.
    pub cm: Endpoints,
    /// The wire's links and targeted faults.
    pub net: Net,
    pub next_key: u64,
    /// Steps and calls since the invariants were last checked (debug builds).
    pub unchecked: usize,
    /// How many items the last check of the invariants walked (debug builds).
    pub check_cost: usize,
    pub trace: Trace,
    pub sched: Scheduler,
    /// The applied fault plans, if any (`plan/`).
    pub plan: Option<Box<crate::plan::ArmedPlan>>,
    /// The verbs objects of the data path (`verbs/`).
    pub verbs: crate::verbs::Verbs,
}

impl World {
    pub(crate) fn new(fabric_no: u32, seed: u64, cfg: SimConfig) -> Self {
        let cfg_trace = cfg.trace;
        World {
            fabric_no,
            cfg,
            now: SimTime(0),
            timeline: Timeline::new(),
            rng: Streams::new(seed),
            topo: Topology::default(),
            kernel: Kernel::default(),
            cm: Endpoints::default(),
            net: Net::default(),
            next_key: 1,
            unchecked: 0,
            check_cost: 0,
            trace: Trace::new(cfg_trace),
            sched: Scheduler::default(),
            plan: None,
            verbs: Default::default(),
        }
    }

    /// A fresh key for a channel, id or endpoint.
    pub(crate) fn fresh_key(&mut self) -> u64 {
        let k = self.next_key;
        assert!(
            k <= SERIAL_MASK,
            "the fabric ran out of 2^40 serial numbers"
        );
        self.next_key += 1;
        k
    }

    // ----- handles -------------------------------------------------------------------------

    /// A raw handle or ticket value: this fabric's number above the serial.
    pub(crate) fn stamp(&self, serial: u64) -> u64 {
        (u64::from(self.fabric_no) << SERIAL_BITS) | serial
    }

    /// The serial of a raw handle or ticket value, if it was stamped by this fabric.
    pub(crate) fn unstamp(&self, raw: u64) -> Option<u64> {
        (raw >> SERIAL_BITS == u64::from(self.fabric_no)).then_some(raw & SERIAL_MASK)
    }

    pub(crate) fn id_handle(&self, key: IdKey) -> IdHandle {
        IdHandle::from_raw(self.stamp(key))
    }

    pub(crate) fn channel_handle(&self, key: ChanKey) -> ChannelHandle {
        ChannelHandle::from_raw(self.stamp(key))
    }

    /// The live id behind `h`, if it belongs to this fabric and host.
    pub(crate) fn id_key(&self, host: HostKey, call: Call, h: IdHandle) -> Result<IdKey> {
        self.id_entry(host, call, h).map(|(key, _)| key)
    }

    /// [`World::id_key`] with the id it found (one lookup for a check and a look at the id).
    pub(crate) fn id_entry(&self, host: HostKey, call: Call, h: IdHandle) -> Result<(IdKey, &Id)> {
        let key = self.unstamp(h.raw());
        match key.and_then(|k| self.kernel.ids.get(&k).map(|id| (k, id))) {
            Some((key, id)) if id.host == host => Ok((key, id)),
            _ => Err(not_an_id(call, h)),
        }
    }

    /// The live user-visible channel behind `h`.
    pub(crate) fn chan_key(&self, host: HostKey, call: Call, h: ChannelHandle) -> Result<ChanKey> {
        let key = self.unstamp(h.raw());
        match key.and_then(|k| self.kernel.channels.get(&k).map(|c| (k, c))) {
            Some((key, c)) if c.host == host && c.private_for.is_none() => Ok(key),
            _ => Err(CmError::new(
                call,
                Errno::EBADF,
                format!("{h} is not an open event channel of this host"),
            )),
        }
    }

    pub(crate) fn id(&self, key: IdKey) -> &Id {
        &self.kernel.ids[&key]
    }

    pub(crate) fn id_mut(&mut self, key: IdKey) -> &mut Id {
        self.kernel.ids.get_mut(&key).expect("live id")
    }

    pub(crate) fn transport_of(&self, id: IdKey) -> Option<Transport> {
        self.id(id).device.map(|d| self.topo.devices[d].transport)
    }

    // ----- trace ---------------------------------------------------------------------------

    /// Records `entry` (build it only when [`Trace::is_on`]: cheap entries may be built
    /// eagerly, text must go through [`World::record_text`]).
    /// Inlined with the check first, so that with tracing off the caller can skip building
    /// the entry.
    #[inline]
    pub(crate) fn record(&mut self, host: Option<HostKey>, kind: TraceKind, entry: Entry) {
        if self.trace.is_on() {
            self.trace.push(self.now, host, kind, entry);
        }
    }

    /// Records the text `text` makes, calling it only when tracing is on.
    pub(crate) fn record_text(
        &mut self,
        host: Option<HostKey>,
        kind: TraceKind,
        text: impl FnOnce(&World) -> String,
    ) {
        if self.trace.is_on() {
            let entry = Entry::Text(text(self));
            self.record(host, kind, entry);
        }
    }

    // ----- events --------------------------------------------------------------------------

    /// Queues an event of `owner` on its channel, as the kernel does; dropped for ids user space
    /// does not own yet (§5.6) and for ids being removed.
    pub(crate) fn queue_event(
        &mut self,
        owner: IdKey,
        kind: EventKind,
        status: i32,
        param: EventParam,
        private_data: Vec<u8>,
    ) {
        self.queue_event_full(owner, owner, None, kind, status, param, private_data, None);
    }

    /// Queues an event with every detail.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queue_event_full(
        &mut self,
        owner: IdKey,
        counted_against: IdKey,
        listen_id: Option<IdKey>,
        kind: EventKind,
        status: i32,
        param: EventParam,
        private_data: Vec<u8>,
        membership: Option<McKey>,
    ) {
        let Some(id) = self.kernel.ids.get_mut(&owner) else {
            return;
        };
        let host = id.host;
        let removed = id.state == CmState::DeviceRemoval
            && kind != EventKind::DeviceRemoval
            && kind != EventKind::User;
        let dropped = if kind != EventKind::ConnectRequest && !id.owned {
            Some(EventDrop::Unaccepted)
        } else if removed {
            Some(EventDrop::Removed)
        } else if id.destroying {
            Some(EventDrop::Destroying)
        } else {
            None
        };
        if let Some(why) = dropped {
            let id = self.id_handle(owner);
            self.record(
                Some(host),
                TraceKind::Drop,
                Entry::EventDropped { kind, id, why },
            );
            return;
        }
        World::check_event_order(id.reported, kind);
        // The id is looked up once here (every event goes through).
        id.reported |= 1 << kind.as_raw();
        id.queued += 1;
        let (ps, own_channel) = (id.ps, id.channel);
        // A CONNECT_REQUEST goes to the listener's channel; everything else to the id's own.
        let channel = if kind == EventKind::ConnectRequest {
            let channel = self.id(counted_against).channel;
            self.id_mut(owner).request_queued_on = OptKey::some(channel);
            channel
        } else {
            own_channel
        };
        let mut info = EventInfo::new(kind, status, self.id_handle(owner), ps);
        info.listen_id = listen_id.map(|l| self.id_handle(l));
        info.param = as_librdmacm_fills(kind, param, ps);
        info.private_data = private_data;
        let entry = Entry::Queued {
            kind,
            status,
            id: info.id,
            len: info.private_data.len(),
        };
        self.record(Some(host), TraceKind::Queue, entry);
        self.kernel
            .channels
            .get_mut(&channel)
            .expect("id's channel")
            .queue
            .push_back(Queued {
                info,
                owner,
                counted_against,
                membership,
            });
        self.sched.channel_changed(channel);
        if self.plan.is_some() {
            self.plan_event_queued(host, kind);
        }
    }

    /// Drops the queued events of `owner` that match `pred`.
    pub(crate) fn discard_queued(&mut self, owner: IdKey, pred: impl Fn(&Queued) -> bool) {
        // An id's events are on its channel, except its CONNECT_REQUEST, which is on the
        // listener's. A discarded request gives its backlog slot back.
        let Some(id) = self.kernel.ids.get(&owner) else {
            return;
        };
        if id.queued == 0 {
            return;
        }
        let mut places = vec![id.channel];
        places.extend(id.request_queued_on.get().filter(|c| *c != id.channel));
        let mut freed = Vec::new();
        let mut dropped = 0;
        for c in places {
            let Some(channel) = self.kernel.channels.get_mut(&c) else {
                continue;
            };
            channel.queue.retain(|e| {
                let drop = e.owner == owner && pred(e);
                if drop {
                    dropped += 1;
                    if e.info.kind == EventKind::ConnectRequest {
                        freed.push(e.counted_against);
                    }
                }
                !drop
            });
        }
        let id = self.id_mut(owner);
        id.queued -= dropped;
        if !freed.is_empty() {
            id.request_queued_on = OptKey::NONE;
        }
        for l in freed {
            if let Some(ls) = self.kernel.ids.get_mut(&l).and_then(|i| i.listen_mut()) {
                ls.pending = ls.pending.saturating_sub(1);
            }
        }
    }

    /// Forgets the fetched event behind ticket serial `ticket` (acknowledged, or released by
    /// librdmacm itself for a synchronous id).
    pub(crate) fn release_ticket(&mut self, ticket: u64) -> Option<Outstanding> {
        let o = self.kernel.outstanding.remove(&ticket)?;
        self.released(&o);
        Some(o)
    }

    /// Counts the fetched event `o`, just taken out of the outstanding ones, as acknowledged
    /// by the id that waits for it.
    pub(crate) fn released(&mut self, o: &Outstanding) {
        if let Some(id) = self.kernel.ids.get_mut(&o.counted_against) {
            id.unacked -= 1;
            if id.unacked == 0 {
                // A process waiting in rdma_destroy_id for these acknowledgements may go on.
                self.sched
                    .wake_all(crate::process::acks_key(o.counted_against));
            }
        }
    }

    /// Schedules `action` after `delay`.
    pub(crate) fn after(&mut self, delay: std::time::Duration, action: Action) -> TimerKey {
        let at = self.now.after(delay);
        self.timeline.schedule(at, action)
    }

    /// Runs the earliest pending action; false when nothing is pending.
    pub(crate) fn step(&mut self) -> bool {
        let Some((at, action)) = self.timeline.pop() else {
            return false;
        };
        debug_assert!(at >= self.now, "time never goes back");
        self.now = at.max(self.now);
        self.run_action(action);
        #[cfg(debug_assertions)]
        self.check_invariants_amortized();
        true
    }

    fn run_action(&mut self, action: Action) {
        match action {
            Action::Deliver(msg) => self.deliver(msg),
            Action::EpTimer { ep } => self.ep_timer(ep),
            Action::IdEvent {
                id,
                gen,
                kind,
                status,
                param,
                membership,
            } => {
                if self
                    .kernel
                    .ids
                    .get(&id)
                    .is_some_and(|i| gen.is_none_or(|g| i.op_gen == g))
                {
                    if let Some(mc) = membership {
                        if !self.id(id).multicast().contains_key(&mc) {
                            return;
                        }
                    }
                    self.queue_event_full(
                        id,
                        id,
                        None,
                        kind,
                        status,
                        param,
                        Vec::new(),
                        membership,
                    );
                }
            }
            Action::AddrDone { id, gen, status } => self.addr_done(id, gen, status),
            Action::RouteDone { id, gen, status } => self.route_done(id, gen, status),
            Action::AddrinfoDone { id, gen, status } => self.addrinfo_done(id, gen, status),
            Action::Wake => {}
            Action::PlanFault(n) => self.fire_planned(n),
            Action::Verbs(action) => self.verbs_action(action),
        }
    }

    /// ENXIO once the id's device was removed: ucma's close work drops the context's
    /// reference as soon as DEVICE_REMOVAL is queued (`ucma_event_handler`, `ucma_close_id`),
    /// and every command that looks the context up (`ucma_get_ctx`) then fails with ENXIO; only
    /// destroy and fetching events still work. Measured on Linux 6.1: 36 of 36 calls, also
    /// right after fetching the DEVICE_REMOVAL event.
    pub(crate) fn check_not_removed(&self, call: Call, id: IdKey) -> Result<()> {
        if self.id(id).state == CmState::DeviceRemoval {
            return Err(removed_error(call));
        }
        Ok(())
    }

    /// EINVAL with the id's state in the explanation.
    pub(crate) fn wrong_state(&self, call: Call, id: IdKey) -> CmError {
        CmError::new(
            call,
            Errno::EINVAL,
            format!("not allowed in state {:?}", self.id(id).state),
        )
    }
}

/// The parameters of an event of `kind` for an id of `ps` as librdmacm hands them over: a
/// connection event always carries the connection (or, for a UD id, datagram) member of the
/// param union, all zeros where the kernel sets nothing (the passive side's ESTABLISHED after
/// the RTU, UNREACHABLE, CONNECT_ERROR; measured on rxe and siw, tests/FIDELITY.md).
fn as_librdmacm_fills(kind: EventKind, param: EventParam, ps: PortSpace) -> EventParam {
    let conn_event = matches!(
        kind,
        EventKind::ConnectRequest
            | EventKind::ConnectResponse
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected
            | EventKind::Established
    );
    match param {
        EventParam::None if conn_event && ps.default_qp_type() == QpType::Ud => {
            EventParam::Ud(UdData::default())
        }
        EventParam::None if conn_event => EventParam::Conn(ConnData::default()),
        param => param,
    }
}

/// The error of `call` on an id whose device was removed.
#[cold]
pub(crate) fn removed_error(call: Call) -> CmError {
    CmError::new(
        call,
        Errno::ENXIO,
        "the id's device was removed (ucma released the id)",
    )
}

/// The error of `call` given `h`, which is not a live id of the caller's host.
#[cold]
fn not_an_id(call: Call, h: IdHandle) -> CmError {
    CmError::new(
        call,
        Errno::ENOENT,
        format!("{h} is not a live id of this host"),
    )
}
