//! Timewait (CM-SEMANTICS §7): after a disconnect both sides leave timewait with TIMEWAIT_EXIT.

use std::time::Duration;

use cmtwin::{CmBackend, EventKind};

use crate::bed::CmTimer;
use crate::steps::{
    assert_timer_end, connect_pair, expect_event_for, expect_no_event, ok, teardown_pair,
};
use crate::TestBed;

/// §7.1, §7.2, §7.4, §19: the client disconnects, the server answers; each side gets
/// TIMEWAIT_EXIT (status 0) once its timewait ends: on the simulator exactly the fabric's
/// timewait after its DISCONNECTED (2048 ms on the 250 Hz timer wheel), on Linux 6.1/rxe about
/// 2.2-2.3 s (window 1.5-3.5 s).
pub fn timewait_exit_follows_the_disconnect<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let window = Duration::from_millis(1500)..=Duration::from_millis(3500);
    let pair = connect_pair(bed);
    ok(client_cm.disconnect(pair.client.id), "client disconnect");
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    // The DREQ's receiver enters timewait when it answers with its DREP.
    ok(server_cm.disconnect(pair.server.id), "server disconnect");
    let server_started = bed.now();
    expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::Disconnected,
        pair.client.id,
        0,
    );
    // The initiator enters timewait when the DREP arrives (its DISCONNECTED).
    let client_started = bed.now();
    let exit = expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::TimewaitExit,
        pair.server.id,
        0,
    );
    assert!(
        exit.private_data.is_empty(),
        "TIMEWAIT_EXIT carries no data"
    );
    assert_timer_end(
        bed,
        CmTimer::Timewait,
        server_started,
        bed.now(),
        window.clone(),
    );
    expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::TimewaitExit,
        pair.client.id,
        0,
    );
    assert_timer_end(bed, CmTimer::Timewait, client_started, bed.now(), window);
    expect_no_event(client_cm, pair.client.channel);
    expect_no_event(server_cm, pair.server.channel);
    teardown_pair(bed, &pair);
}
