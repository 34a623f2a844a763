//! Rejections: by the application, by a missing listener, by destroying an unaccepted request
//! (CM-SEMANTICS §4.11, §5.2 S2/S3/S9, §6.2, §19).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    delivered_private_data_len, CmBackend, ConnParam, EventKind, EventParam, IbRejReason,
    PortSpace, PrivateDataOp, QpType, Transport,
};

use crate::steps::{
    add_qp, assert_padded, assert_reject_data, connect_to_nobody, expect_event_for,
    expect_no_event, expect_quiet, expect_request, listen_on, no_listener_status, ok,
    refusal_status, resolved_client, teardown,
};
use crate::TestBed;

/// §5.2 S2, §6.2: `reject` with data → the client gets REJECTED, status 28 (consumer
/// defined), the data zero-padded to 148 bytes; the rejected child gets no event. On iWARP
/// (§5.3) the MPA reject is REJECTED -ECONNREFUSED with the data at its exact length.
pub fn reject_gives_rejected_28_with_data<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = expect_request(server_cm, &listener);
    let data = b"go away";
    ok(server_cm.reject(req.id, data), "reject");
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    assert!(
        matches!(rej.param, EventParam::Conn(_)),
        "REJECTED of an RC id carries conn data, got {:?}",
        rej.param
    );
    let len = delivered_private_data_len(bed.transport(), PrivateDataOp::Reject);
    if bed.transport() != Transport::Iwarp {
        assert_eq!(len, Some(148), "REJ private-data field");
    }
    assert_reject_data(bed.transport(), &rej.private_data, data, "REJECTED");
    // The child never gets events (uid 0, §5.6), and the client gets nothing more (§5.5).
    expect_quiet(server_cm, listener.channel, Duration::from_millis(300));
    expect_no_event(client_cm, client.channel);
    // §3.4: after REJECTED only destroy is meaningful; disconnect returns 0 and does nothing.
    ok(client_cm.disconnect(client.id), "disconnect after REJECTED");
    expect_quiet(client_cm, client.channel, Duration::from_millis(300));
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[req.id, listener.id], listener.channel);
}

/// §5.2 S3, §14.2: connecting to a port nobody listens on → REJECTED status 8 with 148 zero
/// bytes; on iWARP the TCP connection made inside `rdma_connect` is reset: the call fails with
/// ECONNREFUSED, no event follows, and the id may connect again, to the same failure
/// (measured on siw).
pub fn no_listener_gives_rejected_8<T: TestBed>(bed: &T) {
    let client_cm = bed.client();
    let nobody = SocketAddr::new(bed.server_ip(), bed.fresh_port());
    let client = resolved_client(bed, PortSpace::TCP, nobody);
    add_qp(client_cm, client.id, QpType::Rc);
    let data = ConnParam::with_private_data(b"anyone?");
    connect_to_nobody(client_cm, bed.transport(), &client, Some(&data));
    if no_listener_status(bed.transport()).is_none() {
        connect_to_nobody(client_cm, bed.transport(), &client, None);
    }
    teardown(client_cm, &[client.id], client.channel);
}

/// §5.2 S9, §7.4, §19: destroying a CONNECT_REQUEST's id without accepting or rejecting it →
/// the client gets REJECTED 28 with 148 zero bytes (iWARP: the MPA reject, -ECONNRESET on siw,
/// no data).
pub fn destroying_unaccepted_request_gives_rejected_28<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = expect_request(server_cm, &listener);
    ok(server_cm.destroy_id(req.id), "destroy the unaccepted child");
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    assert_reject_data(
        bed.transport(),
        &rej.private_data,
        b"",
        "kernel REJ(28) data: 148 zero bytes",
    );
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[listener.id], listener.channel);
}

/// §4.15, §7.4 (LISTEN row): once a listener is destroyed, new requests to its port get
/// REJECTED 8 (iWARP: the connect fails with ECONNREFUSED, see [`no_listener_gives_rejected_8`]).
pub fn destroyed_listener_gives_rejected_8<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    teardown(server_cm, &[listener.id], listener.channel);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    connect_to_nobody(client_cm, bed.transport(), &client, None);
    teardown(client_cm, &[client.id], client.channel);
}

/// A listener and a client without QP that got CONNECT_RESPONSE: returns (listener, client,
/// the server's child id) after the server accepted with a QP.
fn responded<T: TestBed>(
    bed: &T,
) -> (
    crate::steps::Listener,
    crate::steps::Endpoint,
    cmtwin::IdHandle,
) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = crate::steps::request_without_qp(bed, 0x1234);
    add_qp(server_cm, req.id, QpType::Rc);
    ok(server_cm.accept(req.id, None), "accept");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::ConnectResponse,
        client.id,
        0,
    );
    (listener, client, req.id)
}

/// §4.11, §5.1 (REJECTED on P): an active id that received a REP (CONNECT_RESPONSE, no QP)
/// may reject it; the accepted server id gets REJECTED 28 with the data, padded to 148.
pub fn active_side_rejects_after_connect_response<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, child) = responded(bed);
    ok(
        client_cm.reject(client.id, b"changed my mind"),
        "active reject",
    );
    let rej = expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Rejected,
        child,
        IbRejReason::CONSUMER_DEFINED,
    );
    assert_padded(
        &rej.private_data,
        b"changed my mind",
        148,
        "passive REJECTED",
    );
    expect_no_event(client_cm, client.channel);
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[child, listener.id], listener.channel);
}

/// §5.2 S8, §7.4 (REP_RCVD row): destroying an active id that got CONNECT_RESPONSE but never
/// called `establish` sends REJ 28: the accepted server id gets REJECTED 28, zero data.
pub fn destroying_active_id_after_connect_response_rejects_passive<T: TestBed>(bed: &T) {
    let server_cm = bed.server();
    let (listener, client, child) = responded(bed);
    teardown(bed.client(), &[client.id], client.channel);
    let rej = expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Rejected,
        child,
        IbRejReason::CONSUMER_DEFINED,
    );
    assert_eq!(rej.private_data, vec![0; 148], "kernel REJ(28): zero data");
    teardown(server_cm, &[child, listener.id], listener.channel);
}

/// §5.2 S9, §4.15: destroying a listener whose requests were never fetched rejects each
/// initiator with REJECTED 28.
pub fn destroying_listener_rejects_its_queued_requests<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let c = resolved_client(bed, PortSpace::TCP, listener.addr);
            add_qp(client_cm, c.id, QpType::Rc);
            ok(client_cm.connect(c.id, None), "connect");
            c
        })
        .collect();
    // Let both requests be queued, unfetched.
    ok(server_cm.sleep(Duration::from_millis(300)), "sleep");
    teardown(server_cm, &[listener.id], listener.channel);
    for c in &clients {
        expect_event_for(
            client_cm,
            c.channel,
            EventKind::Rejected,
            c.id,
            crate::steps::refusal_status(bed.transport()),
        );
        teardown(client_cm, &[c.id], c.channel);
    }
}

/// §7.4 (REP_SENT row), §5.1 (REJECTED on A after CONNECT_RESPONSE): the server destroys an
/// accepted id before the client established it (no QP, no `establish` yet): the client,
/// which already had CONNECT_RESPONSE, gets REJECTED 28 with zero data.
pub fn destroying_accepted_unestablished_id_rejects_client<T: TestBed>(bed: &T) {
    let client_cm = bed.client();
    let (listener, client, child) = responded(bed);
    ok(bed.server().destroy_id(child), "destroy the accepted id");
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        IbRejReason::CONSUMER_DEFINED,
    );
    assert_eq!(rej.private_data, vec![0; 148], "kernel REJ(28): zero data");
    expect_errno_establish(bed, client.id);
    teardown(client_cm, &[client.id], client.channel);
    teardown(bed.server(), &[listener.id], listener.channel);
}

/// After REJECTED the RTU can no longer be sent: `establish` is EINVAL (§4.10).
fn expect_errno_establish<T: TestBed>(bed: &T, id: cmtwin::IdHandle) {
    crate::steps::expect_errno(
        bed.client().establish(id),
        cmtwin::Call::Establish,
        cmtwin::Errno::EINVAL,
    );
}

/// §5.1 (CONNECT_ERROR), §5.4: an active id with a QP whose REP was answered too late: the
/// server destroys its accepted id (REJ 28) before the client fetched its event. librdmacm's
/// processing of the queued CONNECT_RESPONSE then fails to send the RTU (the IB CM is no
/// longer waiting for it): the client gets CONNECT_ERROR with status -1 (the library's).
/// librdmacm then marks the id (`connect_error`, cma.c) and consumes the REJECTED queued
/// behind it: nothing follows, on both backends.
pub fn connect_response_after_rejection_is_connect_error<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = expect_request(server_cm, &listener);
    add_qp(server_cm, req.id, QpType::Rc);
    ok(server_cm.accept(req.id, None), "accept");
    // Let the REP arrive at the client, then withdraw the acceptance before it looks.
    expect_quiet(server_cm, listener.channel, Duration::from_millis(200));
    ok(server_cm.destroy_id(req.id), "destroy the accepted id");
    expect_quiet(server_cm, listener.channel, Duration::from_millis(200));
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::ConnectError,
        client.id,
        -1,
    );
    expect_quiet(client_cm, client.channel, Duration::from_millis(300));
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[listener.id], listener.channel);
}
