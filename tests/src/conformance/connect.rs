//! Connection establishment (CM-SEMANTICS §4.7–§4.10, §5.1, §5.2 S1).

use std::time::Duration;

use cmtwin::{
    delivered_private_data_len, CmBackend, ConnData, ConnParam, EventKind, EventParam, PortSpace,
    PrivateDataOp, QpType, Transport,
};

use crate::steps::{
    add_qp, connect_pair, expect_event_for, expect_no_event, expect_quiet, expect_request,
    listen_on, ok, refusal_status, resolved_client, teardown, teardown_pair, Endpoint,
    LISTENER_CONTEXT,
};
use crate::TestBed;

/// §4.9, §5.1 (CONNECT_REQUEST): the request arrives on the listener's channel with a new id,
/// `listen_id` = the listener, status 0, connection data describing the peer (its QPN, its
/// initiator depth as our responder resources and vice versa, flow control, retry counts) and
/// the listener's context inherited by the new id; the new id's addresses mirror the client's.
pub fn connect_request_describes_the_peer<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    let client_qp = add_qp(client_cm, client.id, QpType::Rc);
    let param = ConnParam {
        responder_resources: 2,
        initiator_depth: 3,
        flow_control: 1,
        retry_count: 6,
        rnr_retry_count: 5,
        ..ConnParam::default()
    };
    ok(client_cm.connect(client.id, Some(&param)), "connect");
    let req = expect_request(server_cm, &listener);
    assert_eq!(
        req.port_space,
        PortSpace::TCP,
        "the request's id is in TCP space"
    );
    let EventParam::Conn(conn) = req.param else {
        panic!(
            "CONNECT_REQUEST of an RC id must carry conn data, got {:?}",
            req.param
        );
    };
    assert_eq!(
        conn.responder_resources, 3,
        "responder_resources = peer's initiator depth"
    );
    assert_eq!(
        conn.initiator_depth, 2,
        "initiator_depth = peer's responder resources"
    );
    if bed.transport() == Transport::Iwarp {
        // The MPA request carries the IRD and ORD only (measured on siw).
        let (qpn, fc, retry, rnr) = (
            conn.qp_num,
            conn.flow_control,
            conn.retry_count,
            conn.rnr_retry_count,
        );
        assert_eq!(
            (qpn, fc, retry, rnr),
            (0, 0, 0, 0),
            "iWARP: no QPN, flow control or retry counts"
        );
    } else {
        assert_eq!(
            conn.qp_num, client_qp,
            "CONNECT_REQUEST qp_num = the peer's QPN"
        );
        assert_eq!(conn.flow_control, 1, "flow_control");
        assert_eq!(conn.retry_count, 6, "retry_count");
        assert_eq!(conn.rnr_retry_count, 5, "rnr_retry_count");
    }
    if bed.transport() != Transport::Iwarp {
        assert_eq!(
            req.private_data,
            vec![0; 56],
            "no private data sent: 56 zero bytes delivered (§6.2)"
        );
    }
    assert_eq!(
        ok(server_cm.context(req.id), "context"),
        LISTENER_CONTEXT,
        "the new id inherits the listener's context (§5.1)"
    );
    let client_local = ok(client_cm.local_addr(client.id), "client local_addr");
    assert_eq!(
        ok(server_cm.peer_addr(req.id), "child peer_addr"),
        client_local,
        "child's peer = the client's source (§14.4)"
    );
    assert_eq!(
        ok(server_cm.local_addr(req.id), "child local_addr"),
        Some(listener.addr),
        "child's local address = the listener's address and port (§14.4)"
    );
    // Nothing else happens until the server decides (§4.9 step 6).
    expect_no_event(client_cm, client.channel);
    ok(server_cm.destroy_id(req.id), "destroy child");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[listener.id], listener.channel);
}

/// §5.2 S1, §5.1 (ESTABLISHED): accepting with QPs on both ids gives ESTABLISHED on both
/// sides; the client's carries the REP's connection data (server QPN, 196 bytes of private
/// data), the server's nothing but zeros (no data; on iWARP the agreed IRD and ORD).
pub fn accept_establishes_both_sides<T: TestBed>(bed: &T) {
    let pair = connect_pair(bed);
    let client = &pair.client_established;
    let EventParam::Conn(conn) = client.param else {
        panic!(
            "client ESTABLISHED must carry conn data, got {:?}",
            client.param
        );
    };
    // iWARP's MPA reply carries no QPN (measured on siw: 0).
    let server_qpn = if bed.transport() == Transport::Iwarp {
        0
    } else {
        pair.server_qp
    };
    assert_eq!(
        conn.qp_num, server_qpn,
        "client ESTABLISHED: the server's QPN"
    );
    if let Some(len) = delivered_private_data_len(bed.transport(), PrivateDataOp::Accept) {
        assert_eq!(
            client.private_data,
            vec![0; len],
            "client ESTABLISHED: REP private data, zero-filled (§6.2)"
        );
    }
    let server = &pair.server_established;
    assert!(
        server.private_data.is_empty(),
        "server ESTABLISHED carries no private data (§6.2)"
    );
    assert_eq!(server.listen_id, None, "server ESTABLISHED listen_id");
    assert_eq!(client.listen_id, None, "client ESTABLISHED listen_id");
    if bed.transport() != Transport::Iwarp {
        // The RTU carries nothing: librdmacm still hands over the connection member of the
        // param union, all zeros (measured on rxe, Linux 6.1 and 6.12). siw's carries the
        // agreed IRD and ORD (accept_parameters_reach_the_client).
        assert_eq!(
            server.param,
            EventParam::Conn(ConnData::default()),
            "server ESTABLISHED: zero connection data"
        );
    }
    // Exactly one ESTABLISHED per side (§5.5).
    expect_no_event(bed.client(), pair.client.channel);
    expect_no_event(bed.server(), pair.server.channel);
    teardown_pair(bed, &pair);
}

/// §4.10, §5.1 (CONNECT_RESPONSE), §5.4: an active id without QP gets CONNECT_RESPONSE (not
/// ESTABLISHED); the passive side gets ESTABLISHED only after the client's `establish`.
pub fn connect_without_qp_gives_connect_response_then_establish<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = crate::steps::request_without_qp(bed, 0x00ab_cdef);
    let EventParam::Conn(req_conn) = req.param else {
        panic!("CONNECT_REQUEST must carry conn data, got {:?}", req.param);
    };
    assert_eq!(
        req_conn.qp_num, 0x00ab_cdef,
        "qp_num from the connect parameters (§4.7)"
    );
    let server_qp = add_qp(server_cm, req.id, QpType::Rc);
    let accept_data = b"welcome";
    ok(
        server_cm.accept(req.id, Some(&ConnParam::with_private_data(accept_data))),
        "accept",
    );
    let resp = expect_event_for(
        client_cm,
        client.channel,
        EventKind::ConnectResponse,
        client.id,
        0,
    );
    let EventParam::Conn(conn) = resp.param else {
        panic!(
            "CONNECT_RESPONSE must carry conn data, got {:?}",
            resp.param
        );
    };
    assert_eq!(conn.qp_num, server_qp, "CONNECT_RESPONSE: the server's QPN");
    crate::steps::assert_padded(&resp.private_data, accept_data, 196, "CONNECT_RESPONSE");
    // No RTU yet: the server is not established (§5.2 S1 step 4).
    expect_quiet(server_cm, listener.channel, Duration::from_millis(500));
    ok(client_cm.establish(client.id), "establish");
    expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    // establish produces no event for the caller (§4.10).
    expect_no_event(client_cm, client.channel);
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[req.id, listener.id], listener.channel);
}

/// §4.8: a listener accepts several connections, each CONNECT_REQUEST with its own new id,
/// including with a backlog of 1 once earlier requests have been fetched.
pub fn listener_serves_several_connections<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 1);
    let mut children = Vec::new();
    let mut clients: Vec<Endpoint> = Vec::new();
    for _ in 0..3 {
        let client = resolved_client(bed, PortSpace::TCP, listener.addr);
        add_qp(client_cm, client.id, QpType::Rc);
        ok(
            client_cm.connect(client.id, None),
            "connect with default parameters",
        );
        let req = expect_request(server_cm, &listener);
        assert!(!children.contains(&req.id), "a request reused an id");
        add_qp(server_cm, req.id, QpType::Rc);
        ok(server_cm.accept(req.id, None), "accept");
        expect_event_for(
            client_cm,
            client.channel,
            EventKind::Established,
            client.id,
            0,
        );
        expect_event_for(
            server_cm,
            listener.channel,
            EventKind::Established,
            req.id,
            0,
        );
        children.push(req.id);
        clients.push(client);
    }
    for client in &clients {
        teardown(client_cm, &[client.id], client.channel);
    }
    // The client ids' destruction sent DREQs (§7.4): the children see DISCONNECTED.
    for _ in &children {
        let info = crate::steps::expect_event(server_cm, listener.channel, EventKind::Disconnected);
        assert!(
            children.contains(&info.id),
            "DISCONNECTED for an unknown id"
        );
    }
    children.push(listener.id);
    teardown(server_cm, &children, listener.channel);
}

/// §4.8, §4.9: a listener bound to the wildcard address receives requests for the server's
/// address; the new id's local address is the destination the client used.
pub fn wildcard_listener_accepts_requests<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let channel = ok(server_cm.create_event_channel(), "channel");
    let id = ok(
        server_cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id",
    );
    let port = bed.fresh_port();
    let wildcard = std::net::SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), port);
    ok(server_cm.bind_addr(id, wildcard), "bind wildcard");
    ok(server_cm.listen(id, 4), "listen");
    let listener = crate::steps::Listener {
        channel,
        id,
        addr: wildcard,
    };
    let dst = std::net::SocketAddr::new(bed.server_ip(), port);
    let client = resolved_client(bed, PortSpace::TCP, dst);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = expect_request(server_cm, &listener);
    assert_eq!(
        ok(server_cm.local_addr(req.id), "child local_addr"),
        Some(dst),
        "the child's local address is the destination (§14.4)"
    );
    ok(server_cm.reject(req.id, b""), "reject");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[req.id, id], channel);
}

/// §5.2 S7/S8, §4.10: if the initiator destroys its id while its request is pending (IB CM:
/// REJ 4; iWARP: the TCP connection closes), the server's id gets no event and a later accept
/// fails with EINVAL; on iWARP with ECONNRESET (siw_accept finds the connection gone,
/// measured on siw).
pub fn accept_after_initiator_gave_up_is_einval<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = expect_request(server_cm, &listener);
    add_qp(server_cm, req.id, QpType::Rc);
    teardown(client_cm, &[client.id], client.channel);
    // The REJ(4) reaches the server's CM; the child (not accepted) gets no event (§5.6).
    expect_quiet(server_cm, listener.channel, Duration::from_millis(300));
    let errno = if bed.transport() == Transport::Iwarp {
        cmtwin::Errno::ECONNRESET
    } else {
        cmtwin::Errno::EINVAL
    };
    crate::steps::expect_errno(server_cm.accept(req.id, None), cmtwin::Call::Accept, errno);
    expect_no_event(server_cm, listener.channel);
    teardown(server_cm, &[req.id, listener.id], listener.channel);
}

/// §4.8: the backlog counts requests queued and not yet fetched; fetching one returns its
/// slot (accepting is not needed): with backlog 1, a second request arrives at once (well
/// before a REQ retransmission, ≥ 4.6 s) once the first was fetched.
pub fn backlog_slot_returns_when_request_is_fetched<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 1);
    let a = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, a.id, QpType::Rc);
    ok(client_cm.connect(a.id, None), "connect a");
    let first = expect_request(server_cm, &listener);
    let b = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, b.id, QpType::Rc);
    ok(client_cm.connect(b.id, None), "connect b");
    let event = ok(
        server_cm.get_cm_event(
            listener.channel,
            cmtwin::Wait::Timeout(Duration::from_secs(2)),
        ),
        "the second request must not wait for a retransmission",
    );
    assert_eq!(event.kind(), EventKind::ConnectRequest, "second request");
    let second = event.id();
    ok(server_cm.ack_cm_event(event), "ack");
    assert_ne!(first.id, second, "two requests, two ids");
    teardown(client_cm, &[a.id, b.id], a.channel);
    teardown(client_cm, &[], b.channel);
    teardown(
        server_cm,
        &[first.id, second, listener.id],
        listener.channel,
    );
}

/// §5.1 (CONNECT_REQUEST, ESTABLISHED), §4.10: the parameters given to accept reach the
/// client's ESTABLISHED from the server's perspective, swapped: the server's initiator depth
/// is the client's responder resources and vice versa. On iWARP siw negotiates instead
/// (relaxed IRD negotiation, measured on siw): the server's ORD (its initiator depth, 4) is
/// cut to the client's IRD (its responder resources: the device maximum, 128), its IRD (its
/// responder resources, 5) raised to the client's ORD (128); the client reports the agreed
/// IRD as responder resources and the ORD as initiator depth, and no RNR count or QPN. On
/// every transport the client's retry count is 0: the reply has none.
pub fn accept_parameters_reach_the_client<T: TestBed>(bed: &T) {
    let accept = ConnParam {
        responder_resources: 5,
        initiator_depth: 4,
        retry_count: 3,
        rnr_retry_count: 6,
        ..ConnParam::default()
    };
    let pair = crate::steps::connect_pair_with(bed, &ConnParam::default(), &accept);
    let EventParam::Conn(conn) = pair.client_established.param else {
        panic!("client ESTABLISHED must carry conn data");
    };
    // Neither a REP nor an MPA reply carries a retry count: the event's is 0 whatever accept
    // gave (cma.c `cma_set_rep_event_data` leaves it; measured on rxe and siw).
    assert_eq!(conn.retry_count, 0, "no retry count in the reply");
    if bed.transport() == Transport::Iwarp {
        assert_eq!(
            (conn.responder_resources, conn.initiator_depth),
            (128, 4),
            "the agreed IRD and ORD"
        );
        assert_eq!(
            (conn.rnr_retry_count, conn.qp_num),
            (0, 0),
            "no RNR count, no QPN"
        );
        let EventParam::Conn(server) = pair.server_established.param else {
            panic!("iWARP: the server's ESTABLISHED carries the agreed IRD and ORD");
        };
        assert_eq!(
            (server.responder_resources, server.initiator_depth),
            (4, 128),
            "the server's ESTABLISHED: its ORD and IRD"
        );
    } else {
        assert_eq!(
            conn.responder_resources, 4,
            "= the server's initiator depth"
        );
        assert_eq!(
            conn.initiator_depth, 5,
            "= the server's responder resources"
        );
        assert_eq!(conn.rnr_retry_count, 6, "the server's RNR retry count");
        assert_eq!(conn.qp_num, pair.server_qp, "the server's QPN");
    }
    teardown_pair(bed, &pair);
}
