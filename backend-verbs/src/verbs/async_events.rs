//! The devices' asynchronous events (`ibv_get_async_event`), routed to the backend value
//! whose QP, CQ or SRQ they concern.
//!
//! A device context, and so its one asynchronous event fd, is shared by every backend value
//! of the process (librdmacm opens each device once). Whichever backend reads an event
//! files it in the inbox of the backend that owns the QP (by context and QP number) or CQ
//! (by address) and wakes that backend's waiters through the inbox's eventfd; events of
//! objects no backend value owns are dropped. Each event is acknowledged as soon as it is
//! read (`ffi::RawCtx::next_async_event`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use crate::ffi::{EventFd, RawAsyncEvent, RawCtx};
use crate::registry::lock;

/// One backend value's queue of asynchronous events.
pub(crate) struct AsyncInbox {
    queue: Mutex<VecDeque<(usize, RawAsyncEvent)>>,
    /// Readable while `queue` is not empty (the errno if no eventfd could be made).
    pub wake: Result<EventFd, i32>,
}

impl AsyncInbox {
    /// An empty inbox.
    pub(crate) fn new() -> Arc<AsyncInbox> {
        Arc::new(AsyncInbox {
            queue: Mutex::new(VecDeque::new()),
            wake: EventFd::new(),
        })
    }

    fn push(&self, ctx: usize, ev: RawAsyncEvent) {
        let mut q = lock(&self.queue);
        q.push_back((ctx, ev));
        if let Ok(w) = &self.wake {
            w.signal();
        }
    }

    /// Whether no event is queued.
    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    /// The oldest event: its context's address and the event.
    pub(crate) fn pop(&self) -> Option<(usize, RawAsyncEvent)> {
        let mut q = lock(&self.queue);
        let e = q.pop_front();
        if let (true, Ok(w)) = (q.is_empty(), &self.wake) {
            w.drain();
        }
        e
    }
}

/// Who owns which QPs, CQs and SRQs, process-wide.
#[derive(Default)]
struct Owners {
    qps: BTreeMap<(usize, u32), Weak<AsyncInbox>>,
    cqs: BTreeMap<usize, Weak<AsyncInbox>>,
    srqs: BTreeMap<usize, Weak<AsyncInbox>>,
}

static OWNERS: Mutex<Owners> = Mutex::new(Owners {
    qps: BTreeMap::new(),
    cqs: BTreeMap::new(),
    srqs: BTreeMap::new(),
});

/// SRQ `addr` belongs to `inbox`.
pub(crate) fn own_srq(addr: usize, inbox: &Arc<AsyncInbox>) {
    lock(&OWNERS).srqs.insert(addr, Arc::downgrade(inbox));
}

/// SRQ `addr` is gone.
pub(crate) fn forget_srq(addr: usize) {
    lock(&OWNERS).srqs.remove(&addr);
}

/// QP `qpn` of context `ctx` belongs to `inbox`.
pub(crate) fn own_qp(ctx: usize, qpn: u32, inbox: &Arc<AsyncInbox>) {
    lock(&OWNERS).qps.insert((ctx, qpn), Arc::downgrade(inbox));
}

/// CQ `addr` belongs to `inbox`.
pub(crate) fn own_cq(addr: usize, inbox: &Arc<AsyncInbox>) {
    lock(&OWNERS).cqs.insert(addr, Arc::downgrade(inbox));
}

/// QP `qpn` of `ctx` is gone.
pub(crate) fn forget_qp(ctx: usize, qpn: u32) {
    lock(&OWNERS).qps.remove(&(ctx, qpn));
}

/// CQ `addr` is gone.
pub(crate) fn forget_cq(addr: usize) {
    lock(&OWNERS).cqs.remove(&addr);
}

/// Reads every event queued on `ctx` now and files each with its owner (the context's async
/// fd must be O_NONBLOCK: `RawCtx::async_fd`).
pub(crate) fn pump(ctx: RawCtx) -> crate::ffi::CResult<()> {
    loop {
        let ev = match ctx.next_async_event() {
            Ok(ev) => ev,
            Err(libc::EAGAIN) => return Ok(()),
            Err(e) => return Err(e),
        };
        let owners = lock(&OWNERS);
        let owner = match (ev.qp_num, ev.cq, ev.srq) {
            (Some(qpn), _, _) => owners.qps.get(&(ctx.addr(), qpn)),
            (None, Some(cq), _) => owners.cqs.get(&cq),
            (None, None, Some(srq)) => owners.srqs.get(&srq),
            (None, None, None) => None,
        }
        .and_then(Weak::upgrade);
        drop(owners);
        if let Some(inbox) = owner {
            inbox.push(ctx.addr(), ev);
        }
    }
}
