//! The key-value client: sends its requests one at a time and checks every answer against the
//! reference model; when a connection breaks it tears it down (events acknowledged, QP, verbs
//! objects and id destroyed), waits a backoff and connects again, then sends the unanswered
//! request again. It gives up after a bounded number of attempts in a row without an answer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, MemoryRegion, QpInitAttrEx, WcOpcode, WcStatus};
use cmtwin::verbs::{SendFlags, WorkCompletion};
use cmtwin::{
    ChannelHandle, CmError, CmOption, CqHandle, EventKind, IdHandle, PortSpace, QpCap, Result, Wait,
};

use super::messages::{apply, Message, Op, MSG_LEN};
use super::wait::{poll_all, queued_cq_event, Slices};
use super::{connect_param, ACK_TIMEOUT};
use crate::ports::session::{Verbs, RESOLVE_TIMEOUT};

/// The client's bounds and pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The pause after each answer before the next request.
    pub think: Duration,
    /// How long a request waits for its answer before the connection is given up.
    pub reply_wait: Duration,
    /// How long each step of a connect (address, route, connection) waits for its event.
    pub step_wait: Duration,
    /// Attempts in a row without an answer before the client gives up.
    pub max_failures: u32,
    /// The first backoff after a failed attempt, doubled after each further one.
    pub backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            think: Duration::ZERO,
            reply_wait: Duration::from_secs(2),
            step_wait: Duration::from_secs(3),
            max_failures: 30,
            backoff: Duration::from_millis(20),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// What the client did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientReport {
    /// The replies, in request order: every request was answered.
    pub answered: Vec<Message>,
    /// Connection attempts.
    pub attempts: u32,
    /// Connections established.
    pub connections: u32,
    /// Requests sent again on a new connection.
    pub resent: u32,
    /// Why attempts or connections ended early, and how often.
    pub breaks: BTreeMap<String, u32>,
    /// When the BYE was answered.
    pub finished_at: Duration,
}

/// Why a connection or an attempt ended (recoverable: connect again), or an error that
/// ends the client.
enum Failure {
    Broken(String),
    Fatal(CmError),
}

/// Any call failing while connecting or exchanging breaks the connection.
fn broken(e: CmError) -> Failure {
    Failure::Broken(format!("{} {}", e.call, e.errno))
}

/// A connection and its objects.
struct Conn {
    id: IdHandle,
    verbs: Option<Verbs>,
    cq: Option<CqHandle>,
    rx: Option<MemoryRegion>,
    tx: Option<MemoryRegion>,
    slices: Slices,
    /// Whether the connection was established (and may need a disconnect).
    established: bool,
}

/// What one request's exchange gave.
#[derive(Default)]
struct Exchange {
    reply: Option<Message>,
    sent: bool,
    broken: Option<String>,
}

impl Conn {
    /// Connects a new id of `channel` to `server`; on failure everything made is released.
    fn open<B: DataPath>(
        cm: &B,
        channel: ChannelHandle,
        server: SocketAddr,
        opts: &ClientOptions,
    ) -> std::result::Result<Conn, Failure> {
        let id = cm
            .create_id(Some(channel), 0, PortSpace::TCP)
            .map_err(broken)?;
        let mut conn = Conn {
            id,
            verbs: None,
            cq: None,
            rx: None,
            tx: None,
            slices: Slices::default(),
            established: false,
        };
        match conn.connect(cm, channel, server, opts) {
            Ok(()) => Ok(conn),
            Err(f) => {
                conn.release(cm).map_err(Failure::Fatal)?;
                Err(f)
            }
        }
    }

    fn connect<B: DataPath>(
        &mut self,
        cm: &B,
        channel: ChannelHandle,
        server: SocketAddr,
        opts: &ClientOptions,
    ) -> std::result::Result<(), Failure> {
        let id = self.id;
        cm.set_option(id, &CmOption::AckTimeout(ACK_TIMEOUT))
            .map_err(broken)?;
        cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT)
            .map_err(broken)?;
        self.expect(cm, channel, EventKind::AddrResolved, opts)?;
        cm.resolve_route(id, RESOLVE_TIMEOUT).map_err(broken)?;
        self.expect(cm, channel, EventKind::RouteResolved, opts)?;
        let verbs = self.verbs.insert(Verbs::new(cm, id, true).map_err(broken)?);
        let cq = verbs.cq(cm, id, 4).map_err(broken)?;
        self.cq = Some(cq);
        cm.req_notify_cq(cq, false).map_err(broken)?;
        let mut attr = QpInitAttrEx::rc(verbs.pd, cq, cq);
        attr.cap = QpCap {
            max_send_wr: 2,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        cm.create_qp_ex(id, &attr).map_err(broken)?;
        let flags = AccessFlags::LOCAL_WRITE;
        self.rx = Some(verbs.region(cm, MSG_LEN, flags).map_err(broken)?);
        self.tx = Some(verbs.region(cm, MSG_LEN, flags).map_err(broken)?);
        cm.connect(id, Some(&connect_param())).map_err(broken)?;
        self.expect(cm, channel, EventKind::Established, opts)?;
        self.established = true;
        Ok(())
    }

    /// Waits (at most `opts.step_wait`) for the next event of the id, which must be `kind`.
    fn expect<B: DataPath>(
        &self,
        cm: &B,
        channel: ChannelHandle,
        kind: EventKind,
        opts: &ClientOptions,
    ) -> std::result::Result<(), Failure> {
        let deadline = cm.now() + opts.step_wait;
        loop {
            let left = deadline.saturating_sub(cm.now());
            let event = cm
                .get_cm_event(channel, Wait::Timeout(left))
                .map_err(|e| Failure::Broken(format!("no {kind}: {}", e.errno)))?;
            let (got, id) = (event.kind(), event.id());
            cm.ack_cm_event(event).map_err(Failure::Fatal)?;
            if id != self.id {
                continue;
            }
            if got != kind {
                return Err(Failure::Broken(format!("event {got}")));
            }
            return Ok(());
        }
    }

    /// Sends `req` and waits for its answer, the connection's end, or `opts.reply_wait`.
    fn exchange<B: DataPath>(
        &mut self,
        cm: &B,
        channel: ChannelHandle,
        req: &Message,
        opts: &ClientOptions,
    ) -> std::result::Result<Exchange, Failure> {
        let (rx, tx) = (self.rx.expect("connected"), self.tx.expect("connected"));
        let mut ex = Exchange::default();
        let posted = cm
            .mr_write(tx.handle, 0, &req.encode())
            .and_then(|()| cm.post_recv_msg(self.id, 0, &rx, 0, MSG_LEN as u32))
            .and_then(|()| {
                cm.post_send_msg(self.id, 1, &tx, 0, MSG_LEN as u32, SendFlags::SIGNALED)
            });
        if let Err(e) = posted {
            ex.broken = Some(format!("{} {}", e.call, e.errno));
            return Ok(ex);
        }
        let deadline = cm.now() + opts.reply_wait;
        let comp = self
            .verbs
            .as_ref()
            .and_then(|v| v.channel)
            .expect("connected");
        let cq = self.cq.expect("connected");
        loop {
            if ex.broken.is_some() || (ex.reply.is_some() && ex.sent) {
                return Ok(ex);
            }
            if let Some((_, event)) = cm.try_get_cm_event(&[channel]).map_err(Failure::Fatal)? {
                let (kind, id) = (event.kind(), event.id());
                cm.ack_cm_event(event).map_err(Failure::Fatal)?;
                if id == self.id && kind != EventKind::Established {
                    // The answer may have come just before the end: take it.
                    if queued_cq_event(cm, comp, |c| c == cq)
                        .map_err(Failure::Fatal)?
                        .is_some()
                    {
                        self.drain(cm, &mut ex).map_err(Failure::Fatal)?;
                    }
                    ex.broken.get_or_insert_with(|| format!("event {kind}"));
                    return Ok(ex);
                }
                continue;
            }
            if cm.now() >= deadline {
                ex.broken = Some("no answer in time".into());
                return Ok(ex);
            }
            let fired = self
                .slices
                .wait_cq(cm, comp, deadline, |c| c == cq)
                .map_err(Failure::Fatal)?;
            if fired.is_some() {
                self.drain(cm, &mut ex).map_err(Failure::Fatal)?;
            }
        }
    }

    /// Takes the CQ's completions into `ex` (after its CQ event).
    fn drain<B: DataPath>(&mut self, cm: &B, ex: &mut Exchange) -> Result<()> {
        let (cq, rx) = (self.cq.expect("connected"), self.rx.expect("connected"));
        let mut wc = [WorkCompletion::default(); 4];
        poll_all(cm, cq, &mut wc, |batch| {
            for wc in batch {
                match (wc.status, wc.opcode) {
                    (WcStatus::SUCCESS, WcOpcode::Recv) => {
                        let mut m = [0u8; MSG_LEN];
                        cm.mr_read(rx.handle, 0, &mut m)?;
                        ex.reply = Some(Message::decode(&m, wc.byte_len)?);
                    }
                    (WcStatus::SUCCESS, _) => ex.sent = true,
                    (status, _) => {
                        ex.broken
                            .get_or_insert_with(|| format!("completion {}", status.as_str()));
                    }
                }
            }
            Ok(true)
        })
    }

    /// Disconnects, waits (at most `opts.step_wait`) for DISCONNECTED, releases everything.
    fn close<B: DataPath>(
        self,
        cm: &B,
        channel: ChannelHandle,
        opts: &ClientOptions,
    ) -> Result<()> {
        if cm.disconnect(self.id).is_ok() {
            // The peer may be gone already: a missing DISCONNECTED is no error here.
            let _ = self.expect(cm, channel, EventKind::Disconnected, opts);
        }
        Conn {
            established: false,
            ..self
        }
        .release(cm)
    }

    /// Releases the QP, the verbs objects and the id (a broken connection's).
    fn release<B: DataPath>(self, cm: &B) -> Result<()> {
        if self.established {
            // EINVAL when the connection is already down, ENXIO once the device is gone:
            // either way there is nothing left to disconnect.
            let _ = cm.disconnect(self.id);
        }
        if let Some(verbs) = self.verbs {
            verbs.release(cm, self.id)?;
        }
        cm.destroy_id(self.id)
    }
}

/// Checks `reply` as the answer to `req` against the model `store`.
fn check(req: &Message, reply: &Message, store: &mut BTreeMap<u64, u64>) -> Result<()> {
    let expected = apply(store, req.op, req.key, req.value);
    let same = (reply.client, reply.request, reply.op, reply.key)
        == (req.client, req.request, req.op, req.key);
    if !same || reply.value != expected {
        return Err(CmError::application(format!(
            "{reply:?} to {req:?}: the model answers {expected}"
        )));
    }
    Ok(())
}

/// The client's progress through its requests, across connections.
struct Progress<'a> {
    requests: &'a [Message],
    report: ClientReport,
    /// The reference model, with every answered request applied in order.
    model: BTreeMap<u64, u64>,
    /// The request ids sent at least once.
    sent: BTreeSet<u64>,
    /// Attempts and connections in a row that brought no answer.
    failures: u32,
}

impl Progress<'_> {
    fn done(&self) -> bool {
        self.report.answered.len() == self.requests.len()
    }

    /// Connects and exchanges until every request is answered.
    fn until_done<B: DataPath>(
        &mut self,
        cm: &B,
        channel: ChannelHandle,
        server: SocketAddr,
        opts: &ClientOptions,
    ) -> Result<()> {
        while !self.done() {
            self.report.attempts += 1;
            let mut conn = match Conn::open(cm, channel, server, opts) {
                Ok(conn) => conn,
                Err(Failure::Broken(why)) => {
                    self.failed(cm, opts, why)?;
                    continue;
                }
                Err(Failure::Fatal(e)) => return Err(e),
            };
            self.report.connections += 1;
            let why = match self.exchange_all(cm, channel, &mut conn, opts) {
                Ok(why) => why,
                Err(e) => {
                    // The error that ends the client is the one to report; the release is
                    // only tidiness.
                    let _ = conn.release(cm);
                    return Err(e);
                }
            };
            match why {
                None => conn.close(cm, channel, opts)?,
                Some(why) => {
                    conn.release(cm)?;
                    if self.done() {
                        *self.report.breaks.entry(why).or_default() += 1;
                    } else {
                        self.failed(cm, opts, why)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Exchanges the requests left on `conn` until all are answered (`None`) or the
    /// connection breaks (why).
    fn exchange_all<B: DataPath>(
        &mut self,
        cm: &B,
        channel: ChannelHandle,
        conn: &mut Conn,
        opts: &ClientOptions,
    ) -> Result<Option<String>> {
        loop {
            let req = self.requests[self.report.answered.len()];
            if !self.sent.insert(req.request) {
                self.report.resent += 1;
            }
            let ex = match conn.exchange(cm, channel, &req, opts) {
                Ok(ex) => ex,
                Err(Failure::Broken(why)) => return Ok(Some(why)),
                Err(Failure::Fatal(e)) => return Err(e),
            };
            if let Some(reply) = ex.reply {
                check(&req, &reply, &mut self.model)?;
                self.report.answered.push(reply);
                self.failures = 0;
                if self.done() {
                    self.report.finished_at = cm.now();
                }
            }
            if ex.broken.is_some() || self.done() {
                return Ok(ex.broken);
            }
            if !opts.think.is_zero() {
                cm.sleep(opts.think)?;
            }
        }
    }

    /// An attempt or a connection ended without an answer because of `why`: an error once
    /// `opts.max_failures` did in a row, else a backoff doubling from `opts.backoff`.
    fn failed<B: DataPath>(&mut self, cm: &B, opts: &ClientOptions, why: String) -> Result<()> {
        self.failures += 1;
        if self.failures >= opts.max_failures {
            return Err(CmError::application(format!(
                "gave up after {} attempts in a row without an answer (request {} of {}): {why}",
                self.failures,
                self.report.answered.len() + 1,
                self.requests.len()
            )));
        }
        *self.report.breaks.entry(why).or_default() += 1;
        let doubling = 2u32.saturating_pow((self.failures - 1).min(16));
        cm.sleep((opts.backoff * doubling).min(opts.max_backoff))
    }
}

/// Sends `requests` (ids counting from 1, the last one a BYE) to `server` until each is
/// answered, checking every answer against the reference model.
pub fn run<B: DataPath>(
    cm: &B,
    server: SocketAddr,
    requests: &[Message],
    opts: &ClientOptions,
) -> Result<ClientReport> {
    if requests.last().map(|r| r.op) != Some(Op::Bye) {
        return Err(CmError::application("the requests must end with a BYE"));
    }
    let channel = cm.create_event_channel()?;
    let mut progress = Progress {
        requests,
        report: ClientReport::default(),
        model: BTreeMap::new(),
        sent: BTreeSet::new(),
        failures: 0,
    };
    let outcome = progress.until_done(cm, channel, server, opts);
    let destroyed = cm.destroy_event_channel(channel);
    outcome?;
    destroyed?;
    Ok(progress.report)
}
