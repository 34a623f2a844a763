//! USER events written with `write_cm_event` (CM-SEMANTICS §10.1, §2.1, §5.5).
//!
//! On a bed without the kernel command (Linux < 6.18 or librdmacm < v60, such as the CI VM)
//! writing a USER event fails with EINVAL (§10.1); the scenarios then check exactly that.

use cmtwin::{Call, CmBackend, Errno, EventKind, EventParam, PortSpace, Wait};

use crate::steps::{
    client_endpoint, expect_errno, expect_event_for, expect_no_event, listen_on, ok, teardown,
    teardown_client, teardown_listener, WAIT,
};
use crate::TestBed;

/// §10.1: any kind other than USER is EINVAL (checked before the kernel), including
/// librdmacm's private INTERNAL (19) and unknown numbers; nothing is queued.
pub fn write_cm_event_refuses_other_kinds<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let others = EventKind::ALL
        .iter()
        .copied()
        .filter(|k| *k != EventKind::User)
        .chain([
            EventKind::Unknown(19),
            EventKind::Unknown(-1),
            EventKind::Unknown(1000),
        ]);
    for kind in others {
        let err = cm
            .write_cm_event(ep.id, kind, 0, 1)
            .expect_err("write_cm_event of a non-USER kind must fail");
        assert_eq!(err.errno, Errno::EINVAL, "write_cm_event({kind}): {err}");
        assert_eq!(err.call, Call::WriteCmEvent, "call named in {err}");
    }
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §2.1, §10.1: USER is number 18 and `event_str` gives "UNKNOWN EVENT" for it.
pub fn user_event_numbering_and_name<T: TestBed>(_bed: &T) {
    assert_eq!(EventKind::User.as_raw(), 18);
    assert_eq!(EventKind::from_raw(18), EventKind::User);
    assert_eq!(EventKind::User.event_str(), "UNKNOWN EVENT");
    assert_eq!(EventKind::TimewaitExit.as_raw(), 15);
    assert_eq!(
        EventKind::TimewaitExit.event_str(),
        "RDMA_CM_EVENT_TIMEWAIT_EXIT"
    );
}

/// §10.1: a USER event comes back on the id's channel with its status (bit-exact, any sign)
/// and 64-bit arg, for that id, with no listen_id or private data; it must be acked.
pub fn user_event_round_trips_status_and_arg<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let cases = [
        (0, 0u64),
        (-7, 0xdead_beef_0123_4567),
        (i32::MIN, u64::MAX),
        (i32::MAX, 1),
    ];
    if !bed.has_write_cm_event() {
        expect_errno(
            cm.write_cm_event(ep.id, EventKind::User, 0, 0),
            Call::WriteCmEvent,
            Errno::EINVAL,
        );
        teardown_client(bed, &ep);
        return;
    }
    for (status, arg) in cases {
        ok(
            cm.write_cm_event(ep.id, EventKind::User, status, arg),
            "write_cm_event",
        );
        let event = ok(
            cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)),
            "get_cm_event",
        );
        assert_eq!(event.kind(), EventKind::User, "kind");
        assert_eq!(event.kind().event_str(), "UNKNOWN EVENT", "event_str");
        assert_eq!(event.id(), ep.id, "id");
        assert_eq!(event.status(), status, "status round trip");
        assert_eq!(event.user_arg(), Some(arg), "arg round trip");
        assert_eq!(*event.param(), EventParam::User(arg), "param");
        assert_eq!(event.listen_id(), None, "listen_id");
        assert!(event.private_data().is_empty(), "private data");
        // Unacked, it holds the id (§10.1: it counts toward destroy).
        expect_errno(cm.destroy_id(ep.id), Call::DestroyId, Errno::EBUSY);
        ok(cm.ack_cm_event(event), "ack");
    }
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §5.5, §10.1: USER events are queued at the moment of the write, in FIFO order across the
/// ids of a channel, in any id state (IDLE, LISTEN).
pub fn user_events_keep_fifo_order_in_any_state<T: TestBed>(bed: &T) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let cm = bed.server();
    let idle = ok(
        cm.create_id(Some(listener.channel), 0, PortSpace::UDP),
        "idle id",
    );
    let order = [
        (idle, 1u64),
        (listener.id, 2),
        (idle, 3),
        (listener.id, 4),
        (idle, 5),
    ];
    for (id, arg) in order {
        ok(
            cm.write_cm_event(id, EventKind::User, arg as i32, arg),
            "write_cm_event",
        );
    }
    for (id, arg) in order {
        let info = expect_event_for(cm, listener.channel, EventKind::User, id, arg as i32);
        assert_eq!(info.param, EventParam::User(arg), "FIFO order");
    }
    expect_no_event(cm, listener.channel);
    ok(cm.destroy_id(idle), "destroy idle id");
    teardown_listener(bed, &listener);
}

/// §4.16, §12.4: a USER event queued but not fetched moves with the id when it migrates.
pub fn queued_user_event_follows_migration<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let other = ok(cm.create_event_channel(), "second channel");
    ok(
        cm.write_cm_event(ep.id, EventKind::User, 3, 33),
        "write_cm_event",
    );
    ok(cm.migrate_id(ep.id, Some(other)), "migrate_id");
    expect_no_event(cm, ep.channel);
    let info = expect_event_for(cm, other, EventKind::User, ep.id, 3);
    assert_eq!(info.param, EventParam::User(33), "arg");
    ok(
        cm.destroy_event_channel(ep.channel),
        "old channel is empty now",
    );
    teardown(cm, &[ep.id], other);
}

/// §10.1, §5.6: a USER event written on a request's id before it is accepted is dropped
/// (kernel uid 0); accepting afterwards still works and the USER event never shows up.
pub fn user_event_on_unaccepted_child_is_dropped<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = crate::steps::resolved_client(bed, PortSpace::TCP, listener.addr);
    crate::steps::add_qp(client_cm, client.id, cmtwin::QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let req = crate::steps::expect_request(server_cm, &listener);
    // The write succeeds; the event must never arrive (§10.1: dropped for uid 0).
    ok(
        server_cm.write_cm_event(req.id, EventKind::User, 1, 99),
        "write USER on the unaccepted id",
    );
    crate::steps::add_qp(server_cm, req.id, cmtwin::QpType::Rc);
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
    expect_no_event(server_cm, listener.channel);
    teardown(client_cm, &[client.id], client.channel);
    crate::steps::expect_event(server_cm, listener.channel, EventKind::Disconnected);
    teardown(server_cm, &[req.id, listener.id], listener.channel);
}

/// §10.1, §11.2: a USER event written on a synchronous id goes to its private channel, so the
/// next blocking call returns with it (status −110 → ETIMEDOUT) and keeps it as the id's
/// event. Without the kernel's WRITE_CM_EVENT (Linux < 6.18) nothing can reach that channel:
/// the write is EOPNOTSUPP on every backend.
pub fn user_event_on_synchronous_id<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let id = ok(cm.create_id(None, 0, PortSpace::TCP), "sync id");
    match cm.write_cm_event(id, EventKind::User, -110, 9) {
        Err(err) => {
            assert_eq!(
                (err.call, err.errno),
                (Call::WriteCmEvent, Errno::EOPNOTSUPP),
                "{err}"
            );
        }
        Ok(()) => {
            let dst = bed.server_addr();
            let err = cm
                .resolve_addr(id, None, dst, crate::steps::RESOLVE_TIMEOUT)
                .expect_err("the USER event completes the call");
            assert_eq!(
                (err.call, err.errno),
                (Call::ResolveAddr, Errno::ETIMEDOUT),
                "{err}"
            );
            let ev = ok(cm.sync_event(id), "sync_event").expect("the USER event is kept");
            assert_eq!(
                (ev.kind, ev.status, ev.param),
                (EventKind::User, -110, EventParam::User(9))
            );
        }
    }
    ok(cm.destroy_id(id), "destroy");
}
