//! The registry of live objects: checked handles to ids and channels, and the outstanding
//! (fetched, not yet acknowledged) events.
//!
//! Handles and tickets are 64-bit keys that are never issued twice in the process (see
//! `keys.rs`): a stale handle or ticket can never name a newer object, and the registry can
//! tell a key it issued from one another backend value issued. Objects are kept in `Arc`s: a call clones the `Arc` under the registry lock and releases the
//! lock before calling librdmacm, so a blocking call never holds the registry. Destroying takes
//! the object out with `Arc::try_unwrap`, which fails while any other thread is inside a call on
//! it: that is what makes a destroy racing with a call an error instead of a use-after-free.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use cmtwin::{AckTicket, AddrInfo, ChannelHandle, EventInfo, EventKind, IdHandle, PortSpace};

use crate::ffi::{EventFd, RawChannel, RawId};
use crate::keys::{KeySource, KeysExhausted};

/// Locks a mutex, ignoring poisoning (the protected data stays consistent: every critical
/// section is a few field updates that cannot panic half-way).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An event queued by the backend itself (USER events when the kernel cannot queue them,
/// emulated ADDRINFO_* events), delivered by `get_cm_event` like a kernel event.
#[derive(Clone, Debug)]
pub(crate) struct Injected {
    /// The id the event is for.
    pub id: IdHandle,
    /// The event.
    pub info: EventInfo,
}

/// A live event channel.
pub(crate) struct ChannelObj {
    /// Its handle.
    pub handle: ChannelHandle,
    /// The librdmacm channel (its fd is O_NONBLOCK).
    pub raw: RawChannel,
    /// Events injected by the backend, in order.
    pub injected: Mutex<VecDeque<Injected>>,
    /// Readable exactly while `injected` is non-empty (changed only under its lock).
    pub wake: EventFd,
    /// Held around each `rdma_get_cm_event` on this channel, and around every call on an id of
    /// the channel (`on_id`, `rdma_destroy_id`, `rdma_migrate_id`), including the reads of
    /// the id's fields (`local_addr`, `peer_addr`, the device and QP checks).
    ///
    /// librdmacm (cma.c) processes each event inside `rdma_get_cm_event`, before returning it,
    /// and that processing writes the `rdma_cm_id` itself, under no lock of the caller's:
    /// * ADDR_RESOLVED: `ucma_process_addr_resolved` asks the kernel for the addresses
    ///   (`ucma_query_addr`, or `ucma_query_route` where the kernel lacks AF_IB support) and
    ///   copies them into `id->route.addr` (source, destination, GIDs, P_Key); the first time,
    ///   `ucma_get_device` also attaches the device (`id->verbs`, `id->pd`) and sets
    ///   `id->port_num`.
    /// * ROUTE_RESOLVED on InfiniBand: `ucma_process_route_resolved` (`ucma_query_path` or
    ///   `ucma_query_route`) allocates `id->route.path_rec`, sets `id->route.num_paths`, and
    ///   rewrites the addresses.
    /// * CONNECT_REQUEST: `ucma_process_conn_req` fills the new id the same way
    ///   (`ucma_query_req_info`) before the application has it.
    /// * CONNECT_RESPONSE (`ucma_process_conn_resp`), REJECTED and MULTICAST_JOIN
    ///   (`ucma_process_join`) read `id->qp` and move the QP to RTR/RTS or error, or attach it
    ///   to the group: a concurrent `destroy_qp` would free it under them.
    ///
    /// Only `id->context`, `id->ps` and `id->qp_type` are never written after creation; they
    /// are read without this lock.
    ///
    /// The lock also keeps `rdma_destroy_id` away from an event being processed: librdmacm 44
    /// finds the id by its kernel handle, and if the id is destroyed meanwhile and a new id gets
    /// the same handle, that processing reads the wrong id and crashes (seen as a SIGSEGV in
    /// the concurrency test). Events already returned are acked without this lock, so
    /// `rdma_destroy_id` (or `rdma_leave_multicast`, `rdma_migrate_id`) waiting for their acks
    /// cannot deadlock. Lock order: an id's call lock, then fetch locks (two at once only in
    /// `migrate_id`, in address order: [`lock_fetches`]), then the id's `channel_switch`, then
    /// the registry and state locks.
    pub fetch: Mutex<()>,
}

impl ChannelObj {
    /// Appends an injected event and wakes waiters.
    pub(crate) fn inject(&self, event: Injected) {
        let mut q = lock(&self.injected);
        q.push_back(event);
        self.wake.signal();
    }

    /// Takes the oldest injected event.
    pub(crate) fn pop_injected(&self) -> Option<Injected> {
        let mut q = lock(&self.injected);
        let e = q.pop_front();
        if q.is_empty() {
            self.wake.drain();
        }
        e
    }

    /// Removes and returns the injected events of `id` (destroy, migrate).
    pub(crate) fn take_injected_of(&self, id: IdHandle) -> Vec<Injected> {
        let mut q = lock(&self.injected);
        let (mine, rest): (Vec<_>, Vec<_>) = q.drain(..).partition(|e| e.id == id);
        q.extend(rest);
        if q.is_empty() {
            self.wake.drain();
        }
        mine
    }
}

/// Takes the fetch locks of `a` and `b` (either may be absent, or both the same channel), in
/// address order so that two threads taking the same pair cannot deadlock.
pub(crate) fn lock_fetches<'a>(
    a: Option<&'a ChannelObj>,
    b: Option<&'a ChannelObj>,
) -> [Option<MutexGuard<'a, ()>>; 2] {
    let (first, second) = match (a, b) {
        (Some(x), Some(y)) if std::ptr::eq(x, y) => (Some(x), None),
        (Some(x), Some(y)) if (y as *const ChannelObj) < (x as *const ChannelObj) => {
            (Some(y), Some(x))
        }
        (x, y) => (x, y),
    };
    let first = first.map(|c| lock(&c.fetch));
    let second = second.map(|c| lock(&c.fetch));
    [first, second]
}

/// Progress of `resolve_addrinfo` on an id.
#[derive(Clone, Debug, Default)]
pub(crate) enum AddrinfoState {
    /// Nothing resolved or pending.
    #[default]
    Idle,
    /// The real `rdma_resolve_addrinfo` is running; results come from `rdma_query_addrinfo`.
    NativePending,
    /// Emulated resolution done; results kept here until `query_addrinfo`.
    Resolved(Vec<AddrInfo>),
}

/// What the backend tracks about an id beyond librdmacm's own struct.
pub(crate) struct IdState {
    /// The id's channel; `None` for a synchronous id (librdmacm's private channel).
    pub channel: Option<Arc<ChannelObj>>,
    /// Port space given at creation (inherited by children).
    pub port_space: PortSpace,
    /// Whether `listen` succeeded on it.
    pub listening: bool,
    /// `resolve_addrinfo` progress.
    pub addrinfo: AddrinfoState,
    /// For a child returned by `get_request`: the listener whose CONNECT_REQUEST it still holds
    /// as its current event (librdmacm counts it against the listener until accept/destroy).
    pub pending_request_of: Option<IdHandle>,
    /// An event the backend made the current event of a synchronous id (emulated
    /// resolve_addrinfo); cleared by the id's next blocking call.
    pub sync_override: Option<EventInfo>,
    /// Whether DEVICE_REMOVAL was delivered for the id (its destroy then lets librdmacm
    /// release the removed device).
    pub device_removed: bool,
    /// A connection request's new id that was not accepted yet: the kernel drops its events
    /// (uid 0, §5.6), including USER events written on it.
    pub unaccepted: bool,
    /// The multicast groups joined and not left: the backend's drop leaves them first, which
    /// detaches the id's QP (libibverbs refuses to destroy a QP still attached to a group, and
    /// the QP would then keep the device open for good).
    pub groups: Vec<std::net::SocketAddr>,
    /// The QP attributes `create_ep` kept on a passive id: `get_request` gives each new id a
    /// QP of them (librdmacm's `id_priv->qp_init_attr`).
    pub request_qp: Option<cmtwin::ep::EpQpAttr>,
}

impl IdState {
    /// A fresh state.
    pub(crate) fn new(channel: Option<Arc<ChannelObj>>, port_space: PortSpace) -> Self {
        IdState {
            channel,
            port_space,
            listening: false,
            addrinfo: AddrinfoState::Idle,
            pending_request_of: None,
            sync_override: None,
            device_removed: false,
            unaccepted: false,
            groups: Vec::new(),
            request_qp: None,
        }
    }

    /// Whether the id is synchronous.
    pub(crate) fn is_sync(&self) -> bool {
        self.channel.is_none()
    }
}

/// A live id.
pub(crate) struct IdObj {
    /// Its handle.
    pub handle: IdHandle,
    /// The librdmacm id.
    pub raw: RawId,
    /// Held during every librdmacm call on the id (except `write_cm_event`), so that a
    /// synchronous id's current event is never freed while another thread reads it.
    pub call: Mutex<()>,
    /// Held around `rdma_migrate_id`, which rewrites `id->channel`, and around the native
    /// `rdma_write_cm_event`, which reads it (that call takes no call lock, so that an event
    /// can be written while another thread blocks in a call on the id).
    pub channel_switch: Mutex<()>,
    /// Tracked state.
    pub state: Mutex<IdState>,
}

/// An event handed out and not yet acknowledged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outstanding {
    /// The id it counts against (the listener for CONNECT_REQUEST).
    pub owner: IdHandle,
    /// Its kind.
    pub kind: EventKind,
}

/// Why `take_id`/`take_channel` failed.
pub(crate) enum TakeError {
    /// No such live object.
    Unknown,
    /// Another thread holds a reference (it is inside a call on the object).
    InUse(usize),
}

/// All live objects of one backend value.
pub(crate) struct Registry {
    keys: KeySource,
    ids: BTreeMap<u64, Arc<IdObj>>,
    by_addr: BTreeMap<usize, IdHandle>,
    channels: BTreeMap<u64, Arc<ChannelObj>>,
    outstanding: BTreeMap<u64, Outstanding>,
    /// The data path's objects (PDs, regions, CQs, completion channels, QPs).
    pub verbs: crate::verbs::VerbsObjects,
}

impl Registry {
    /// An empty registry drawing its keys from the process-wide counter.
    pub(crate) fn new() -> Self {
        Self::with_keys(KeySource::new())
    }

    /// An empty registry drawing its keys from `keys`.
    fn with_keys(keys: KeySource) -> Self {
        Registry {
            keys,
            ids: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            channels: BTreeMap::new(),
            outstanding: BTreeMap::new(),
            verbs: Default::default(),
        }
    }

    /// A fresh key for a verbs object's handle.
    pub(crate) fn issue(&mut self) -> Result<u64, KeysExhausted> {
        self.keys.issue()
    }

    /// Whether `raw` was issued by this registry (live or not).
    pub(crate) fn is_mine(&self, raw: u64) -> bool {
        self.keys.is_mine(raw)
    }

    /// Registers a new id; gives `raw` back if no key is left (the caller destroys it).
    pub(crate) fn insert_id(&mut self, raw: RawId, state: IdState) -> Result<Arc<IdObj>, RawId> {
        let Ok(key) = self.keys.issue() else {
            return Err(raw);
        };
        let handle = IdHandle::from_raw(key);
        self.by_addr.insert(raw.addr(), handle);
        let obj = Arc::new(IdObj {
            handle,
            raw,
            call: Mutex::new(()),
            channel_switch: Mutex::new(()),
            state: Mutex::new(state),
        });
        self.ids.insert(handle.raw(), Arc::clone(&obj));
        Ok(obj)
    }

    /// The live id `h`.
    pub(crate) fn id(&self, h: IdHandle) -> Option<Arc<IdObj>> {
        self.ids.get(&h.raw()).cloned()
    }

    /// The handle of the live id at address `addr`.
    pub(crate) fn id_by_addr(&self, addr: usize) -> Option<IdHandle> {
        self.by_addr.get(&addr).copied()
    }

    /// Every live id (for scans such as "which children hold this listener's requests").
    pub(crate) fn ids(&self) -> impl Iterator<Item = &Arc<IdObj>> {
        self.ids.values()
    }

    /// Removes the id `h` if no other thread uses it, and returns it for destruction.
    pub(crate) fn take_id(&mut self, h: IdHandle) -> Result<IdObj, TakeError> {
        let arc = self.ids.remove(&h.raw()).ok_or(TakeError::Unknown)?;
        match Arc::try_unwrap(arc) {
            Ok(obj) => {
                self.by_addr.remove(&obj.raw.addr());
                Ok(obj)
            }
            Err(arc) => {
                let users = Arc::strong_count(&arc) - 1;
                self.ids.insert(h.raw(), arc);
                Err(TakeError::InUse(users))
            }
        }
    }

    /// Takes every object out (for the backend's `Drop`): ids that hold a listener's request
    /// first (librdmacm would block destroying the listener before them), then the other ids,
    /// then the channels.
    pub(crate) fn drain(&mut self) -> (Vec<Arc<IdObj>>, Vec<Arc<ChannelObj>>) {
        self.by_addr.clear();
        self.outstanding.clear();
        let mut ids: Vec<Arc<IdObj>> = std::mem::take(&mut self.ids).into_values().collect();
        ids.sort_by_key(|o| lock(&o.state).pending_request_of.is_none());
        let channels = std::mem::take(&mut self.channels).into_values().collect();
        (ids, channels)
    }

    /// Registers a new channel; gives `raw` back if no key is left (the caller destroys it).
    pub(crate) fn insert_channel(
        &mut self,
        raw: RawChannel,
        wake: EventFd,
    ) -> Result<ChannelHandle, RawChannel> {
        let Ok(key) = self.keys.issue() else {
            return Err(raw);
        };
        let handle = ChannelHandle::from_raw(key);
        self.channels.insert(
            handle.raw(),
            Arc::new(ChannelObj {
                handle,
                raw,
                injected: Mutex::new(VecDeque::new()),
                wake,
                fetch: Mutex::new(()),
            }),
        );
        Ok(handle)
    }

    /// The live channel `h`.
    pub(crate) fn channel(&self, h: ChannelHandle) -> Option<Arc<ChannelObj>> {
        self.channels.get(&h.raw()).cloned()
    }

    /// Removes the channel `h` if nothing else (an id, a waiting thread) references it.
    pub(crate) fn take_channel(&mut self, h: ChannelHandle) -> Result<ChannelObj, TakeError> {
        let arc = self.channels.remove(&h.raw()).ok_or(TakeError::Unknown)?;
        match Arc::try_unwrap(arc) {
            Ok(obj) => Ok(obj),
            Err(arc) => {
                let users = Arc::strong_count(&arc) - 1;
                self.channels.insert(h.raw(), arc);
                Err(TakeError::InUse(users))
            }
        }
    }

    /// Records an event handed out to the application; returns its ticket.
    pub(crate) fn new_ticket(
        &mut self,
        owner: IdHandle,
        kind: EventKind,
    ) -> Result<AckTicket, KeysExhausted> {
        let t = self.keys.issue()?;
        self.outstanding.insert(t, Outstanding { owner, kind });
        Ok(AckTicket(t))
    }

    /// Forgets an acknowledged event; `None` if the ticket is unknown (foreign, already acked).
    pub(crate) fn ack(&mut self, ticket: AckTicket) -> Option<Outstanding> {
        self.outstanding.remove(&ticket.0)
    }

    /// The outstanding events counted against `owner`.
    pub(crate) fn outstanding_of(&self, owner: IdHandle) -> Vec<(AckTicket, EventKind)> {
        self.outstanding
            .iter()
            .filter(|(_, o)| o.owner == owner)
            .map(|(t, o)| (AckTicket(*t), o.kind))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    /// A registry whose keys come from a counter of its own, starting at 1.
    fn registry() -> Registry {
        let counter: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(1)));
        Registry::with_keys(KeySource::from_counter(counter))
    }

    #[test]
    fn tickets_issued_after_four_billion_keys_never_replace_a_live_one() {
        let mut reg = registry();
        let owner = IdHandle::from_raw(7);
        let first = reg.new_ticket(owner, EventKind::AddrResolved).unwrap();
        // As if about 2^32 objects and events had been registered since (the point where a
        // 32-bit counter wraps back to the first, still outstanding, ticket).
        reg.keys.skip(u64::from(u32::MAX) - 3);
        let later: Vec<AckTicket> = (0..6)
            .map(|_| reg.new_ticket(owner, EventKind::User).unwrap())
            .collect();
        assert!(!later.contains(&first), "{first:?} issued again: {later:?}");
        assert_eq!(reg.outstanding_of(owner).len(), 7);
        let kind_of = |reg: &mut Registry, t| reg.ack(t).map(|o| o.kind);
        assert_eq!(kind_of(&mut reg, first), Some(EventKind::AddrResolved));
        for t in later {
            assert_eq!(kind_of(&mut reg, t), Some(EventKind::User));
            assert_eq!(kind_of(&mut reg, t), None, "a stale ticket is refused");
        }
        assert_eq!(kind_of(&mut reg, first), None);
        assert!(reg.outstanding_of(owner).is_empty());
    }

    #[test]
    fn keys_of_another_registry_are_foreign_and_never_live_here() {
        let mut a = Registry::new();
        let mut b = Registry::new();
        let owner = IdHandle::from_raw(7);
        let ta = a.new_ticket(owner, EventKind::User).unwrap();
        let tb = b.new_ticket(owner, EventKind::User).unwrap();
        assert_ne!(ta, tb);
        assert!(a.is_mine(ta.0) && !a.is_mine(tb.0));
        assert!(b.is_mine(tb.0) && !b.is_mine(ta.0));
        assert!(a.ack(tb).is_none() && b.ack(ta).is_none());
        assert!(a.ack(ta).is_some() && b.ack(tb).is_some());
        // Issued here but acknowledged: still recognised as this registry's own.
        assert!(a.is_mine(ta.0));
    }

    #[test]
    fn an_exhausted_counter_refuses_new_tickets() {
        let counter: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(u64::MAX - 5)));
        let mut reg = Registry::with_keys(KeySource::from_counter(counter));
        assert_eq!(
            reg.new_ticket(IdHandle::from_raw(7), EventKind::User),
            Err(KeysExhausted)
        );
        assert!(reg.outstanding_of(IdHandle::from_raw(7)).is_empty());
    }
}
