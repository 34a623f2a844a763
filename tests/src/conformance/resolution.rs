//! Address and route resolution (CM-SEMANTICS §4.3–§4.5, §14).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{Call, CmBackend, Errno, EventKind, EventParam, PortSpace, QpType, Transport, Wait};

use crate::bed::CmTimer;
use crate::steps::{
    add_qp, assert_timer_end, client_endpoint, expect_errno, expect_event_for, expect_no_event, ok,
    resolved_client, teardown_client, Endpoint, RESOLVE_TIMEOUT,
};
use crate::TestBed;

/// §4.4, §4.5, §5.1: ADDR_RESOLVED then ROUTE_RESOLVED, status 0, for the id, without
/// listen_id, parameters or private data; afterwards the id's source is the client's address
/// with an ephemeral port and its destination the address resolved.
pub fn resolve_addr_then_route<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let dst = bed.server_addr();
    ok(
        cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let addr = expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    assert_eq!(addr.listen_id, None, "ADDR_RESOLVED listen_id");
    assert_eq!(addr.param, EventParam::None, "ADDR_RESOLVED param");
    assert!(addr.private_data.is_empty(), "ADDR_RESOLVED private data");

    let local = ok(cm.local_addr(ep.id), "local_addr").expect("source address after resolve");
    assert_eq!(
        local.ip(),
        bed.client_ip(),
        "source IP chosen by routing (§14.4)"
    );
    assert_ne!(local.port(), 0, "auto-bind picks an ephemeral port (§4.4)");
    let peer = ok(cm.peer_addr(ep.id), "peer_addr").expect("destination after resolve");
    assert_eq!(peer, dst, "destination after resolve (§14.4)");

    ok(cm.resolve_route(ep.id, RESOLVE_TIMEOUT), "resolve_route");
    let route = expect_event_for(cm, ep.channel, EventKind::RouteResolved, ep.id, 0);
    assert_eq!(route.listen_id, None, "ROUTE_RESOLVED listen_id");
    assert!(route.private_data.is_empty(), "ROUTE_RESOLVED private data");
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §4.4 step 1: on a bound id resolve_addr keeps the bound address and port.
pub fn resolve_addr_keeps_bound_source<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let src = SocketAddr::new(bed.client_ip(), bed.fresh_port());
    ok(cm.bind_addr(ep.id, src), "bind_addr");
    assert_eq!(
        ok(cm.local_addr(ep.id), "local_addr"),
        Some(src),
        "bound address"
    );
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    assert_eq!(
        ok(cm.local_addr(ep.id), "local_addr"),
        Some(src),
        "resolve_addr must keep the bound source"
    );
    teardown_client(bed, &ep);
}

/// §3.2: resolve_addr in ADDR_RESOLVED is EINVAL, and leaves the id resolved (route
/// resolution still works).
pub fn resolve_addr_twice_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let dst = bed.server_addr();
    ok(
        cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    expect_errno(
        cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
        Call::ResolveAddr,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    ok(cm.resolve_route(ep.id, RESOLVE_TIMEOUT), "resolve_route");
    expect_event_for(cm, ep.channel, EventKind::RouteResolved, ep.id, 0);
    teardown_client(bed, &ep);
}

/// §3.2/§16.1: resolve_route before the address is resolved (IDLE, or bound) is refused
/// with EINVAL (librdmacm would dereference a NULL device).
pub fn resolve_route_before_addr_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    expect_errno(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::EINVAL,
    );
    ok(
        cm.bind_addr(ep.id, SocketAddr::new(bed.client_ip(), bed.fresh_port())),
        "bind_addr",
    );
    expect_errno(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §4.5, §3.4: resolve_route with a zero timeout is EINVAL; the id stays ADDR_RESOLVED, so
/// a retry with a valid timeout succeeds.
pub fn resolve_route_zero_timeout_is_einval_and_retry_works<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    expect_errno(
        cm.resolve_route(ep.id, Duration::ZERO),
        Call::ResolveRoute,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    ok(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        "resolve_route retry",
    );
    expect_event_for(cm, ep.channel, EventKind::RouteResolved, ep.id, 0);
    teardown_client(bed, &ep);
}

/// §3.2: resolve_route twice (ROUTE_RESOLVED) is EINVAL.
pub fn resolve_route_twice_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    crate::steps::resolve(cm, ep, bed.server_addr());
    expect_errno(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §4.4 step 2: a destination of another family than the bound source is EINVAL.
pub fn resolve_addr_family_mismatch_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.bind_addr(ep.id, SocketAddr::new(bed.client_ip(), bed.fresh_port())),
        "bind_addr",
    );
    let v6: IpAddr = "2001:db8::1".parse().expect("literal");
    expect_errno(
        cm.resolve_addr(ep.id, None, SocketAddr::new(v6, 7471), RESOLVE_TIMEOUT),
        Call::ResolveAddr,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §14.2, §19: a destination without a route fails synchronously with ENETUNREACH and no
/// event; the id stays ADDR_BOUND (§3.4), so resolving a reachable address then works.
pub fn resolve_addr_without_route_is_enetunreach<T: TestBed>(bed: &T) {
    let unroutable = bed
        .unroutable_ip()
        .expect("the scenario needs UnroutableAddress");
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    expect_errno(
        cm.resolve_addr(
            ep.id,
            None,
            SocketAddr::new(unroutable, 7471),
            RESOLVE_TIMEOUT,
        ),
        Call::ResolveAddr,
        Errno::ENETUNREACH,
    );
    expect_no_event(cm, ep.channel);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr after a synchronous failure",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    teardown_client(bed, &ep);
}

/// §4.4 step 3, §14.3: a loopback destination (127.0.0.1) is resolved by "loopback
/// resolution": ADDR_RESOLVED, source 127.0.0.1 with the id's port. (Route resolution then
/// differs: §14.3 says it succeeds, Soft-RoCE on Linux 6.1 answers ENODEV; not checked.)
/// On iWARP an unbound id's loopback resolution fails at once with EINVAL: cma_bind_loopback
/// attaches the device with its P_Key 0, and an iWARP device has no P_Key table (measured on
/// siw, Linux 6.1 and 6.12).
pub fn resolve_loopback_destination<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let dst = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), bed.fresh_port());
    if bed.transport() == Transport::Iwarp {
        expect_errno(
            cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
            Call::ResolveAddr,
            Errno::EINVAL,
        );
        expect_no_event(cm, ep.channel);
    } else {
        ok(
            cm.resolve_addr(ep.id, None, dst, RESOLVE_TIMEOUT),
            "resolve_addr",
        );
        expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
        let local = ok(cm.local_addr(ep.id), "local_addr").expect("a source");
        assert_eq!(
            local.ip(),
            IpAddr::from([127, 0, 0, 1]),
            "loopback source (§4.4)"
        );
    }
    teardown_client(bed, &ep);
}

/// §14.2, §3.3, §19 ("ARP gets no answer, timeout 1000 ms: ADDR_ERROR -110 about 1 s later; a
/// second resolve_addr on the same id is allowed"): an on-link address whose neighbour never
/// answers ends in ADDR_ERROR -ETIMEDOUT (no data) at the timeout, and the id, back in
/// ADDR_BOUND, then resolves a reachable address.
pub fn unanswered_arp_is_addr_error<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let nobody = bed
        .no_neighbour_ip()
        .expect("the scenario needs NoNeighbour");
    let timeout = Duration::from_millis(1000);
    ok(
        cm.resolve_addr(ep.id, None, SocketAddr::new(nobody, 7471), timeout),
        "resolve_addr",
    );
    let t0 = bed.now();
    let err = expect_event_for(
        cm,
        ep.channel,
        EventKind::AddrError,
        ep.id,
        -Errno::ETIMEDOUT.0,
    );
    assert!(err.private_data.is_empty(), "ADDR_ERROR carries no data");
    let waited = bed.now().saturating_sub(t0);
    if bed.is_simulated() {
        assert_eq!(waited, timeout, "ADDR_ERROR at the resolution's timeout");
    } else {
        assert!(
            (timeout..=timeout * 3).contains(&waited),
            "ADDR_ERROR after {waited:?}, expected about the 1000 ms timeout"
        );
    }
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr again after ADDR_ERROR",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    teardown_client(bed, &ep);
}

/// §5.1 (ROUTE_ERROR), §14.2 (cma.c `cma_query_handler`): on InfiniBand a failed SA path query
/// is ROUTE_ERROR with the SA client's status (no path: -EINVAL, a silent SA: -ETIMEDOUT at
/// the route timeout), and the id goes back to ADDR_RESOLVED: resolve_route can be retried and
/// then succeeds.
pub fn failed_path_query_is_route_error<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    for (no_path, status) in [(true, -Errno::EINVAL.0), (false, -Errno::ETIMEDOUT.0)] {
        bed.fail_path_queries(no_path)
            .unwrap_or_else(|e| panic!("fail the path query: {e}"));
        ok(cm.resolve_route(ep.id, RESOLVE_TIMEOUT), "resolve_route");
        let t0 = bed.now();
        let err = expect_event_for(cm, ep.channel, EventKind::RouteError, ep.id, status);
        assert!(err.private_data.is_empty(), "ROUTE_ERROR carries no data");
        if bed.is_simulated() {
            // The simulated SA answers after its 200 µs round trip; a silent one never does.
            let (after, what) = match no_path {
                true => (Duration::from_micros(200), "one SA round trip"),
                false => (RESOLVE_TIMEOUT, "a silent SA: the route timeout"),
            };
            assert_eq!(bed.now() - t0, after, "{what}");
        }
    }
    ok(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        "resolve_route once more",
    );
    expect_event_for(cm, ep.channel, EventKind::RouteResolved, ep.id, 0);
    teardown_client(bed, &ep);
}

/// §5.2 S6, §15.2, §19: a connect to an address that resolves but where no CM answers ends in
/// UNREACHABLE -ETIMEDOUT after the REQ's first transmission and 15 retries: on the simulator
/// exactly when the fabric's retry timers say (102.37 s from here on the 250 Hz wheel), on
/// Linux 6.1/rxe about 102.1-102.3 s, on 6.12/rxe 77.7 s (the twin's window). Nothing follows
/// it.
///
/// On iWARP siw makes the TCP connection inside `rdma_connect`: to an address that never
/// answers, the call blocks through TCP's SYN retries (6 by default: 1 + 2 + ... + 64 = 127 s)
/// and fails with ETIMEDOUT, and no event follows (measured on siw, Linux 6.1 and 6.12). The
/// simulator's call blocks exactly as long in virtual time.
pub fn silent_peer_is_unreachable_after_retries<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let silent = bed.silent_ip().expect("the scenario needs SilentPeer");
    let ep = resolved_client(bed, PortSpace::TCP, SocketAddr::new(silent, 7471));
    add_qp(cm, ep.id, QpType::Rc);
    if bed.transport() == Transport::Iwarp {
        let t0 = bed.now();
        expect_errno(cm.connect(ep.id, None), Call::Connect, Errno::ETIMEDOUT);
        let took = bed.now().saturating_sub(t0);
        if bed.is_simulated() {
            assert_eq!(
                took,
                cmtwin_sim::IW_TCP_SYN_GIVE_UP,
                "the call blocks through TCP's SYN retries, as on siw"
            );
        } else {
            let window = Duration::from_secs(120)..=Duration::from_secs(140);
            assert!(
                window.contains(&took),
                "TCP gave up after {took:?}, outside {window:?}"
            );
        }
        expect_no_event(cm, ep.channel);
    } else {
        connect_to_silent_peer(bed, &ep);
    }
    teardown_client(bed, &ep);
}

/// IB and RoCE: the REQ's retries end in UNREACHABLE -ETIMEDOUT at the CM's timer.
fn connect_to_silent_peer<T: TestBed>(bed: &T, ep: &Endpoint) {
    let cm = bed.client();
    ok(cm.connect(ep.id, None), "connect");
    let t0 = bed.now();
    let event = cm
        .get_cm_event(ep.channel, Wait::Timeout(Duration::from_secs(200)))
        .expect("an outcome within 200 s");
    let (kind, status) = (event.kind(), event.status());
    ok(cm.ack_cm_event(event), "ack");
    assert_eq!(
        (kind, status),
        (EventKind::Unreachable, -Errno::ETIMEDOUT.0),
        "outcome"
    );
    assert_timer_end(
        bed,
        CmTimer::ConnectRetries,
        t0,
        bed.now(),
        Duration::from_secs(95)..=Duration::from_secs(110),
    );
    expect_no_event(cm, ep.channel);
}
