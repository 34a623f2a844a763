//! `rdma_create_ep` and librdmacm's send-side helpers as C programs use them, generic over
//! [`DataPath`]: they run on simulated beds (`tests/tests/sim_datapath.rs`, with exact values
//! and virtual times on top) and on real librdmacm (`backend-verbs/tests/datapath.rs`, module
//! `ep_helpers`, in the Soft-RoCE VM).
//!
//! Both endpoints are made by `create_ep_ex` with a PD and one CQ of the program's own and
//! `sq_sig_all` false (C's zeroed attributes); the server's listener keeps them, so the id
//! `get_request` gives takes its QP in the server's PD, completing into the server's CQ. The
//! client then posts with C's flags: a send with flags 0 (no completion), a signaled one, an
//! inline one (copied at post time, up to the granted `max_inline_data`), an RDMA read and a
//! fenced send behind it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{
    DataPath, MemoryRegion, QpInitAttrEx, SendFlags, WcOpcode, WcStatus, WorkCompletion,
};
use cmtwin::{
    rai, AddrInfo, Call, ChannelHandle, Errno, EventKind, IdHandle, PortSpace, QpCap, QpInitAttr,
    QpType,
};

use crate::datapath::Objects;
use crate::steps::{expect_errno, expect_event_for, ok};

/// What both endpoints ask for: four requests and one entry each way, 32 inline bytes.
pub const ASKED: QpCap = QpCap {
    max_send_wr: 4,
    max_recv_wr: 4,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 32,
};

/// Bytes of each of the server's four receives.
const SLOT: usize = 64;

/// The client's message bytes (the first 8 go unsignaled, the next 8 signaled).
const MESSAGE: &[u8; 64] = b"unsignalsignaledinline bytes of the client, copied when posted!!";

/// What the scenario saw, for the simulator's exact checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpFlagsReport {
    /// The capacities `create_ep_ex` wrote back into the client's attributes.
    pub granted: QpCap,
    /// The capacities `query_qp_cap` read on the client's QP.
    pub queried: QpCap,
    /// The client's send completions, in order: (wr_id, opcode, the client's clock when the
    /// helper returned it, from when both sides had their ESTABLISHED).
    pub sends: Vec<(u64, WcOpcode, Duration)>,
    /// The server's receive completions, in order: (wr_id, byte_len).
    pub receives: Vec<(u64, u32)>,
}

/// A synchronous id bound to `ip` and the PD, completion channel and CQ of 64 entries made
/// through it (a C program's `ibv_alloc_pd(id->verbs)` before its endpoint exists).
fn device_objects<B: DataPath>(cm: &B, ip: IpAddr) -> (IdHandle, Objects) {
    let id = ok(cm.create_id(None, 0, PortSpace::TCP), "device id");
    ok(cm.bind_addr(id, SocketAddr::new(ip, 0)), "bind (device id)");
    let pd = ok(cm.alloc_pd(id), "alloc_pd");
    let comp = ok(cm.create_comp_channel(id), "create_comp_channel");
    let cq = ok(cm.create_cq(id, 64, Some(comp)), "create_cq");
    (id, Objects { pd, comp, cq })
}

/// C's zeroed `ibv_qp_init_attr` naming `objects`' PD and CQ, with [`ASKED`] capacities.
fn zeroed_attr(objects: &Objects) -> QpInitAttrEx {
    let mut attr = QpInitAttrEx::rc(objects.pd, objects.cq, objects.cq);
    attr.cap = ASKED;
    attr.sq_sig_all = false;
    attr
}

/// `rdma_create_ep` writes back into the active endpoint's attributes the QP type of the
/// address info (C sets `qp_init_attr->qp_type = res->ai_qp_type`) and the capacities the
/// device granted; the QP has the backend's CQs, each with its channel. Returns the
/// capacities written back and those `query_qp_cap` reads (each bed asserts both).
pub fn create_ep_writes_back_what_was_granted<B: DataPath>(
    client: &B,
    server: SocketAddr,
) -> (QpCap, QpCap) {
    let active = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(server));
    let mut attr = QpInitAttr::new(QpType::Uc);
    attr.cap = ASKED;
    attr.sq_sig_all = false;
    let id = ok(client.create_ep(&active, Some(&mut attr)), "create_ep");
    let qp = ok(client.qp(id), "id->qp").expect("create_ep made a QP");
    assert_eq!(
        attr.qp_type,
        QpType::Rc,
        "the addrinfo's QP type written back"
    );
    let queried = ok(client.query_qp_cap(qp), "query_qp_cap");
    assert!(!attr.sq_sig_all, "the rest of the attributes untouched");
    let cqs = ok(client.qp_cqs(id), "qp_cqs").expect("a QP");
    assert!(
        cqs.send_channel.is_some() && cqs.recv_channel.is_some(),
        "librdmacm's CQs, each with its channel"
    );
    ok(client.destroy_ep(id), "destroy_ep");
    (attr.cap, queried)
}

/// The scenario of the module's documentation, between `server` listening on `addr` and
/// `client` at `client_ip`.
pub fn create_ep_ex_and_send_flags<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    client_ip: IpAddr,
) -> EpFlagsReport {
    let (server_dev, s_obj) = device_objects(server, addr.ip());
    let (client_dev, c_obj) = device_objects(client, client_ip);
    let eps = connect_endpoints(server, client, addr, (&s_obj, &c_obj));
    let report = exchange(server, client, &eps, &c_obj);
    eps.release(server, client);
    for (cm, dev, obj) in [(server, server_dev, s_obj), (client, client_dev, c_obj)] {
        ok(cm.destroy_cq(obj.cq), "destroy_cq");
        ok(cm.destroy_comp_channel(obj.comp), "destroy_comp_channel");
        ok(cm.dealloc_pd(obj.pd), "dealloc_pd");
        ok(cm.destroy_id(dev), "destroy_id (device id)");
    }
    report
}

/// Both endpoints, connected, with the server's receives posted.
struct Endpoints {
    listener: IdHandle,
    child: IdHandle,
    server_channel: ChannelHandle,
    client: IdHandle,
    client_channel: ChannelHandle,
    granted: QpCap,
    queried: QpCap,
    /// The server's four receives.
    slots: MemoryRegion,
    /// What the client reads.
    readable: MemoryRegion,
    established: Duration,
}

/// The listener (`create_ep_ex`, passive, keeping `objects.0`), the client's endpoint
/// (`create_ep_ex`, active, with `objects.1`), connected on channels (a synchronous accept
/// would wait in the thread the client needs).
fn connect_endpoints<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
    (s_obj, c_obj): (&Objects, &Objects),
) -> Endpoints {
    let passive = AddrInfo::new(rai::PASSIVE, PortSpace::TCP, QpType::Rc, Some(addr), None);
    let mut s_attr = zeroed_attr(s_obj);
    s_attr.qp_type = QpType::Uc; // the addrinfo's RC wins, in the listener's copy
    let kept = s_attr;
    let listener = ok(
        server.create_ep_ex(&passive, &mut s_attr),
        "create_ep_ex (passive)",
    );
    assert_eq!(s_attr, kept, "a passive endpoint writes nothing back");
    assert_eq!(
        ok(server.qp(listener), "id->qp"),
        None,
        "a listener has no QP"
    );
    ok(server.listen(listener, 8), "listen");

    let active = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(addr));
    let mut c_attr = zeroed_attr(c_obj);
    let id = ok(
        client.create_ep_ex(&active, &mut c_attr),
        "create_ep_ex (active)",
    );
    let c_qp = ok(client.qp(id), "id->qp").expect("create_ep_ex made a QP");
    let queried = ok(client.query_qp_cap(c_qp), "query_qp_cap");
    assert_eq!(c_attr.pd, c_obj.pd, "the PD stays the program's");
    assert_objects(client, id, c_obj);
    let client_channel = ok(client.create_event_channel(), "client channel");
    ok(client.migrate_id(id, Some(client_channel)), "migrate");
    ok(client.connect(id, None), "connect");

    let child = ok(server.get_request(listener), "get_request");
    assert_objects(server, child, s_obj);
    let slots = ok(server.reg_msgs(child, vec![0; 4 * SLOT]), "reg_msgs");
    for slot in 0..4 {
        let at = slot * SLOT;
        ok(
            server.post_recv_msg(child, 10 + slot as u64, &slots, at, SLOT as u32),
            "post_recv_msg",
        );
    }
    let readable = ok(server.reg_read(child, b"read me!".to_vec()), "reg_read");
    let server_channel = ok(server.create_event_channel(), "server channel");
    ok(server.migrate_id(child, Some(server_channel)), "migrate");
    ok(server.accept(child, None), "accept");
    expect_event_for(client, client_channel, EventKind::Established, id, 0);
    expect_event_for(server, server_channel, EventKind::Established, child, 0);
    let established = client.now();
    Endpoints {
        listener,
        child,
        server_channel,
        client: id,
        client_channel,
        granted: c_attr.cap,
        queried,
        slots,
        readable,
        established,
    }
}

/// The id's QP is in `objects`' PD and completes into `objects`' CQ, with its channel.
fn assert_objects<B: DataPath>(cm: &B, id: IdHandle, objects: &Objects) {
    assert_eq!(
        ok(cm.pd(id), "id->pd"),
        objects.pd,
        "{id}: the program's PD"
    );
    let cqs = ok(cm.qp_cqs(id), "qp_cqs").expect("a QP");
    assert_eq!(
        (cqs.send_cq, cqs.recv_cq, cqs.send_channel),
        (objects.cq, objects.cq, Some(objects.comp)),
        "{id}: the program's CQ and channel"
    );
}

/// The client's posts with C's flags, and what both sides' helpers return.
fn exchange<B: DataPath>(
    server: &B,
    client: &B,
    eps: &Endpoints,
    c_obj: &Objects,
) -> EpFlagsReport {
    let id = eps.client;
    let mut sends = Vec::new();
    let mut sent = |wc: WorkCompletion| {
        assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
        sends.push((wc.wr_id, wc.opcode, client.now() - eps.established));
    };
    let mr = ok(client.reg_msgs(id, MESSAGE.to_vec()), "reg_msgs");
    // Flags 0 on a QP without sq_sig_all: no completion; the signaled one after it reports.
    ok(
        client.post_send_msg(id, 1, &mr, 0, 8, SendFlags::NONE),
        "flags 0",
    );
    ok(
        client.post_send_msg(id, 2, &mr, 8, 8, SendFlags::SIGNALED),
        "SIGNALED",
    );
    sent(ok(client.get_send_comp(id), "get_send_comp"));

    // Inline: up to the granted room, copied when posted (the region changes right after).
    let room = eps.granted.max_inline_data;
    let inline = SendFlags::INLINE | SendFlags::SIGNALED;
    expect_errno(
        client.post_send_msg(id, 3, &mr, 0, room + 1, inline),
        Call::PostSend,
        Errno::EINVAL,
    );
    ok(client.post_send_msg(id, 3, &mr, 16, room, inline), "INLINE");
    ok(
        client.mr_write(mr.handle, 16, &[0; 32]),
        "overwrite after posting",
    );
    sent(ok(client.get_send_comp(id), "get_send_comp"));

    // A read, and a fenced send that waits for its response; an inline read is refused.
    let target = ok(client.reg_msgs(id, vec![0; 8]), "reg_msgs");
    let (raddr, rkey) = (eps.readable.addr, eps.readable.rkey);
    expect_errno(
        client.post_read(id, 4, &target, 0, 8, inline, raddr, rkey),
        Call::PostSend,
        Errno::EINVAL,
    );
    ok(
        client.post_read(id, 4, &target, 0, 8, SendFlags::SIGNALED, raddr, rkey),
        "read",
    );
    let fenced = SendFlags::FENCE | SendFlags::SIGNALED;
    ok(client.post_send_msg(id, 5, &mr, 0, 8, fenced), "FENCE");
    sent(ok(client.get_send_comp(id), "get_send_comp (read)"));
    sent(ok(client.get_send_comp(id), "get_send_comp (fenced send)"));
    let mut wc = [WorkCompletion::default()];
    assert_eq!(
        ok(client.poll_cq(c_obj.cq, &mut wc), "poll_cq"),
        0,
        "nothing more"
    );
    let mut read = [0u8; 8];
    ok(client.mr_read(target.handle, 0, &mut read), "mr_read");
    assert_eq!(&read, b"read me!");

    let receives = (0..4)
        .map(|_| {
            let wc = ok(server.get_recv_comp(eps.child), "get_recv_comp");
            assert_eq!((wc.status, wc.opcode), (WcStatus::SUCCESS, WcOpcode::Recv));
            (wc.wr_id, wc.byte_len)
        })
        .collect();
    let mut got = vec![0u8; 4 * SLOT];
    ok(server.mr_read(eps.slots.handle, 0, &mut got), "mr_read");
    let slot = |n: usize, len: usize| &got[n * SLOT..n * SLOT + len];
    assert_eq!(slot(0, 8), &MESSAGE[..8], "the send with flags 0");
    assert_eq!(slot(1, 8), &MESSAGE[8..16], "the signaled send");
    let room = room as usize;
    assert_eq!(
        slot(2, room),
        &MESSAGE[16..16 + room],
        "the bytes as they were when posted"
    );
    assert_eq!(slot(3, 8), &MESSAGE[..8], "the fenced send");
    for region in [mr, target] {
        ok(client.dereg_mr(region.handle), "dereg_mr");
    }
    EpFlagsReport {
        granted: eps.granted,
        queried: eps.queried,
        sends,
        receives,
    }
}

impl Endpoints {
    /// Disconnects and destroys both endpoints and the listener, then the server's regions.
    fn release<B: DataPath>(self, server: &B, client: &B) {
        ok(client.destroy_ep(self.client), "destroy_ep (client)");
        ok(
            client.destroy_event_channel(self.client_channel),
            "destroy channel",
        );
        let ch = self.server_channel;
        expect_event_for(server, ch, EventKind::Disconnected, self.child, 0);
        ok(server.destroy_ep(self.child), "destroy_ep (child)");
        ok(server.destroy_event_channel(ch), "destroy channel");
        ok(server.destroy_ep(self.listener), "destroy_ep (listener)");
        for region in [self.slots, self.readable] {
            ok(server.dereg_mr(region.handle), "dereg_mr");
        }
    }
}
