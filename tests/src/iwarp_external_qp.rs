//! iWARP connections over external QPs (QPs made with `create_external_qp`, apart from any
//! id), generic over the backend so that the simulator and real siw run the same steps.
//!
//! On iWARP the kernel's CM drives such a QP itself: `rdma_connect` and `rdma_accept` pass
//! `conn_param->qp_num` when the id has no QP (cma.c `cma_connect_iw`, `cma_accept_iw`),
//! `iw_cm_connect` and `iw_cm_accept` look it up on the id's device (`iw_get_qp`, siw's
//! `siw_get_base_qp`) and refuse an unknown number with EINVAL, and siw moves the QP to RTS
//! when MPA completes and out of it on disconnect (siw_cm.c).
//!
//! Each scenario returns a transcript: one line per step (`what: outcome`), with no QP
//! numbers, handles or times in it, so that one expected transcript holds on every bed
//! (`tests/tests/sim_datapath.rs` and `backend-verbs/tests/iwarp_datapath.rs` compare with
//! the same constants).

use std::fmt::Debug;
use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, QpAttr, QpInitAttrEx, QpState, RecvWr, SendOp,
    WorkCompletion,
};
use cmtwin::{
    ChannelHandle, ConnParam, CqHandle, EventKind, IdHandle, PdHandle, PortSpace, QpHandle, Result,
    Wait,
};

use crate::steps::{expect_event_for, ok, WAIT};

/// How long a side waits for completions that may come.
const COMPLETION_WAIT: Duration = Duration::from_secs(5);
/// How long a side waits for events and completions that should not come.
const QUIET: Duration = Duration::from_millis(200);

/// The lines of a scenario: `what: outcome`.
#[derive(Debug, Default)]
pub struct Transcript(pub Vec<String>);

impl Transcript {
    fn note(&mut self, what: &str, outcome: impl Debug) {
        self.text(what, &format!("{outcome:?}"));
    }

    /// Adds a line, echoed on stderr as it comes (a failing step still shows the ones before).
    fn text(&mut self, what: &str, outcome: &str) {
        let line = format!("{what}: {outcome}");
        eprintln!("{line}");
        self.0.push(line);
    }
}

/// A call's outcome without its values: `ok` or the errno.
fn outcome<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{}", e.errno),
    }
}

/// What `init_qp_attr` gave, without QP numbers: the access flags, the port, whether a peer
/// QP number and a path are set, and the RTS counts.
fn attr_summary(r: &Result<QpAttr>) -> String {
    match r {
        Err(e) => format!("{}", e.errno),
        Ok(a) => format!(
            "access {:#x} port {} peer {} path {} timeout {} retry {} rnr {}",
            a.access.0,
            a.ah_attr.port_num,
            a.dest_qp_num != 0,
            a.ah_attr.grh.dgid != [0; 16],
            a.timeout,
            a.retry_cnt,
            a.rnr_retry
        ),
    }
}

/// One side's verbs objects: a PD, a CQ and an external QP.
struct Ext {
    pd: PdHandle,
    cq: CqHandle,
    qp: QpHandle,
    qpn: u32,
}

fn external<B: DataPath>(cm: &B, id: IdHandle) -> Ext {
    let pd = ok(cm.alloc_pd(id), "alloc_pd");
    let cq = ok(cm.create_cq(id, 16, None), "create_cq");
    let qp = ok(
        cm.create_external_qp(&QpInitAttrEx::rc(pd, cq, cq)),
        "create_external_qp",
    );
    let qpn = ok(cm.qp_number(qp), "qp_number");
    Ext { pd, cq, qp, qpn }
}

fn with_qp(qp_num: u32) -> ConnParam {
    ConnParam {
        qp_num,
        ..ConnParam::default()
    }
}

/// The QP's state as `ibv_query_qp` reports it, or the errno.
fn qp_state<B: DataPath>(cm: &B, qp: QpHandle) -> String {
    match cm.query_qp_state(qp) {
        Ok(s) => format!("{s:?}"),
        Err(e) => format!("{}", e.errno),
    }
}

/// `init_qp_attr` for INIT, RTR and RTS.
fn note_attrs<B: DataPath>(t: &mut Transcript, cm: &B, id: IdHandle, who: &str) {
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let a = cm.init_qp_attr(id, s);
        t.text(&format!("{who} init_qp_attr {s:?}"), &attr_summary(&a));
    }
}

/// Moves `qp` with the attributes `init_qp_attr` gives for `to`, noting the move's outcome
/// and the state after it.
fn move_with_cm_attrs<B: DataPath>(
    t: &mut Transcript,
    cm: &B,
    id: IdHandle,
    qp: QpHandle,
    to: QpState,
    who: &str,
) {
    let r = cm
        .init_qp_attr(id, to)
        .and_then(|attr| cm.modify_qp(qp, &attr));
    t.text(
        &format!("{who} modify_qp {to:?} (CM's attributes)"),
        &outcome(r),
    );
    t.text(&format!("{who} QP state"), &qp_state(cm, qp));
}

/// The next event on `channel` within [`WAIT`] (`kind status`, acknowledged), or the errno.
fn next_event<B: DataPath>(cm: &B, channel: ChannelHandle) -> (String, Option<IdHandle>) {
    match cm.get_cm_event(channel, Wait::Timeout(WAIT)) {
        Ok(ev) => {
            let (kind, status, id) = (ev.kind(), ev.status(), ev.id());
            ok(cm.ack_cm_event(ev), "ack_cm_event");
            (format!("{kind} {status}"), Some(id))
        }
        Err(e) => (format!("{}", e.errno), None),
    }
}

/// The completions `cq` holds within [`COMPLETION_WAIT`] until `n` came, then any more
/// within [`QUIET`]: `(wr_id, status, opcode, byte_len)` each.
fn completions<B: DataPath>(cm: &B, cq: CqHandle, n: usize) -> Vec<String> {
    let mut got: Vec<WorkCompletion> = Vec::new();
    let mut buf = [WorkCompletion::default(); 8];
    let t0 = cm.now();
    let mut quiet_from = None;
    loop {
        let k = ok(cm.poll_cq(cq, &mut buf), "poll_cq");
        got.extend_from_slice(&buf[..k]);
        let now = cm.now();
        if got.len() >= n && quiet_from.is_none() {
            quiet_from = Some(now);
        }
        let done = match quiet_from {
            Some(q) => now - q >= QUIET,
            None => now - t0 >= COMPLETION_WAIT,
        };
        if done {
            break;
        }
        ok(cm.sleep(Duration::from_millis(5)), "sleep");
    }
    got.iter()
        .map(|w| format!("({} {} {:?} {})", w.wr_id, w.status, w.opcode, w.byte_len))
        .collect()
}

fn post_recv<B: DataPath>(cm: &B, qp: QpHandle, wr_id: u64, mr: &MemoryRegion) -> String {
    let sge = [mr.sge(0, mr.length as u32)];
    outcome(cm.post_recv(
        qp,
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
    ))
}

fn post_send<B: DataPath>(
    cm: &B,
    qp: QpHandle,
    wr_id: u64,
    op: SendOp,
    mr: &MemoryRegion,
) -> String {
    crate::iwarp_datapath::post(cm, qp, wr_id, op, mr)
}

/// A listener on `addr` and a client id resolved to it.
struct Ends {
    lch: ChannelHandle,
    lid: IdHandle,
    cch: ChannelHandle,
    cid: IdHandle,
}

fn ends<B: DataPath>(server: &B, client: &B, addr: SocketAddr) -> Ends {
    let lch = ok(server.create_event_channel(), "create_event_channel");
    let lid = ok(server.create_id(Some(lch), 0, PortSpace::TCP), "listener");
    ok(server.bind_addr(lid, addr), "bind_addr");
    ok(server.listen(lid, 4), "listen");
    let cch = ok(client.create_event_channel(), "create_event_channel");
    let cid = ok(client.create_id(Some(cch), 0, PortSpace::TCP), "create_id");
    ok(client.resolve_addr(cid, None, addr, WAIT), "resolve_addr");
    expect_event_for(client, cch, EventKind::AddrResolved, cid, 0);
    ok(client.resolve_route(cid, WAIT), "resolve_route");
    expect_event_for(client, cch, EventKind::RouteResolved, cid, 0);
    Ends { lch, lid, cch, cid }
}

/// A connection whose two sides use external QPs, from creation to disconnect: the QP
/// states, `init_qp_attr`'s answers at each step, connects naming no QP or an unknown one, a
/// send and an RDMA write, and what the disconnect flushes.
pub fn connection_over_external_qps<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> Transcript {
    let mut t = Transcript::default();
    let e = ends(server, client, addr);
    let cx = external(client, e.cid);
    t.text("client QP made", &qp_state(client, cx.qp));
    t.note("client id->qp", ok(client.qp(e.cid), "qp").is_some());
    note_attrs(&mut t, client, e.cid, "client before connect");
    move_with_cm_attrs(&mut t, client, e.cid, cx.qp, QpState::Init, "client");
    let no_qp = client.connect(e.cid, Some(&with_qp(0)));
    t.text("client connect naming QP 0", &outcome(no_qp));
    let unknown = client.connect(e.cid, Some(&with_qp(cx.qpn.wrapping_add(1000))));
    t.text("client connect naming an unknown QP", &outcome(unknown));
    let r = client.connect(e.cid, Some(&with_qp(cx.qpn)));
    t.text("client connect naming its QP", &outcome(r));
    t.text("client QP state", &qp_state(client, cx.qp));
    note_attrs(&mut t, client, e.cid, "client connecting");

    let (ev, sid) = next_event(server, e.lch);
    t.text("server event", &ev);
    let sid = sid.expect("a connect request");
    let sx = external(server, sid);
    note_attrs(&mut t, server, sid, "server on request");
    move_with_cm_attrs(&mut t, server, sid, sx.qp, QpState::Init, "server");
    move_with_cm_attrs(&mut t, server, sid, sx.qp, QpState::Rtr, "server");
    let srx = ok(
        server.reg_mr(sx.pd, vec![0; 16], AccessFlags::LOCAL_WRITE),
        "reg_mr",
    );
    let sdst = ok(
        server.reg_mr(
            sx.pd,
            vec![0; 16],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ),
        "reg_mr",
    );
    t.text(
        "server post_recv before accept",
        &post_recv(server, sx.qp, 1, &srx),
    );
    let r = server.accept(sid, Some(&with_qp(sx.qpn)));
    t.text("server accept naming its QP", &outcome(r));
    t.text("server QP state", &qp_state(server, sx.qp));
    t.text("client event", &next_event(client, e.cch).0);
    t.text("client QP state", &qp_state(client, cx.qp));
    t.text("server event", &next_event(server, e.lch).0);
    note_attrs(&mut t, client, e.cid, "client established");
    note_attrs(&mut t, server, sid, "server established");

    let msg = ok(
        client.reg_mr(cx.pd, b"external".to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    t.text(
        "client send",
        &post_send(client, cx.qp, 2, SendOp::Send, &msg),
    );
    let write = SendOp::RdmaWrite {
        remote_addr: sdst.addr,
        rkey: sdst.rkey,
    };
    let data = ok(
        client.reg_mr(cx.pd, b"written!".to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    t.text(
        "client RDMA write",
        &post_send(client, cx.qp, 3, write, &data),
    );
    t.note("client completions", completions(client, cx.cq, 2));
    t.note("server completions", completions(server, sx.cq, 1));
    let mut got = [0u8; 8];
    ok(server.mr_read(sdst.handle, 0, &mut got), "mr_read");
    t.note("server region written", String::from_utf8_lossy(&got));

    let crx = ok(
        client.reg_mr(cx.pd, vec![0; 16], AccessFlags::LOCAL_WRITE),
        "reg_mr",
    );
    t.text("client post_recv", &post_recv(client, cx.qp, 4, &crx));
    t.text("server post_recv", &post_recv(server, sx.qp, 5, &srx));
    t.text("client disconnect", &outcome(client.disconnect(e.cid)));
    t.text("client QP state", &qp_state(client, cx.qp));
    t.note("client completions", completions(client, cx.cq, 1));
    t.text("client event", &next_event(client, e.cch).0);
    t.text("server event", &next_event(server, e.lch).0);
    t.text("server QP state", &qp_state(server, sx.qp));
    t.note("server completions", completions(server, sx.cq, 1));
    t.text("client QP state", &qp_state(client, cx.qp));
    note_attrs(&mut t, client, e.cid, "client disconnected");
    let reset = QpAttr {
        qp_state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    t.text(
        "client modify_qp RESET",
        &outcome(client.modify_qp(cx.qp, &reset)),
    );
    t.text("client QP state", &qp_state(client, cx.qp));
    t.text("server post_recv after", &post_recv(server, sx.qp, 6, &srx));
    t.note("server completions", completions(server, sx.cq, 1));

    for (cm, x, id) in [(client, &cx, e.cid), (server, &sx, sid)] {
        ok(cm.destroy_id(id), "destroy_id");
        ok(cm.destroy_external_qp(x.qp), "destroy_external_qp");
    }
    for (cm, mrs) in [(client, vec![msg, data, crx]), (server, vec![srx, sdst])] {
        for mr in mrs {
            ok(cm.dereg_mr(mr.handle), "dereg_mr");
        }
    }
    ok(client.destroy_cq(cx.cq), "destroy_cq");
    ok(server.destroy_cq(sx.cq), "destroy_cq");
    ok(client.dealloc_pd(cx.pd), "dealloc_pd");
    ok(server.dealloc_pd(sx.pd), "dealloc_pd");
    crate::steps::teardown(client, &[], e.cch);
    crate::steps::teardown(server, &[e.lid], e.lch);
    t
}

/// The ways an external QP can be wrong at `accept` or `connect`, one connection attempt
/// each (`next_addr` gives each its listener's address): an accept naming an unknown QP, an
/// accept whose QP the application moved to ERROR, a connect whose QP is in ERROR, and an
/// initiator that destroys its QP before the accept.
pub fn wrong_external_qps<B: DataPath>(
    server: &B,
    client: &B,
    next_addr: &mut dyn FnMut() -> SocketAddr,
) -> Transcript {
    let mut t = Transcript::default();
    let error = QpAttr {
        qp_state: Some(QpState::Error),
        ..QpAttr::default()
    };
    for case in [
        "accept unknown",
        "accept in ERROR",
        "connect in ERROR",
        "destroyed",
    ] {
        let e = ends(server, client, next_addr());
        let cx = external(client, e.cid);
        if case == "connect in ERROR" {
            t.text(
                "client modify_qp ERROR",
                &outcome(client.modify_qp(cx.qp, &error)),
            );
            t.text("client QP state", &qp_state(client, cx.qp));
        }
        let r = client.connect(e.cid, Some(&with_qp(cx.qpn)));
        t.text(&format!("{case}: client connect"), &outcome(r));
        let (ev, sid) = next_event(server, e.lch);
        t.text(&format!("{case}: server event"), &ev);
        let mut cx_alive = true;
        if case == "destroyed" {
            let r = client.destroy_external_qp(cx.qp);
            cx_alive = r.is_err();
            t.text("destroyed: client destroy_external_qp", &outcome(r));
            // What the destruction sends reaches the passive side before its accept.
            ok(client.sleep(Duration::from_millis(10)), "sleep");
        }
        let mut sx = None;
        if let Some(sid) = sid.filter(|_| ev.contains("CONNECT_REQUEST")) {
            let x = external(server, sid);
            let qpn = match case {
                "accept unknown" => x.qpn.wrapping_add(1000),
                _ => x.qpn,
            };
            if case == "accept in ERROR" {
                t.text(
                    "server modify_qp ERROR",
                    &outcome(server.modify_qp(x.qp, &error)),
                );
            }
            let r = server.accept(sid, Some(&with_qp(qpn)));
            t.text(&format!("{case}: server accept"), &outcome(r));
            // An accepted connection whose initiator's QP is in ERROR closes at once: the
            // server QP's state read right after the accept races with that close (RTS or
            // ERROR on real siw-6.12), so it is read once the close was reported.
            let state_after_events = case == "connect in ERROR";
            if !state_after_events {
                t.text(&format!("{case}: server QP state"), &qp_state(server, x.qp));
            }
            let (lch, soon) = (e.lch, Duration::from_secs(2));
            t.text(
                &format!("{case}: server event"),
                &next_event_within(server, lch, soon),
            );
            t.text(
                &format!("{case}: server event"),
                &next_event_within(server, lch, QUIET),
            );
            if state_after_events {
                t.text(&format!("{case}: server QP state"), &qp_state(server, x.qp));
            }
            sx = Some((sid, x));
        }
        t.text(
            &format!("{case}: client event"),
            &next_event(client, e.cch).0,
        );
        t.text(
            &format!("{case}: client event"),
            &next_event_within(client, e.cch, QUIET),
        );
        if cx_alive {
            t.text(
                &format!("{case}: client QP state"),
                &qp_state(client, cx.qp),
            );
            ok(client.destroy_id(e.cid), "destroy_id");
            ok(client.destroy_external_qp(cx.qp), "destroy_external_qp");
        } else {
            ok(client.destroy_id(e.cid), "destroy_id");
        }
        ok(client.destroy_cq(cx.cq), "destroy_cq");
        ok(client.dealloc_pd(cx.pd), "dealloc_pd");
        if let Some((sid, x)) = sx {
            ok(server.destroy_id(sid), "destroy_id");
            ok(server.destroy_external_qp(x.qp), "destroy_external_qp");
            ok(server.destroy_cq(x.cq), "destroy_cq");
            ok(server.dealloc_pd(x.pd), "dealloc_pd");
        }
        crate::steps::teardown(client, &[], e.cch);
        crate::steps::teardown(server, &[e.lid], e.lch);
    }
    t
}

/// The next event on `channel` within `within` (`kind status`, acknowledged), or the errno
/// (ETIMEDOUT: none came).
fn next_event_within<B: DataPath>(cm: &B, channel: ChannelHandle, within: Duration) -> String {
    match cm.get_cm_event(channel, Wait::Timeout(within)) {
        Ok(ev) => {
            let s = format!("{} {}", ev.kind(), ev.status());
            ok(cm.ack_cm_event(ev), "ack_cm_event");
            s
        }
        Err(e) => format!("{}", e.errno),
    }
}

/// [`connection_over_external_qps`] on siw, Linux 6.12 (measured on the siw-6.12 bed).
pub const CONNECTION_ON_SIW_6_12: &[&str] = &[
    "client QP made: Init",
    "client id->qp: false",
    "client before connect init_qp_attr Init: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client before connect init_qp_attr Rtr: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client before connect init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client modify_qp Init (CM's attributes): ok",
    "client QP state: Init",
    "client connect naming QP 0: EINVAL (22)",
    "client connect naming an unknown QP: EINVAL (22)",
    "client connect naming its QP: ok",
    "client QP state: Init",
    "client connecting init_qp_attr Init: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client connecting init_qp_attr Rtr: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client connecting init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server event: RDMA_CM_EVENT_CONNECT_REQUEST 0",
    "server on request init_qp_attr Init: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server on request init_qp_attr Rtr: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server on request init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server modify_qp Init (CM's attributes): ok",
    "server QP state: Init",
    "server modify_qp Rtr (CM's attributes): ok",
    "server QP state: Init",
    "server post_recv before accept: ok",
    "server accept naming its QP: ok",
    "server QP state: Rts",
    "client event: RDMA_CM_EVENT_ESTABLISHED 0",
    "client QP state: Rts",
    "server event: RDMA_CM_EVENT_ESTABLISHED 0",
    "client established init_qp_attr Init: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client established init_qp_attr Rtr: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client established init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server established init_qp_attr Init: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server established init_qp_attr Rtr: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "server established init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client send: ok",
    "client RDMA write: ok",
    "client completions: [\"(2 success (0) Send 8)\", \"(3 success (0) RdmaWrite 8)\"]",
    "server completions: [\"(1 success (0) Recv 8)\"]",
    "server region written: \"written!\"",
    "client post_recv: ok",
    "server post_recv: ok",
    "client disconnect: ok",
    "client QP state: Sqd",
    "client completions: [\"(4 Work Request Flushed Error (5) Recv 0)\"]",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server QP state: Error",
    "server completions: [\"(5 Work Request Flushed Error (5) Recv 0)\"]",
    "client QP state: Sqd",
    "client disconnected init_qp_attr Init: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client disconnected init_qp_attr Rtr: access 0x6 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client disconnected init_qp_attr Rts: access 0x0 port 1 peer false path false timeout 0 retry 0 rnr 0",
    "client modify_qp RESET: ok",
    "client QP state: Init",
    "server post_recv after: ok",
    "server completions: []",
];

/// A transcript of siw on Linux 6.1 from the one on 6.12 (`lines`): the same but for
/// `ibv_query_qp`, which reads RESET in every state on 6.1 (measured on the siw-6.1 bed for
/// both scenarios here).
pub fn on_siw_6_1(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .map(|line| match line.rsplit_once(": ") {
            Some((what, _)) if what.ends_with("QP state") || what.ends_with("QP made") => {
                format!("{what}: Reset")
            }
            _ => (*line).to_string(),
        })
        .collect()
}

/// [`wrong_external_qps`] on siw, Linux 6.12 (measured on the siw-6.12 bed).
pub const WRONG_ON_SIW_6_12: &[&str] = &[
    "accept unknown: client connect: ok",
    "accept unknown: server event: RDMA_CM_EVENT_CONNECT_REQUEST 0",
    "accept unknown: server accept: EINVAL (22)",
    "accept unknown: server QP state: Init",
    "accept unknown: server event: ETIMEDOUT (110)",
    "accept unknown: server event: ETIMEDOUT (110)",
    "accept unknown: client event: RDMA_CM_EVENT_REJECTED -104",
    "accept unknown: client event: ETIMEDOUT (110)",
    "accept unknown: client QP state: Error",
    "accept in ERROR: client connect: ok",
    "accept in ERROR: server event: RDMA_CM_EVENT_CONNECT_REQUEST 0",
    "server modify_qp ERROR: ok",
    "accept in ERROR: server accept: EINVAL (22)",
    "accept in ERROR: server QP state: Error",
    "accept in ERROR: server event: ETIMEDOUT (110)",
    "accept in ERROR: server event: ETIMEDOUT (110)",
    "accept in ERROR: client event: RDMA_CM_EVENT_REJECTED -104",
    "accept in ERROR: client event: ETIMEDOUT (110)",
    "accept in ERROR: client QP state: Error",
    "client modify_qp ERROR: ok",
    "client QP state: Error",
    "connect in ERROR: client connect: ok",
    "connect in ERROR: server event: RDMA_CM_EVENT_CONNECT_REQUEST 0",
    "connect in ERROR: server accept: ok",
    "connect in ERROR: server event: RDMA_CM_EVENT_ESTABLISHED 0",
    "connect in ERROR: server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "connect in ERROR: server QP state: Error",
    "connect in ERROR: client event: RDMA_CM_EVENT_CONNECT_ERROR -22",
    "connect in ERROR: client event: ETIMEDOUT (110)",
    "connect in ERROR: client QP state: Error",
    "destroyed: client connect: ok",
    "destroyed: server event: RDMA_CM_EVENT_CONNECT_REQUEST 0",
    "destroyed: client destroy_external_qp: ok",
    "destroyed: server accept: ECONNRESET (104)",
    "destroyed: server QP state: Init",
    "destroyed: server event: ETIMEDOUT (110)",
    "destroyed: server event: ETIMEDOUT (110)",
    "destroyed: client event: RDMA_CM_EVENT_UNREACHABLE -110",
    "destroyed: client event: ETIMEDOUT (110)",
];
