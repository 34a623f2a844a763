//! Moving ids between channels with `migrate_id` (CM-SEMANTICS §4.16, §12.4).

use std::time::Duration;

use cmtwin::{Call, CmBackend, Errno, EventKind, PortSpace, Wait};

use crate::steps::{
    client_endpoint, expect_errno, expect_event_for, expect_no_event, expect_quiet, ok, teardown,
    RESOLVE_TIMEOUT, WAIT,
};
use crate::TestBed;

/// §4.16, §12.4: events queued for an id before migration arrive on the new channel, and
/// later events too; the old channel gets none and can be destroyed once empty of ids.
pub fn migrate_moves_queued_and_later_events<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let other = ok(cm.create_event_channel(), "second channel");
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    // Let ADDR_RESOLVED be queued on the first channel.
    ok(cm.sleep(Duration::from_millis(300)), "sleep");
    ok(cm.migrate_id(ep.id, Some(other)), "migrate_id");
    expect_event_for(cm, other, EventKind::AddrResolved, ep.id, 0);
    ok(cm.resolve_route(ep.id, RESOLVE_TIMEOUT), "resolve_route");
    expect_event_for(cm, other, EventKind::RouteResolved, ep.id, 0);
    expect_quiet(cm, ep.channel, Duration::from_millis(200));
    ok(
        cm.destroy_event_channel(ep.channel),
        "destroy the old channel",
    );
    teardown(cm, &[ep.id], other);
}

/// §4.16 (librdmacm waits for the id's fetched events to be acked): cmtwin refuses to migrate
/// an id with a fetched, unacked event with EBUSY rather than blocking; after the ack it works.
pub fn migrate_with_unacked_event_is_ebusy<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let other = ok(cm.create_event_channel(), "second channel");
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let event = ok(
        cm.get_cm_event(ep.channel, Wait::Timeout(WAIT)),
        "get_cm_event",
    );
    expect_errno(
        cm.migrate_id(ep.id, Some(other)),
        Call::MigrateId,
        Errno::EBUSY,
    );
    ok(cm.ack_cm_event(event), "ack");
    ok(cm.migrate_id(ep.id, Some(other)), "migrate after the ack");
    expect_no_event(cm, other);
    ok(
        cm.destroy_event_channel(ep.channel),
        "destroy the old channel",
    );
    teardown(cm, &[ep.id], other);
}
