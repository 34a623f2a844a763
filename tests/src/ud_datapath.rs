//! UD and multicast data path scenarios, generic over [`DataPath`]: they run on simulated beds
//! (`tests/tests/sim_ud.rs`, with exact virtual times on top) and on real librdmacm
//! (`backend-verbs/tests/datapath.rs`, in the Soft-RoCE VM).
//!
//! The setup follows rdma-core's `udaddy`: the server listens in the UDP port space, gives
//! each CONNECT_REQUEST's id a UD QP, posts its receives and accepts (the SIDR reply); the
//! client resolves the address and the route, makes its UD QP and connects, and its
//! ESTABLISHED carries the server's QP number, qkey and address handle attributes, from which
//! it makes the address handle it sends through. Receives are checked as libibverbs reports
//! UD receives: the sender's QP number, the 40 bytes of GRH space before the payload,
//! counted in `byte_len`.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpAttr, QpInitAttrEx, QpState, SendOp, SendWr,
    UdDest, WcOpcode, WcStatus, WorkCompletion, GRH_LEN, MULTICAST_QPN,
};
use cmtwin::{
    AhAttr, AhHandle, Call, ChannelHandle, CmBackend, Errno, EventKind, EventParam, IdHandle,
    PortSpace, QpType, UdData, Wait,
};

use crate::datapath::{completion_through_channel, post_recv_all, region, Side};
use crate::steps::{expect_errno, expect_event_for, ok};

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;

/// How long a scenario waits to be sure that a datagram did not arrive.
pub const SILENCE: Duration = Duration::from_millis(200);

/// How long a scenario waits for a completion before it fails (datagrams that should arrive
/// take microseconds, on the simulator and on Soft-RoCE alike).
pub const STEP: Duration = Duration::from_secs(10);

/// The next completion of `side`'s CQ, waiting through its completion channel (poll, arm,
/// poll again, wait for the CQ event, acknowledge it); fails after [`STEP`] without one.
#[track_caller]
pub fn next_completion<B: DataPath>(cm: &B, side: &Side) -> WorkCompletion {
    completion_through_channel(cm, side, Wait::Timeout(STEP))
        .unwrap_or_else(|e| panic!("no completion on {} within {STEP:?}: {e}", side.cq))
}

/// Gives `id` a PD, a completion channel, one CQ of 64 entries for both queues and a UD QP.
pub fn ud_side<B: DataPath>(cm: &B, channel: ChannelHandle, id: IdHandle) -> Side {
    ud_side_with(cm, channel, id, false).expect("a UD QP")
}

/// [`ud_side`], the QP made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` when
/// `block_self_loopback`; the error of `create_qp_ex` if it fails.
pub fn ud_side_with<B: DataPath>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    block_self_loopback: bool,
) -> cmtwin::Result<Side> {
    let pd = ok(cm.alloc_pd(id), "alloc_pd");
    let comp = ok(cm.create_comp_channel(id), "create_comp_channel");
    let cq = ok(cm.create_cq(id, 64, Some(comp)), "create_cq");
    let mut attr = QpInitAttrEx::rc(pd, cq, cq);
    attr.qp_type = QpType::Ud;
    attr.block_self_multicast_loopback = block_self_loopback;
    let qpn = cm.create_qp_ex(id, &attr)?;
    let qp = ok(cm.qp(id), "id->qp").expect("the id has its QP");
    Ok(Side {
        channel,
        id,
        pd,
        comp,
        cq,
        qpn,
        qp,
    })
}

/// A UD "connection" as udaddy makes it: the server's listener and UD side, the client's UD
/// side, and what the client's ESTABLISHED said of the server (QPN, qkey, address).
#[derive(Clone, Copy, Debug)]
pub struct UdPair {
    /// The server's listening id.
    pub listener: IdHandle,
    /// The server's side (the CONNECT_REQUEST's id).
    pub server: Side,
    /// The client's side.
    pub client: Side,
    /// The client's ESTABLISHED's datagram data.
    pub to_server: UdData,
}

/// Makes a [`UdPair`] on `addr`: `before_accept` runs on the server's side before `accept`
/// (to post receives).
pub fn ud_connect<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    before_accept: impl FnOnce(&Side),
) -> UdPair {
    let listener = crate::datapath::listen_on(server, addr, PortSpace::UDP);
    let lch = listener.channel;
    let (cch, cid) = crate::datapath::routed_client(client, addr, PortSpace::UDP);
    let client_side = ud_side(client, cch, cid);
    ok(client.connect(cid, None), "connect (SIDR request)");
    let req = crate::steps::expect_request(server, &listener);
    let server_side = ud_side(server, lch, req.id);
    before_accept(&server_side);
    ok(server.accept(req.id, None), "accept (SIDR reply)");
    let est = expect_event_for(client, cch, EventKind::Established, cid, 0);
    let EventParam::Ud(to_server) = est.param else {
        panic!(
            "a UD ESTABLISHED carries datagram data, got {:?}",
            est.param
        );
    };
    assert_eq!(to_server.qp_num, server_side.qpn, "the server's QPN");
    UdPair {
        listener: listener.id,
        server: server_side,
        client: client_side,
        to_server,
    }
}

/// Sends `data` from a fresh region of `side` to `dest` (wr_id `wr_id`); the region.
pub fn ud_send<B: DataPath>(
    cm: &B,
    side: &Side,
    wr_id: u64,
    dest: UdDest,
    data: &[u8],
) -> MemoryRegion {
    let mr = ok(
        cm.reg_mr(side.pd, data.to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, data.len() as u32)];
    let wr = SendWr::ud_send(wr_id, dest, None, Payload::Sges(&sge));
    ok(cm.post_send(side.qp, &wr), "post_send (UD)");
    mr
}

/// Answers the datagram `received` (its completion, and the region it was received into, GRH
/// space first) from `side`, as udaddy's server does: an address handle made from the receive
/// (`ibv_create_ah_from_wc`), the sender's QP number, the rdma_cm's qkey; sends `data` as
/// `wr_id` and asserts the send's successful completion. Returns the address handle.
#[track_caller]
pub fn answer<B: DataPath>(
    cm: &B,
    side: &Side,
    received: (&WorkCompletion, &MemoryRegion),
    wr_id: u64,
    data: &[u8],
) -> AhHandle {
    let (wc, rx) = received;
    let mut grh = [0; GRH_LEN as usize];
    ok(cm.mr_read(rx.handle, 0, &mut grh), "mr_read");
    let ah = ok(cm.create_ah_from_wc(side.pd, wc, &grh), "create_ah_from_wc");
    let to = UdDest {
        ah,
        remote_qpn: wc.src_qp,
        remote_qkey: cmtwin::RDMA_UDP_QKEY,
    };
    ud_send(cm, side, wr_id, to, data);
    assert_ud_sent(&next_completion(cm, side), side, wr_id, data.len());
    ah
}

/// The destination `ud` describes, through the address handle `ah`, with qkey `qkey`.
pub fn dest(ah: AhHandle, ud: &UdData, qkey: u32) -> UdDest {
    UdDest {
        ah,
        remote_qpn: ud.qp_num,
        remote_qkey: qkey,
    }
}

/// Asserts that `wc` is the successful receive `wr_id` of `len` payload bytes sent by QP
/// `src_qp`, with a GRH when the sender's address handle `ah` is global, and that the
/// payload is `data` at offset [`GRH_LEN`] of `mr`.
#[track_caller]
pub fn assert_ud_receive<B: DataPath>(
    cm: &B,
    wc: &WorkCompletion,
    expected: (u64, u32, &AhAttr),
    mr: &MemoryRegion,
    data: &[u8],
) {
    let (wr_id, src_qp, ah) = expected;
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::SUCCESS, WcOpcode::Recv),
        "receive {wc:?}"
    );
    assert_eq!(wc.byte_len, GRH_LEN + data.len() as u32, "GRH + payload");
    assert_eq!(wc.src_qp, src_qp, "the sender's QP number");
    assert_eq!(
        wc.grh, ah.is_global,
        "IBV_WC_GRH when the sender's AH is global"
    );
    let mut got = vec![0; data.len()];
    ok(cm.mr_read(mr.handle, GRH_LEN as usize, &mut got), "mr_read");
    assert_eq!(got, data, "the payload after the GRH space");
}

/// Asserts that `wc` is `side`'s successful UD send `wr_id` of `len` bytes.
#[track_caller]
pub fn assert_ud_sent(wc: &WorkCompletion, side: &Side, wr_id: u64, len: usize) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (
            wr_id,
            WcStatus::SUCCESS,
            WcOpcode::Send,
            len as u32,
            side.qpn
        ),
        "send {wc:?}"
    );
}

/// Asserts that `side`'s CQ gets no completion within [`SILENCE`] (armed, then a CQ event
/// waited for with a timeout).
#[track_caller]
pub fn assert_no_completion<B: DataPath>(cm: &B, side: &Side) {
    let mut wc = [WorkCompletion::default()];
    assert_eq!(
        ok(cm.poll_cq(side.cq, &mut wc), "poll_cq"),
        0,
        "{:?}",
        wc[0]
    );
    ok(cm.req_notify_cq(side.cq, false), "req_notify_cq");
    expect_errno(
        cm.get_cq_event(side.comp, Wait::Timeout(SILENCE)),
        Call::GetCqEvent,
        Errno::ETIMEDOUT,
    );
    assert_eq!(
        ok(cm.poll_cq(side.cq, &mut wc), "poll_cq"),
        0,
        "{:?}",
        wc[0]
    );
}

/// udaddy's exchange: the client sends `data` to the server's QP through an address handle
/// made from its ESTABLISHED; the server's receive completes with the client's QP number and
/// the payload after the GRH space. Returns the pair and the client's address handle.
pub fn ud_send_reaches_the_server<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    data: &[u8],
) -> (UdPair, AhHandle) {
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(server, s.pd, GRH_LEN as usize + 256, 0, LW);
        post_recv_all(server, s.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted before accept");
    let ah = ok(
        client.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    ud_send(client, &pair.client, 2, to, data);
    assert_ud_sent(
        &next_completion(client, &pair.client),
        &pair.client,
        2,
        data.len(),
    );
    let wc = next_completion(server, &pair.server);
    let expected = (1, pair.client.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, expected, &rx, data);
    (pair, ah)
}

/// udaddy's reply: after [`ud_send_reaches_the_server`], the server makes an address handle
/// from the receive's completion and GRH (`ibv_create_ah_from_wc`: global when the receive
/// has a GRH, else routed to the completion's source LID) and answers the client's QP
/// (`src_qp`) with the id's qkey; the client's receive completes with the server's QP
/// number. A completion that is not a successful receive gives no handle (EINVAL).
pub fn the_server_answers_through_an_address_handle_from_the_receive<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) {
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(server, s.pd, GRH_LEN as usize + 64, 0, LW);
        post_recv_all(server, s.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted before accept");
    let back = region(client, pair.client.pd, GRH_LEN as usize + 64, 0, LW);
    post_recv_all(client, pair.client.qp, 5, &back);
    let ah = ok(
        client.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    ud_send(
        client,
        &pair.client,
        2,
        dest(ah, &pair.to_server, pair.to_server.qkey),
        b"ping",
    );
    assert_ud_sent(&next_completion(client, &pair.client), &pair.client, 2, 4);
    let wc = next_completion(server, &pair.server);
    answer(server, &pair.server, (&wc, &rx), 3, b"pong");
    let wc = next_completion(client, &pair.client);
    assert_eq!(
        (wc.wr_id, wc.status, wc.src_qp),
        (5, WcStatus::SUCCESS, pair.server.qpn)
    );
    let mut got = [0; 4];
    ok(
        client.mr_read(back.handle, GRH_LEN as usize, &mut got),
        "mr_read",
    );
    assert_eq!(&got, b"pong");
    let mut grh = [0; GRH_LEN as usize];
    ok(server.mr_read(rx.handle, 0, &mut grh), "mr_read");
    let mut flushed = wc;
    flushed.status = WcStatus::WR_FLUSH_ERR;
    expect_errno(
        server.create_ah_from_wc(pair.server.pd, &flushed, &grh),
        Call::CreateAhFromWc,
        Errno::EINVAL,
    );
}

/// On RoCE every UD receive has a GRH; a completion without one (`wc.grh` cleared) gives
/// `ibv_create_ah_from_wc` a handle without global route, which the kernel refuses on a
/// RoCE port: EINVAL.
pub fn on_roce_a_receive_without_grh_gives_no_address_handle<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) {
    let (pair, _) = ud_send_reaches_the_server(server, client, addr, b"no grh");
    let wc = WorkCompletion {
        wr_id: 1,
        status: WcStatus::SUCCESS,
        opcode: WcOpcode::Recv,
        byte_len: GRH_LEN + 6,
        qp_num: pair.server.qpn,
        src_qp: pair.client.qpn,
        ..WorkCompletion::default()
    };
    expect_errno(
        server.create_ah_from_wc(pair.server.pd, &wc, &[0; GRH_LEN as usize]),
        Call::CreateAhFromWc,
        Errno::EINVAL,
    );
}

/// What [`an_external_ud_qp_talks_with_an_id_made_one`] saw.
#[derive(Clone, Copy, Debug)]
pub struct ExternalUdExchange {
    /// The id-made pair (the client's id lends its device, PD and attributes).
    pub pair: UdPair,
    /// The QP made apart from ids, on the client's host (`id` is the client's id).
    pub external: Side,
    /// The server's receive of the external QP's datagram.
    pub at_server: WorkCompletion,
    /// The external QP's receive of the server's answer.
    pub at_external: WorkCompletion,
}

/// A UD QP made apart from ids (`ibv_create_qp` in the client's PD, with its own CQ and
/// completion channel) is driven as librdmacm drives an id's: INIT with the client id's
/// `rdma_init_qp_attr` (pkey index 0, port 1, the UDP qkey), RTR, RTS with send PSN 0. It
/// sends to the server's id-made QP through an address handle of the client's ESTABLISHED
/// (the server's receive names it as `src_qp`), and the server answers it through an address
/// handle made from that receive.
pub fn an_external_ud_qp_talks_with_an_id_made_one<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> ExternalUdExchange {
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(server, s.pd, GRH_LEN as usize + 64, 0, LW);
        post_recv_all(server, s.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted before accept");
    let external = external_ud_side(client, &pair.client);
    let back = region(client, external.pd, GRH_LEN as usize + 64, 0, LW);
    post_recv_all(client, external.qp, 5, &back);
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        ..QpAttr::default()
    };
    ok(client.modify_qp(external.qp, &rtr), "modify_qp RTR");
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: 0,
        ..QpAttr::default()
    };
    ok(client.modify_qp(external.qp, &rts), "modify_qp RTS");
    let state = ok(client.query_qp_state(external.qp), "query_qp_state");
    assert_eq!(state, QpState::Rts);
    let ah = ok(
        client.create_ah(external.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    ud_send(client, &external, 2, to, b"apart");
    assert_ud_sent(&next_completion(client, &external), &external, 2, 5);
    let at_server = next_completion(server, &pair.server);
    let expected = (1, external.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &at_server, expected, &rx, b"apart");
    let reply = answer(server, &pair.server, (&at_server, &rx), 3, b"back");
    let at_external = next_completion(client, &external);
    assert_eq!(
        (at_external.wr_id, at_external.status, at_external.qp_num),
        (5, WcStatus::SUCCESS, external.qpn),
        "{at_external:?}"
    );
    assert_eq!(
        at_external.src_qp, pair.server.qpn,
        "the server's QP number"
    );
    assert_eq!(at_external.byte_len, GRH_LEN + 4);
    let mut got = [0; 4];
    ok(
        client.mr_read(back.handle, GRH_LEN as usize, &mut got),
        "mr_read",
    );
    assert_eq!(&got, b"back");
    ok(client.destroy_ah(ah), "destroy_ah");
    ok(server.destroy_ah(reply), "destroy_ah");
    ExternalUdExchange {
        pair,
        external,
        at_server,
        at_external,
    }
}

/// A UD QP apart from ids on `of`'s device and PD, with its own CQ (16 entries) and
/// completion channel, moved to INIT with `rdma_init_qp_attr(of.id, INIT)` (checked: pkey
/// index 0, port 1, librdmacm's UDP qkey).
pub fn external_ud_side<B: DataPath>(cm: &B, of: &Side) -> Side {
    let comp = ok(cm.create_comp_channel(of.id), "create_comp_channel");
    let cq = ok(cm.create_cq(of.id, 16, Some(comp)), "create_cq");
    let mut attr = QpInitAttrEx::rc(of.pd, cq, cq);
    attr.qp_type = QpType::Ud;
    let qp = ok(cm.create_external_qp(&attr), "create_external_qp (UD)");
    let qpn = ok(cm.qp_number(qp), "qp_number");
    assert_eq!(ok(cm.query_qp_state(qp), "query_qp_state"), QpState::Reset);
    let init = ok(cm.init_qp_attr(of.id, QpState::Init), "init_qp_attr INIT");
    assert_eq!(
        (init.pkey_index, init.ah_attr.port_num, init.qkey),
        (0, 1, cmtwin::RDMA_UDP_QKEY),
        "a UD id's INIT attributes"
    );
    ok(cm.modify_qp(qp, &init), "modify_qp INIT");
    assert_eq!(ok(cm.query_qp_state(qp), "query_qp_state"), QpState::Init);
    Side {
        channel: of.channel,
        id: of.id,
        pd: of.pd,
        comp,
        cq,
        qpn,
        qp,
    }
}

/// What happens next to a UD send whose post failed before RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterEarlyUdSend {
    /// The QP goes on to RTS and a second send is posted: that post sends both, in order.
    NextPost,
    /// The QP is moved to ERROR without reaching RTS: the kept send is flushed.
    Error,
}

/// What [`a_ud_send_posted_before_rts_stays_queued`] saw (times for the simulator's twin).
#[derive(Clone, Copy, Debug)]
pub struct EarlyUdSend {
    /// When the second send was posted (or the QP moved to ERROR).
    pub released_at: Duration,
    /// The server's receive of the kept datagram and when it was polled (none after
    /// [`AfterEarlyUdSend::Error`]).
    pub first_received_at: Option<Duration>,
}

/// A UD QP made apart from ids (as [`external_ud_side`]) in INIT, or RTR when `in_rtr`,
/// posts a send to the server's QP: the post fails with EINVAL, yet the request stays in the
/// send queue, nothing is sent, and reaching RTS sends nothing either (measured on rxe, Linux
/// 6.1 and 6.12: the provider writes the request into the queue before the kernel's doorbell
/// refuses). Then, as `then` says: the next post that succeeds sends both, in order (both
/// complete SUCCESS, the server receives "first" then "second"), or moving the QP to ERROR
/// flushes the kept send (WR_FLUSH_ERR) and the server receives nothing.
pub fn a_ud_send_posted_before_rts_stays_queued<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    in_rtr: bool,
    then: AfterEarlyUdSend,
) -> EarlyUdSend {
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let first = region(server, s.pd, GRH_LEN as usize + 16, 0, LW);
        let second = region(server, s.pd, GRH_LEN as usize + 16, 0, LW);
        post_recv_all(server, s.qp, 10, &first);
        post_recv_all(server, s.qp, 11, &second);
        rx.set(Some((first, second)));
    });
    let (first_rx, second_rx) = rx.get().expect("posted before accept");
    let external = external_ud_side(client, &pair.client);
    let step = |state: QpState| {
        let attr = QpAttr {
            qp_state: Some(state),
            ..QpAttr::default()
        };
        ok(client.modify_qp(external.qp, &attr), "modify_qp");
    };
    if in_rtr {
        step(QpState::Rtr);
    }
    let ah = ok(
        client.create_ah(external.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    let first = ok(
        client.reg_mr(external.pd, b"first".to_vec(), AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [first.sge(0, 5)];
    let wr = SendWr::ud_send(1, to, None, Payload::Sges(&sge));
    expect_errno(
        client.post_send(external.qp, &wr),
        Call::PostSend,
        Errno::EINVAL,
    );
    assert_no_completion(client, &external);
    assert_no_completion(server, &pair.server);
    if then == AfterEarlyUdSend::Error {
        let released_at = client.now();
        step(QpState::Error);
        let wc = next_completion(client, &external);
        assert_eq!(
            (wc.wr_id, wc.status, wc.qp_num),
            (1, WcStatus::WR_FLUSH_ERR, external.qpn),
            "the kept send is flushed: {wc:?}"
        );
        assert_no_completion(server, &pair.server);
        return EarlyUdSend {
            released_at,
            first_received_at: None,
        };
    }
    if !in_rtr {
        step(QpState::Rtr);
    }
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: 0,
        ..QpAttr::default()
    };
    ok(client.modify_qp(external.qp, &rts), "modify_qp RTS");
    assert_no_completion(client, &external);
    assert_no_completion(server, &pair.server);
    let released_at = client.now();
    ud_send(client, &external, 2, to, b"second");
    assert_ud_sent(&next_completion(client, &external), &external, 1, 5);
    assert_ud_sent(&next_completion(client, &external), &external, 2, 6);
    let wc = next_completion(server, &pair.server);
    let first_received_at = Some(server.now());
    let from = (10, external.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, from, &first_rx, b"first");
    let wc = next_completion(server, &pair.server);
    let from = (11, external.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, from, &second_rx, b"second");
    ok(client.destroy_ah(ah), "destroy_ah");
    EarlyUdSend {
        released_at,
        first_received_at,
    }
}

/// A datagram whose qkey is not the receiver's is dropped without a completion (the send
/// completes SUCCESS); the receive stays posted and takes the next datagram with the right
/// qkey.
pub fn a_qkey_mismatch_is_dropped<B: DataPath>(server: &B, client: &B, addr: SocketAddr) {
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(server, s.pd, GRH_LEN as usize + 64, 0, LW);
        post_recv_all(server, s.qp, 1, &mr);
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted before accept");
    let ah = ok(
        client.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let wrong = dest(ah, &pair.to_server, pair.to_server.qkey ^ 0x1);
    ud_send(client, &pair.client, 2, wrong, b"wrong qkey");
    assert_ud_sent(&next_completion(client, &pair.client), &pair.client, 2, 10);
    assert_no_completion(server, &pair.server);
    let right = dest(ah, &pair.to_server, pair.to_server.qkey);
    ud_send(client, &pair.client, 3, right, b"right qkey");
    assert_ud_sent(&next_completion(client, &pair.client), &pair.client, 3, 10);
    let wc = next_completion(server, &pair.server);
    let expected = (1, pair.client.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, expected, &rx, b"right qkey");
}

/// What a bed does with a datagram longer than the receive at the head of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShortReceive {
    /// The receive completes with LOC_LEN_ERR and the QP stays usable (the specification's UD
    /// class D error with a completion: an InfiniBand HCA, as the simulator's InfiniBand devices).
    LengthError,
    /// The receive completes with LOC_QP_OP_ERR and the QP enters ERROR (rxe on Linux 6.1,
    /// measured: its copy into the receive fails with EINVAL, which its responder takes for a
    /// malformed receive, a class A error).
    QpOperationError,
    /// No completion at all: the datagram is dropped and the receive stays posted (rxe on
    /// Linux 6.12, measured: nothing within 10 s).
    Dropped,
}

/// A receive smaller than the GRH space and the payload: as `bed` says, a LOC_LEN_ERR
/// completion after which the QP stays usable (the next receive takes the next datagram),
/// rxe 6.1's LOC_QP_OP_ERR with the QP in ERROR, or rxe 6.12's silence.
pub fn a_receive_too_small_is_a_length_error<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    bed: ShortReceive,
) {
    let data = b"sixteen bytes..!";
    let small = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(server, s.pd, GRH_LEN as usize + data.len() - 1, 0, LW);
        post_recv_all(server, s.qp, 1, &mr);
        small.set(Some(mr));
    });
    let ah = ok(
        client.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    ud_send(client, &pair.client, 2, to, data);
    assert_ud_sent(
        &next_completion(client, &pair.client),
        &pair.client,
        2,
        data.len(),
    );
    if bed == ShortReceive::Dropped {
        let mut wc = [WorkCompletion::default()];
        ok(server.req_notify_cq(pair.server.cq, false), "req_notify_cq");
        let waited = server.get_cq_event(pair.server.comp, Wait::Timeout(STEP));
        assert!(waited.is_err(), "no CQ event within {STEP:?}: {waited:?}");
        assert_eq!(ok(server.poll_cq(pair.server.cq, &mut wc), "poll_cq"), 0);
        return;
    }
    let wc = next_completion(server, &pair.server);
    if bed == ShortReceive::QpOperationError {
        assert_eq!(
            (wc.wr_id, wc.status, wc.qp_num),
            (1, WcStatus::LOC_QP_OP_ERR, pair.server.qpn),
            "{wc:?}"
        );
        let state = ok(server.query_qp_state(pair.server.qp), "query_qp_state");
        assert_eq!(
            state,
            QpState::Error,
            "a class A error moves the QP to ERROR"
        );
        return;
    }
    assert_eq!(
        (wc.wr_id, wc.status, wc.qp_num),
        (1, WcStatus::LOC_LEN_ERR, pair.server.qpn),
        "{wc:?}"
    );
    let big = region(server, pair.server.pd, GRH_LEN as usize + 64, 0, LW);
    post_recv_all(server, pair.server.qp, 4, &big);
    ud_send(client, &pair.client, 3, to, data);
    assert_ud_sent(
        &next_completion(client, &pair.client),
        &pair.client,
        3,
        data.len(),
    );
    let wc = next_completion(server, &pair.server);
    let expected = (4, pair.client.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, expected, &big, data);
}

/// A member of a multicast group: its id, joined, and its UD side with a receive posted.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    /// The member's side.
    pub side: Side,
    /// The group's datagram data from its MULTICAST_JOIN.
    pub group: UdData,
    /// The region its receive fills.
    pub rx: MemoryRegion,
}

/// A UDP-space id of `cm` bound to `local`, with a UD QP, joined to `group` (its
/// MULTICAST_JOIN fetched), with a receive of `recv_len` bytes posted when `recv_len` is not
/// 0 (wr_id 1).
pub fn join<B: DataPath>(cm: &B, local: SocketAddr, group: SocketAddr, recv_len: usize) -> Member {
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    ok(cm.bind_addr(id, local), "bind");
    let side = ud_side(cm, channel, id);
    let rx = region(cm, side.pd, recv_len.max(1), 0, LW);
    if recv_len > 0 {
        post_recv_all(cm, side.qp, 1, &rx);
    }
    ok(cm.join_multicast(id, group, 7), "join_multicast");
    let joined = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    let EventParam::Multicast { ud, .. } = joined.param else {
        panic!(
            "MULTICAST_JOIN carries the group's data, got {:?}",
            joined.param
        );
    };
    assert_eq!(ud.qp_num, MULTICAST_QPN, "a group's QPN");
    Member {
        side,
        group: ud,
        rx,
    }
}

/// Two members of the server's host join `group`, and so does the client (without a
/// receive posted); the client's send to the group (through an address handle of its
/// MULTICAST_JOIN's attributes, QPN 0xFFFFFF, the group's qkey) reaches both members, each
/// receive with the client's QP number and the payload after the GRH space.
pub fn multicast_reaches_every_member<B: DataPath>(
    server: &B,
    client: &B,
    (server_ip, client_ip): (std::net::IpAddr, std::net::IpAddr),
    group: SocketAddr,
    data: &[u8],
) -> [Member; 3] {
    let len = GRH_LEN as usize + 64;
    let a = join(server, SocketAddr::new(server_ip, 0), group, len);
    let b = join(server, SocketAddr::new(server_ip, 0), group, len);
    let sender = join(client, SocketAddr::new(client_ip, 0), group, 0);
    let ah = ok(
        client.create_ah(sender.side.pd, &sender.group.ah_attr),
        "create_ah",
    );
    let to = dest(ah, &sender.group, sender.group.qkey);
    ud_send(client, &sender.side, 2, to, data);
    assert_ud_sent(
        &next_completion(client, &sender.side),
        &sender.side,
        2,
        data.len(),
    );
    for m in [&a, &b] {
        let wc = next_completion(server, &m.side);
        let expected = (1, sender.side.qpn, &sender.group.ah_attr);
        assert_ud_receive(server, &wc, expected, &m.rx, data);
    }
    [a, b, sender]
}

/// What a bed does with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (mckey's `-l`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfLoopback {
    /// The QP is made and gets none of its own group datagrams (the simulator, hardware
    /// that has the flag).
    Blocked,
    /// The QP is refused with EOPNOTSUPP (rxe takes no creation flags; measured on rxe-6.1).
    Unsupported,
}

/// A member whose UD QP is made with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` and has a receive
/// posted sends to its group: the other member (on the server's host) receives the datagram,
/// the sender only its send's completion. Or, as `bed` says, the QP is refused (EOPNOTSUPP).
pub fn a_qp_blocking_self_loopback_gets_none_of_its_own_group_datagrams<B: DataPath>(
    server: &B,
    client: &B,
    (server_ip, client_ip): (std::net::IpAddr, std::net::IpAddr),
    group: SocketAddr,
    bed: SelfLoopback,
) {
    let channel = ok(client.create_event_channel(), "channel");
    let id = ok(client.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    ok(client.bind_addr(id, SocketAddr::new(client_ip, 0)), "bind");
    let made = ud_side_with(client, channel, id, true);
    if bed == SelfLoopback::Unsupported {
        expect_errno(made, Call::CreateQpEx, Errno::EOPNOTSUPP);
        return;
    }
    let sender = made.expect("a UD QP that blocks its own loopback");
    let len = GRH_LEN as usize + 64;
    let own = region(client, sender.pd, len, 0, LW);
    post_recv_all(client, sender.qp, 1, &own);
    let member = join(server, SocketAddr::new(server_ip, 0), group, len);
    ok(client.join_multicast(id, group, 7), "join_multicast");
    let joined = expect_event_for(client, channel, EventKind::MulticastJoin, id, 0);
    let EventParam::Multicast { ud, .. } = joined.param else {
        panic!(
            "MULTICAST_JOIN carries the group's data, got {:?}",
            joined.param
        );
    };
    let ah = ok(client.create_ah(sender.pd, &ud.ah_attr), "create_ah");
    ud_send(client, &sender, 2, dest(ah, &ud, ud.qkey), b"not to me");
    assert_ud_sent(&next_completion(client, &sender), &sender, 2, 9);
    let wc = next_completion(server, &member.side);
    assert_ud_receive(
        server,
        &wc,
        (1, sender.qpn, &ud.ah_attr),
        &member.rx,
        b"not to me",
    );
    assert_no_completion(client, &sender);
}

/// What a UD send cannot be: without a destination (EINVAL), an RDMA write (EINVAL), through
/// a destroyed address handle (EBADF) or one of another PD (EINVAL), above the port's MTU
/// (EINVAL); an address handle on a port the device does not have (EINVAL).
pub fn ud_misuse_is_refused<B: DataPath>(server: &B, client: &B, addr: SocketAddr) {
    let pair = ud_connect(server, client, addr, |_| {});
    let (c, side) = (client, &pair.client);
    let attr = pair.to_server.ah_attr;
    let ah = ok(c.create_ah(side.pd, &attr), "create_ah");
    let to = dest(ah, &pair.to_server, pair.to_server.qkey);
    let mr = ok(
        c.reg_mr(side.pd, vec![1; 8192], AccessFlags::NONE),
        "reg_mr",
    );
    let sge = [mr.sge(0, 16)];
    let bare = SendWr::new(1, SendOp::Send, Payload::Sges(&sge));
    expect_errno(c.post_send(side.qp, &bare), Call::PostSend, Errno::EINVAL);
    let write = SendWr {
        ud: Some(to),
        ..SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            Payload::Sges(&sge),
        )
    };
    expect_errno(c.post_send(side.qp, &write), Call::PostSend, Errno::EINVAL);
    let huge = [mr.sge(0, 8192)];
    let too_long = SendWr::ud_send(1, to, None, Payload::Sges(&huge));
    expect_errno(
        c.post_send(side.qp, &too_long),
        Call::PostSend,
        Errno::EINVAL,
    );
    let other_pd = ok(c.alloc_pd(side.id), "alloc_pd");
    let foreign = ok(c.create_ah(other_pd, &attr), "create_ah in another PD");
    let wr = SendWr::ud_send(
        1,
        dest(foreign, &pair.to_server, 0),
        None,
        Payload::Sges(&sge),
    );
    expect_errno(c.post_send(side.qp, &wr), Call::PostSend, Errno::EINVAL);
    let mut port_two = attr;
    port_two.port_num = 2;
    expect_errno(
        c.create_ah(side.pd, &port_two),
        Call::CreateAh,
        Errno::EINVAL,
    );
    expect_errno(c.dealloc_pd(other_pd), Call::DeallocPd, Errno::EBUSY);
    ok(c.destroy_ah(foreign), "destroy_ah");
    ok(c.dealloc_pd(other_pd), "dealloc_pd once its AH is gone");
    ok(c.destroy_ah(ah), "destroy_ah");
    let stale = SendWr::ud_send(1, to, None, Payload::Sges(&sge));
    expect_errno(c.post_send(side.qp, &stale), Call::PostSend, Errno::EBADF);
    expect_errno(c.destroy_ah(ah), Call::DestroyAh, Errno::EBADF);
    assert_no_completion(c, side);
}

/// A UD destination on an RC QP is refused (EINVAL): `side` is a connected side of `cm`
/// (the address handle leads to its peer: the path of its QP's RTR attributes).
pub fn a_ud_destination_on_an_rc_qp_is_refused<B: DataPath>(cm: &B, side: &Side) {
    let pd = side.pd;
    let path = ok(cm.init_qp_attr(side.id, QpState::Rtr), "init_qp_attr").ah_attr;
    let ah = ok(cm.create_ah(pd, &path), "create_ah");
    let mr = ok(cm.reg_mr(pd, vec![1; 16], AccessFlags::NONE), "reg_mr");
    let sge = [mr.sge(0, 16)];
    let to = UdDest {
        ah,
        remote_qpn: 1,
        remote_qkey: 1,
    };
    let wr = SendWr::ud_send(1, to, None, Payload::Sges(&sge));
    expect_errno(cm.post_send(side.qp, &wr), Call::PostSend, Errno::EINVAL);
    ok(cm.destroy_ah(ah), "destroy_ah");
    ok(cm.dereg_mr(mr.handle), "dereg_mr");
}

/// The ids of a [`UdPair`], destroyed (their QPs with them), and the listener.
pub fn teardown_pair<B: CmBackend>(server: &B, client: &B, pair: &UdPair) {
    ok(client.destroy_qp(pair.client.id), "destroy client QP");
    ok(client.destroy_id(pair.client.id), "destroy client id");
    ok(server.destroy_qp(pair.server.id), "destroy server QP");
    ok(server.destroy_id(pair.server.id), "destroy server id");
    ok(server.destroy_id(pair.listener), "destroy listener");
}
