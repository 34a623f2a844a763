//! Event channels: waiting (blocking, non-blocking, timed), one FIFO per channel, destroying
//! channels (CM-SEMANTICS §12).

use std::time::Duration;

use cmtwin::{Call, ChannelHandle, CmBackend, Errno, EventKind, PortSpace, Wait};

use crate::steps::{
    client_endpoint, expect_errno, expect_event_for, expect_no_event, expect_quiet, ok,
    teardown_client, RESOLVE_TIMEOUT, WAIT,
};
use crate::TestBed;

/// §12.1: a non-blocking fetch from an empty channel fails at once with EAGAIN (O_NONBLOCK).
pub fn nonblocking_fetch_on_empty_channel_is_eagain<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    expect_errno(
        cm.get_cm_event(channel, Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EAGAIN,
    );
    // An id without events does not change that.
    let id = ok(cm.create_id(Some(channel), 1, PortSpace::TCP), "create_id");
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy_id");
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
}

/// §12.1: a timed wait on an empty channel fails with ETIMEDOUT, and not before its timeout
/// has passed on the backend's clock.
pub fn timed_fetch_on_empty_channel_is_etimedout<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let timeout = Duration::from_millis(200);
    let before = cm.now();
    expect_errno(
        cm.get_cm_event(channel, Wait::Timeout(timeout)),
        Call::GetCmEvent,
        Errno::ETIMEDOUT,
    );
    let waited = cm.now().saturating_sub(before);
    assert!(
        waited >= timeout,
        "timed wait returned ETIMEDOUT after {waited:?}, before its {timeout:?} timeout"
    );
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
}

/// §12.1: a blocking fetch returns an event that is on its way (ADDR_RESOLVED after
/// `resolve_addr`).
pub fn blocking_fetch_returns_pending_event<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let event = ok(
        cm.get_cm_event(ep.channel, Wait::Block),
        "blocking get_cm_event",
    );
    assert_eq!(
        event.kind(),
        EventKind::AddrResolved,
        "blocking fetch: kind"
    );
    assert_eq!(event.id(), ep.id, "blocking fetch: id");
    assert_eq!(event.status(), 0, "blocking fetch: status");
    ok(cm.ack_cm_event(event), "ack_cm_event");
    expect_no_event(cm, ep.channel);
    teardown_client(bed, &ep);
}

/// §12.1/§5.5: events go to the channel of their id, never to another channel of the same
/// process.
pub fn events_stay_on_their_channel<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let a = client_endpoint(bed, PortSpace::TCP);
    let b = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(a.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(cm, a.channel, EventKind::AddrResolved, a.id, 0);
    expect_no_event(cm, b.channel);
    expect_no_event(cm, a.channel);
    teardown_client(bed, &a);
    teardown_client(bed, &b);
}

/// §5.5: one channel serves several ids; each id's event arrives once, for that id.
pub fn one_channel_serves_several_ids<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let ids: Vec<_> = (0..3)
        .map(|i| ok(cm.create_id(Some(channel), i, PortSpace::TCP), "create_id"))
        .collect();
    let dst = bed.server_addr();
    for id in &ids {
        ok(
            cm.resolve_addr(*id, None, dst, RESOLVE_TIMEOUT),
            "resolve_addr",
        );
    }
    let mut seen = Vec::new();
    for _ in 0..ids.len() {
        let info = crate::steps::expect_event(cm, channel, EventKind::AddrResolved);
        assert_eq!(info.status, 0, "ADDR_RESOLVED status");
        assert!(
            ids.contains(&info.id),
            "ADDR_RESOLVED for an unknown id {}",
            info.id
        );
        assert!(
            !seen.contains(&info.id),
            "two ADDR_RESOLVED for {}",
            info.id
        );
        seen.push(info.id);
    }
    expect_quiet(cm, channel, Duration::from_millis(300));
    for id in &ids {
        ok(cm.destroy_id(*id), "destroy_id");
    }
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
}

/// cmtwin's rule over §4.1/§12.3: destroying a channel that ids still use is refused with
/// EBUSY (librdmacm would leave them dangling); once the ids are gone it succeeds.
pub fn destroy_channel_with_live_id_is_ebusy<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    expect_errno(
        cm.destroy_event_channel(channel),
        Call::DestroyEventChannel,
        Errno::EBUSY,
    );
    // The refusal changed nothing: the channel still works.
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy_id");
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
}

/// §12.3/§4.15: destroying an id discards its queued, unfetched events.
pub fn destroy_id_discards_queued_events<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    // Let the completion be queued (immediate on loopback and on the simulator).
    ok(cm.sleep(Duration::from_millis(300)), "sleep");
    ok(cm.destroy_id(ep.id), "destroy_id with a queued event");
    expect_quiet(cm, ep.channel, Duration::from_millis(500));
    ok(
        cm.destroy_event_channel(ep.channel),
        "destroy_event_channel",
    );
}

/// §12.1 (the `poll()` on several channel fds): `get_cm_event_any` returns the event of
/// whichever channel has one, and says which; with none ready a non-blocking wait is EAGAIN
/// and a timed one ETIMEDOUT.
pub fn waiting_on_two_channels_takes_the_ready_one<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let a = client_endpoint(bed, PortSpace::TCP);
    let b = client_endpoint(bed, PortSpace::TCP);
    let both = [a.channel, b.channel];
    expect_errno(
        cm.get_cm_event_any(&both, Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EAGAIN,
    );
    ok(
        cm.resolve_addr(b.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr on b",
    );
    let (from, event) = ok(cm.get_cm_event_any(&both, Wait::Timeout(WAIT)), "wait");
    assert_eq!(from, b.channel, "the event came from b's channel");
    assert_eq!(
        (event.kind(), event.id(), event.status()),
        (EventKind::AddrResolved, b.id, 0),
        "b's ADDR_RESOLVED"
    );
    ok(cm.ack_cm_event(event), "ack");
    expect_errno(
        cm.get_cm_event_any(&both, Wait::Timeout(Duration::from_millis(100))),
        Call::GetCmEvent,
        Errno::ETIMEDOUT,
    );
    expect_errno(
        cm.get_cm_event_any(&[], Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EINVAL,
    );
    teardown_client(bed, &a);
    teardown_client(bed, &b);
}

/// §12.1 (readiness): `poll_channels` says which channels have an event without taking it;
/// the event is still there for `get_cm_event`, and once it is taken the channel is not
/// ready any more.
pub fn poll_channels_reports_readiness_without_taking<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let a = client_endpoint(bed, PortSpace::TCP);
    let b = client_endpoint(bed, PortSpace::TCP);
    let both = [a.channel, b.channel];
    let none = ok(cm.poll_channels(&both, Wait::NonBlocking), "poll, nothing");
    assert_eq!(none, Vec::new(), "no channel is ready");
    ok(
        cm.resolve_addr(a.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr on a",
    );
    let ready = ok(cm.poll_channels(&both, Wait::Timeout(WAIT)), "poll");
    assert_eq!(ready, vec![a.channel], "a is ready");
    let again = ok(cm.poll_channels(&both, Wait::NonBlocking), "poll again");
    assert_eq!(again, vec![a.channel], "polling took nothing");
    expect_event_for(cm, a.channel, EventKind::AddrResolved, a.id, 0);
    let after = ok(
        cm.poll_channels(&both, Wait::Timeout(Duration::from_millis(100))),
        "poll after the fetch",
    );
    assert_eq!(after, Vec::new(), "nothing left at the end of the wait");
    expect_errno(
        cm.poll_channels(
            &[a.channel, ChannelHandle::from_raw(u64::MAX)],
            Wait::NonBlocking,
        ),
        Call::Poll,
        Errno::EBADF,
    );
    teardown_client(bed, &a);
    teardown_client(bed, &b);
}
