//! The kernel's legal-call table: a call in the wrong state fails with the kernel's errno and
//! changes nothing (CM-SEMANTICS §3.1, §3.2, §16; §19 for calls librdmacm 44 would crash on).

use std::net::SocketAddr;

use cmtwin::{
    AsyncEvent, Call, CmBackend, CmOption, ConnParam, Errno, EventKind, PortSpace, QpType,
};

use crate::steps::{
    add_qp, client_endpoint, connect_pair, expect_errno, expect_event_for, expect_no_event,
    expect_request, listen_on, ok, resolved_client, teardown, teardown_client, teardown_listener,
    teardown_pair, RESOLVE_TIMEOUT,
};
use crate::TestBed;

/// §3.2, §4.3: a second bind is EINVAL and leaves the first binding in place.
pub fn bind_twice_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let first = SocketAddr::new(bed.client_ip(), bed.fresh_port());
    ok(cm.bind_addr(ep.id, first), "first bind");
    expect_errno(
        cm.bind_addr(ep.id, SocketAddr::new(bed.client_ip(), bed.fresh_port())),
        Call::BindAddr,
        Errno::EINVAL,
    );
    assert_eq!(
        ok(cm.local_addr(ep.id), "local_addr"),
        Some(first),
        "a failed call must not change the id (§3.1)"
    );
    teardown_client(bed, &ep);
}

/// §3.2: bind after resolve_addr (ADDR_RESOLVED) and on a listener is EINVAL.
pub fn bind_after_resolve_or_listen_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    expect_errno(
        cm.bind_addr(ep.id, SocketAddr::new(bed.client_ip(), bed.fresh_port())),
        Call::BindAddr,
        Errno::EINVAL,
    );
    teardown_client(bed, &ep);

    let listener = listen_on(bed, PortSpace::TCP, 8);
    expect_errno(
        bed.server().bind_addr(
            listener.id,
            SocketAddr::new(bed.server_ip(), bed.fresh_port()),
        ),
        Call::BindAddr,
        Errno::EINVAL,
    );
    teardown_listener(bed, &listener);
}

/// §3.2, §4.8: listen on a listener is EINVAL; listen on a resolved id is EINVAL.
pub fn listen_twice_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    expect_errno(
        bed.server().listen(listener.id, 8),
        Call::Listen,
        Errno::EINVAL,
    );
    teardown_listener(bed, &listener);

    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    expect_errno(cm.listen(ep.id, 8), Call::Listen, Errno::EINVAL);
    teardown_client(bed, &ep);
}

/// §3.2, §4.8: listen on an IDLE id binds the wildcard address with an ephemeral port.
pub fn listen_on_idle_id_autobinds<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(cm.listen(id, 0), "listen on IDLE");
    let local = ok(cm.local_addr(id), "local_addr").expect("a listener has a local address");
    assert!(
        local.ip().is_unspecified(),
        "auto-bind to the wildcard address: {local}"
    );
    assert_ne!(
        local.port(),
        0,
        "auto-bind picks an ephemeral port: {local}"
    );
    teardown(cm, &[id], channel);
}

/// §3.2, §16.2: connect before the route is resolved (IDLE, ADDR_RESOLVED) is EINVAL.
pub fn connect_before_route_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let param = ConnParam::default();
    expect_errno(
        cm.connect(ep.id, Some(&param)),
        Call::Connect,
        Errno::EINVAL,
    );
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    add_qp(cm, ep.id, QpType::Rc);
    expect_errno(
        cm.connect(ep.id, Some(&param)),
        Call::Connect,
        Errno::EINVAL,
    );
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §4.7: an RC id without QP and without connection parameters is EINVAL.
pub fn connect_rc_without_qp_or_params_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let cm = bed.client();
    let ep = resolved_client(bed, PortSpace::TCP, listener.addr);
    expect_errno(cm.connect(ep.id, None), Call::Connect, Errno::EINVAL);
    expect_no_event(bed.server(), listener.channel);
    teardown_client(bed, &ep);
    teardown_listener(bed, &listener);
}

/// §3.2 (CONNECT column): a second connect on a connecting id is EINVAL.
pub fn connect_twice_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let cm = bed.client();
    let ep = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(cm, ep.id, QpType::Rc);
    ok(cm.connect(ep.id, None), "connect");
    expect_errno(cm.connect(ep.id, None), Call::Connect, Errno::EINVAL);
    let req = expect_request(bed.server(), &listener);
    // Exactly one request reached the server.
    expect_no_event(bed.server(), listener.channel);
    teardown_client(bed, &ep);
    teardown(bed.server(), &[req.id, listener.id], listener.channel);
}

/// §3.2, §19: accept and reject on a listener are EINVAL (librdmacm 44 would crash).
pub fn accept_or_reject_on_listener_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let cm = bed.server();
    expect_errno(
        cm.accept(listener.id, Some(&ConnParam::default())),
        Call::Accept,
        Errno::EINVAL,
    );
    expect_errno(cm.reject(listener.id, b""), Call::Reject, Errno::EINVAL);
    teardown_listener(bed, &listener);
}

/// §3.2: accept, reject, disconnect, notify and establish on an IDLE id are EINVAL.
pub fn connection_calls_on_idle_id_are_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    expect_errno(
        cm.accept(ep.id, Some(&ConnParam::default())),
        Call::Accept,
        Errno::EINVAL,
    );
    expect_errno(cm.reject(ep.id, b""), Call::Reject, Errno::EINVAL);
    expect_errno(cm.disconnect(ep.id), Call::Disconnect, Errno::EINVAL);
    expect_errno(
        cm.notify(ep.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EINVAL,
    );
    expect_errno(cm.establish(ep.id), Call::Establish, Errno::EINVAL);
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §3.2 (resolve_addr, listen columns): resolve_addr on a listener is EINVAL.
pub fn resolve_addr_on_listener_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    expect_errno(
        bed.server().resolve_addr(
            listener.id,
            None,
            SocketAddr::new(bed.client_ip(), 9),
            RESOLVE_TIMEOUT,
        ),
        Call::ResolveAddr,
        Errno::EINVAL,
    );
    teardown_listener(bed, &listener);
}

/// §4.10: accept on an established child is EINVAL; `establish` on an id with a QP is EINVAL;
/// neither disturbs the connection on IB and RoCE (no event on either side). On iWARP the
/// failed accept's error path (cma_modify_qp_err) moves the QP to ERROR, which ends the
/// connection: DISCONNECTED (status 0) on both sides (measured on siw, Linux 6.1 and 6.12).
pub fn accept_or_establish_after_establishment_is_einval<T: TestBed>(bed: &T) {
    let pair = connect_pair(bed);
    expect_errno(
        bed.server()
            .accept(pair.server.id, Some(&ConnParam::default())),
        Call::Accept,
        Errno::EINVAL,
    );
    if bed.transport() == cmtwin::Transport::Iwarp {
        for (cm, ep) in [(bed.client(), pair.client), (bed.server(), pair.server)] {
            crate::steps::expect_event_for(cm, ep.channel, EventKind::Disconnected, ep.id, 0);
        }
    }
    expect_errno(
        bed.client().establish(pair.client.id),
        Call::Establish,
        Errno::EINVAL,
    );
    expect_no_event(bed.client(), pair.client.channel);
    expect_no_event(bed.server(), pair.server.channel);
    teardown_pair(bed, &pair);
}

/// §9.3: notify(COMM_EST) on an established id is EISCONN on IB/RoCE (the IB CM is
/// ESTABLISHED on both sides); on iWARP notify returns 0 and does nothing (§9.2).
pub fn notify_on_established_id_is_eisconn<T: TestBed>(bed: &T) {
    let pair = connect_pair(bed);
    if bed.transport() == cmtwin::Transport::Iwarp {
        ok(
            bed.client().notify(pair.client.id, AsyncEvent::COMM_EST),
            "notify on iWARP",
        );
        ok(
            bed.server().notify(pair.server.id, AsyncEvent::COMM_EST),
            "notify on iWARP",
        );
    } else {
        expect_errno(
            bed.client().notify(pair.client.id, AsyncEvent::COMM_EST),
            Call::Notify,
            Errno::EISCONN,
        );
        expect_errno(
            bed.server().notify(pair.server.id, AsyncEvent::COMM_EST),
            Call::Notify,
            Errno::EISCONN,
        );
    }
    expect_no_event(bed.server(), pair.server.channel);
    teardown_pair(bed, &pair);
}

/// §2.4: REUSEADDR may be set on an IDLE id but not turned on on a listener; AFONLY only in
/// IDLE or ADDR_BOUND; ACK_TIMEOUT only on RC ids.
pub fn option_legality<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(
        cm.set_option(id, &CmOption::ReuseAddr(true)),
        "REUSEADDR on IDLE",
    );
    ok(cm.set_option(id, &CmOption::AfOnly(true)), "AFONLY on IDLE");
    ok(
        cm.set_option(id, &CmOption::AckTimeout(14)),
        "ACK_TIMEOUT on RC",
    );
    ok(cm.bind_addr(id, bed.server_addr()), "bind");
    ok(cm.listen(id, 8), "listen");
    expect_errno(
        cm.set_option(id, &CmOption::ReuseAddr(true)),
        Call::SetOption,
        Errno::EINVAL,
    );
    expect_errno(
        cm.set_option(id, &CmOption::AfOnly(true)),
        Call::SetOption,
        Errno::EINVAL,
    );
    ok(cm.set_option(id, &CmOption::Tos(0)), "TOS in any state");
    let ud = ok(
        cm.create_id(Some(channel), 0, PortSpace::UDP),
        "create UD id",
    );
    expect_errno(
        cm.set_option(ud, &CmOption::AckTimeout(14)),
        Call::SetOption,
        Errno::EINVAL,
    );
    teardown(cm, &[ud, id], channel);
}

/// §3.1, §3.4: an id is never reusable for a second connection: after REJECTED, connect is
/// EINVAL (the id stays in CONNECT). On IB and RoCE nobody listens; on iWARP (where a connect
/// to nobody fails in the call and leaves the route) a listener refuses with an MPA reject.
pub fn connect_after_rejected_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let iwarp = bed.transport() == cmtwin::Transport::Iwarp;
    let refuser = iwarp.then(|| crate::steps::listen_on(bed, PortSpace::TCP, 8));
    let to = match &refuser {
        Some(l) => l.addr,
        None => SocketAddr::new(bed.server_ip(), bed.fresh_port()),
    };
    let ep = resolved_client(bed, PortSpace::TCP, to);
    add_qp(cm, ep.id, QpType::Rc);
    ok(cm.connect(ep.id, None), "connect");
    if let Some(l) = &refuser {
        let req = crate::steps::expect_request(bed.server(), l);
        ok(bed.server().reject(req.id, b""), "reject");
        ok(
            bed.server().destroy_id(req.id),
            "destroy the rejected request",
        );
    }
    let rej = crate::steps::expect_event(cm, ep.channel, EventKind::Rejected);
    assert_eq!(rej.id, ep.id, "REJECTED for the id");
    expect_errno(cm.connect(ep.id, None), Call::Connect, Errno::EINVAL);
    expect_errno(
        cm.resolve_route(ep.id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::EINVAL,
    );
    teardown_client(bed, &ep);
    if let Some(l) = &refuser {
        crate::steps::teardown(bed.server(), &[l.id], l.channel);
    }
}
