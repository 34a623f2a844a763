//! Address and route resolution (CM-SEMANTICS §4.3–§4.5, §14).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{Call, CmBackend, Errno, EventKind, EventParam, PortSpace};

use crate::steps::{
    client_endpoint, expect_errno, expect_event_for, expect_no_event, ok, teardown_client,
    RESOLVE_TIMEOUT,
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
    let Some(unroutable) = bed.unroutable_ip() else {
        eprintln!("skipped: the bed knows no unroutable address");
        return;
    };
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
pub fn resolve_loopback_destination<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let dst = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), bed.fresh_port());
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
    teardown_client(bed, &ep);
}
