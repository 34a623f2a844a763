//! `DataPath::poll_sources` on the simulator: one wait on a CM channel, a completion channel
//! and the host's asynchronous events together, woken by whichever comes first, at exact
//! virtual times; its errors.
//!
//! Times: the wire latency is 5 µs without jitter, so a send reaches the peer 5 µs after it
//! is posted; a disconnect spends 20 µs moving its QP to ERROR before its DREQ leaves.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, Payload, PollSource, SendOp, SendWr, WcStatus};
use cmtwin::{AsyncEvent, Call, CmBackend, Errno, EventKind, Transport, Wait};
use cmtwin_sim::{MessageKind, SimBackend};
use cmtwin_tests::datapath::{
    connect, next_completion, post_recv_all, region, start_connection, Setup, Side,
};
use cmtwin_tests::steps::{expect_errno, expect_event_for, ok};
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// An InfiniBand bed whose wire has no jitter, so that times are exact sums of latencies. On
/// InfiniBand the passive QP's first message raises COMM_EST, an asynchronous event for the
/// loop to wait on (rxe, and so the simulator's RoCE, raise none).
fn bed(seed: u64) -> SimBed {
    SimBed::jitterless(seed, Transport::InfiniBand)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), port)
}

/// What an event loop of `side` watches: its CM channel, its completion channel and the
/// asynchronous events.
fn sources(side: &Side) -> [PollSource; 3] {
    [
        PollSource::Cm(side.channel),
        PollSource::Completion(side.comp),
        PollSource::Async,
    ]
}

/// Sends `data` from a fresh region of `side`.
fn send_bytes(cm: &SimBackend, side: &Side, wr_id: u64, data: &[u8]) {
    let mr = ok(
        cm.reg_mr(side.pd, data.to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, data.len() as u32)];
    let wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
    ok(cm.post_send(side.qp, &wr), "post_send");
}

/// A process blocked on its three sources wakes for a CQ event (and the COMM_EST) 5 µs after
/// the peer's send, then for its DISCONNECTED 25 µs after the peer's disconnect, and a timed wait with nothing to come
/// ends empty at its deadline.
#[test]
fn a_blocked_event_loop_wakes_for_whichever_source_is_ready_first() {
    let bed = bed(31);
    let conn = connect(bed.server(), bed.client(), addr(7501));
    let t0 = bed.fabric.now();
    bed.fabric.spawn("server", "server", move |s| {
        let rx = region(&s, conn.server.pd, 16, 0, LW);
        post_recv_all(&s, conn.server.qp, 1, &rx);
        ok(s.req_notify_cq(conn.server.cq, false), "req_notify_cq");
        let watched = sources(&conn.server);
        let ready = ok(s.poll_sources(&watched, Wait::Block), "poll_sources");
        assert_eq!(s.now() - t0, Duration::from_millis(1) + 5 * US);
        // The QP's first message reports COMM_EST too, queued with the completion.
        let both = [PollSource::Completion(conn.server.comp), PollSource::Async];
        assert_eq!(ready, both);
        let cq = ok(
            s.get_cq_event(conn.server.comp, Wait::NonBlocking),
            "cq event",
        );
        ok(s.ack_cq_events(cq, 1), "ack_cq_events");
        assert_eq!(next_completion(&s, &conn.server).status, WcStatus::SUCCESS);
        let ready = ok(s.poll_sources(&watched, Wait::NonBlocking), "poll_sources");
        assert_eq!(ready, [PollSource::Async]);
        let event = ok(s.get_async_event(Wait::NonBlocking), "async event");
        assert_eq!(event.kind, AsyncEvent::COMM_EST);

        let ready = ok(s.poll_sources(&watched, Wait::Block), "poll_sources");
        // The disconnect moves the client's QP to ERROR first (`disconnect_qp_time`, 20 µs),
        // then its DREQ takes 5 µs.
        assert_eq!(s.now() - t0, Duration::from_millis(3) + 25 * US);
        assert_eq!(ready, [PollSource::Cm(conn.server.channel)]);
        let id = conn.server.id;
        expect_event_for(&s, conn.server.channel, EventKind::Disconnected, id, 0);

        let before = s.now();
        let timed = Wait::Timeout(Duration::from_millis(50));
        let ready = ok(s.poll_sources(&watched[1..], timed), "poll_sources");
        assert!(ready.is_empty(), "nothing comes: {ready:?}");
        assert_eq!(s.now() - before, Duration::from_millis(50));
        Ok(())
    });
    bed.fabric.spawn("client", "client", move |c| {
        c.sleep(Duration::from_millis(1))?;
        send_bytes(&c, &conn.client, 2, b"ping!!!");
        c.sleep(Duration::from_millis(2))?;
        c.disconnect(conn.client.id)?;
        Ok(())
    });
    bed.fabric.run().expect("both processes succeed");
}

/// Outside `Fabric::run` the wait runs the timeline inline: with the RTU lost, an early send
/// reaches the passive QP before its ESTABLISHED; the completion channel and the COMM_EST are
/// ready together, and the ESTABLISHED once `notify` has passed the COMM_EST on (§9.3).
#[test]
fn outside_a_run_the_wait_drives_the_timeline_until_a_source_is_ready() {
    let bed = bed(32);
    let (s, c) = (bed.server(), bed.client());
    let dropped = bed.fabric.drop_next(MessageKind::Rtu, 1);
    dropped.expect("the fabric drops the next RTU");
    let conn = start_connection(s, c, addr(7502), &Setup::default(), |side| {
        let rx = region(s, side.pd, 16, 0, LW);
        post_recv_all(s, side.qp, 1, &rx);
        ok(s.req_notify_cq(side.cq, false), "req_notify_cq");
    });
    let watched = sources(&conn.server);
    let t0 = s.now();
    send_bytes(c, &conn.client, 2, b"early");
    let ready = ok(s.poll_sources(&watched, Wait::Block), "poll_sources");
    assert_eq!(s.now() - t0, 5 * US);
    assert_eq!(
        ready,
        [PollSource::Completion(conn.server.comp), PollSource::Async]
    );
    let cq = ok(
        s.get_cq_event(conn.server.comp, Wait::NonBlocking),
        "cq event",
    );
    ok(s.ack_cq_events(cq, 1), "ack_cq_events");
    let event = ok(s.get_async_event(Wait::NonBlocking), "async event");
    assert_eq!(event.kind, AsyncEvent::COMM_EST);
    let ready = ok(s.poll_sources(&watched, Wait::NonBlocking), "poll_sources");
    assert!(ready.is_empty(), "all taken: {ready:?}");
    ok(s.notify(conn.server.id, AsyncEvent::COMM_EST), "notify");
    let ready = ok(s.poll_sources(&watched, Wait::NonBlocking), "poll_sources");
    assert_eq!(ready, [PollSource::Cm(conn.server.channel)]);
    let id = conn.server.id;
    expect_event_for(s, conn.server.channel, EventKind::Established, id, 0);
    let ready = ok(s.poll_sources(&watched, Wait::NonBlocking), "poll_sources");
    assert!(ready.is_empty(), "all taken: {ready:?}");
}

/// No source, a destroyed or foreign channel: EINVAL and EBADF naming `poll`; a completion
/// channel destroyed while a process waits on it ends the wait with EBADF; a blocking wait
/// nothing can end is a deadlock (EDEADLK).
#[test]
fn bad_sources_are_refused_and_a_wait_nothing_can_end_is_a_deadlock() {
    let bed = bed(33);
    let (s, c) = (bed.server(), bed.client());
    let conn = connect(s, c, addr(7503));
    expect_errno(s.poll_sources(&[], Wait::Block), Call::Poll, Errno::EINVAL);
    let spare = ok(s.create_comp_channel(conn.server.id), "create_comp_channel");
    ok(s.destroy_comp_channel(spare), "destroy_comp_channel");
    let gone = [PollSource::Completion(spare), PollSource::Async];
    expect_errno(s.poll_sources(&gone, Wait::Block), Call::Poll, Errno::EBADF);
    let other = self::bed(34);
    let foreign = [PollSource::Cm(conn.server.channel)];
    let other_server = other.server();
    expect_errno(
        other_server.poll_sources(&foreign, Wait::NonBlocking),
        Call::Poll,
        Errno::EBADF,
    );
    let theirs = [PollSource::Completion(conn.client.comp)];
    expect_errno(
        s.poll_sources(&theirs, Wait::NonBlocking),
        Call::Poll,
        Errno::EBADF,
    );

    let spare = ok(s.create_comp_channel(conn.server.id), "create_comp_channel");
    let t0 = bed.fabric.now();
    bed.fabric.spawn("server", "waiter", move |s| {
        let watched = [PollSource::Completion(spare)];
        expect_errno(
            s.poll_sources(&watched, Wait::Block),
            Call::Poll,
            Errno::EBADF,
        );
        assert_eq!(s.now() - t0, Duration::from_millis(2));
        let stuck = [PollSource::Completion(conn.server.comp), PollSource::Async];
        let err = expect_errno(
            s.poll_sources(&stuck, Wait::Block),
            Call::Poll,
            Errno::EDEADLK,
        );
        assert!(err.detail.contains("poll on"), "{err}");
        Ok(())
    });
    bed.fabric.spawn("server", "destroyer", move |s| {
        s.sleep(Duration::from_millis(2))?;
        s.destroy_comp_channel(spare)?;
        Ok(())
    });
    bed.fabric
        .run()
        .expect("the waiter sees EBADF, then EDEADLK");
}
