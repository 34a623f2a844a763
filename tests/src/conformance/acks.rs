//! Acknowledging events: every fetched event is acked once, acking consumes it, and unacked
//! events hold their id (CM-SEMANTICS §4.15, §12.2, §16.7).

use cmtwin::{Call, CmBackend, Errno, EventKind, PortSpace, QpType, Wait};

use crate::steps::{
    add_qp, client_endpoint, expect_errno, expect_no_event, listen_on, ok, resolved_client,
    teardown, teardown_client, RESOLVE_TIMEOUT, WAIT,
};
use crate::TestBed;

/// §4.15, §16.7: destroy_id while an event of the id is fetched but not acked fails with
/// EBUSY naming the event (librdmacm would block forever); after the ack it succeeds.
pub fn destroy_id_with_unacked_event_is_ebusy<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let event = ok(
        cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    assert_eq!(event.kind(), EventKind::AddrResolved, "event kind");
    let err = expect_errno(cm.destroy_id(ep.id), Call::DestroyId, Errno::EBUSY);
    assert!(
        err.detail.contains("ADDR_RESOLVED"),
        "the EBUSY error must name the unacked event: {err}"
    );
    ok(cm.ack_cm_event(event), "ack_cm_event");
    // Acking consumed it: it is not delivered again.
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §4.15, §12.2: a fetched, unacked CONNECT_REQUEST counts against the listener: destroying
/// the listener is EBUSY until it is acked; the child can be destroyed meanwhile.
pub fn unacked_connect_request_holds_the_listener<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = ok(
        server_cm.get_cm_event(listener.channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    assert_eq!(req.kind(), EventKind::ConnectRequest, "event kind");
    let child = req.id();
    let err = expect_errno(
        server_cm.destroy_id(listener.id),
        Call::DestroyId,
        Errno::EBUSY,
    );
    assert!(
        err.detail.contains("CONNECT_REQUEST"),
        "the EBUSY error must name the unacked event: {err}"
    );
    ok(
        server_cm.destroy_id(child),
        "destroy the child while the request is unacked",
    );
    ok(server_cm.ack_cm_event(req), "ack CONNECT_REQUEST");
    teardown(server_cm, &[listener.id], listener.channel);
    teardown(client_cm, &[client.id], client.channel);
}

/// §12.2: an unacked event of one id does not hold another id of the same channel.
pub fn unacked_event_holds_only_its_id<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let a = ok(
        cm.create_id(Some(channel), 1, PortSpace::TCP),
        "create_id a",
    );
    let b = ok(
        cm.create_id(Some(channel), 2, PortSpace::TCP),
        "create_id b",
    );
    ok(
        cm.resolve_addr(a, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let event = ok(
        cm.get_cm_event(channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    assert_eq!(event.id(), a, "event for a");
    ok(cm.destroy_id(b), "destroy b while a's event is unacked");
    expect_errno(cm.destroy_id(a), Call::DestroyId, Errno::EBUSY);
    ok(cm.ack_cm_event(event), "ack");
    teardown(cm, &[a], channel);
}

/// §12.1/§12.2: each event is returned once; several unacked events may be outstanding and
/// acked in any order.
pub fn events_are_delivered_once_and_acked_in_any_order<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let a = ok(
        cm.create_id(Some(channel), 1, PortSpace::TCP),
        "create_id a",
    );
    let b = ok(
        cm.create_id(Some(channel), 2, PortSpace::TCP),
        "create_id b",
    );
    let dst = bed.server_addr();
    ok(
        cm.resolve_addr(a, None, dst, RESOLVE_TIMEOUT),
        "resolve_addr a",
    );
    ok(
        cm.resolve_addr(b, None, dst, RESOLVE_TIMEOUT),
        "resolve_addr b",
    );
    let first = ok(cm.get_cm_event(channel, Wait::Timeout(WAIT)), "first event");
    let second = ok(
        cm.get_cm_event(channel, Wait::Timeout(WAIT)),
        "second event",
    );
    let mut ids = [first.id(), second.id()];
    ids.sort();
    let mut want = [a, b];
    want.sort();
    assert_eq!(ids, want, "one ADDR_RESOLVED per id");
    expect_no_event(cm, channel);
    ok(cm.ack_cm_event(second), "ack the later event first");
    ok(cm.ack_cm_event(first), "ack the earlier event");
    expect_no_event(cm, channel);
    teardown(cm, &[a, b], channel);
}

/// cmtwin's rule over §12.2: an event dropped without `ack_cm_event` is acknowledged by its
/// drop, so `destroy_id` of its id succeeds (librdmacm would block forever).
pub fn dropped_event_is_acknowledged_by_its_drop<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let event = ok(
        cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    assert_eq!(event.kind(), EventKind::AddrResolved, "event kind");
    expect_errno(cm.destroy_id(ep.id), Call::DestroyId, Errno::EBUSY);
    drop(event);
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// cmtwin's rule over §4.15/§12.2: a CONNECT_REQUEST dropped unacknowledged no longer holds
/// the listener, and its new id (neither accepted nor rejected) can still be destroyed.
pub fn dropped_connect_request_releases_the_listener<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = ok(
        server_cm.get_cm_event(listener.channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    assert_eq!(req.kind(), EventKind::ConnectRequest, "event kind");
    let child = req.id();
    drop(req);
    ok(
        server_cm.destroy_id(child),
        "destroy the dropped request's id",
    );
    teardown(server_cm, &[listener.id], listener.channel);
    // The client learns of the refusal; its event is dropped unread too.
    let refused = ok(
        client_cm.get_cm_event(client.channel, Wait::Timeout(WAIT)),
        "the client's answer",
    );
    assert_eq!(refused.kind(), EventKind::Rejected, "the client is refused");
    drop(refused);
    teardown(client_cm, &[client.id], client.channel);
}

/// An acknowledged event's drop does nothing more: the explicit ack still works and reports
/// its errors, and a second event of the id is not acknowledged by the first one's drop.
pub fn explicit_ack_then_drop_acks_once<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.write_cm_event(ep.id, EventKind::User, 1, 1),
        "write_cm_event 1",
    );
    ok(
        cm.write_cm_event(ep.id, EventKind::User, 2, 2),
        "write_cm_event 2",
    );
    let first = ok(cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)), "first");
    let second = ok(cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)), "second");
    ok(cm.ack_cm_event(first), "explicit ack of the first");
    expect_errno(cm.destroy_id(ep.id), Call::DestroyId, Errno::EBUSY);
    drop(second);
    teardown_client(bed, &ep);
}
