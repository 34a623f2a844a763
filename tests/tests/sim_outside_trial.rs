//! An outside user's trial of cmtwin's public API, written from the README, the crate docs and
//! the examples only, kept where it asserts something:
//!
//! * a small protocol: a request rejected with private data, one accepted with private data, its
//!   RTU lost (on InfiniBand the data's COMM_EST and `rdma_notify`, then EISCONN), a send in
//!   flight when the peer disconnects, each event once, at exact virtual times;
//! * the testing toolkit over a protocol of three connections (every other request rejected):
//!   a `Sweep` over swarm plans and a proptest over seeds, transports, schedules and plans,
//!   each run twice and compared byte for byte, every event at most once per id, every error
//!   naming its call and errno;
//! * threads and async inside a simulated host: a condition variable's timeout, a semaphore
//!   nobody posts, a channel whose sender panicked, an event raced against a sleep.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use cmtwin::sync as csync;
use cmtwin::task::{block_on, CmAsync};
use cmtwin::thread as cthread;
use cmtwin::verbs::{DataPath, SendFlags};
use cmtwin::{
    AsyncEvent, ChannelHandle, CmBackend, CmError, ConnParam, Errno, EventInfo, EventKind,
    IdHandle, PortSpace, QpInitAttr, QpType, Transport, Wait,
};
use cmtwin_sim::sweep::{Outcome, RunContext, Sweep};
use cmtwin_sim::{Fabric, FaultAction, FaultPlan, MessageKind, SwarmSpace, Trigger};

const WAIT: Wait = Wait::Timeout(Duration::from_secs(300));

/// What each side saw, with the virtual time.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, cm: &impl CmBackend, who: &str, what: String) {
    log.lock()
        .unwrap()
        .push(format!("{:?} {who}: {what}", cm.now()));
}

fn outcome<T: std::fmt::Debug>(r: &Result<T, CmError>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => e.to_string(),
    }
}

// ----- a small protocol, on exact virtual times -----------------------------------------------

/// The next event, acknowledged and logged with its private data up to the first zero.
fn next<B: CmBackend>(
    cm: &B,
    ch: ChannelHandle,
    log: &Log,
    who: &str,
) -> Result<EventInfo, CmError> {
    let ev = cm.get_cm_event(ch, WAIT)?;
    let info = ev.info().clone();
    cm.ack_cm_event(ev)?;
    let pd: Vec<u8> = info
        .private_data
        .iter()
        .copied()
        .take_while(|b| *b != 0)
        .collect();
    note(
        log,
        cm,
        who,
        format!(
            "{} {} {:?}/{}",
            info.kind,
            info.status,
            String::from_utf8_lossy(&pd),
            info.private_data.len()
        ),
    );
    Ok(info)
}

/// Rejects the first request ("denied"), accepts the second ("welcome"); on InfiniBand the
/// lost RTU is made up for by the data's COMM_EST and `rdma_notify`. Then the server stays
/// quiet for 20 s, disconnects while the client's third send waits for a receive, and waits
/// 20 s more for anything else.
fn server<B: DataPath>(cm: &B, addr: SocketAddr, log: &Log, comm_est: bool) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 4)?;
    let req = next(cm, ch, log, "server")?;
    cm.reject(req.id, b"denied")?;
    cm.destroy_id(req.id)?;
    let id = next(cm, ch, log, "server")?.id;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    let mr = cm.reg_msgs(id, vec![0; 64])?;
    cm.post_recv_msg(id, 1, &mr, 0, 32)?;
    cm.post_recv_msg(id, 2, &mr, 32, 32)?;
    cm.accept(id, Some(&ConnParam::with_private_data(b"welcome")))?;
    if comm_est {
        let ae = cm.get_async_event(WAIT)?;
        note(log, cm, "server", format!("async {}", ae.kind.0));
        cm.notify(id, AsyncEvent::COMM_EST)?;
    }
    next(cm, ch, log, "server")?;
    for _ in 0..2 {
        let wc = cm.get_recv_comp(id)?;
        note(
            log,
            cm,
            "server",
            format!("recv {} {:?} {}", wc.wr_id, wc.status, wc.byte_len),
        );
    }
    let again = cm.notify(id, AsyncEvent::COMM_EST);
    note(
        log,
        cm,
        "server",
        format!("notify again: {}", outcome(&again)),
    );
    let quiet = cm
        .get_cm_event(ch, Wait::Timeout(Duration::from_secs(20)))
        .map(|e| e.kind());
    note(log, cm, "server", outcome(&quiet));
    cm.sleep(Duration::from_millis(5))?;
    cm.disconnect(id)?;
    next(cm, ch, log, "server")?;
    cm.dereg_mr(mr.handle)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    let quiet = cm
        .get_cm_event(ch, Wait::Timeout(Duration::from_secs(20)))
        .map(|e| e.kind());
    note(log, cm, "server", outcome(&quiet));
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(ch)
}

/// A new id on `ch`, connected with `hello`: the id and its connection's event.
fn dial<B: DataPath>(
    cm: &B,
    ch: ChannelHandle,
    server: SocketAddr,
    hello: &[u8],
    log: &Log,
) -> Result<(IdHandle, EventInfo), CmError> {
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    next(cm, ch, log, "client")?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    next(cm, ch, log, "client")?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::with_private_data(hello)))?;
    let e = next(cm, ch, log, "client")?;
    Ok((id, e))
}

fn client<B: DataPath>(cm: &B, server: SocketAddr, log: &Log) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let (id, _rejected) = dial(cm, ch, server, b"auth:bad", log)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    let (id, _established) = dial(cm, ch, server, b"auth:ok", log)?;
    let mr = cm.reg_msgs(
        id,
        b"first message...second message..third message...".to_vec(),
    )?;
    cm.post_send_msg(id, 10, &mr, 0, 16, SendFlags::SIGNALED)?;
    cm.post_send_msg(id, 11, &mr, 16, 16, SendFlags::SIGNALED)?;
    for _ in 0..2 {
        let wc = cm.get_send_comp(id)?;
        note(
            log,
            cm,
            "client",
            format!("send {} {:?}", wc.wr_id, wc.status),
        );
    }
    cm.sleep(Duration::from_secs(20))?;
    // No receive waits for it: in flight (RNR retries) when the server disconnects.
    cm.post_send_msg(id, 12, &mr, 32, 16, SendFlags::SIGNALED)?;
    next(cm, ch, log, "client")?;
    cm.disconnect(id)?;
    let wc = cm.get_send_comp(id)?;
    note(
        log,
        cm,
        "client",
        format!("send {} {:?}", wc.wr_id, wc.status),
    );
    cm.dereg_mr(mr.handle)?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    let quiet = cm
        .get_cm_event(ch, Wait::Timeout(Duration::from_secs(20)))
        .map(|e| e.kind());
    note(log, cm, "client", outcome(&quiet));
    cm.destroy_event_channel(ch)
}

/// The protocol on a two-host fabric whose first RTU is lost: what each side saw, the trace.
fn protocol(seed: u64, transport: Transport) -> (Vec<String>, String) {
    let sip = "10.0.0.1".parse().unwrap();
    let lost_rtu = FaultPlan::new().scheduled(
        Trigger::Message {
            kind: MessageKind::Rtu,
            nth: 1,
        },
        FaultAction::DropMessages {
            kind: MessageKind::Rtu,
            count: 1,
        },
    );
    let fabric = Fabric::builder(seed)
        .host("server", transport, &[sip])
        .host("client", transport, &["10.0.0.2".parse().unwrap()])
        .plan(lost_rtu)
        .build()
        .unwrap();
    let addr = SocketAddr::new(sip, 7000);
    let log: Log = Arc::default();
    let l = log.clone();
    fabric.spawn("server", "server", move |cm| {
        server(&cm, addr, &l, transport == Transport::InfiniBand)
    });
    let l = log.clone();
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(1))?;
        client(&cm, addr, &l)
    });
    fabric.run().expect("both sides finish");
    let log = log.lock().unwrap().clone();
    (log, fabric.trace_text())
}

/// What both transports share: the reject's 148 bytes and the REP's 196 as delivered, the
/// client's two sends, and after the server's disconnect the send in flight flushed.
fn check_protocol(transport: Transport, expected: &[&str]) {
    let (log, trace) = protocol(1, transport);
    assert_eq!(log, expected, "{trace}");
    assert_eq!(
        protocol(1, transport).1,
        trace,
        "the same seed, the same trace"
    );
}

/// RoCE (rxe raises no COMM_EST): the server's ESTABLISHED waits for its REP's retransmission
/// (4.32 s) and the RTU it brings back; a notify then is EISCONN.
#[test]
fn a_reject_a_lost_rtu_and_a_send_in_flight_on_roce() {
    check_protocol(
        Transport::Roce,
        &[
            "1.01ms client: RDMA_CM_EVENT_ADDR_RESOLVED 0 \"\"/0",
            "1.01ms client: RDMA_CM_EVENT_ROUTE_RESOLVED 0 \"\"/0",
            "1.01926ms server: RDMA_CM_EVENT_CONNECT_REQUEST 0 \"auth:bad\"/56",
            "1.027054ms client: RDMA_CM_EVENT_REJECTED 28 \"denied\"/148",
            "1.037054ms client: RDMA_CM_EVENT_ADDR_RESOLVED 0 \"\"/0",
            "1.037054ms client: RDMA_CM_EVENT_ROUTE_RESOLVED 0 \"\"/0",
            "1.046876ms server: RDMA_CM_EVENT_CONNECT_REQUEST 0 \"auth:ok\"/56",
            "1.053599ms client: RDMA_CM_EVENT_ESTABLISHED 0 \"welcome\"/196",
            "1.069456ms client: send 10 success (0)",
            "1.070359ms client: send 11 success (0)",
            "4.320018725s server: RDMA_CM_EVENT_ESTABLISHED 0 \"\"/0",
            "4.320018725s server: recv 1 success (0) 16",
            "4.320018725s server: recv 2 success (0) 16",
            "4.320018725s server: notify again: rdma_notify: EISCONN (106): the connection is already established",
            "24.320018725s server: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
            "24.32504561s client: RDMA_CM_EVENT_DISCONNECTED 0 \"\"/0",
            "24.32506561s client: send 12 Work Request Flushed Error (5)",
            "24.325075516s server: RDMA_CM_EVENT_DISCONNECTED 0 \"\"/0",
            "44.32506561s client: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
            "44.325075516s server: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
        ],
    );
}

/// InfiniBand: the first send reaching the server's QP raises COMM_EST (4); the notify makes
/// the one ESTABLISHED at once, the late REP retransmission is cancelled, a second notify is
/// EISCONN.
#[test]
fn a_reject_a_lost_rtu_and_a_send_in_flight_on_infiniband() {
    check_protocol(
        Transport::InfiniBand,
        &[
            "1.01ms client: RDMA_CM_EVENT_ADDR_RESOLVED 0 \"\"/0",
            "1.21ms client: RDMA_CM_EVENT_ROUTE_RESOLVED 0 \"\"/0",
            "1.21926ms server: RDMA_CM_EVENT_CONNECT_REQUEST 0 \"auth:bad\"/56",
            "1.227054ms client: RDMA_CM_EVENT_REJECTED 28 \"denied\"/148",
            "1.237054ms client: RDMA_CM_EVENT_ADDR_RESOLVED 0 \"\"/0",
            "1.437054ms client: RDMA_CM_EVENT_ROUTE_RESOLVED 0 \"\"/0",
            "1.446876ms server: RDMA_CM_EVENT_CONNECT_REQUEST 0 \"auth:ok\"/56",
            "1.453599ms client: RDMA_CM_EVENT_ESTABLISHED 0 \"welcome\"/196",
            "1.460924ms server: async 4",
            "1.460924ms server: RDMA_CM_EVENT_ESTABLISHED 0 \"\"/0",
            "1.460924ms server: recv 1 success (0) 16",
            "1.462959ms server: recv 2 success (0) 16",
            "1.462959ms server: notify again: rdma_notify: EISCONN (106): the connection is already established",
            "1.469456ms client: send 10 success (0)",
            "1.470359ms client: send 11 success (0)",
            "20.001462959s server: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
            "20.006492412s client: RDMA_CM_EVENT_DISCONNECTED 0 \"\"/0",
            "20.006512412s client: send 12 Work Request Flushed Error (5)",
            "20.006521684s server: RDMA_CM_EVENT_DISCONNECTED 0 \"\"/0",
            "40.006512412s client: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
            "40.006521684s server: rdma_get_cm_event: ETIMEDOUT (110): no event within the timeout",
        ],
    );
}

// ----- the testing toolkit: sweeps and proptest over a protocol of three connections ----------

/// Every event of a run, per host and id; flags a once-only kind seen twice on one id.
#[derive(Default)]
struct Seen {
    events: BTreeMap<(String, String), Vec<EventKind>>,
    problems: Vec<String>,
}

/// Kinds an id gets at most once (an id may resolve again, and a listener gets many requests).
fn once_only(kind: EventKind) -> bool {
    !matches!(
        kind,
        EventKind::ConnectRequest
            | EventKind::AddrChange
            | EventKind::AddrResolved
            | EventKind::RouteResolved
            | EventKind::AddrError
            | EventKind::RouteError
    )
}

type Shared = Arc<Mutex<Seen>>;

/// The next event, acknowledged and checked against what its id got before.
fn checked_next<B: CmBackend>(
    cm: &B,
    ch: ChannelHandle,
    seen: &Shared,
    host: &str,
    wait: Wait,
) -> Result<cmtwin::EventInfo, CmError> {
    let ev = cm.get_cm_event(ch, wait)?;
    let info = ev.info().clone();
    cm.ack_cm_event(ev)?;
    let mut s = seen.lock().unwrap();
    let key = (host.to_string(), format!("{}", info.id));
    let list = s.events.entry(key.clone()).or_default();
    // A neighbour change's UNREACHABLE may come at any time before the id is destroyed
    // (cma_netevent_work_handler changes no state), and an ESTABLISHED connection may end in
    // REJECTED (a REJ reaching an ESTABLISHED IB CM id enters timewait).
    let dup =
        once_only(info.kind) && info.kind != EventKind::Unreachable && list.contains(&info.kind);
    let ended = list.iter().any(|k| {
        matches!(
            k,
            EventKind::Disconnected | EventKind::Rejected | EventKind::ConnectError
        )
    });
    let after_end =
        list.contains(&EventKind::DeviceRemoval) || (ended && info.kind == EventKind::Established);
    list.push(info.kind);
    let l = list.clone();
    if after_end {
        s.problems.push(format!(
            "{host} {}: {} after the end: {:?}",
            info.id, info.kind, l
        ));
    }
    if dup {
        s.problems
            .push(format!("{host} {}: {} twice: {:?}", info.id, info.kind, l));
    }
    Ok(info)
}

/// Flags an error that does not name its call and errno.
fn well_formed(seen: &Shared, who: &str, e: &CmError) {
    let text = e.to_string();
    let call = text.split(':').next().unwrap_or("");
    let ok_call = call.starts_with("rdma_")
        || call.starts_with("ibv_")
        || text.starts_with("application error");
    let ok_errno =
        text.contains(&format!("({})", e.errno.0)) || text.starts_with("application error");
    if !(ok_call && ok_errno) {
        seen.lock()
            .unwrap()
            .problems
            .push(format!("{who}: badly formed error {text:?}"));
    }
}

/// Client connections, one process each.
const CONNS: u64 = 3;

/// Accepts odd requests ("hi"), rejects even ones, closes what ends; returns once idle for 60 s.
fn sweep_server<B: DataPath>(cm: &B, addr: SocketAddr, seen: &Shared) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 8)?;
    let wait = Wait::Timeout(Duration::from_secs(60));
    let mut open = 0u32;
    let mut requests = 0u64;
    loop {
        let e = match checked_next(cm, ch, seen, "server", wait) {
            Ok(e) => e,
            Err(e) if e.errno == Errno::ETIMEDOUT && open == 0 => break,
            Err(e) => return Err(e),
        };
        match e.kind {
            EventKind::ConnectRequest => {
                requests += 1;
                if requests % 2 == 0 {
                    let _ = cm.reject(e.id, b"odd only");
                    cm.destroy_id(e.id)?;
                    continue;
                }
                cm.create_qp(e.id, &QpInitAttr::new(QpType::Rc))?;
                match cm.accept(e.id, Some(&ConnParam::with_private_data(b"hi"))) {
                    Ok(()) => open += 1,
                    Err(err) => {
                        well_formed(seen, "server accept", &err);
                        cm.destroy_id(e.id)?;
                    }
                }
            }
            EventKind::Disconnected
            | EventKind::ConnectError
            | EventKind::Unreachable
            | EventKind::Rejected => {
                let _ = cm.disconnect(e.id);
                cm.destroy_id(e.id)?;
                open = open.saturating_sub(1);
            }
            EventKind::DeviceRemoval if e.id == listener => break,
            EventKind::DeviceRemoval => {
                cm.destroy_id(e.id)?;
                open = open.saturating_sub(1);
            }
            _ => {}
        }
    }
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(ch)
}

/// One connection: up for 50 ms, then closed; any other event ends it early.
fn sweep_client<B: DataPath>(
    cm: &B,
    addr: SocketAddr,
    seen: &Shared,
    n: u64,
) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let id = cm.create_id(Some(ch), n, PortSpace::TCP)?;
    let wait = Wait::Timeout(Duration::from_secs(200));
    let r = (|| -> Result<(), CmError> {
        cm.resolve_addr(id, None, addr, Duration::from_secs(2))?;
        let e = checked_next(cm, ch, seen, "client", wait)?;
        if e.kind != EventKind::AddrResolved {
            return Ok(());
        }
        cm.resolve_route(id, Duration::from_secs(2))?;
        let e = checked_next(cm, ch, seen, "client", wait)?;
        if e.kind != EventKind::RouteResolved {
            return Ok(());
        }
        cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
        cm.connect(id, Some(&ConnParam::with_private_data(&n.to_be_bytes())))?;
        let e = checked_next(cm, ch, seen, "client", wait)?;
        if e.kind != EventKind::Established {
            return Ok(());
        }
        cm.sleep(Duration::from_millis(50))?;
        cm.disconnect(id)?;
        loop {
            let e = checked_next(cm, ch, seen, "client", wait)?;
            if e.kind == EventKind::Disconnected || e.kind == EventKind::DeviceRemoval {
                break;
            }
        }
        Ok(())
    })();
    if let Err(e) = &r {
        well_formed(seen, "client", e);
    }
    cm.destroy_id(id)?;
    cm.destroy_event_channel(ch)
}

/// What a run of the small protocol left: its trace, the problems flagged, every id's events.
type Observed = (String, Vec<String>, Vec<Vec<EventKind>>);

/// The protocol on `ctx`'s fabric.
fn small_protocol(
    ctx: &RunContext,
    transport: Transport,
) -> Result<Observed, Box<dyn std::error::Error>> {
    let sip = "10.0.0.1".parse().unwrap();
    let fabric = ctx.build(ctx.builder().host("server", transport, &[sip]).host(
        "client",
        transport,
        &["10.0.0.2".parse().unwrap()],
    ))?;
    let addr = SocketAddr::new(sip, 7000);
    let seen: Shared = Arc::default();
    let s = seen.clone();
    fabric.spawn("server", "server", move |cm| {
        if let Err(e) = sweep_server(&cm, addr, &s) {
            well_formed(&s, "server", &e);
        }
        Ok(())
    });
    for n in 1..=CONNS {
        let s = seen.clone();
        fabric.spawn("client", &format!("client{n}"), move |cm| {
            cm.sleep(Duration::from_millis(n))?;
            if let Err(e) = sweep_client(&cm, addr, &s, n) {
                well_formed(&s, "client end", &e);
            }
            Ok(())
        });
    }
    let r = fabric.run();
    if let Err(e) = &r {
        seen.lock().unwrap().problems.push(format!("run: {e}"));
    }
    let mut seen = seen.lock().unwrap();
    let problems = std::mem::take(&mut seen.problems);
    let events = seen.events.values().cloned().collect();
    Ok((fabric.trace_text(), problems, events))
}

/// The property: the run replays byte for byte, and nothing was flagged.
fn small_protocol_holds(ctx: &RunContext, transport: Transport) -> Outcome {
    let (trace, problems, _) = small_protocol(ctx, transport)?;
    let (again, _, _) = small_protocol(ctx, transport)?;
    if trace != again {
        let at = trace.lines().zip(again.lines()).position(|(a, b)| a != b);
        return Err(format!("not deterministic, first difference at line {at:?}").into());
    }
    if !problems.is_empty() {
        return Err(problems.join("\n").into());
    }
    Ok(())
}

/// Without faults the protocol does what it says: per id, in order of the ids' names, the
/// three client connections (the second rejected) and the server's two accepted ones.
#[test]
fn without_faults_the_small_protocol_connects_twice_and_rejects_once() {
    use EventKind::*;
    let ctx = RunContext::new(1, FaultPlan::new());
    let (_, problems, events) = small_protocol(&ctx, Transport::Roce).expect("a fabric");
    assert_eq!(problems, Vec::<String>::new());
    let connected = [AddrResolved, RouteResolved, Established, Disconnected];
    let rejected = [AddrResolved, RouteResolved, Rejected];
    let mut clients: Vec<&[EventKind]> = events
        .iter()
        .map(Vec::as_slice)
        .filter(|e| e[0] == AddrResolved)
        .collect();
    clients.sort();
    let mut want: Vec<&[EventKind]> = vec![&connected, &connected, &rejected];
    want.sort();
    assert_eq!(clients, want);
    let served = |want: &[EventKind]| events.iter().filter(|e| e.as_slice() == want).count();
    assert_eq!(served(&[ConnectRequest, Established, Disconnected]), 2);
    assert_eq!(served(&[ConnectRequest]), 1, "the rejected one");
}

/// One sweep of 200 seeds over `transport`'s swarm plans (device unregistrations included;
/// reordered CM messages where they are datagrams).
fn sweep_holds(transport: Transport) {
    Sweep::new("outside-trial", move |ctx| {
        small_protocol_holds(ctx, transport)
    })
    .seeds(0..200)
    .swarm(
        SwarmSpace::new(&["server", "client"])
            .unregisters(true)
            .reorders(transport != Transport::Iwarp),
    )
    .quiet()
    .max_reduced(3)
    .run()
    .assert_ok();
}

#[test]
fn a_small_protocol_keeps_its_events_once_under_swarm_plans_roce() {
    sweep_holds(Transport::Roce);
}

#[test]
fn a_small_protocol_keeps_its_events_once_under_swarm_plans_infiniband() {
    sweep_holds(Transport::InfiniBand);
}

#[test]
fn a_small_protocol_keeps_its_events_once_under_swarm_plans_iwarp() {
    sweep_holds(Transport::Iwarp);
}

mod props {
    use super::*;
    use cmtwin_sim::strategies::{fault_plan, schedule, seed, transport};
    use proptest::prelude::*;

    fn space() -> SwarmSpace {
        SwarmSpace::new(&["server", "client"])
            .unregisters(true)
            .path_queries(true)
            .reorders(true)
            .addresses(&["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The same property over drawn seeds, transports, schedules and plans of up to 8
        /// faults (where an outside user's first run panicked the simulator: a CONNECT_RESPONSE
        /// fetched after its device was unregistered, now sim_faults'
        /// a_connect_response_fetched_after_its_device_was_unregistered_is_a_connect_error).
        #[test]
        fn a_small_protocol_keeps_its_events_once_under_drawn_worlds(
            seed in seed(), t in transport(), sched in schedule(), plan in fault_plan(&space(), 8)
        ) {
            let json = plan.to_json();
            let ctx = RunContext::new(seed, plan).with_schedule(sched);
            let outcome = small_protocol_holds(&ctx, t).map_err(|e| e.to_string());
            prop_assert!(outcome.is_ok(), "{:?} {} {:?} {:?}", outcome, json, sched, t);
        }
    }
}

// ----- threads and async inside a simulated host ----------------------------------------------

fn one_host(seed: u64) -> Fabric {
    Fabric::builder(seed)
        .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .host("b", Transport::Roce, &["10.0.0.2".parse().unwrap()])
        .build()
        .unwrap()
}

/// A condition variable's timeout ends at exactly 10 ms with the flag unset; the setter's
/// notify at 30 ms ends the wait; a semaphore nobody posts is a deadlock naming it.
#[test]
fn a_condvar_times_out_in_virtual_time_and_a_lone_semaphore_is_a_deadlock() {
    let fabric = one_host(4);
    let out: Log = Arc::default();
    let o = out.clone();
    fabric.spawn("a", "main", move |cm| {
        let pair = Arc::new((
            csync::Mutex::named("flag", false),
            csync::Condvar::named("flag set"),
        ));
        let (p2, cm2) = (pair.clone(), cm.clone());
        let setter = cthread::spawn("setter", move || -> Result<(), CmError> {
            cm2.sleep(Duration::from_millis(30))?;
            *p2.0.lock()? = true;
            p2.1.notify_one()
        })?;
        let g = pair.0.lock()?;
        let (mut g, timed_out) = pair.1.wait_timeout(g, Duration::from_millis(10))?;
        note(&o, &cm, "main", format!("{} {timed_out:?}", *g));
        while !*g {
            g = pair.1.wait(g)?;
        }
        note(&o, &cm, "main", format!("{}", *g));
        drop(g);
        setter.join()??;
        let lone = csync::Semaphore::named("tokens", 0).acquire();
        note(&o, &cm, "main", outcome(&lone));
        Ok(())
    });
    fabric.run().expect("main returns");
    assert_eq!(
        *out.lock().unwrap(),
        [
            "10ms main: false true",
            "30ms main: true",
            "30ms main: Semaphore::acquire: EDEADLK (35): deadlock: process main blocked in \
             Semaphore::acquire of the semaphore 'tokens' and nothing left can wake it",
        ]
    );
}

/// A thread sends once and panics: the receiver gets the value, then EPIPE (its sender went
/// with the panic), a timed receive too; the join is ECANCELED naming the panic, and the run
/// reports it.
#[test]
fn a_panicking_sender_closes_its_channel_and_fails_its_join() {
    let fabric = one_host(3);
    let out: Log = Arc::default();
    let o = out.clone();
    fabric.spawn("a", "main", move |cm| {
        let (tx, rx) = csync::channel::<u32>();
        let t = cthread::spawn("panicker", move || {
            tx.send(1).unwrap();
            panic!("worker gave up");
        })?;
        note(&o, &cm, "main", outcome(&rx.recv()));
        note(&o, &cm, "main", outcome(&rx.recv()));
        note(
            &o,
            &cm,
            "main",
            outcome(&rx.recv_timeout(Duration::from_millis(5))),
        );
        note(&o, &cm, "main", outcome(&t.join()));
        Ok(())
    });
    let failures = match fabric.run() {
        Err(cmtwin_sim::SimError::Failed { failures, .. }) => failures,
        other => panic!("the panic is the run's failure: {other:?}"),
    };
    assert_eq!(failures, ["process panicker panicked: worker gave up"]);
    let got = out.lock().unwrap().clone();
    assert_eq!(got[0], "0ns main: Ok(1)");
    let closed = "0ns main: Receiver::recv: EPIPE (32): the channel created at tests/tests/";
    assert!(
        got[1].starts_with(closed) && got[1].ends_with("is empty and every sender is gone"),
        "{}",
        got[1]
    );
    assert_eq!(got[1], got[2], "a timed receive too");
    assert_eq!(
        got[3],
        "0ns main: JoinHandle::join: ECANCELED (125): thread 'panicker' panicked: worker gave up"
    );
}

/// A hand-made select of an event and a sleep, as an async user writes a timed wait: on an idle
/// channel the sleep wins at exactly 5 ms; after a `resolve_addr` the ADDR_RESOLVED wins 10 µs
/// later.
#[test]
fn an_event_raced_against_a_sleep_in_async_code() {
    struct Either<A, B>(Pin<Box<A>>, Pin<Box<B>>);
    impl<A: Future, B: Future> Future for Either<A, B> {
        type Output = Result<A::Output, B::Output>;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            if let Poll::Ready(a) = self.0.as_mut().poll(cx) {
                return Poll::Ready(Ok(a));
            }
            self.1.as_mut().poll(cx).map(Err)
        }
    }
    let fabric = one_host(9);
    let out: Log = Arc::default();
    let o = out.clone();
    fabric.spawn("a", "main", move |cm| {
        let ch = cm.create_event_channel()?;
        block_on(&cm, async {
            let tick = || Box::pin(cm.sleep_for(Duration::from_millis(5)));
            let raced = Either(Box::pin(cm.event(ch)), tick()).await;
            note(
                &o,
                &cm,
                "main",
                format!("idle channel: event {}", raced.is_ok()),
            );
            let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
            cm.resolve_addr(
                id,
                None,
                "10.0.0.2:1".parse().unwrap(),
                Duration::from_secs(1),
            )?;
            match Either(Box::pin(cm.event(ch)), tick()).await {
                Ok(event) => note(&o, &cm, "main", event?.kind().to_string()),
                Err(slept) => note(&o, &cm, "main", format!("slept {slept:?}")),
            }
            cm.destroy_id(id)
        })??;
        cm.destroy_event_channel(ch)
    });
    fabric.run().expect("main returns");
    assert_eq!(
        *out.lock().unwrap(),
        [
            "5ms main: idle channel: event false",
            "5.01ms main: RDMA_CM_EVENT_ADDR_RESOLVED",
        ]
    );
}
