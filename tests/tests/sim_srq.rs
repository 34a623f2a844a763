//! Shared receive queues on the simulator: `cmtwin_tests::srq_datapath`'s scenarios (which
//! also run on rxe in the VM), with exact virtual times, the granted sizes of each transport,
//! resizing, and the golden order of consumption across QPs.
//!
//! Times: the wire's latency is 5 µs without jitter, so a send reaches the server 5 µs after
//! it is posted and its acknowledgement (or RNR NAK) is back 5 µs later.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{DataPath, SrqAttr, SrqAttrMask, WcOpcode, WcStatus};
use cmtwin::{AsyncEvent, Call, CmBackend, ConnParam, Errno, Transport};
use cmtwin_sim::SimConfig;
use cmtwin_tests::srq_datapath::{self as shared, connect_on_srq, post_slot, send, srq_server};
use cmtwin_tests::steps::{expect_errno, ok};
use cmtwin_tests::ud_datapath::next_completion;
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);
const LW: cmtwin::verbs::AccessFlags = cmtwin::verbs::AccessFlags::LOCAL_WRITE;

fn bed(seed: u64, transport: Transport) -> SimBed {
    SimBed::jitterless(seed, transport)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(SimBed::SERVER_IP, port)
}

#[test]
fn two_qps_take_the_srq_receives_in_posted_order() {
    let bed = bed(1, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let got = shared::two_qps_take_the_srq_receives_in_posted_order(s, c, [addr(7701), addr(7702)]);
    let lens: Vec<(u64, u32)> = got.iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(lens, [(100, 5), (101, 7), (102, 5)]);
    assert_eq!(got[0].qp_num, got[2].qp_num, "A's two messages on A's QP");
    assert_ne!(got[0].qp_num, got[1].qp_num, "B's on B's");
}

#[test]
fn a_receive_reaches_the_srq_one_latency_after_the_send_and_its_ack_one_later() {
    let bed = bed(2, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let srv = srq_server(s, addr(7711), &SrqAttr::new(4, 1), 2);
    post_slot(s, &srv, 1, 0);
    let conn = connect_on_srq(s, c, addr(7711), &srv, ConnParam::default());
    let t0 = c.now();
    let sent = send(c, &conn.client, 9, b"timed");
    assert_eq!((sent.status, c.now() - t0), (WcStatus::SUCCESS, 10 * US));
    let wc = next_completion(s, &conn.server);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id, wc.byte_len, wc.qp_num),
        (WcStatus::SUCCESS, WcOpcode::Recv, 1, 5, conn.server.qpn)
    );
}

#[test]
fn the_srq_limit_fires_once_when_receives_fall_below_it() {
    let bed = bed(3, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let armed = shared::the_srq_limit_fires_once_when_receives_fall_below_it(s, c, addr(7721));
    assert_eq!(armed, 3);
}

#[test]
fn a_qp_in_error_leaves_the_srq_receives_and_rxe_raises_no_last_wqe_reached() {
    let bed = bed(4, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let events = shared::a_qp_in_error_leaves_the_srq_receives(s, c, [addr(7731), addr(7732)]);
    assert_eq!(events, [], "rxe raises no IBV_EVENT_QP_LAST_WQE_REACHED");
}

/// The Linux 6.12 profile: rxe's responder raises IBV_EVENT_QP_LAST_WQE_REACHED once, for the
/// QP that entered ERROR (its `flush_recv_queue`; measured on rxe-6.12), and still flushes
/// none of the SRQ's receives.
#[test]
fn on_linux_6_12_rxe_raises_last_wqe_reached_for_the_qp_in_error() {
    let bed = SimBed::with_config(4, Transport::Roce, linux612());
    let (s, c) = (bed.server(), bed.client());
    let events = shared::a_qp_in_error_leaves_the_srq_receives(s, c, [addr(7733), addr(7734)]);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.srq)).collect();
    assert_eq!(kinds, [(AsyncEvent::QP_LAST_WQE_REACHED, None)]);
    assert!(events[0].qp_num.is_some() && events[0].id.is_some());
}

/// Simulated InfiniBand: the HCA raises IBV_EVENT_QP_LAST_WQE_REACHED once, for the QP of
/// the SRQ that entered ERROR (the IB specification's affiliated event; rxe 6.1 alone lacks
/// it), on every kernel profile, and flushes none of the SRQ's receives.
#[test]
fn an_infiniband_hca_raises_last_wqe_reached_for_the_qp_in_error() {
    let bed = bed(4, Transport::InfiniBand);
    let (s, c) = (bed.server(), bed.client());
    let events = shared::a_qp_in_error_leaves_the_srq_receives(s, c, [addr(7735), addr(7736)]);
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.srq)).collect();
    assert_eq!(kinds, [(AsyncEvent::QP_LAST_WQE_REACHED, None)]);
    let server_qpn = events[0].qp_num.expect("the QP's number");
    assert!(events[0].id.is_some() && server_qpn != 0);
}

/// The Linux 6.12 profile, without jitter.
fn linux612() -> SimConfig {
    SimConfig {
        wire_jitter: std::time::Duration::ZERO,
        ..SimConfig::linux612()
    }
}

#[test]
fn an_empty_srq_answers_rnr_and_the_sender_fails_at_once_without_rnr_retries() {
    let bed = bed(5, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let t0 = c.now();
    let wc = shared::an_empty_srq_answers_rnr(s, c, addr(7741));
    assert_eq!(wc.byte_len, 0);
    assert!(c.now() > t0);
}

#[test]
fn the_rnr_nak_of_an_empty_srq_comes_back_after_one_round_trip() {
    let bed = bed(6, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let srv = srq_server(s, addr(7751), &SrqAttr::new(4, 1), 1);
    let accept = ConnParam {
        rnr_retry_count: 0,
        ..ConnParam::default()
    };
    let conn = connect_on_srq(s, c, addr(7751), &srv, accept);
    let t0 = c.now();
    let wc = send(c, &conn.client, 3, b"x");
    assert_eq!(
        (wc.status, c.now() - t0),
        (WcStatus::RNR_RETRY_EXC_ERR, 10 * US)
    );
}

#[test]
fn rxe_writes_back_max_wr_as_asked_and_holds_the_power_of_two_above_minus_one() {
    let bed = bed(7, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let (granted, queried) = shared::srq_attributes_and_misuse(s, c, addr(7761));
    assert_eq!(granted, SrqAttr::new(10, 1));
    assert_eq!(queried, SrqAttr::new(15, 1));
}

/// rxe on Linux 6.12 writes back what it made (`rxe_srq_from_init`; measured on rxe-6.12).
#[test]
fn rxe_on_linux_6_12_writes_back_the_max_wr_it_made() {
    let bed = SimBed::with_config(7, Transport::Roce, linux612());
    let (s, c) = (bed.server(), bed.client());
    let (granted, queried) = shared::srq_attributes_and_misuse(s, c, addr(7762));
    assert_eq!(
        (granted, queried),
        (SrqAttr::new(15, 1), SrqAttr::new(15, 1))
    );
}

#[test]
fn siw_rounds_max_wr_up_to_a_power_of_two_and_refuses_a_limit_above_it() {
    let bed = bed(8, Transport::Iwarp);
    let (s, c) = (bed.server(), bed.client());
    let (granted, queried) = shared::srq_attributes_and_misuse(s, c, addr(7771));
    assert_eq!(
        (granted, queried),
        (SrqAttr::new(16, 1), SrqAttr::new(16, 1))
    );
    let srv = srq_server(s, addr(7772), &SrqAttr::new(4, 1), 1);
    let over = SrqAttr {
        srq_limit: 5,
        ..SrqAttr::new(4, 1)
    };
    let e = s.create_srq(srv.objects.pd, &over);
    expect_errno(e, Call::CreateSrq, Errno::EINVAL);
    let e = s.modify_srq(srv.srq, &SrqAttr::new(64, 1), SrqAttrMask::MAX_WR);
    expect_errno(e, Call::ModifySrq, Errno::EOPNOTSUPP);
}

#[test]
fn rxe_resizes_an_srq_keeping_its_receives_and_refuses_one_below_them() {
    let bed = bed(9, Transport::Roce);
    let s = bed.server();
    let srv = srq_server(s, addr(7781), &SrqAttr::new(8, 1), 1);
    for i in 0..8 {
        post_slot(s, &srv, i, 0);
    }
    let bigger = SrqAttr::new(100, 1);
    ok(
        s.modify_srq(srv.srq, &bigger, SrqAttrMask::MAX_WR),
        "resize",
    );
    assert_eq!(ok(s.query_srq(srv.srq), "query_srq").max_wr, 127);
    let smaller = SrqAttr::new(3, 1);
    let e = s.modify_srq(srv.srq, &smaller, SrqAttrMask::MAX_WR);
    expect_errno(e, Call::ModifySrq, Errno::EINVAL);
    let armed = SrqAttr {
        srq_limit: 20,
        ..SrqAttr::default()
    };
    ok(s.modify_srq(srv.srq, &armed, SrqAttrMask::LIMIT), "arm");
    let below_limit = SrqAttr::new(10, 1);
    let e = s.modify_srq(srv.srq, &below_limit, SrqAttrMask::MAX_WR);
    expect_errno(e, Call::ModifySrq, Errno::EINVAL);
    let q = ok(s.query_srq(srv.srq), "query_srq");
    assert_eq!((q.max_wr, q.srq_limit), (127, 20));
}

#[test]
fn an_id_srq_takes_the_ids_receives_through_post_recv_msg() {
    let bed = bed(10, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    shared::an_id_srq_takes_the_ids_receives(s, c, addr(7791));
}

#[test]
fn an_armed_limit_already_above_the_posted_receives_fires_only_when_a_message_takes_one() {
    let bed = bed(11, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let srv = srq_server(s, addr(7795), &SrqAttr::new(8, 1), 2);
    post_slot(s, &srv, 1, 0);
    post_slot(s, &srv, 2, 1);
    let armed = SrqAttr {
        srq_limit: 5,
        ..SrqAttr::default()
    };
    ok(s.modify_srq(srv.srq, &armed, SrqAttrMask::LIMIT), "arm");
    assert_eq!(shared::srq_events(s), [], "nothing at arming");
    let conn = connect_on_srq(s, c, addr(7795), &srv, ConnParam::default());
    send(c, &conn.client, 1, b"one");
    next_completion(s, &conn.server);
    let events = shared::srq_events(s);
    let kinds: Vec<AsyncEvent> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [AsyncEvent::SRQ_LIMIT_REACHED]);
}

#[test]
fn a_ud_qp_takes_its_datagrams_from_an_srq_with_the_grh_space_and_src_qp() {
    use cmtwin::verbs::{QpAttr, QpInitAttrEx, QpState, RecvWr, UdDest, GRH_LEN};
    use cmtwin_tests::ud_datapath::{ud_connect, ud_send};
    let bed = bed(12, Transport::Roce);
    let (s, c) = (bed.server(), bed.client());
    let pair = ud_connect(s, c, addr(7799), |_| {});
    let pd = pair.server.pd;
    let (srq, _) = ok(s.create_srq(pd, &SrqAttr::new(4, 1)), "create_srq");
    let rx = cmtwin_tests::datapath::region(s, pd, GRH_LEN as usize + 16, 0, LW);
    let sge = [rx.sge(0, rx.length as u32)];
    let wr = RecvWr {
        wr_id: 1,
        sg_list: &sge,
    };
    ok(s.post_srq_recv(srq, &wr), "post_srq_recv");
    let mut attr = QpInitAttrEx::rc(pd, pair.server.cq, pair.server.cq);
    attr.qp_type = cmtwin::QpType::Ud;
    attr.srq = Some(srq);
    let qp = ok(s.create_external_qp(&attr), "create_external_qp (UD, SRQ)");
    let qpn = ok(s.qp_number(qp), "qp_number");
    let init = ok(
        s.init_qp_attr(pair.server.id, QpState::Init),
        "init_qp_attr",
    );
    ok(s.modify_qp(qp, &init), "INIT");
    for state in [QpState::Rtr, QpState::Rts] {
        let to = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        ok(s.modify_qp(qp, &to), "RTR, RTS");
    }
    expect_errno(s.post_recv(qp, &wr), Call::PostRecv, Errno::EINVAL);
    let ah = ok(
        c.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let dest = UdDest {
        ah,
        remote_qpn: qpn,
        remote_qkey: cmtwin::RDMA_UDP_QKEY,
    };
    let t0 = c.now();
    ud_send(c, &pair.client, 2, dest, b"via srq");
    let wc = next_completion(s, &pair.server);
    assert_eq!(
        (wc.status, wc.wr_id, wc.qp_num, wc.src_qp, wc.byte_len),
        (WcStatus::SUCCESS, 1, qpn, pair.client.qpn, GRH_LEN + 7)
    );
    assert_eq!(s.now() - t0, 5 * US, "one latency");
    expect_errno(s.destroy_srq(srq), Call::DestroySrq, Errno::EBUSY);
    ok(s.destroy_external_qp(qp), "destroy_external_qp");
    ok(s.destroy_srq(srq), "destroy_srq");
}

/// A UD QP made on an SRQ and moved to RTS with the UD id's attributes, then to ERROR: the
/// SRQ events that follow, and the QP's number.
fn ud_qp_of_an_srq_enters_error(
    bed: &SimBed,
    port: u16,
) -> (Vec<cmtwin::verbs::VerbsAsyncEvent>, u32) {
    use cmtwin::verbs::{QpAttr, QpInitAttrEx, QpState};
    use cmtwin_tests::ud_datapath::ud_connect;
    let (s, c) = (bed.server(), bed.client());
    let pair = ud_connect(s, c, addr(port), |_| {});
    let pd = pair.server.pd;
    let (srq, _) = ok(s.create_srq(pd, &SrqAttr::new(4, 1)), "create_srq");
    let mut attr = QpInitAttrEx::rc(pd, pair.server.cq, pair.server.cq);
    attr.qp_type = cmtwin::QpType::Ud;
    attr.srq = Some(srq);
    let qp = ok(s.create_external_qp(&attr), "create_external_qp (UD, SRQ)");
    let init = ok(
        s.init_qp_attr(pair.server.id, QpState::Init),
        "init_qp_attr",
    );
    ok(s.modify_qp(qp, &init), "INIT");
    for state in [QpState::Rtr, QpState::Rts, QpState::Error] {
        let to = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        ok(s.modify_qp(qp, &to), "RTR, RTS, ERROR");
    }
    (shared::srq_events(s), ok(s.qp_number(qp), "qp_number"))
}

/// A UD QP of an SRQ entering ERROR raises IBV_EVENT_QP_LAST_WQE_REACHED as an RC one does:
/// rxe 6.12's responder flushes every QP type's receive side the same way (`rxe_receiver`,
/// `flush_recv_queue`: read, not measured for UD), an InfiniBand HCA by the specification;
/// rxe 6.1 raises none.
#[test]
fn a_ud_qp_of_an_srq_raises_last_wqe_reached_where_an_rc_one_does() {
    let roce_6_1 = SimBed::jitterless(13, Transport::Roce);
    let (events, _) = ud_qp_of_an_srq_enters_error(&roce_6_1, 7801);
    assert_eq!(events, []);
    let roce_6_12 = SimBed::with_config(13, Transport::Roce, linux612());
    let ib = SimBed::jitterless(13, Transport::InfiniBand);
    for bed in [roce_6_12, ib] {
        let (events, qpn) = ud_qp_of_an_srq_enters_error(&bed, 7802);
        let seen: Vec<_> = events.iter().map(|e| (e.kind, e.qp_num, e.srq)).collect();
        assert_eq!(seen, [(AsyncEvent::QP_LAST_WQE_REACHED, Some(qpn), None)]);
    }
}
