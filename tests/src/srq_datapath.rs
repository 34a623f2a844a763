//! Shared receive queue scenarios, generic over [`DataPath`]: they run on simulated beds
//! (`tests/tests/sim_srq.rs`, with exact virtual times on top) and on real librdmacm
//! (`backend-verbs/tests/datapath.rs`, module `srq`, in the Soft-RoCE VM).
//!
//! The server's connected QPs take their receives from one SRQ, as SPDK's NVMe-oF target
//! does: the SRQ is made in a PD of the server's device before the first connection, the
//! server posts to it, and whichever QP a message reaches takes the oldest receive.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, RecvWr, SendOp, SendWr, SrqAttr, SrqAttrMask,
    VerbsAsyncEvent, WcOpcode, WcStatus, WorkCompletion,
};
use cmtwin::{
    AsyncEvent, Call, ConnParam, Errno, EventKind, IdHandle, PortSpace, QpCap, SrqHandle, Wait,
};

use crate::datapath::{
    connect_with, listen_on, region, routed_client, verbs_side, Conn, Objects, Setup, Side,
};
use crate::steps::{expect_errno, expect_event_for, ok};
use crate::ud_datapath::next_completion;

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// Bytes of each receive the scenarios post.
pub const SLOT: u32 = 16;

/// How long a scenario waits to be sure no further asynchronous event comes.
pub const QUIET: Duration = Duration::from_millis(200);

/// The server's objects: an id of its own bound on the listening address's device (the
/// objects need one), a PD, a CQ with its channel, an SRQ, and a region of receive slots.
pub struct SrqServer {
    /// The id the objects were made through.
    pub id: IdHandle,
    /// The PD, channel and CQ every server QP shares.
    pub objects: Objects,
    /// The SRQ.
    pub srq: SrqHandle,
    /// What `create_srq` wrote back.
    pub granted: SrqAttr,
    /// Receive slots of [`SLOT`] bytes.
    pub rx: MemoryRegion,
}

/// Makes the server's objects on the device of `addr`'s address, with an SRQ as `attr` asks
/// and a region of `slots` receive slots.
pub fn srq_server<B: DataPath>(
    server: &B,
    addr: SocketAddr,
    attr: &SrqAttr,
    slots: usize,
) -> SrqServer {
    let ch = ok(server.create_event_channel(), "objects' channel");
    let id = ok(server.create_id(Some(ch), 0, PortSpace::TCP), "objects' id");
    ok(server.bind_addr(id, SocketAddr::new(addr.ip(), 0)), "bind");
    let pd = ok(server.alloc_pd(id), "alloc_pd");
    let comp = ok(server.create_comp_channel(id), "create_comp_channel");
    let cq = ok(server.create_cq(id, 64, Some(comp)), "create_cq");
    let (srq, granted) = ok(server.create_srq(pd, attr), "create_srq");
    let rx = region(server, pd, slots * SLOT as usize, 0, LW);
    SrqServer {
        id,
        objects: Objects { pd, comp, cq },
        srq,
        granted,
        rx,
    }
}

/// Posts receive `wr_id` of slot `slot` of the server's region to its SRQ.
pub fn post_slot<B: DataPath>(server: &B, s: &SrqServer, wr_id: u64, slot: usize) {
    let sge = [s.rx.sge(slot * SLOT as usize, SLOT)];
    let wr = RecvWr {
        wr_id,
        sg_list: &sge,
    };
    ok(server.post_srq_recv(s.srq, &wr), "post_srq_recv");
}

/// Connects a client to `addr`, the server's QP sharing its objects and SRQ; `accept` is the
/// server's `accept` parameters (its RNR retry count is the client's).
pub fn connect_on_srq<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    s: &SrqServer,
    accept: ConnParam,
) -> Conn {
    let setup = Setup {
        accept,
        server_objects: Some(s.objects),
        server_srq: Some(s.srq),
        ..Setup::default()
    };
    connect_with(server, client, addr, &setup)
}

/// A signaled send of `bytes` (inline) from `side`, waited for; its completion.
pub fn send<B: DataPath>(client: &B, side: &Side, wr_id: u64, bytes: &[u8]) -> WorkCompletion {
    let wr = SendWr::new(wr_id, SendOp::Send, Payload::Inline(bytes));
    ok(client.post_send(side.qp, &wr), "post_send");
    next_completion(client, side)
}

/// The SRQ asynchronous events (`SRQ_LIMIT_REACHED`, `QP_LAST_WQE_REACHED`) that come
/// within [`QUIET`] of each other, others (COMM_EST) left out.
pub fn srq_events<B: DataPath>(cm: &B) -> Vec<VerbsAsyncEvent> {
    let mut out = Vec::new();
    loop {
        match cm.get_async_event(Wait::Timeout(QUIET)) {
            Ok(e) if matches!(e.kind, AsyncEvent::SRQ_LIMIT_REACHED) => out.push(e),
            Ok(e) if matches!(e.kind, AsyncEvent::QP_LAST_WQE_REACHED) => out.push(e),
            Ok(_) => {}
            Err(e) if e.errno == Errno::ETIMEDOUT => return out,
            Err(e) => panic!("get_async_event: {e}"),
        }
    }
}

/// Two clients on two server QPs sharing one SRQ with four receives posted: A sends, B
/// sends, A sends. Each message takes the oldest receive, whichever QP it reached; the
/// fourth stays posted. Returns the server's three receive completions, in order.
pub fn two_qps_take_the_srq_receives_in_posted_order<B: DataPath>(
    server: &B,
    client: &B,
    addrs: [SocketAddr; 2],
) -> [WorkCompletion; 3] {
    let s = srq_server(server, addrs[0], &SrqAttr::new(8, 1), 4);
    for slot in 0..4 {
        post_slot(server, &s, 100 + slot as u64, slot);
    }
    let a = connect_on_srq(server, client, addrs[0], &s, ConnParam::default());
    let b = connect_on_srq(server, client, addrs[1], &s, ConnParam::default());
    let messages: [(&Conn, &[u8]); 3] = [(&a, b"first"), (&b, b"second!"), (&a, b"third")];
    let mut got = [WorkCompletion::default(); 3];
    for (i, (conn, bytes)) in messages.into_iter().enumerate() {
        let sent = send(client, &conn.client, i as u64 + 1, bytes);
        assert_eq!(sent.status, WcStatus::SUCCESS, "send {i}");
        got[i] = next_completion(server, &conn.server);
        let wc = got[i];
        assert_eq!(
            (wc.status, wc.opcode, wc.wr_id, wc.byte_len, wc.qp_num),
            (
                WcStatus::SUCCESS,
                WcOpcode::Recv,
                100 + i as u64,
                bytes.len() as u32,
                conn.server.qpn
            ),
            "receive {i}: the oldest SRQ receive, on the QP the message reached"
        );
        let mut placed = vec![0u8; bytes.len()];
        ok(
            server.mr_read(s.rx.handle, i * SLOT as usize, &mut placed),
            "mr_read",
        );
        assert_eq!(placed, bytes, "receive {i}'s bytes in slot {i}");
    }
    // The fourth receive is still posted: its region cannot be deregistered.
    expect_errno(server.dereg_mr(s.rx.handle), Call::DeregMr, Errno::EBUSY);
    got
}

/// An SRQ of four receives with its limit armed at 3: the first message leaves 3 (no event),
/// the second 2, below the limit: one IBV_EVENT_SRQ_LIMIT_REACHED naming the SRQ, and the
/// limit reads 0; the third raises nothing. Returns the limit read after arming it.
pub fn the_srq_limit_fires_once_when_receives_fall_below_it<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> u32 {
    let s = srq_server(server, addr, &SrqAttr::new(8, 1), 4);
    for slot in 0..4 {
        post_slot(server, &s, slot as u64, slot);
    }
    let armed = SrqAttr {
        srq_limit: 3,
        ..SrqAttr::default()
    };
    ok(
        server.modify_srq(s.srq, &armed, SrqAttrMask::LIMIT),
        "modify_srq",
    );
    let limit = ok(server.query_srq(s.srq), "query_srq").srq_limit;
    let conn = connect_on_srq(server, client, addr, &s, ConnParam::default());
    let mut events = Vec::new();
    for (i, expected) in [0usize, 1, 0].into_iter().enumerate() {
        send(client, &conn.client, i as u64, b"msg");
        let wc = next_completion(server, &conn.server);
        assert_eq!((wc.status, wc.wr_id), (WcStatus::SUCCESS, i as u64));
        let now = srq_events(server);
        assert_eq!(now.len(), expected, "SRQ events after message {i}: {now:?}");
        events.extend(now);
    }
    let e = events[0];
    assert_eq!(
        (e.kind, e.srq, e.qp_num),
        (AsyncEvent::SRQ_LIMIT_REACHED, Some(s.srq), None)
    );
    let after = ok(server.query_srq(s.srq), "query_srq");
    assert_eq!(after.srq_limit, 0, "the limit is disarmed once it fired");
    limit
}

/// Two QPs on an SRQ with three receives; the server disconnects A (its QP enters ERROR):
/// no receive of the SRQ is flushed, A raises no LAST_WQE_REACHED on rxe 6.1 (one on 6.12),
/// and B's next message takes the oldest receive. Returns the SRQ events seen after the disconnect.
pub fn a_qp_in_error_leaves_the_srq_receives<B: DataPath>(
    server: &B,
    client: &B,
    addrs: [SocketAddr; 2],
) -> Vec<VerbsAsyncEvent> {
    let s = srq_server(server, addrs[0], &SrqAttr::new(8, 1), 3);
    for slot in 0..3 {
        post_slot(server, &s, 10 + slot as u64, slot);
    }
    let a = connect_on_srq(server, client, addrs[0], &s, ConnParam::default());
    let b = connect_on_srq(server, client, addrs[1], &s, ConnParam::default());
    ok(server.disconnect(a.server.id), "disconnect");
    expect_event_for(
        client,
        a.client.channel,
        EventKind::Disconnected,
        a.client.id,
        0,
    );
    let events = srq_events(server);
    let mut wc = [WorkCompletion::default(); 4];
    let flushed = ok(server.poll_cq(s.objects.cq, &mut wc), "poll_cq");
    assert_eq!(
        flushed,
        0,
        "no SRQ receive is flushed: {:?}",
        &wc[..flushed]
    );
    send(client, &b.client, 1, b"after");
    let got = next_completion(server, &b.server);
    assert_eq!(
        (got.status, got.wr_id, got.byte_len, got.qp_num),
        (WcStatus::SUCCESS, 10, 5, b.server.qpn)
    );
    events
}

/// A send to a QP whose SRQ is empty is answered with an RNR NAK: with no RNR retry (the
/// server accepts with `rnr_retry_count` 0), the sender's completion is RNR_RETRY_EXC_ERR.
pub fn an_empty_srq_answers_rnr<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> WorkCompletion {
    let s = srq_server(server, addr, &SrqAttr::new(4, 1), 1);
    let accept = ConnParam {
        rnr_retry_count: 0,
        ..ConnParam::default()
    };
    let conn = connect_on_srq(server, client, addr, &s, accept);
    let wc = send(client, &conn.client, 7, b"nobody");
    assert_eq!((wc.status, wc.wr_id), (WcStatus::RNR_RETRY_EXC_ERR, 7));
    wc
}

/// What the device made of an SRQ and what it refuses, on the device of `addr`: returns
/// (what `create_srq` wrote back for 10 receives of 1 entry, what `query_srq` reads).
pub fn srq_attributes_and_misuse<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> (SrqAttr, SrqAttr) {
    let s = srq_server(server, addr, &SrqAttr::new(10, 1), 2);
    let dev = ok(server.id_device(s.id), "id_device").expect("a bound id has a device");
    let max = ok(server.query_device(&dev.device.name), "query_device");
    let pd = s.objects.pd;
    let bad = [
        SrqAttr::new(0, 1),
        SrqAttr::new(max.max_srq_wr + 1, 1),
        SrqAttr::new(4, max.max_srq_sge + 1),
    ];
    for attr in bad {
        expect_errno(server.create_srq(pd, &attr), Call::CreateSrq, Errno::EINVAL);
    }
    let queried = ok(server.query_srq(s.srq), "query_srq");
    let over = SrqAttr {
        srq_limit: queried.max_wr + 1,
        ..SrqAttr::default()
    };
    let e = server.modify_srq(s.srq, &over, SrqAttrMask::LIMIT);
    expect_errno(e, Call::ModifySrq, Errno::EINVAL);
    // Two entries where the SRQ takes one.
    let two = [s.rx.sge(0, SLOT), s.rx.sge(SLOT as usize, SLOT)];
    let wr = RecvWr {
        wr_id: 1,
        sg_list: &two,
    };
    expect_errno(
        server.post_srq_recv(s.srq, &wr),
        Call::PostSrqRecv,
        Errno::EINVAL,
    );
    // As many receives as it holds, then ENOMEM.
    for i in 0..queried.max_wr {
        post_slot(server, &s, u64::from(i), 0);
    }
    let sge = [s.rx.sge(0, SLOT)];
    let one_more = RecvWr {
        wr_id: 99,
        sg_list: &sge,
    };
    let e = server.post_srq_recv(s.srq, &one_more);
    expect_errno(e, Call::PostSrqRecv, Errno::ENOMEM);
    // A QP on it has no receive queue of its own; the SRQ and its PD are busy meanwhile.
    let conn = connect_on_srq(server, client, addr, &s, ConnParam::default());
    let e = server.post_recv(conn.server.qp, &one_more);
    expect_errno(e, Call::PostRecv, Errno::EINVAL);
    let cap = ok(server.query_qp_cap(conn.server.qp), "query_qp_cap");
    assert_eq!((cap.max_recv_wr, cap.max_recv_sge), (0, 0), "{cap:?}");
    expect_errno(server.destroy_srq(s.srq), Call::DestroySrq, Errno::EBUSY);
    expect_errno(server.dealloc_pd(pd), Call::DeallocPd, Errno::EBUSY);
    ok(server.disconnect(conn.server.id), "disconnect");
    ok(server.destroy_qp(conn.server.id), "destroy_qp");
    ok(server.destroy_srq(s.srq), "destroy_srq");
    // Its receives went with it: the region is free again.
    ok(server.dereg_mr(s.rx.handle), "dereg_mr");
    (s.granted, queried)
}

/// librdmacm's `id->srq` on the client: `create_id_srq` before the QP, which then takes its
/// receives from it (and announces `srq` 1 in its CONNECT_REQUEST); `post_recv_msg` posts to
/// the SRQ; `destroy_id_srq` is EBUSY while the QP uses it, then destroys it.
pub fn an_id_srq_takes_the_ids_receives<B: DataPath>(server: &B, client: &B, addr: SocketAddr) {
    let listener = listen_on(server, addr, PortSpace::TCP);
    let lch = listener.channel;
    let (cch, cid) = routed_client(client, addr, PortSpace::TCP);
    let (srq, _) = ok(
        client.create_id_srq(cid, None, &SrqAttr::new(4, 1)),
        "create_id_srq",
    );
    assert_eq!(ok(client.srq(cid), "id->srq"), Some(srq));
    let qp_of = (cmtwin::QpType::Rc, QpCap::default());
    let side = verbs_side(client, cch, cid, qp_of, (None, None));
    let rx = region(client, side.pd, 64, 0, LW);
    ok(client.post_recv_msg(cid, 5, &rx, 0, 64), "post_recv_msg");
    ok(client.connect(cid, None), "connect");
    let req = crate::steps::expect_request(server, &listener);
    let announced = match req.param {
        cmtwin::EventParam::Conn(c) => c.srq,
        other => panic!("CONNECT_REQUEST without connection data: {other:?}"),
    };
    assert_eq!(announced, 1, "the request announces the client's QP's SRQ");
    let sside = verbs_side(server, lch, req.id, qp_of, (None, None));
    ok(server.accept(req.id, None), "accept");
    expect_event_for(client, cch, EventKind::Established, cid, 0);
    expect_event_for(server, lch, EventKind::Established, req.id, 0);
    let wr = SendWr::new(1, SendOp::Send, Payload::Inline(b"to the SRQ"));
    ok(server.post_send(sside.qp, &wr), "post_send");
    let wc = next_completion(client, &side);
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::SUCCESS, 5, 10)
    );
    let e = client.post_recv(
        side.qp,
        &RecvWr {
            wr_id: 6,
            sg_list: &[rx.sge(0, 8)],
        },
    );
    expect_errno(e, Call::PostRecv, Errno::EINVAL);
    expect_errno(client.destroy_id_srq(cid), Call::DestroyIdSrq, Errno::EBUSY);
    expect_errno(client.destroy_srq(srq), Call::DestroySrq, Errno::EBUSY);
    ok(client.disconnect(cid), "disconnect");
    ok(client.destroy_qp(cid), "destroy_qp");
    ok(client.destroy_id_srq(cid), "destroy_id_srq");
    assert_eq!(ok(client.srq(cid), "id->srq"), None);
    expect_errno(
        client.destroy_id_srq(cid),
        Call::DestroyIdSrq,
        Errno::EINVAL,
    );
}
