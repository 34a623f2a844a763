//! Runs a case on a [`TestBed`]: makes each op's call, checks its result against the model's
//! prediction (success, or the exact errno and the call named), then fetches every event the
//! model expects, one at a time with a bounded wait (so that what the next call finds does not
//! depend on timing, on a real machine either), and checks its kind, id and status.

use std::net::SocketAddr;

use cmtwin::{
    max_private_data, Call, CmBackend, ConnParam, Errno, EventInfo, EventKind, IdHandle, PortSpace,
    PrivateDataOp, QpInitAttr, QpType, Result, Transport, Wait,
};

use super::op::{LossyCall, Op, OverMaxCall, Target};
use super::predict::{predict, EventFor, Expected, IdCall, Prediction, QUIET};
use super::state::{IdState, ModelId, World, THIRD_SLOT};
use super::stats::CaseStats;
use crate::capability::Need;
use crate::steps::{pattern, WAIT};
use crate::TestBed;
use cmtwin_sim::MessageKind;

/// A check's failure: what the model predicted and what came.
pub type Check = std::result::Result<(), String>;

/// A case in progress: the bed, the model's state and the coverage so far.
pub struct Case<'a, T: TestBed> {
    bed: &'a T,
    world: World,
    stats: CaseStats,
    verbose: bool,
}

/// Runs `ops` on `bed` from a fresh start (a server channel and a listener), then polls every
/// channel (nothing may be left) and destroys every id and channel, each step checked against
/// the model. Returns the case's coverage, or the first disagreement, naming the op.
pub fn run_case<T: TestBed>(bed: &T, ops: &[Op]) -> std::result::Result<CaseStats, String> {
    let mut case = Case {
        bed,
        world: World::default(),
        stats: CaseStats::default(),
        verbose: std::env::var_os("CMTWIN_MODEL_VERBOSE").is_some(),
    };
    case.relisten()
        .map_err(|e| format!("setting up the listener: {e}"))?;
    for (i, op) in ops.iter().enumerate() {
        if case.verbose {
            eprintln!("op {i}: {op:?}");
        }
        case.apply(*op)
            .map_err(|e| format!("op {i} ({op:?}): {e}"))?;
    }
    case.finish().map_err(|e| format!("teardown: {e}"))?;
    Ok(case.stats)
}

impl<T: TestBed> Case<'_, T> {
    fn cm(&self, server: bool) -> &T::Backend {
        if server {
            self.bed.server()
        } else {
            self.bed.client()
        }
    }

    /// The backend of the server, the client or (`third`) the bed's third host.
    fn cm_at(&self, server: bool, third: bool) -> &T::Backend {
        match self.bed.third() {
            Some(cm) if third => cm,
            _ => self.cm(server),
        }
    }

    fn apply(&mut self, op: Op) -> Check {
        match op {
            Op::NewClient { slot, ud } => self.new_client(slot, ud),
            Op::Relisten => self.relisten(),
            Op::Bind(t) => self.id_call(t, IdCall::Bind, 0),
            Op::ResolveAddr(t) => self.id_call(t, IdCall::ResolveAddr, 0),
            Op::ResolveRoute(t) => self.id_call(t, IdCall::ResolveRoute, 0),
            Op::CreateQp(t) => self.id_call(t, IdCall::CreateQp, 0),
            Op::Connect { target, param, len } => {
                self.id_call(target, IdCall::Connect { param }, len)
            }
            Op::Listen(t) => self.id_call(t, IdCall::Listen, 0),
            Op::Accept { target, len } => self.id_call(target, IdCall::Accept, len),
            Op::Reject { target, len } => self.id_call(target, IdCall::Reject, len),
            Op::Disconnect(t) => self.id_call(t, IdCall::Disconnect, 0),
            Op::Notify(t) => self.id_call(t, IdCall::Notify, 0),
            Op::Establish(t) => self.id_call(t, IdCall::Establish, 0),
            Op::DestroyId(t) => self.id_call(t, IdCall::DestroyId, 0),
            Op::OverMax { target, call } => self.id_call(target, IdCall::OverMax(call), 0),
            Op::StrayCreate { slot, bad_ps } => self.stray_create(slot, bad_ps),
            Op::ForeignDestroy(t) => self.foreign_destroy(t),
            Op::Poll { slot } => match self.world.channel_of(slot) {
                Some(ch) => self.poll(ch),
                None => self.not_made(),
            },
            Op::DestroyChannel { slot } => match self.world.channel_of(slot) {
                Some(ch) => self.destroy_channel(ch),
                None => self.not_made(),
            },
            Op::Lossy { target, call, lost } => self.lossy(target, call, lost),
        }
    }

    /// An op drawn with nothing to call it on, or with no exact prediction: no call is made,
    /// nothing is checked or counted as passed; the statistics count it apart.
    fn not_made(&mut self) -> Check {
        self.stats.not_made += 1;
        if self.verbose {
            eprintln!("    not made: no target, or no exact prediction");
        }
        Ok(())
    }

    /// Checks `result` against the prediction that `call` succeeds (`None`) or fails with
    /// `errno`, and counts the call.
    fn expect<R: std::fmt::Debug>(
        &mut self,
        call: Call,
        result: Result<R>,
        errno: Option<Errno>,
    ) -> std::result::Result<Option<R>, String> {
        if self.verbose {
            eprintln!("    {call}: {result:?}, predicted {errno:?}");
        }
        let value = match (result, errno) {
            (Ok(value), None) => Some(value),
            (Err(err), Some(errno)) if err.errno == errno && err.call == call => None,
            (Ok(value), Some(errno)) => {
                return Err(format!(
                    "{call}: predicted {errno}, but it succeeded ({value:?})"
                ))
            }
            (Err(err), errno) => {
                let predicted = errno.map_or("success".to_string(), |e| e.to_string());
                return Err(format!("{call}: predicted {predicted}, got {err}"));
            }
        };
        self.stats.call(call, errno);
        Ok(value)
    }

    /// A channel for `slot` if it has no live one, and a new TCP id on it, or a UDP one (a TCP
    /// one on iWARP, which has no UD).
    fn new_client(&mut self, slot: usize, ud: bool) -> Check {
        let third = slot == THIRD_SLOT;
        if third && self.bed.third().is_none() {
            return self.not_made();
        }
        let ud = ud && has_ud(self.bed.transport());
        let ch = match self.world.slots[slot].channel {
            Some(ch) if self.world.channels[ch].live => ch,
            _ => {
                let r = self.cm_at(false, third).create_event_channel();
                let handle = self.expect(Call::CreateEventChannel, r, None)?.expect("ok");
                let ch = self.world.add_channel(handle, false);
                self.world.channels[ch].third = third;
                self.world.slots[slot].channel = Some(ch);
                ch
            }
        };
        let handle = self.world.channels[ch].handle;
        let r = self
            .cm_at(false, third)
            .create_id(Some(handle), 0, port_space(ud));
        let id = self.expect(Call::CreateId, r, None)?.expect("ok");
        let mut model = ModelId::new(id, false, ch, ud);
        model.third = third;
        let idx = self.world.add_id(model);
        self.world.slots[slot] = super::state::Slot {
            channel: Some(ch),
            client: Some(idx),
            child: None,
        };
        Ok(())
    }

    /// A new TCP listener on the server's channel (made first if it has none), on a fresh
    /// port, and a UDP one where the transport has UD.
    fn relisten(&mut self) -> Check {
        let ch = match self.world.server_channel {
            Some(ch) if self.world.channels[ch].live => ch,
            _ => {
                let r = self.bed.server().create_event_channel();
                let handle = self.expect(Call::CreateEventChannel, r, None)?.expect("ok");
                let ch = self.world.add_channel(handle, true);
                self.world.server_channel = Some(ch);
                ch
            }
        };
        let (idx, addr) = self.listen(ch, false)?;
        self.world.listener = Some(idx);
        self.world.dst = Some(addr);
        if has_ud(self.bed.transport()) {
            self.world.ud_dst = Some(self.listen(ch, true)?.1);
        }
        Ok(())
    }

    /// A listener of the port space (`ud`: UDP) on channel `ch`: its index and address.
    fn listen(&mut self, ch: usize, ud: bool) -> std::result::Result<(usize, SocketAddr), String> {
        let cm = self.bed.server();
        let r = cm.create_id(Some(self.world.channels[ch].handle), 0, port_space(ud));
        let id = self.expect(Call::CreateId, r, None)?.expect("ok");
        let addr = self.bed.server_addr();
        let r = self.bed.server().bind_addr(id, addr);
        self.expect(Call::BindAddr, r, None)?;
        let r = self.bed.server().listen(id, 8);
        self.expect(Call::Listen, r, None)?;
        let mut model = ModelId::new(id, true, ch, ud);
        model.state = IdState::Listen;
        model.listen_addr = Some(addr);
        Ok((self.world.add_id(model), addr))
    }

    /// Makes `call` on the id `target` names, if the model predicts its outcome, and checks it
    /// and the events that follow.
    fn id_call(&mut self, target: Target, call: IdCall, len: u8) -> Check {
        let Some(idx) = self.world.target(target) else {
            return self.not_made();
        };
        let Some(prediction) = predict(&self.world, self.bed.transport(), idx, call) else {
            return self.not_made();
        };
        self.make_predicted(idx, call, len, prediction)
    }

    /// [`Op::Lossy`]: where the bed can lose CM messages and the model predicts that the call
    /// succeeds and sends the message, the next `lost` messages of its kind are lost and the
    /// call is made: the IB CM retransmits them (§15.2: REQ, REP and DREQ after their
    /// response timeout; a lost RTU makes the passive side resend its REP, answered by a new
    /// RTU), so the predicted events come, later (the first retry of RoCE's 6.1 profile at
    /// about 6.3 s, the second at twice that, within [`WAIT`]).
    fn lossy(&mut self, target: Target, lossy: LossyCall, lost: u8) -> Check {
        if self.bed.lacks(Need::CmMessageLoss).is_some() {
            return self.not_made();
        }
        let Some(idx) = self.world.target(target) else {
            return self.not_made();
        };
        let (call, kind) = match lossy {
            LossyCall::ConnectReq => (IdCall::Connect { param: true }, MessageKind::Req),
            LossyCall::AcceptRep => (IdCall::Accept, MessageKind::Rep),
            LossyCall::AcceptRtu => (IdCall::Accept, MessageKind::Rtu),
            LossyCall::DisconnectDreq => (IdCall::Disconnect, MessageKind::Dreq),
        };
        let Some(prediction) = predict(&self.world, self.bed.transport(), idx, call) else {
            return self.not_made();
        };
        if self.exchange_pending_besides(idx) {
            return self.not_made();
        }
        let id = &self.world.ids[idx];
        let sends = prediction.errno.is_none()
            && !id.ud
            && match lossy {
                LossyCall::ConnectReq => true,
                LossyCall::AcceptRep | LossyCall::AcceptRtu => id.state == IdState::Requested,
                LossyCall::DisconnectDreq => prediction.now.contains(&(idx, IdState::DreqSent)),
            };
        if !sends {
            return self.not_made();
        }
        self.bed
            .lose_cm_messages(kind, lost.into())
            .map_err(|e| format!("losing {lost} {kind:?}: {e}"))?;
        if self.verbose {
            eprintln!("    fault: the next {lost} {kind:?} lost");
        }
        self.stats.fault(lossy);
        self.make_predicted(idx, call, 0, prediction)
    }

    /// Whether an id other than `idx` and its peer waits on a CM timer: a request not
    /// answered yet (its REQ or SIDR REQ is retransmitted every few seconds) or a disconnect
    /// half done (DREQ retransmitted until answered, then timewait). A lost message costs
    /// seconds of waiting for the retransmission, in which those timers fire; a retransmitted
    /// request then arriving just after its answer is a new request for the server (CONNECT_
    /// REQUEST of a requester that gave up: found by the `cm_model` fuzz target), which the
    /// model does not predict. So messages are lost only while nothing else is pending.
    fn exchange_pending_besides(&self, idx: usize) -> bool {
        let peer = self.world.ids[idx].peer;
        self.world.ids.iter().enumerate().any(|(i, id)| {
            i != idx
                && Some(i) != peer
                && id.live()
                && matches!(
                    id.state,
                    IdState::Requested | IdState::DreqSent | IdState::DreqReceived
                )
        })
    }

    /// Makes `call` on id `idx` with the model's `prediction`, and checks it and the events
    /// that follow.
    fn make_predicted(
        &mut self,
        idx: usize,
        call: IdCall,
        len: u8,
        prediction: Prediction,
    ) -> Check {
        let id = self.world.ids[idx].clone();
        let result = self.make(&id, call, len);
        self.expect(prediction.call, result, prediction.errno)?;
        if prediction.errno.is_none() {
            self.learn(idx, call);
        }
        self.follow(&prediction)
    }

    /// Makes the call itself.
    fn make(&self, id: &ModelId, call: IdCall, len: u8) -> Result<()> {
        let cm = self.cm_at(id.server, id.third);
        let data = pattern(len.into(), 0x5a);
        let param = ConnParam::with_private_data(&data);
        let timeout = crate::steps::RESOLVE_TIMEOUT;
        let h = id.handle;
        match call {
            IdCall::Bind => {
                let ip = match self.bed.third_ip() {
                    Some(ip) if id.third => ip,
                    _ if id.server => self.bed.server_ip(),
                    _ => self.bed.client_ip(),
                };
                cm.bind_addr(h, SocketAddr::new(ip, self.bed.fresh_port()))
            }
            IdCall::ResolveAddr => {
                let dst = self
                    .world
                    .dst_for(id.ud)
                    .expect("a listener was made first");
                cm.resolve_addr(h, None, dst, timeout)
            }
            IdCall::ResolveRoute => cm.resolve_route(h, timeout),
            IdCall::CreateQp => {
                let qp_type = if id.ud { QpType::Ud } else { QpType::Rc };
                cm.create_qp(h, &QpInitAttr::new(qp_type)).map(|_| ())
            }
            IdCall::Connect { param: true } => cm.connect(h, Some(&param)),
            IdCall::Connect { param: false } => cm.connect(h, None),
            IdCall::Listen => cm.listen(h, 8),
            IdCall::Accept => cm.accept(h, Some(&param)),
            IdCall::Reject => cm.reject(h, &data),
            IdCall::Disconnect => cm.disconnect(h),
            IdCall::Notify => cm.notify(h, cmtwin::AsyncEvent::COMM_EST),
            IdCall::Establish => cm.establish(h),
            IdCall::DestroyId => cm.destroy_id(h),
            IdCall::OverMax(which) => {
                let op = match which {
                    OverMaxCall::Connect if id.ud => PrivateDataOp::ConnectUd,
                    OverMaxCall::Accept if id.ud => PrivateDataOp::AcceptUd,
                    OverMaxCall::Reject if id.ud => PrivateDataOp::RejectUd,
                    OverMaxCall::Connect => PrivateDataOp::Connect,
                    OverMaxCall::Accept => PrivateDataOp::Accept,
                    OverMaxCall::Reject => PrivateDataOp::Reject,
                };
                let data = pattern(max_private_data(self.bed.transport(), op) + 1, 0x3c);
                match which {
                    OverMaxCall::Connect => {
                        cm.connect(h, Some(&ConnParam::with_private_data(&data)))
                    }
                    OverMaxCall::Accept => cm.accept(h, Some(&ConnParam::with_private_data(&data))),
                    OverMaxCall::Reject => cm.reject(h, &data),
                }
            }
        }
    }

    /// What a successful call taught the model beyond its state change.
    fn learn(&mut self, idx: usize, call: IdCall) {
        let dst = self.world.dst_for(self.world.ids[idx].ud);
        let id = &mut self.world.ids[idx];
        match call {
            IdCall::CreateQp => id.qp = true,
            IdCall::ResolveAddr => id.dst = dst,
            IdCall::Listen => id.wildcard = id.state == IdState::Idle,
            _ => {}
        }
    }

    /// Applies a prediction's state changes and checks the events it expects.
    fn follow(&mut self, prediction: &Prediction) -> Check {
        for (idx, state) in &prediction.now {
            self.world.ids[*idx].state = *state;
        }
        for expected in &prediction.events {
            self.expect_event(expected)?;
        }
        if let Some(ch) = prediction.quiet {
            let channel = self.world.channels[ch];
            let r = self
                .cm_at(channel.server, channel.third)
                .get_cm_event(channel.handle, Wait::Timeout(QUIET));
            self.expect(
                Call::GetCmEvent,
                r.map(|e| e.info().clone()),
                Some(Errno::ETIMEDOUT),
            )?;
        }
        Ok(())
    }

    /// Fetches the next event of the expected event's channel (waiting at most
    /// [`WAIT`]), acks it and checks it.
    fn expect_event(&mut self, expected: &Expected) -> Check {
        let channel = self.world.channels[expected.channel];
        let cm = self.cm_at(channel.server, channel.third);
        let event = cm
            .get_cm_event(channel.handle, Wait::Timeout(WAIT))
            .map_err(|e| format!("waiting for {expected:?}: {e}"))?;
        let info = event.info().clone();
        cm.ack_cm_event(event)
            .map_err(|e| format!("acking {}: {e}", info.kind))?;
        if self.verbose {
            eprintln!(
                "    event {} status {} for {}",
                info.kind, info.status, info.id
            );
        }
        let what = || {
            format!(
                "expected {expected:?}, got {} status {} for {}",
                info.kind, info.status, info.id
            )
        };
        if info.kind != expected.kind || info.status != expected.status {
            return Err(what());
        }
        match expected.id {
            EventFor::Id(idx) => {
                if info.id != self.world.ids[idx].handle {
                    return Err(what());
                }
                self.world.ids[idx].state = expected.then;
            }
            EventFor::Request { listener, client } => {
                if info.listen_id != Some(self.world.ids[listener].handle) || self.known(info.id) {
                    return Err(what());
                }
                self.learn_child(&info, expected.channel, client);
            }
        }
        self.stats.event(info.kind);
        if info.kind == EventKind::Established {
            self.stats.hosts_connected(self.world.hosts_connected());
        }
        Ok(())
    }

    fn known(&self, id: IdHandle) -> bool {
        self.world.ids.iter().any(|m| m.handle == id)
    }

    /// A CONNECT_REQUEST's child: linked with its initiator, and the child of the initiator's
    /// slot.
    fn learn_child(&mut self, info: &EventInfo, channel: usize, client: usize) {
        let mut child = ModelId::new(info.id, true, channel, self.world.ids[client].ud);
        child.state = IdState::Requested;
        child.peer = Some(client);
        let idx = self.world.add_id(child);
        self.world.ids[client].peer = Some(idx);
        for slot in &mut self.world.slots {
            if slot.client == Some(client) {
                slot.child = Some(idx);
            }
        }
    }

    /// `rdma_create_id` on a slot's channel: an unknown port space on a live channel is EINVAL
    /// (handles::invalid_port_space_is_einval), a TCP id on a destroyed one EBADF
    /// (handles::destroyed_channel_is_ebadf), a TCP id on a live one a new id of no slot.
    /// An unknown port space on a destroyed channel is not predicted (which check comes first
    /// is librdmacm's business).
    fn stray_create(&mut self, slot: usize, bad_ps: bool) -> Check {
        let Some(ch) = self.world.slots[slot].channel else {
            return self.not_made();
        };
        let channel = self.world.channels[ch];
        let errno = match (channel.live, bad_ps) {
            (true, true) => Some(Errno::EINVAL),
            (false, false) => Some(Errno::EBADF),
            (true, false) => None,
            (false, true) => return self.not_made(),
        };
        let ps = if bad_ps {
            PortSpace(0x0107)
        } else {
            PortSpace::TCP
        };
        let r = self
            .cm_at(false, channel.third)
            .create_id(Some(channel.handle), 0, ps);
        if let Some(id) = self.expect(Call::CreateId, r, errno)? {
            let mut model = ModelId::new(id, false, ch, false);
            model.third = channel.third;
            self.world.add_id(model);
        }
        Ok(())
    }

    /// `rdma_destroy_id` on the other host's backend: ENOENT (handles::foreign_handles_are_refused).
    fn foreign_destroy(&mut self, target: Target) -> Check {
        let Some(idx) = self.world.target(target) else {
            return self.not_made();
        };
        let id = &self.world.ids[idx];
        let r = self.cm(!id.server).destroy_id(id.handle);
        self.expect(Call::DestroyId, r, Some(Errno::ENOENT))?;
        Ok(())
    }

    /// A non-blocking fetch: EAGAIN, every expected event having been fetched; EBADF on a
    /// destroyed channel (channels::nonblocking_fetch_on_empty_channel_is_eagain,
    /// handles::destroyed_channel_is_ebadf).
    fn poll(&mut self, ch: usize) -> Check {
        let channel = self.world.channels[ch];
        let errno = if channel.live {
            Errno::EAGAIN
        } else {
            Errno::EBADF
        };
        let r = self
            .cm_at(channel.server, channel.third)
            .get_cm_event(channel.handle, Wait::NonBlocking);
        self.expect(Call::GetCmEvent, r.map(|e| e.info().clone()), Some(errno))?;
        Ok(())
    }

    /// EBUSY while a live id uses the channel (channels::destroy_channel_with_live_id_is_ebusy),
    /// EBADF once destroyed, else success.
    fn destroy_channel(&mut self, ch: usize) -> Check {
        let channel = self.world.channels[ch];
        let errno = if !channel.live {
            Some(Errno::EBADF)
        } else if self.world.channel_in_use(ch) {
            Some(Errno::EBUSY)
        } else {
            None
        };
        let r = self
            .cm_at(channel.server, channel.third)
            .destroy_event_channel(channel.handle);
        self.expect(Call::DestroyEventChannel, r, errno)?;
        if errno.is_none() {
            self.world.channels[ch].live = false;
        }
        Ok(())
    }

    /// Polls every live channel, then destroys every live id (latest first, listeners last)
    /// and every channel, each checked.
    fn finish(&mut self) -> Check {
        for ch in 0..self.world.channels.len() {
            if self.world.channels[ch].live {
                self.poll(ch)?;
            }
        }
        let is_listener = |m: &ModelId| m.server && m.listen_addr.is_some();
        let order: Vec<usize> = (0..self.world.ids.len())
            .rev()
            .filter(|i| !is_listener(&self.world.ids[*i]))
            .chain((0..self.world.ids.len()).filter(|i| is_listener(&self.world.ids[*i])))
            .collect();
        for idx in order {
            if self.world.ids[idx].live() {
                self.id_call(Target::Any(idx), IdCall::DestroyId, 0)?;
            }
        }
        for ch in 0..self.world.channels.len() {
            if self.world.channels[ch].live {
                self.destroy_channel(ch)?;
            }
        }
        Ok(())
    }
}

/// Whether the transport has UD QPs and SIDR (not iWARP, CM-SEMANTICS §13.2).
fn has_ud(transport: Transport) -> bool {
    transport != Transport::Iwarp
}

/// The port space of a TCP or (`ud`) UDP id.
fn port_space(ud: bool) -> PortSpace {
    if ud {
        PortSpace::UDP
    } else {
        PortSpace::TCP
    }
}
