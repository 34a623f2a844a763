//! Steps of data path scenarios, generic over [`DataPath`]: connections whose QPs have their
//! own PD, one CQ for both queues and a completion channel, registered regions, and waiting
//! for completions through the channel as libibverbs programs do.

use std::net::SocketAddr;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, QpInitAttrEx, QpState, RecvWr, WorkCompletion,
};
use cmtwin::{
    ChannelHandle, CmBackend, CompChannelHandle, ConnParam, CqHandle, EventKind, IdHandle,
    PdHandle, PortSpace, QpCap, QpHandle, QpType, SrqHandle, Wait,
};

use crate::steps::{expect_event_for, expect_request, ok, Listener, RESOLVE_TIMEOUT};

/// One side of a connection: its id and the verbs objects of its QP.
#[derive(Clone, Copy, Debug)]
pub struct Side {
    /// The channel the id's CM events arrive on.
    pub channel: ChannelHandle,
    /// The id.
    pub id: IdHandle,
    /// The QP's PD.
    pub pd: PdHandle,
    /// The completion channel of `cq`.
    pub comp: CompChannelHandle,
    /// The one CQ of both queues.
    pub cq: CqHandle,
    /// The QP's number.
    pub qpn: u32,
    /// The QP (`id->qp`, or for UC the QP made apart from the id).
    pub qp: QpHandle,
}

/// A connection: the server's listener and both sides.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    /// The server's listening id.
    pub listener: IdHandle,
    /// The server's connected child.
    pub server: Side,
    /// The client.
    pub client: Side,
}

/// The PD, completion channel and CQ a QP is made with (several QPs may share them).
#[derive(Clone, Copy, Debug)]
pub struct Objects {
    /// The PD.
    pub pd: PdHandle,
    /// The CQ's completion channel.
    pub comp: CompChannelHandle,
    /// The CQ of both queues.
    pub cq: CqHandle,
}

/// Gives `id` a PD, a completion channel and one CQ of 64 entries reporting to it (or the
/// `shared` ones), and a QP of type `qp_type` (RC or UC) and capacities `cap` completing
/// into that CQ, taking its receives from `srq` if given (else from the id's SRQ, if it has
/// one).
pub fn verbs_side<B: DataPath>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    (qp_type, cap): (QpType, QpCap),
    (shared, srq): (Option<Objects>, Option<SrqHandle>),
) -> Side {
    let objects = shared.unwrap_or_else(|| new_objects(cm, id));
    let mut attr = QpInitAttrEx::rc(objects.pd, objects.cq, objects.cq);
    attr.qp_type = qp_type;
    attr.cap = cap;
    attr.srq = srq;
    let qpn = ok(cm.create_qp_ex(id, &attr), "create_qp_ex");
    let qp = ok(cm.qp(id), "id->qp").expect("the id has its QP");
    Side {
        channel,
        id,
        pd: objects.pd,
        comp: objects.comp,
        cq: objects.cq,
        qpn,
        qp,
    }
}

/// A PD, a completion channel and a CQ of 64 entries reporting to it, on `id`'s device.
fn new_objects<B: DataPath>(cm: &B, id: IdHandle) -> Objects {
    let pd = ok(cm.alloc_pd(id), "alloc_pd");
    let comp = ok(cm.create_comp_channel(id), "create_comp_channel");
    let cq = ok(cm.create_cq(id, 64, Some(comp)), "create_cq");
    Objects { pd, comp, cq }
}

/// How [`start_connection`] connects: the connect and accept parameters, the QPs'
/// capacities, and the objects the server's QP shares, if any.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// `connect`'s parameters.
    pub connect: ConnParam,
    /// `accept`'s parameters.
    pub accept: ConnParam,
    /// Both QPs' capacities.
    pub cap: QpCap,
    /// Objects the server's QP is made with instead of its own.
    pub server_objects: Option<Objects>,
    /// Both QPs' type: RC when `None`, else this connected type (UC: made apart from the
    /// ids, see [`start_connection`]).
    pub qp_type: Option<QpType>,
    /// The SRQ the server's QP takes its receives from, if any.
    pub server_srq: Option<SrqHandle>,
}

/// Listens on `addr` and connects a client to it as `setup` says, both QPs made by
/// [`verbs_side`] (UC QPs apart from the ids: `start_uc_connection`); `before_accept` runs on
/// the server's side before its `accept` (to post receives). Returns once the client has its
/// ESTABLISHED (for UC, once it sent the RTU); the server's is not fetched.
pub fn start_connection<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    setup: &Setup,
    before_accept: impl FnOnce(&Side),
) -> Conn {
    if setup.qp_type == Some(QpType::Uc) {
        return start_uc_connection(server, client, addr, setup, before_accept);
    }
    let listener = listen_on(server, addr, PortSpace::TCP);
    let lch = listener.channel;
    let (cch, cid) = routed_client(client, addr, PortSpace::TCP);
    let qp = (setup.qp_type.unwrap_or(QpType::Rc), setup.cap);
    let client_side = verbs_side(client, cch, cid, qp, (None, None));
    ok(client.connect(cid, Some(&setup.connect)), "connect");
    let req = expect_request(server, &listener);
    let shared = (setup.server_objects, setup.server_srq);
    let server_side = verbs_side(server, lch, req.id, qp, shared);
    before_accept(&server_side);
    ok(server.accept(req.id, Some(&setup.accept)), "accept");
    expect_event_for(client, cch, EventKind::Established, cid, 0);
    Conn {
        listener: listener.id,
        server: server_side,
        client: client_side,
    }
}

/// [`start_connection`] of UC QPs, as Linux makes such a connection through this API: an
/// id's connection is RC (the kernel's type for RDMA_PS_TCP), whose RTR attributes a UC QP
/// on the id refuses, so each side makes its UC QP apart from its id ([`uc_side`]), moves it
/// with `init_qp_attr` (which `modify_qp` narrows to UC's attributes) and names it in
/// `connect` and `accept`; the client sends the RTU with `establish` once its QP is in RTS.
fn start_uc_connection<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    setup: &Setup,
    before_accept: impl FnOnce(&Side),
) -> Conn {
    let listener = listen_on(server, addr, PortSpace::TCP);
    let (cch, cid) = routed_client(client, addr, PortSpace::TCP);
    let client_side = uc_side(client, cch, cid, setup.cap, (None, None));
    let connect = ConnParam {
        qp_num: client_side.qpn,
        ..setup.connect.clone()
    };
    ok(client.connect(cid, Some(&connect)), "connect");
    let req = expect_request(server, &listener);
    let shared = (setup.server_objects, setup.server_srq);
    let server_side = uc_side(server, listener.channel, req.id, setup.cap, shared);
    move_with_cm_attrs(server, &server_side, &[QpState::Rtr, QpState::Rts]);
    before_accept(&server_side);
    let accept = ConnParam {
        qp_num: server_side.qpn,
        ..setup.accept.clone()
    };
    ok(server.accept(req.id, Some(&accept)), "accept");
    expect_event_for(client, cch, EventKind::ConnectResponse, cid, 0);
    move_with_cm_attrs(client, &client_side, &[QpState::Rtr, QpState::Rts]);
    ok(client.establish(cid), "establish");
    Conn {
        listener: listener.id,
        server: server_side,
        client: client_side,
    }
}

/// As [`verbs_side`], but the UC QP is made apart from `id` (`create_external_qp`) and moved
/// to INIT with the id's attributes.
fn uc_side<B: DataPath>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    cap: QpCap,
    (shared, srq): (Option<Objects>, Option<SrqHandle>),
) -> Side {
    let objects = shared.unwrap_or_else(|| new_objects(cm, id));
    let mut attr = QpInitAttrEx::rc(objects.pd, objects.cq, objects.cq);
    attr.qp_type = QpType::Uc;
    attr.cap = cap;
    attr.srq = srq;
    let qp = ok(cm.create_external_qp(&attr), "ibv_create_qp");
    let side = Side {
        channel,
        id,
        pd: objects.pd,
        comp: objects.comp,
        cq: objects.cq,
        qpn: ok(cm.qp_number(qp), "qp_num"),
        qp,
    };
    move_with_cm_attrs(cm, &side, &[QpState::Init]);
    side
}

/// Moves `side`'s QP through `states` with the attributes `init_qp_attr` gives its id.
fn move_with_cm_attrs<B: DataPath>(cm: &B, side: &Side, states: &[QpState]) {
    for &state in states {
        let attr = ok(cm.init_qp_attr(side.id, state), "rdma_init_qp_attr");
        ok(cm.modify_qp(side.qp, &attr), "ibv_modify_qp");
    }
}

/// A listening id of port space `ps` on `addr`, on a channel of its own.
pub fn listen_on<B: CmBackend>(server: &B, addr: SocketAddr, ps: PortSpace) -> Listener {
    let channel = ok(server.create_event_channel(), "server channel");
    let id = ok(server.create_id(Some(channel), 0, ps), "listener");
    ok(server.bind_addr(id, addr), "bind");
    ok(server.listen(id, 8), "listen");
    Listener { channel, id, addr }
}

/// A client id of port space `ps`, on a channel of its own, with its address and route to
/// `addr` resolved.
pub fn routed_client<B: CmBackend>(
    client: &B,
    addr: SocketAddr,
    ps: PortSpace,
) -> (ChannelHandle, IdHandle) {
    let cch = ok(client.create_event_channel(), "client channel");
    let cid = ok(client.create_id(Some(cch), 0, ps), "client id");
    ok(
        client.resolve_addr(cid, None, addr, RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    expect_event_for(client, cch, EventKind::AddrResolved, cid, 0);
    ok(client.resolve_route(cid, RESOLVE_TIMEOUT), "resolve_route");
    expect_event_for(client, cch, EventKind::RouteResolved, cid, 0);
    (cch, cid)
}

/// [`start_connection`], then the server's ESTABLISHED.
pub fn connect_with<B: DataPath>(server: &B, client: &B, addr: SocketAddr, setup: &Setup) -> Conn {
    let conn = start_connection(server, client, addr, setup, |_| {});
    expect_event_for(
        server,
        conn.server.channel,
        EventKind::Established,
        conn.server.id,
        0,
    );
    conn
}

/// [`connect_with`] with default parameters and capacities.
pub fn connect<B: DataPath>(server: &B, client: &B, addr: SocketAddr) -> Conn {
    connect_with(server, client, addr, &Setup::default())
}

/// A region of `len` bytes of `fill` in `pd`.
pub fn region<B: DataPath>(
    cm: &B,
    pd: PdHandle,
    len: usize,
    fill: u8,
    access: AccessFlags,
) -> MemoryRegion {
    ok(cm.reg_mr(pd, vec![fill; len], access), "reg_mr")
}

/// Posts a receive of the whole of `mr` on `qp`.
pub fn post_recv_all<B: DataPath>(cm: &B, qp: QpHandle, wr_id: u64, mr: &MemoryRegion) {
    let sge = [mr.sge(0, mr.length as u32)];
    ok(
        cm.post_recv(
            qp,
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        ),
        "post_recv",
    );
}

/// The next completion of `side`'s CQ, waiting for it through the completion channel: poll,
/// arm, poll again (a completion may have come in between), wait for the CQ event,
/// acknowledge it.
pub fn next_completion<B: DataPath>(cm: &B, side: &Side) -> WorkCompletion {
    ok(
        completion_through_channel(cm, side, Wait::Block),
        "get_cq_event",
    )
}

/// The next completion of `side`'s CQ as [`next_completion`] waits for it, each wait for a
/// CQ event bounded by `wait`: the error of the wait that found none.
pub fn completion_through_channel<B: DataPath>(
    cm: &B,
    side: &Side,
    wait: Wait,
) -> cmtwin::Result<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    loop {
        if ok(cm.poll_cq(side.cq, &mut wc), "poll_cq") == 1 {
            return Ok(wc[0]);
        }
        ok(cm.req_notify_cq(side.cq, false), "req_notify_cq");
        if ok(cm.poll_cq(side.cq, &mut wc), "poll_cq") == 1 {
            return Ok(wc[0]);
        }
        let cq = cm.get_cq_event(side.comp, wait)?;
        assert_eq!(cq, side.cq, "the CQ event names the CQ");
        ok(cm.ack_cq_events(cq, 1), "ack_cq_events");
    }
}

/// Every completion `side`'s CQ holds now, without waiting.
pub fn drain<B: DataPath>(cm: &B, side: &Side) -> Vec<WorkCompletion> {
    let mut all = Vec::new();
    let mut wc = [WorkCompletion::default(); 8];
    loop {
        let n = ok(cm.poll_cq(side.cq, &mut wc), "poll_cq");
        all.extend_from_slice(&wc[..n]);
        if n < wc.len() {
            return all;
        }
    }
}
