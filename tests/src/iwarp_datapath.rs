//! The RC data path on iWARP as siw runs it, generic over the backend so that the simulator
//! and real siw run the same steps (tests/tests/sim_iwarp_datapath.rs with exact virtual
//! times, backend-verbs/tests/iwarp_datapath.rs on the siw beds).
//!
//! siw carries RDMAP over TCP: a SEND or RDMA WRITE completes once its bytes are handed to
//! TCP (`siw_qp_sq_process` completes the WQE when `siw_qp_sq_proc_tx` sent it, inside
//! `post_send` for a user QP), with no acknowledgement from the peer; there are no RNR NAKs
//! and no transport retries. A message the peer cannot take (no receive posted, a bad rkey)
//! makes the peer send a TERMINATE and close the connection (`siw_init_terminate`,
//! `siw_qp_cm_drop`), and the close moves the QPs to ERROR and flushes them
//! (`siw_qp_llp_close`), except the QP of a target whose READ response failed, which stays in
//! RTS. The expected transcripts below are the ones real siw gave on the siw-6.12 bed (6.1
//! differs only in `ibv_query_qp`, RESET in every state: `on_siw_6_1`).
//!
//! Each scenario sets up a connection, does one thing, then watches both sides for a fixed
//! window: completions, CM events and asynchronous events, each noted with the time it was
//! first seen (from the trigger, on the client's clock). The transcript holds the lines
//! without times, one side after the other, each side's completions, then its CM events, then
//! its asynchronous events (each kind in the order seen): the three come through different
//! queues, whose order relative to each other real siw does not keep (a QP_ACCESS_ERR came
//! before its connection's DISCONNECTED in one run and after it in the next, on both kernels),
//! so one expected transcript holds on every bed; the times go apart ([`Observed::times`]) for
//! the simulator's exact asserts and the real beds' printouts.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, MemoryRegion, Payload, SendOp, SendWr, WorkCompletion};
use cmtwin::{QpHandle, Wait};

use crate::datapath::{connect, post_recv_all, region, Conn, Side};
use crate::iwarp_external_qp::Transcript;
use crate::steps::ok;

/// How long both sides are watched after the trigger.
pub const WINDOW: Duration = Duration::from_millis(1500);

/// A scenario's outcome: its transcript and when each line was seen.
#[derive(Debug, Default)]
pub struct Observed {
    /// The lines, client's then server's, without times.
    pub transcript: Transcript,
    /// Each observation with the time it was first seen after the trigger.
    pub times: Vec<(String, Duration)>,
}

impl Observed {
    /// The time the first line equal to `line` was seen.
    pub fn time_of(&self, line: &str) -> Option<Duration> {
        self.times.iter().find(|(l, _)| l == line).map(|(_, t)| *t)
    }

    pub(crate) fn note(&mut self, line: String) {
        eprintln!("{line}");
        self.transcript.0.push(line);
    }
}

/// One side under watch: its backend, its side of the connection, what it saw.
struct Watched<'a, B> {
    cm: &'a B,
    side: Side,
    who: &'static str,
    seen: Vec<(String, Duration)>,
}

impl<B: DataPath> Watched<'_, B> {
    /// Takes what the side has now: completions, CM events, asynchronous events.
    fn take(&mut self, at: Duration) {
        let mut wc = [WorkCompletion::default(); 8];
        let n = ok(self.cm.poll_cq(self.side.cq, &mut wc), "poll_cq");
        for w in &wc[..n] {
            let line = format!("{} wc: {}", self.who, wc_text(w));
            self.seen.push((line, at));
        }
        while let Ok(ev) = self.cm.get_cm_event(self.side.channel, Wait::NonBlocking) {
            let line = format!("{} event: {} {}", self.who, ev.kind(), ev.status());
            ok(self.cm.ack_cm_event(ev), "ack_cm_event");
            self.seen.push((line, at));
        }
        while let Ok(ev) = self.cm.get_async_event(Wait::NonBlocking) {
            let line = format!("{} async: {:?}", self.who, ev.kind);
            self.seen.push((line, at));
        }
    }
}

/// A completion without its QP number: `(wr_id status opcode byte_len)` (the opcode and
/// length only for a success; an error's are undefined).
fn wc_text(w: &WorkCompletion) -> String {
    if w.status.0 == 0 {
        format!("({} {} {:?} {})", w.wr_id, w.status, w.opcode, w.byte_len)
    } else {
        format!("({} {})", w.wr_id, w.status)
    }
}

/// The step of the watch at `elapsed`: fine at first, where the data path's own times lie.
fn step(elapsed: Duration) -> Duration {
    if elapsed < Duration::from_micros(200) {
        Duration::from_micros(1)
    } else if elapsed < Duration::from_millis(10) {
        Duration::from_micros(100)
    } else {
        Duration::from_millis(10)
    }
}

/// Which QP states a watch notes at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotedStates {
    /// Both sides'.
    Both,
    /// The client's only (the server's QP may be destroyed).
    ClientOnly,
    /// None (where they depend on a race real beds do not settle the same way each run,
    /// such as both sides closing at once on siw).
    Neither,
}

/// Watches both sides of `conn` for [`WINDOW`] from `t0` (the client's clock), then notes
/// each side's QP state.
pub(crate) fn watch<B: DataPath>(s: &B, c: &B, conn: &Conn, t0: Duration, out: &mut Observed) {
    watch_sides(s, c, conn, t0, NotedStates::Both, out);
}

/// [`watch`], noting the QP states `states` names.
pub(crate) fn watch_sides<B: DataPath>(
    s: &B,
    c: &B,
    conn: &Conn,
    t0: Duration,
    states: NotedStates,
    out: &mut Observed,
) {
    let sides = vec![
        (
            watched(c, conn.client, "client"),
            states != NotedStates::Neither,
        ),
        (
            watched(s, conn.server, "server"),
            states == NotedStates::Both,
        ),
    ];
    watch_all(c, sides, t0, out);
}

/// Watches the client's CQ, CM channel and asynchronous events for [`WINDOW`] from `t0`.
fn watch_client_only<B: DataPath>(c: &B, conn: &Conn, t0: Duration, out: &mut Observed) {
    watch_all(c, vec![(watched(c, conn.client, "client"), true)], t0, out);
}

fn watched<'a, B>(cm: &'a B, side: Side, who: &'static str) -> Watched<'a, B> {
    Watched {
        cm,
        side,
        who,
        seen: Vec::new(),
    }
}

/// Watches each of `sides` for [`WINDOW`] from `t0` (on `clock`), then notes what each saw
/// and, where its flag asks, its QP state.
fn watch_all<B: DataPath>(
    clock: &B,
    mut sides: Vec<(Watched<'_, B>, bool)>,
    t0: Duration,
    out: &mut Observed,
) {
    loop {
        let at = clock.now() - t0;
        for (w, _) in &mut sides {
            w.take(at);
        }
        if at >= WINDOW {
            break;
        }
        ok(clock.sleep(step(at)), "sleep");
    }
    for (mut w, note_state) in sides {
        // Completions, CM events, asynchronous events: stable, so each kind keeps its order.
        w.seen.sort_by_key(|(line, _)| source_rank(line));
        for (line, at) in w.seen {
            out.note(line.clone());
            out.times.push((line, at));
        }
        if note_state {
            let state = match w.cm.query_qp_state(w.side.qp) {
                Ok(st) => format!("{st:?}"),
                Err(e) => format!("{}", e.errno),
            };
            out.note(format!("{} QP state: {state}", w.who));
        }
    }
}

/// Where a watched line came from, in transcript order: a completion, a CM event, an
/// asynchronous event.
fn source_rank(line: &str) -> u8 {
    if line.contains(" wc: ") {
        0
    } else if line.contains(" event: ") {
        1
    } else {
        2
    }
}

/// Posts `op` of all of `mr` on `qp` (wr_id `wr_id`, signaled): `ok` or the errno.
pub(crate) fn post<B: DataPath>(
    cm: &B,
    qp: QpHandle,
    wr_id: u64,
    op: SendOp,
    mr: &MemoryRegion,
) -> String {
    let sge = [mr.sge(0, mr.length as u32)];
    match cm.post_send(qp, &SendWr::new(wr_id, op, Payload::Sges(&sge))) {
        Ok(()) => "ok".into(),
        Err(e) => format!("{}", e.errno),
    }
}

/// Posts on the client and notes the outcome and how many completions the CQ held at once
/// (siw completes a SEND or WRITE inside `post_send`).
fn post_and_poll<B: DataPath>(
    c: &B,
    conn: &Conn,
    wr_id: u64,
    op: SendOp,
    mr: &MemoryRegion,
    out: &mut Observed,
) -> Vec<WorkCompletion> {
    let r = post(c, conn.client.qp, wr_id, op, mr);
    out.note(format!("client post {wr_id}: {r}"));
    let mut wc = [WorkCompletion::default(); 4];
    let n = ok(c.poll_cq(conn.client.cq, &mut wc), "poll_cq");
    let texts: Vec<String> = wc[..n].iter().map(wc_text).collect();
    out.note(format!("client wc at once: [{}]", texts.join(", ")));
    wc[..n].to_vec()
}

const RW: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);

/// A SEND to a posted receive, then an RDMA WRITE: when each completes at the sender (at
/// once on siw, in `post_send`) and when the receive completes at the peer.
pub fn send_and_write_complete_when_sent<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let rx = region(s, conn.server.pd, 64, 0, RW);
    post_recv_all(s, conn.server.qp, 10, &rx);
    let tx = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let t0 = c.now();
    post_and_poll(c, &conn, 1, SendOp::Send, &tx, &mut out);
    let write = SendOp::RdmaWrite {
        remote_addr: rx.addr_at(16),
        rkey: rx.rkey,
    };
    post_and_poll(c, &conn, 2, write, &tx, &mut out);
    watch(s, c, &conn, t0, &mut out);
    teardown(s, c, &conn);
    out
}

/// A SEND to a peer QP with no receive posted: iWARP has no RNR NAK.
pub fn send_without_a_receive<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let tx = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let t0 = c.now();
    post_and_poll(c, &conn, 1, SendOp::Send, &tx, &mut out);
    watch(s, c, &conn, t0, &mut out);
    send_after_the_close(c, &conn, 2, &tx, &mut out);
    teardown(s, c, &conn);
    out
}

/// The server destroys its QP (`rdma_destroy_qp`); then the client sends.
pub fn send_to_a_destroyed_peer_qp<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let tx = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let t0 = c.now();
    let r = s.destroy_qp(conn.server.id);
    out.note(format!("server destroy_qp: {}", outcome(r)));
    watch_sides(s, c, &conn, t0, NotedStates::ClientOnly, &mut out);
    send_after_the_close(c, &conn, 1, &tx, &mut out);
    teardown(s, c, &conn);
    out
}

/// Posts a SEND (wr_id `wr_id`) on the client's closed connection and watches the client.
fn send_after_the_close<B: DataPath>(
    c: &B,
    conn: &Conn,
    wr_id: u64,
    tx: &MemoryRegion,
    out: &mut Observed,
) {
    let r = post(c, conn.client.qp, wr_id, SendOp::Send, tx);
    out.note(format!("client post after: {r}"));
    let t1 = c.now();
    watch_client_only(c, conn, t1, out);
}

/// A SEND into a receive whose region the device may not write (no LOCAL_WRITE).
pub fn send_into_a_read_only_receive<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let rx = region(s, conn.server.pd, 64, 0, AccessFlags::NONE);
    post_recv_all(s, conn.server.qp, 10, &rx);
    let tx = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let t0 = c.now();
    post_and_poll(c, &conn, 1, SendOp::Send, &tx, &mut out);
    watch(s, c, &conn, t0, &mut out);
    teardown(s, c, &conn);
    out
}

/// An RDMA WRITE under a good rkey that runs past the region's end.
pub fn write_past_the_region<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let target = region(s, conn.server.pd, 64, 0x5a, RW);
    let local = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let op = SendOp::RdmaWrite {
        remote_addr: target.addr_at(56),
        rkey: target.rkey,
    };
    let t0 = c.now();
    post_and_poll(c, &conn, 1, op, &local, &mut out);
    watch(s, c, &conn, t0, &mut out);
    teardown(s, c, &conn);
    out
}

/// An RDMA WRITE to a bad rkey.
pub fn write_to_a_bad_rkey<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    bad_rkey(s, c, at, true)
}

/// An RDMA READ from a bad rkey.
pub fn read_from_a_bad_rkey<B: DataPath>(s: &B, c: &B, at: SocketAddr) -> Observed {
    bad_rkey(s, c, at, false)
}

fn bad_rkey<B: DataPath>(s: &B, c: &B, at: SocketAddr, write: bool) -> Observed {
    let mut out = Observed::default();
    let conn = connect(s, c, at);
    let target = region(s, conn.server.pd, 64, 0x5a, RW);
    let local = region(c, conn.client.pd, 16, 0xab, AccessFlags::LOCAL_WRITE);
    let (remote_addr, rkey) = (target.addr_at(0), target.rkey ^ 0x00ff_0000);
    let op = if write {
        SendOp::RdmaWrite { remote_addr, rkey }
    } else {
        SendOp::RdmaRead { remote_addr, rkey }
    };
    let t0 = c.now();
    if write {
        post_and_poll(c, &conn, 1, op, &local, &mut out);
    } else {
        // Not polled at once: the READ's flush may come before the post returns or after
        // (on loopback, 6.12 gave the first, 6.1 the second).
        let r = post(c, conn.client.qp, 1, op, &local);
        out.note(format!("client post 1: {r}"));
    }
    watch(s, c, &conn, t0, &mut out);
    teardown(s, c, &conn);
    out
}

fn outcome(r: cmtwin::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => format!("{}", e.errno),
    }
}

/// Disconnects both sides (a side whose peer went first may refuse) and destroys the ids.
pub(crate) fn teardown<B: DataPath>(s: &B, c: &B, conn: &Conn) {
    let _ = c.disconnect(conn.client.id);
    let _ = s.disconnect(conn.server.id);
    let _ = c.sleep(Duration::from_millis(50));
    for (cm, side) in [(c, &conn.client), (s, &conn.server)] {
        while let Ok(ev) = cm.get_cm_event(side.channel, Wait::NonBlocking) {
            let _ = cm.ack_cm_event(ev);
        }
        let _ = cm.destroy_qp(side.id);
        let _ = cm.destroy_id(side.id);
    }
    let _ = s.destroy_id(conn.listener);
}

/// [`send_and_write_complete_when_sent`] on siw, Linux 6.12.
pub const SEND_AND_WRITE_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc at once: [(1 success (0) Send 16)]",
    "client post 2: ok",
    "client wc at once: [(2 success (0) RdmaWrite 16)]",
    "client QP state: Rts",
    "server wc: (10 success (0) Recv 16)",
    "server QP state: Rts",
];

/// [`send_without_a_receive`] on siw, Linux 6.12.
pub const NO_RECEIVE_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc at once: [(1 success (0) Send 16)]",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server QP state: Error",
    "client post after: ok",
    "client QP state: Error",
];

/// [`send_to_a_destroyed_peer_qp`] on siw, Linux 6.12.
pub const DESTROYED_PEER_ON_SIW_6_12: &[&str] = &[
    "server destroy_qp: ok",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client post after: ok",
    "client QP state: Error",
];

/// [`write_to_a_bad_rkey`] on siw, Linux 6.12.
pub const BAD_RKEY_WRITE_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc at once: [(1 success (0) RdmaWrite 16)]",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server QP state: Error",
];

/// [`read_from_a_bad_rkey`] on siw, Linux 6.12.
pub const BAD_RKEY_READ_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc: (1 Work Request Flushed Error (5))",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server async: AsyncEvent(2)",
    "server QP state: Rts",
];

/// [`send_into_a_read_only_receive`] on siw, Linux 6.12 (measured there; 6.1's siw_qp_rx.c
/// takes the same path).
pub const READ_ONLY_RECEIVE_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc at once: [(1 success (0) Send 16)]",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server wc: (10 general error (21))",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server async: AsyncEvent(3)",
    "server QP state: Error",
];

/// [`write_past_the_region`] on siw, Linux 6.12 (measured there; 6.1's siw_qp_rx.c takes the
/// same path).
pub const WRITE_PAST_THE_REGION_ON_SIW_6_12: &[&str] = &[
    "client post 1: ok",
    "client wc at once: [(1 success (0) RdmaWrite 16)]",
    "client event: RDMA_CM_EVENT_DISCONNECTED 0",
    "client QP state: Error",
    "server event: RDMA_CM_EVENT_DISCONNECTED 0",
    "server async: AsyncEvent(3)",
    "server QP state: Error",
];
