//! A newcomer's trial of the data path as RDMA software drives verbs (credit protocols with
//! unsignaled sends, one CQ shared by both queues, write with immediate, scatter/gather lists
//! with empty entries, error flushes), each run with the probe `tests/src/bin/dp_probe.rs`
//! on the simulator and on real rxe (`scripts/vm-run --kernel 6.1|6.12 --transport rxe --
//! dp_probe`), then pinned here on the simulator with exact virtual times.
//!
//! * `empty_entries_name_no_memory_whatever_their_key`: a send gathering 8, 0 (key 0xdead0000)
//!   and 4 bytes, and a receive scattering into 0 (bad key), 6, 0 and 10 bytes. rxe-6.1 and
//!   rxe-6.12: both SUCCESS, 12 bytes, the receive's 12 bytes split 6 + 6 over its non-empty
//!   entries; a send of only empty entries with bad keys is a message of no bytes, SUCCESS.
//!   rxe's `copy_data` looks up no key for an entry of no bytes. The simulator failed the send
//!   with LOC_PROT_ERR and moved the QP to ERROR.
//! * `empty_entries_of_an_rdma_read_and_write_are_not_looked_up`: the same for an RDMA
//!   write's gathered and a read's scattered entries: rxe-6.1 writes and reads the 4 bytes,
//!   both SUCCESS (rxe's `copy_data`, which skips them, copies these too).
//! * `moving_an_rc_qp_to_error_flushes_its_receives_before_its_sends_on_rxe`: three receives
//!   and three sends waiting on RNR NAKs on one CQ, the QP moved to ERROR by hand, then
//!   destroyed before the CQ is polled. rxe-6.1 and rxe-6.12: the receives' WR_FLUSH_ERR come
//!   first, then the sends' (`rxe_qp_error` schedules the responder before the completer),
//!   and destroying the QP leaves its completions in the CQ, named by its old QP number. The
//!   simulator flushed the sends first.
//! * `acknowledgements_free_the_slots_of_unsignaled_sends_before_any_poll`: 31 unsignaled
//!   sends fill a queue asked for 16 (ENOMEM for the 32nd) while the peer has no receive;
//!   once receives are posted and the RNR retries deliver them, the next post is taken
//!   though nothing was polled (rxe's completer frees a slot when the request is
//!   acknowledged). rxe-6.1 and rxe-6.12 agreed with the simulator.
//! * `write_with_immediate_consumes_receives_of_no_entries`: a 100-byte and a 0-byte RDMA
//!   write with immediate, and a 0-byte send with immediate, each into a receive of no
//!   entries: RECV_RDMA_WITH_IMM with `byte_len` 100 and 0, RECV with 0, the immediates as
//!   sent; the same on rxe-6.1 and rxe-6.12.
//!
//! Also run on both rxe beds and the same as the simulator: `dealloc_pd`, `destroy_cq`,
//! `destroy_comp_channel` with a QP using them, and `dereg_mr` of a posted receive's
//! region, are EBUSY; a QP destroyed with a send waiting on RNR and a receive posted leaves
//! nothing in its CQ; one CQ shared by three QPs for both queues, drained in batches of 4
//! SPDK's way (poll, arm, poll again, wait for the CQ event), gets the three sends before
//! the three answers; an armed CQ with nothing to come gives ETIMEDOUT.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, Payload, QpAttr, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use cmtwin::{CmBackend, ConnParam, Errno, QpCap, Transport};
use cmtwin_tests::datapath::{connect_with, drain, region, Conn, Setup};
use cmtwin_tests::steps::ok;
use cmtwin_tests::{SimBed, TestBed};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;
const US: Duration = Duration::from_micros(1);

/// A RoCE bed without wire jitter.
fn bed(seed: u64) -> SimBed {
    SimBed::jitterless(seed, Transport::Roce)
}

/// A connection whose QPs ask for 16 requests and 4 entries each way, with endless RNR
/// retries.
fn connected(bed: &SimBed, port: u16) -> Conn {
    let param = ConnParam {
        rnr_retry_count: 7,
        ..ConnParam::default()
    };
    let setup = Setup {
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 0,
        },
        connect: param.clone(),
        accept: param,
        ..Setup::default()
    };
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), port);
    connect_with(bed.server(), bed.client(), addr, &setup)
}

/// An entry of no bytes whose key names no region.
fn empty_bad(addr: u64) -> Sge {
    Sge {
        addr,
        length: 0,
        lkey: 0xdead_0000,
    }
}

/// `(wr_id, status, opcode, byte_len, imm)` of each completion.
fn summary(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, WcOpcode, u32, Option<u32>)> {
    wcs.iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm))
        .collect()
}

#[test]
fn empty_entries_name_no_memory_whatever_their_key() {
    let bed = bed(8);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed, 7481);
    let rx = region(s, conn.server.pd, 32, b'.', LW);
    let scatter = [empty_bad(0), rx.sge(0, 6), rx.sge(6, 0), rx.sge(10, 10)];
    let recv = |wr_id, sg_list| RecvWr { wr_id, sg_list };
    ok(s.post_recv(conn.server.qp, &recv(1, &scatter)), "post_recv");
    let nothing = [rx.sge(20, 0), empty_bad(5)];
    ok(s.post_recv(conn.server.qp, &recv(2, &nothing)), "post_recv");
    let tx = ok(
        c.reg_mr(conn.client.pd, b"ABCDEFGHIJKL".to_vec(), LW),
        "reg_mr",
    );
    let gather = [tx.sge(0, 8), empty_bad(0), tx.sge(8, 4)];
    let t0 = c.now();
    let send = |wr_id, sges| SendWr::new(wr_id, SendOp::Send, Payload::Sges(sges));
    ok(c.post_send(conn.client.qp, &send(20, &gather)), "post_send");
    let empties = [empty_bad(1), empty_bad(2), tx.sge(3, 0), empty_bad(4)];
    ok(
        c.post_send(conn.client.qp, &send(21, &empties)),
        "post_send",
    );
    ok(c.sleep(20 * US), "sleep");
    let sent = drain(c, &conn.client);
    assert_eq!(
        summary(&sent),
        [
            (20, WcStatus::SUCCESS, WcOpcode::Send, 12, None),
            (21, WcStatus::SUCCESS, WcOpcode::Send, 0, None),
        ]
    );
    let got = drain(s, &conn.server);
    assert_eq!(
        summary(&got),
        [
            (1, WcStatus::SUCCESS, WcOpcode::Recv, 12, None),
            (2, WcStatus::SUCCESS, WcOpcode::Recv, 0, None),
        ]
    );
    let mut bytes = [0u8; 32];
    ok(s.mr_read(rx.handle, 0, &mut bytes), "mr_read");
    assert_eq!(&bytes, b"ABCDEF....GHIJKL................");
    assert_eq!(ok(c.query_qp_state(conn.client.qp), "query"), QpState::Rts);
    assert_eq!(c.now() - t0, 20 * US);
}

#[test]
fn empty_entries_of_an_rdma_read_and_write_are_not_looked_up() {
    let bed = bed(9);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed, 7482);
    let target = region(
        s,
        conn.server.pd,
        8,
        b'-',
        LW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let tx = ok(c.reg_mr(conn.client.pd, b"wxyz".to_vec(), LW), "reg_mr");
    let write = SendOp::RdmaWrite {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    let gather = [empty_bad(0), tx.sge(0, 4)];
    let t0 = c.now();
    let wr = SendWr::new(1, write, Payload::Sges(&gather));
    ok(c.post_send(conn.client.qp, &wr), "write");
    let read = SendOp::RdmaRead {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    let sink = region(c, conn.client.pd, 4, b'.', LW);
    let scatter = [sink.sge(0, 2), empty_bad(0), sink.sge(2, 2)];
    let wr = SendWr::new(2, read, Payload::Sges(&scatter));
    ok(c.post_send(conn.client.qp, &wr), "read");
    ok(c.sleep(30 * US), "sleep");
    let done = drain(c, &conn.client);
    assert_eq!(
        summary(&done),
        [
            (1, WcStatus::SUCCESS, WcOpcode::RdmaWrite, 4, None),
            (2, WcStatus::SUCCESS, WcOpcode::RdmaRead, 4, None),
        ]
    );
    let mut bytes = [0u8; 4];
    ok(c.mr_read(sink.handle, 0, &mut bytes), "mr_read");
    assert_eq!(&bytes, b"wxyz");
    assert_eq!(c.now() - t0, 30 * US);
}

#[test]
fn moving_an_rc_qp_to_error_flushes_its_receives_before_its_sends_on_rxe() {
    let bed = bed(10);
    let c = bed.client();
    let conn = connected(&bed, 7483);
    let rx = region(c, conn.client.pd, 64, 0, LW);
    for wr_id in [101, 102, 103] {
        let sge = [rx.sge(0, 64)];
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        ok(c.post_recv(conn.client.qp, &wr), "post_recv");
    }
    // The server has no receive: the sends wait on RNR NAKs without end.
    let tx = region(c, conn.client.pd, 8, 1, LW);
    for wr_id in [201, 202, 203] {
        let sge = [tx.sge(0, 8)];
        let wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
        ok(c.post_send(conn.client.qp, &wr), "post_send");
    }
    ok(c.sleep(Duration::from_millis(5)), "sleep");
    assert!(drain(c, &conn.client).is_empty(), "nothing completes yet");
    for (what, r) in [
        ("dealloc_pd", c.dealloc_pd(conn.client.pd)),
        ("destroy_cq", c.destroy_cq(conn.client.cq)),
        (
            "destroy_comp_channel",
            c.destroy_comp_channel(conn.client.comp),
        ),
    ] {
        assert_eq!(r.expect_err(what).errno, Errno::EBUSY, "{what}");
    }
    let err = c.dereg_mr(rx.handle).expect_err("dereg_mr");
    assert_eq!(err.errno, Errno::EBUSY);
    let t0 = c.now();
    let to_error = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    ok(c.modify_qp(conn.client.qp, &to_error), "modify_qp ERROR");
    assert_eq!(
        ok(c.query_qp_state(conn.client.qp), "query"),
        QpState::Error
    );
    // Destroyed before its completions are polled: they stay in the CQ.
    ok(c.destroy_qp(conn.client.id), "destroy_qp");
    assert_eq!(c.now(), t0, "the flush takes no time");
    let flushed = drain(c, &conn.client);
    let order: Vec<(u64, WcStatus, u32)> = flushed
        .iter()
        .map(|w| (w.wr_id, w.status, w.qp_num))
        .collect();
    let f = WcStatus::WR_FLUSH_ERR;
    let q = conn.client.qpn;
    assert_eq!(
        order,
        [
            (101, f, q),
            (102, f, q),
            (103, f, q),
            (201, f, q),
            (202, f, q),
            (203, f, q),
        ]
    );
    assert_eq!(ok(c.dereg_mr(rx.handle), "dereg_mr").len(), 64);
}

#[test]
fn acknowledgements_free_the_slots_of_unsignaled_sends_before_any_poll() {
    let bed = bed(11);
    let (s, c) = (bed.server(), bed.client());
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7484);
    let param = ConnParam {
        rnr_retry_count: 7,
        ..ConnParam::default()
    };
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let setup = Setup {
        cap,
        connect: param.clone(),
        accept: param,
        ..Setup::default()
    };
    let conn = connect_with(s, c, addr, &setup);
    // The client's QP signals every request (sq_sig_all of `QpInitAttrEx::rc`): posting
    // them unsignaled is what a credit protocol does, and they report nothing when they
    // succeed only without sq_sig_all; the slots are what this checks.
    let held = ok(c.query_qp_cap(conn.client.qp), "query_qp_cap").max_send_wr;
    assert_eq!(held, 31);
    let tx = region(c, conn.client.pd, 8, 7, LW);
    let sge = [tx.sge(0, 8)];
    let quiet = |wr_id| {
        let mut wr = SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge));
        wr.signaled = false;
        wr
    };
    for wr_id in 0..31 {
        ok(c.post_send(conn.client.qp, &quiet(wr_id)), "post_send");
    }
    let full = c.post_send(conn.client.qp, &quiet(31)).expect_err("full");
    assert_eq!(full.errno, Errno::ENOMEM);
    let rx = region(s, conn.server.pd, 8, 0, LW);
    for wr_id in 0..40 {
        let sge = [rx.sge(0, 8)];
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        ok(s.post_recv(conn.server.qp, &wr), "post_recv");
    }
    // The first RNR NAK's wait (the server's RNR timer 0: 655.36 ms), then the 31 sends.
    ok(c.sleep(Duration::from_millis(700)), "sleep");
    assert_eq!(drain(s, &conn.server).len(), 31);
    ok(
        c.post_send(conn.client.qp, &quiet(32)),
        "a slot freed by its ACK",
    );
}

#[test]
fn write_with_immediate_consumes_receives_of_no_entries() {
    let bed = bed(12);
    let (s, c) = (bed.server(), bed.client());
    let conn = connected(&bed, 7485);
    let target = region(s, conn.server.pd, 128, 0, LW | AccessFlags::REMOTE_WRITE);
    for wr_id in [1, 2, 3] {
        let wr = RecvWr {
            wr_id,
            sg_list: &[],
        };
        ok(s.post_recv(conn.server.qp, &wr), "post_recv");
    }
    let tx = ok(c.reg_mr(conn.client.pd, (0..100u8).collect(), LW), "reg_mr");
    let sge = [tx.sge(0, 100)];
    let write = |imm| SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.rkey,
        imm,
    };
    let t0 = s.now();
    let qp = conn.client.qp;
    ok(
        c.post_send(
            qp,
            &SendWr::new(10, write(0x1234_5678), Payload::Sges(&sge)),
        ),
        "write",
    );
    ok(
        c.post_send(qp, &SendWr::new(11, write(7), Payload::Sges(&[]))),
        "write 0",
    );
    let send = SendWr::new(12, SendOp::SendWithImm(9), Payload::Sges(&[]));
    ok(c.post_send(qp, &send), "send 0");
    let mut got = Vec::new();
    let mut when = Vec::new();
    while got.len() < 3 && s.now() - t0 < 50 * US {
        ok(s.sleep(US), "sleep");
        for wc in drain(s, &conn.server) {
            got.push(wc);
            when.push((s.now() - t0).as_micros());
        }
    }
    assert_eq!(
        summary(&got),
        [
            (
                1,
                WcStatus::SUCCESS,
                WcOpcode::RecvRdmaWithImm,
                100,
                Some(0x1234_5678)
            ),
            (2, WcStatus::SUCCESS, WcOpcode::RecvRdmaWithImm, 0, Some(7)),
            (3, WcStatus::SUCCESS, WcOpcode::Recv, 0, Some(9)),
        ]
    );
    // Polled each microsecond: the first one latency after the posts, the others behind it.
    assert_eq!(when, [5, 6, 6], "when each receive completed");
    let mut last = [0u8; 4];
    ok(s.mr_read(target.handle, 96, &mut last), "mr_read");
    assert_eq!(last, [96, 97, 98, 99]);
}

/// On iWARP a receive of no entries is refused at its post, EINVAL, on a QP's receive queue
/// and on an SRQ alike (libsiw's `push_recv_wqe` takes 1 to 6 entries; measured on siw-6.1
/// by `dp_probe`, whose RoCE run takes it, as `write_with_immediate_consumes_receives_of_no_entries`
/// does); a receive of one entry is taken. The simulator took the empty one on iWARP too.
#[test]
fn on_iwarp_a_receive_of_no_entries_is_refused_at_its_post() {
    let bed = SimBed::jitterless(3, Transport::Iwarp);
    let conn = connected(&bed, 7720);
    let s = bed.server();
    let empty = RecvWr {
        wr_id: 1,
        sg_list: &[],
    };
    let err = s
        .post_recv(conn.server.qp, &empty)
        .expect_err("siw takes no empty receive");
    assert_eq!(
        (err.call, err.errno),
        (cmtwin::Call::PostRecv, Errno::EINVAL)
    );
    let buf = region(s, conn.server.pd, 8, 0, LW);
    let one = [buf.sge(0, 8)];
    let wr = RecvWr {
        wr_id: 2,
        sg_list: &one,
    };
    ok(s.post_recv(conn.server.qp, &wr), "a receive of one entry");

    let attr = cmtwin::verbs::SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = ok(s.create_srq(conn.server.pd, &attr), "ibv_create_srq");
    let err = s
        .post_srq_recv(srq, &empty)
        .expect_err("siw takes no empty receive on an SRQ");
    assert_eq!(
        (err.call, err.errno),
        (cmtwin::Call::PostSrqRecv, Errno::EINVAL)
    );
    ok(s.post_srq_recv(srq, &wr), "an SRQ receive of one entry");
}

/// siw's capacities (measured on siw-6.1 with a C probe of `ibv_create_qp` and
/// `ibv_query_qp`): creation writes back the capacities asked, all of them; the QP holds
/// each depth rounded up to a power of two (3 and 5 requests: 4 and 8), the entries asked,
/// and 80 inline bytes whatever was asked (`SIW_MAX_INLINE`; libsiw checks inline sends
/// against that alone); asking for 81 is EINVAL. The simulator gave rxe's
/// room rule on iWARP (one entry: 16 inline bytes, 81 taken) and wrote back what it made.
#[test]
fn siw_writes_back_what_was_asked_and_takes_80_inline_bytes_on_every_qp() {
    let bed = SimBed::jitterless(3, Transport::Iwarp);
    let c = bed.client();
    let dev = ok(
        c.create_id(None, 0, cmtwin::PortSpace::TCP),
        "create_id (device)",
    );
    ok(
        c.bind_addr(dev, SocketAddr::new(SimBed::CLIENT_IP, 0)),
        "bind",
    );
    let pd = ok(c.alloc_pd(dev), "alloc_pd");
    let cq = ok(c.create_cq(dev, 64, None), "create_cq");
    let asked = QpCap {
        max_send_wr: 3,
        max_recv_wr: 5,
        max_send_sge: 1,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let mut attr = cmtwin::verbs::QpInitAttrEx::rc(pd, cq, cq);
    attr.cap = asked;
    let active = cmtwin::AddrInfo::new(
        0,
        cmtwin::PortSpace::TCP,
        cmtwin::QpType::Rc,
        None,
        Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            7721,
        )),
    );
    let id = ok(c.create_ep_ex(&active, &mut attr), "create_ep_ex");
    assert_eq!(attr.cap, asked, "written back as asked");
    let qp = ok(c.qp(id), "id->qp").expect("a QP");
    let held = QpCap {
        max_send_wr: 4,
        max_recv_wr: 8,
        max_inline_data: 80,
        ..asked
    };
    assert_eq!(ok(c.query_qp_cap(qp), "query_qp_cap"), held);
    ok(c.destroy_ep(id), "destroy_ep");

    attr.cap = QpCap {
        max_inline_data: 81,
        ..asked
    };
    let err = c
        .create_ep_ex(&active, &mut attr)
        .expect_err("81 inline bytes are more than siw takes");
    assert_eq!(err.errno, Errno::EINVAL);
}
