//! Disconnection and timewait (CM-SEMANTICS §4.12, §5.2 S10–S12, §7, §19).

use std::time::Duration;

use cmtwin::{CmBackend, Errno, EventKind, Transport, Wait};

use crate::steps::{
    connect_pair, disconnect_pair, expect_event, expect_event_for, expect_no_event, expect_quiet,
    ok, teardown, teardown_pair, Pair,
};
use crate::TestBed;

/// After both DISCONNECTEDs: TIMEWAIT_EXIT (status 0, no data) once on each side on IB/RoCE
/// (§7.1, §7.4, §19), none on iWARP (§5.3).
fn expect_timewait_exits<T: TestBed>(bed: &T, pair: &Pair) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    if bed.transport() == Transport::Iwarp {
        expect_quiet(client_cm, pair.client.channel, Duration::from_secs(3));
        expect_quiet(server_cm, pair.server.channel, Duration::from_secs(3));
    } else {
        expect_one_timewait_exit_each(bed, pair);
    }
}

/// IB and RoCE: TIMEWAIT_EXIT (status 0, no data) once on each side.
fn expect_one_timewait_exit_each<T: TestBed>(bed: &T, pair: &Pair) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let c = expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::TimewaitExit,
        pair.client.id,
        0,
    );
    assert!(c.private_data.is_empty(), "TIMEWAIT_EXIT carries no data");
    let s = expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::TimewaitExit,
        pair.server.id,
        0,
    );
    assert!(s.private_data.is_empty(), "TIMEWAIT_EXIT carries no data");
    // At most once per id (§5.5).
    expect_no_event(client_cm, pair.client.channel);
    expect_no_event(server_cm, pair.server.channel);
}

/// §5.2 S10: the client disconnects; the server gets DISCONNECTED (status 0, no data),
/// answers with its own disconnect; then the client gets DISCONNECTED; then TIMEWAIT_EXIT
/// on both (§7).
pub fn client_disconnect_reaches_both_sides<T: TestBed>(bed: &T) {
    let pair = connect_pair(bed);
    disconnect_pair(bed, &pair);
    expect_timewait_exits(bed, &pair);
    teardown_pair(bed, &pair);
}

/// §5.2 S10 (symmetric): the server disconnects first.
pub fn server_disconnect_reaches_both_sides<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    ok(server_cm.disconnect(pair.server.id), "server disconnect");
    let d = expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::Disconnected,
        pair.client.id,
        0,
    );
    assert!(
        d.private_data.is_empty(),
        "DISCONNECTED carries no data (§5.1)"
    );
    ok(
        client_cm.disconnect(pair.client.id),
        "client disconnect (sends DREP)",
    );
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    expect_timewait_exits(bed, &pair);
    teardown_pair(bed, &pair);
}

/// §5.2 S11, §19: both sides disconnect before reading any event → each gets DISCONNECTED
/// once; what follows on IB/RoCE depends on whether the DREQs crossed (both outcomes were seen
/// on Linux 6.1 with rxe):
/// * the second call came after the first DREQ arrived (the usual case on the VM): cma.c's
///   `rdma_disconnect` finds the IB CM in DREQ_RCVD, `ib_send_cm_dreq` fails and
///   `ib_send_cm_drep` answers and enters timewait; the DREP puts the first side into
///   timewait (cm.c `cm_drep_handler`): TIMEWAIT_EXIT on both sides without a second call;
/// * the DREQs crossed: each IB CM took the other's DREQ in DREQ_SENT (`cm_dreq_handler`:
///   its own DREQ cancelled, DREQ_RCVD) and no DREP exists; then one side's second disconnect
///   sends a DREP, which ends the other side's DREQ_RCVD too: TIMEWAIT_EXIT on both.
///
/// iWARP (§5.3) closes the connection: both get DISCONNECTED, and nothing follows.
pub fn simultaneous_disconnect<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    ok(client_cm.disconnect(pair.client.id), "client disconnect");
    ok(server_cm.disconnect(pair.server.id), "server disconnect");
    expect_event_for(
        client_cm,
        pair.client.channel,
        EventKind::Disconnected,
        pair.client.id,
        0,
    );
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    if bed.transport() != Transport::Iwarp {
        // Longer than any timewait of §7.2's table and §19's 2.2 s.
        let wait = Wait::Timeout(Duration::from_secs(10));
        match client_cm.get_cm_event(pair.client.channel, wait) {
            Ok(event) => {
                let seen = (event.kind(), event.id(), event.status());
                ok(client_cm.ack_cm_event(event), "ack");
                assert_eq!(seen, (EventKind::TimewaitExit, pair.client.id, 0));
                let s = expect_event(server_cm, pair.server.channel, EventKind::TimewaitExit);
                assert_eq!((s.id, s.status), (pair.server.id, 0), "the server's too");
                expect_no_event(client_cm, pair.client.channel);
                expect_no_event(server_cm, pair.server.channel);
                teardown_pair(bed, &pair);
                return;
            }
            Err(err) => assert_eq!(err.errno, Errno::ETIMEDOUT, "timed fetch: {err}"),
        }
        // The DREQs crossed: neither side is in timewait; one more disconnect ends both.
        expect_no_event(server_cm, pair.server.channel);
        ok(
            client_cm.disconnect(pair.client.id),
            "second client disconnect (DREP)",
        );
    }
    expect_timewait_exits(bed, &pair);
    teardown_pair(bed, &pair);
}

/// §3.2 (DISCONNECT column), §5.5: disconnect again after DISCONNECTED returns 0 and produces
/// no second DISCONNECTED (the next event is TIMEWAIT_EXIT).
pub fn disconnect_again_is_harmless<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    disconnect_pair(bed, &pair);
    ok(
        client_cm.disconnect(pair.client.id),
        "second client disconnect",
    );
    ok(
        server_cm.disconnect(pair.server.id),
        "second server disconnect",
    );
    expect_timewait_exits(bed, &pair);
    teardown_pair(bed, &pair);
}

/// §19 (measured): the client disconnects and the server never answers → the server gets
/// DISCONNECTED at once, the client gets nothing (its DREQ stays unanswered). On iWARP (§5.3)
/// the disconnect is a TCP close that needs no answer: the client gets DISCONNECTED at once
/// too (siw_cm.c reports the close of its own connection; iw_cm.c turns it into
/// DISCONNECTED).
pub fn unanswered_disconnect_leaves_initiator_waiting<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    ok(client_cm.disconnect(pair.client.id), "client disconnect");
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    if bed.transport() == Transport::Iwarp {
        expect_event_for(
            client_cm,
            pair.client.channel,
            EventKind::Disconnected,
            pair.client.id,
            0,
        );
    }
    expect_quiet(client_cm, pair.client.channel, Duration::from_secs(2));
    teardown_pair(bed, &pair);
}

/// §5.2 S12, §7.4 (ESTABLISHED row): destroying a connected id without disconnecting sends
/// one DREQ → the peer gets DISCONNECTED status 0.
pub fn destroying_connected_id_disconnects_peer<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    teardown(client_cm, &[pair.client.id], pair.client.channel);
    expect_event_for(
        server_cm,
        pair.server.channel,
        EventKind::Disconnected,
        pair.server.id,
        0,
    );
    // The peer's answering disconnect still returns 0 (its DREP is ignored).
    ok(
        server_cm.disconnect(pair.server.id),
        "server disconnect after the peer is gone",
    );
    teardown(
        server_cm,
        &[pair.server.id, pair.listener.id],
        pair.listener.channel,
    );
}

/// §19 (measured on Linux 6.1/rxe: no second disconnect needed): when the server's
/// `disconnect` comes after the client's DREQ arrived but before the server fetched its
/// DISCONNECTED, it answers with a DREP: each side gets DISCONNECTED and then TIMEWAIT_EXIT.
pub fn disconnect_after_the_peers_dreq_needs_no_second_call<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let pair = connect_pair(bed);
    ok(client_cm.disconnect(pair.client.id), "client disconnect");
    ok(
        client_cm.sleep(Duration::from_millis(50)),
        "let the DREQ arrive",
    );
    ok(server_cm.disconnect(pair.server.id), "server disconnect");
    for (cm, ep) in [(client_cm, pair.client), (server_cm, pair.server)] {
        expect_event_for(cm, ep.channel, EventKind::Disconnected, ep.id, 0);
        expect_event_for(cm, ep.channel, EventKind::TimewaitExit, ep.id, 0);
    }
    expect_no_event(client_cm, pair.client.channel);
    expect_no_event(server_cm, pair.server.channel);
    teardown_pair(bed, &pair);
}
