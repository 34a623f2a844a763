//! `SimBackend`: one host's view of the fabric, implementing `CmBackend`. Each call is traced
//! with its result; blocking calls (waits on one or several channels, sleeps, synchronous
//! ids) go through the scheduler. Events returned to the application hold a weak reference to
//! the fabric's shared state, through which their drop acknowledges them (armed only once the
//! world is unlocked: a drop locks it).

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cmtwin::{
    AckTicket, AddrInfo, AddrInfoHints, AsyncEvent, Call, ChannelHandle, CmBackend, CmError,
    CmEvent, CmOption, ConnParam, Errno, EventInfo, EventKind, EventRelease, IdHandle, JoinFlags,
    PortSpace, QpInitAttr, Result, Wait,
};

use crate::handoff::WorldGuard;
use crate::kernel::{Id, SyncEvent};
use crate::process::{
    block, current_process, may_preempt, yield_now, yield_now_until, yield_point, Cond, Shared,
    Waiting,
};
use crate::trace::{Args, Entry, Shown, TraceKind, TraceValue};
use crate::world::{ChanKey, HostKey, IdKey, World};

/// One simulated host's connection manager. Cheap to clone; all clones are the same host.
#[derive(Clone)]
pub struct SimBackend {
    pub(crate) shared: Arc<Shared>,
    pub(crate) host: HostKey,
}

impl Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend")
            .field("host", &self.host)
            .finish()
    }
}

/// The errno a synchronous call returns for the event that completed it (§11.2).
fn sync_result(call: Call, info: &EventInfo) -> Result<()> {
    let errno = match (info.kind, info.status) {
        (_, 0) => return Ok(()),
        (EventKind::Rejected, _) => Errno::ECONNREFUSED,
        (_, s) if s < 0 => Errno(s.wrapping_neg()),
        (_, s) => Errno(s),
    };
    Err(CmError::new(
        call,
        errno,
        format!("completed by {} with status {}", info.kind, info.status),
    ))
}

/// The error of `call` from a thread that is not a process of the run in progress.
#[cold]
fn refused_outside_run(call: Call) -> CmError {
    CmError::new(
        call,
        Errno::EPERM,
        "while Fabric::run is in progress only the fabric's own processes may call into it, and \
         this thread is not one of them",
    )
}

/// The calls that only look for something (and may yield when nothing is there).
fn is_poll_or_wait(call: Call) -> bool {
    matches!(
        call,
        Call::GetCmEvent
            | Call::Poll
            | Call::Sleep
            | Call::PollCq
            | Call::GetCqEvent
            | Call::GetAsyncEvent
    )
}

/// How long siw's `rdma_connect` blocks in TCP's SYN retries before ETIMEDOUT when the peer
/// never answers: Linux's six retries (`tcp_syn_retries`) from a 1 s timeout, doubling each
/// time (1 + 2 + 4 + ... + 64 s; measured about 127 s on siw, Linux 6.1 and 6.12).
pub const IW_TCP_SYN_GIVE_UP: Duration = Duration::from_secs(127);

/// `rdma_connect` on the world: when it fails because an iWARP peer never answered the TCP
/// connection, the caller first waits [`IW_TCP_SYN_GIVE_UP`] in virtual time (others run
/// meanwhile), as siw blocks in the call; the outcome is the one found at the start (the
/// timeout is the only ETIMEDOUT `connect` gives).
fn wait_out_unanswered_tcp<'a>(
    mut w: WorldGuard<'a>,
    host: HostKey,
    id: IdHandle,
    param: Option<&ConnParam>,
) -> Result<(WorldGuard<'a>, Result<()>)> {
    let r = w.connect(host, id, param);
    if !r.as_ref().is_err_and(|e| e.errno == Errno::ETIMEDOUT) {
        return Ok((w, r));
    }
    let cond = Cond {
        channels: Vec::new(),
        deadline: Some(w.now.after(IW_TCP_SYN_GIVE_UP)),
        keys: Vec::new(),
        what: Waiting::InCall(
            Call::Connect,
            id,
            "TCP's SYN retries to a peer that never answers",
        ),
    };
    let (w, blocked) = block(w, cond);
    blocked.map_err(|msg| CmError::new(Call::Connect, Errno::EDEADLK, msg))?;
    Ok((w, r))
}

impl SimBackend {
    /// Locks the world for `call`: while `Fabric::run` is in progress only the fabric's own
    /// processes may call into it (EPERM for any other thread, untraced: tracing it would make
    /// the trace depend on the OS's thread scheduling).
    /// Every call is a yield point of a running process: the schedule may preempt it here.
    /// A call that is not a poll or a wait may change what polls see (livelock detection).
    #[inline]
    pub(crate) fn lock(&self, call: Call) -> Result<WorldGuard<'_>> {
        let mut w = self.lock_quiet(call)?;
        if !is_poll_or_wait(call) {
            w.sched.note_change();
        }
        Ok(yield_point(w))
    }

    /// As [`SimBackend::lock`] without the yield point (for bookkeeping after a call).
    #[inline]
    pub(crate) fn lock_quiet(&self, call: Call) -> Result<WorldGuard<'_>> {
        let w = self.shared.lock();
        if w.sched.running() && current_process(w.fabric_no).is_none() {
            return Err(refused_outside_run(call));
        }
        Ok(w)
    }

    /// The world for the next step of call `call`, which holds it as `w`: what letting `w` go
    /// and [`SimBackend::lock`] would give, without letting it go when the yield point cannot
    /// preempt this thread (see [`may_preempt`]): then nothing else runs in between either way,
    /// and the schedule and trace are the same without a second lock of the mutex.
    fn relock<'a>(&'a self, mut w: WorldGuard<'a>, call: Call) -> Result<WorldGuard<'a>> {
        if may_preempt(&w) {
            drop(w);
            return self.lock(call);
        }
        if !is_poll_or_wait(call) {
            w.sched.note_change();
        }
        Ok(w)
    }

    /// Runs `f` on the world as call `call` of this host, and traces it with its result and
    /// the arguments `args` gives (asked only when tracing is on).
    fn call<T: TraceValue>(
        &self,
        call: Call,
        args: impl FnOnce() -> Args,
        f: impl FnOnce(&mut World, HostKey) -> Result<T>,
    ) -> Result<T> {
        let mut w = self.lock(call)?;
        self.run_call(&mut w, call, args, f)
    }

    /// As [`SimBackend::call`] on the world already locked as `w`.
    fn run_call<T: TraceValue>(
        &self,
        w: &mut World,
        call: Call,
        args: impl FnOnce() -> Args,
        f: impl FnOnce(&mut World, HostKey) -> Result<T>,
    ) -> Result<T> {
        let r = f(w, self.host);
        self.trace_result(w, call, args, &r);
        r
    }

    /// [`SimBackend::call`], then, when it succeeded, [`SimBackend::complete_sync`] of `id`:
    /// a call that a synchronous id completes with its next event.
    fn call_sync(
        &self,
        call: Call,
        id: IdHandle,
        args: impl FnOnce() -> Args,
        f: impl FnOnce(&mut World, HostKey) -> Result<()>,
    ) -> Result<()> {
        let mut w = self.lock(call)?;
        self.run_call(&mut w, call, args, f)?;
        let w = self.relock(w, call)?;
        self.complete_sync_locked(w, call, id)
    }

    /// Traces call `call` of this host with its result `r` and the arguments `args` gives
    /// (asked only when tracing is on).
    fn trace_result<T: TraceValue>(
        &self,
        w: &mut World,
        call: Call,
        args: impl FnOnce() -> Args,
        r: &Result<T>,
    ) {
        #[cfg(debug_assertions)]
        w.check_invariants_amortized();
        if w.trace.is_on() {
            let result = match r {
                Ok(v) => v.shown(),
                Err(e) => Shown::Errno(e.errno),
            };
            let args = args();
            w.record(
                Some(self.host),
                TraceKind::Call,
                Entry::Call { call, args, result },
            );
        }
    }

    /// As librdmacm's `rdma_destroy_id`, waits while fetched events of `id` are
    /// unacknowledged and another process of the run could still acknowledge them (a thread
    /// handing the event to another). When none can, or the caller is alone, it returns and
    /// the call itself fails with EBUSY naming the events (librdmacm would block forever).
    /// Takes and gives back the world, locked.
    fn await_acks<'a>(&'a self, mut w: WorldGuard<'a>, id: IdHandle) -> WorldGuard<'a> {
        let call = Call::DestroyId;
        loop {
            let Ok((key, i)) = w.id_entry(self.host, call, id) else {
                return w; // the call reports the bad handle
            };
            let me = current_process(w.fabric_no);
            let waits = i.unacked > 0
                && !i.sync
                && me.is_some_and(|me| crate::process::others_live(&w, me));
            if !waits {
                return w;
            }
            let cond = Cond {
                channels: Vec::new(),
                deadline: None,
                keys: vec![crate::process::acks_key(key)],
                what: Waiting::Acks(id),
            };
            let (woken, r) = block(w, cond);
            if r.is_err() {
                return woken; // nothing can acknowledge them: the call fails with EBUSY
            }
            w = woken;
        }
    }

    /// As `rdma_destroy_id` and `rdma_disconnect` (`call`) of an iWARP initiator whose MPA
    /// request is unanswered: iw_cm's `destroy_cm_id` and `iw_cm_disconnect` wait on
    /// `connect_wait` (IWCM_F_CONNECT_WAIT, cleared by `cm_conn_rep_handler`) for the reply,
    /// or for siw's MPA timeout (`MPA_REPLY_TIMEOUT` after the request), before they act; the
    /// time passes in virtual time, others run meanwhile. The rdma_cm hands no event of the id
    /// out once its destroy began (the world discards what the reply or the timeout queued);
    /// a disconnect then acts on the connection the reply made, if any.
    /// Takes and gives back the world, locked.
    fn await_mpa_reply<'a>(
        &'a self,
        mut w: WorldGuard<'a>,
        call: Call,
        id: IdHandle,
    ) -> Result<WorldGuard<'a>> {
        loop {
            let Ok((key, i)) = w.id_entry(self.host, call, id) else {
                return Ok(w); // the call reports the bad handle
            };
            if !w.awaits_mpa_reply(key, i) {
                return Ok(w);
            }
            if call == Call::DestroyId {
                w.id_mut(key).destroying = true;
            }
            if current_process(w.fabric_no).is_none() {
                // Outside a run the caller runs the timeline itself: the MPA timer is in it.
                if !w.step() {
                    return Ok(w);
                }
                continue;
            }
            let cond = Cond {
                channels: Vec::new(),
                deadline: None,
                keys: vec![crate::process::mpa_reply_key(key)],
                what: Waiting::InCall(call, id, "iw_cm's wait for the MPA reply or timeout"),
            };
            let (woken, r) = block(w, cond);
            r.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
            w = woken;
        }
    }

    /// For a synchronous id: waits for its next event, keeps it as the current event, and
    /// turns it into the call's result as librdmacm's `ucma_complete` does.
    fn complete_sync(&self, call: Call, h: IdHandle) -> Result<()> {
        let w = self.lock(call)?;
        self.complete_sync_locked(w, call, h)
    }

    /// As [`SimBackend::complete_sync`] on the world already locked as `w`.
    fn complete_sync_locked<'a>(
        &'a self,
        mut w: WorldGuard<'a>,
        call: Call,
        h: IdHandle,
    ) -> Result<()> {
        let (key, id) = w.id_entry(self.host, call, h)?;
        if !id.sync {
            return Ok(());
        }
        if let Some(held) = w.id_mut(key).sync_event.take() {
            w.release_ticket(held.ticket);
        }
        let (mut w, info) = self.wait_sync_event(w, call, key);
        let info = info?;
        let result = sync_result(call, &info);
        let entry = Entry::SyncReturn {
            call,
            id: h,
            kind: info.kind,
            status: info.status,
            result: match &result {
                Ok(()) => Shown::Zero,
                Err(e) => Shown::Errno(e.errno),
            },
        };
        w.record(Some(self.host), TraceKind::Call, entry);
        result
    }

    /// Blocks until the synchronous id `key` has an event, fetches it and keeps it as the id's
    /// current event.
    fn wait_sync_event<'a>(
        &'a self,
        w: WorldGuard<'a>,
        call: Call,
        key: IdKey,
    ) -> (WorldGuard<'a>, Result<EventInfo>) {
        let chan = w.id(key).channel;
        let what = Waiting::SyncCall(call, w.id_handle(key));
        let (mut w, r) = block(
            w,
            Cond {
                channels: vec![chan],
                deadline: None,
                keys: Vec::new(),
                what,
            },
        );
        if let Err(msg) = r {
            return (w, Err(CmError::new(call, Errno::EDEADLK, msg)));
        }
        if !w.kernel.ids.contains_key(&key) {
            return (
                w,
                Err(CmError::new(
                    call,
                    Errno::ENOENT,
                    "the id was destroyed while waiting",
                )),
            );
        }
        // Another process migrated the id to another channel meanwhile: the private channel
        // this call waited on is gone (librdmacm would wait on it forever).
        let Some(event) = w.fetch_event(chan) else {
            return (
                w,
                Err(CmError::new(
                    call,
                    Errno::EBADF,
                    "rdma_migrate_id moved the synchronous id to another channel while this \
                     call waited for its event",
                )),
            );
        };
        let info = event.info().clone();
        let ticket = event.ticket().0 & crate::world::SERIAL_MASK;
        w.id_mut(key).sync_event = Some(Box::new(SyncEvent {
            info: info.clone(),
            ticket,
        }));
        (w, Ok(info))
    }

    /// The keys of `channels` (EBADF for one that is not this host's live channel; EINVAL for
    /// none at all).
    fn chan_keys(&self, w: &World, call: Call, channels: &[ChannelHandle]) -> Result<Vec<ChanKey>> {
        if channels.is_empty() {
            return Err(CmError::new(call, Errno::EINVAL, "no channel to wait on"));
        }
        channels
            .iter()
            .map(|&c| w.chan_key(self.host, call, c))
            .collect()
    }

    /// Checks every handle of `channels` and fetches the head of the first that has an event
    /// (no allocation: this is every poll's path), as `found` makes it of the channel and the
    /// event (the event alone for `get_cm_event`: not moved again into a pair).
    fn fetch_first<T>(
        &self,
        w: &mut World,
        call: Call,
        channels: &[ChannelHandle],
        found: impl Fn(ChannelHandle, CmEvent) -> T,
    ) -> Result<Option<T>> {
        if channels.is_empty() {
            return Err(CmError::new(call, Errno::EINVAL, "no channel to wait on"));
        }
        if let [c] = *channels {
            // One channel (`get_cm_event`): fetching from an empty queue finds nothing, with
            // no look whether it is ready first.
            let key = w.chan_key(self.host, call, c)?;
            return Ok(w.fetch_event(key).map(|e| found(c, e)));
        }
        let mut ready = None;
        for &c in channels {
            let key = w.chan_key(self.host, call, c)?;
            if ready.is_none() && w.channel_ready(key) {
                ready = Some((c, key));
            }
        }
        Ok(ready.and_then(|(c, key)| w.fetch_event(key).map(|e| found(c, e))))
    }

    /// Waits on user channels as `get_cm_event` does, and fetches from the first that has an
    /// event. An unproductive poll (`NonBlocking`, a zero timeout) of a simulated process
    /// yields first, so that polling lets the others run and virtual time advance; its result
    /// is that of a second look at the channels. The event returned (as `found` makes it of
    /// the channel and the event) is not yet armed.
    fn wait_event<T>(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
        found: impl Fn(ChannelHandle, CmEvent) -> T + Copy,
    ) -> Result<T> {
        let call = Call::GetCmEvent;
        let mut w = self.lock(call)?;
        if let Some(found) = self.fetch_first(&mut w, call, channels, found)? {
            return Ok(found);
        }
        let (errno, detail) = match wait {
            Wait::NonBlocking => (Errno::EAGAIN, "no event queued"),
            _ => (Errno::ETIMEDOUT, "no event within the timeout"),
        };
        let deadline = match wait {
            Wait::Timeout(d) if !d.is_zero() => w.now.deadline_after(d),
            Wait::Block => None,
            _ if current_process(w.fabric_no).is_none() => {
                // Outside a run the yield does nothing: a second look would find what the
                // first found.
                return Err(CmError::new(call, errno, detail));
            }
            _ => {
                let mut w = yield_now(w).map_err(|m| CmError::new(call, Errno::EDEADLK, m))?;
                return self
                    .fetch_first(&mut w, call, channels, found)?
                    .ok_or_else(|| CmError::new(call, errno, detail));
            }
        };
        let keys = self.chan_keys(&w, call, channels)?;
        // Another process waiting on the same channel may take the event first: wait again
        // until one is fetched or the deadline passes.
        loop {
            let cond = Cond {
                channels: keys.clone(),
                deadline,
                keys: Vec::new(),
                what: Waiting::Events,
            };
            let (mut woken, r) = block(w, cond);
            r.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
            if let Some(found) = self.fetch_first(&mut woken, call, channels, found)? {
                return Ok(found);
            }
            if deadline.is_some_and(|d| woken.now >= d) {
                return Err(CmError::new(call, errno, detail));
            }
            w = woken;
        }
    }

    /// The channels of `keys` that have an event, after waiting as `wait` says.
    fn wait_ready(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>> {
        let call = Call::Poll;
        let w = self.lock(call)?;
        let keys = self.chan_keys(&w, call, channels)?;
        let ready = |w: &World, keys: &[ChanKey]| -> Vec<ChannelHandle> {
            (keys.iter().zip(channels))
                .filter(|(&k, _)| w.channel_ready(k))
                .map(|(_, &c)| c)
                .collect()
        };
        let now_ready = ready(&w, &keys);
        if !now_ready.is_empty() {
            return Ok(now_ready);
        }
        let deadline = match wait {
            Wait::Timeout(d) if !d.is_zero() => w.now.deadline_after(d),
            Wait::Block => None,
            _ => {
                let w = yield_now(w).map_err(|m| CmError::new(call, Errno::EDEADLK, m))?;
                let keys = self.chan_keys(&w, call, channels)?;
                return Ok(ready(&w, &keys));
            }
        };
        let mut w = w;
        loop {
            let cond = Cond {
                channels: keys.clone(),
                deadline,
                keys: Vec::new(),
                what: Waiting::Polling,
            };
            let (woken, r) = block(w, cond);
            r.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
            let keys = self.chan_keys(&woken, call, channels)?;
            let now_ready = ready(&woken, &keys);
            if !now_ready.is_empty() || deadline.is_some_and(|d| woken.now >= d) {
                return Ok(now_ready);
            }
            w = woken;
        }
    }

    /// Traces a failed `get_cm_event` (one channel) or `get_cm_event_any` (several). A refused
    /// thread (EPERM) is not traced: the lock refuses it again.
    fn trace_get_failure(&self, channels: &[ChannelHandle], wait: Wait, errno: Errno) {
        let Ok(mut w) = self.lock_quiet(Call::GetCmEvent) else {
            return;
        };
        if !w.trace.is_on() {
            // A polling loop fails here at every look: nothing is formatted for nothing.
            return;
        }
        let entry = match channels {
            [channel] => Entry::GetEventFailed {
                channel: *channel,
                wait,
                errno,
            },
            _ => Entry::Call {
                call: Call::GetCmEvent,
                args: Args::Text(format!("{}, {wait:?}", list(channels))),
                result: Shown::Errno(errno),
            },
        };
        w.record(Some(self.host), TraceKind::Call, entry);
    }

    /// [`SimBackend::wait_event`], then the event (which `event` finds in what `found` made)
    /// armed in place now that the world is unlocked (dropping it locks the world), or the
    /// failure traced: the common end of `get_cm_event` and `get_cm_event_any`.
    fn wait_armed<T>(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
        found: impl Fn(ChannelHandle, CmEvent) -> T + Copy,
        event: impl FnOnce(&mut T) -> &mut CmEvent,
    ) -> Result<T> {
        let mut r = self.wait_event(channels, wait, found);
        match &mut r {
            Ok(t) => event(t).arm(self.release_path()),
            Err(e) => self.trace_get_failure(channels, wait, e.errno),
        }
        r
    }

    /// As [`CmBackend::sleep`] on the world already locked as `w`; gives it back locked. A
    /// `duration` beyond the end of virtual time sleeps for ever when `forever` (the program's
    /// own sleep), else to the end of time (a configured delay of the model, saturated).
    fn sleep_locked<'a>(
        &'a self,
        w: WorldGuard<'a>,
        duration: Duration,
        forever: bool,
    ) -> Result<WorldGuard<'a>> {
        if duration.is_zero() {
            return yield_now(w).map_err(|m| CmError::new(Call::Sleep, Errno::EDEADLK, m));
        }
        let deadline = match forever {
            true => w.now.deadline_after(duration),
            false => Some(w.now.after(duration)),
        };
        let what = Waiting::Sleep(duration);
        let (w, r) = block(
            w,
            Cond {
                channels: Vec::new(),
                deadline,
                keys: Vec::new(),
                what,
            },
        );
        r.map_err(|msg| CmError::new(Call::Sleep, Errno::EDEADLK, msg))?;
        Ok(w)
    }

    /// Reads the id `h` of this host as `call` (untraced: reading changes nothing).
    fn query<T>(&self, call: Call, h: IdHandle, read: impl FnOnce(&Id) -> T) -> Result<T> {
        let w = self.lock(call)?;
        let key = w.id_key(self.host, call, h)?;
        Ok(read(w.id(key)))
    }

    /// How events this backend returns reach it when dropped unacknowledged.
    fn release_path(&self) -> Weak<dyn EventRelease> {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        weak
    }
}

/// `ch1` alone, or `[ch1, ch2]`, for traces and deadlock reports.
fn list(channels: &[ChannelHandle]) -> String {
    match channels {
        [one] => one.to_string(),
        _ => {
            let names: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
            format!("[{}]", names.join(", "))
        }
    }
}

/// The fabric's side of an event dropped unacknowledged: acknowledged at the drop, in program
/// order, and traced. While `Fabric::run` is in progress only the fabric's own processes may
/// acknowledge (any other thread's drop leaves the event outstanding, untraced, so that the
/// trace never depends on the OS's thread scheduling).
impl EventRelease for Shared {
    fn release_dropped(&self, info: &EventInfo, ticket: AckTicket) {
        let mut w = self.lock();
        if w.sched.running() && current_process(w.fabric_no).is_none() {
            return;
        }
        w.ack_dropped_event(info, ticket);
        #[cfg(debug_assertions)]
        w.check_invariants_amortized();
    }
}

impl CmBackend for SimBackend {
    fn create_event_channel(&self) -> Result<ChannelHandle> {
        self.call(
            Call::CreateEventChannel,
            || Args::None,
            |w, h| w.create_event_channel(h),
        )
    }

    fn destroy_event_channel(&self, channel: ChannelHandle) -> Result<()> {
        self.call(
            Call::DestroyEventChannel,
            || Args::Chan(channel),
            |w, h| {
                let key = w.chan_key(h, Call::DestroyEventChannel, channel);
                w.destroy_event_channel(h, channel)?;
                // Whoever waited on the channel learns that it is gone.
                if let Ok(key) = key {
                    w.sched.channel_changed(key);
                }
                Ok(())
            },
        )
    }

    fn create_id(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle> {
        let args = || Args::Text(format!("{channel:?}, {context}, {port_space:?}"));
        self.call(Call::CreateId, args, |w, h| {
            w.create_id(h, channel, context, port_space)
        })
    }

    fn destroy_id(&self, id: IdHandle) -> Result<()> {
        let call = Call::DestroyId;
        let w = self.lock(call)?;
        let w = self.await_mpa_reply(w, call, id)?;
        let w = self.relock(w, call)?;
        let w = self.await_acks(w, id);
        let mut w = self.relock(w, call)?;
        self.run_call(
            &mut w,
            call,
            || Args::Id(id),
            |w, h| {
                let private = (w.id_entry(h, Call::DestroyId, id).ok())
                    .filter(|(_, i)| i.sync)
                    .map(|(_, i)| i.channel);
                w.destroy_id(h, id)?;
                // A process blocked in a synchronous call of the id learns that it is gone.
                if let Some(chan) = private {
                    w.sched.channel_changed(chan);
                }
                Ok(())
            },
        )
    }

    fn bind_addr(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        self.call(
            Call::BindAddr,
            || Args::Text(format!("{id}, {addr}")),
            |w, h| w.bind_addr(h, id, addr),
        )
    }

    fn resolve_addr(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let args = || Args::Text(format!("{id}, {src:?}, {dst}, {timeout:?}"));
        self.call_sync(Call::ResolveAddr, id, args, |w, h| {
            w.resolve_addr(h, id, src, dst, timeout)
        })
    }

    fn resolve_route(&self, id: IdHandle, timeout: Duration) -> Result<()> {
        self.call_sync(
            Call::ResolveRoute,
            id,
            || Args::Text(format!("{id}, {timeout:?}")),
            |w, h| w.resolve_route(h, id, timeout),
        )
    }

    fn listen(&self, id: IdHandle, backlog: i32) -> Result<()> {
        self.call(
            Call::Listen,
            || Args::Text(format!("{id}, {backlog}")),
            |w, h| w.listen(h, id, backlog),
        )
    }

    fn get_request(&self, listen: IdHandle) -> Result<IdHandle> {
        let call = Call::GetRequest;
        let mut w = self.lock(call)?;
        let key = w.id_key(self.host, call, listen)?;
        if !w.id(key).sync || w.id(key).listen().is_none() {
            // librdmacm would block forever on an id that does not listen.
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "rdma_get_request needs a synchronous listening id",
            ));
        }
        if let Some(held) = w.id_mut(key).sync_event.take() {
            w.release_ticket(held.ticket);
        }
        let (mut w, info) = self.wait_sync_event(w, call, key);
        let info = info?;
        let result = match (info.kind, info.status) {
            (EventKind::ConnectRequest, 0) => {
                // The request now belongs to the child, which holds it until accept or destroy.
                let held = w.id_mut(key).sync_event.take().expect("just stored");
                let child = w.id_key(self.host, call, info.id)?;
                w.id_mut(child).sync_event = Some(held);
                Ok(info.id)
            }
            (EventKind::Rejected, _) => Err(CmError::new(call, Errno::ECONNREFUSED, "REJECTED")),
            (_, s) if s != 0 => Err(CmError::new(
                call,
                Errno(s.wrapping_neg()),
                format!("{} with status {s}", info.kind),
            )),
            (kind, _) => Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{kind} instead of a connection request"),
            )),
        };
        let result_shown = match &result {
            Ok(id) => Shown::Id(*id),
            Err(e) => Shown::Errno(e.errno),
        };
        let entry = Entry::GetRequest {
            listen,
            result: result_shown,
        };
        w.record(Some(self.host), TraceKind::Call, entry);
        // The listener may be gone by now (destroyed while the call waited): no QP then.
        let request_qp = (w.kernel.ids.get(&key)).and_then(|l| l.request_qp().copied());
        drop(w);
        let child = result?;
        if let Some(attr) = request_qp {
            // librdmacm creates the QP inside the call, from what rdma_create_ep kept.
            if let Err(e) = attr.create_qp_on(self, child) {
                let _ = self.destroy_id(child);
                return Err(CmError::new(call, e.errno, e.detail));
            }
        }
        Ok(child)
    }

    fn create_ep(&self, info: &AddrInfo, qp_init: Option<&mut QpInitAttr>) -> Result<IdHandle> {
        cmtwin::ep::with_cm_attr(qp_init, |ep| self.create_ep_of(info, ep))
    }

    /// On iWARP the call makes siw's TCP connection: when the peer never answers, it returns
    /// ETIMEDOUT only once TCP gives up, [`IW_TCP_SYN_GIVE_UP`] later, and is traced then.
    fn connect(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let call = Call::Connect;
        let mut w = self.lock(call)?;
        if let Some(rtt) = w.iw_tcp_handshake(self.host, id, param) {
            // siw connects the TCP socket inside the call (kernel_bindconnect) and sends the
            // MPA request before it returns: the call takes the handshake's round trip.
            let cond = Cond {
                channels: Vec::new(),
                deadline: Some(w.now.after(rtt)),
                keys: Vec::new(),
                what: Waiting::InCall(call, id, "siw's TCP handshake"),
            };
            let (woken, blocked) = block(w, cond);
            blocked.map_err(|msg| CmError::new(call, Errno::EDEADLK, msg))?;
            w = woken;
        }
        let (mut w, r) = wait_out_unanswered_tcp(w, self.host, id, param)?;
        self.trace_result(&mut w, call, || Args::Id(id), &r);
        r?;
        let w = self.relock(w, call)?;
        self.complete_sync_locked(w, call, id)
    }

    fn accept(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let call = Call::Accept;
        let mut w = self.lock(call)?;
        self.run_call(&mut w, call, || Args::Id(id), |w, h| w.accept(h, id, param))?;
        let w = self.relock(w, call)?;
        let key = w.id_key(self.host, call, id)?;
        let ud = !w.id(key).qp_type.is_connected();
        let mut w = self.relock(w, call)?;
        if ud {
            // UD: no event follows; a synchronous id just releases its request event.
            let key = w.id_key(self.host, call, id)?;
            if let Some(held) = w.id_mut(key).sync_event.take() {
                w.release_ticket(held.ticket);
            }
            return Ok(());
        }
        self.complete_sync_locked(w, call, id)
    }

    fn reject(&self, id: IdHandle, private_data: &[u8]) -> Result<()> {
        let args = || Args::Text(format!("{id}, {} bytes", private_data.len()));
        self.call(Call::Reject, args, |w, h| w.reject(h, id, private_data))
    }

    fn disconnect(&self, id: IdHandle) -> Result<()> {
        // Before the CM acts, the call moves the id's QP to ERROR (librdmacm, then cma.c's
        // `cma_modify_qp_err`): meanwhile the fabric goes on, and a DREQ from the peer that
        // arrives then is answered with a DREP instead of crossing a DREQ of ours.
        let call = Call::Disconnect;
        let mut w = self.lock(call)?;
        // An id whose device is gone fails at once (ENXIO): no QP to move.
        let has_qp = (w.id_entry(self.host, call, id)).is_ok_and(|(_, i)| {
            i.qp().is_some() && i.state != crate::world::CmState::DeviceRemoval
        });
        let qp_time = if has_qp {
            w.cfg.disconnect_qp_time
        } else {
            Duration::ZERO
        };
        if !qp_time.is_zero() {
            let slept = self.relock(w, Call::Sleep)?;
            w = self.sleep_locked(slept, qp_time, false)?;
        }
        let w = self.relock(w, call)?;
        let w = self.await_mpa_reply(w, call, id)?;
        let mut w = self.relock(w, call)?;
        self.run_call(&mut w, call, || Args::Id(id), |w, h| w.disconnect(h, id))?;
        let w = self.relock(w, call)?;
        self.complete_sync_locked(w, call, id)
    }

    fn notify(&self, id: IdHandle, event: AsyncEvent) -> Result<()> {
        self.call(
            Call::Notify,
            || Args::Text(format!("{id}, {}", event.0)),
            |w, h| w.notify(h, id, event),
        )
    }

    fn establish(&self, id: IdHandle) -> Result<()> {
        self.call(Call::Establish, || Args::Id(id), |w, h| w.establish(h, id))
    }

    fn write_cm_event(&self, id: IdHandle, kind: EventKind, status: i32, arg: u64) -> Result<()> {
        let args = || Args::Text(format!("{id}, {kind}, {status}, {arg}"));
        self.call(Call::WriteCmEvent, args, |w, h| {
            w.write_cm_event(h, id, kind, status, arg)
        })
    }

    fn get_cm_event(&self, channel: ChannelHandle, wait: Wait) -> Result<CmEvent> {
        self.wait_armed(&[channel], wait, |_, e| e, |e| e)
    }

    fn ack_cm_event(&self, mut event: CmEvent) -> Result<()> {
        let r = self
            .lock(Call::AckCmEvent)
            .and_then(|mut w| w.ack_cm_event(self.host, &event));
        if r.is_ok() {
            event.disarm();
        }
        // The world is unlocked here: an event the ack refused is released by its drop, at
        // the end (in place: the event is not moved again).
        r
    }

    fn get_cm_event_any(
        &self,
        channels: &[ChannelHandle],
        wait: Wait,
    ) -> Result<(ChannelHandle, CmEvent)> {
        self.wait_armed(channels, wait, |c, e| (c, e), |(_, e)| e)
    }

    fn try_get_cm_event(
        &self,
        channels: &[ChannelHandle],
    ) -> Result<Option<(ChannelHandle, CmEvent)>> {
        let call = Call::GetCmEvent;
        let mut found = {
            let mut w = self.lock(call)?;
            self.fetch_first(&mut w, call, channels, |c, e| (c, e))?
        };
        // Armed only now that the world is unlocked: dropping it locks the world.
        if let Some((_, event)) = &mut found {
            event.arm(self.release_path());
        }
        Ok(found)
    }

    fn poll_channels(&self, channels: &[ChannelHandle], wait: Wait) -> Result<Vec<ChannelHandle>> {
        let r = self.wait_ready(channels, wait);
        let Ok(mut w) = self.lock(Call::Poll) else {
            return r;
        };
        if w.trace.is_on() {
            let result = match &r {
                Ok(ready) => Shown::Text(list(ready)),
                Err(e) => Shown::Errno(e.errno),
            };
            let args = Args::Text(format!("{}, {wait:?}", list(channels)));
            let entry = Entry::Call {
                call: Call::Poll,
                args,
                result,
            };
            w.record(Some(self.host), TraceKind::Call, entry);
        }
        r
    }

    fn join_multicast(&self, id: IdHandle, addr: SocketAddr, context: u64) -> Result<()> {
        let call = Call::JoinMulticast;
        let args = || Args::Text(format!("{id}, {addr}, {context}"));
        self.call(call, args, |w, h| {
            w.join_multicast(h, call, id, addr, JoinFlags::FullMember, context)
        })?;
        self.complete_sync(call, id)
    }

    fn join_multicast_ex(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()> {
        let call = Call::JoinMulticastEx;
        let args = || Args::Text(format!("{id}, {addr}, {flags:?}, {context}"));
        self.call(call, args, |w, h| {
            w.join_multicast(h, call, id, addr, flags, context)
        })?;
        self.complete_sync(call, id)
    }

    fn leave_multicast(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        self.call(
            Call::LeaveMulticast,
            || Args::Text(format!("{id}, {addr}")),
            |w, h| w.leave_multicast(h, id, addr),
        )
    }

    fn resolve_addrinfo(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()> {
        let args = || Args::Text(format!("{id}, {node:?}, {service:?}, {hints:?}"));
        self.call(Call::ResolveAddrinfo, args, |w, h| {
            w.resolve_addrinfo(h, id, node, service, hints)
        })?;
        self.complete_sync(Call::ResolveAddrinfo, id)
    }

    fn query_addrinfo(&self, id: IdHandle) -> Result<Vec<AddrInfo>> {
        self.call(
            Call::QueryAddrinfo,
            || Args::Id(id),
            |w, h| w.query_addrinfo(h, id),
        )
    }

    fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>> {
        self.call(
            Call::GetAddrinfo,
            || Args::Text(format!("{node:?}, {service:?}, {hints:?}")),
            |w, _| w.getaddrinfo(node, service, hints),
        )
    }

    fn migrate_id(&self, id: IdHandle, channel: Option<ChannelHandle>) -> Result<()> {
        self.call(
            Call::MigrateId,
            || Args::Text(format!("{id}, {channel:?}")),
            |w, h| w.migrate_id(h, id, channel),
        )
    }

    fn set_option(&self, id: IdHandle, option: &CmOption) -> Result<()> {
        self.call(
            Call::SetOption,
            || Args::Text(format!("{id}, {option:?}")),
            |w, h| w.set_option(h, id, option),
        )?;
        if matches!(option, CmOption::IbPath(_)) {
            return self.complete_sync(Call::SetOption, id);
        }
        Ok(())
    }

    fn create_qp(&self, id: IdHandle, attr: &QpInitAttr) -> Result<u32> {
        self.call(
            Call::CreateQp,
            || Args::Text(format!("{id}, {:?}", attr.qp_type)),
            |w, h| w.create_qp(h, id, attr),
        )
    }

    fn destroy_qp(&self, id: IdHandle) -> Result<()> {
        self.call(Call::DestroyQp, || Args::Id(id), |w, h| w.destroy_qp(h, id))
    }

    fn sync_event(&self, id: IdHandle) -> Result<Option<EventInfo>> {
        self.query(Call::SyncEvent, id, |i| {
            i.sync_event.as_ref().map(|held| held.info.clone())
        })
    }

    fn local_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.query(Call::LocalAddr, id, |i| i.user_local())
    }

    fn peer_addr(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.query(Call::PeerAddr, id, |i| i.user_peer())
    }

    fn context(&self, id: IdHandle) -> Result<u64> {
        self.query(Call::Context, id, |i| i.context)
    }

    fn set_context(&self, id: IdHandle, context: u64) -> Result<()> {
        let call = Call::SetContext;
        let args = || Args::Text(format!("{id}, {context}"));
        self.call(call, args, |w, h| {
            let key = w.id_key(h, call, id)?;
            w.id_mut(key).context = context;
            Ok(())
        })
    }

    fn qp_num(&self, id: IdHandle) -> Result<Option<u32>> {
        self.query(Call::QpNum, id, |i| i.qp())
    }

    fn devices(&self) -> Result<Vec<cmtwin::DeviceInfo>> {
        let w = self.lock(Call::GetDevices)?;
        w.devices(self.host)
    }

    fn id_device(&self, id: IdHandle) -> Result<Option<cmtwin::IdDevice>> {
        let w = self.lock(Call::IdDevice)?;
        w.id_device_info(self.host, id)
    }

    fn now(&self) -> Duration {
        self.shared.lock().now.as_duration()
    }

    /// Sleeps in virtual time; a zero sleep of a simulated process yields to the others.
    fn sleep(&self, duration: Duration) -> Result<()> {
        let w = self.lock(Call::Sleep)?;
        self.sleep_locked(w, duration, true).map(drop)
    }

    /// Inside [`crate::Fabric::run`], a poll in vain whose process also waits for `until`;
    /// outside, the caller is the only one running: the fabric runs its next action, or moves
    /// its clock to `until` when nothing is due by then.
    fn spin(&self, until: Option<Duration>) -> Result<()> {
        let call = Call::Sleep;
        let mut w = self.lock(call)?;
        let horizon = until.map(|u| crate::engine::timeline::SimTime(0).after(u));
        if current_process(w.fabric_no).is_some() {
            yield_now_until(w, horizon).map_err(|m| CmError::new(call, Errno::EDEADLK, m))?;
        } else {
            w.advance_until(horizon);
        }
        Ok(())
    }
}
