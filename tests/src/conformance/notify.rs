//! `rdma_notify` and IBV_EVENT_COMM_EST: telling the CM that the passive QP saw traffic
//! before the RTU (CM-SEMANTICS §9).

use cmtwin::{AsyncEvent, Call, CmBackend, Errno, EventKind, QpType};

use crate::steps::{
    add_qp, expect_errno, expect_event_for, expect_no_event, ok, request_without_qp, teardown,
};
use crate::TestBed;

/// §9.2, §9.3: after accept and before the RTU (the client has no QP and has not called
/// `establish`), notify(COMM_EST) on the server establishes it (ESTABLISHED, status 0); a
/// second notify is EISCONN; the late RTU adds no second ESTABLISHED.
pub fn comm_est_establishes_the_passive_side_once<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = request_without_qp(bed, 0x4321);
    // Before accept the IB CM is in REQ_RCVD: notify is EINVAL (§9.2).
    expect_errno(
        server_cm.notify(req.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EINVAL,
    );
    add_qp(server_cm, req.id, QpType::Rc);
    ok(server_cm.accept(req.id, None), "accept");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::ConnectResponse,
        client.id,
        0,
    );
    ok(
        server_cm.notify(req.id, AsyncEvent::COMM_EST),
        "notify(COMM_EST)",
    );
    expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    expect_errno(
        server_cm.notify(req.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EISCONN,
    );
    ok(client_cm.establish(client.id), "establish (the late RTU)");
    ok(
        server_cm.sleep(std::time::Duration::from_millis(300)),
        "sleep",
    );
    expect_no_event(server_cm, listener.channel);
    teardown(client_cm, &[client.id], client.channel);
    crate::steps::expect_event(server_cm, listener.channel, EventKind::Disconnected);
    teardown(server_cm, &[req.id, listener.id], listener.channel);
}

/// §9.2: notify with an event type other than COMM_EST and PATH_MIG is EINVAL.
pub fn notify_with_other_event_is_einval<T: TestBed>(bed: &T) {
    let pair = crate::steps::connect_pair(bed);
    for event in [AsyncEvent(0), AsyncEvent(1), AsyncEvent(9)] {
        expect_errno(
            bed.server().notify(pair.server.id, event),
            Call::Notify,
            Errno::EINVAL,
        );
    }
    crate::steps::teardown_pair(bed, &pair);
}
