//! The connection steps the ports share: expected CM events, a client connect that retries
//! while the server is not yet listening, completions waited for through a completion channel
//! while the CM channel is watched for the peer's DISCONNECTED, and the verbs objects of a
//! connection, released in the order libibverbs requires.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, MemoryRegion, WorkCompletion};
use cmtwin::{
    ChannelHandle, CmError, CompChannelHandle, ConnParam, CqHandle, Errno, EventKind, IdHandle,
    PdHandle, PortSpace, Result, Wait,
};

/// The bound of every CM event wait and of every completion wait.
pub const STEP: Duration = Duration::from_secs(30);
/// The address and route resolution timeout the C tools use (2000 ms).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// How long a completion wait blocks on the completion channel before it looks at the CM
/// channel (only a quiet connection looks there, so that a busy one pays nothing for it).
const CQ_SLICE: Duration = Duration::from_millis(10);
/// The pause between two connect attempts of a client whose server does not listen yet.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Waits for the next event of `channel`, acknowledges it, and checks that it is `kind`;
/// returns its id.
pub fn expect_event<B: DataPath>(
    cm: &B,
    channel: ChannelHandle,
    kind: EventKind,
) -> Result<IdHandle> {
    let event = cm.get_cm_event(channel, Wait::Timeout(STEP))?;
    let (got, status, id) = (event.kind(), event.status(), event.id());
    cm.ack_cm_event(event)?;
    if got != kind {
        return Err(CmError::application(format!(
            "{got} (status {status}) instead of {kind}"
        )));
    }
    Ok(id)
}

/// The verbs objects of one connection's QP: a PD, CQs, an optional completion channel and
/// registered regions.
#[derive(Debug)]
pub struct Verbs {
    /// The protection domain of the QP and the regions.
    pub pd: PdHandle,
    /// The completion channel the CQs report to, if any.
    pub channel: Option<CompChannelHandle>,
    /// The CQs, in creation order.
    pub cqs: Vec<CqHandle>,
    /// The regions, in registration order.
    pub regions: Vec<MemoryRegion>,
}

impl Verbs {
    /// A PD on `id`'s device, with a completion channel if `with_channel`.
    pub fn new<B: DataPath>(cm: &B, id: IdHandle, with_channel: bool) -> Result<Verbs> {
        let pd = cm.alloc_pd(id)?;
        let channel = if with_channel {
            Some(cm.create_comp_channel(id)?)
        } else {
            None
        };
        Ok(Verbs {
            pd,
            channel,
            cqs: Vec::new(),
            regions: Vec::new(),
        })
    }

    /// A CQ of `cqe` entries on `id`'s device, reporting to the channel if there is one.
    pub fn cq<B: DataPath>(&mut self, cm: &B, id: IdHandle, cqe: u32) -> Result<CqHandle> {
        let cq = cm.create_cq(id, cqe, self.channel)?;
        self.cqs.push(cq);
        Ok(cq)
    }

    /// A region of `len` zero bytes in the PD with `access`.
    pub fn region<B: DataPath>(
        &mut self,
        cm: &B,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        let mr = cm.reg_mr(self.pd, vec![0; len], access)?;
        self.regions.push(mr);
        Ok(mr)
    }

    /// Destroys `id`'s QP (if it has one), then the regions, CQs, channel and PD.
    pub fn release<B: DataPath>(self, cm: &B, id: IdHandle) -> Result<()> {
        if cm.qp(id)?.is_some() {
            cm.destroy_qp(id)?;
        }
        for mr in self.regions {
            cm.dereg_mr(mr.handle)?;
        }
        for cq in self.cqs {
            cm.destroy_cq(cq)?;
        }
        if let Some(channel) = self.channel {
            cm.destroy_comp_channel(channel)?;
        }
        cm.dealloc_pd(self.pd)
    }
}

/// Connects a new id of `channel` to `server` with `param`, `prepare` giving the id its QP
/// and objects once the route is resolved (before the connect, so it may post receives).
/// While the server rejects the connect (nobody listens there yet) and `patience` has not
/// passed, the attempt is undone (the objects released as [`Verbs`]) and made again. Returns
/// the ESTABLISHED id and what `prepare` gave it.
pub fn connect_when_listening<B: DataPath, S: Into<Verbs>>(
    cm: &B,
    channel: ChannelHandle,
    server: SocketAddr,
    param: &ConnParam,
    patience: Duration,
    mut prepare: impl FnMut(IdHandle) -> Result<S>,
) -> Result<(IdHandle, S)> {
    let start = cm.now();
    loop {
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT)?;
        expect_event(cm, channel, EventKind::AddrResolved)?;
        cm.resolve_route(id, RESOLVE_TIMEOUT)?;
        expect_event(cm, channel, EventKind::RouteResolved)?;
        let prepared = prepare(id)?;
        cm.connect(id, Some(param))?;
        let event = cm.get_cm_event(channel, Wait::Timeout(STEP))?;
        let (kind, status) = (event.kind(), event.status());
        cm.ack_cm_event(event)?;
        match kind {
            EventKind::Established => return Ok((id, prepared)),
            EventKind::Rejected if cm.now() - start < patience => {
                prepared.into().release(cm, id)?;
                cm.destroy_id(id)?;
                cm.sleep(RETRY_PAUSE)?;
            }
            _ => {
                return Err(CmError::application(format!(
                    "connecting to {server}: {kind} (status {status})"
                )))
            }
        }
    }
}

/// What a completion wait found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The CQ's oldest completion.
    Completion(WorkCompletion),
    /// The peer disconnected (the DISCONNECTED event was acknowledged).
    Disconnected,
}

/// Waits for the completions of one CQ through its completion channel, as rping's CQ thread
/// does, and meanwhile watches the connection's CM channel for the peer's DISCONNECTED (and
/// lets a late ESTABLISHED of the passive side pass).
#[derive(Clone, Copy, Debug)]
pub struct CompletionWait {
    cq: CqHandle,
    channel: CompChannelHandle,
    cm_channel: ChannelHandle,
}

impl CompletionWait {
    /// Arms `cq`, whose completion channel is `channel`, and watches `cm_channel`.
    pub fn new<B: DataPath>(
        cm: &B,
        cq: CqHandle,
        channel: CompChannelHandle,
        cm_channel: ChannelHandle,
    ) -> Result<CompletionWait> {
        cm.req_notify_cq(cq, false)?;
        Ok(CompletionWait {
            cq,
            channel,
            cm_channel,
        })
    }

    /// The next completion, or the peer's disconnect; ETIMEDOUT-like application error when
    /// neither comes within [`STEP`], and any other CM event is an error naming it.
    pub fn next<B: DataPath>(&self, cm: &B) -> Result<Next> {
        // The clock is read only after a quiet slice: in a VM under software emulation a
        // clock read is a system call (and a read of an emulated timer) that costs about as
        // much as the rest of a wait, and a busy connection has no quiet slice. The first
        // quiet slice began at least CQ_SLICE after this call: the deadline it anchors is
        // never earlier than STEP after the call.
        let mut deadline = None;
        let mut wc = [WorkCompletion::default()];
        // The CQ is armed and was polled empty since: only a CQ event can bring a completion
        // (so an empty poll never waits in place of the CM channel's look).
        let mut may_have = true;
        loop {
            if may_have && cm.poll_cq(self.cq, &mut wc)? == 1 {
                return Ok(Next::Completion(wc[0]));
            }
            may_have = false;
            match cm.get_cq_event(self.channel, Wait::Timeout(CQ_SLICE)) {
                Ok(cq) => {
                    cm.ack_cq_events(cq, 1)?;
                    cm.req_notify_cq(cq, false)?;
                    may_have = true;
                    continue;
                }
                Err(e) if e.errno == Errno::ETIMEDOUT => {}
                Err(e) => return Err(e),
            }
            // A quiet slice: has the peer gone?
            if let Some((_, event)) = cm.try_get_cm_event(&[self.cm_channel])? {
                let (kind, status) = (event.kind(), event.status());
                cm.ack_cm_event(event)?;
                match kind {
                    EventKind::Disconnected => return Ok(Next::Disconnected),
                    EventKind::Established => continue,
                    _ => {
                        return Err(CmError::application(format!(
                            "{kind} (status {status}) while waiting for a completion"
                        )))
                    }
                }
            }
            let now = cm.now();
            if now > *deadline.get_or_insert(now + STEP.saturating_sub(CQ_SLICE)) {
                return Err(CmError::application(format!(
                    "no completion within {STEP:?}"
                )));
            }
        }
    }
}

/// Takes `n` completions from `cq`, waiting on `channel` (to which `cq` reports, armed)
/// whenever it has none: each CQ event fetched meanwhile, for `cq` or another CQ of the
/// channel, is acknowledged and its CQ armed again, so every CQ of the channel stays armed
/// while unpolled completions are only those its next poll takes. Fails when a wait sees no
/// CQ event for [`STEP`].
///
/// The bound is on each wait, not on the whole: this never reads the clock itself. In a VM
/// under software emulation a clock read is a system call and a read of an emulated timer,
/// and a receiver that keeps up with its sender blocks once per completion (ucmatose's 200
/// messages: about 200 waits per side); the backend's timed wait reads a clock only when it
/// really has to block, and then the coarse one.
pub fn take_completions<B: DataPath>(
    cm: &B,
    cq: CqHandle,
    channel: CompChannelHandle,
    n: usize,
) -> Result<Vec<WorkCompletion>> {
    let mut done = Vec::with_capacity(n);
    let mut wc = [WorkCompletion::default(); 8];
    while done.len() < n {
        let want = (n - done.len()).min(wc.len());
        let got = cm.poll_cq(cq, &mut wc[..want])?;
        done.extend_from_slice(&wc[..got]);
        if got > 0 {
            continue;
        }
        let fired = cm
            .get_cq_event(channel, Wait::Timeout(STEP))
            .map_err(|e| CmError::application(format!("{} of {n} completions: {e}", done.len())))?;
        cm.ack_cq_events(fired, 1)?;
        cm.req_notify_cq(fired, false)?;
    }
    Ok(done)
}
