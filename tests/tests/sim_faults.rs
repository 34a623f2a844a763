//! The rare events, provoked on demand with the simulator's faults: the EISCONN race of
//! `rdma_notify` (§9), lost CM messages and their retransmissions (§5.2, §15.1), DEVICE_REMOVAL
//! of a connecting id (§8.4), ADDR_CHANGE, MULTICAST_ERROR and UNREACHABLE after a neighbour
//! change (§5.1).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    AsyncEvent, Call, CmBackend, Errno, EventKind, EventParam, PortSpace, QpType, Transport,
};
use cmtwin_sim::{MessageKind, SimConfig};
use cmtwin_tests::steps::{
    add_qp, expect_errno, expect_event, expect_event_for, expect_no_event, expect_request,
    listen_on, ok, resolved_client, Endpoint,
};
use cmtwin_tests::{SimBed, TestBed};

/// CM timers that expire exactly (no kernel timer wheel), for checks of the protocol's own
/// retransmission intervals.
fn exact_timers() -> SimConfig {
    SimConfig {
        kernel_hz: None,
        ..SimConfig::default()
    }
}

/// A connection accepted by the server, its RTU not yet received: (server child, client).
fn accepted_not_established(bed: &SimBed) -> (Endpoint, Endpoint) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(bed.client(), client.id, QpType::Rc);
    ok(bed.client().connect(client.id, None), "connect");
    let req = expect_request(bed.server(), &listener);
    add_qp(bed.server(), req.id, QpType::Rc);
    ok(bed.server().accept(req.id, None), "accept");
    let server = Endpoint {
        channel: listener.channel,
        id: req.id,
    };
    (server, client)
}

/// §9.3: data reached the passive QP before a late RTU: notify(COMM_EST) wins, ESTABLISHED
/// comes from it, and the late RTU is ignored: exactly one ESTABLISHED.
#[test]
fn notify_before_the_rtu_establishes_once() {
    let bed = SimBed::new(11);
    bed.fabric
        .delay_next(MessageKind::Rtu, 1, Duration::from_millis(500))
        .expect("not during a run");
    let (server, client) = accepted_not_established(&bed);
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    // The RTU is still on the wire: the passive side has no ESTABLISHED yet.
    expect_no_event(bed.server(), server.channel);
    ok(
        bed.server().notify(server.id, AsyncEvent::COMM_EST),
        "notify wins the race",
    );
    expect_event_for(
        bed.server(),
        server.channel,
        EventKind::Established,
        server.id,
        0,
    );
    bed.fabric
        .run_for(Duration::from_secs(10))
        .expect("not during a run");
    expect_no_event(bed.server(), server.channel);
    // The connection is established for the IB CM: another notify is EISCONN.
    expect_errno(
        bed.server().notify(server.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EISCONN,
    );
}

/// §9.3: the RTU wins: ESTABLISHED was queued by it and notify returns EISCONN.
#[test]
fn notify_after_the_rtu_is_eisconn() {
    let bed = SimBed::new(12);
    let (server, client) = accepted_not_established(&bed);
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    expect_event_for(
        bed.server(),
        server.channel,
        EventKind::Established,
        server.id,
        0,
    );
    expect_errno(
        bed.server().notify(server.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EISCONN,
    );
    expect_no_event(bed.server(), server.channel);
}

/// §9.3: without notify, a lost RTU is recovered: the passive REP retransmission (4096 ms)
/// makes the established active side send the RTU again.
#[test]
fn lost_rtu_is_recovered_by_the_rep_retransmission() {
    let bed = SimBed::with_config(13, Transport::Roce, exact_timers());
    bed.fabric
        .drop_next(MessageKind::Rtu, 1)
        .expect("not during a run");
    let (server, client) = accepted_not_established(&bed);
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    let before = bed.fabric.now();
    expect_event_for(
        bed.server(),
        server.channel,
        EventKind::Established,
        server.id,
        0,
    );
    let waited = bed.fabric.now() - before;
    assert!(
        waited >= Duration::from_millis(4096) && waited < Duration::from_millis(4200),
        "passive ESTABLISHED {waited:?} after the lost RTU, expected one REP retransmission (4096 ms)"
    );
    assert!(
        bed.fabric.trace_text().contains("(targeted fault)"),
        "the loss is in the trace"
    );
}

/// §15.1: a lost REQ is retransmitted after Treq (6144 ms on the Linux 6.1 profile) and the
/// connection then proceeds.
#[test]
fn lost_req_is_retransmitted() {
    let bed = SimBed::with_config(14, Transport::Roce, exact_timers());
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let client = resolved_client(&bed, PortSpace::TCP, listener.addr);
    add_qp(bed.client(), client.id, QpType::Rc);
    bed.fabric
        .drop_next(MessageKind::Req, 1)
        .expect("not during a run");
    ok(bed.client().connect(client.id, None), "connect");
    let sent = bed.fabric.now();
    let req = expect_request(bed.server(), &listener);
    let waited = bed.fabric.now() - sent;
    assert!(
        waited >= Duration::from_millis(6144) && waited < Duration::from_millis(6150),
        "the request came {waited:?} after connect, expected with the retransmission after Treq"
    );
    ok(bed.server().reject(req.id, b"no"), "reject");
    let rejected = expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Rejected,
        client.id,
        28,
    );
    assert_eq!(&rejected.private_data[..2], b"no");
}

/// §8.4: a connecting id gets DEVICE_REMOVAL (not UNREACHABLE/REJECTED), nothing after it, and
/// then calls fail with ENXIO; destroy still works.
#[test]
fn device_removal_preempts_a_connect() {
    let bed = SimBed::new(15);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let client = resolved_client(&bed, PortSpace::TCP, listener.addr);
    bed.fabric
        .drop_next(MessageKind::Req, 16)
        .expect("not during a run");
    add_qp(bed.client(), client.id, QpType::Rc);
    ok(bed.client().connect(client.id, None), "connect");
    bed.fabric
        .remove_device("client")
        .expect("the host has a device");
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::DeviceRemoval,
        client.id,
        0,
    );
    bed.fabric
        .run_for(Duration::from_secs(200))
        .expect("not during a run");
    expect_no_event(bed.client(), client.channel);
    expect_errno(
        bed.client().disconnect(client.id),
        Call::Disconnect,
        Errno::ENXIO,
    );
    ok(bed.client().destroy_qp(client.id), "destroy_qp");
    ok(
        bed.client().destroy_id(client.id),
        "destroy_id after removal",
    );
    expect_no_event(bed.server(), listener.channel);
}

/// §5.1: ADDR_CHANGE reaches every id attached to the device, with status 0.
#[test]
fn address_change_reaches_attached_ids() {
    let bed = SimBed::new(16);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    bed.fabric
        .address_change("server")
        .expect("the host has a device");
    expect_event_for(
        bed.server(),
        listener.channel,
        EventKind::AddrChange,
        listener.id,
        0,
    );
}

/// §13.3: MULTICAST_JOIN carries the context, QPN 0xFFFFFF and the qkey; losing the group gives
/// MULTICAST_ERROR -ENETRESET with the same context; leave works after it.
#[test]
fn multicast_join_then_group_lost() {
    let bed = SimBed::new(17);
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "id");
    ok(
        cm.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let group: SocketAddr = "239.1.2.3:0".parse().expect("literal");
    ok(cm.join_multicast(id, group, 0xfeed), "join");
    let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    match join.param {
        EventParam::Multicast { ud, context } => {
            assert_eq!(context, 0xfeed);
            assert_eq!(ud.qp_num, 0xFF_FFFF);
            assert_eq!(ud.qkey, cmtwin::RDMA_UDP_QKEY);
        }
        other => panic!("MULTICAST_JOIN without multicast data: {other:?}"),
    }
    bed.fabric
        .multicast_lost(group.ip())
        .expect("not during a run");
    let lost = expect_event_for(cm, channel, EventKind::MulticastError, id, -102);
    assert!(matches!(
        lost.param,
        EventParam::Multicast {
            context: 0xfeed,
            ..
        }
    ));
    ok(cm.leave_multicast(id, group), "leave");
    expect_errno(
        cm.leave_multicast(id, group),
        Call::LeaveMulticast,
        Errno::EADDRNOTAVAIL,
    );
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §5.1 notes: a RoCE neighbour changing its MAC gives UNREACHABLE -ETIMEDOUT to a connected id,
/// whatever its state.
#[test]
fn neighbour_change_makes_connected_ids_unreachable() {
    let bed = SimBed::new(18);
    let (server, client) = accepted_not_established(&bed);
    expect_event(bed.client(), client.channel, EventKind::Established);
    expect_event(bed.server(), server.channel, EventKind::Established);
    bed.fabric
        .neighbour_change(SimBed::SERVER_IP)
        .expect("not during a run");
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Unreachable,
        client.id,
        -110,
    );
    // Only ids routed to the changed neighbour are affected.
    expect_no_event(bed.server(), server.channel);
}

// ----- the link model: FIFO links, delays that hold back, reorders that are overtaken --------

/// Two connection requests sent back to back on one link, the first one held by `fault`:
/// the requests' private data in the order the server gets them, with the instant of each.
fn two_requests(fault: impl FnOnce(&SimBed)) -> Vec<(Vec<u8>, Duration)> {
    let bed = SimBed::new(21);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let first = resolved_client(&bed, PortSpace::TCP, listener.addr);
    let second = resolved_client(&bed, PortSpace::TCP, listener.addr);
    fault(&bed);
    for (ep, data) in [(first, b"first"), (second, b"other")] {
        add_qp(bed.client(), ep.id, QpType::Rc);
        let param = cmtwin::ConnParam::with_private_data(data);
        ok(bed.client().connect(ep.id, Some(&param)), "connect");
    }
    (0..2)
        .map(|_| {
            let req = expect_request(bed.server(), &listener);
            (req.private_data[..5].to_vec(), bed.server().now())
        })
        .collect()
}

/// A delayed REQ holds back the REQ sent after it on the same link (links are FIFO): both
/// arrive, in order, at the same instant, 1 ms late.
#[test]
fn a_delayed_message_holds_back_the_rest_of_its_link() {
    let got = two_requests(|bed| {
        bed.fabric
            .delay_next(MessageKind::Req, 1, Duration::from_millis(1))
            .expect("not during a run");
    });
    assert_eq!(got[0].0, b"first");
    assert_eq!(got[1].0, b"other");
    assert_eq!(got[0].1, got[1].1, "the second waited behind the first");
    assert!(got[0].1 >= Duration::from_millis(1));
}

/// A reordered REQ is overtaken: the REQ sent after it arrives first, no later than without the
/// fault (where the FIFO link may hold it behind the first: here it does, by 1.459 µs of
/// jitter), and the reordered one exactly 1 ms later than its own time without the fault.
#[test]
fn a_reordered_message_is_overtaken() {
    let unfaulted = two_requests(|_| {});
    let got = two_requests(|bed| {
        bed.fabric
            .reorder_next(MessageKind::Req, 1, Duration::from_millis(1))
            .expect("an IB CM message may be reordered");
    });
    assert_eq!(got[0].0, b"other");
    assert_eq!(got[1].0, b"first");
    assert_eq!(
        unfaulted[1].1, unfaulted[0].1,
        "unfaulted, FIFO held the second"
    );
    assert_eq!(
        got[0].1,
        Duration::from_nanos(26_600),
        "the overtaker's own time"
    );
    assert_eq!(got[1].1, unfaulted[0].1 + Duration::from_millis(1));
}

/// What rides TCP (iWARP) is never reordered: refused, by the call and in a plan.
#[test]
fn messages_that_ride_tcp_cannot_be_reordered() {
    let bed = SimBed::new(1);
    for kind in [MessageKind::MpaReq, MessageKind::Fin] {
        let e = bed
            .fabric
            .reorder_next(kind, 1, Duration::from_millis(1))
            .expect_err("TCP never reorders");
        assert!(e.to_string().contains("never reorders"), "{e}");
    }
    let plan = cmtwin_sim::FaultPlan::new().scheduled(
        cmtwin_sim::Trigger::Time { at_ms: 0 },
        cmtwin_sim::FaultAction::ReorderMessages {
            kind: MessageKind::MpaRep,
            count: 1,
            delay_ms: 1,
        },
    );
    let e = plan.validate().expect_err("refused");
    assert!(e.to_string().contains("MPA_REP rides TCP"), "{e}");
}

// ----- a host's power-off: silence, QP numbers that come back, the stale-connection check ----

/// A connection from the client, established on both sides; the client's QP number.
fn established(bed: &SimBed, listener: &cmtwin_tests::steps::Listener) -> (Endpoint, u32) {
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    let qpn = add_qp(bed.client(), client.id, QpType::Rc);
    ok(bed.client().connect(client.id, None), "connect");
    let req = expect_request(bed.server(), listener);
    add_qp(bed.server(), req.id, QpType::Rc);
    ok(bed.server().accept(req.id, None), "accept");
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    expect_event_for(
        bed.server(),
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    (client, qpn)
}

/// The client loses power while connected: the server is told nothing. Back up, the
/// client's first QP gets its old number again, so its REQ matches the connection the
/// server's CM still holds: REJECTED with status 10 (stale connection), and the server's CM
/// disconnects the old connection itself (the rebooted CM answers its DREQ): DISCONNECTED on
/// the server. The next QP has a new number and connects.
#[test]
fn a_rebooted_hosts_first_connection_is_stale_and_its_next_one_connects() {
    let bed = SimBed::new(31);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let (old, old_qpn) = established(&bed, &listener);
    bed.fabric.power_off("client").expect("not during a run");
    expect_errno(
        bed.client()
            .get_cm_event(old.channel, cmtwin::Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EBADF,
    );
    bed.fabric
        .run_for(Duration::from_secs(5))
        .expect("not during a run");
    expect_no_event(bed.server(), listener.channel);
    bed.fabric.power_on("client").expect("not during a run");

    let again = resolved_client(&bed, PortSpace::TCP, listener.addr);
    assert_eq!(
        add_qp(bed.client(), again.id, QpType::Rc),
        old_qpn,
        "QP numbers start over"
    );
    ok(bed.client().connect(again.id, None), "connect");
    let rejected = expect_event_for(
        bed.client(),
        again.channel,
        EventKind::Rejected,
        again.id,
        10,
    );
    assert_eq!(rejected.status, cmtwin::IbRejReason::STALE_CONN);
    let rejected_at = bed.client().now();
    let gone = expect_event(bed.server(), listener.channel, EventKind::Disconnected);
    assert!(
        bed.server().now() > rejected_at,
        "the DREQ goes out with the REJ, its DREP after"
    );

    let fresh = resolved_client(&bed, PortSpace::TCP, listener.addr);
    assert_ne!(add_qp(bed.client(), fresh.id, QpType::Rc), old_qpn);
    ok(bed.client().connect(fresh.id, None), "connect");
    let req = expect_request(bed.server(), &listener);
    assert_ne!(req.id, gone.id);
}

/// A plan's reorder chance holds each REQ back by a draw in 1..=2 ms without holding the
/// link: over seeds, the second REQ sent sometimes arrives first, sometimes not, and each
/// reordering is in the trace.
#[test]
fn a_reorder_chance_lets_later_messages_overtake() {
    let mut orders = std::collections::BTreeSet::new();
    for seed in 0..12 {
        let bed = SimBed::new(seed);
        let mut chance = cmtwin_sim::MessageChance::new(MessageKind::Req);
        chance.reorder = 1.0;
        chance.delay_max_ms = 2;
        let plan = cmtwin_sim::FaultPlan {
            faults: vec![cmtwin_sim::Fault::Chance(chance)],
        };
        bed.fabric.apply_plan(&plan).expect("a valid plan");
        let listener = listen_on(&bed, PortSpace::TCP, 8);
        let first = resolved_client(&bed, PortSpace::TCP, listener.addr);
        let second = resolved_client(&bed, PortSpace::TCP, listener.addr);
        for (ep, data) in [(first, b"first"), (second, b"other")] {
            add_qp(bed.client(), ep.id, QpType::Rc);
            let param = cmtwin::ConnParam::with_private_data(data);
            ok(bed.client().connect(ep.id, Some(&param)), "connect");
        }
        let req = expect_request(bed.server(), &listener);
        orders.insert(req.private_data[..5].to_vec());
        assert_eq!(
            bed.fabric
                .trace_text()
                .matches("fault plan reorders REQ")
                .count(),
            2
        );
    }
    assert_eq!(orders.len(), 2, "both orders over twelve seeds: {orders:?}");
}

// ----- unregistering a device whose port still works (`rdma link delete`) ------------------

/// The server's device is unregistered under an established connection on `transport`:
/// DEVICE_REMOVAL on the server at once; ucma's teardown destroys the server's kernel id while
/// the port still sends, so the client hears the end of the connection one wire latency later:
/// (when the client's DISCONNECTED came, after the unregistration).
fn peer_of_an_unregistered_device(transport: Transport) -> Duration {
    let bed = SimBed::jitterless(41, transport);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let (client, _) = established(&bed, &listener);
    let unregistered_at = bed.fabric.now();
    bed.fabric
        .unregister_device("server")
        .expect("the host has a device");
    let removal = expect_event(bed.server(), listener.channel, EventKind::DeviceRemoval);
    assert_eq!(removal.status, 0);
    assert_eq!(
        bed.server().now(),
        unregistered_at,
        "DEVICE_REMOVAL at once"
    );
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Disconnected,
        client.id,
        0,
    );
    bed.client().now() - unregistered_at
}

/// RoCE: the server's CM sends the DREQ as `cm_destroy_id` does for an established id; the
/// client's DISCONNECTED comes one wire latency (10 µs) after the unregistration.
#[test]
fn unregistering_a_device_disconnects_its_established_peer_roce() {
    assert_eq!(
        peer_of_an_unregistered_device(Transport::Roce),
        SimConfig::default().wire_latency
    );
}

/// iWARP: the teardown closes the connection abruptly (iwcm.c `destroy_cm_id`): the client
/// hears the close one wire latency later.
#[test]
fn unregistering_a_device_disconnects_its_established_peer_iwarp() {
    assert_eq!(
        peer_of_an_unregistered_device(Transport::Iwarp),
        SimConfig::default().wire_latency
    );
}

/// The contrast: a device removed with its port (a hot-unplug) tells the peer nothing; the
/// client's id stays connected.
#[test]
fn removing_a_device_with_its_port_tells_the_peer_nothing() {
    let bed = SimBed::jitterless(42, Transport::Roce);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let (client, _) = established(&bed, &listener);
    bed.fabric
        .remove_device("server")
        .expect("the host has a device");
    expect_event(bed.server(), listener.channel, EventKind::DeviceRemoval);
    bed.fabric
        .run_for(Duration::from_secs(200))
        .expect("not during a run");
    expect_no_event(bed.client(), client.channel);
}

/// A request the server's listener holds unfetched when its device is unregistered: the
/// teardown destroys the child's kernel id in REQ_RCVD, which rejects the request (REJ,
/// consumer defined: REJECTED 28 on the client one wire latency later); librdmacm skips the
/// CONNECT_REQUEST (§8.4), so the server sees only its listener's DEVICE_REMOVAL.
#[test]
fn unregistering_a_device_rejects_the_requests_it_holds() {
    let bed = SimBed::jitterless(43, Transport::Roce);
    let listener = listen_on(&bed, PortSpace::TCP, 8);
    let client = resolved_client(&bed, PortSpace::TCP, listener.addr);
    add_qp(bed.client(), client.id, QpType::Rc);
    ok(bed.client().connect(client.id, None), "connect");
    bed.fabric
        .run_for(Duration::from_millis(1))
        .expect("not during a run");
    let unregistered_at = bed.fabric.now();
    bed.fabric
        .unregister_device("server")
        .expect("the host has a device");
    expect_event_for(
        bed.server(),
        listener.channel,
        EventKind::DeviceRemoval,
        listener.id,
        0,
    );
    expect_no_event(bed.server(), listener.channel);
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::Rejected,
        client.id,
        28,
    );
    assert_eq!(
        bed.client().now() - unregistered_at,
        SimConfig::default().wire_latency
    );
}

/// The client's device is unregistered while its CONNECT_RESPONSE waits unfetched (found by an
/// outside user's property test, where it panicked the simulator: "connected id has an
/// endpoint"). ucma's teardown destroys the client's kernel id in REP_RCVD, which rejects the
/// connection (the server's REJECTED 28 one wire latency later, as `cm_destroy_id` sends a
/// consumer REJ there); librdmacm's processing of the queued CONNECT_RESPONSE then fails
/// (`rdma_init_qp_attr`: ENXIO), so the client fetches CONNECT_ERROR with status -1, then its
/// DEVICE_REMOVAL, both at the moment of the unregistration.
#[test]
fn a_connect_response_fetched_after_its_device_was_unregistered_is_a_connect_error() {
    let bed = SimBed::jitterless(44, Transport::Roce);
    let (server, client) = accepted_not_established(&bed);
    // The REP reaches the client one wire latency after the accept.
    bed.fabric
        .run_for(SimConfig::default().wire_latency)
        .expect("not during a run");
    let unregistered_at = bed.fabric.now();
    bed.fabric
        .unregister_device("client")
        .expect("the host has a device");
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::ConnectError,
        client.id,
        -1,
    );
    expect_event_for(
        bed.client(),
        client.channel,
        EventKind::DeviceRemoval,
        client.id,
        0,
    );
    assert_eq!(bed.client().now(), unregistered_at);
    expect_no_event(bed.client(), client.channel);
    expect_event_for(
        bed.server(),
        server.channel,
        EventKind::Rejected,
        server.id,
        28,
    );
    assert_eq!(
        bed.server().now() - unregistered_at,
        SimConfig::default().wire_latency
    );
}
