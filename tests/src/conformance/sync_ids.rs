//! Synchronous ids (no channel): the call itself waits for the id's next event and keeps it;
//! `get_request` on synchronous listeners; `migrate_id` between modes (CM-SEMANTICS §11,
//! §4.16).

use std::net::SocketAddr;

use cmtwin::{
    rai, AddrInfo, Call, CmBackend, ConnParam, Errno, EventKind, EventParam, IbRejReason,
    PortSpace, QpInitAttr, QpType, Transport,
};

use crate::steps::{
    add_qp, expect_errno, expect_event_for, listen_on, ok, resolved_client, teardown,
    teardown_client, teardown_listener, LISTENER_CONTEXT, RESOLVE_TIMEOUT,
};
use crate::TestBed;

/// §11.1, §11.2: resolve_addr and resolve_route on a synchronous id return once the id's
/// event arrived (status 0 → Ok) and keep it as the id's current event.
pub fn sync_resolution_returns_after_the_event<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let id = ok(cm.create_id(None, 5, PortSpace::TCP), "create sync id");
    assert_eq!(
        ok(cm.sync_event(id), "sync_event"),
        None,
        "a new id has no event"
    );
    ok(
        cm.resolve_addr(id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "sync resolve_addr",
    );
    let ev = ok(cm.sync_event(id), "sync_event").expect("ADDR_RESOLVED kept");
    assert_eq!(
        (ev.kind, ev.status, ev.id),
        (EventKind::AddrResolved, 0, id)
    );
    assert!(
        ok(cm.local_addr(id), "local_addr").is_some(),
        "resolved id has a source"
    );
    ok(cm.resolve_route(id, RESOLVE_TIMEOUT), "sync resolve_route");
    let ev = ok(cm.sync_event(id), "sync_event").expect("ROUTE_RESOLVED kept");
    assert_eq!(
        (ev.kind, ev.status, ev.id),
        (EventKind::RouteResolved, 0, id)
    );
    ok(cm.destroy_id(id), "destroy sync id");
}

/// §11.2: a synchronous connect that is rejected returns ECONNREFUSED (whatever the reject
/// reason) and keeps the REJECTED event (status 8: nobody listens). On iWARP the connect's
/// own TCP connection is refused: ECONNREFUSED with no event, the id keeps its
/// ROUTE_RESOLVED (measured on siw).
pub fn sync_connect_rejected_is_econnrefused<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let id = ok(cm.create_id(None, 0, PortSpace::TCP), "create sync id");
    let nobody = SocketAddr::new(bed.server_ip(), bed.fresh_port());
    ok(
        cm.resolve_addr(id, None, nobody, RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    ok(cm.resolve_route(id, RESOLVE_TIMEOUT), "resolve_route");
    add_qp(cm, id, QpType::Rc);
    expect_errno(cm.connect(id, None), Call::Connect, Errno::ECONNREFUSED);
    let ev = ok(cm.sync_event(id), "sync_event").expect("an event kept");
    match crate::steps::no_listener_status(bed.transport()) {
        Some(status) => {
            assert_eq!(ev.kind, EventKind::Rejected, "kept event");
            assert_eq!(ev.status, status, "reject reason");
        }
        None => assert_eq!(
            (ev.kind, ev.status),
            (EventKind::RouteResolved, 0),
            "the route's event is still the kept one"
        ),
    }
    ok(cm.destroy_id(id), "destroy sync id");
}

/// §11.3: get_request on a synchronous listener returns a new synchronous id holding the
/// CONNECT_REQUEST (listen_id = the listener, the client's data, the listener's context);
/// rejecting it reaches the client as REJECTED 28 with the data.
pub fn get_request_on_sync_listener<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = ok(
        server_cm.create_id(None, LISTENER_CONTEXT, PortSpace::TCP),
        "create sync listener",
    );
    let addr = bed.server_addr();
    ok(server_cm.bind_addr(listener, addr), "bind");
    ok(server_cm.listen(listener, 8), "listen");
    let client = resolved_client(bed, PortSpace::TCP, addr);
    let client_qp = add_qp(client_cm, client.id, QpType::Rc);
    ok(
        client_cm.connect(client.id, Some(&ConnParam::with_private_data(b"sync?"))),
        "connect",
    );
    let child = ok(server_cm.get_request(listener), "get_request");
    assert_ne!(child, listener, "get_request returns a new id");
    let req = ok(server_cm.sync_event(child), "sync_event").expect("CONNECT_REQUEST kept");
    assert_eq!(req.kind, EventKind::ConnectRequest, "kept event");
    assert_eq!(req.status, 0, "status");
    assert_eq!(req.id, child, "event id");
    assert_eq!(req.listen_id, Some(listener), "listen_id");
    let EventParam::Conn(conn) = req.param else {
        panic!("CONNECT_REQUEST must carry conn data, got {:?}", req.param);
    };
    // iWARP's MPA request carries no QPN (measured on siw: 0).
    let peer_qpn = if bed.transport() == Transport::Iwarp {
        0
    } else {
        client_qp
    };
    assert_eq!(conn.qp_num, peer_qpn, "peer QPN");
    assert_eq!(&req.private_data[..5], b"sync?", "client's data");
    assert_eq!(
        ok(server_cm.context(child), "context"),
        LISTENER_CONTEXT,
        "inherited context"
    );
    if bed.transport() != Transport::Iwarp {
        ok(server_cm.reject(child, b"no"), "reject");
        let rej = expect_event_for(
            client_cm,
            client.channel,
            EventKind::Rejected,
            client.id,
            IbRejReason::CONSUMER_DEFINED,
        );
        assert_eq!(&rej.private_data[..2], b"no", "reject data");
    }
    // The kept CONNECT_REQUEST counts against the listener until the child is destroyed
    // (§11.3; cmtwin refuses with EBUSY instead of blocking).
    expect_errno(
        server_cm.destroy_id(listener),
        Call::DestroyId,
        Errno::EBUSY,
    );
    ok(server_cm.destroy_id(child), "destroy child");
    ok(server_cm.destroy_id(listener), "destroy listener");
    teardown_client(bed, &client);
}

/// §11.3: get_request on an asynchronous listener is EINVAL.
pub fn get_request_on_async_listener_is_einval<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    expect_errno(
        bed.server().get_request(listener.id),
        Call::GetRequest,
        Errno::EINVAL,
    );
    teardown_listener(bed, &listener);
}

/// §11.3: get_request on a synchronous id that does not listen is EINVAL (librdmacm itself
/// would block forever: a safe binding refuses).
pub fn get_request_on_non_listening_sync_id_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let id = ok(cm.create_id(None, 0, PortSpace::TCP), "sync id");
    ok(cm.bind_addr(id, bed.server_addr()), "bind");
    expect_errno(cm.get_request(id), Call::GetRequest, Errno::EINVAL);
    ok(cm.destroy_id(id), "destroy");
}

/// §4.16, §11.1: a request taken with get_request can be migrated to a channel and accepted
/// asynchronously; ESTABLISHED then arrives on that channel.
pub fn sync_child_migrated_to_channel_connects<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = ok(
        server_cm.create_id(None, 0, PortSpace::TCP),
        "sync listener",
    );
    let addr = bed.server_addr();
    ok(server_cm.bind_addr(listener, addr), "bind");
    ok(server_cm.listen(listener, 8), "listen");
    let client = resolved_client(bed, PortSpace::TCP, addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let child = ok(server_cm.get_request(listener), "get_request");
    let channel = ok(server_cm.create_event_channel(), "server channel");
    ok(
        server_cm.migrate_id(child, Some(channel)),
        "migrate child to a channel",
    );
    add_qp(server_cm, child, QpType::Rc);
    ok(server_cm.accept(child, None), "accept (asynchronous now)");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    expect_event_for(server_cm, channel, EventKind::Established, child, 0);
    teardown_client(bed, &client);
    expect_event_for(server_cm, channel, EventKind::Disconnected, child, 0);
    teardown(server_cm, &[child], channel);
    ok(server_cm.destroy_id(listener), "destroy listener");
}

/// §4.16: migrate_id(None) makes an id synchronous; doing it again is EINVAL.
pub fn migrate_to_sync_twice_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(cm.migrate_id(id, None), "migrate to synchronous");
    expect_errno(cm.migrate_id(id, None), Call::MigrateId, Errno::EINVAL);
    // Now synchronous: resolve_addr waits for its event itself.
    ok(
        cm.resolve_addr(id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "sync resolve_addr",
    );
    let ev = ok(cm.sync_event(id), "sync_event").expect("kept event");
    assert_eq!(ev.kind, EventKind::AddrResolved, "kept event");
    crate::steps::expect_no_event(cm, channel);
    // The channel no longer has ids.
    ok(
        cm.destroy_event_channel(channel),
        "destroy the emptied channel",
    );
    ok(cm.destroy_id(id), "destroy_id");
}

/// §11.2, §5.2 S13: a synchronous UD connect maps the UNREACHABLE SIDR status to errno:
/// no listener (status 1) → EPERM, rejected (status 2) → ENOENT; the event is kept.
pub fn sync_ud_connect_statuses_become_errnos<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let sync_ud_client = |dst: SocketAddr| {
        let id = ok(client_cm.create_id(None, 0, PortSpace::UDP), "sync UD id");
        ok(
            client_cm.resolve_addr(id, None, dst, RESOLVE_TIMEOUT),
            "resolve_addr",
        );
        ok(
            client_cm.resolve_route(id, RESOLVE_TIMEOUT),
            "resolve_route",
        );
        add_qp(client_cm, id, QpType::Ud);
        id
    };
    let nobody = SocketAddr::new(bed.server_ip(), bed.fresh_port());
    let id = sync_ud_client(nobody);
    expect_errno(client_cm.connect(id, None), Call::Connect, Errno::EPERM);
    let ev = ok(client_cm.sync_event(id), "sync_event").expect("UNREACHABLE kept");
    assert_eq!(
        (ev.kind, ev.status),
        (EventKind::Unreachable, 1),
        "kept event"
    );
    ok(client_cm.destroy_id(id), "destroy");

    // A synchronous server rejects from its own (sync) listener.
    let listener = ok(
        server_cm.create_id(None, 0, PortSpace::UDP),
        "sync UD listener",
    );
    let addr = bed.server_addr();
    ok(server_cm.bind_addr(listener, addr), "bind");
    ok(server_cm.listen(listener, 4), "listen");
    // The client's connect blocks until the SIDR REP: reject first is impossible in one thread,
    // so the client connects asynchronously here and the status→errno mapping of a sync
    // connect is covered by the no-listener case above.
    let client = resolved_client(bed, PortSpace::UDP, addr);
    add_qp(client_cm, client.id, QpType::Ud);
    ok(client_cm.connect(client.id, None), "UD connect");
    let child = ok(server_cm.get_request(listener), "get_request");
    ok(server_cm.reject(child, b""), "reject");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Unreachable,
        client.id,
        2,
    );
    ok(server_cm.destroy_id(child), "destroy child");
    ok(server_cm.destroy_id(listener), "destroy listener");
    teardown_client(bed, &client);
}

/// §11.4, §11.3: `rdma_create_ep` on a passive result gives a synchronous id bound to the
/// source, without a QP; on an active one an id whose address and route are resolved (its kept
/// event is ROUTE_RESOLVED) and which has a QP. `get_request` on the passive one's listen gives
/// the new id a QP of the attributes `create_ep` kept, with which it connects; `destroy_ep`
/// takes QP and id.
pub fn create_ep_listens_and_connects_with_the_qps_it_made<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let addr = bed.server_addr();
    let mut attr = QpInitAttr::new(QpType::Rc);
    let passive = AddrInfo::new(rai::PASSIVE, PortSpace::TCP, QpType::Rc, Some(addr), None);
    let listener = ok(
        server_cm.create_ep(&passive, Some(&mut attr)),
        "create_ep (passive)",
    );
    assert_eq!(
        ok(server_cm.local_addr(listener), "local_addr"),
        Some(addr),
        "bound to the source"
    );
    assert_eq!(ok(server_cm.qp_num(listener), "qp_num"), None, "no QP");
    ok(server_cm.listen(listener, 8), "listen");
    let active = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(addr));
    let id = ok(
        client_cm.create_ep(&active, Some(&mut attr)),
        "create_ep (active)",
    );
    let ev = ok(client_cm.sync_event(id), "sync_event").expect("an event kept");
    assert_eq!((ev.kind, ev.status), (EventKind::RouteResolved, 0), "kept");
    let client_qp = ok(client_cm.qp_num(id), "qp_num").expect("the endpoint's QP");
    let channel = ok(client_cm.create_event_channel(), "client channel");
    ok(
        client_cm.migrate_id(id, Some(channel)),
        "migrate to a channel",
    );
    ok(client_cm.connect(id, None), "connect");
    let child = ok(server_cm.get_request(listener), "get_request");
    let server_qp = ok(server_cm.qp_num(child), "qp_num").expect("get_request's QP");
    let req = ok(server_cm.sync_event(child), "sync_event").expect("CONNECT_REQUEST kept");
    let EventParam::Conn(conn) = req.param else {
        panic!("CONNECT_REQUEST must carry conn data, got {:?}", req.param);
    };
    // iWARP's MPA request carries no QPN (measured on siw: 0).
    let peer_qpn = if bed.transport() == Transport::Iwarp {
        0
    } else {
        client_qp
    };
    assert_eq!(conn.qp_num, peer_qpn, "the client's QPN");
    // A synchronous accept would wait for the RTU, which the client's librdmacm sends when
    // the client fetches its event: in one thread, the child takes a channel first.
    let server_channel = ok(server_cm.create_event_channel(), "server channel");
    ok(
        server_cm.migrate_id(child, Some(server_channel)),
        "migrate the child to a channel",
    );
    ok(server_cm.accept(child, None), "accept");
    let established = expect_event_for(client_cm, channel, EventKind::Established, id, 0);
    if bed.transport() != Transport::Iwarp {
        let EventParam::Conn(rep) = established.param else {
            panic!(
                "ESTABLISHED must carry conn data, got {:?}",
                established.param
            );
        };
        assert_eq!(rep.qp_num, server_qp, "the server's QPN");
    }
    expect_event_for(server_cm, server_channel, EventKind::Established, child, 0);
    ok(client_cm.destroy_ep(id), "destroy_ep (client)");
    ok(
        client_cm.destroy_event_channel(channel),
        "destroy client channel",
    );
    expect_event_for(server_cm, server_channel, EventKind::Disconnected, child, 0);
    ok(server_cm.destroy_ep(child), "destroy_ep (child)");
    ok(
        server_cm.destroy_event_channel(server_channel),
        "destroy server channel",
    );
    ok(server_cm.destroy_ep(listener), "destroy_ep (listener)");
}

/// §11.4: `rdma_create_ep` fails with the errno of the step that failed, naming that step: a
/// destination without a route is `rdma_resolve_addr`'s ENETUNREACH (librdmacm's
/// `rdma_create_ep` returns the step's -1 with its errno). A passive result without a source or
/// an active one without a destination is EINVAL.
pub fn create_ep_fails_with_the_failed_steps_error<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let unroutable = bed
        .unroutable_ip()
        .expect("the scenario needs UnroutableAddress");
    let nowhere = SocketAddr::new(unroutable, 7471);
    let active = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(nowhere));
    let mut attr = QpInitAttr::new(QpType::Rc);
    let e = expect_errno(
        cm.create_ep(&active, Some(&mut attr)),
        Call::CreateEp,
        Errno::ENETUNREACH,
    );
    assert!(
        e.detail
            .starts_with("rdma_resolve_addr failed with ENETUNREACH (101): "),
        "the step is not named: {e}"
    );
    let no_source = AddrInfo::new(rai::PASSIVE, PortSpace::TCP, QpType::Rc, None, None);
    expect_errno(
        cm.create_ep(&no_source, None),
        Call::CreateEp,
        Errno::EINVAL,
    );
    let no_destination = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, None);
    expect_errno(
        cm.create_ep(&no_destination, None),
        Call::CreateEp,
        Errno::EINVAL,
    );
}
