//! Rejections: by the application, by a missing listener, by destroying an unaccepted request
//! (CM-SEMANTICS §4.11, §5.2 S2/S3/S9, §6.2, §19).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    delivered_private_data_len, CmBackend, ConnParam, EventKind, EventParam, IbRejReason,
    PortSpace, PrivateDataOp, QpType, Transport,
};

use crate::steps::{
    add_qp, assert_padded, expect_event_for, expect_no_event, expect_quiet, expect_request,
    listen_on, ok, resolved_client, teardown,
};
use crate::TestBed;

/// §5.2 S2, §6.2: `reject` with data → the client gets REJECTED, status 28 (consumer
/// defined), the data zero-padded to 148 bytes; the rejected child gets no event.
pub fn reject_gives_rejected_28_with_data<T: TestBed>(bed: &T) {
    if bed.transport() == Transport::Iwarp {
        eprintln!("skipped: iWARP rejects with -ECONNREFUSED (§5.3)");
        return;
    }
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
        IbRejReason::CONSUMER_DEFINED,
    );
    assert!(
        matches!(rej.param, EventParam::Conn(_)),
        "REJECTED of an RC id carries conn data, got {:?}",
        rej.param
    );
    let len = delivered_private_data_len(bed.transport(), PrivateDataOp::Reject);
    assert_eq!(len, Some(148), "REJ private-data field");
    assert_padded(&rej.private_data, data, 148, "REJECTED");
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
/// bytes.
pub fn no_listener_gives_rejected_8<T: TestBed>(bed: &T) {
    if bed.transport() == Transport::Iwarp {
        eprintln!("skipped: iWARP reports a closed port as -ECONNREFUSED/-ECONNRESET (§5.3)");
        return;
    }
    let client_cm = bed.client();
    let nobody = SocketAddr::new(bed.server_ip(), bed.fresh_port());
    let client = resolved_client(bed, PortSpace::TCP, nobody);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(
        client_cm.connect(client.id, Some(&ConnParam::with_private_data(b"anyone?"))),
        "connect",
    );
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        IbRejReason::INVALID_SERVICE_ID,
    );
    assert_eq!(rej.private_data, vec![0; 148], "REJ(8) data: 148 zero bytes (§6.2)");
    expect_no_event(client_cm, client.channel);
    teardown(client_cm, &[client.id], client.channel);
}

/// §5.2 S9, §7.4, §19: destroying a CONNECT_REQUEST's id without accepting or rejecting it →
/// the client gets REJECTED 28 with 148 zero bytes.
pub fn destroying_unaccepted_request_gives_rejected_28<T: TestBed>(bed: &T) {
    if bed.transport() == Transport::Iwarp {
        eprintln!("skipped: iWARP rejects through MPA (§5.3)");
        return;
    }
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
        IbRejReason::CONSUMER_DEFINED,
    );
    assert_eq!(rej.private_data, vec![0; 148], "kernel REJ(28) data: 148 zero bytes");
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[listener.id], listener.channel);
}

/// §4.15, §7.4 (LISTEN row): once a listener is destroyed, new requests to its port get
/// REJECTED 8.
pub fn destroyed_listener_gives_rejected_8<T: TestBed>(bed: &T) {
    if bed.transport() == Transport::Iwarp {
        eprintln!("skipped: iWARP (§5.3)");
        return;
    }
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    teardown(server_cm, &[listener.id], listener.channel);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        IbRejReason::INVALID_SERVICE_ID,
    );
    teardown(client_cm, &[client.id], client.channel);
}
