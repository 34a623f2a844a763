//! The registry of live objects: checked handles to ids and channels, and the outstanding
//! (fetched, not yet acknowledged) events.
//!
//! A handle's high 32 bits are the backend instance that issued it, so a handle from another
//! backend value is recognised as foreign; the low 32 bits number objects within the instance.
//! Objects are kept in `Arc`s: a call clones the `Arc` under the registry lock and releases the
//! lock before calling librdmacm, so a blocking call never holds the registry. Destroying takes
//! the object out with `Arc::try_unwrap`, which fails while any other thread is inside a call on
//! it: that is what makes a destroy racing with a call an error instead of a use-after-free.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cmtwin::{AckTicket, AddrInfo, ChannelHandle, EventInfo, EventKind, IdHandle, PortSpace};

use crate::ffi::{EventFd, RawChannel, RawId};

/// Backend instance numbers, process-wide.
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(1);

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
    /// Held around each `rdma_get_cm_event` on this channel and around `rdma_destroy_id` /
    /// `rdma_migrate_id` of its ids. librdmacm 44 processes a fetched event inside
    /// `rdma_get_cm_event` using the id's kernel handle; if the id is destroyed meanwhile and a
    /// new id gets the same handle, that processing reads the wrong id and crashes (seen as a
    /// SIGSEGV in the concurrency test). Events already returned are acked without this lock,
    /// so `rdma_destroy_id` waiting for their acks cannot deadlock.
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
    instance: u32,
    next: u32,
    ids: BTreeMap<u64, Arc<IdObj>>,
    by_addr: BTreeMap<usize, IdHandle>,
    channels: BTreeMap<u64, Arc<ChannelObj>>,
    outstanding: BTreeMap<u64, Outstanding>,
}

impl Registry {
    /// An empty registry with a new instance number.
    pub(crate) fn new() -> Self {
        Registry {
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            next: 1,
            ids: BTreeMap::new(),
            by_addr: BTreeMap::new(),
            channels: BTreeMap::new(),
            outstanding: BTreeMap::new(),
        }
    }

    fn fresh(&mut self) -> u64 {
        let n = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        (u64::from(self.instance) << 32) | u64::from(n)
    }

    /// Whether `raw` was issued by this instance.
    pub(crate) fn is_mine(&self, raw: u64) -> bool {
        (raw >> 32) as u32 == self.instance
    }

    /// Registers a new id.
    pub(crate) fn insert_id(&mut self, raw: RawId, state: IdState) -> Arc<IdObj> {
        let handle = IdHandle::from_raw(self.fresh());
        self.by_addr.insert(raw.addr(), handle);
        let obj = Arc::new(IdObj {
            handle,
            raw,
            call: Mutex::new(()),
            state: Mutex::new(state),
        });
        self.ids.insert(handle.raw(), Arc::clone(&obj));
        obj
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

    /// Registers a new channel.
    pub(crate) fn insert_channel(&mut self, raw: RawChannel, wake: EventFd) -> ChannelHandle {
        let handle = ChannelHandle::from_raw(self.fresh());
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
        handle
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
    pub(crate) fn new_ticket(&mut self, owner: IdHandle, kind: EventKind) -> AckTicket {
        let t = self.fresh();
        self.outstanding.insert(t, Outstanding { owner, kind });
        AckTicket(t)
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
