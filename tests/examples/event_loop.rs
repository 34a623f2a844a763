//! One event loop per side, as C servers built on `poll(2)` or `epoll` have them: the server
//! waits on its listener's CM channel, the completion channel of every connection and the
//! device's asynchronous events at once (`DataPath::poll_sources`), and serves whichever is
//! ready: a CONNECT_REQUEST is accepted, a request (an 8-byte counter) is answered with the
//! counter plus one, a COMM_EST is passed on with `notify`, a DISCONNECTED closes its
//! connection. The client opens its connections, then waits on all their completion channels
//! at once, sending each connection's next request when its answer arrives.
//!
//! * `cargo run -p cmtwin-tests --example event_loop [seed]`: both sides on the simulator, run
//!   twice to check that the seed replays the same trace (`CMTWIN_TRACE=1` prints it).
//! * With `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>`: both sides on the real librdmacm and
//!   libibverbs, on two threads.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, PollSource, QpInitAttrEx, RecvWr, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use cmtwin::{
    AsyncEvent, ChannelHandle, CmError, CompChannelHandle, CqHandle, Errno, EventKind, IdHandle,
    PdHandle, PortSpace, QpHandle, Result, Wait,
};
use cmtwin_tests::ports::command_line::Mode;
use cmtwin_tests::ports::simulated;
use cmtwin_verbs::VerbsBackend;

/// The server's port.
const PORT: u16 = 7491;
/// Connections the client opens.
const CONNECTIONS: u32 = 3;
/// Requests on each connection.
const REQUESTS: u32 = 5;
/// Each wait's bound: a loop that waits longer has lost a message.
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));
/// One turn of an event loop's wait: a turn that ends with nothing ready polls every CQ
/// anyway, as careful C event loops do, so that a completion whose CQ event never came (seen
/// once on real siw, where both loops stalled with a request outstanding) is still served;
/// the loop says so when that happens.
const TURN: Wait = Wait::Timeout(Duration::from_secs(1));
/// Quiet turns in a row after which a loop gives up: 30 s without anything happening.
const QUIET_TURNS: u32 = 30;
/// The bytes of one request or answer.
const MESSAGE: usize = 8;

/// What each side counts: connections served and requests answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    connections: u32,
    answered: u32,
}

/// One connection's verbs objects: a PD, a CQ with its completion channel, the QP, and the
/// region its receive lands in.
struct Link {
    id: IdHandle,
    pd: PdHandle,
    comp: CompChannelHandle,
    cq: CqHandle,
    qp: QpHandle,
    rx: MemoryRegion,
}

impl Link {
    /// Gives `id` its objects, an armed CQ and a posted receive.
    fn new<B: DataPath>(cm: &B, id: IdHandle) -> Result<Link> {
        let pd = cm.alloc_pd(id)?;
        let comp = cm.create_comp_channel(id)?;
        let cq = cm.create_cq(id, 16, Some(comp))?;
        cm.create_qp_ex(id, &QpInitAttrEx::rc(pd, cq, cq))?;
        let qp = cm
            .qp(id)?
            .ok_or_else(|| CmError::application("the id has no QP"))?;
        let rx = cm.reg_mr(pd, vec![0; MESSAGE], AccessFlags::LOCAL_WRITE)?;
        let link = Link {
            id,
            pd,
            comp,
            cq,
            qp,
            rx,
        };
        link.post_receive(cm)?;
        cm.req_notify_cq(cq, false)?;
        Ok(link)
    }

    fn post_receive<B: DataPath>(&self, cm: &B) -> Result<()> {
        let sge = [self.rx.sge(0, MESSAGE as u32)];
        cm.post_recv(
            self.qp,
            &RecvWr {
                wr_id: 0,
                sg_list: &sge,
            },
        )
    }

    /// Sends `value` inline.
    fn send<B: DataPath>(&self, cm: &B, value: u64) -> Result<()> {
        let bytes = value.to_le_bytes();
        cm.post_send(
            self.qp,
            &SendWr::new(1, SendOp::Send, Payload::Inline(&bytes)),
        )
    }

    /// Takes the CQ event, re-arms the CQ and returns the values of the receives completed
    /// since (each receive is posted again).
    fn received<B: DataPath>(&self, cm: &B) -> Result<Vec<u64>> {
        let cq = cm.get_cq_event(self.comp, Wait::NonBlocking)?;
        cm.ack_cq_events(cq, 1)?;
        cm.req_notify_cq(cq, false)?;
        self.completed(cm)
    }

    /// The values of the receives the CQ holds now (each receive is posted again), without
    /// waiting for a CQ event.
    fn completed<B: DataPath>(&self, cm: &B) -> Result<Vec<u64>> {
        let mut values = Vec::new();
        let mut wc = [WorkCompletion::default(); 8];
        loop {
            let n = cm.poll_cq(self.cq, &mut wc)?;
            for c in &wc[..n] {
                // The peer closed: the posted receive is flushed (an error's opcode is
                // undefined), and DISCONNECTED follows; on siw the flush can come before it
                // (seen on siw-6.12 at the end of a run).
                if c.status == WcStatus::WR_FLUSH_ERR {
                    continue;
                }
                if c.status != WcStatus::SUCCESS {
                    return Err(CmError::application(format!(
                        "{:?}: {}",
                        c.opcode, c.status
                    )));
                }
                if c.opcode == WcOpcode::Recv {
                    let mut bytes = [0u8; MESSAGE];
                    cm.mr_read(self.rx.handle, 0, &mut bytes)?;
                    values.push(u64::from_le_bytes(bytes));
                    self.post_receive(cm)?;
                }
            }
            if n < wc.len() {
                return Ok(values);
            }
        }
    }

    /// Destroys the QP and the objects, then the id.
    fn close<B: DataPath>(self, cm: &B) -> Result<()> {
        cm.destroy_qp(self.id)?;
        cm.dereg_mr(self.rx.handle)?;
        cm.destroy_cq(self.cq)?;
        cm.destroy_comp_channel(self.comp)?;
        cm.dealloc_pd(self.pd)?;
        cm.destroy_id(self.id)
    }
}

/// The server: one loop over the listener's channel, every connection's completion channel
/// and the asynchronous events, until `CONNECTIONS` connections have come and gone.
fn server<B: DataPath>(cm: &B, addr: SocketAddr) -> Result<Tally> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 8)?;
    let mut links: BTreeMap<CompChannelHandle, Link> = BTreeMap::new();
    let mut tally = Tally::default();
    let mut quiet = 0;
    while tally.connections < CONNECTIONS || !links.is_empty() {
        let mut sources = vec![PollSource::Cm(channel), PollSource::Async];
        sources.extend(links.keys().map(|&c| PollSource::Completion(c)));
        let ready = cm.poll_sources(&sources, TURN)?;
        if ready.is_empty() {
            quiet += 1;
            if quiet == QUIET_TURNS {
                let why = format!(
                    "server: nothing happened for 30 s ({tally:?}, {} connections open)",
                    links.len()
                );
                return Err(CmError::application(why));
            }
            for link in links.values() {
                let values = link.completed(cm)?;
                if !values.is_empty() {
                    quiet = 0;
                    eprintln!("server: {} requests came without a CQ event", values.len());
                }
                answer(cm, link, values, &mut tally)?;
            }
            continue;
        }
        quiet = 0;
        for source in ready {
            match source {
                PollSource::Cm(_) => on_cm_event(cm, channel, &mut links, &mut tally)?,
                PollSource::Completion(comp) => {
                    // A DISCONNECTED earlier in this round closed the link: its channel was
                    // ready with the flush of its last receive (siw flushes as the peer
                    // closes), which nobody needs now.
                    let Some(link) = links.get(&comp) else {
                        continue;
                    };
                    answer(cm, link, link.received(cm)?, &mut tally)?;
                }
                PollSource::Async => on_async_event(cm)?,
            }
        }
    }
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(tally)
}

/// Answers each request value on `link` with the value plus one.
fn answer<B: DataPath>(cm: &B, link: &Link, values: Vec<u64>, tally: &mut Tally) -> Result<()> {
    for value in values {
        link.send(cm, value + 1)?;
        tally.answered += 1;
    }
    Ok(())
}

/// The server's CM events: a request is accepted with a link of its own, a disconnection
/// closes its link.
fn on_cm_event<B: DataPath>(
    cm: &B,
    channel: ChannelHandle,
    links: &mut BTreeMap<CompChannelHandle, Link>,
    tally: &mut Tally,
) -> Result<()> {
    let event = cm.get_cm_event(channel, Wait::NonBlocking)?;
    let (kind, id) = (event.kind(), event.id());
    cm.ack_cm_event(event)?;
    match kind {
        EventKind::ConnectRequest => {
            let link = Link::new(cm, id)?;
            cm.accept(id, None)?;
            links.insert(link.comp, link);
            tally.connections += 1;
        }
        EventKind::Established => {}
        EventKind::Disconnected => {
            let comp = links
                .iter()
                .find(|(_, l)| l.id == id)
                .map(|(&c, _)| c)
                .ok_or_else(|| CmError::application(format!("{id} is no connection")))?;
            let link = links.remove(&comp).expect("found above");
            link.close(cm)?;
        }
        other => return Err(CmError::application(format!("server: {other} on {id}"))),
    }
    Ok(())
}

/// A request that reaches the server's QP before its ESTABLISHED reports COMM_EST: passing
/// it on with `notify` establishes the connection, or finds it established (EISCONN).
fn on_async_event<B: DataPath>(cm: &B) -> Result<()> {
    let event = cm.get_async_event(Wait::NonBlocking)?;
    if let (AsyncEvent::COMM_EST, Some(id)) = (event.kind, event.id) {
        match cm.notify(id, AsyncEvent::COMM_EST) {
            Err(e) if e.errno != Errno::EISCONN => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The client: `CONNECTIONS` connections on one channel, then one loop over their completion
/// channels until each has had `REQUESTS` answers, each checked.
fn client<B: DataPath>(cm: &B, addr: SocketAddr) -> Result<Tally> {
    let channel = cm.create_event_channel()?;
    let mut links = BTreeMap::new();
    let mut sent = BTreeMap::new();
    for n in 0..CONNECTIONS {
        let link = connect(cm, channel, addr)?;
        let first = u64::from(n) * 1000;
        link.send(cm, first)?;
        sent.insert(link.comp, (first, 1));
        links.insert(link.comp, link);
    }
    let mut tally = Tally {
        connections: CONNECTIONS,
        answered: 0,
    };
    let mut quiet = 0;
    while tally.answered < CONNECTIONS * REQUESTS {
        let sources: Vec<PollSource> = links.keys().map(|&c| PollSource::Completion(c)).collect();
        let ready = cm.poll_sources(&sources, TURN)?;
        if ready.is_empty() {
            quiet += 1;
            if quiet == QUIET_TURNS {
                let why = format!("client: no answer for 30 s ({tally:?})");
                return Err(CmError::application(why));
            }
            for (comp, link) in &links {
                let values = link.completed(cm)?;
                if !values.is_empty() {
                    quiet = 0;
                    eprintln!("client: {} answers came without a CQ event", values.len());
                }
                next_requests(
                    cm,
                    link,
                    values,
                    sent.get_mut(comp).expect("sent"),
                    &mut tally,
                )?;
            }
            continue;
        }
        quiet = 0;
        for source in ready {
            let PollSource::Completion(comp) = source else {
                continue;
            };
            let link = &links[&comp];
            let values = link.received(cm)?;
            next_requests(
                cm,
                link,
                values,
                sent.get_mut(&comp).expect("sent"),
                &mut tally,
            )?;
        }
    }
    for link in links.into_values() {
        cm.disconnect(link.id)?;
        expect(cm, channel, EventKind::Disconnected)?;
        link.close(cm)?;
    }
    cm.destroy_event_channel(channel)?;
    Ok(tally)
}

/// Checks each answer on `link` against its last request (`sent`: the request and how many
/// were sent) and sends the next request while fewer than `REQUESTS` were.
fn next_requests<B: DataPath>(
    cm: &B,
    link: &Link,
    answers: Vec<u64>,
    sent: &mut (u64, u32),
    tally: &mut Tally,
) -> Result<()> {
    for value in answers {
        let (last, count) = *sent;
        if value != last + 1 {
            let why = format!("answer {value} to request {last}");
            return Err(CmError::application(why));
        }
        tally.answered += 1;
        if count < REQUESTS {
            link.send(cm, value)?;
            *sent = (value, count + 1);
        }
    }
    Ok(())
}

/// A connection to `addr` on `channel`, its link made before the connect.
fn connect<B: DataPath>(cm: &B, channel: ChannelHandle, addr: SocketAddr) -> Result<Link> {
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.resolve_addr(id, None, addr, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::AddrResolved)?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::RouteResolved)?;
    let link = Link::new(cm, id)?;
    cm.connect(id, None)?;
    expect(cm, channel, EventKind::Established)?;
    Ok(link)
}

/// The next event of `channel`, which must be of `kind`.
fn expect<B: DataPath>(cm: &B, channel: ChannelHandle, kind: EventKind) -> Result<()> {
    cmtwin::expect_event(cm, channel, kind, WAIT)
        .map(|_| ())
        .map_err(|e| CmError::application(e.to_string()))
}

fn main() {
    let expected = Tally {
        connections: CONNECTIONS,
        answered: CONNECTIONS * REQUESTS,
    };
    let mode = Mode::from_env(PORT).and_then(|mode| match std::env::args().nth(1) {
        Some(seed) => seed
            .parse()
            .map(Mode::Simulated)
            .map_err(|e| format!("{seed}: {e}")),
        None => Ok(mode),
    });
    let outcome = mode.and_then(|mode| match mode {
        Mode::Simulated(seed) => {
            let end = simulated::run_pair_replayed(seed, PORT, server, client, expected)?;
            println!(
                "simulator (seed {seed}): {CONNECTIONS} connections, {} requests answered in \
                 one event loop per side after {end:?} of virtual time; the seed replays the \
                 same trace",
                expected.answered
            );
            Ok(())
        }
        Mode::Both(addr) | Mode::Server(addr) | Mode::Client(addr) => on_librdmacm(addr, expected),
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
}

/// Both sides on the real backend at `addr`, on two threads.
fn on_librdmacm(addr: SocketAddr, expected: Tally) -> std::result::Result<(), String> {
    let serving = std::thread::spawn(move || server(&VerbsBackend::new(), addr));
    let cm = VerbsBackend::new();
    // The server's head start.
    std::thread::sleep(Duration::from_millis(200));
    let client = client(&cm, addr);
    let served = serving
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    let mut failures = Vec::new();
    for (side, got) in [("server", served), ("client", client)] {
        match got {
            Ok(got) if got == expected => {}
            Ok(got) => failures.push(format!("{side}: {got:?} instead of {expected:?}")),
            Err(e) => failures.push(format!("{side}: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    println!(
        "librdmacm on {addr}: {CONNECTIONS} connections, {} requests answered in one event \
         loop per side",
        expected.answered
    );
    Ok(())
}
