//! A data path probe, written as RDMA software drives verbs (credits with unsignaled sends,
//! one CQ for many QPs polled in batches, write with immediate, scatter/gather lists with
//! empty entries, error flushes, destroying a QP with completions queued): it prints one
//! line per outcome, so that a run on the simulator and one on real verbs can be compared
//! with `diff`.
//!
//! `cargo run -p cmtwin-tests --bin dp_probe -- [roce|iwarp] [6.1|6.12]` runs it on the
//! simulator; with `CMTWIN_RDMA_ADDR` set (inside `scripts/vm-run`) on librdmacm.
//!
//! A probe, not a test: it asserts nothing, and no test run starts it (on siw it stops at
//! a refused empty receive and then waits). What it found is pinned, at exact virtual times,
//! in `tests/tests/sim_outside_trial8.rs`.

use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpAttr, QpInitAttrEx, QpState, RecvWr, SendOp,
    SendWr, Sge, WorkCompletion,
};
use cmtwin::{
    CmBackend, ConnParam, CqHandle, EventKind, PortSpace, QpCap, QpHandle, Transport, Wait,
};
use cmtwin_sim::{KernelProfile, SimConfig};
use cmtwin_tests::steps::{expect_event_for, expect_request, ok};
use cmtwin_tests::{SimBed, TestBed, VerbsBed};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// One side's objects.
#[derive(Clone, Copy)]
struct End {
    id: cmtwin::IdHandle,
    pd: cmtwin::PdHandle,
    comp: cmtwin::CompChannelHandle,
    cq: CqHandle,
    qp: QpHandle,
    qpn: u32,
}

/// How a probe connection is made.
struct Shape {
    client_cap: QpCap,
    server_cap: QpCap,
    client_sig_all: bool,
    rnr_retry: u8,
    client_cq: Option<(cmtwin::PdHandle, cmtwin::CompChannelHandle, CqHandle)>,
    server_recvs: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            client_cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            },
            server_cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 128,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 0,
            },
            client_sig_all: true,
            rnr_retry: 7,
            client_cq: None,
            server_recvs: 0,
        }
    }
}

/// The probe's output and clock.
struct Log {
    lines: Vec<String>,
    sim: bool,
}

impl Log {
    fn say(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }
}

fn wc_text(wc: &WorkCompletion) -> String {
    format!(
        "wr_id={} status={} op={:?} len={} imm={:?}",
        wc.wr_id,
        wc.status.0,
        wc.opcode,
        if wc.status.0 == 0 { wc.byte_len } else { 0 },
        wc.imm
    )
}

fn objects<B: DataPath>(
    cm: &B,
    id: cmtwin::IdHandle,
) -> (cmtwin::PdHandle, cmtwin::CompChannelHandle, CqHandle) {
    let pd = ok(cm.alloc_pd(id), "alloc_pd");
    let comp = ok(cm.create_comp_channel(id), "create_comp_channel");
    let cq = ok(cm.create_cq(id, 256, Some(comp)), "create_cq");
    (pd, comp, cq)
}

fn make_qp<B: DataPath>(
    cm: &B,
    id: cmtwin::IdHandle,
    o: (cmtwin::PdHandle, cmtwin::CompChannelHandle, CqHandle),
    cap: QpCap,
    sig_all: bool,
) -> End {
    let mut attr = QpInitAttrEx::rc(o.0, o.2, o.2);
    attr.cap = cap;
    attr.sq_sig_all = sig_all;
    let qpn = ok(cm.create_qp_ex(id, &attr), "create_qp_ex");
    let qp = ok(cm.qp(id), "qp").expect("qp");
    End {
        id,
        pd: o.0,
        comp: o.1,
        cq: o.2,
        qp,
        qpn,
    }
}

/// A connection shaped by `shape`; the server posts `server_recvs` receives of 64 bytes
/// (wr_id 1000+i) before accepting. Returns (server, client, the server's receive region).
fn connect<T: TestBed>(bed: &T, shape: &Shape) -> (End, End, MemoryRegion)
where
    T::Backend: DataPath,
{
    let (s, c) = (bed.server(), bed.client());
    let addr = std::net::SocketAddr::new(bed.server_ip(), bed.fresh_port());
    let listener = cmtwin_tests::datapath::listen_on(s, addr, PortSpace::TCP);
    let (cch, cid) = cmtwin_tests::datapath::routed_client(c, addr, PortSpace::TCP);
    let co = shape.client_cq.unwrap_or_else(|| objects(c, cid));
    let client = make_qp(c, cid, co, shape.client_cap, shape.client_sig_all);
    let param = ConnParam {
        rnr_retry_count: shape.rnr_retry,
        retry_count: 7,
        responder_resources: 4,
        initiator_depth: 4,
        ..ConnParam::default()
    };
    ok(c.connect(cid, Some(&param)), "connect");
    let req = expect_request(s, &listener);
    let so = objects(s, req.id);
    let server = make_qp(s, req.id, so, shape.server_cap, true);
    let rx = ok(
        s.reg_mr(
            server.pd,
            vec![0; 64 * shape.server_recvs.max(4) as usize],
            LW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ),
        "reg_mr",
    );
    for i in 0..shape.server_recvs {
        let sge = [rx.sge(64 * i as usize, 64)];
        ok(
            s.post_recv(
                server.qp,
                &RecvWr {
                    wr_id: 1000 + i as u64,
                    sg_list: &sge,
                },
            ),
            "post_recv",
        );
    }
    ok(s.accept(req.id, Some(&param)), "accept");
    expect_event_for(c, cch, EventKind::Established, cid, 0);
    expect_event_for(s, listener.channel, EventKind::Established, req.id, 0);
    (server, client, rx)
}

/// Polls `cq` until `n` completions or `limit` passed, sleeping 50 µs between polls.
fn wait_n<B: DataPath>(cm: &B, cq: CqHandle, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let end = cm.now() + limit;
    let mut got = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    loop {
        let k = ok(cm.poll_cq(cq, &mut wc), "poll_cq");
        got.extend_from_slice(&wc[..k]);
        if got.len() >= n || (k < wc.len() && cm.now() >= end) {
            return got;
        }
        if k == 0 {
            ok(cm.sleep(Duration::from_micros(50)), "sleep");
        }
    }
}

fn errno_of<T>(r: cmtwin::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{}", e.errno),
    }
}

/// Credits: unsignaled sends until the send queue is full (the peer has no receive yet, so
/// they wait on RNR), then receives posted: whether the acknowledgements free the slots of
/// unsignaled sends before any completion is polled.
fn credits<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let (s, c) = (bed.server(), bed.client());
    let shape = Shape {
        client_sig_all: false,
        ..Shape::default()
    };
    let (server, client, rx) = connect(bed, &shape);
    let cap = ok(c.query_qp_cap(client.qp), "query_qp_cap");
    log.say(format!(
        "credits: cap send_wr={} recv_wr={} inline={}",
        cap.max_send_wr, cap.max_recv_wr, cap.max_inline_data
    ));
    let tx = ok(c.reg_mr(client.pd, vec![7; 64], LW), "reg_mr");
    let sge = [tx.sge(0, 8)];
    let mut posted = 0;
    let full = loop {
        let mut wr = SendWr::new(posted, SendOp::Send, Payload::Sges(&sge));
        wr.signaled = false;
        match c.post_send(client.qp, &wr) {
            Ok(()) => posted += 1,
            Err(e) => break e.errno,
        }
        if posted > 200 {
            break cmtwin::Errno(0);
        }
    };
    log.say(format!("credits: {posted} unsignaled posted, then {full}"));
    for i in 0..100u32 {
        let sge = [rx.sge(64 * (i as usize % 4), 64)];
        ok(
            s.post_recv(
                server.qp,
                &RecvWr {
                    wr_id: 1000 + i as u64,
                    sg_list: &sge,
                },
            ),
            "post_recv",
        );
    }
    ok(c.sleep(Duration::from_millis(1500)), "sleep");
    let recvd = wait_n(s, server.cq, 1000, Duration::ZERO);
    log.say(format!("credits: the server received {}", recvd.len()));
    let polled = wait_n(c, client.cq, 1, Duration::ZERO);
    log.say(format!(
        "credits: after the acks the client's CQ holds {}",
        polled.len()
    ));
    let mut wr = SendWr::new(500, SendOp::Send, Payload::Sges(&sge));
    wr.signaled = false;
    log.say(format!(
        "credits: one more unsignaled after the acks: {}",
        errno_of(c.post_send(client.qp, &wr))
    ));
    let wr = SendWr::new(501, SendOp::Send, Payload::Sges(&sge));
    log.say(format!(
        "credits: a signaled one: {}",
        errno_of(c.post_send(client.qp, &wr))
    ));
    let got = wait_n(c, client.cq, 1, Duration::from_millis(50));
    for wc in &got {
        log.say(format!("credits: client wc {}", wc_text(wc)));
    }
    let mut again = 0;
    loop {
        let mut wr = SendWr::new(600 + again, SendOp::Send, Payload::Sges(&sge));
        wr.signaled = false;
        if c.post_send(client.qp, &wr).is_err() || again > 200 {
            break;
        }
        again += 1;
    }
    log.say(format!(
        "credits: after the signaled completion, {again} more posted before ENOMEM"
    ));
}

/// Write with immediate into receives of no entries, and empty messages.
fn write_imm<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let (s, c) = (bed.server(), bed.client());
    let (server, client, rx) = connect(bed, &Shape::default());
    for wr_id in [1, 2, 3] {
        ok(
            s.post_recv(
                server.qp,
                &RecvWr {
                    wr_id,
                    sg_list: &[],
                },
            ),
            "post_recv",
        );
    }
    let tx = ok(c.reg_mr(client.pd, (0..100u8).collect(), LW), "reg_mr");
    let sge = [tx.sge(0, 100)];
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: rx.addr,
        rkey: rx.rkey,
        imm: 0x1234_5678,
    };
    ok(
        c.post_send(client.qp, &SendWr::new(10, op, Payload::Sges(&sge))),
        "write imm",
    );
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: rx.addr,
        rkey: rx.rkey,
        imm: 7,
    };
    ok(
        c.post_send(client.qp, &SendWr::new(11, op, Payload::Sges(&[]))),
        "write imm 0",
    );
    ok(
        c.post_send(
            client.qp,
            &SendWr::new(12, SendOp::SendWithImm(9), Payload::Sges(&[])),
        ),
        "send imm 0",
    );
    for wc in wait_n(c, client.cq, 3, Duration::from_millis(100)) {
        log.say(format!("write_imm: client {}", wc_text(&wc)));
    }
    for wc in wait_n(s, server.cq, 3, Duration::from_millis(100)) {
        log.say(format!("write_imm: server {}", wc_text(&wc)));
    }
    let mut b = [0u8; 4];
    ok(s.mr_read(rx.handle, 96, &mut b), "mr_read");
    log.say(format!("write_imm: bytes 96..100 {b:?}"));
}

/// Scatter/gather lists with empty entries, some of them with keys that name nothing.
fn sgl<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let (s, c) = (bed.server(), bed.client());
    let (server, client, _rx) = connect(bed, &Shape::default());
    let rx = ok(s.reg_mr(server.pd, vec![b'.'; 32], LW), "reg_mr");
    let bad = |addr: u64| Sge {
        addr,
        length: 0,
        lkey: 0xdead_0000,
    };
    let rsg = [bad(0), rx.sge(0, 6), rx.sge(6, 0), rx.sge(10, 10)];
    ok(
        s.post_recv(
            server.qp,
            &RecvWr {
                wr_id: 1,
                sg_list: &rsg,
            },
        ),
        "post_recv",
    );
    let rsg2 = [rx.sge(20, 0), bad(5)];
    ok(
        s.post_recv(
            server.qp,
            &RecvWr {
                wr_id: 2,
                sg_list: &rsg2,
            },
        ),
        "post_recv",
    );
    let tx = ok(c.reg_mr(client.pd, b"ABCDEFGHIJKL".to_vec(), LW), "reg_mr");
    let ssg = [tx.sge(0, 8), bad(0), tx.sge(8, 4)];
    ok(
        c.post_send(
            client.qp,
            &SendWr::new(20, SendOp::Send, Payload::Sges(&ssg)),
        ),
        "send",
    );
    let ssg2 = [bad(1), bad(2), tx.sge(3, 0), bad(4)];
    ok(
        c.post_send(
            client.qp,
            &SendWr::new(21, SendOp::Send, Payload::Sges(&ssg2)),
        ),
        "send",
    );
    for wc in wait_n(c, client.cq, 2, Duration::from_millis(100)) {
        log.say(format!("sgl: client {}", wc_text(&wc)));
    }
    for wc in wait_n(s, server.cq, 2, Duration::from_millis(100)) {
        log.say(format!("sgl: server {}", wc_text(&wc)));
    }
    let access = LW | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let target = ok(s.reg_mr(server.pd, vec![b'-'; 8], access), "reg_mr");
    let wsg = [bad(0), tx.sge(0, 4)];
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    ok(
        c.post_send(client.qp, &SendWr::new(22, op, Payload::Sges(&wsg))),
        "write",
    );
    let sink = ok(c.reg_mr(client.pd, vec![b'.'; 4], LW), "reg_mr");
    let rsg3 = [sink.sge(0, 2), bad(0), sink.sge(2, 2)];
    let op = SendOp::RdmaRead {
        remote_addr: target.addr,
        rkey: target.rkey,
    };
    ok(
        c.post_send(client.qp, &SendWr::new(23, op, Payload::Sges(&rsg3))),
        "read",
    );
    for wc in wait_n(c, client.cq, 2, Duration::from_millis(100)) {
        log.say(format!("sgl: client {}", wc_text(&wc)));
    }
    let mut r = [0u8; 4];
    ok(c.mr_read(sink.handle, 0, &mut r), "mr_read");
    log.say(format!("sgl: read back {:?}", String::from_utf8_lossy(&r)));
    let mut b = [0u8; 32];
    ok(s.mr_read(rx.handle, 0, &mut b), "mr_read");
    log.say(format!(
        "sgl: server bytes {:?}",
        String::from_utf8_lossy(&b)
    ));
    log.say(format!(
        "sgl: qp states {:?} {:?}",
        s.query_qp_state(server.qp),
        c.query_qp_state(client.qp)
    ));
}

/// A QP moved to ERROR by hand with sends waiting on RNR and receives posted: the flush
/// order on a CQ both queues share, the states, the objects' destroys, then the QP
/// destroyed with completions unpolled.
fn flush<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let c = bed.client();
    let (_server, client, _rx) = connect(bed, &Shape::default());
    log.say(format!(
        "flush: state after connect {:?}",
        c.query_qp_state(client.qp)
    ));
    let rxc = ok(c.reg_mr(client.pd, vec![0; 64], LW), "reg_mr");
    for wr_id in [101, 102, 103] {
        let sge = [rxc.sge(0, 64)];
        ok(
            c.post_recv(
                client.qp,
                &RecvWr {
                    wr_id,
                    sg_list: &sge,
                },
            ),
            "post_recv",
        );
    }
    let tx = ok(c.reg_mr(client.pd, vec![1; 8], LW), "reg_mr");
    for wr_id in [201, 202, 203] {
        let sge = [tx.sge(0, 8)];
        ok(
            c.post_send(
                client.qp,
                &SendWr::new(wr_id, SendOp::Send, Payload::Sges(&sge)),
            ),
            "send",
        );
    }
    ok(c.sleep(Duration::from_millis(5)), "sleep");
    log.say(format!(
        "flush: before ERROR the CQ holds {}",
        wait_n(c, client.cq, 1, Duration::ZERO).len()
    ));
    log.say(format!(
        "flush: dealloc_pd {}",
        errno_of(c.dealloc_pd(client.pd))
    ));
    log.say(format!(
        "flush: dereg_mr of a posted receive's region {}",
        errno_of(c.dereg_mr(rxc.handle))
    ));
    log.say(format!(
        "flush: destroy_cq {}",
        errno_of(c.destroy_cq(client.cq))
    ));
    log.say(format!(
        "flush: destroy_comp_channel {}",
        errno_of(c.destroy_comp_channel(client.comp))
    ));
    let attr = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    log.say(format!(
        "flush: modify to ERROR {}",
        errno_of(c.modify_qp(client.qp, &attr))
    ));
    log.say(format!("flush: state {:?}", c.query_qp_state(client.qp)));
    ok(c.sleep(Duration::from_millis(5)), "sleep");
    // Leave them in the CQ and destroy the QP.
    log.say(format!(
        "flush: destroy_qp {}",
        errno_of(c.destroy_qp(client.id))
    ));
    for wc in wait_n(c, client.cq, 6, Duration::from_millis(50)) {
        log.say(format!(
            "flush: after destroy {} qpn_is_old={}",
            wc_text(&wc),
            wc.qp_num == client.qpn
        ));
    }
    log.say(format!(
        "flush: dereg_mr now {}",
        errno_of(c.dereg_mr(rxc.handle))
    ));
}

/// A QP destroyed with sends outstanding (the peer has no receive): what its CQ holds.
fn destroy_busy<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let c = bed.client();
    let (_server, client, _rx) = connect(bed, &Shape::default());
    let rxc = ok(c.reg_mr(client.pd, vec![0; 64], LW), "reg_mr");
    let sge = [rxc.sge(0, 64)];
    ok(
        c.post_recv(
            client.qp,
            &RecvWr {
                wr_id: 301,
                sg_list: &sge,
            },
        ),
        "post_recv",
    );
    let tx = ok(c.reg_mr(client.pd, vec![1; 8], LW), "reg_mr");
    let sge = [tx.sge(0, 8)];
    ok(
        c.post_send(
            client.qp,
            &SendWr::new(401, SendOp::Send, Payload::Sges(&sge)),
        ),
        "send",
    );
    ok(c.sleep(Duration::from_millis(5)), "sleep");
    log.say(format!(
        "destroy_busy: destroy_qp {}",
        errno_of(c.destroy_qp(client.id))
    ));
    for wc in wait_n(c, client.cq, 2, Duration::from_millis(50)) {
        log.say(format!("destroy_busy: after destroy {}", wc_text(&wc)));
    }
    log.say(format!(
        "destroy_busy: dereg_mr {} {}",
        errno_of(c.dereg_mr(rxc.handle)),
        errno_of(c.dereg_mr(tx.handle))
    ));
    log.say(format!(
        "destroy_busy: dealloc_pd {}",
        errno_of(c.dealloc_pd(client.pd))
    ));
}

/// One CQ (with its channel) shared by three client QPs for both queues, drained in batches
/// SPDK's way: poll; when empty arm, poll again, then wait for the CQ event.
fn shared_cq<T: TestBed>(bed: &T, log: &mut Log)
where
    T::Backend: DataPath,
{
    let (s, c) = (bed.server(), bed.client());
    // The shared objects need an id with a device: a bound throwaway id.
    let tmp_ch = ok(c.create_event_channel(), "channel");
    let tmp = ok(c.create_id(Some(tmp_ch), 0, PortSpace::TCP), "id");
    ok(
        c.bind_addr(tmp, std::net::SocketAddr::new(bed.client_ip(), 0)),
        "bind",
    );
    let pd = ok(c.alloc_pd(tmp), "alloc_pd");
    let comp = ok(c.create_comp_channel(tmp), "comp");
    let cq = ok(c.create_cq(tmp, 64, Some(comp)), "cq");
    let mut conns = Vec::new();
    for _ in 0..3 {
        let shape = Shape {
            client_cq: Some((pd, comp, cq)),
            server_recvs: 4,
            ..Shape::default()
        };
        conns.push(connect(bed, &shape));
    }
    let rx = ok(c.reg_mr(pd, vec![0; 3 * 64], LW), "reg_mr");
    let tx = ok(c.reg_mr(pd, vec![5; 16], LW), "reg_mr");
    for (i, (_, client, _)) in conns.iter().enumerate() {
        let sge = [rx.sge(64 * i, 64)];
        ok(
            c.post_recv(
                client.qp,
                &RecvWr {
                    wr_id: 10 + i as u64,
                    sg_list: &sge,
                },
            ),
            "post_recv",
        );
    }
    for (i, (_, client, _)) in conns.iter().enumerate() {
        let sge = [tx.sge(0, 4 + i as u32)];
        ok(
            c.post_send(
                client.qp,
                &SendWr::new(20 + i as u64, SendOp::Send, Payload::Sges(&sge)),
            ),
            "send",
        );
    }
    // The server answers each request it gets.
    let stx: Vec<_> = conns
        .iter()
        .map(|(server, _, _)| ok(s.reg_mr(server.pd, vec![9; 16], LW), "reg_mr"))
        .collect();
    for (i, (server, _, _)) in conns.iter().enumerate() {
        let got = wait_n(s, server.cq, 1, Duration::from_millis(100));
        log.say(format!(
            "shared_cq: server {i} got {}",
            got.iter().map(wc_text).collect::<Vec<_>>().join("; ")
        ));
        let sge = [stx[i].sge(0, 10 + i as u32)];
        ok(
            s.post_send(
                server.qp,
                &SendWr::new(
                    30 + i as u64,
                    SendOp::SendWithImm(i as u32),
                    Payload::Sges(&sge),
                ),
            ),
            "reply",
        );
    }
    let mut seen = Vec::new();
    let mut events = 0;
    let mut batch = [WorkCompletion::default(); 4];
    while seen.len() < 6 {
        let n = ok(c.poll_cq(cq, &mut batch), "poll_cq");
        if n > 0 {
            seen.extend_from_slice(&batch[..n]);
            continue;
        }
        ok(c.req_notify_cq(cq, false), "req_notify_cq");
        let n = ok(c.poll_cq(cq, &mut batch), "poll_cq");
        if n > 0 {
            seen.extend_from_slice(&batch[..n]);
            continue;
        }
        match c.get_cq_event(comp, Wait::Timeout(Duration::from_millis(200))) {
            Ok(fired) => {
                events += 1;
                ok(c.ack_cq_events(fired, 1), "ack");
            }
            Err(e) => {
                log.say(format!("shared_cq: wait ended {}", e.errno));
                break;
            }
        }
    }
    let qpns: Vec<u32> = conns.iter().map(|(_, cl, _)| cl.qpn).collect();
    let mut sends: Vec<String> = Vec::new();
    let mut recvs: Vec<String> = Vec::new();
    for wc in &seen {
        let qi = qpns.iter().position(|&q| q == wc.qp_num).map_or(9, |i| i);
        let line = format!("qp{qi} {}", wc_text(wc));
        match wc.opcode {
            cmtwin::verbs::WcOpcode::Send => sends.push(line),
            _ => recvs.push(line),
        }
    }
    sends.sort();
    recvs.sort();
    for l in sends.iter().chain(recvs.iter()) {
        log.say(format!("shared_cq: {l}"));
    }
    log.say(format!(
        "shared_cq: {} completions, sends before receives: {}",
        seen.len(),
        seen.iter()
            .take(3)
            .all(|w| w.opcode == cmtwin::verbs::WcOpcode::Send)
    ));
    let _ = events;
    // One more arming with nothing to come: no event.
    ok(c.req_notify_cq(cq, false), "arm");
    log.say(format!(
        "shared_cq: an armed idle CQ gives {}",
        errno_of(c.get_cq_event(comp, Wait::Timeout(Duration::from_millis(20))))
    ));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = std::env::var("PROBE").ok();
    if std::env::var(VerbsBed::ADDR_ENV).is_ok() {
        let bed = VerbsBed::from_env();
        println!("bed: real {:?}", bed.id());
        run(&bed, false, only.as_deref());
    } else {
        let transport = match args.first().map(String::as_str) {
            Some("iwarp") => Transport::Iwarp,
            _ => Transport::Roce,
        };
        let kernel = match args.get(1).map(String::as_str) {
            Some("6.12") => KernelProfile::Linux612,
            _ => KernelProfile::Linux61,
        };
        let config = SimConfig {
            wire_jitter: Duration::ZERO,
            ..SimConfig::for_kernel(kernel)
        };
        let bed = SimBed::with_config(1, transport, config);
        println!("bed: sim {transport:?} {kernel:?}");
        run(&bed, true, only.as_deref());
    }
}

/// One probe scenario: its bed and the log it writes to.
type Scenario<T> = fn(&T, &mut Log);

/// Runs the scenarios `only` names (all without it) on `bed`.
fn run<T: TestBed>(bed: &T, sim: bool, only: Option<&str>)
where
    T::Backend: DataPath,
{
    let mut log = Log {
        lines: Vec::new(),
        sim,
    };
    let all: [(&str, Scenario<T>); 6] = [
        ("credits", credits::<T>),
        ("write_imm", write_imm::<T>),
        ("sgl", sgl::<T>),
        ("flush", flush::<T>),
        ("destroy_busy", destroy_busy::<T>),
        ("shared_cq", shared_cq::<T>),
    ];
    for (name, f) in all {
        if only.is_some_and(|o| !o.split(',').any(|x| x == name)) {
            continue;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(bed, &mut log)));
        if r.is_err() {
            log.say(format!("{name}: PANICKED"));
        }
    }
    let _ = log.sim;
}
