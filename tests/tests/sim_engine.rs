//! Regression tests of the simulator's engine: what it must never do whatever the public API
//! is asked, found by using the API adversarially (cancelled timers that still move the clock,
//! tickets and events taken across fabrics or forged).

use std::time::Duration;

use cmtwin::{
    AckTicket, Call, CmBackend, CmEvent, Errno, EventInfo, EventKind, EventParam, PortSpace,
};
use cmtwin_tests::steps::{connect_pair, expect_errno, ok, teardown_pair};
use cmtwin_tests::{SimBed, TestBed};

/// An answered REQ and REP leave no retransmission timer behind, and a timed wait that
/// returned early leaves no wakeup: once the connection is up and every event taken, nothing
/// is pending, so running until idle leaves the clock where it is.
#[test]
fn answered_retransmissions_and_early_waits_leave_nothing_pending() {
    let bed = SimBed::new(21);
    let pair = connect_pair(&bed);
    let established_at = bed.fabric.now();
    assert!(
        established_at < Duration::from_millis(1),
        "{established_at:?}"
    );
    bed.fabric
        .run_until_idle()
        .expect("nothing else drives the fabric");
    assert_eq!(bed.fabric.now(), established_at);
    teardown_pair(&bed, &pair);
}

/// 20,000 timed waits of an hour that each block until an address resolves a few
/// microseconds later: none leaves its wakeup behind, so virtual time stays where the last
/// event put it, however long the waits were.
#[test]
fn many_early_returning_timed_waits_leave_time_alone() {
    let bed = SimBed::new(22);
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let hour = cmtwin::Wait::Timeout(Duration::from_secs(3600));
    let mut resolved_at = Duration::ZERO;
    for n in 0..20_000u64 {
        let id = ok(cm.create_id(Some(channel), n, PortSpace::TCP), "id");
        ok(
            cm.resolve_addr(id, None, bed.server_addr(), Duration::from_secs(2)),
            "resolve",
        );
        let event = ok(cm.get_cm_event(channel, hour), "ADDR_RESOLVED");
        assert_eq!(event.kind(), EventKind::AddrResolved);
        ok(cm.ack_cm_event(event), "ack");
        ok(cm.destroy_id(id), "destroy");
        assert!(bed.fabric.now() > resolved_at, "each resolution takes time");
        resolved_at = bed.fabric.now();
    }
    bed.fabric
        .run_until_idle()
        .expect("nothing else drives the fabric");
    assert_eq!(bed.fabric.now(), resolved_at);
    assert!(resolved_at < Duration::from_secs(1), "{resolved_at:?}");
}

/// A fetched event acknowledged through another fabric's backend is refused there (EINVAL, as
/// an unknown ticket), and stays outstanding in its own fabric, where the ack then succeeds
/// and the id can be destroyed.
#[test]
fn an_event_of_one_fabric_cannot_be_acked_by_another() {
    let a = SimBed::new(31);
    let b = SimBed::new(31);
    let (cm_a, cm_b) = (a.client(), b.client());
    let ch_a = ok(cm_a.create_event_channel(), "channel a");
    let id_a = ok(cm_a.create_id(Some(ch_a), 0, PortSpace::TCP), "id a");
    let ch_b = ok(cm_b.create_event_channel(), "channel b");
    let id_b = ok(cm_b.create_id(Some(ch_b), 0, PortSpace::TCP), "id b");
    ok(cm_a.write_cm_event(id_a, EventKind::User, 0, 1), "write a");
    ok(cm_b.write_cm_event(id_b, EventKind::User, 0, 2), "write b");
    let event_a = ok(
        cm_a.get_cm_event(ch_a, cmtwin::Wait::NonBlocking),
        "event a",
    );
    let event_b = ok(
        cm_b.get_cm_event(ch_b, cmtwin::Wait::NonBlocking),
        "event b",
    );
    // Same host index, same ticket serial in both fabrics: only the fabric tells them apart.
    assert_eq!(
        event_a.ticket().0 & 0xff_ffff_ffff,
        event_b.ticket().0 & 0xff_ffff_ffff
    );
    let forged_twin = CmEvent::new(event_a.info().clone(), event_a.ticket());
    expect_errno(
        cm_b.ack_cm_event(forged_twin),
        Call::AckCmEvent,
        Errno::EINVAL,
    );
    ok(cm_b.ack_cm_event(event_b), "b's own ack");
    ok(cm_b.destroy_id(id_b), "destroy b");
    expect_errno(cm_a.destroy_id(id_a), Call::DestroyId, Errno::EBUSY);
    ok(cm_a.ack_cm_event(event_a), "a's own ack");
    ok(cm_a.destroy_id(id_a), "destroy a");
}

/// An event built by hand around a live ticket is refused unless it names the very event the
/// ticket was issued for (its id and kind); the real event is then still acknowledged once.
#[test]
fn a_forged_event_is_refused() {
    let bed = SimBed::new(32);
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "id");
    let other = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "other id");
    ok(cm.write_cm_event(id, EventKind::User, 0, 9), "write");
    let event = ok(cm.get_cm_event(channel, cmtwin::Wait::NonBlocking), "event");
    let mut wrong_kind = event.info().clone();
    wrong_kind.kind = EventKind::Established;
    let mut wrong_id = event.info().clone();
    wrong_id.id = other;
    for info in [wrong_kind, wrong_id] {
        let forged = CmEvent::new(info, event.ticket());
        expect_errno(cm.ack_cm_event(forged), Call::AckCmEvent, Errno::EINVAL);
    }
    let mut made_up = EventInfo::new(EventKind::User, 0, id, PortSpace::TCP);
    made_up.param = EventParam::User(9);
    let guessed = CmEvent::new(made_up, AckTicket(event.ticket().0 + 1));
    expect_errno(cm.ack_cm_event(guessed), Call::AckCmEvent, Errno::EINVAL);
    ok(cm.ack_cm_event(event), "the real ack");
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_id(other), "destroy other");
}

/// A handle of one fabric is refused by another fabric's backend, even when the numbers match.
#[test]
fn a_handle_of_one_fabric_is_foreign_to_another() {
    let a = SimBed::new(33);
    let b = SimBed::new(33);
    let id_a = ok(a.client().create_id(None, 0, PortSpace::TCP), "id a");
    let id_b = ok(b.client().create_id(None, 0, PortSpace::TCP), "id b");
    assert_eq!(
        id_a.to_string(),
        id_b.to_string(),
        "same number in both fabrics"
    );
    expect_errno(b.client().destroy_id(id_a), Call::DestroyId, Errno::ENOENT);
    ok(a.client().destroy_id(id_a), "destroy a");
    ok(b.client().destroy_id(id_b), "destroy b");
}

/// A timewait of the longest duration virtual time can express, on the kernel's timer wheel,
/// neither overflows nor panics: the disconnect completes and TIMEWAIT_EXIT is simply never
/// reached before the end of time.
#[test]
fn a_maximal_timewait_on_the_timer_wheel_saturates() {
    let config = cmtwin_sim::SimConfig {
        timewait_override: Some(Duration::MAX),
        disconnect_qp_time: Duration::MAX,
        ..cmtwin_sim::SimConfig::default()
    };
    let bed = SimBed::with_config(34, cmtwin::Transport::Roce, config);
    let pair = connect_pair(&bed);
    ok(bed.client().disconnect(pair.client.id), "disconnect");
    assert_eq!(bed.fabric.now(), cmtwin_sim::MAX_SIM_DURATION);
}
