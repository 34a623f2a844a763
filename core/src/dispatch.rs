//! A dispatch loop that routes each event to the connection it belongs to, by the context of
//! the event's id (as rdma-core's `cmatose` does with `id->context`).

use std::collections::BTreeMap;

use crate::{ChannelHandle, CmBackend, CmError, CmEvent, Wait};

/// What the handler of [`Dispatcher::run`] tells the loop after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flow {
    /// Wait for the next event.
    Continue,
    /// Return from `run` (the event just handled is acknowledged first).
    Stop,
}

/// One event, as [`Dispatcher::run`] hands it over.
#[derive(Debug)]
#[non_exhaustive]
pub struct Routed<'e> {
    /// The context of the event's id (`event->id->context`); a CONNECT_REQUEST's new id has
    /// its listener's.
    pub context: u64,
    /// The channel the event came from.
    pub channel: ChannelHandle,
    /// The event; `run` acknowledges it after the handler returns.
    pub event: &'e CmEvent,
}

/// Connections keyed by the context their ids carry.
///
/// Give each connection a context with [`Dispatcher::add`], pass it to `create_id` (or
/// `set_context` for a request's new id), then let [`Dispatcher::run`] fetch events from the
/// channels and hand each to the handler with its context. The handler finds its connection
/// with [`Dispatcher::get_mut`], may add and remove connections, and says when to stop.
///
/// ```
/// use cmtwin::{CmBackend, ChannelHandle, CmError, Dispatcher, EventKind, Flow, Wait};
///
/// #[derive(Default)]
/// struct Conn {
///     established: bool,
/// }
///
/// fn serve<B: CmBackend>(cm: &B, ch: ChannelHandle, listener_ctx: u64) -> Result<(), CmError> {
///     let mut conns: Dispatcher<Conn> = Dispatcher::new();
///     conns.run(cm, &[ch], Wait::Block, |conns, r| {
///         let id = r.event.id();
///         match r.event.kind() {
///             EventKind::ConnectRequest if r.context == listener_ctx => {
///                 let ctx = conns.add(Conn::default());
///                 cm.set_context(id, ctx)?;
///                 // create_qp, accept ...
///             }
///             EventKind::Established => {
///                 if let Some(c) = conns.get_mut(r.context) {
///                     c.established = true;
///                 }
///             }
///             EventKind::Disconnected => {
///                 conns.remove(r.context);
///                 return Ok(if conns.is_empty() { Flow::Stop } else { Flow::Continue });
///             }
///             _ => {}
///         }
///         Ok(Flow::Continue)
///     })
/// }
/// ```
#[derive(Debug)]
pub struct Dispatcher<C> {
    conns: BTreeMap<u64, C>,
    next_context: u64,
}

impl<C> Default for Dispatcher<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Dispatcher<C> {
    /// No connections; [`Dispatcher::add`] hands out contexts from 1 up (0 stays free for ids
    /// that belong to no connection).
    #[must_use]
    pub fn new() -> Self {
        Dispatcher {
            conns: BTreeMap::new(),
            next_context: 1,
        }
    }

    /// Adds `conn` under a context no other connection has, and returns the context.
    pub fn add(&mut self, conn: C) -> u64 {
        while self.conns.contains_key(&self.next_context) {
            self.next_context = self.next_context.wrapping_add(1);
        }
        let context = self.next_context;
        self.next_context = self.next_context.wrapping_add(1);
        self.conns.insert(context, conn);
        context
    }

    /// Puts `conn` under `context`, returning the connection that had it.
    pub fn insert(&mut self, context: u64, conn: C) -> Option<C> {
        self.conns.insert(context, conn)
    }

    /// The connection of `context`.
    pub fn get(&self, context: u64) -> Option<&C> {
        self.conns.get(&context)
    }

    /// The connection of `context`, to change it.
    pub fn get_mut(&mut self, context: u64) -> Option<&mut C> {
        self.conns.get_mut(&context)
    }

    /// Removes and returns the connection of `context`.
    pub fn remove(&mut self, context: u64) -> Option<C> {
        self.conns.remove(&context)
    }

    /// How many connections there are.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The connections in context order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &C)> {
        self.conns.iter().map(|(k, c)| (*k, c))
    }

    /// Fetches events from `channels` (the first ready one wins, waiting as `wait` says) and
    /// hands each to `handle` with its id's context, then acknowledges it, until `handle`
    /// returns [`Flow::Stop`] or an error. A fetch error (EAGAIN or ETIMEDOUT at the end of
    /// the wait, EBADF, ...) ends the loop with that error; so does a handler's error (its
    /// event is then acknowledged by its drop).
    pub fn run<B, E, F>(
        &mut self,
        cm: &B,
        channels: &[ChannelHandle],
        wait: Wait,
        mut handle: F,
    ) -> Result<(), E>
    where
        B: CmBackend + ?Sized,
        E: From<CmError>,
        F: FnMut(&mut Self, Routed<'_>) -> Result<Flow, E>,
    {
        loop {
            let (channel, event) = cm.get_cm_event_any(channels, wait)?;
            let context = cm.context(event.id())?;
            let routed = Routed {
                context,
                channel,
                event: &event,
            };
            let flow = handle(self, routed)?;
            cm.ack_cm_event(event)?;
            if flow == Flow::Stop {
                return Ok(());
            }
        }
    }
}
