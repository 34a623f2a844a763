//! Small steps the scenarios are built from: waiting for an event of a kind, asserting an
//! errno, a listener, a resolved client, a connected pair, and teardown.
//!
//! Every wait uses [`WAIT`] (30 s): long enough for a real kernel in a software-emulated VM,
//! and free on the simulator, where a wait advances virtual time only as far as the event.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, ConnParam, Errno, EventInfo, EventKind, IbRejReason,
    IdHandle, PortSpace, QpInitAttr, QpType, Result, Transport, Wait,
};

use crate::bed::CmTimer;
use crate::TestBed;

/// How long a scenario waits for an event that must come.
pub const WAIT: Duration = Duration::from_secs(30);

/// The `timeout_ms` given to address and route resolution.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// The context value listeners are created with (children inherit it, §5.1).
pub const LISTENER_CONTEXT: u64 = 0x5e7e_c0de;

/// The context value client ids are created with.
pub const CLIENT_CONTEXT: u64 = 0xc11e_0001;

/// Unwraps `result`, or panics naming `what` and the error.
#[track_caller]
pub fn ok<T>(result: Result<T>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(err) => panic!("{what}: unexpected error: {err}"),
    }
}

/// Asserts that `result` failed in `call` with `errno`, and returns the error.
#[track_caller]
pub fn expect_errno<T: Debug>(result: Result<T>, call: Call, errno: Errno) -> CmError {
    match result {
        Ok(value) => panic!("{call}: expected {errno}, but the call succeeded with {value:?}"),
        Err(err) => {
            assert_eq!(err.errno, errno, "{call}: wrong errno in {err}");
            assert_eq!(err.call, call, "wrong call named in {err}");
            err
        }
    }
}

/// Waits (at most [`WAIT`]) for the next event on `channel`, acknowledges it and returns what
/// it said.
#[track_caller]
pub fn next_event<B: CmBackend>(cm: &B, channel: ChannelHandle) -> EventInfo {
    let event = ok(
        cm.get_cm_event(channel, Wait::Timeout(WAIT)),
        "waiting for an event",
    );
    let info = event.info().clone();
    ok(cm.ack_cm_event(event), "acknowledging an event");
    info
}

/// Waits (at most [`WAIT`]) for the next event on `channel`, asserts that it is of `kind`,
/// acknowledges it and returns what it said.
#[track_caller]
pub fn expect_event<B: CmBackend>(cm: &B, channel: ChannelHandle, kind: EventKind) -> EventInfo {
    match cmtwin::expect_event(cm, channel, kind, Wait::Timeout(WAIT)) {
        Ok(info) => info,
        Err(e) => panic!("waiting for {kind} on {channel}: {e}"),
    }
}

/// Like [`expect_event`], and also asserts the event's id and status.
#[track_caller]
pub fn expect_event_for<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    kind: EventKind,
    id: IdHandle,
    status: i32,
) -> EventInfo {
    let info = expect_event(cm, channel, kind);
    assert_eq!(info.id, id, "{kind}: event for the wrong id");
    assert_eq!(info.status, status, "{kind}: wrong status");
    info
}

/// Asserts that `channel` has no event right now (a non-blocking fetch gives EAGAIN).
#[track_caller]
pub fn expect_no_event<B: CmBackend>(cm: &B, channel: ChannelHandle) {
    match cm.get_cm_event(channel, Wait::NonBlocking) {
        Ok(event) => {
            let info = event.info().clone();
            let _ = cm.ack_cm_event(event);
            panic!(
                "expected no event on {channel}, got {} (status {}) for {}",
                info.kind, info.status, info.id
            );
        }
        Err(err) => {
            assert_eq!(err.errno, Errno::EAGAIN, "non-blocking fetch: {err}");
            assert_eq!(err.call, Call::GetCmEvent, "wrong call named in {err}");
        }
    }
}

/// Asserts that no event arrives on `channel` within `quiet` (the timed wait gives ETIMEDOUT).
#[track_caller]
pub fn expect_quiet<B: CmBackend>(cm: &B, channel: ChannelHandle, quiet: Duration) {
    match cm.get_cm_event(channel, Wait::Timeout(quiet)) {
        Ok(event) => {
            let info = event.info().clone();
            let _ = cm.ack_cm_event(event);
            panic!(
                "expected no event on {channel} for {quiet:?}, got {} (status {}) for {}",
                info.kind, info.status, info.id
            );
        }
        Err(err) => {
            assert_eq!(err.errno, Errno::ETIMEDOUT, "timed fetch: {err}");
            assert_eq!(err.call, Call::GetCmEvent, "wrong call named in {err}");
        }
    }
}

/// The REJECTED status a client sees when the server's kernel or application refuses its
/// request: IB REJ reason 28 on IB and RoCE (§2.7); on iWARP the MPA reject, which siw reports
/// as -ECONNRESET (measured on siw, Linux 6.1 and 6.12; other iWARP drivers may say
/// -ECONNREFUSED, §5.3).
pub fn refusal_status(transport: Transport) -> i32 {
    match transport {
        Transport::Iwarp => -Errno::ECONNRESET.0,
        _ => IbRejReason::CONSUMER_DEFINED,
    }
}

/// The REJECTED status of a connect to a port nobody listens on, where one comes: IB REJ
/// reason 8 (invalid service id, §2.7) on IB and RoCE; `None` on iWARP, whose connect fails
/// instead ([`connect_to_nobody`]).
pub fn no_listener_status(transport: Transport) -> Option<i32> {
    match transport {
        Transport::Iwarp => None,
        _ => Some(IbRejReason::INVALID_SERVICE_ID),
    }
}

/// Connects `ep` (resolved, with a QP) to a port nobody listens on and checks the refusal.
/// On IB and RoCE the call succeeds and REJECTED with IB REJ reason 8 and 148 zero bytes
/// follows (§5.2 S3). On iWARP siw makes the TCP connection inside `rdma_connect`, and the
/// peer's reset fails the call with ECONNREFUSED: no event follows, and the id keeps its
/// route (cma.c restores ROUTE_RESOLVED), so it may connect again (measured on siw, Linux 6.1
/// and 6.12).
pub fn connect_to_nobody<B: CmBackend>(
    cm: &B,
    transport: Transport,
    ep: &Endpoint,
    param: Option<&ConnParam>,
) {
    let Some(status) = no_listener_status(transport) else {
        expect_errno(cm.connect(ep.id, param), Call::Connect, Errno::ECONNREFUSED);
        expect_no_event(cm, ep.channel);
        return;
    };
    ok(cm.connect(ep.id, param), "connect");
    let rej = expect_event_for(cm, ep.channel, EventKind::Rejected, ep.id, status);
    assert_reject_data(
        transport,
        &rej.private_data,
        b"",
        "REJ(8) data: 148 zero bytes (§6.2)",
    );
    expect_no_event(cm, ep.channel);
}

/// Asserts that a REJECTED's `data` is what the peer sent: `sent` zero-padded to the REJ's
/// 148 bytes on IB and RoCE (§6.2), exactly `sent` on iWARP (MPA carries its length, §5.3).
#[track_caller]
pub fn assert_reject_data(transport: Transport, data: &[u8], sent: &[u8], what: &str) {
    match transport {
        Transport::Iwarp => assert_eq!(data, sent, "{what}: MPA reject data, exact length"),
        _ => assert_padded(data, sent, 148, what),
    }
}

/// Asserts that `data` is `prefix` followed by zeros up to exactly `len` bytes.
#[track_caller]
pub fn assert_padded(data: &[u8], prefix: &[u8], len: usize, what: &str) {
    assert_eq!(data.len(), len, "{what}: delivered private-data length");
    assert_eq!(
        &data[..prefix.len()],
        prefix,
        "{what}: private-data content"
    );
    assert!(
        data[prefix.len()..].iter().all(|b| *b == 0),
        "{what}: private data not zero-padded after the sender's {} bytes",
        prefix.len()
    );
}

/// A recognisable private-data pattern of `len` bytes (never all zero).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

/// An id and the channel it delivers its events to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The event channel.
    pub channel: ChannelHandle,
    /// The id.
    pub id: IdHandle,
}

/// A listening id on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    /// The listener's channel (CONNECT_REQUESTs arrive here).
    pub channel: ChannelHandle,
    /// The listening id.
    pub id: IdHandle,
    /// The address it listens on (the server's IP and a fresh port).
    pub addr: SocketAddr,
}

/// Creates a channel and an id of `ps` on the server, binds it to the server's IP with a fresh
/// port and listens with `backlog`. The id's context is [`LISTENER_CONTEXT`].
pub fn listen_on<T: TestBed>(bed: &T, ps: PortSpace, backlog: i32) -> Listener {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "server channel");
    let id = ok(
        cm.create_id(Some(channel), LISTENER_CONTEXT, ps),
        "listener id",
    );
    let addr = bed.server_addr();
    ok(cm.bind_addr(id, addr), "bind listener");
    ok(cm.listen(id, backlog), "listen");
    Listener { channel, id, addr }
}

/// Creates a channel and an id of `ps` on the client (context [`CLIENT_CONTEXT`]).
pub fn client_endpoint<T: TestBed>(bed: &T, ps: PortSpace) -> Endpoint {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "client channel");
    let id = ok(cm.create_id(Some(channel), CLIENT_CONTEXT, ps), "client id");
    Endpoint { channel, id }
}

/// Resolves `ep`'s address and route towards `dst`, expecting ADDR_RESOLVED then
/// ROUTE_RESOLVED (status 0, for this id).
pub fn resolve<B: CmBackend>(cm: &B, ep: Endpoint, dst: SocketAddr) {
    ok(
        cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    ok(cm.resolve_route(ep.id, RESOLVE_TIMEOUT), "resolve_route");
    expect_event_for(cm, ep.channel, EventKind::RouteResolved, ep.id, 0);
}

/// A client id of `ps` with its route resolved to `dst`.
pub fn resolved_client<T: TestBed>(bed: &T, ps: PortSpace, dst: SocketAddr) -> Endpoint {
    let ep = client_endpoint(bed, ps);
    resolve(bed.client(), ep, dst);
    ep
}

/// Creates a QP of the port space's default type on `id` and returns its number.
pub fn add_qp<B: CmBackend>(cm: &B, id: IdHandle, qp_type: QpType) -> u32 {
    ok(cm.create_qp(id, &QpInitAttr::new(qp_type)), "create_qp")
}

/// Waits for a CONNECT_REQUEST on the listener's channel and checks that it names a new id and
/// the listener.
#[track_caller]
pub fn expect_request<B: CmBackend>(cm: &B, listener: &Listener) -> EventInfo {
    let req = expect_event(cm, listener.channel, EventKind::ConnectRequest);
    assert_eq!(req.status, 0, "CONNECT_REQUEST status");
    assert_eq!(
        req.listen_id,
        Some(listener.id),
        "CONNECT_REQUEST listen_id"
    );
    assert_ne!(req.id, listener.id, "CONNECT_REQUEST must carry a new id");
    req
}

/// Listens on the server, resolves a client and connects it without a QP (announcing
/// `qp_num`, §4.7), then waits for the CONNECT_REQUEST: (listener, client, request).
pub fn request_without_qp<T: TestBed>(bed: &T, qp_num: u32) -> (Listener, Endpoint, EventInfo) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    let param = ConnParam {
        qp_num,
        ..ConnParam::default()
    };
    ok(
        bed.client().connect(client.id, Some(&param)),
        "connect without QP",
    );
    let request = expect_request(bed.server(), &listener);
    (listener, client, request)
}

/// A connected RC pair: a listener and its accepted child on the server, a client id, all
/// with QPs, after ESTABLISHED on both sides.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The server's listener.
    pub listener: Listener,
    /// The server's connected (child) id; its events arrive on the listener's channel.
    pub server: Endpoint,
    /// The client's connected id.
    pub client: Endpoint,
    /// The server child's QP number.
    pub server_qp: u32,
    /// The client's QP number.
    pub client_qp: u32,
    /// The ESTABLISHED event the client saw.
    pub client_established: EventInfo,
    /// The ESTABLISHED event the server saw.
    pub server_established: EventInfo,
}

/// Sets up a listener on the server and a client, connects them with QPs on both ids and
/// default parameters, and returns after ESTABLISHED on both sides (§5.2 S1).
pub fn connect_pair<T: TestBed>(bed: &T) -> Pair {
    connect_pair_with(bed, &ConnParam::default(), &ConnParam::default())
}

/// [`connect_pair`] with explicit connect and accept parameters.
pub fn connect_pair_with<T: TestBed>(bed: &T, connect: &ConnParam, accept: &ConnParam) -> Pair {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    let client_qp = add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, Some(connect)), "connect");

    let req = expect_request(server_cm, &listener);
    let server = Endpoint {
        channel: listener.channel,
        id: req.id,
    };
    let server_qp = add_qp(server_cm, server.id, QpType::Rc);
    ok(server_cm.accept(server.id, Some(accept)), "accept");

    let client_established = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    let server_established = expect_event_for(
        server_cm,
        server.channel,
        EventKind::Established,
        server.id,
        0,
    );
    Pair {
        listener,
        server,
        client,
        server_qp,
        client_qp,
        client_established,
        server_established,
    }
}

/// Disconnects a pair in order (client first; server answers) and waits for DISCONNECTED on
/// both sides (§5.2 S10).
pub fn disconnect_pair<T: TestBed>(bed: &T, pair: &Pair) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    ok(client_cm.disconnect(pair.client.id), "client disconnect");
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    ok(server_cm.disconnect(pair.server.id), "server disconnect");
    expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::Disconnected,
        pair.client.id,
        0,
    );
}

/// Destroys `ids` (in order) and then `channel` on `cm`, asserting each succeeds.
pub fn teardown<B: CmBackend>(cm: &B, ids: &[IdHandle], channel: ChannelHandle) {
    for id in ids {
        ok(cm.destroy_id(*id), "destroy_id in teardown");
    }
    ok(
        cm.destroy_event_channel(channel),
        "destroy_event_channel in teardown",
    );
}

/// Destroys everything a pair holds: the client's id and channel, then the server's child,
/// listener and channel.
pub fn teardown_pair<T: TestBed>(bed: &T, pair: &Pair) {
    teardown(bed.client(), &[pair.client.id], pair.client.channel);
    teardown(
        bed.server(),
        &[pair.server.id, pair.listener.id],
        pair.listener.channel,
    );
}

/// Destroys a listener and its channel.
pub fn teardown_listener<T: TestBed>(bed: &T, listener: &Listener) {
    teardown(bed.server(), &[listener.id], listener.channel);
}

/// Destroys a client endpoint.
pub fn teardown_client<T: TestBed>(bed: &T, ep: &Endpoint) {
    teardown(bed.client(), &[ep.id], ep.channel);
}

/// Asserts that `result` failed in `call` as for an address no RDMA device has: with the
/// bed's errno where it knows it, else ENODEV or EADDRNOTAVAIL
/// ([`TestBed::unconfigured_address_errno`]).
#[track_caller]
pub fn expect_unconfigured_address<T: TestBed, R: Debug>(bed: &T, result: Result<R>, call: Call) {
    match bed.unconfigured_address_errno() {
        Some(errno) => {
            expect_errno(result, call, errno);
        }
        None => {
            let err = result.expect_err("an address no device has must be refused");
            assert_eq!(err.call, call, "{err}");
            assert!(
                err.errno == Errno::ENODEV || err.errno == Errno::EADDRNOTAVAIL,
                "expected ENODEV or EADDRNOTAVAIL: {err}"
            );
        }
    }
}

/// Asserts when a timer-driven event came: at `now`, the CM's `timer` started at `started`
/// must end exactly then on a bed that knows its timers (the simulator, in virtual time); on a
/// real machine within the window around its simulated twin's timer
/// ([`crate::bed::twin_window`]), or, on a bed without a twin, within `window` of `started`
/// (the measurement's spread on Linux 6.1).
#[track_caller]
pub fn assert_timer_end<T: TestBed>(
    bed: &T,
    timer: CmTimer,
    started: Duration,
    now: Duration,
    window: std::ops::RangeInclusive<Duration>,
) {
    let took = now.saturating_sub(started);
    match bed.cm_timer_end(timer, started) {
        Some(end) => assert_eq!(
            now,
            end,
            "{timer:?} ended {took:?} after its start, expected {:?}",
            end.saturating_sub(started)
        ),
        None => {
            let (window, whose) = match bed.twin_timer(timer) {
                Some(expected) => (crate::bed::twin_window(expected), "the twin's"),
                None => (window, "the scenario's"),
            };
            assert!(
                window.contains(&took),
                "{timer:?} ended {took:?} after its start, outside {whose} window {window:?}"
            );
        }
    }
}
