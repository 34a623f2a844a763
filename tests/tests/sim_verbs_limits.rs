//! The data path at the edges its random sequences (`tests/sim_verbs_proptest.rs`) found: the
//! largest message, entries whose key names no region yet, and librdmacm's helpers on an id
//! that is gone. Each test pins the exact outcome on the simulator.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpAttr, QpInitAttrEx, QpState, RecvWr, SendFlags,
    SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use cmtwin::{Call, CmBackend, Errno, QpCap, Transport};
use cmtwin_tests::datapath::{connect_with, next_completion, region, Conn, Objects, Setup};
use cmtwin_tests::steps::{expect_errno, ok};
use cmtwin_tests::{SimBed, TestBed};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// A RoCE bed without wire jitter.
fn bed(seed: u64) -> SimBed {
    SimBed::jitterless(seed, Transport::Roce)
}

/// A connection whose QPs take up to 4 entries per request.
fn connected(bed: &SimBed) -> Conn {
    let setup = Setup {
        cap: QpCap {
            max_send_sge: 4,
            max_recv_sge: 4,
            ..QpCap::default()
        },
        ..Setup::default()
    };
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7471);
    connect_with(bed.server(), bed.client(), addr, &setup)
}

/// An entry of `len` bytes at the start of a region of key `lkey` and address `addr`.
fn entry(addr: u64, lkey: u32, len: u32) -> Sge {
    Sge {
        addr,
        length: len,
        lkey,
    }
}

/// A connected pair, the server's 10 bytes `0123456789` open to remote reads, and 8 bytes of
/// `.` on the client to read them into.
fn read_source_and_sink(bed: &SimBed) -> (Conn, MemoryRegion, MemoryRegion) {
    let conn = connected(bed);
    let source = ok(
        bed.server().reg_mr(
            conn.server.pd,
            b"0123456789".to_vec(),
            AccessFlags::REMOTE_READ,
        ),
        "reg_mr",
    );
    let sink = region(bed.client(), conn.client.pd, 8, b'.', LW);
    (conn, source, sink)
}

/// Moves the client's QP to RESET and back through INIT and RTR to RTS with its id's
/// attributes (`rdma_init_qp_attr`), as an application recovering a QP does.
fn reset_and_back_to_rts<B: DataPath + CmBackend>(c: &B, conn: &Conn) {
    reset_and_back_to_rts_with(c, conn, |_| {});
}

/// [`reset_and_back_to_rts`], each attribute set first changed by `change`.
fn reset_and_back_to_rts_with<B: DataPath + CmBackend>(
    c: &B,
    conn: &Conn,
    change: impl Fn(&mut QpAttr),
) {
    for state in [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts] {
        let mut attr = match state {
            QpState::Reset => QpAttr {
                qp_state: Some(QpState::Reset),
                ..QpAttr::default()
            },
            s => ok(c.init_qp_attr(conn.client.id, s), "init_qp_attr"),
        };
        change(&mut attr);
        ok(c.modify_qp(conn.client.qp, &attr), "modify_qp");
    }
}

#[test]
fn requests_longer_than_the_largest_message_are_refused_when_posted() {
    let bed = bed(1);
    let c = bed.client();
    let conn = connected(&bed);
    let mr = region(c, conn.client.pd, 64, 7, LW | AccessFlags::REMOTE_READ);
    let half = entry(mr.addr, mr.lkey, 0x8000_0000);
    let read = SendOp::RdmaRead {
        remote_addr: 0x1000,
        rkey: 1,
    };
    // Two entries of 2^31 bytes: 2^32 together (the sum once overflowed a u32).
    let two = [half, half];
    expect_errno(
        c.post_send(conn.client.qp, &SendWr::new(1, read, Payload::Sges(&two))),
        Call::PostSend,
        Errno::EINVAL,
    );
    let huge = [entry(mr.addr, mr.lkey, u32::MAX); 4];
    expect_errno(
        c.post_send(
            conn.client.qp,
            &SendWr::new(2, SendOp::Send, Payload::Sges(&huge)),
        ),
        Call::PostSend,
        Errno::EINVAL,
    );
    let one = [half];
    let recv = |wr_id, sg_list| RecvWr { wr_id, sg_list };
    expect_errno(
        c.post_recv(conn.client.qp, &recv(3, &one)),
        Call::PostRecv,
        Errno::EINVAL,
    );
    // Nothing refused holds the region.
    assert_eq!(ok(c.dereg_mr(mr.handle), "dereg_mr"), vec![7; 64]);

    // Exactly 2^31 bytes is a message (outside the region: a protection error when the
    // device reaches it); a receive must stay below it.
    let mr = region(c, conn.client.pd, 64, 7, LW);
    let largest = [entry(mr.addr, mr.lkey, 0x8000_0000)];
    let wr = SendWr::new(4, SendOp::Send, Payload::Sges(&largest));
    ok(c.post_send(conn.client.qp, &wr), "a send of 2^31 bytes");
    let below = [entry(mr.addr, mr.lkey, 0x7fff_ffff)];
    ok(
        c.post_recv(conn.client.qp, &recv(5, &below)),
        "a receive below 2^31 bytes",
    );
    let wc = next_completion(c, &conn.client);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::LOC_PROT_ERR));
    let wc = next_completion(c, &conn.client);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WR_FLUSH_ERR));
    assert_eq!(ok(c.dereg_mr(mr.handle), "dereg_mr"), vec![7; 64]);
}

#[test]
fn an_entry_whose_key_names_no_region_never_reaches_a_region_registered_later() {
    let bed = bed(2);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let first = region(c, conn.client.pd, 64, 1, LW);
    // Keys and addresses are handed out in order, a guard page apart: the next region's.
    let (next_key, next_addr) = (first.lkey + 1, first.addr + 2 * 4096);
    let wr = RecvWr {
        wr_id: 1,
        sg_list: &[entry(next_addr, next_key, 16)],
    };
    ok(
        c.post_recv(conn.client.qp, &wr),
        "a receive under a key of no region",
    );
    let later = region(c, conn.client.pd, 64, 2, LW);
    assert_eq!((later.lkey, later.addr), (next_key, next_addr));

    let tx = region(s, conn.server.pd, 8, 0x55, AccessFlags::NONE);
    let sge = [tx.sge(0, 8)];
    let send = SendWr::new(2, SendOp::Send, Payload::Sges(&sge));
    ok(s.post_send(conn.server.qp, &send), "post_send");
    // rxe's copy_data finds no region under the key: a malformed receive.
    let wc = next_completion(c, &conn.client);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::LOC_QP_OP_ERR, WcOpcode::Recv)
    );
    let wc = next_completion(s, &conn.server);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::REM_OP_ERR));
    // The later region was neither written nor held.
    assert_eq!(ok(c.dereg_mr(later.handle), "dereg_mr"), vec![2; 64]);
}

#[test]
fn the_helpers_name_their_call_and_enoent_for_a_destroyed_id() {
    let bed = bed(3);
    let c = bed.client();
    let conn = connected(&bed);
    let mr = region(c, conn.client.pd, 16, 0, LW);
    ok(c.disconnect(conn.client.id), "disconnect");
    ok(c.destroy_qp(conn.client.id), "destroy_qp");
    ok(c.destroy_id(conn.client.id), "destroy_id");
    let id = conn.client.id;
    // Bytes outside the region too: the dead id comes first.
    expect_errno(
        c.post_send_msg(id, 1, &mr, 8, 64, SendFlags::SIGNALED),
        Call::PostSend,
        Errno::ENOENT,
    );
    expect_errno(
        c.post_recv_msg(id, 2, &mr, 8, 64),
        Call::PostRecv,
        Errno::ENOENT,
    );
    expect_errno(
        c.post_write(id, 3, &mr, 0, 4, SendFlags::SIGNALED, 0x1000, 1),
        Call::PostSend,
        Errno::ENOENT,
    );
    expect_errno(c.get_send_comp(id), Call::PollCq, Errno::ENOENT);
    expect_errno(c.get_recv_comp(id), Call::PollCq, Errno::ENOENT);
}

#[test]
fn a_qp_reset_with_work_in_flight_and_brought_back_to_rts_sends_again() {
    let bed = bed(4);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed);
    let tx = region(c, conn.client.pd, 8, 0x42, AccessFlags::NONE);
    let sge = [tx.sge(0, 8)];
    // No receive on the server: the send is NAKed (receiver not ready) and waits.
    let send = |wr_id| SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
    ok(c.post_send(conn.client.qp, &send(1)), "post_send");
    ok(c.sleep(Duration::from_micros(20)), "sleep");
    reset_and_back_to_rts(c, &conn);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    cmtwin_tests::datapath::post_recv_all(s, conn.server.qp, 10, &rx);
    ok(
        c.post_send(conn.client.qp, &send(2)),
        "post_send after the reset",
    );
    let wc = next_completion(s, &conn.server);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (10, WcStatus::SUCCESS, 8)
    );
    let wc = next_completion(c, &conn.client);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::SUCCESS));
}

/// The kernel's table has no RESET → ERROR (`ib_modify_qp_is_ok`): rxe on 6.1 and 6.12
/// refuse it with EINVAL (measured, `cmtwin_tests::qp_modify`), and the QP stays in RESET.
#[test]
fn modify_qp_from_reset_to_error_is_refused() {
    let bed = bed(5);
    let c = bed.client();
    let conn = connected(&bed);
    let mut attr = QpInitAttrEx::rc(conn.client.pd, conn.client.cq, conn.client.cq);
    attr.cap = QpCap::default();
    let qp = ok(c.create_external_qp(&attr), "ibv_create_qp");
    assert_eq!(ok(c.query_qp_state(qp), "query"), QpState::Reset);
    let error = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    expect_errno(c.modify_qp(qp, &error), Call::ModifyQp, Errno::EINVAL);
    assert_eq!(ok(c.query_qp_state(qp), "query"), QpState::Reset);
    ok(c.destroy_external_qp(qp), "ibv_destroy_qp");
}

/// rxe's responder (`rxe_resp.c`, 6.1): a receive completion its CQ cannot hold raises
/// CQ_ERR (`rxe_cq_post`) and is a class G error, RESPST_ERR_CQ_OVERFLOW → RESPST_ERROR: the
/// QP enters ERROR before it acknowledges the send, and its other receives are flushed (their
/// completions lost to the full CQ too). The requester, unanswered, ends in RETRY_EXC_ERR.
/// The CQ, asked for 2 entries, holds 3 (`rxe_queue_init`'s ring: a power of two, one slot
/// empty).
#[test]
fn a_receive_completion_lost_to_a_full_cq_puts_the_qp_in_error() {
    let bed = bed(6);
    let (s, c) = (bed.server(), bed.client());
    let a = connected(&bed);
    let small = ok(
        s.create_cq(a.server.id, 2, Some(a.server.comp)),
        "create_cq",
    );
    let setup = Setup {
        server_objects: Some(Objects {
            pd: a.server.pd,
            comp: a.server.comp,
            cq: small,
        }),
        // 6 retries: on rxe (this RoCE bed) 7 would retry without end.
        connect: cmtwin::ConnParam {
            retry_count: 6,
            ..cmtwin::ConnParam::default()
        },
        ..Setup::default()
    };
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7472);
    let b = connect_with(s, c, addr, &setup);
    let rx = region(s, a.server.pd, 8, 0, LW);
    for wr_id in 1..=5 {
        cmtwin_tests::datapath::post_recv_all(s, b.server.qp, wr_id, &rx);
    }
    let tx = region(c, b.client.pd, 8, 0x42, AccessFlags::NONE);
    let sge = [tx.sge(0, 8)];
    for wr_id in 11..=14 {
        let wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
        ok(c.post_send(b.client.qp, &wr), "post_send");
        ok(c.sleep(Duration::from_micros(20)), "sleep");
    }
    assert_eq!(ok(s.query_qp_state(b.server.qp), "query"), QpState::Error);
    let mut cq_errors = Vec::new();
    while let Ok(event) = s.get_async_event(cmtwin::Wait::NonBlocking) {
        if event.kind != cmtwin::AsyncEvent::COMM_EST {
            cq_errors.push((event.kind, event.cq));
        }
    }
    assert_eq!(
        cq_errors,
        [(cmtwin::AsyncEvent::CQ_ERR, Some(small)); 2],
        "the fourth receive's completion and the fifth's flush"
    );
    let mut wc = [cmtwin::verbs::WorkCompletion::default(); 5];
    let got = ok(s.poll_cq(small, &mut wc), "poll_cq");
    let kept: Vec<_> = wc[..got].iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        kept,
        [
            (1, WcStatus::SUCCESS),
            (2, WcStatus::SUCCESS),
            (3, WcStatus::SUCCESS)
        ]
    );
    let sent = c.now();
    let statuses: Vec<_> = (0..4)
        .map(|_| {
            let wc = next_completion(c, &b.client);
            (wc.wr_id, wc.status)
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (11, WcStatus::SUCCESS),
            (12, WcStatus::SUCCESS),
            (13, WcStatus::SUCCESS),
            (14, WcStatus::RETRY_EXC_ERR)
        ],
        "the fourth send is never acknowledged"
    );
    // The send went out 20 µs before `sent`; its 7 transmissions (retry count 6) each wait
    // the QP's local ACK timeout, 4.096 µs × 2^19 (the CM's 19 on this RoCE bed).
    let ack_timeout = Duration::from_nanos(4096 << 19);
    assert_eq!(c.now() - sent, 7 * ack_timeout - Duration::from_micros(20));
}

/// The same stale response, shorter than the new read: it is placed, but the read waits for
/// the rest, as rxe's completer does (`do_read`: bytes still due → `COMPST_UPDATE_COMP`). The
/// new request itself is never answered: the responder, not reset, executed the old read at
/// that PSN and takes the new one for its duplicate, and a duplicate read asking for other
/// bytes than the read it kept (8 at offset 2, where it kept 2 at 0) is dropped (rxe's
/// `duplicate_request`, class D). So the read's one retry (the QP moved back with
/// `retry_cnt` 1) runs out: RETRY_EXC_ERR two local ACK timeouts after the post, the stale 2
/// bytes left in place. (The simulator first completed the read with the old response's 2
/// bytes, found by the random sequences, seeds 4242 and 99; then executed the new read as a
/// duplicate and completed it with its own 8 bytes.)
#[test]
fn a_stale_read_response_shorter_than_the_new_read_does_not_complete_it() {
    let bed = bed(6);
    let c = bed.client();
    let (conn, source, sink) = read_source_and_sink(&bed);
    let op = |at: usize| SendOp::RdmaRead {
        remote_addr: source.addr_at(at),
        rkey: source.rkey,
    };
    let two = [sink.sge(0, 2)];
    ok(
        c.post_send(conn.client.qp, &SendWr::new(1, op(0), Payload::Sges(&two))),
        "read of 2 bytes",
    );
    reset_and_back_to_rts_with(c, &conn, |attr| attr.retry_cnt = 1);
    let eight = [sink.sge(0, 8)];
    ok(
        c.post_send(
            conn.client.qp,
            &SendWr::new(2, op(2), Payload::Sges(&eight)),
        ),
        "read of 8 bytes after the reset",
    );
    let t0 = c.now();
    let wc = next_completion(c, &conn.client);
    let ack_timeout = Duration::from_nanos(4096 << 19);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, c.now() - t0),
        (2, WcStatus::RETRY_EXC_ERR, 0, 2 * ack_timeout),
    );
    let mut got = [0u8; 8];
    ok(c.mr_read(sink.handle, 0, &mut got), "mr_read");
    assert_eq!(&got, b"01......", "the stale response's 2 bytes");
}

/// A QP reset while its read is answered, and brought back to RTS with the id's attributes,
/// starts again from the same PSN: the old read's response, still on the wire, arrives for the
/// new request of that PSN. When it is longer than the new read, it cannot be placed: rxe's
/// completer fails the copy (`do_read`: `copy_data` with more bytes than the request's
/// entries) with LOC_PROT_ERR, and the QP enters ERROR. (The simulator completed the new
/// read with the old response's length; found by the random sequences, seed 20261201.)
#[test]
fn a_stale_read_response_longer_than_the_new_read_is_a_protection_error() {
    let bed = bed(6);
    let c = bed.client();
    let (conn, source, sink) = read_source_and_sink(&bed);
    let sge = [sink.sge(0, 8)];
    let op = SendOp::RdmaRead {
        remote_addr: source.addr_at(0),
        rkey: source.rkey,
    };
    ok(
        c.post_send(conn.client.qp, &SendWr::new(1, op, Payload::Sges(&sge))),
        "read of 8 bytes",
    );
    // Calls take no virtual time: the reset and the way back to RTS happen while the
    // request is on the wire.
    reset_and_back_to_rts(c, &conn);
    ok(
        c.post_send(conn.client.qp, &SendWr::new(2, op, Payload::Sges(&[]))),
        "read of 0 bytes after the reset",
    );
    let t0 = c.now();
    let wc = next_completion(c, &conn.client);
    assert_eq!(
        (wc.wr_id, wc.status, c.now() - t0),
        (2, WcStatus::LOC_PROT_ERR, Duration::from_micros(10)),
        "the old response, a round trip after the first read"
    );
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    let mut untouched = [0u8; 8];
    ok(c.mr_read(sink.handle, 0, &mut untouched), "mr_read");
    assert_eq!(&untouched, b"........", "nothing was placed");
}
