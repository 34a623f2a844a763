//! UD and multicast data path on the simulator: the shared scenarios of
//! `cmtwin_tests::ud_datapath` on RoCE and InfiniBand beds, with exact virtual times, loss,
//! the route header's bytes, multicast loopback and delivery to non-members.
//!
//! Times: the fabric's wire latency is 5 µs without jitter, so a datagram reaches its
//! receiver 5 µs after it is posted; the send completes when it is posted (the device has
//! transmitted it; nothing answers a datagram).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, QpAttr, QpState, WcStatus, GRH_LEN};
use cmtwin::{AhAttr, CmBackend, EventParam, JoinFlags, PortSpace, Transport, Wait};
use cmtwin_sim::SimBackend;
use cmtwin_tests::datapath::{connect, post_recv_all, region, Side};
use cmtwin_tests::steps::ok;
use cmtwin_tests::ud_datapath::{
    a_qkey_mismatch_is_dropped, a_qp_blocking_self_loopback_gets_none_of_its_own_group_datagrams,
    a_receive_too_small_is_a_length_error, a_ud_destination_on_an_rc_qp_is_refused,
    a_ud_send_posted_before_rts_stays_queued, an_external_ud_qp_talks_with_an_id_made_one,
    assert_no_completion, assert_ud_receive, assert_ud_sent, dest, external_ud_side, join,
    multicast_reaches_every_member, next_completion,
    on_roce_a_receive_without_grh_gives_no_address_handle,
    the_server_answers_through_an_address_handle_from_the_receive, ud_connect,
    ud_misuse_is_refused, ud_send, ud_send_reaches_the_server, ud_side, AfterEarlyUdSend,
    SelfLoopback, ShortReceive, SILENCE,
};
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// A bed of `transport` whose wire has no jitter, so that times are exact sums of latencies.
fn bed(seed: u64, transport: Transport) -> SimBed {
    SimBed::jitterless(seed, transport)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(SimBed::SERVER_IP, port)
}

fn group() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 7, 7, 9)), 0)
}

/// The payload of a receive region after the GRH space, and the GRH space itself.
fn grh_bytes(cm: &SimBackend, mr: &cmtwin::verbs::MemoryRegion) -> Vec<u8> {
    let mut grh = vec![0; GRH_LEN as usize];
    ok(cm.mr_read(mr.handle, 0, &mut grh), "mr_read");
    grh
}

#[test]
fn a_ud_send_reaches_the_server_with_grh_space_and_src_qp_on_roce_and_infiniband() {
    for transport in [Transport::Roce, Transport::InfiniBand] {
        let bed = bed(1, transport);
        ud_send_reaches_the_server(bed.server(), bed.client(), addr(7000), b"udaddy says hi");
    }
}

#[test]
fn a_datagram_arrives_one_latency_after_its_send_which_completes_at_once() {
    let bed = bed(2, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7001), |side| {
        let mr = region(s, side.pd, 128, 0, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted");
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    let t0 = c.now();
    ud_send(c, &pair.client, 2, to, b"timed");
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 2, 5);
    assert_eq!(c.now(), t0, "the send completes when posted");
    let wc = next_completion(s, &pair.server);
    assert_eq!(s.now() - t0, 5 * US, "one wire latency");
    assert_ud_receive(
        s,
        &wc,
        (1, pair.client.qpn, &pair.to_server.ah_attr),
        &rx,
        b"timed",
    );
}

#[test]
fn on_roce_the_grh_space_holds_the_ipv4_header_as_rxe_writes_it() {
    let bed = bed(3, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7002), |side| {
        let mr = region(s, side.pd, 128, 0xee, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted");
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    ud_send(
        c,
        &pair.client,
        2,
        dest(ah, &pair.to_server, pair.to_server.qkey),
        &[7; 10],
    );
    let wc = next_completion(s, &pair.server);
    assert!(wc.grh, "RoCE datagrams carry a GRH");
    let grh = grh_bytes(s, &rx);
    assert_eq!(&grh[..20], &[0; 20], "rxe zeroes the first 20 bytes");
    // IPv4: version 4, header length 5, total 20 + 8 (UDP) + 12 (BTH) + 8 (DETH) + 10 + 4.
    assert_eq!(grh[20], 0x45);
    assert_eq!(u16::from_be_bytes([grh[22], grh[23]]), 62);
    assert_eq!((grh[28], grh[29]), (64, 17), "TTL 64, UDP");
    assert_eq!(&grh[32..36], &[10, 0, 0, 2], "source: the client");
    assert_eq!(&grh[36..40], &[10, 0, 0, 1], "destination: the server");
}

#[test]
fn on_infiniband_a_datagram_through_a_local_address_handle_has_no_grh_and_leaves_its_space() {
    let bed = bed(4, Transport::InfiniBand);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7003), |side| {
        let mr = region(s, side.pd, 128, 0xee, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted");
    assert!(
        !pair.to_server.ah_attr.is_global,
        "IB's SIDR reply: a local address"
    );
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    ud_send(
        c,
        &pair.client,
        2,
        dest(ah, &pair.to_server, pair.to_server.qkey),
        b"ib",
    );
    let wc = next_completion(s, &pair.server);
    assert_eq!(
        (wc.status, wc.grh, wc.byte_len),
        (WcStatus::SUCCESS, false, 42)
    );
    assert_eq!(
        grh_bytes(s, &rx),
        vec![0xee; 40],
        "the GRH space is left as it was"
    );
    // A global address handle to the same QP: an InfiniBand GRH with both GIDs.
    let mut global = pair.to_server.ah_attr;
    global.is_global = true;
    let gah = ok(c.create_ah(pair.client.pd, &global), "create_ah (global)");
    post_recv_all(s, pair.server.qp, 3, &rx);
    ud_send(
        c,
        &pair.client,
        4,
        dest(gah, &pair.to_server, pair.to_server.qkey),
        b"ib",
    );
    let wc = next_completion(s, &pair.server);
    assert_eq!((wc.wr_id, wc.grh, wc.byte_len), (3, true, 42));
    let grh = grh_bytes(s, &rx);
    assert_eq!(
        (grh[0], grh[6], grh[7]),
        (0x60, 0x1b, 64),
        "version 6, next header BTH"
    );
    assert_eq!(u16::from_be_bytes([grh[4], grh[5]]), 12 + 8 + 2 + 4);
    assert_eq!(
        &grh[20..24],
        &[10, 0, 0, 2],
        "source GID: the client's (IPv4-mapped)"
    );
    assert_eq!(
        &grh[36..40],
        &[10, 0, 0, 1],
        "destination GID: the server's"
    );
}

#[test]
fn the_server_answers_through_an_address_handle_made_from_the_receive() {
    // On InfiniBand the receive has no GRH: the handle goes to the completion's source LID.
    for transport in [Transport::Roce, Transport::InfiniBand] {
        let bed = bed(14, transport);
        the_server_answers_through_an_address_handle_from_the_receive(
            bed.server(),
            bed.client(),
            addr(7010),
        );
    }
}

#[test]
fn on_roce_a_receive_without_grh_gives_no_address_handle_with_einval() {
    let bed = bed(15, Transport::Roce);
    on_roce_a_receive_without_grh_gives_no_address_handle(bed.server(), bed.client(), addr(7011));
}

/// The LIDs of the simulated subnet: 1 + the address's last byte.
const SERVER_LID: u16 = 2;
const CLIENT_LID: u16 = 3;

#[test]
fn on_infiniband_a_receive_without_grh_names_the_senders_lid_and_the_answer_goes_back_by_it() {
    let bed = bed(16, Transport::InfiniBand);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7012), |side| {
        let mr = region(s, side.pd, 128, 0xee, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted");
    assert_eq!(
        pair.to_server.ah_attr.dlid, SERVER_LID,
        "the SIDR reply's LID"
    );
    let back = region(c, pair.client.pd, 128, 0, LW);
    post_recv_all(c, pair.client.qp, 5, &back);
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let t0 = c.now();
    ud_send(
        c,
        &pair.client,
        2,
        dest(ah, &pair.to_server, pair.to_server.qkey),
        b"lid?",
    );
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 2, 4);
    let wc = next_completion(s, &pair.server);
    assert_eq!(s.now() - t0, 5 * US);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.src_qp, wc.slid, wc.grh),
        (1, WcStatus::SUCCESS, 44, pair.client.qpn, CLIENT_LID, false)
    );
    assert_eq!((wc.sl, wc.dlid_path_bits, wc.pkey_index), (0, 0, 0));
    // Without a GRH the header bytes are not read: garbage there changes nothing.
    let reply = ok(
        s.create_ah_from_wc(pair.server.pd, &wc, &[0x5a; GRH_LEN as usize]),
        "create_ah_from_wc",
    );
    let t1 = s.now();
    let to = cmtwin::verbs::UdDest {
        ah: reply,
        remote_qpn: wc.src_qp,
        remote_qkey: cmtwin::RDMA_UDP_QKEY,
    };
    ud_send(s, &pair.server, 3, to, b"by lid");
    assert_ud_sent(&next_completion(s, &pair.server), &pair.server, 3, 6);
    let wc = next_completion(c, &pair.client);
    assert_eq!(c.now() - t1, 5 * US);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.src_qp, wc.slid, wc.grh),
        (5, WcStatus::SUCCESS, 46, pair.server.qpn, SERVER_LID, false)
    );
    let mut got = [0; 6];
    ok(
        c.mr_read(back.handle, GRH_LEN as usize, &mut got),
        "mr_read",
    );
    assert_eq!(&got, b"by lid");
    // A LID no port has: the datagram is lost (the send still succeeds).
    let nowhere = AhAttr {
        dlid: 0x77,
        port_num: 1,
        ..AhAttr::default()
    };
    let lost = ok(
        c.create_ah(pair.client.pd, &nowhere),
        "create_ah (LID only)",
    );
    post_recv_all(s, pair.server.qp, 6, &rx);
    ud_send(
        c,
        &pair.client,
        7,
        dest(lost, &pair.to_server, pair.to_server.qkey),
        b"x",
    );
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 7, 1);
    assert_no_completion(s, &pair.server);
    assert!(bed
        .fabric
        .trace_text()
        .contains("(no InfiniBand port has the destination LID)"));
}

#[test]
fn on_roce_an_address_handle_without_global_route_is_refused_with_einval() {
    let bed = bed(17, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let pair = ud_connect(s, c, addr(7013), |_| {});
    let mut local = pair.to_server.ah_attr;
    local.is_global = false;
    cmtwin_tests::steps::expect_errno(
        c.create_ah(pair.client.pd, &local),
        cmtwin::Call::CreateAh,
        cmtwin::Errno::EINVAL,
    );
}

#[test]
fn an_external_ud_qp_talks_with_an_id_made_one_on_roce_and_infiniband() {
    for (transport, grh, lids) in [
        (Transport::Roce, true, (0, 0)),
        (Transport::InfiniBand, false, (CLIENT_LID, SERVER_LID)),
    ] {
        let bed = bed(18, transport);
        let (s, c) = (bed.server(), bed.client());
        let x = an_external_ud_qp_talks_with_an_id_made_one(s, c, addr(7014));
        assert_ne!(x.external.qpn, x.pair.client.qpn, "a QP of its own");
        assert_eq!(x.at_server.src_qp, x.external.qpn);
        assert_eq!(
            (x.at_server.grh, x.at_server.slid),
            (grh, lids.0),
            "{transport:?}"
        );
        assert_eq!(
            (x.at_external.grh, x.at_external.slid),
            (grh, lids.1),
            "{transport:?}"
        );
        // One more datagram, timed: one wire latency, as from an id's QP.
        let rx = region(s, x.pair.server.pd, 128, 0, LW);
        post_recv_all(s, x.pair.server.qp, 8, &rx);
        let ah = ok(
            c.create_ah(x.external.pd, &x.pair.to_server.ah_attr),
            "create_ah",
        );
        let t0 = c.now();
        ud_send(
            c,
            &x.external,
            9,
            dest(ah, &x.pair.to_server, x.pair.to_server.qkey),
            b"t",
        );
        let wc = next_completion(s, &x.pair.server);
        assert_eq!(s.now() - t0, 5 * US);
        assert_eq!((wc.wr_id, wc.src_qp, wc.byte_len), (8, x.external.qpn, 41));
        ok(c.destroy_ah(ah), "destroy_ah");
        ok(c.destroy_external_qp(x.external.qp), "destroy_external_qp");
    }
}

#[test]
fn an_external_ud_qp_takes_only_its_qkey_and_refuses_a_second_pkey_or_port() {
    let bed = bed(19, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let pair = ud_connect(s, c, addr(7015), |_| {});
    let comp = ok(c.create_comp_channel(pair.client.id), "create_comp_channel");
    let cq = ok(c.create_cq(pair.client.id, 8, Some(comp)), "create_cq");
    let mut attr = cmtwin::verbs::QpInitAttrEx::rc(pair.client.pd, cq, cq);
    attr.qp_type = cmtwin::QpType::Ud;
    let qp = ok(c.create_external_qp(&attr), "create_external_qp");
    let mut init = ok(
        c.init_qp_attr(pair.client.id, QpState::Init),
        "init_qp_attr",
    );
    // Port 2 is refused (uverbs' `modify_qp`); a pkey index of 1 would be taken, as rxe
    // takes it (measured, `cmtwin_tests::qp_modify`).
    let mut bad = init;
    bad.ah_attr.port_num = 2;
    cmtwin_tests::steps::expect_errno(
        c.modify_qp(qp, &bad),
        cmtwin::Call::ModifyQp,
        cmtwin::Errno::EINVAL,
    );
    assert_eq!(ok(c.query_qp_state(qp), "query_qp_state"), QpState::Reset);
    init.qkey = 0x4242;
    ok(c.modify_qp(qp, &init), "modify_qp INIT (qkey 0x4242)");
    for state in [QpState::Rtr, QpState::Rts] {
        let to = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        ok(c.modify_qp(qp, &to), "modify_qp");
    }
    let side = Side {
        comp,
        cq,
        qpn: ok(c.qp_number(qp), "qp_number"),
        qp,
        ..pair.client
    };
    let rx = region(c, side.pd, 128, 0, LW);
    post_recv_all(c, qp, 1, &rx);
    // The server answers the external QP with the UDP qkey: dropped; with 0x4242: taken.
    let to_external = ok(
        s.init_qp_attr(pair.server.id, QpState::Init),
        "init_qp_attr",
    );
    assert_eq!(to_external.qkey, cmtwin::RDMA_UDP_QKEY);
    let path = ok(
        s.create_ah(pair.server.pd, &client_path(&pair)),
        "create_ah",
    );
    let wrong = cmtwin::verbs::UdDest {
        ah: path,
        remote_qpn: side.qpn,
        remote_qkey: cmtwin::RDMA_UDP_QKEY,
    };
    ud_send(s, &pair.server, 2, wrong, b"wrong");
    assert_no_completion(c, &side);
    let right = cmtwin::verbs::UdDest {
        remote_qkey: 0x4242,
        ..wrong
    };
    ud_send(s, &pair.server, 3, right, b"right");
    let wc = next_completion(c, &side);
    assert_eq!(
        (wc.wr_id, wc.status, wc.src_qp, wc.byte_len),
        (1, WcStatus::SUCCESS, pair.server.qpn, GRH_LEN + 5)
    );
    assert!(bed.fabric.trace_text().contains("(qkey mismatch)"));
}

/// An address handle from the server to the client's address (a RoCE path).
fn client_path(pair: &cmtwin_tests::ud_datapath::UdPair) -> AhAttr {
    let mut path = pair.to_server.ah_attr;
    path.grh.dgid = match SimBed::CLIENT_IP {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    path
}

#[test]
fn an_external_ud_qp_sends_to_a_multicast_group_but_joins_none() {
    let bed = bed(20, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let len = GRH_LEN as usize + 32;
    let member = join(s, SocketAddr::new(SimBed::SERVER_IP, 0), group(), len);
    let sender = join(c, SocketAddr::new(SimBed::CLIENT_IP, 0), group(), 0);
    let external = external_ud_side(c, &sender.side);
    for state in [QpState::Rtr, QpState::Rts] {
        let to = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        ok(c.modify_qp(external.qp, &to), "modify_qp");
    }
    let rx = region(c, external.pd, len, 0, LW);
    post_recv_all(c, external.qp, 1, &rx);
    let ah = ok(c.create_ah(external.pd, &sender.group.ah_attr), "create_ah");
    let t0 = c.now();
    ud_send(
        c,
        &external,
        2,
        dest(ah, &sender.group, sender.group.qkey),
        b"group",
    );
    assert_ud_sent(&next_completion(c, &external), &external, 2, 5);
    let wc = next_completion(s, &member.side);
    assert_eq!(s.now() - t0, 5 * US);
    assert_ud_receive(
        s,
        &wc,
        (1, external.qpn, &sender.group.ah_attr),
        &member.rx,
        b"group",
    );
    // Its id-less QP is attached to no group: no loopback copy reaches it.
    assert_no_completion(c, &external);
}

#[test]
fn a_ud_send_posted_before_rts_waits_for_the_next_post_that_succeeds() {
    for (transport, in_rtr) in [
        (Transport::Roce, false),
        (Transport::Roce, true),
        (Transport::InfiniBand, false),
    ] {
        let bed = bed(7, transport);
        let (s, c) = (bed.server(), bed.client());
        let seen = a_ud_send_posted_before_rts_stays_queued(
            s,
            c,
            addr(7020),
            in_rtr,
            AfterEarlyUdSend::NextPost,
        );
        assert_eq!(
            seen.first_received_at,
            Some(seen.released_at + 5 * US),
            "the kept datagram leaves with the second post: one latency later"
        );
        let text = bed.fabric.trace_text();
        let kept = text
            .find("UD_SEND 5 bytes")
            .expect("the kept datagram is sent");
        let second = text.find("UD_SEND 6 bytes").expect("the second is sent");
        assert!(kept < second, "in order:\n{text}");
    }
}

#[test]
fn a_ud_send_posted_before_rts_is_flushed_by_error() {
    let bed = bed(8, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    // The scenario asserts the flush and the server's silence; the trace shows no send.
    a_ud_send_posted_before_rts_stays_queued(s, c, addr(7021), false, AfterEarlyUdSend::Error);
    assert!(
        !bed.fabric.trace_text().contains("UD_SEND 5 bytes"),
        "never sent"
    );
}

#[test]
fn a_qkey_mismatch_is_dropped_silently() {
    let bed = bed(5, Transport::Roce);
    a_qkey_mismatch_is_dropped(bed.server(), bed.client(), addr(7004));
    let text = bed.fabric.trace_text();
    assert!(text.contains("(qkey mismatch)"), "the drop is traced");
}

/// A receive too small for the GRH space and the payload is the driver's: an InfiniBand HCA
/// completes it with LOC_LEN_ERR and the QP stays usable; rxe on Linux 6.1 completes it with
/// LOC_QP_OP_ERR and the QP enters ERROR; rxe on 6.12 drops the datagram and keeps the
/// receive (both rxe outcomes measured: the shared scenario's real-bed run).
#[test]
fn a_receive_too_small_for_grh_and_payload_is_the_drivers_error() {
    let ib = bed(6, Transport::InfiniBand);
    let (s, c) = (ib.server(), ib.client());
    a_receive_too_small_is_a_length_error(s, c, addr(7005), ShortReceive::LengthError);

    let rxe61 = bed(6, Transport::Roce);
    let (s, c) = (rxe61.server(), rxe61.client());
    a_receive_too_small_is_a_length_error(s, c, addr(7005), ShortReceive::QpOperationError);

    let config = cmtwin_sim::SimConfig {
        wire_jitter: Duration::ZERO,
        ..cmtwin_sim::SimConfig::linux612()
    };
    let rxe612 = SimBed::with_config(6, Transport::Roce, config);
    let (s, c) = (rxe612.server(), rxe612.client());
    a_receive_too_small_is_a_length_error(s, c, addr(7005), ShortReceive::Dropped);
    let trace = rxe612.fabric.trace_text();
    assert_eq!(
        trace.matches("(longer than the receive)").count(),
        1,
        "{trace}"
    );
}

#[test]
fn a_lost_datagram_is_lost_while_its_send_succeeds_and_without_a_receive_it_is_dropped() {
    let bed = bed(7, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7006), |side| {
        let mr = region(s, side.pd, 128, 0, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted");
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    bed.fabric.drop_data_packets(1).expect("outside a run");
    ud_send(c, &pair.client, 2, to, b"lost");
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 2, 4);
    let t0 = s.now();
    assert_no_completion(s, &pair.server);
    assert_eq!(s.now() - t0, SILENCE, "nothing came, nothing was retried");
    ud_send(c, &pair.client, 3, to, b"found");
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 3, 5);
    let wc = next_completion(s, &pair.server);
    assert_ud_receive(
        s,
        &wc,
        (1, pair.client.qpn, &pair.to_server.ah_attr),
        &rx,
        b"found",
    );
    // No receive posted now: the next datagram is dropped, not kept for a later receive.
    ud_send(c, &pair.client, 4, to, b"dropped");
    assert_ud_sent(&next_completion(c, &pair.client), &pair.client, 4, 7);
    s.sleep(SILENCE).expect("sleep");
    post_recv_all(s, pair.server.qp, 5, &rx);
    assert_no_completion(s, &pair.server);
    assert!(bed.fabric.trace_text().contains("(no receive posted)"));
}

#[test]
fn multicast_reaches_both_joined_members_and_not_the_sender_without_a_receive() {
    for transport in [Transport::Roce, Transport::InfiniBand] {
        let bed = bed(8, transport);
        let (s, c) = (bed.server(), bed.client());
        let ips = (SimBed::SERVER_IP, SimBed::CLIENT_IP);
        let [_, _, sender] = multicast_reaches_every_member(s, c, ips, group(), b"to all");
        assert_no_completion(c, &sender.side);
    }
}

#[test]
fn a_multicast_sender_that_joined_with_a_receive_gets_its_own_datagram_and_a_non_member_none() {
    let bed = bed(9, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let len = GRH_LEN as usize + 32;
    let member = join(s, SocketAddr::new(SimBed::SERVER_IP, 0), group(), len);
    let sender = join(c, SocketAddr::new(SimBed::CLIENT_IP, 0), group(), len);
    let other = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 7, 7, 10)), 0);
    let stranger = join(s, SocketAddr::new(SimBed::SERVER_IP, 0), other, len);
    let ah = ok(
        c.create_ah(sender.side.pd, &sender.group.ah_attr),
        "create_ah",
    );
    let t0 = c.now();
    ud_send(
        c,
        &sender.side,
        2,
        dest(ah, &sender.group, sender.group.qkey),
        b"echo",
    );
    let mut got = [
        next_completion(c, &sender.side),
        next_completion(c, &sender.side),
    ];
    got.sort_by_key(|wc| wc.wr_id);
    assert_ud_sent(&got[1], &sender.side, 2, 4);
    let from = (1, sender.side.qpn, &sender.group.ah_attr);
    assert_ud_receive(c, &got[0], from, &sender.rx, b"echo");
    // The loopback copy never crosses the wire: it is taken before the send completes
    // (measured on rxe-6.1: a receive posted right after the send's completion never
    // catches it, one posted before always does).
    assert_eq!(
        c.now() - t0,
        Duration::ZERO,
        "the loopback copy is taken at once"
    );
    assert_ud_receive(
        s,
        &next_completion(s, &member.side),
        from,
        &member.rx,
        b"echo",
    );
    assert_no_completion(s, &stranger.side);
}

/// mckey's `-o`: a send-only full member's QP is not attached to the group (librdmacm
/// attaches none), so the group's datagrams, its own included, do not reach it; its sends
/// reach the members.
#[test]
fn a_send_only_member_reaches_the_group_and_gets_nothing_from_it() {
    let bed = bed(11, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let len = GRH_LEN as usize + 32;
    let member = join(s, SocketAddr::new(SimBed::SERVER_IP, 0), group(), len);
    let channel = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let sender = ud_side(c, channel, id);
    let rx = region(c, sender.pd, len, 0, LW);
    post_recv_all(c, sender.qp, 1, &rx);
    let only = JoinFlags::SendOnlyFullMember;
    ok(c.join_multicast_ex(id, group(), only, 7), "send-only join");
    let joined = ok(c.get_cm_event(channel, Wait::Timeout(SILENCE)), "event");
    let EventParam::Multicast { ud, .. } = *joined.param() else {
        panic!("{:?} instead of MULTICAST_JOIN", joined.kind());
    };
    ok(c.ack_cm_event(joined), "ack");
    let ah = ok(c.create_ah(sender.pd, &ud.ah_attr), "create_ah");
    let t0 = c.now();
    ud_send(c, &sender, 2, dest(ah, &ud, ud.qkey), b"one way");
    assert_ud_sent(&next_completion(c, &sender), &sender, 2, 7);
    let from = (1, sender.qpn, &ud.ah_attr);
    assert_ud_receive(
        s,
        &next_completion(s, &member.side),
        from,
        &member.rx,
        b"one way",
    );
    assert_eq!(s.now() - t0, 5 * US, "one wire latency");
    assert_no_completion(c, &sender);
}

#[test]
fn a_group_datagram_to_another_qpn_than_0xffffff_reaches_nobody() {
    let bed = bed(10, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let member = join(s, SocketAddr::new(SimBed::SERVER_IP, 0), group(), 128);
    let sender = join(c, SocketAddr::new(SimBed::CLIENT_IP, 0), group(), 0);
    let ah = ok(
        c.create_ah(sender.side.pd, &sender.group.ah_attr),
        "create_ah",
    );
    let mut to = dest(ah, &sender.group, sender.group.qkey);
    to.remote_qpn = member.side.qpn;
    ud_send(c, &sender.side, 2, to, b"astray");
    assert_ud_sent(&next_completion(c, &sender.side), &sender.side, 2, 6);
    assert_no_completion(s, &member.side);
}

#[test]
fn ud_misuse_is_refused_with_the_verbs_errnos() {
    let bed = bed(11, Transport::Roce);
    ud_misuse_is_refused(bed.server(), bed.client(), addr(7007));
}

#[test]
fn a_ud_destination_on_an_rc_qp_is_refused_with_einval() {
    let bed = bed(12, Transport::Roce);
    let conn = connect(bed.server(), bed.client(), addr(7008));
    a_ud_destination_on_an_rc_qp_is_refused(bed.client(), &conn.client);
}

#[test]
fn removing_the_device_flushes_a_ud_qps_receives() {
    let bed = bed(13, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(s, c, addr(7009), |side: &Side| {
        let mr = region(s, side.pd, 128, 0, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx.set(Some(mr));
    });
    bed.fabric.remove_device("server").expect("outside a run");
    let wc = next_completion(s, &pair.server);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WR_FLUSH_ERR));
}

#[test]
fn a_qp_made_to_block_its_own_multicast_loopback_gets_none_of_its_datagrams() {
    for transport in [Transport::Roce, Transport::InfiniBand] {
        let bed = bed(21, transport);
        let ips = (SimBed::SERVER_IP, SimBed::CLIENT_IP);
        a_qp_blocking_self_loopback_gets_none_of_its_own_group_datagrams(
            bed.server(),
            bed.client(),
            ips,
            group(),
            SelfLoopback::Blocked,
        );
        // One copy on the wire (to the member), none dropped at the sender for want of a
        // receive or taken there.
        let text = bed.fabric.trace_text();
        assert_eq!(text.matches("UD_SEND 9 bytes").count(), 2, "{text}");
    }
}

#[test]
fn blocking_self_loopback_is_refused_on_an_rc_qp_and_apart_from_ids() {
    let bed = bed(22, Transport::Roce);
    let c = bed.client();
    let ch = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(ch), 0, PortSpace::TCP), "RC id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let pd = ok(c.alloc_pd(id), "alloc_pd");
    let cq = ok(c.create_cq(id, 8, None), "create_cq");
    let mut attr = cmtwin::verbs::QpInitAttrEx::rc(pd, cq, cq);
    attr.block_self_multicast_loopback = true;
    for (made, call) in [
        (
            c.create_qp_ex(id, &attr).map(|_| ()),
            cmtwin::Call::CreateQpEx,
        ),
        (
            c.create_external_qp(&attr).map(|_| ()),
            cmtwin::Call::CreateExternalQp,
        ),
    ] {
        cmtwin_tests::steps::expect_errno(made, call, cmtwin::Errno::EINVAL);
    }
    attr.qp_type = cmtwin::QpType::Ud;
    cmtwin_tests::steps::expect_errno(
        c.create_external_qp(&attr),
        cmtwin::Call::CreateExternalQp,
        cmtwin::Errno::EINVAL,
    );
}

/// `create_ah_from_wc` checks its PD before it parses the header, as cmtwin-verbs does before
/// libibverbs parses: a deallocated PD with a header that is neither a GRH nor IPv4 is EBADF,
/// not the header's EINVAL (found by the random data-path sequences, seed 20261203); with a
/// live PD the same header is EINVAL.
#[test]
fn create_ah_from_wc_refuses_a_dead_pd_before_reading_the_header() {
    let bed = bed(23, Transport::Roce);
    let c = bed.client();
    let ch = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(ch), 0, PortSpace::UDP), "UD id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let wc = cmtwin::verbs::WorkCompletion {
        status: WcStatus::SUCCESS,
        opcode: cmtwin::verbs::WcOpcode::Recv,
        grh: true,
        ..Default::default()
    };
    let garbage = [0x5a; GRH_LEN as usize];
    let live = ok(c.alloc_pd(id), "alloc_pd");
    cmtwin_tests::steps::expect_errno(
        c.create_ah_from_wc(live, &wc, &garbage),
        cmtwin::Call::CreateAhFromWc,
        cmtwin::Errno::EINVAL,
    );
    let dead = ok(c.alloc_pd(id), "alloc_pd");
    ok(c.dealloc_pd(dead), "dealloc_pd");
    cmtwin_tests::steps::expect_errno(
        c.create_ah_from_wc(dead, &wc, &garbage),
        cmtwin::Call::CreateAhFromWc,
        cmtwin::Errno::EBADF,
    );
}

/// On InfiniBand a lost group (MULTICAST_ERROR -ENETRESET: a port error or the subnet
/// manager's reregistration) is gone from the subnet manager: the switches forward none of
/// its datagrams to the old members until they join again (CM-SEMANTICS §13.3). Before the
/// loss the group's datagram reached both members; after it, a send still completes but
/// reaches nobody. (Before, the simulator went on delivering; found by an outside user.)
#[test]
fn on_infiniband_a_lost_group_reaches_its_old_members_no_more() {
    let bed = bed(24, Transport::InfiniBand);
    let (s, c) = (bed.server(), bed.client());
    let ips = (SimBed::SERVER_IP, SimBed::CLIENT_IP);
    let [a, b, sender] = multicast_reaches_every_member(s, c, ips, group(), b"before");
    bed.fabric
        .multicast_lost(group().ip())
        .expect("not during a run");
    for m in [&a, &b] {
        post_recv_all(s, m.side.qp, 3, &m.rx);
        let lost =
            cmtwin_tests::steps::expect_event(s, m.side.channel, cmtwin::EventKind::MulticastError);
        assert_eq!(lost.status, -102, "ENETRESET");
    }
    let ah = ok(
        c.create_ah(sender.side.pd, &sender.group.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &sender.group, sender.group.qkey);
    ud_send(c, &sender.side, 4, to, b"after");
    assert_ud_sent(&next_completion(c, &sender.side), &sender.side, 4, 5);
    s.sleep(SILENCE).expect("sleep");
    for m in [&a, &b] {
        assert_no_completion(s, &m.side);
    }
}

/// §13.3: on RoCE the MULTICAST_JOIN's address handle is the one `cma_iboe_join_multicast`
/// builds its member record for (`cma_make_mc_event` → `ib_init_ah_from_mcmember`): the id's
/// TOS is not read (the record is zeroed: traffic class, flow label and SL 0), and the hop
/// limit of an IPv4 group on a RoCE v2 port is IPV6_DEFAULT_HOPLIMIT, 64. The group's
/// IPv4-mapped address is the destination GID.
#[test]
fn a_roce_multicast_join_takes_no_traffic_class_from_the_tos() {
    let bed = bed(14, Transport::Roce);
    let c = bed.client();
    let channel = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    ok(c.set_option(id, &cmtwin::CmOption::Tos(0x68)), "TOS 0x68");
    ok(c.join_multicast(id, group(), 7), "join_multicast");
    let joined = ok(c.get_cm_event(channel, Wait::Timeout(SILENCE)), "event");
    let EventParam::Multicast { ud, .. } = *joined.param() else {
        panic!("{:?} instead of MULTICAST_JOIN", joined.kind());
    };
    ok(c.ack_cm_event(joined), "ack");
    let grh = ud.ah_attr.grh;
    assert_eq!(
        (
            grh.traffic_class,
            grh.flow_label,
            grh.hop_limit,
            ud.ah_attr.sl
        ),
        (0, 0, 64, 0),
        "traffic class, flow label, hop limit and SL of the group's address handle"
    );
    let IpAddr::V4(v4) = group().ip() else {
        unreachable!("an IPv4 group")
    };
    assert_eq!(grh.dgid, v4.to_ipv6_mapped().octets(), "the group's GID");
    assert!(ud.ah_attr.is_global, "RoCE: a GRH");
    ok(c.destroy_id(id), "destroy_id");
    ok(c.destroy_event_channel(channel), "destroy channel");
}
