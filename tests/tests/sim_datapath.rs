//! The verbs data path on the simulator: every completion status with exact virtual times,
//! sends with immediate data and inline, RDMA write and read with good and bad keys, CQs shared
//! by QPs with a completion channel and arming, flushes when the QP enters ERROR, RNR and
//! transport retries, COMM_EST and `notify` in both orders, memory that cannot be freed while
//! the device may touch it, and a seed that replays byte for byte. UC QPs: the same sends
//! and writes, completed as soon as they are sent, never retried or acknowledged, dropped
//! silently by a receiver that cannot take them; an RDMA read fails LOC_QP_OP_ERR.
//!
//! Times: the fabric's wire latency is 5 µs without jitter, so a request reaches the peer 5 µs
//! after it is posted and its acknowledgement comes back 5 µs later. The default path (PLT 18,
//! ACK delay 15) gives QPs a timeout exponent of 19: 4.096 µs × 2^19 = 2.147483648 s per
//! transport retry; the CM programs the RNR timer 0, 655.36 ms.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpAttr, QpAttrMask, QpInitAttrEx, QpState,
    RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use cmtwin::{
    AsyncEvent, Call, CmBackend, CmError, ConnParam, CqHandle, Errno, EventKind, PdHandle,
    PortSpace, QpCap, QpHandle, QpInitAttr, QpType, Transport, Wait,
};
use cmtwin_sim::{KernelProfile, MessageKind, SimBackend, SimConfig};
use cmtwin_tests::datapath::{
    connect, connect_with, drain, next_completion, post_recv_all, region, start_connection, Conn,
    Objects, Setup, Side,
};
use cmtwin_tests::steps::{expect_errno, expect_event_for, expect_no_event, ok};
use cmtwin_tests::{SimBed, TestBed};

const US: Duration = Duration::from_micros(1);
/// One transport timeout of the default path.
const RETRY: Duration = Duration::from_nanos(2_147_483_648);
/// The RNR timer the CM programs.
const RNR: Duration = Duration::from_micros(655_360);
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// A RoCE bed whose wire has no jitter, so that times are exact sums of latencies.
fn bed(seed: u64) -> SimBed {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    SimBed::with_config(seed, Transport::Roce, config)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), port)
}

/// Posts receives of all of `rx` on `qp` until it holds `depth`, then checks that one more
/// is refused as a full queue (ENOMEM).
fn expect_receive_queue_holds(cm: &SimBackend, qp: QpHandle, rx: &MemoryRegion, depth: u64) {
    for wr_id in 1..=depth {
        post_recv_all(cm, qp, wr_id, rx);
    }
    let sge = [rx.sge(0, rx.length as u32)];
    let one_more = RecvWr {
        wr_id: depth + 1,
        sg_list: &sge,
    };
    expect_errno(cm.post_recv(qp, &one_more), Call::PostRecv, Errno::ENOMEM);
}

/// A connection on `bed` with default parameters.
fn connected(bed: &SimBed) -> Conn {
    connect(bed.server(), bed.client(), addr(7471))
}

/// Sends `data` from a fresh region of `side` (wr_id `wr_id`, operation `op`).
fn send_bytes(cm: &SimBackend, side: &Side, wr_id: u64, op: SendOp, data: &[u8]) {
    let mr = ok(
        cm.reg_mr(side.pd, data.to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, data.len() as u32)];
    ok(
        cm.post_send(side.qp, &SendWr::new(wr_id, op, Payload::Sges(&sge))),
        "post_send",
    );
}

/// Asserts a completion's fields (and that it is for `side`'s QP).
/// Both QPs of `conn` are in ERROR.
fn assert_both_in_error(conn: &Conn, s: &SimBackend, c: &SimBackend) {
    assert_eq!(
        ok(s.query_qp_state(conn.server.qp), "query"),
        QpState::Error
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
}

fn assert_wc(wc: WorkCompletion, side: &Side, wr_id: u64, status: WcStatus, opcode: WcOpcode) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.qp_num),
        (wr_id, status, side.qpn),
        "completion {wc:?}"
    );
    if status == WcStatus::SUCCESS {
        assert_eq!(wc.opcode, opcode, "completion {wc:?}");
    }
}

#[test]
fn a_send_with_immediate_data_reaches_the_posted_receive_and_is_acknowledged() {
    let bed = bed(1);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 64, 0, LW);
    post_recv_all(s, conn.server.qp, 10, &rx);
    let t0 = c.now();
    send_bytes(
        c,
        &conn.client,
        20,
        SendOp::SendWithImm(0xfeed),
        b"hello, server",
    );

    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US, "the send arrives after one latency");
    assert_wc(wc, &conn.server, 10, WcStatus::SUCCESS, WcOpcode::Recv);
    assert_eq!((wc.byte_len, wc.imm), (13, Some(0xfeed)));
    let mut got = [0u8; 13];
    ok(s.mr_read(rx.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"hello, server");

    let wc = next_completion(c, &conn.client);
    assert_eq!(
        c.now() - t0,
        10 * US,
        "the ACK comes back after a round trip"
    );
    assert_wc(wc, &conn.client, 20, WcStatus::SUCCESS, WcOpcode::Send);
    assert_eq!((wc.byte_len, wc.imm), (13, None));
}

#[test]
fn inline_sends_need_no_region_and_are_bounded_by_max_inline_data() {
    let bed = bed(2);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        cap: QpCap {
            max_inline_data: 16,
            ..QpCap::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7472), &setup);
    let rx = region(s, conn.server.pd, 32, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    let wr = SendWr::new(2, SendOp::Send, Payload::Inline(b"inline bytes"));
    ok(c.post_send(conn.client.qp, &wr), "inline send");
    let wc = next_completion(s, &conn.server);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::SUCCESS, 12));
    let too_long = SendWr::new(3, SendOp::Send, Payload::Inline(&[0u8; 17]));
    expect_errno(
        c.post_send(conn.client.qp, &too_long),
        Call::PostSend,
        Errno::EINVAL,
    );
    let read = SendWr::new(
        4,
        SendOp::RdmaRead {
            remote_addr: rx.addr,
            rkey: rx.rkey,
        },
        Payload::Inline(b"x"),
    );
    expect_errno(
        c.post_send(conn.client.qp, &read),
        Call::PostSend,
        Errno::EINVAL,
    );
}

#[test]
fn rdma_write_with_and_without_immediate_data_lands_in_the_peer_region() {
    let bed = bed(3);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let target = region(s, conn.server.pd, 32, 0, LW | AccessFlags::REMOTE_WRITE);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 7, &rx);
    let t0 = c.now();
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr_at(4),
        rkey: target.rkey,
    };
    send_bytes(c, &conn.client, 1, op, b"abcd");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 10 * US);
    assert_wc(wc, &conn.client, 1, WcStatus::SUCCESS, WcOpcode::RdmaWrite);
    assert!(
        drain(s, &conn.server).is_empty(),
        "a plain write consumes no receive"
    );
    let mut got = [0u8; 10];
    ok(s.mr_read(target.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"\0\0\0\0abcd\0\0");

    let op = SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.rkey,
        imm: 42,
    };
    send_bytes(c, &conn.client, 2, op, b"xy");
    let wc = next_completion(s, &conn.server);
    assert_wc(
        wc,
        &conn.server,
        7,
        WcStatus::SUCCESS,
        WcOpcode::RecvRdmaWithImm,
    );
    assert_eq!((wc.byte_len, wc.imm), (2, Some(42)));
    ok(s.mr_read(target.handle, 0, &mut got[..2]), "mr_read");
    assert_eq!(&got[..2], b"xy");
}

#[test]
fn rdma_read_fetches_the_peer_bytes_and_a_bad_rkey_is_a_remote_access_error() {
    let bed = bed(4);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let source = ok(
        s.reg_mr(
            conn.server.pd,
            b"0123456789".to_vec(),
            AccessFlags::REMOTE_READ,
        ),
        "reg_mr",
    );
    let sink = region(c, conn.client.pd, 4, b'.', LW);
    let sge = [sink.sge(0, 4)];
    let read = |wr_id, remote_addr, rkey| {
        SendWr::new(
            wr_id,
            SendOp::RdmaRead { remote_addr, rkey },
            Payload::Sges(&sge),
        )
    };
    let t0 = c.now();
    ok(
        c.post_send(conn.client.qp, &read(1, source.addr_at(3), source.rkey)),
        "read",
    );
    let wc = next_completion(c, &conn.client);
    assert_eq!(
        c.now() - t0,
        10 * US,
        "the response comes back after a round trip"
    );
    assert_wc(wc, &conn.client, 1, WcStatus::SUCCESS, WcOpcode::RdmaRead);
    assert_eq!(wc.byte_len, 4);
    let mut got = [0u8; 4];
    ok(c.mr_read(sink.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"3456");

    // Past the region's end: the responder refuses it, both QPs enter ERROR.
    let t1 = c.now();
    ok(
        c.post_send(conn.client.qp, &read(2, source.addr_at(8), source.rkey)),
        "read",
    );
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t1, 10 * US);
    assert_wc(
        wc,
        &conn.client,
        2,
        WcStatus::REM_ACCESS_ERR,
        WcOpcode::RdmaRead,
    );
    assert_both_in_error(&conn, s, c);
}

#[test]
fn rdma_write_to_a_bad_rkey_is_refused_and_flushes_the_responder() {
    let bed = bed(5);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let target = region(s, conn.server.pd, 16, 0, LW | AccessFlags::REMOTE_WRITE);
    let rx = region(s, conn.server.pd, 16, 0, LW);
    post_recv_all(s, conn.server.qp, 9, &rx);
    let t0 = c.now();
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr,
        rkey: target.rkey ^ 0x5a5a,
    };
    send_bytes(c, &conn.client, 1, op, b"nope");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 10 * US);
    assert_wc(
        wc,
        &conn.client,
        1,
        WcStatus::REM_ACCESS_ERR,
        WcOpcode::RdmaWrite,
    );
    // The responder entered ERROR as it refused: its receive was flushed then (at 5 µs).
    let wc = next_completion(s, &conn.server);
    assert_wc(wc, &conn.server, 9, WcStatus::WR_FLUSH_ERR, WcOpcode::Recv);
    let mut got = [1u8; 4];
    ok(s.mr_read(target.handle, 0, &mut got), "mr_read");
    assert_eq!(got, [0; 4], "nothing was written");
    // A region without REMOTE_WRITE refuses writes the same way.
    let bed = self::bed(6);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let readonly = region(s, conn.server.pd, 16, 0, AccessFlags::REMOTE_READ);
    let op = SendOp::RdmaWrite {
        remote_addr: readonly.addr,
        rkey: readonly.rkey,
    };
    send_bytes(c, &conn.client, 1, op, b"nope");
    assert_eq!(
        next_completion(c, &conn.client).status,
        WcStatus::REM_ACCESS_ERR
    );
}

/// A connection whose passive side accepted with no responder resources: the REP's 0 is the
/// active QP's initiator depth (`max_rd_atomic` 0, measured on rxe-6.1 and 6.12), so rxe's
/// requester never sends a read (`check_init_depth`) and it never completes; the write
/// before it goes through. Returns the bed, the connection and when the read was posted.
fn read_behind_no_initiator_depth(kernel: KernelProfile, seed: u64) -> (SimBed, Conn, Duration) {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::for_kernel(kernel)
    };
    let bed = SimBed::with_config(seed, Transport::Roce, config);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        accept: ConnParam {
            responder_resources: 0,
            ..ConnParam::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7521), &setup);
    let target = region(s, conn.server.pd, 8, 0, LW | AccessFlags::REMOTE_WRITE);
    let t0 = c.now();
    let write = SendOp::RdmaWrite {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    send_bytes(c, &conn.client, 1, write, b"written!");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 10 * US, "the write is acknowledged");
    assert_wc(wc, &conn.client, 1, WcStatus::SUCCESS, WcOpcode::RdmaWrite);
    let acknowledged = c.now();
    (bed, conn, acknowledged)
}

/// The read the active side of such a connection posts, of an 8-byte region of the server
/// that allows it, into `sink`.
fn post_read(bed: &SimBed, conn: &Conn, sink: &MemoryRegion) {
    let (s, c) = (bed.server(), bed.client());
    let source = region(s, conn.server.pd, 8, b'r', AccessFlags::REMOTE_READ);
    let sge = [sink.sge(0, 8)];
    let op = SendOp::RdmaRead {
        remote_addr: source.addr,
        rkey: source.rkey,
    };
    ok(
        c.post_send(conn.client.qp, &SendWr::new(2, op, Payload::Sges(&sge))),
        "read",
    );
}

/// The active QP of a connection accepted with `responder_resources` 0 has initiator depth
/// 0: its read never leaves and a wait for its completion is a deadlock (a real program waits
/// for ever: measured on rxe-6.1 and 6.12, no completion in 0.3 s, both QPs still in RTS).
/// On 6.1 the depth cannot be raised in RTS (RTS to RTS takes no `max_rd_atomic`: EINVAL,
/// measured).
#[test]
fn a_read_from_a_qp_whose_peer_accepted_without_responder_resources_never_leaves() {
    for (kernel, seed) in [(KernelProfile::Linux61, 41), (KernelProfile::Linux612, 44)] {
        let (bed, conn, t1) = read_behind_no_initiator_depth(kernel, seed);
        let (s, c) = (bed.server(), bed.client());
        let sink = region(c, conn.client.pd, 8, b'.', LW);
        post_read(&bed, &conn, &sink);
        expect_deadlock_on_the_completion(&bed, &conn, t1);
        let mut got = [0u8; 8];
        ok(c.mr_read(sink.handle, 0, &mut got), "mr_read");
        assert_eq!(&got, b"........", "nothing was read");
        assert_eq!(ok(s.query_qp_state(conn.server.qp), "query"), QpState::Rts);
        assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
    }
    let (bed, conn, _) = read_behind_no_initiator_depth(KernelProfile::Linux61, 45);
    let depth = QpAttr {
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    expect_errno(
        bed.client()
            .modify_qp_with_mask(conn.client.qp, &depth, QpAttrMask::MAX_QP_RD_ATOMIC),
        Call::ModifyQp,
        Errno::EINVAL,
    );
}

/// rxe's responder checks the QP's own rights before any region's (`check_op_valid`, then
/// `check_resource`): a READ reaching a QP that has no responder resources is refused with
/// an invalid-request NAK, which the requester completes REM_INV_REQ_ERR a round trip later;
/// both QPs enter ERROR (the responder's receive flushed as it refused). The region allows
/// the read: only the QP refuses it. Measured on rxe-6.12, where the active side's initiator
/// depth can be raised in RTS (rxe 6.12 consults no transition table without a state).
#[test]
fn an_rdma_read_to_a_qp_without_responder_resources_is_an_invalid_request() {
    let (bed, conn, _) = read_behind_no_initiator_depth(KernelProfile::Linux612, 46);
    let (s, c) = (bed.server(), bed.client());
    let depth = QpAttr {
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    ok(
        c.modify_qp_with_mask(conn.client.qp, &depth, QpAttrMask::MAX_QP_RD_ATOMIC),
        "modify_qp",
    );
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 9, &rx);
    let sink = region(c, conn.client.pd, 8, b'.', LW);
    let t1 = c.now();
    post_read(&bed, &conn, &sink);
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t1, 10 * US);
    assert_wc(
        wc,
        &conn.client,
        2,
        WcStatus::REM_INV_REQ_ERR,
        WcOpcode::RdmaRead,
    );
    let wc = next_completion(s, &conn.server);
    assert_wc(wc, &conn.server, 9, WcStatus::WR_FLUSH_ERR, WcOpcode::Recv);
    let mut got = [0u8; 8];
    ok(c.mr_read(sink.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"........", "nothing was read");
    assert_both_in_error(&conn, s, c);
}

/// An external QP moved to INIT with access flags 0 (and on to RTS with the CM's attributes)
/// refuses an RDMA WRITE into a region that allows it: an invalid-request NAK, the
/// requester's REM_INV_REQ_ERR a round trip later, both QPs in ERROR, nothing written (rxe's
/// `check_op_valid`). A write with immediate data is refused the same way before it
/// consumes the receive posted for it (flushed as the responder enters ERROR, at 5 µs).
#[test]
fn an_rdma_write_to_an_external_qp_without_remote_write_is_an_invalid_request() {
    for (seed, port, imm) in [(42, 7522, None), (43, 7523, Some(7))] {
        let bed = bed(seed);
        let (s, c) = (bed.server(), bed.client());
        let ((spd, scq, sqp), (cpd, ccq, cqp)) = external_pair_without_access(&bed, port);
        let target = region(s, spd, 8, 0, LW | AccessFlags::REMOTE_WRITE);
        let rx = region(s, spd, 8, 0, LW);
        post_recv_all(s, sqp, 9, &rx);
        let (remote_addr, rkey) = (target.addr, target.rkey);
        let write = match imm {
            None => SendOp::RdmaWrite { remote_addr, rkey },
            Some(imm) => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
        };
        let tx = ok(c.reg_mr(cpd, b"nope".to_vec(), AccessFlags::NONE), "reg_mr");
        let sge = [tx.sge(0, 4)];
        ok(
            c.post_send(cqp, &SendWr::new(1, write, Payload::Sges(&sge))),
            "post_send",
        );
        let mut wc = [WorkCompletion::default()];
        ok(s.sleep(5 * US), "sleep");
        assert_eq!(ok(s.poll_cq(scq, &mut wc), "poll"), 1, "flushed at 5 µs");
        assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::WR_FLUSH_ERR));
        assert_eq!(
            ok(c.poll_cq(ccq, &mut wc), "poll"),
            0,
            "the NAK is on its way"
        );
        ok(c.sleep(5 * US), "sleep");
        assert_eq!(ok(c.poll_cq(ccq, &mut wc), "poll"), 1, "the NAK at 10 µs");
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::REM_INV_REQ_ERR));
        let mut got = [1u8; 4];
        ok(s.mr_read(target.handle, 0, &mut got), "mr_read");
        assert_eq!(got, [0; 4], "nothing was written");
        assert_eq!(ok(s.query_qp_state(sqp), "query"), QpState::Error);
        assert_eq!(ok(c.query_qp_state(cqp), "query"), QpState::Error);
    }
}

/// An external QP with its PD and its one CQ.
type External = (PdHandle, CqHandle, QpHandle);

/// Two external QPs (the server's, then the client's) connected through ids and driven by
/// `rdma_init_qp_attr`, except that the server's is moved to INIT with access flags 0 where
/// the CM gives remote write, read and atomics.
fn external_pair_without_access(bed: &SimBed, port: u16) -> (External, External) {
    let (s, c) = (bed.server(), bed.client());
    let lch = ok(s.create_event_channel(), "channel");
    let lid = ok(s.create_id(Some(lch), 0, PortSpace::TCP), "listener");
    ok(s.bind_addr(lid, addr(port)), "bind");
    ok(s.listen(lid, 1), "listen");
    let cch = ok(c.create_event_channel(), "channel");
    let cid = ok(c.create_id(Some(cch), 0, PortSpace::TCP), "id");
    let two_s = Duration::from_secs(2);
    ok(c.resolve_addr(cid, None, addr(port), two_s), "resolve_addr");
    expect_event_for(c, cch, EventKind::AddrResolved, cid, 0);
    ok(c.resolve_route(cid, two_s), "resolve_route");
    expect_event_for(c, cch, EventKind::RouteResolved, cid, 0);
    let external = |cm: &SimBackend, id| {
        let pd = ok(cm.alloc_pd(id), "alloc_pd");
        let cq = ok(cm.create_cq(id, 16, None), "create_cq");
        let qp = ok(
            cm.create_external_qp(&QpInitAttrEx::rc(pd, cq, cq)),
            "ibv_create_qp",
        );
        (pd, cq, qp)
    };
    let client = external(c, cid);
    let with_qp = |qp| ConnParam {
        qp_num: qp,
        ..ConnParam::default()
    };
    ok(
        c.connect(cid, Some(&with_qp(ok(c.qp_number(client.2), "qp_num")))),
        "connect",
    );
    let request = ok(s.get_cm_event(lch, Wait::Block), "request");
    assert_eq!(request.kind(), EventKind::ConnectRequest);
    let sid = request.id();
    ok(s.ack_cm_event(request), "ack");
    let server = external(s, sid);
    let move_to = |cm: &SimBackend, id, qp, state, access: Option<AccessFlags>| {
        let mut attr = ok(cm.init_qp_attr(id, state), "init_qp_attr");
        if let Some(access) = access {
            let all =
                AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
            assert_eq!(attr.access, all, "the CM's");
            attr.access = access;
        }
        ok(cm.modify_qp(qp, &attr), "modify_qp");
    };
    move_to(s, sid, server.2, QpState::Init, Some(AccessFlags::NONE));
    move_to(s, sid, server.2, QpState::Rtr, None);
    move_to(s, sid, server.2, QpState::Rts, None);
    ok(
        s.accept(sid, Some(&with_qp(ok(s.qp_number(server.2), "qp_num")))),
        "accept",
    );
    expect_event_for(c, cch, EventKind::ConnectResponse, cid, 0);
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        move_to(c, cid, client.2, state, None);
    }
    ok(c.establish(cid), "establish");
    expect_event_for(s, lch, EventKind::Established, sid, 0);
    (server, client)
}

#[test]
fn zero_length_rdma_reads_and_writes_name_no_memory_and_succeed_whatever_their_key() {
    // IBA C9-88: a zero-length RDMA read or write is not checked against its rkey or
    // address (rxe's check_rkey executes it at once; siw_proc_write returns early for a
    // zero-length write, siw_check_sgl_tx skips a zero-length entry).
    let bed = bed(5);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let nowhere = (0xdead_0000_u64, 0x00de_ad00_u32);
    let ops = [
        SendOp::RdmaWrite {
            remote_addr: nowhere.0,
            rkey: nowhere.1,
        },
        SendOp::RdmaRead {
            remote_addr: nowhere.0,
            rkey: nowhere.1,
        },
    ];
    for (wr_id, op) in (1..).zip(ops) {
        let t0 = c.now();
        ok(
            c.post_send(conn.client.qp, &SendWr::new(wr_id, op, Payload::Sges(&[]))),
            "post_send",
        );
        let wc = next_completion(c, &conn.client);
        assert_eq!(c.now() - t0, 10 * US, "acknowledged after a round trip");
        let opcode = match op {
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            _ => WcOpcode::RdmaWrite,
        };
        assert_wc(wc, &conn.client, wr_id, WcStatus::SUCCESS, opcode);
        assert_eq!(wc.byte_len, 0);
    }
    assert_both_ready(&conn, s, c);
}

/// A 9-byte send into a receive of 8 on `transport`: the receive's and the send's statuses,
/// each at its exact time, both QPs ending in ERROR.
fn longer_than_the_receive(transport: Transport, recv: WcStatus, send: WcStatus) {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    let bed = SimBed::with_config(7, transport, config);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    let t0 = c.now();
    send_bytes(c, &conn.client, 2, SendOp::Send, &[7u8; 9]);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US);
    assert_wc(wc, &conn.server, 1, recv, WcOpcode::Recv);
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 10 * US);
    assert_wc(wc, &conn.client, 2, send, WcOpcode::Send);
    assert_both_in_error(&conn, s, c);
}

#[test]
fn a_message_longer_than_the_receive_is_a_local_length_error_there() {
    // An InfiniBand HCA by the specification: class C, an invalid-request NAK.
    longer_than_the_receive(
        Transport::InfiniBand,
        WcStatus::LOC_LEN_ERR,
        WcStatus::REM_INV_REQ_ERR,
    );
}

#[test]
fn a_message_longer_than_the_receive_is_a_local_qp_operation_error_on_rxe() {
    // rxe (6.1 and 6.12) finds it as it copies: a malformed receive (class A), answered by a
    // remote-operational-error NAK.
    longer_than_the_receive(
        Transport::Roce,
        WcStatus::LOC_QP_OP_ERR,
        WcStatus::REM_OP_ERR,
    );
}

#[test]
fn a_bad_lkey_is_a_local_protection_error_and_flushes_what_follows() {
    let bed = bed(8);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let mr = region(c, conn.client.pd, 8, 1, AccessFlags::NONE);
    let bad = [Sge {
        addr: mr.addr,
        length: 8,
        lkey: mr.lkey + 1000,
    }];
    let good = [mr.sge(0, 8)];
    let t0 = c.now();
    ok(
        c.post_send(
            conn.client.qp,
            &SendWr::new(1, SendOp::Send, Payload::Sges(&bad)),
        ),
        "post",
    );
    ok(
        c.post_send(
            conn.client.qp,
            &SendWr::new(2, SendOp::Send, Payload::Sges(&good)),
        ),
        "post",
    );
    let wcs = drain(c, &conn.client);
    assert_eq!(
        c.now(),
        t0,
        "found when the device takes the request, at once"
    );
    assert_eq!(wcs.len(), 2);
    assert_wc(
        wcs[0],
        &conn.client,
        1,
        WcStatus::LOC_PROT_ERR,
        WcOpcode::Send,
    );
    assert_wc(
        wcs[1],
        &conn.client,
        2,
        WcStatus::WR_FLUSH_ERR,
        WcOpcode::Send,
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    assert!(
        drain(s, &conn.server).is_empty(),
        "nothing reached the server"
    );

    // Bytes past the region's end are the same error.
    let bed = self::bed(9);
    let c = bed.client();
    let conn = connect(bed.server(), c, addr(7479));
    let mr = region(c, conn.client.pd, 8, 1, AccessFlags::NONE);
    let outside = [mr.sge(4, 8)];
    let wr = SendWr::new(1, SendOp::Send, Payload::Sges(&outside));
    ok(c.post_send(conn.client.qp, &wr), "post");
    assert_eq!(
        next_completion(c, &conn.client).status,
        WcStatus::LOC_PROT_ERR
    );
}

#[test]
fn a_receive_with_a_bad_lkey_fails_there_and_the_sender_sees_a_remote_operation_error() {
    let bed = bed(10);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let readonly = region(s, conn.server.pd, 8, 0, AccessFlags::NONE);
    post_recv_all(s, conn.server.qp, 1, &readonly);
    send_bytes(c, &conn.client, 2, SendOp::Send, b"data");
    // rxe's copy_data finds no region it may write under the key (lookup_mr: EINVAL): a
    // malformed receive, LOC_QP_OP_ERR (an InfiniBand HCA: LOC_PROT_ERR).
    assert_wc(
        next_completion(s, &conn.server),
        &conn.server,
        1,
        WcStatus::LOC_QP_OP_ERR,
        WcOpcode::Recv,
    );
    assert_wc(
        next_completion(c, &conn.client),
        &conn.client,
        2,
        WcStatus::REM_OP_ERR,
        WcOpcode::Send,
    );
}

#[test]
fn without_a_receive_the_sender_retries_after_rnr_naks_then_fails() {
    let bed = bed(11);
    let (s, c) = (bed.server(), bed.client());
    // The client's QP takes its RNR retry count from the REP: the server's accept.
    let setup = Setup {
        accept: ConnParam {
            rnr_retry_count: 2,
            ..ConnParam::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7481), &setup);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"anyone?");
    let wc = next_completion(c, &conn.client);
    // Three transmissions, each NAKed after a round trip; two RNR waits between them.
    assert_eq!(c.now() - t0, 3 * 10 * US + 2 * RNR);
    assert_wc(
        wc,
        &conn.client,
        1,
        WcStatus::RNR_RETRY_EXC_ERR,
        WcOpcode::Send,
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    // The responder is not in error: an RNR NAK is not a fault of its QP.
    assert_eq!(ok(s.query_qp_state(conn.server.qp), "query"), QpState::Rts);
}

#[test]
fn a_receive_posted_during_the_rnr_wait_takes_the_retransmission() {
    let bed = bed(12);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"late");
    ok(s.sleep(100 * US), "sleep");
    receive_on_the_first_retry(&bed, &conn, t0);
}

/// Posts a receive at the server of `conn`, whose client sent at `t0` and met one RNR NAK:
/// the retry after the RNR timer delivers, and the client's send completes when it is
/// acknowledged.
fn receive_on_the_first_retry(bed: &SimBed, conn: &Conn, t0: Duration) {
    let (s, c) = (bed.server(), bed.client());
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 5, &rx);
    let wc = next_completion(s, &conn.server);
    assert_eq!(
        s.now() - t0,
        10 * US + RNR + 5 * US,
        "received on the retransmission"
    );
    assert_wc(wc, &conn.server, 5, WcStatus::SUCCESS, WcOpcode::Recv);
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 10 * US + RNR + 10 * US);
    assert_eq!(wc.status, WcStatus::SUCCESS);
}

/// An RNR retry count of 7 (the CM's default) retries for ever, as hardware does; at a
/// responder that never gets a receive each retry meets the same NAK and changes nothing. A
/// completion wait only a receive could end is then a deadlock (EDEADLK) once the first NAK
/// is back, where it used to run the retries for ever (a hang); `run_until_idle` stops there
/// too; and a receive posted afterwards still takes the next retry.
/// The client of `conn`, waiting for its send's completion, is told of the deadlock
/// (EDEADLK) at exactly `at`, and `run_until_idle` then finds nothing pending.
fn expect_deadlock_on_the_completion(bed: &SimBed, conn: &Conn, at: Duration) {
    let c = bed.client();
    ok(c.req_notify_cq(conn.client.cq, false), "req_notify_cq");
    let err = expect_errno(
        c.get_cq_event(conn.client.comp, Wait::Block),
        Call::GetCqEvent,
        Errno::EDEADLK,
    );
    assert!(err.detail.contains("deadlock"), "{err}");
    assert_eq!(c.now(), at, "reported when nothing can change any more");
    bed.fabric.run_until_idle().expect("outside a run");
    assert_eq!(c.now(), at, "nothing else was pending");
}

#[test]
fn endless_rnr_retries_at_a_responder_without_receives_are_a_deadlock() {
    let bed = bed(14);
    let c = bed.client();
    let conn = connected(&bed);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"anyone?");
    // Reported once the first RNR NAK is back.
    expect_deadlock_on_the_completion(&bed, &conn, t0 + 10 * US);
    receive_on_the_first_retry(&bed, &conn, t0);
}

/// The same inside `Fabric::run`: a client waiting for its send's completion and a server
/// waiting for a CM event that never comes are reported deadlocked, instead of a run that
/// never ends.
#[test]
fn endless_rnr_retries_end_a_run_in_a_deadlock() {
    let bed = bed(15);
    let conn = connected(&bed);
    let (client, server) = (conn.client, conn.server);
    let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = done.clone();
    bed.fabric.spawn("client", "sender", move |c| {
        send_bytes(&c, &client, 1, SendOp::Send, b"anyone?");
        c.req_notify_cq(client.cq, false)?;
        let err = c
            .get_cq_event(client.comp, Wait::Block)
            .map(drop)
            .unwrap_err();
        seen.lock().unwrap().push((err.errno, c.now()));
        Ok(())
    });
    let seen = done.clone();
    bed.fabric.spawn("server", "waiter", move |s| {
        let err = s
            .get_cm_event(server.channel, Wait::Block)
            .map(drop)
            .unwrap_err();
        seen.lock().unwrap().push((err.errno, s.now()));
        Ok(())
    });
    let t0 = bed.fabric.now();
    bed.fabric.run().expect("both processes end");
    let at = t0 + 10 * US;
    let done = done.lock().unwrap().clone();
    assert_eq!(
        done,
        [(Errno::EDEADLK, at), (Errno::EDEADLK, at)],
        "both, at once"
    );
    let trace = bed.fabric.trace_text();
    assert!(
        trace.contains("retrying for ever after RNR NAKs"),
        "the trace says why"
    );
}

#[test]
fn a_lost_request_is_retransmitted_after_the_timeout_and_delivered_once() {
    let bed = bed(13);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    post_recv_all(s, conn.server.qp, 2, &rx);
    bed.fabric.drop_data_packets(1).expect("outside a run");
    let t0 = c.now();
    send_bytes(c, &conn.client, 3, SendOp::Send, b"once");
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, RETRY + 5 * US);
    assert_wc(wc, &conn.server, 1, WcStatus::SUCCESS, WcOpcode::Recv);
    assert_eq!(next_completion(c, &conn.client).status, WcStatus::SUCCESS);
    assert_eq!(c.now() - t0, RETRY + 10 * US);

    // A lost ACK: the retransmission is a duplicate, acknowledged again, not received again.
    bed.fabric.drop_data_packets(0).expect("outside a run");
    let t1 = c.now();
    send_bytes(c, &conn.client, 4, SendOp::Send, b"twice?");
    ok(s.sleep(US), "sleep");
    bed.fabric.drop_data_packets(1).expect("outside a run");
    assert_eq!(next_completion(s, &conn.server).wr_id, 2);
    assert_eq!(next_completion(c, &conn.client).status, WcStatus::SUCCESS);
    assert_eq!(c.now() - t1, RETRY + 10 * US);
    ok(s.sleep(Duration::from_secs(10)), "sleep");
    assert!(drain(s, &conn.server).is_empty(), "exactly once");
}

/// Removes the server's device with its port: the server goes silent.
fn remove_server_device(bed: &SimBed) {
    ok(
        bed.fabric
            .remove_device("server")
            .map_err(|e| CmError::application(e.to_string())),
        "remove",
    );
}

/// A connection whose client asked for `retry_count` transport retries.
fn connected_retrying(bed: &SimBed, retry_count: u8) -> Conn {
    let setup = Setup {
        connect: ConnParam {
            retry_count,
            ..ConnParam::default()
        },
        ..Setup::default()
    };
    connect_with(bed.server(), bed.client(), addr(7471), &setup)
}

#[test]
fn a_silent_peer_exhausts_the_transport_retries() {
    let bed = bed(14);
    let c = bed.client();
    let conn = connected_retrying(&bed, 6);
    remove_server_device(&bed);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"hello?");
    let wc = next_completion(c, &conn.client);
    // retry_count 6: the first transmission and 6 retransmissions each time out.
    assert_eq!(c.now() - t0, 7 * RETRY);
    assert_wc(wc, &conn.client, 1, WcStatus::RETRY_EXC_ERR, WcOpcode::Send);
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
}

/// A retry count of 7 (librdmacm's default) retries without end on rxe, whose completer
/// counts down only below 7 (rxe_comp.c): after 100 retransmission timeouts the send is still
/// outstanding and the QP in RTS. An InfiniBand HCA takes it as the specification's 7
/// retries (only an RNR retry count of 7 is endless): RETRY_EXC_ERR after 8 timeouts.
#[test]
fn a_retry_count_of_7_is_endless_on_rxe_and_7_retries_on_an_hca() {
    let bed = bed(16);
    let c = bed.client();
    let conn = connected(&bed);
    remove_server_device(&bed);
    send_bytes(c, &conn.client, 1, SendOp::Send, b"hello?");
    ok(c.sleep(100 * RETRY), "sleep");
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(ok(c.poll_cq(conn.client.cq, &mut wc), "poll_cq"), 0);
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);

    let ib = SimBed::jitterless(16, Transport::InfiniBand);
    let c = ib.client();
    let conn = connected(&ib);
    let timeout = ok(c.init_qp_attr(conn.client.id, QpState::Rts), "init_qp_attr").timeout;
    remove_server_device(&ib);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"hello?");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, 8 * Duration::from_nanos(4096 << timeout));
    assert_wc(wc, &conn.client, 1, WcStatus::RETRY_EXC_ERR, WcOpcode::Send);
}

#[test]
fn the_connect_retry_count_bounds_the_transport_retries() {
    let bed = bed(15);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        connect: ConnParam {
            retry_count: 2,
            ..ConnParam::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7485), &setup);
    remove_server_device(&bed);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"x");
    assert_eq!(
        next_completion(c, &conn.client).status,
        WcStatus::RETRY_EXC_ERR
    );
    assert_eq!(c.now() - t0, 3 * RETRY);
}

#[test]
fn disconnect_flushes_each_side_when_its_own_disconnect_moves_its_qp_to_error() {
    let bed = bed(16);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let srx = region(s, conn.server.pd, 8, 0, LW);
    let crx = region(c, conn.client.pd, 8, 0, LW);
    for wr_id in [1, 2] {
        post_recv_all(s, conn.server.qp, wr_id, &srx);
    }
    post_recv_all(c, conn.client.qp, 3, &crx);
    ok(c.disconnect(conn.client.id), "client disconnect");
    let wc = drain(c, &conn.client);
    assert_eq!(wc.len(), 1);
    assert_wc(
        wc[0],
        &conn.client,
        3,
        WcStatus::WR_FLUSH_ERR,
        WcOpcode::Recv,
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    // The DREQ does not touch the server's QP (CM-SEMANTICS.md §5.2 S10)...
    expect_event_for(
        s,
        conn.server.channel,
        EventKind::Disconnected,
        conn.server.id,
        0,
    );
    assert_eq!(ok(s.query_qp_state(conn.server.qp), "query"), QpState::Rts);
    assert!(drain(s, &conn.server).is_empty());
    // ...its own disconnect does, flushing both receives in order.
    ok(s.disconnect(conn.server.id), "server disconnect");
    let wc = drain(s, &conn.server);
    let ids: Vec<(u64, WcStatus)> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        [(1, WcStatus::WR_FLUSH_ERR), (2, WcStatus::WR_FLUSH_ERR)]
    );
    // Work posted in ERROR is flushed at once.
    post_recv_all(s, conn.server.qp, 4, &srx);
    assert_eq!(drain(s, &conn.server)[0].status, WcStatus::WR_FLUSH_ERR);
}

#[test]
fn device_removal_flushes_the_outstanding_work() {
    let bed = bed(17);
    let c = bed.client();
    let conn = connected(&bed);
    let crx = region(c, conn.client.pd, 8, 0, LW);
    post_recv_all(c, conn.client.qp, 1, &crx);
    ok(
        bed.fabric
            .remove_device("client")
            .map_err(|e| CmError::application(e.to_string())),
        "remove",
    );
    let wc = drain(c, &conn.client);
    assert_eq!(wc.len(), 1);
    assert_wc(
        wc[0],
        &conn.client,
        1,
        WcStatus::WR_FLUSH_ERR,
        WcOpcode::Recv,
    );
}

#[test]
fn a_cq_shared_by_two_qps_reports_through_its_channel_only_when_armed() {
    let bed = bed(18);
    let (s, c) = (bed.server(), bed.client());
    let a = connect(s, c, addr(7491));
    let shared = Objects {
        pd: a.server.pd,
        comp: a.server.comp,
        cq: a.server.cq,
    };
    let setup = Setup {
        server_objects: Some(shared),
        ..Setup::default()
    };
    let b = connect_with(s, c, addr(7492), &setup);
    let (cq, comp) = (shared.cq, shared.comp);
    let rx = region(s, shared.pd, 8, 0, LW);
    for (side, wr_id) in [
        (&a.server, 1),
        (&b.server, 2),
        (&a.server, 3),
        (&a.server, 4),
    ] {
        post_recv_all(s, side.qp, wr_id, &rx);
    }
    // Not armed: the completion is queued, no CQ event.
    send_bytes(c, &a.client, 10, SendOp::Send, b"a");
    ok(s.sleep(20 * US), "sleep");
    expect_errno(
        s.get_cq_event(comp, Wait::NonBlocking),
        Call::GetCqEvent,
        Errno::EAGAIN,
    );
    let wc = drain(s, &a.server);
    assert_eq!(wc.len(), 1);
    assert_wc(wc[0], &a.server, 1, WcStatus::SUCCESS, WcOpcode::Recv);
    // Armed: the next completion, of the other QP, queues one CQ event.
    ok(s.req_notify_cq(cq, false), "arm");
    let t0 = s.now();
    send_bytes(c, &b.client, 20, SendOp::Send, b"b");
    assert_eq!(ok(s.get_cq_event(comp, Wait::Block), "get_cq_event"), cq);
    assert_eq!(s.now() - t0, 5 * US);
    expect_errno(s.destroy_cq(cq), Call::DestroyCq, Errno::EBUSY);
    expect_errno(s.ack_cq_events(cq, 2), Call::AckCqEvents, Errno::EINVAL);
    ok(s.ack_cq_events(cq, 1), "ack");
    let wc = drain(s, &b.server);
    assert_eq!(wc.len(), 1);
    assert_wc(wc[0], &b.server, 2, WcStatus::SUCCESS, WcOpcode::Recv);
    // The event was one-shot: the next completion queues none.
    send_bytes(c, &a.client, 11, SendOp::Send, b"c");
    ok(s.sleep(20 * US), "sleep");
    expect_errno(
        s.get_cq_event(comp, Wait::NonBlocking),
        Call::GetCqEvent,
        Errno::EAGAIN,
    );
    assert_eq!(drain(s, &a.server)[0].wr_id, 3);
    // Armed for solicited completions only: an unsolicited send does not fire it, a
    // solicited one does.
    ok(s.req_notify_cq(cq, true), "arm solicited");
    send_bytes(c, &a.client, 12, SendOp::Send, b"d");
    ok(s.sleep(20 * US), "sleep");
    expect_errno(
        s.get_cq_event(comp, Wait::NonBlocking),
        Call::GetCqEvent,
        Errno::EAGAIN,
    );
    let mut wr = SendWr::new(13, SendOp::Send, Payload::Inline(b""));
    wr.solicited = true;
    let mr = region(c, a.client.pd, 1, 0, AccessFlags::NONE);
    let sge = [mr.sge(0, 1)];
    wr.payload = Payload::Sges(&sge);
    // a's fourth receive took "d"; post one more for the solicited send.
    post_recv_all(s, a.server.qp, 5, &rx);
    ok(c.post_send(a.client.qp, &wr), "solicited send");
    let t1 = s.now();
    assert_eq!(
        ok(
            s.get_cq_event(comp, Wait::Timeout(Duration::from_millis(1))),
            "event"
        ),
        cq
    );
    assert_eq!(s.now() - t1, 5 * US);
    ok(s.ack_cq_events(cq, 1), "ack");
    let ids: Vec<u64> = drain(s, &a.server).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [4, 5]);
    // Without arming, a timed wait ends in ETIMEDOUT at its deadline.
    let t2 = s.now();
    expect_errno(
        s.get_cq_event(comp, Wait::Timeout(Duration::from_millis(3))),
        Call::GetCqEvent,
        Errno::ETIMEDOUT,
    );
    assert_eq!(s.now() - t2, Duration::from_millis(3));
}

/// An InfiniBand bed whose wire has no jitter: its HCA raises COMM_EST for a QP's first
/// message (rxe, and so the simulator's RoCE, raise none).
fn ib_bed(seed: u64) -> SimBed {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    SimBed::with_config(seed, Transport::InfiniBand, config)
}

/// §9, on InfiniBand: data reaches the passive QP before the RTU (lost here): the receive
/// completes, the QP reports COMM_EST, and `notify` makes the CM deliver the one ESTABLISHED.
#[test]
fn comm_est_before_the_rtu_then_notify_establishes_once() {
    let bed = ib_bed(19);
    let (s, c) = (bed.server(), bed.client());
    ok(
        bed.fabric
            .drop_next(MessageKind::Rtu, 1)
            .map_err(|e| CmError::application(e.to_string())),
        "drop RTU",
    );
    let mut rx = None;
    let conn = start_connection(s, c, addr(7493), &Setup::default(), |side| {
        let mr = region(s, side.pd, 16, 0, LW);
        post_recv_all(s, side.qp, 1, &mr);
        rx = Some(mr);
    });
    let t0 = c.now();
    send_bytes(c, &conn.client, 2, SendOp::Send, b"first!");
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US);
    assert_wc(wc, &conn.server, 1, WcStatus::SUCCESS, WcOpcode::Recv);
    let event = ok(s.get_async_event(Wait::NonBlocking), "async event");
    assert_eq!(event.kind, AsyncEvent::COMM_EST);
    assert_eq!(
        (event.qp_num, event.id),
        (Some(conn.server.qpn), Some(conn.server.id))
    );
    expect_no_event(s, conn.server.channel);
    ok(s.notify(conn.server.id, AsyncEvent::COMM_EST), "notify");
    expect_event_for(
        s,
        conn.server.channel,
        EventKind::Established,
        conn.server.id,
        0,
    );
    ok(
        s.sleep(Duration::from_secs(30)),
        "sleep past every REP retransmission",
    );
    expect_no_event(s, conn.server.channel);
    expect_errno(
        s.get_async_event(Wait::NonBlocking),
        Call::GetAsyncEvent,
        Errno::EAGAIN,
    );
    assert!(rx.is_some());
}

/// §9.3, on InfiniBand: the RTU first, then data: the QP still reports COMM_EST (its first
/// message), and a `notify` then finds the connection established: EISCONN.
#[test]
fn comm_est_after_the_rtu_makes_notify_fail_with_eisconn() {
    let bed = ib_bed(20);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 16, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    send_bytes(c, &conn.client, 2, SendOp::Send, b"second");
    assert_eq!(next_completion(s, &conn.server).status, WcStatus::SUCCESS);
    let event = ok(s.get_async_event(Wait::NonBlocking), "async event");
    assert_eq!(event.kind, AsyncEvent::COMM_EST);
    expect_errno(
        s.notify(conn.server.id, AsyncEvent::COMM_EST),
        Call::Notify,
        Errno::EISCONN,
    );
    expect_no_event(s, conn.server.channel);
}

#[test]
fn a_region_stays_registered_while_work_uses_it_and_comes_back_with_its_bytes() {
    let bed = bed(21);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    expect_errno(s.dereg_mr(rx.handle), Call::DeregMr, Errno::EBUSY);
    expect_errno(s.dealloc_pd(conn.server.pd), Call::DeallocPd, Errno::EBUSY);
    expect_errno(
        s.mr_write(rx.handle, 4, &[0; 5]),
        Call::MrWrite,
        Errno::EINVAL,
    );
    expect_errno(
        s.mr_read(rx.handle, usize::MAX, &mut [0; 2]),
        Call::MrRead,
        Errno::EINVAL,
    );
    send_bytes(c, &conn.client, 2, SendOp::Send, b"12345678");
    assert_eq!(next_completion(s, &conn.server).status, WcStatus::SUCCESS);
    let buffer = ok(s.dereg_mr(rx.handle), "dereg_mr");
    assert_eq!(buffer, b"12345678");
    expect_errno(s.dereg_mr(rx.handle), Call::DeregMr, Errno::EBADF);
    expect_errno(
        s.mr_read(rx.handle, 0, &mut [0; 1]),
        Call::MrRead,
        Errno::EBADF,
    );
    // Another host's handle is refused too.
    expect_errno(
        c.mr_read(rx.handle, 0, &mut [0; 1]),
        Call::MrRead,
        Errno::EBADF,
    );
    // A destroyed QP releases what its requests held.
    let rx2 = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 3, &rx2);
    ok(s.destroy_qp(conn.server.id), "destroy_qp");
    ok(s.dereg_mr(rx2.handle), "dereg_mr after destroy_qp");
}

#[test]
fn posts_are_checked_against_the_qp_capacities_and_state() {
    let bed = bed(22);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        cap: QpCap {
            max_recv_wr: 2,
            ..QpCap::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7495), &setup);
    // rxe's rings (`rxe_queue_init`): a power of two with one slot empty, so 2 requests asked
    // give 3 and the default 16 give 31; one send entry gives 16 bytes inline.
    let granted = QpCap {
        max_send_wr: 31,
        max_recv_wr: 3,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 16,
    };
    assert_eq!(ok(s.query_qp_cap(conn.server.qp), "query_qp_cap"), granted);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    expect_receive_queue_holds(s, conn.server.qp, &rx, 3);
    let sge = [rx.sge(0, 8)];
    let two = [rx.sge(0, 4), rx.sge(4, 4)];
    let wr = RecvWr {
        wr_id: 4,
        sg_list: &two,
    };
    expect_errno(
        s.post_recv(conn.server.qp, &wr),
        Call::PostRecv,
        Errno::EINVAL,
    );
    let send = SendWr::new(5, SendOp::Send, Payload::Sges(&two));
    expect_errno(
        s.post_send(conn.server.qp, &send),
        Call::PostSend,
        Errno::EINVAL,
    );
    // Another host's QP is not a QP of this host.
    let one = SendWr::new(6, SendOp::Send, Payload::Sges(&sge));
    expect_errno(
        c.post_send(conn.server.qp, &one),
        Call::PostSend,
        Errno::EBADF,
    );
    assert_eq!(ok(s.qp(conn.listener), "id->qp"), None);
    let attr = cmtwin::verbs::QpInitAttrEx::rc(conn.server.pd, conn.server.cq, conn.server.cq);
    expect_errno(
        s.create_qp_ex(conn.server.id, &attr),
        Call::CreateQpEx,
        Errno::EINVAL,
    );
    expect_errno(
        s.create_cq(conn.server.id, 0, None),
        Call::CreateCq,
        Errno::EINVAL,
    );
    let bare = ok(s.create_cq(conn.server.id, 4, None), "cq without channel");
    expect_errno(
        s.req_notify_cq(bare, false),
        Call::ReqNotifyCq,
        Errno::EINVAL,
    );
    expect_errno(
        s.destroy_comp_channel(conn.server.comp),
        Call::DestroyCompChannel,
        Errno::EBUSY,
    );
    ok(s.destroy_cq(bare), "destroy_cq");
    expect_errno(s.destroy_cq(bare), Call::DestroyCq, Errno::EBADF);
    expect_errno(
        s.reg_mr(conn.server.pd, vec![0; 4], AccessFlags::REMOTE_WRITE),
        Call::RegMr,
        Errno::EINVAL,
    );
    expect_errno(
        s.reg_mr(conn.server.pd, Vec::new(), LW),
        Call::RegMr,
        Errno::EINVAL,
    );
}

#[test]
fn create_qp_gives_the_id_cqs_with_their_own_channels() {
    let bed = bed(23);
    let (s, c) = (bed.server(), bed.client());
    let pair = cmtwin_tests::steps::connect_pair(&bed);
    let cqs = ok(c.qp_cqs(pair.client.id), "qp_cqs").expect("the id has a QP");
    let send_cq = cqs.send_cq;
    assert_ne!(cqs.send_cq, cqs.recv_cq);
    assert!(cqs.send_channel.is_some() && cqs.recv_channel.is_some());
    assert_ne!(cqs.send_channel, cqs.recv_channel);
    let qp_of = |cm: &SimBackend, id| ok(cm.qp(id), "id->qp").expect("a QP");
    assert_eq!(
        ok(c.query_qp_state(qp_of(c, pair.client.id)), "query"),
        QpState::Rts
    );
    assert_eq!(
        ok(s.query_qp_state(qp_of(s, pair.server.id)), "query"),
        QpState::Rts
    );
    assert_eq!(ok(s.qp_cqs(pair.listener.id), "qp_cqs"), None);
    expect_errno(c.destroy_cq(send_cq), Call::DestroyCq, Errno::EBUSY);
    // A UD QP is ready to send at once, as librdmacm leaves it.
    let ch = ok(c.create_event_channel(), "channel");
    let ud = ok(c.create_id(Some(ch), 0, cmtwin::PortSpace::UDP), "UD id");
    ok(
        c.bind_addr(ud, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    ok(c.create_qp(ud, &QpInitAttr::new(QpType::Ud)), "UD QP");
    assert_eq!(ok(c.query_qp_state(qp_of(c, ud)), "query"), QpState::Rts);
}

/// Two processes exchange a request and a reply, each blocking in `get_cq_event` through the
/// scheduler; a third blocks on a channel nothing will ever signal and learns so.
#[test]
fn processes_block_on_completion_channels() {
    let bed = bed(24);
    let conn = connected(&bed);
    let t0 = bed.fabric.now();
    bed.fabric.spawn("server", "server", move |s| {
        let rx = region(&s, conn.server.pd, 16, 0, LW);
        post_recv_all(&s, conn.server.qp, 1, &rx);
        let wc = next_completion(&s, &conn.server);
        assert_eq!((wc.status, wc.byte_len), (WcStatus::SUCCESS, 7));
        send_bytes(&s, &conn.server, 2, SendOp::Send, b"pong");
        assert_eq!(next_completion(&s, &conn.server).wr_id, 2);
        Ok(())
    });
    bed.fabric.spawn("client", "client", move |c| {
        let rx = region(&c, conn.client.pd, 16, 0, LW);
        post_recv_all(&c, conn.client.qp, 3, &rx);
        c.sleep(Duration::from_millis(1))?;
        send_bytes(&c, &conn.client, 4, SendOp::Send, b"ping!!!");
        let mut got = Vec::new();
        for _ in 0..2 {
            got.push(next_completion(&c, &conn.client).wr_id);
        }
        got.sort_unstable();
        assert_eq!(got, [3, 4]);
        Ok(())
    });
    bed.fabric.run().expect("both processes succeed");
    // The ping reaches the server after 1 ms + 5 µs; the server's pong is acknowledged a
    // round trip later, the last thing either process waits for.
    assert_eq!(bed.fabric.now() - t0, Duration::from_millis(1) + 15 * US);

    let bed = self::bed(25);
    let conn = connected(&bed);
    bed.fabric.spawn("server", "stuck", move |s| {
        let err = s.get_cq_event(conn.server.comp, Wait::Block).unwrap_err();
        assert_eq!(err.errno, Errno::EDEADLK);
        assert!(err.detail.contains("ibv_get_cq_event"), "{err}");
        Ok(())
    });
    bed.fabric.run().expect("the process sees EDEADLK");
}

/// Many sends under random loss and jitter: delivered in order, exactly once, and the same
/// seed gives the same trace byte for byte.
#[test]
fn a_seed_replays_the_data_path_byte_for_byte() {
    let run = |seed: u64| {
        let config = SimConfig {
            loss_probability: 0.1,
            ..SimConfig::default()
        };
        let bed = SimBed::with_config(seed, Transport::Roce, config);
        let (s, c) = (bed.server(), bed.client());
        let setup = Setup {
            cap: QpCap {
                max_send_wr: 32,
                max_recv_wr: 32,
                ..QpCap::default()
            },
            ..Setup::default()
        };
        let conn = connect_with(s, c, addr(7496), &setup);
        let rx = region(s, conn.server.pd, 30 * 8, 0, LW);
        for i in 0..30u64 {
            let sge = [rx.sge(i as usize * 8, 8)];
            ok(
                s.post_recv(
                    conn.server.qp,
                    &RecvWr {
                        wr_id: i,
                        sg_list: &sge,
                    },
                ),
                "post_recv",
            );
        }
        for i in 0..30u64 {
            send_bytes(c, &conn.client, 100 + i, SendOp::Send, &i.to_le_bytes());
        }
        let mut received = Vec::new();
        while received.len() < 30 {
            let wc = next_completion(s, &conn.server);
            assert_eq!(wc.status, WcStatus::SUCCESS);
            received.push(wc.wr_id);
        }
        assert_eq!(received, (0..30).collect::<Vec<u64>>(), "in order");
        let mut sent = 0;
        while sent < 30 {
            assert_eq!(next_completion(c, &conn.client).status, WcStatus::SUCCESS);
            sent += 1;
        }
        let mut bytes = vec![0u8; 30 * 8];
        ok(s.mr_read(rx.handle, 0, &mut bytes), "mr_read");
        for (i, chunk) in bytes.chunks(8).enumerate() {
            assert_eq!(chunk, (i as u64).to_le_bytes(), "message {i}");
        }
        ok(s.sleep(Duration::from_secs(20)), "let duplicates arrive");
        assert!(drain(s, &conn.server).is_empty(), "exactly once");
        bed.fabric.trace_text()
    };
    let first = run(26);
    assert!(
        first.contains("loss data qp"),
        "the seed loses data packets:\n{first}"
    );
    assert_eq!(first, run(26), "same seed, same trace");
}

/// `get_send_comp_waiting` and `get_recv_comp_waiting` give up as their wait says: a timed
/// wait after exactly its duration (ETIMEDOUT), a non-blocking one at once (EAGAIN); a
/// completion that comes within the wait is returned when it comes.
#[test]
fn the_completion_helpers_with_a_bounded_wait_give_up_on_time() {
    let bed = bed(28);
    let (s, c) = (bed.server(), bed.client());
    let pair = cmtwin_tests::steps::connect_pair(&bed);
    let (sid, cid) = (pair.server.id, pair.client.id);
    let t0 = s.now();
    let limit = Wait::Timeout(Duration::from_millis(3));
    expect_errno(
        s.get_recv_comp_waiting(sid, limit),
        Call::GetCqEvent,
        Errno::ETIMEDOUT,
    );
    assert_eq!(s.now() - t0, Duration::from_millis(3));
    expect_errno(
        c.get_send_comp_waiting(cid, Wait::NonBlocking),
        Call::GetCqEvent,
        Errno::EAGAIN,
    );
    let rx = ok(s.reg_msgs(sid, vec![0; 16]), "reg_msgs");
    ok(s.post_recv_msg(sid, 1, &rx, 0, 16), "post_recv_msg");
    let tx = ok(c.reg_msgs(cid, b"request".to_vec()), "reg_msgs");
    let t1 = c.now();
    ok(
        c.post_send_msg(cid, 2, &tx, 0, 7, SendFlags::SIGNALED),
        "post_send_msg",
    );
    let wc = ok(c.get_send_comp_waiting(cid, limit), "get_send_comp_waiting");
    assert_eq!(
        (wc.wr_id, wc.status, c.now() - t1),
        (2, WcStatus::SUCCESS, 10 * US),
        "returned when the completion came, not at the end of the wait"
    );
    let wc = ok(s.get_recv_comp_waiting(sid, limit), "get_recv_comp_waiting");
    assert_eq!((wc.wr_id, wc.byte_len), (1, 7));
    expect_errno(
        s.get_send_comp_waiting(pair.listener.id, limit),
        Call::PollCq,
        Errno::EINVAL,
    );
}

/// librdmacm's `rdma_verbs.h` helpers, built on the objects: regions in the id's PD, posts
/// over a region's bytes (checked), and completions waited for on the CQs `create_qp` made.
#[test]
fn the_rdma_verbs_helpers_work_on_the_qps_create_qp_makes() {
    let bed = bed(27);
    let (s, c) = (bed.server(), bed.client());
    let pair = cmtwin_tests::steps::connect_pair(&bed);
    let (sid, cid) = (pair.server.id, pair.client.id);
    // Before and after a QP, an id's PD is its device's default one.
    let pd = ok(s.pd(sid), "pd");
    assert_eq!(ok(s.pd(pair.listener.id), "listener pd"), pd);
    let rx = ok(s.reg_msgs(sid, vec![0; 16]), "reg_msgs");
    assert_eq!(rx.access, LW);
    let readable = ok(s.reg_read(sid, b"remote bytes".to_vec()), "reg_read");
    let writable = ok(s.reg_write(sid, vec![0; 8]), "reg_write");
    expect_errno(s.dealloc_pd(pd), Call::DeallocPd, Errno::EBUSY);
    expect_errno(
        s.post_recv_msg(sid, 1, &rx, 8, 9),
        Call::PostRecv,
        Errno::EINVAL,
    );
    ok(s.post_recv_msg(sid, 1, &rx, 0, 16), "post_recv_msg");

    let tx = ok(c.reg_msgs(cid, b"request".to_vec()), "reg_msgs");
    let t0 = c.now();
    ok(
        c.post_send_msg(cid, 2, &tx, 0, 7, SendFlags::SIGNALED),
        "post_send_msg",
    );
    let wc = ok(c.get_send_comp(cid), "get_send_comp");
    assert_eq!(
        (wc.wr_id, wc.status, c.now() - t0),
        (2, WcStatus::SUCCESS, 10 * US)
    );
    let wc = ok(s.get_recv_comp(sid), "get_recv_comp");
    assert_eq!((wc.wr_id, wc.byte_len), (1, 7));

    let local = ok(c.reg_msgs(cid, vec![0; 6]), "reg_msgs");
    const SIGNALED: SendFlags = SendFlags::SIGNALED;
    ok(
        c.post_read(
            cid,
            3,
            &local,
            0,
            5,
            SIGNALED,
            readable.addr_at(7),
            readable.rkey,
        ),
        "post_read",
    );
    assert_eq!(ok(c.get_send_comp(cid), "read").status, WcStatus::SUCCESS);
    let mut got = [0u8; 6];
    ok(c.mr_read(local.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"bytes\0");
    ok(
        c.post_write(cid, 4, &tx, 0, 7, SIGNALED, writable.addr, writable.rkey),
        "post_write",
    );
    assert_eq!(ok(c.get_send_comp(cid), "write").status, WcStatus::SUCCESS);
    let mut got = [0u8; 7];
    ok(s.mr_read(writable.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"request");

    // Without QP, or with a CQ that has no channel, there is nothing to wait on.
    expect_errno(
        s.get_send_comp(pair.listener.id),
        Call::PollCq,
        Errno::EINVAL,
    );
    expect_errno(
        c.post_write(cid, 5, &tx, 4, 7, SIGNALED, writable.addr, writable.rkey),
        Call::PostSend,
        Errno::EINVAL,
    );
}

/// A delayed data packet holds back the packets behind it on its link (links are FIFO), and
/// nothing else: a packet to a QP in ERROR is dropped, so its sender exhausts its retries.
#[test]
fn delayed_packets_keep_their_order_and_a_peer_in_error_is_silent() {
    let bed = bed(28);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_retrying(&bed, 6);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 1, &rx);
    post_recv_all(s, conn.server.qp, 2, &rx);
    bed.fabric
        .delay_data_packets(1, Duration::from_millis(1))
        .expect("outside a run");
    let t0 = c.now();
    send_bytes(c, &conn.client, 10, SendOp::Send, b"first");
    send_bytes(c, &conn.client, 11, SendOp::Send, b"second");
    assert_eq!(next_completion(s, &conn.server).wr_id, 1);
    assert_eq!(s.now() - t0, Duration::from_millis(1) + 5 * US);
    assert_eq!(next_completion(s, &conn.server).wr_id, 2);
    assert_eq!(
        s.now() - t0,
        Duration::from_millis(1) + 5 * US,
        "right behind it"
    );
    for wr_id in [10, 11] {
        assert_eq!(next_completion(c, &conn.client).wr_id, wr_id);
    }
    assert_eq!(c.now() - t0, Duration::from_millis(1) + 10 * US);

    // The server's QP enters ERROR (its own disconnect); the client's next send is dropped
    // there until the client's retries run out.
    ok(s.disconnect(conn.server.id), "server disconnect");
    let t1 = c.now();
    send_bytes(c, &conn.client, 12, SendOp::Send, b"anyone?");
    let wc = next_completion(c, &conn.client);
    assert_wc(
        wc,
        &conn.client,
        12,
        WcStatus::RETRY_EXC_ERR,
        WcOpcode::Send,
    );
    assert_eq!(c.now() - t1, 7 * RETRY);
}

/// The external-QP path: QPs made apart from the ids, announced by number in `connect`'s and
/// `accept`'s parameters, moved INIT → RTR → RTS with the attributes `init_qp_attr` gives,
/// the connection completed with `establish`; then they carry data like any other.
#[test]
fn external_qps_follow_the_cms_attributes_and_carry_data() {
    let bed = bed(29);
    let (s, c) = (bed.server(), bed.client());
    let lch = ok(s.create_event_channel(), "channel");
    let lid = ok(
        s.create_id(Some(lch), 0, cmtwin::PortSpace::TCP),
        "listener",
    );
    ok(s.bind_addr(lid, addr(7501)), "bind");
    ok(s.listen(lid, 1), "listen");
    let cch = ok(c.create_event_channel(), "channel");
    let cid = ok(c.create_id(Some(cch), 0, cmtwin::PortSpace::TCP), "id");
    ok(
        c.resolve_addr(cid, None, addr(7501), Duration::from_secs(2)),
        "resolve_addr",
    );
    expect_event_for(c, cch, EventKind::AddrResolved, cid, 0);
    ok(
        c.resolve_route(cid, Duration::from_secs(2)),
        "resolve_route",
    );
    expect_event_for(c, cch, EventKind::RouteResolved, cid, 0);

    let external = |cm: &SimBackend, id| {
        let pd = ok(cm.alloc_pd(id), "alloc_pd");
        let cq = ok(cm.create_cq(id, 16, None), "create_cq");
        let qp = ok(
            cm.create_external_qp(&QpInitAttrEx::rc(pd, cq, cq)),
            "ibv_create_qp",
        );
        (pd, cq, qp)
    };
    let (cpd, ccq, cqp) = external(c, cid);
    assert_eq!(ok(c.query_qp_state(cqp), "query"), QpState::Reset);
    assert_eq!(ok(c.qp(cid), "id->qp"), None, "the id has no QP of its own");
    expect_errno(
        c.init_qp_attr(cid, QpState::Rtr),
        Call::InitQpAttr,
        Errno::EINVAL,
    );
    let cqpn = ok(c.qp_number(cqp), "qp_num");
    let with_qp = |qp_num| ConnParam {
        qp_num,
        ..ConnParam::default()
    };
    ok(c.connect(cid, Some(&with_qp(cqpn))), "connect");

    let child = ok(s.get_cm_event(lch, Wait::Block), "request");
    assert_eq!(child.kind(), EventKind::ConnectRequest);
    let sid = child.id();
    ok(s.ack_cm_event(child), "ack");
    let (spd, scq, sqp) = external(s, sid);
    let move_to = |cm: &SimBackend, id, qp, state| {
        let attr = ok(cm.init_qp_attr(id, state), "init_qp_attr");
        ok(cm.modify_qp(qp, &attr), "modify_qp");
        attr
    };
    move_to(s, sid, sqp, QpState::Init);
    let rtr = move_to(s, sid, sqp, QpState::Rtr);
    assert_eq!(rtr.dest_qp_num, cqpn, "the REQ's QP number");
    let rts = move_to(s, sid, sqp, QpState::Rts);
    assert_eq!((rts.timeout, rts.retry_cnt, rts.rnr_retry), (19, 7, 7));
    let rx = region(s, spd, 16, 0, LW);
    post_recv_all(s, sqp, 1, &rx);
    let sqpn = ok(s.qp_number(sqp), "qp_num");
    ok(s.accept(sid, Some(&with_qp(sqpn))), "accept");

    // No QP on the id: librdmacm hands out the CONNECT_RESPONSE; the application moves its
    // QP and sends the RTU itself.
    expect_event_for(c, cch, EventKind::ConnectResponse, cid, 0);
    move_to(c, cid, cqp, QpState::Init);
    assert_eq!(
        move_to(c, cid, cqp, QpState::Rtr).dest_qp_num,
        sqpn,
        "the REP's"
    );
    let rts = ok(c.init_qp_attr(cid, QpState::Rts), "init_qp_attr");
    let init_again = QpAttr {
        qp_state: Some(QpState::Init),
        ..rts
    };
    expect_errno(c.modify_qp(cqp, &init_again), Call::ModifyQp, Errno::EINVAL);
    ok(c.modify_qp(cqp, &rts), "modify_qp");
    expect_errno(c.modify_qp(cqp, &rts), Call::ModifyQp, Errno::EINVAL);
    expect_errno(
        c.init_qp_attr(cid, QpState::Sqd),
        Call::InitQpAttr,
        Errno::EINVAL,
    );
    ok(c.establish(cid), "establish");
    expect_event_for(s, lch, EventKind::Established, sid, 0);

    let t0 = c.now();
    let tx = ok(
        c.reg_mr(cpd, b"external".to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [tx.sge(0, 8)];
    let wr = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(cqp, &wr), "post_send");
    ok(s.sleep(20 * US), "sleep");
    let mut wc = [WorkCompletion::default()];
    assert_eq!(ok(s.poll_cq(scq, &mut wc), "poll"), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len, wc[0].qp_num),
        (1, WcStatus::SUCCESS, 8, sqpn)
    );
    assert_eq!(ok(c.poll_cq(ccq, &mut wc), "poll"), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::SUCCESS));
    assert_eq!(s.now() - t0, 20 * US);

    // ERROR flushes, RESET discards, destroy frees; an id's own QP is not destroyed here.
    post_recv_all(s, sqp, 3, &rx);
    let error = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    ok(s.modify_qp(sqp, &error), "to ERROR");
    assert_eq!(ok(s.poll_cq(scq, &mut wc), "poll"), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::WR_FLUSH_ERR));
    ok(s.destroy_external_qp(sqp), "ibv_destroy_qp");
    expect_errno(
        s.destroy_external_qp(sqp),
        Call::DestroyExternalQp,
        Errno::EBADF,
    );
    let conn = connect(s, c, addr(7502));
    expect_errno(
        s.destroy_external_qp(conn.server.qp),
        Call::DestroyExternalQp,
        Errno::EINVAL,
    );
}

/// Unsignaled sends complete silently when they succeed, and loudly when they fail; a CQ too
/// small for its completions loses the extra one and reports CQ_ERR.
#[test]
fn unsignaled_sends_and_an_overrun_cq() {
    let bed = bed(30);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    for wr_id in [1, 2] {
        post_recv_all(s, conn.server.qp, wr_id, &rx);
    }
    // The client's QP signals every send (sq_sig_all), marked or not.
    let cqp = conn.client.qp;
    let tx = region(c, conn.client.pd, 4, 9, AccessFlags::NONE);
    let sge = [tx.sge(0, 4)];
    let mut quiet = SendWr::new(5, SendOp::Send, Payload::Sges(&sge));
    quiet.signaled = false;
    ok(c.post_send(cqp, &quiet), "post_send");
    ok(c.sleep(20 * US), "sleep");
    assert_eq!(
        drain(c, &conn.client).len(),
        1,
        "sq_sig_all signals it anyway"
    );
    assert_eq!(drain(s, &conn.server).len(), 1);

    let small = ok(c.create_cq(conn.client.id, 1, None), "a CQ of one entry");
    // A second connection whose client QP completes into `small` and signals on request only.
    let lch = ok(s.create_event_channel(), "channel");
    let lid = ok(
        s.create_id(Some(lch), 0, cmtwin::PortSpace::TCP),
        "listener",
    );
    ok(s.bind_addr(lid, addr(7504)), "bind");
    ok(s.listen(lid, 1), "listen");
    let cch = ok(c.create_event_channel(), "channel");
    let cid = ok(c.create_id(Some(cch), 0, cmtwin::PortSpace::TCP), "id");
    ok(
        c.resolve_addr(cid, None, addr(7504), Duration::from_secs(2)),
        "resolve",
    );
    expect_event_for(c, cch, EventKind::AddrResolved, cid, 0);
    ok(c.resolve_route(cid, Duration::from_secs(2)), "route");
    expect_event_for(c, cch, EventKind::RouteResolved, cid, 0);
    let pd = ok(c.pd(cid), "id->pd");
    let mut attr = QpInitAttrEx::rc(pd, small, small);
    attr.sq_sig_all = false;
    ok(c.create_qp_ex(cid, &attr), "create_qp_ex");
    let qp = ok(c.qp(cid), "id->qp").expect("a QP");
    ok(c.connect(cid, None), "connect");
    let req = ok(s.get_cm_event(lch, Wait::Block), "request");
    let sid = req.id();
    ok(s.ack_cm_event(req), "ack");
    ok(s.create_qp(sid, &QpInitAttr::new(QpType::Rc)), "server QP");
    let srx = ok(s.reg_msgs(sid, vec![0; 8]), "reg_msgs");
    for wr_id in [1, 2, 3] {
        ok(s.post_recv_msg(sid, wr_id, &srx, 0, 8), "post_recv_msg");
    }
    ok(s.accept(sid, None), "accept");
    expect_event_for(c, cch, EventKind::Established, cid, 0);
    let tx = ok(c.reg_msgs(cid, vec![7; 4]), "reg_msgs");
    let sge = [tx.sge(0, 4)];
    let mut quiet = SendWr::new(10, SendOp::Send, Payload::Sges(&sge));
    quiet.signaled = false;
    ok(c.post_send(qp, &quiet), "unsignaled");
    ok(c.sleep(20 * US), "sleep");
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(ok(c.poll_cq(small, &mut wc), "poll"), 0, "a quiet success");
    // Two signaled sends into a CQ of one entry: the second completion is lost.
    for wr_id in [11, 12] {
        ok(
            c.post_send(qp, &SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge))),
            "post",
        );
    }
    let t0 = c.now();
    let event = ok(
        c.get_async_event(Wait::Timeout(Duration::from_millis(1))),
        "CQ_ERR",
    );
    assert_eq!((event.kind, event.cq), (AsyncEvent::CQ_ERR, Some(small)));
    assert_eq!(c.now() - t0, 10 * US, "when the second ACK came back");
    assert_eq!(ok(c.poll_cq(small, &mut wc), "poll"), 1);
    assert_eq!(wc[0].wr_id, 11);
    // A failure of an unsignaled request is reported all the same.
    ok(c.disconnect(cid), "disconnect");
    ok(c.post_send(qp, &quiet), "unsignaled, flushed");
    assert_eq!(ok(c.poll_cq(small, &mut wc), "poll"), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (10, WcStatus::WR_FLUSH_ERR));
    let t1 = c.now();
    let quiet_wait = c.get_async_event(Wait::Timeout(Duration::from_millis(2)));
    expect_errno(quiet_wait, Call::GetAsyncEvent, Errno::ETIMEDOUT);
    assert_eq!(c.now() - t1, Duration::from_millis(2));
}

/// Fault plans reach the data path: a plan that loses the next data packet and delays the one
/// after costs the first send a transport timeout and the second its delay, and replays.
#[test]
fn fault_plans_lose_and_delay_data_packets() {
    let run = || {
        let bed = bed(31);
        let (s, c) = (bed.server(), bed.client());
        let conn = connected(&bed);
        let at_ms = c.now().as_millis() as u64 + 1;
        let plan = cmtwin_sim::FaultPlan::from_json(&format!(
            r#"{{"faults": [
                {{"type": "scheduled", "when": {{"on": "time", "at_ms": {at_ms}}},
                  "action": {{"do": "drop_data_packets", "count": 1}}}},
                {{"type": "scheduled", "when": {{"on": "time", "at_ms": {at_ms}}},
                  "action": {{"do": "delay_data_packets", "count": 1, "delay_ms": 3}}}}
            ]}}"#
        ))
        .expect("a valid plan");
        bed.fabric.apply_plan(&plan).expect("outside a run");
        let rx = region(s, conn.server.pd, 8, 0, LW);
        post_recv_all(s, conn.server.qp, 1, &rx);
        ok(c.sleep(Duration::from_millis(2)), "past the plan's time");
        let t0 = c.now();
        send_bytes(c, &conn.client, 2, SendOp::Send, b"x");
        // Lost once; the retransmission is the next packet, delayed by 3 ms.
        let wc = next_completion(s, &conn.server);
        assert_eq!(wc.status, WcStatus::SUCCESS);
        assert_eq!(s.now() - t0, RETRY + Duration::from_millis(3) + 5 * US);
        assert_eq!(next_completion(c, &conn.client).status, WcStatus::SUCCESS);
        assert_eq!(c.now() - t0, RETRY + Duration::from_millis(3) + 10 * US);
        bed.fabric.trace_text()
    };
    let trace = run();
    assert!(trace.contains("drop the next 1 data packets"), "{trace}");
    assert_eq!(trace, run(), "same seed and plan, same trace");
}

// ----- UC: the RC data path without its reliability ----------------------------------------

/// A UC connection on `bed`: both QPs made with `IBV_QPT_UC`.
fn connected_uc(bed: &SimBed, port: u16) -> Conn {
    let setup = Setup {
        qp_type: Some(QpType::Uc),
        ..Setup::default()
    };
    connect_with(bed.server(), bed.client(), addr(port), &setup)
}

/// A UC QP made on an id cannot be connected by the CM: the id's connection is RC, and the
/// IB CM's RTR attributes for it (max_dest_rd_atomic, min_rnr_timer) are ones a UC QP's
/// modify refuses. So a server accepting with a UC QP on its id gets EINVAL from
/// `rdma_accept` (measured on rxe-6.1 and 6.12), and a client with a UC QP on its id, whose
/// server accepted with an RC QP, gets CONNECT_ERROR (status -1) instead of ESTABLISHED,
/// its QP in ERROR, as librdmacm's processing of the CONNECT_RESPONSE fails to move it to
/// RTR (read in cma.c, `ucma_process_conn_resp`). UC works through QPs made apart from the
/// ids (`connected_uc`).
#[test]
fn a_uc_qp_on_an_id_cannot_take_the_ids_rc_connection() {
    use cmtwin_tests::datapath::{listen_on, routed_client, verbs_side};
    use cmtwin_tests::steps::expect_request;
    let bed = bed(106);
    let (s, c) = (bed.server(), bed.client());
    let cap = QpCap::default();

    // The server's UC QP.
    let listener = listen_on(s, addr(7506), PortSpace::TCP);
    let (cch, cid) = routed_client(c, addr(7506), PortSpace::TCP);
    verbs_side(c, cch, cid, (QpType::Rc, cap), (None, None));
    ok(c.connect(cid, None), "connect");
    let req = expect_request(s, &listener);
    let server = verbs_side(s, listener.channel, req.id, (QpType::Uc, cap), (None, None));
    let refused = s.accept(req.id, None).expect_err("accept with a UC QP");
    assert_eq!((refused.call, refused.errno), (Call::Accept, Errno::EINVAL));
    assert!(refused.to_string().contains("UC QP"), "{refused}");
    assert_eq!(ok(s.query_qp_state(server.qp), "query"), QpState::Init);

    // The client's UC QP.
    let listener = listen_on(s, addr(7507), PortSpace::TCP);
    let (cch, cid) = routed_client(c, addr(7507), PortSpace::TCP);
    let client = verbs_side(c, cch, cid, (QpType::Uc, cap), (None, None));
    ok(c.connect(cid, None), "connect");
    let t0 = c.now();
    let req = expect_request(s, &listener);
    verbs_side(s, listener.channel, req.id, (QpType::Rc, cap), (None, None));
    ok(s.accept(req.id, None), "accept with an RC QP");
    let ev = ok(c.get_cm_event(cch, Wait::Block), "get_cm_event");
    assert_eq!((ev.kind(), ev.status()), (EventKind::ConnectError, -1));
    assert_eq!(
        c.now() - t0,
        10 * US,
        "the REP's arrival: REQ and REP one wire latency each"
    );
    ok(c.ack_cm_event(ev), "ack");
    assert_eq!(ok(c.query_qp_state(client.qp), "query"), QpState::Error);
}

/// The UC sends `wr_ids` of `side` complete SUCCESS in that order, at `posted` (UC has no
/// acknowledgement to wait for), whatever becomes of them at the receiver.
fn uc_sends_complete_at_once<const N: usize>(
    c: &SimBackend,
    side: &Side,
    posted: Duration,
    wr_ids: [u64; N],
) {
    for wr_id in wr_ids {
        let wc = next_completion(c, side);
        assert_eq!(c.now(), posted, "wr {wr_id} completes when sent");
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::SUCCESS));
    }
}

/// Both QPs of `conn` are in RTS.
fn assert_both_ready(conn: &Conn, s: &SimBackend, c: &SimBackend) {
    assert_eq!(ok(s.query_qp_state(conn.server.qp), "query"), QpState::Rts);
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
}

#[test]
fn uc_sends_and_writes_complete_when_sent_and_land_one_latency_later() {
    let bed = bed(101);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_uc(&bed, 7501);
    let target = region(s, conn.server.pd, 16, 0, LW | AccessFlags::REMOTE_WRITE);
    let rx = region(s, conn.server.pd, 16, 0, LW);
    post_recv_all(s, conn.server.qp, 10, &rx);
    post_recv_all(s, conn.server.qp, 11, &rx);

    // A send with immediate data: no ACK to wait for, the sender's completion is at once.
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::SendWithImm(0xbeef), b"hello");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, Duration::ZERO, "complete once sent");
    assert_wc(wc, &conn.client, 1, WcStatus::SUCCESS, WcOpcode::Send);
    assert_eq!((wc.byte_len, wc.imm), (5, None));
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US, "received after one latency");
    assert_wc(wc, &conn.server, 10, WcStatus::SUCCESS, WcOpcode::Recv);
    assert_eq!((wc.byte_len, wc.imm), (5, Some(0xbeef)));
    let mut got = [0u8; 5];
    ok(s.mr_read(rx.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"hello");

    // A plain write: consumes no receive.
    let t1 = c.now();
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr_at(2),
        rkey: target.rkey,
    };
    send_bytes(c, &conn.client, 2, op, b"abc");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t1, Duration::ZERO);
    assert_wc(wc, &conn.client, 2, WcStatus::SUCCESS, WcOpcode::RdmaWrite);
    assert_eq!(wc.byte_len, 3);

    // A write with immediate data: consumes the next receive.
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.rkey,
        imm: 7,
    };
    send_bytes(c, &conn.client, 3, op, b"xy");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t1, Duration::ZERO);
    assert_wc(wc, &conn.client, 3, WcStatus::SUCCESS, WcOpcode::RdmaWrite);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t1, 5 * US);
    assert_wc(
        wc,
        &conn.server,
        11,
        WcStatus::SUCCESS,
        WcOpcode::RecvRdmaWithImm,
    );
    assert_eq!((wc.byte_len, wc.imm), (2, Some(7)));
    let mut got = [9u8; 6];
    ok(s.mr_read(target.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"xyabc\0");
    assert!(drain(c, &conn.client).is_empty());
    assert!(drain(s, &conn.server).is_empty());
    assert_both_ready(&conn, s, c);
}

#[test]
fn uc_rdma_read_is_taken_then_fails_with_a_local_qp_operation_error() {
    let bed = bed(102);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_uc(&bed, 7502);
    let source = ok(
        s.reg_mr(conn.server.pd, b"0123".to_vec(), AccessFlags::REMOTE_READ),
        "reg_mr",
    );
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 9, &rx);
    let sink = region(c, conn.client.pd, 4, b'.', LW);
    let sge = [sink.sge(0, 4)];
    let read = SendWr::new(
        1,
        SendOp::RdmaRead {
            remote_addr: source.addr,
            rkey: source.rkey,
        },
        Payload::Sges(&sge),
    );
    let t0 = c.now();
    // librxe's post takes it (no check of the opcode against the QP type); rxe's requester
    // finds no UC opcode for it and fails it, which moves the QP to ERROR.
    ok(c.post_send(conn.client.qp, &read), "a UC read is posted");
    send_bytes(c, &conn.client, 2, SendOp::Send, b"after");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, Duration::ZERO);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (
            1,
            WcStatus::LOC_QP_OP_ERR,
            WcOpcode::RdmaRead,
            0,
            conn.client.qpn
        ),
    );
    let wc = next_completion(c, &conn.client);
    assert_wc(wc, &conn.client, 2, WcStatus::WR_FLUSH_ERR, WcOpcode::Send);
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    // Nothing went on the wire: the server's QP is untouched, its receive still posted.
    ok(s.sleep(Duration::from_secs(10)), "sleep");
    assert!(drain(s, &conn.server).is_empty());
    assert_eq!(ok(s.query_qp_state(conn.server.qp), "query"), QpState::Rts);
    let mut got = [0u8; 4];
    ok(c.mr_read(sink.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"....", "nothing was read");
}

#[test]
fn uc_a_lost_send_completes_at_the_sender_and_is_never_delivered() {
    let bed = bed(103);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_uc(&bed, 7503);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    post_recv_all(s, conn.server.qp, 10, &rx);
    post_recv_all(s, conn.server.qp, 11, &rx);
    bed.fabric.drop_data_packets(1).expect("outside a run");
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"lost");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, Duration::ZERO);
    assert_wc(wc, &conn.client, 1, WcStatus::SUCCESS, WcOpcode::Send);
    assert_eq!(wc.byte_len, 4);

    // The next message takes the first receive; the lost one is not recovered.
    send_bytes(c, &conn.client, 2, SendOp::Send, b"next!");
    assert_eq!(next_completion(c, &conn.client).status, WcStatus::SUCCESS);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US);
    assert_wc(wc, &conn.server, 10, WcStatus::SUCCESS, WcOpcode::Recv);
    assert_eq!(wc.byte_len, 5);
    let mut got = [0u8; 5];
    ok(s.mr_read(rx.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"next!");

    // No retransmission, ever: the second receive stays posted, nothing more completes.
    ok(s.sleep(10 * RETRY), "sleep");
    assert!(drain(s, &conn.server).is_empty(), "delivered at most once");
    assert!(drain(c, &conn.client).is_empty());
    assert_both_ready(&conn, s, c);
    let trace = bed.fabric.trace_text();
    assert_eq!(trace.matches("(targeted)").count(), 1, "{trace}");
}

#[test]
fn uc_on_rxe_a_message_without_receive_or_with_a_bad_rkey_is_dropped_one_too_long_fails_the_receive(
) {
    let bed = bed(104);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_uc(&bed, 7504);
    let target = region(s, conn.server.pd, 8, 0, LW | AccessFlags::REMOTE_WRITE);

    // No receive posted: no RNR NAK, no retry; the sender completes at once all the same.
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"anyone?");
    let imm = SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.rkey,
        imm: 1,
    };
    send_bytes(c, &conn.client, 2, imm, b"w");
    uc_sends_complete_at_once(c, &conn.client, t0, [1, 2]);
    ok(s.sleep(10 * RNR), "sleep");
    assert!(drain(s, &conn.server).is_empty());
    assert!(drain(c, &conn.client).is_empty());
    let mut got = [0u8; 1];
    ok(s.mr_read(target.handle, 0, &mut got), "mr_read");
    assert_eq!(
        got,
        [0],
        "a write with immediate data and no receive writes nothing"
    );

    // A bad rkey: dropped, the receive stays posted for the next message (measured).
    let rx = region(s, conn.server.pd, 4, 0, LW);
    post_recv_all(s, conn.server.qp, 10, &rx);
    let bad = SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.rkey ^ 0x5a5a,
        imm: 2,
    };
    send_bytes(c, &conn.client, 4, bad, b"bad");
    let t1 = c.now();
    send_bytes(c, &conn.client, 5, SendOp::Send, b"fits");
    uc_sends_complete_at_once(c, &conn.client, t1, [4, 5]);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t1, 5 * US);
    assert_wc(wc, &conn.server, 10, WcStatus::SUCCESS, WcOpcode::Recv);
    assert_eq!((wc.byte_len, wc.imm), (4, None));
    let mut got = [0u8; 4];
    ok(s.mr_read(rx.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"fits");
    ok(s.sleep(10 * RNR), "sleep");
    assert!(drain(s, &conn.server).is_empty());
    assert_both_ready(&conn, s, c);

    // Too long for the receive: rxe's copy fails, the receive completes LOC_QP_OP_ERR and
    // the receiver's QP enters ERROR, flushing the receive behind it; the sender hears
    // nothing (measured, rxe-6.1 and 6.12).
    post_recv_all(s, conn.server.qp, 11, &rx);
    post_recv_all(s, conn.server.qp, 12, &rx);
    let t2 = c.now();
    send_bytes(c, &conn.client, 3, SendOp::Send, b"too long");
    send_bytes(c, &conn.client, 6, SendOp::Send, b"fits");
    uc_sends_complete_at_once(c, &conn.client, t2, [3, 6]);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t2, 5 * US);
    assert_wc(
        wc,
        &conn.server,
        11,
        WcStatus::LOC_QP_OP_ERR,
        WcOpcode::Recv,
    );
    let flushed = next_completion(s, &conn.server);
    assert_eq!(s.now() - t2, 5 * US);
    assert_eq!(
        (flushed.wr_id, flushed.status),
        (12, WcStatus::WR_FLUSH_ERR)
    );
    assert_eq!(
        ok(s.query_qp_state(conn.server.qp), "query"),
        QpState::Error
    );
    ok(s.sleep(10 * RNR), "sleep");
    assert!(drain(s, &conn.server).is_empty());
    assert!(drain(c, &conn.client).is_empty());
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
}

#[test]
fn uc_a_receive_with_a_bad_lkey_fails_there_and_the_sender_knows_nothing() {
    let bed = bed(105);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected_uc(&bed, 7505);
    let readonly = region(s, conn.server.pd, 8, 0, AccessFlags::NONE);
    post_recv_all(s, conn.server.qp, 1, &readonly);
    let t0 = c.now();
    send_bytes(c, &conn.client, 2, SendOp::Send, b"data");
    let wc = next_completion(c, &conn.client);
    assert_eq!(c.now() - t0, Duration::ZERO);
    assert_wc(wc, &conn.client, 2, WcStatus::SUCCESS, WcOpcode::Send);
    let wc = next_completion(s, &conn.server);
    assert_eq!(s.now() - t0, 5 * US);
    assert_wc(wc, &conn.server, 1, WcStatus::LOC_QP_OP_ERR, WcOpcode::Recv);
    assert_eq!(
        ok(s.query_qp_state(conn.server.qp), "query"),
        QpState::Error
    );
    ok(c.sleep(10 * RETRY), "sleep");
    assert!(drain(c, &conn.client).is_empty(), "no NAK comes back");
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
}

/// siw (`siw_create_qp`, `siw_create_cq`) rounds each queue up to a power of two (3 → 4, an
/// empty receive queue stays empty) and needs a send queue; rxe (the RoCE bed above) keeps one
/// slot of its ring empty (2 → 3) and takes an empty send queue.
#[test]
fn iwarp_queues_are_powers_of_two_and_need_a_send_queue() {
    let bed = SimBed::with_transport(24, Transport::Iwarp);
    let (s, c) = (bed.server(), bed.client());
    let setup = Setup {
        cap: QpCap {
            max_send_wr: 3,
            max_recv_wr: 5,
            ..QpCap::default()
        },
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr(7496), &setup);
    let cap = ok(s.query_qp_cap(conn.server.qp), "query_qp_cap");
    assert_eq!((cap.max_send_wr, cap.max_recv_wr), (4, 8));
    let rx = region(s, conn.server.pd, 8, 0, LW);
    expect_receive_queue_holds(s, conn.server.qp, &rx, 8);

    let ch = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(ch), 0, PortSpace::TCP), "create_id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let mut no_send = QpInitAttr::new(QpType::Rc);
    no_send.cap.max_send_wr = 0;
    expect_errno(c.create_qp(id, &no_send), Call::CreateQp, Errno::EINVAL);
    let mut no_recv = QpInitAttr::new(QpType::Rc);
    no_recv.cap.max_recv_wr = 0;
    let qpn = ok(
        c.create_qp(id, &no_recv),
        "create_qp without a receive queue",
    );
    assert_ne!(qpn, 0);
    let qp = ok(c.qp(id), "id->qp").expect("the id's QP");
    let cap = ok(c.query_qp_cap(qp), "query_qp_cap");
    assert_eq!((cap.max_send_wr, cap.max_recv_wr), (16, 0));
}

/// On rxe an empty send queue is allowed (`rxe_qp_chk_cap` has no lower bound) and stays
/// empty: `rxe_queue_init` makes a ring of one slot, kept empty.
#[test]
fn roce_takes_an_empty_send_queue() {
    let bed = bed(25);
    let c = bed.client();
    let ch = ok(c.create_event_channel(), "channel");
    let id = ok(c.create_id(Some(ch), 0, PortSpace::TCP), "create_id");
    ok(
        c.bind_addr(id, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let mut no_send = QpInitAttr::new(QpType::Rc);
    no_send.cap.max_send_wr = 0;
    ok(c.create_qp(id, &no_send), "create_qp without a send queue");
    let qp = ok(c.qp(id), "id->qp").expect("the id's QP");
    let cap = ok(c.query_qp_cap(qp), "query_qp_cap");
    assert_eq!((cap.max_send_wr, cap.max_recv_wr), (0, 31));
}

/// iWARP over external QPs, both sides (cma.c `cma_connect_iw`/`cma_accept_iw` pass
/// `conn_param->qp_num`, iwcm.c `iw_cm_connect`/`iw_cm_accept` look it up with `iw_get_qp`):
/// the transcript real siw gives on Linux 6.1 and 6.12 (backend-verbs/tests/iwarp_datapath.rs
/// compares with the same lines), step by step: the QP states, `init_qp_attr`'s answers, the
/// connects naming QP 0 or an unknown QP (EINVAL), a send and an RDMA write, the flushes of
/// the disconnect.
#[test]
fn iwarp_connection_over_external_qps_is_the_one_siw_gives() {
    use cmtwin_sim::KernelProfile;
    use cmtwin_tests::iwarp_external_qp::{
        connection_over_external_qps, on_siw_6_1, CONNECTION_ON_SIW_6_12,
    };
    for (kernel, expected) in [
        (KernelProfile::Linux61, on_siw_6_1(CONNECTION_ON_SIW_6_12)),
        (
            KernelProfile::Linux612,
            CONNECTION_ON_SIW_6_12
                .iter()
                .map(|l| l.to_string())
                .collect(),
        ),
    ] {
        let config = SimConfig::for_kernel(kernel);
        let bed = SimBed::with_config(31, Transport::Iwarp, config);
        let t = connection_over_external_qps(bed.server(), bed.client(), addr(7601));
        assert_eq!(t.0, expected, "{kernel:?}");
    }
}

/// On iWARP `connect` names the QP the iWARP CM drives: QP 0 or a number no QP of the id's
/// device has is EINVAL, named after the call, with nothing sent and the id still
/// ROUTE_RESOLVED; an id without QP and without parameters has no QP to name (EINVAL too).
#[test]
fn iwarp_connect_naming_no_qp_is_einval() {
    let bed = SimBed::with_transport(33, Transport::Iwarp);
    let (s, c) = (bed.server(), bed.client());
    let listener = cmtwin_tests::steps::listen_on(&bed, PortSpace::TCP, 4);
    let client = cmtwin_tests::steps::resolved_client(&bed, PortSpace::TCP, listener.addr);
    let e = expect_errno(
        c.connect(client.id, Some(&ConnParam::default())),
        Call::Connect,
        Errno::EINVAL,
    );
    assert!(e.detail.contains("iw_get_qp"), "{e}");
    let unknown = ConnParam {
        qp_num: 0x00ab_cdef,
        ..ConnParam::default()
    };
    expect_errno(
        c.connect(client.id, Some(&unknown)),
        Call::Connect,
        Errno::EINVAL,
    );
    expect_errno(c.connect(client.id, None), Call::Connect, Errno::EINVAL);
    expect_no_event(s, listener.channel);
    expect_no_event(c, client.channel);
    cmtwin_tests::steps::teardown(c, &[client.id], client.channel);
    cmtwin_tests::steps::teardown(s, &[listener.id], listener.channel);
}

/// iWARP external QPs in the wrong state or gone, as on real siw (the transcripts
/// backend-verbs/tests/iwarp_datapath.rs measured on siw-6.1 and siw-6.12): an accept naming
/// an unknown QP (EINVAL, the request rejected: REJECTED -ECONNRESET), an accept whose QP the
/// application moved to ERROR (EINVAL, REJECTED -ECONNRESET), a connect whose QP is in ERROR
/// (the acceptor ESTABLISHED then DISCONNECTED, the initiator CONNECT_ERROR -EINVAL), an
/// initiator that destroys its QP before the reply (the accept ECONNRESET, the initiator
/// UNREACHABLE -ETIMEDOUT at siw's MPA timeout).
#[test]
fn iwarp_external_qps_in_the_wrong_state_fail_as_on_siw() {
    use cmtwin_sim::KernelProfile;
    use cmtwin_tests::iwarp_external_qp::{on_siw_6_1, wrong_external_qps, WRONG_ON_SIW_6_12};
    let all = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    for (kernel, expected) in [
        (KernelProfile::Linux61, on_siw_6_1(WRONG_ON_SIW_6_12)),
        (KernelProfile::Linux612, all(WRONG_ON_SIW_6_12)),
    ] {
        let config = SimConfig::for_kernel(kernel);
        let bed = SimBed::with_config(32, Transport::Iwarp, config);
        let mut port = 7610;
        let mut next = || {
            port += 1;
            addr(port)
        };
        let t = wrong_external_qps(bed.server(), bed.client(), &mut next);
        assert_eq!(t.0, expected, "{kernel:?}");
    }
}

/// `rdma_create_ep` with the program's PD and CQ on both sides (the passive one's kept for
/// `get_request`), C's zeroed `sq_sig_all`, and the helpers' flags
/// (`cmtwin_tests::ep_helpers`): flags 0 give no completion, the signaled send completes
/// when its ACK is back (10 µs), the inline one is checked against the granted room, and the
/// fenced send leaves only once the read's response is in, a round trip after it.
#[test]
fn create_ep_ex_keeps_the_programs_objects_and_the_helpers_take_c_flags() {
    let bed = bed(31);
    let (s, c) = (bed.server(), bed.client());
    let r =
        cmtwin_tests::ep_helpers::create_ep_ex_and_send_flags(s, c, addr(7471), SimBed::CLIENT_IP);
    // rxe's sizing (RoCE, Linux 6.1 profile): 4 requests hold 7, 32 inline bytes are 2
    // entries' room; the depths written back are those asked.
    assert_eq!((r.granted, r.queried), (WRITTEN_61, HELD));
    let sends: Vec<(u64, WcOpcode)> = r.sends.iter().map(|&(w, o, _)| (w, o)).collect();
    assert_eq!(
        sends,
        [
            (2, WcOpcode::Send),
            (3, WcOpcode::Send),
            (4, WcOpcode::RdmaRead),
            (5, WcOpcode::Send)
        ]
    );
    let times: Vec<Duration> = r.sends.iter().map(|&(_, _, t)| t).collect();
    assert_eq!(times, [10 * US, 20 * US, 30 * US, 40 * US]);
    assert_eq!(r.receives, [(10, 8), (11, 8), (12, 32), (13, 8)]);
}

/// What a QP asking for `cmtwin_tests::ep_helpers::ASKED` holds on rxe (and the RoCE
/// profiles): 4 requests hold 7, 32 inline bytes are 2 entries' room.
const HELD: QpCap = QpCap {
    max_send_wr: 7,
    max_recv_wr: 7,
    max_send_sge: 2,
    max_recv_sge: 1,
    max_inline_data: 32,
};

/// What `ibv_create_qp` writes back for it on rxe's Linux 6.1: the depths asked.
const WRITTEN_61: QpCap = QpCap {
    max_send_wr: 4,
    max_recv_wr: 4,
    ..HELD
};

/// `rdma_create_ep` writes the addrinfo's QP type and the capacities granted back into the
/// caller's attributes (`cmtwin_tests::ep_helpers`), as rxe writes them per kernel: the depths
/// asked on Linux 6.1, those the queues hold on 6.12; the entries and inline room made on
/// both.
#[test]
fn create_ep_writes_back_the_qp_type_and_the_granted_capacities() {
    let ep = cmtwin_tests::ep_helpers::create_ep_writes_back_what_was_granted;
    let bed61 = bed(32);
    assert_eq!(ep(bed61.client(), addr(7471)), (WRITTEN_61, HELD));
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::linux612()
    };
    let bed612 = SimBed::with_config(32, Transport::Roce, config);
    assert_eq!(ep(bed612.client(), addr(7471)), (HELD, HELD));
}

/// On a QP of an SRQ, rxe makes no receive queue, and `ibv_create_qp` writes back the
/// receive capacities asked whatever the kernel; on the 6.12 profile the send depth is the
/// one held (7 for 4).
#[test]
fn create_ep_ex_with_an_srq_writes_back_the_receive_capacities_asked() {
    let config = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::linux612()
    };
    let bed = SimBed::with_config(32, Transport::Roce, config);
    let c = bed.client();
    let dev = ok(c.create_id(None, 0, PortSpace::TCP), "create_id");
    ok(
        c.bind_addr(dev, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let pd = ok(c.alloc_pd(dev), "alloc_pd");
    let cq = ok(c.create_cq(dev, 64, None), "create_cq");
    let (srq, _) = ok(
        c.create_srq(pd, &cmtwin::verbs::SrqAttr::new(16, 1)),
        "create_srq",
    );
    let mut attr = QpInitAttrEx::rc(pd, cq, cq);
    attr.cap = cmtwin_tests::ep_helpers::ASKED;
    attr.srq = Some(srq);
    let active = cmtwin::AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(addr(7471)));
    let id = ok(c.create_ep_ex(&active, &mut attr), "create_ep_ex");
    // The send side as made (depth 7, two entries, the inline room); the receive side asked.
    let written = QpCap {
        max_send_wr: 7,
        max_send_sge: 2,
        ..cmtwin_tests::ep_helpers::ASKED
    };
    assert_eq!(attr.cap, written);
    ok(c.destroy_ep(id), "destroy_ep");
}

/// A send posted in INIT, as rxe takes it (`cmtwin_tests::early_send`): EINVAL, but kept in
/// the queue; RTS does not send it, the next post sends both in order. Times from the second
/// post: both requests leave with it, one packet time (1 µs) apart, reach the server one
/// latency (5 µs) later and are acknowledged one round trip (10 µs) after they left.
#[test]
fn a_send_posted_before_rts_is_refused_kept_and_sent_with_the_next_post() {
    use cmtwin_tests::early_send::{send_posted_before_rts, EARLY_SEND_ON_RXE};
    for kernel in [KernelProfile::Linux61, KernelProfile::Linux612] {
        let mut config = SimConfig::for_kernel(kernel);
        config.wire_jitter = Duration::ZERO;
        let bed = SimBed::with_config(43, Transport::Roce, config);
        let o = send_posted_before_rts(bed.server(), bed.client(), addr(7702));
        for (line, at) in &o.times {
            eprintln!("{at:>12?}  {line}");
        }
        assert_eq!(o.transcript.0, EARLY_SEND_ON_RXE, "{kernel:?}");
        let us = Duration::from_micros;
        for (line, at) in [
            ("server wc: (10 success (0) Recv 16)", us(5)),
            ("server wc: (11 success (0) Recv 16)", us(6)),
            ("client wc: (1 success (0) Send 16)", us(10)),
            ("client wc: (2 success (0) Send 16)", us(11)),
        ] {
            assert_eq!(o.time_of(line), Some(at), "{line}");
        }
    }
}

/// librdmacm's vectored helpers and inline posts from plain bytes
/// (`cmtwin_tests::vec_helpers`): a send gathered from two regions lands over a three-entry
/// receive, a write gathers three entries, a read scatters into three, plain bytes go inline
/// (send and write), a send of no entries consumes a receive of none, two entries go inline
/// (copied when posted); each completes one round trip (10 µs) after its post (the send of
/// no bytes too). Too many entries, too many inline bytes, an inline entry outside its
/// region and INLINE on a vectored read are EINVAL.
#[test]
fn vectored_and_inline_helpers_gather_scatter_and_complete_in_a_round_trip() {
    use cmtwin_tests::vec_helpers::{vectored_and_inline_helpers, Seen, ASKED, RECEIVES, SENDS};
    let bed = bed(33);
    let r = vectored_and_inline_helpers(bed.server(), bed.client(), addr(7472));
    // rxe's sizing: 8 requests hold 15, three entries of 16 bytes are 48 bytes' room.
    let held = QpCap {
        max_send_wr: 15,
        max_recv_wr: 15,
        max_inline_data: 48,
        ..ASKED
    };
    assert_eq!((r.client_cap, r.server_cap), (held, held));
    // Each completes a round trip (10 µs) after its post.
    let sends: Vec<Seen> = SENDS
        .iter()
        .map(|&(wr_id, opcode, byte_len)| Seen {
            wr_id,
            opcode,
            byte_len,
            after: 10 * US,
        })
        .collect();
    assert_eq!(r.sends, sends);
    assert_eq!(r.receives, RECEIVES);
}

/// `rdma_post_ud_send` with `mr` NULL and `IBV_SEND_INLINE` (`post_ud_send_inline`,
/// `cmtwin_tests::vec_helpers::ud_inline_send`): the datagram of plain bytes reaches the
/// server after its GRH space; one byte above the UD QP's 16 inline bytes (one entry's room,
/// rxe's sizing) is EINVAL. The send completes as it is transmitted.
#[test]
fn a_ud_send_of_plain_bytes_goes_inline() {
    let bed = bed(34);
    let (cap, after) =
        cmtwin_tests::vec_helpers::ud_inline_send(bed.server(), bed.client(), addr(7473));
    assert_eq!(cap.max_inline_data, 16);
    assert_eq!(after, Duration::ZERO);
}

/// rxe's endless transport retries (`retry_count` 7) toward a peer that can never answer (its
/// device removed) change nothing by themselves: a client blocked on its send's completion is
/// told of the deadlock (EDEADLK) as soon as the removed device has dropped the first
/// transmission, and `run_until_idle` returns, where both used to run the retries for ever.
#[test]
fn endless_transport_retries_to_a_silent_peer_end_in_a_deadlock() {
    let bed = bed(17);
    let c = bed.client();
    let conn = connected(&bed);
    remove_server_device(&bed);
    let t0 = c.now();
    send_bytes(c, &conn.client, 1, SendOp::Send, b"hello?");
    // Reported once the first packet is dropped.
    expect_deadlock_on_the_completion(&bed, &conn, t0 + 5 * US);
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
}

/// The same inside `Fabric::run`, toward a peer whose QP was destroyed without a disconnect:
/// rxe drops what arrives for a QP that no longer exists, so the client's send (retry count
/// 7) is resent for ever and its process, blocked on the completion, is reported deadlocked
/// once the first transmission is dropped, with the reason in the trace.
#[test]
fn endless_transport_retries_to_a_destroyed_qp_end_a_run_in_a_deadlock() {
    let bed = bed(18);
    let conn = connected(&bed);
    let (client, server) = (conn.client, conn.server);
    ok(bed.server().destroy_qp(server.id), "destroy_qp");
    let done = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = done.clone();
    bed.fabric.spawn("client", "sender", move |c| {
        send_bytes(&c, &client, 1, SendOp::Send, b"anyone?");
        c.req_notify_cq(client.cq, false)?;
        let err = c
            .get_cq_event(client.comp, Wait::Block)
            .map(drop)
            .unwrap_err();
        *seen.lock().unwrap() = Some((err.errno, c.now()));
        Ok(())
    });
    let t0 = bed.fabric.now();
    bed.fabric.run().expect("the process ends");
    assert_eq!(*done.lock().unwrap(), Some((Errno::EDEADLK, t0 + 5 * US)));
    let trace = bed.fabric.trace_text();
    assert!(
        trace.contains("retrying for ever (retry count 7 on rxe) toward peers that cannot answer"),
        "the trace says why"
    );
}
