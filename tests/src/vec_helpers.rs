//! librdmacm's vectored helpers (`rdma_post_recvv`, `rdma_post_sendv`, `rdma_post_readv`,
//! `rdma_post_writev`) and inline sends and writes from bytes no region holds (C's
//! `rdma_post_send` and `rdma_post_write` with `mr` NULL and `IBV_SEND_INLINE`), generic over
//! [`DataPath`]: they run on simulated beds (`tests/tests/sim_datapath.rs`, with exact virtual
//! times on top) and on real librdmacm (`backend-verbs/tests/datapath.rs`, module
//! `vec_helpers`, in the Soft-RoCE VM).
//!
//! The server posts a receive over three entries, one over a single entry and one over none;
//! the client sends two regions gathered into one message (scattered over the three entries),
//! writes three entries of two regions into the server's region, reads the server's bytes into
//! three entries, sends and writes plain bytes inline, sends a message of no entries, and
//! sends two entries inline (`IBV_SEND_INLINE` on `rdma_post_sendv`: copied when posted, the
//! region overwritten right after).
//! Each request is signaled and waited for before the next, so that its completion's time is
//! its own round trip. Then the misuses: one entry more than the QP's granted `max_send_sge`
//! or `max_recv_sge`, one inline byte more than its `max_inline_data` (plain bytes or
//! entries), an inline entry outside its region, and `IBV_SEND_INLINE` on a vectored read.
//!
//! [`ud_inline_send`]: udaddy's exchange with the client's datagram sent inline from plain
//! bytes (C's `rdma_post_ud_send` with `mr` NULL and `IBV_SEND_INLINE`), and one byte more
//! than the UD QP's `max_inline_data` refused.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, SendFlags, Sge, WcOpcode, WcStatus, GRH_LEN,
};
use cmtwin::{Call, Errno, EventKind, QpCap};

use crate::datapath::{connect_with, next_completion, region, Conn, Setup};
use crate::steps::{expect_errno, expect_event_for, ok, teardown};

/// What both QPs ask for: three entries each way, 32 inline bytes.
pub const ASKED: QpCap = QpCap {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_send_sge: 3,
    max_recv_sge: 3,
    max_inline_data: 32,
};

/// The client's two source regions.
const HEAD: &[u8; 8] = b"HEAD:hd:";
const BODY: &[u8; 24] = b"the body of the message.";
/// The server's region the client writes into and reads from.
const REMOTE: &[u8; 32] = b"................read me in three";
/// The plain bytes sent inline, and those written inline.
const PLAIN: &[u8] = b"plain bytes, no region";
const WRITTEN: &[u8; 4] = b"INLN";

/// The client's completions every bed gives, in order: (wr_id, opcode, byte_len).
pub const SENDS: [(u64, WcOpcode, u32); 7] = [
    (1, WcOpcode::Send, 20),
    (2, WcOpcode::RdmaWrite, 12),
    (3, WcOpcode::RdmaRead, 16),
    (4, WcOpcode::Send, 22),
    (5, WcOpcode::RdmaWrite, 4),
    (6, WcOpcode::Send, 0),
    (7, WcOpcode::Send, 16),
];

/// The server's receive completions every bed gives, in order: (wr_id, opcode, byte_len).
pub const RECEIVES: [(u64, WcOpcode, u32); 4] = [
    (10, WcOpcode::Recv, 20),
    (11, WcOpcode::Recv, 22),
    (12, WcOpcode::Recv, 0),
    (13, WcOpcode::Recv, 16),
];

/// One completion as a scenario saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// `wr_id`.
    pub wr_id: u64,
    /// What completed.
    pub opcode: WcOpcode,
    /// `byte_len`.
    pub byte_len: u32,
    /// From the post to the return of its completion.
    pub after: Duration,
}

/// What the scenario saw, for each bed's checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecReport {
    /// The client QP's capacities (`query_qp_cap`).
    pub client_cap: QpCap,
    /// The server QP's capacities.
    pub server_cap: QpCap,
    /// The client's send-queue completions, in order (all SUCCESS).
    pub sends: Vec<Seen>,
    /// The server's receive completions, in order (all SUCCESS): (wr_id, opcode, byte_len).
    pub receives: Vec<(u64, WcOpcode, u32)>,
}

/// The regions of both sides.
struct Regions {
    /// The server's receives land here.
    inbox: MemoryRegion,
    /// The server's region the client writes and reads.
    remote: MemoryRegion,
    /// The client's sources.
    head: MemoryRegion,
    body: MemoryRegion,
    /// The client's read target.
    landing: MemoryRegion,
}

/// Bytes of the server's inbox: the three-entry receive's entries at 0, 20 and 40, the
/// one-entry receives at 64 and 96.
const INBOX: usize = 128;

/// The scenario of the module's documentation, between `server` listening on `addr` and
/// `client`.
pub fn vectored_and_inline_helpers<B: DataPath>(
    server: &B,
    client: &B,
    addr: SocketAddr,
) -> VecReport {
    let setup = Setup {
        cap: ASKED,
        ..Setup::default()
    };
    let conn = connect_with(server, client, addr, &setup);
    let caps = |cm: &B, qp| ok(cm.query_qp_cap(qp), "query_qp_cap");
    let (client_cap, server_cap) = (caps(client, conn.client.qp), caps(server, conn.server.qp));
    let r = regions(server, client, &conn);
    post_receives(server, &conn, &r);
    let sends = client_posts(client, &conn, &r);
    let receives = (0..4)
        .map(|_| {
            let wc = next_completion(server, &conn.server);
            assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
            (wc.wr_id, wc.opcode, wc.byte_len)
        })
        .collect();
    check_bytes(server, client, &r);
    misuses(server, client, &conn, &r, (client_cap, server_cap));
    release(server, client, &conn, r);
    VecReport {
        client_cap,
        server_cap,
        sends,
        receives,
    }
}

fn regions<B: DataPath>(server: &B, client: &B, conn: &Conn) -> Regions {
    let remote_access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let remote = ok(
        server.reg_mr(conn.server.pd, REMOTE.to_vec(), remote_access),
        "reg_mr",
    );
    let lw = AccessFlags::LOCAL_WRITE;
    let src = |bytes: &[u8]| ok(client.reg_mr(conn.client.pd, bytes.to_vec(), lw), "reg_mr");
    Regions {
        inbox: region(server, conn.server.pd, INBOX, b'_', lw),
        remote,
        head: src(HEAD),
        body: src(BODY),
        landing: region(client, conn.client.pd, 32, b'_', lw),
    }
}

/// The server's four receives: three entries (4, 6 and 10 bytes), one of 32, none, one of
/// 32.
fn post_receives<B: DataPath>(server: &B, conn: &Conn, r: &Regions) {
    let id = conn.server.id;
    let three = [r.inbox.sge(0, 4), r.inbox.sge(20, 6), r.inbox.sge(40, 10)];
    ok(server.post_recvv(id, 10, &three), "rdma_post_recvv (3)");
    ok(
        server.post_recvv(id, 11, &[r.inbox.sge(64, 32)]),
        "rdma_post_recvv (1)",
    );
    ok(server.post_recvv(id, 12, &[]), "rdma_post_recvv (0)");
    ok(
        server.post_recvv(id, 13, &[r.inbox.sge(96, 32)]),
        "rdma_post_recvv (1)",
    );
}

/// The client's requests, each waited for: (wr_id, what it posts).
fn client_posts<B: DataPath>(client: &B, conn: &Conn, r: &Regions) -> Vec<Seen> {
    let id = conn.client.id;
    let sig = SendFlags::SIGNALED;
    let (raddr, rkey) = (r.remote.addr, r.remote.rkey);
    let (head, body, landing) = (&r.head, &r.body, &r.landing);
    let gathered = [head.sge(0, 8), body.sge(0, 12)];
    let written = [body.sge(0, 4), head.sge(0, 5), body.sge(4, 3)];
    let scattered = [landing.sge(0, 4), landing.sge(10, 6), landing.sge(20, 6)];
    let inline = [head.sge(0, 8), body.sge(0, 8)];
    // Copied when posted: the region changes right after, the bytes as they were arrive.
    let copied = || {
        client.post_sendv(id, 7, &inline, SendFlags::INLINE | sig)?;
        client.mr_write(head.handle, 0, &[b'#'; 8])
    };
    let posts: [(u64, &dyn Fn() -> cmtwin::Result<()>); 7] = [
        (1, &|| client.post_sendv(id, 1, &gathered, sig)),
        (2, &|| client.post_writev(id, 2, &written, sig, raddr, rkey)),
        (3, &|| {
            client.post_readv(id, 3, &scattered, sig, raddr + 16, rkey)
        }),
        (4, &|| client.post_send_inline(id, 4, PLAIN, sig)),
        (5, &|| {
            client.post_write_inline(id, 5, WRITTEN, sig, raddr + 12, rkey)
        }),
        (6, &|| client.post_sendv(id, 6, &[], sig)),
        (7, &copied),
    ];
    posts
        .iter()
        .map(|(wr_id, post)| {
            let posted = client.now();
            ok(post(), &format!("post {wr_id}"));
            let wc = next_completion(client, &conn.client);
            assert_eq!((wc.status, wc.wr_id), (WcStatus::SUCCESS, *wr_id), "{wc:?}");
            Seen {
                wr_id: wc.wr_id,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                after: client.now() - posted,
            }
        })
        .collect()
}

/// The bytes at the peer: the gathered message scattered over the three entries, the plain
/// bytes in the one-entry receive, the writes in the server's region, the read in the
/// client's three entries; nothing outside the entries touched.
fn check_bytes<B: DataPath>(server: &B, client: &B, r: &Regions) {
    let mut inbox = [0u8; INBOX];
    ok(server.mr_read(r.inbox.handle, 0, &mut inbox), "mr_read");
    let message: Vec<u8> = [&HEAD[..], &BODY[..12]].concat(); // 20 bytes
    assert_eq!(&inbox[..4], &message[..4], "entry 1 of 3");
    assert_eq!(&inbox[4..20], &[b'_'; 16], "between the entries");
    assert_eq!(&inbox[20..26], &message[4..10], "entry 2 of 3");
    assert_eq!(&inbox[40..50], &message[10..], "entry 3 of 3");
    assert_eq!(&inbox[50..64], &[b'_'; 14], "after the entries");
    assert_eq!(&inbox[64..64 + PLAIN.len()], PLAIN, "the inline send");
    let inline: Vec<u8> = [&HEAD[..], &BODY[..8]].concat();
    assert_eq!(
        &inbox[96..112],
        &inline[..],
        "the inline send of two entries"
    );
    assert_eq!(&inbox[112..], &[b'_'; 16], "after it");

    let mut remote = [0u8; 32];
    ok(server.mr_read(r.remote.handle, 0, &mut remote), "mr_read");
    let written: Vec<u8> = [&BODY[..4], &HEAD[..5], &BODY[4..7]].concat(); // 12 bytes
    assert_eq!(&remote[..12], &written[..], "the vectored write, gathered");
    assert_eq!(&remote[12..16], WRITTEN, "the inline write");
    assert_eq!(&remote[16..], &REMOTE[16..], "the read's source untouched");

    let mut landing = [0u8; 32];
    ok(client.mr_read(r.landing.handle, 0, &mut landing), "mr_read");
    let read = &REMOTE[16..];
    assert_eq!(&landing[..4], &read[..4], "read entry 1 of 3");
    assert_eq!(&landing[4..10], &[b'_'; 6], "between the read's entries");
    assert_eq!(&landing[10..16], &read[4..10], "read entry 2 of 3");
    assert_eq!(&landing[20..26], &read[10..], "read entry 3 of 3");
    assert_eq!(&landing[26..], &[b'_'; 6], "after the read's entries");
}

/// One entry above the granted `max_send_sge` and `max_recv_sge`, one byte above
/// `max_inline_data`, and INLINE on a vectored read and send: each EINVAL, naming the post.
fn misuses<B: DataPath>(server: &B, client: &B, conn: &Conn, r: &Regions, caps: (QpCap, QpCap)) {
    let (client_cap, server_cap) = caps;
    let (id, sig) = (conn.client.id, SendFlags::SIGNALED);
    let refused = |r: cmtwin::Result<()>| expect_errno(r, Call::PostSend, Errno::EINVAL);
    let entries =
        |mr: &MemoryRegion, n: u32| -> Vec<Sge> { (0..n).map(|i| mr.sge(i as usize, 1)).collect() };
    let too_many = entries(&r.body, client_cap.max_send_sge + 1);
    let (raddr, rkey) = (r.remote.addr, r.remote.rkey);
    refused(client.post_sendv(id, 20, &too_many, sig));
    refused(client.post_writev(id, 21, &too_many, sig, raddr, rkey));
    let recv_too_many = entries(&r.inbox, server_cap.max_recv_sge + 1);
    let recv = server.post_recvv(conn.server.id, 22, &recv_too_many);
    expect_errno(recv, Call::PostRecv, Errno::EINVAL);
    let over = vec![b'x'; client_cap.max_inline_data as usize + 1];
    refused(client.post_send_inline(id, 23, &over, sig));
    refused(client.post_write_inline(id, 24, &over, sig, raddr, rkey));
    let inline = SendFlags::INLINE | sig;
    refused(client.post_readv(id, 25, &[r.landing.sge(0, 4)], inline, raddr, rkey));
    refused(client.post_sendv(id, 26, &[r.head.sge(4, 8)], inline));
    let lw = AccessFlags::LOCAL_WRITE;
    let big = ok(client.reg_mr(conn.client.pd, over, lw), "reg_mr");
    let over = [big.sge(0, big.length as u32)];
    refused(client.post_sendv(id, 27, &over, inline));
    refused(client.post_writev(id, 28, &over, inline, raddr, rkey));
    ok(client.dereg_mr(big.handle), "dereg_mr");
    let mut wc = [cmtwin::verbs::WorkCompletion::default()];
    for (cm, cq) in [(client, conn.client.cq), (server, conn.server.cq)] {
        assert_eq!(
            ok(cm.poll_cq(cq, &mut wc), "poll_cq"),
            0,
            "a refused post completes nothing"
        );
    }
}

/// Disconnects, destroys both sides' ids and the listener, then deregisters the regions.
fn release<B: DataPath>(server: &B, client: &B, conn: &Conn, r: Regions) {
    ok(client.disconnect(conn.client.id), "disconnect");
    let (cch, ch) = (conn.client.channel, conn.server.channel);
    expect_event_for(server, ch, EventKind::Disconnected, conn.server.id, 0);
    ok(server.disconnect(conn.server.id), "disconnect");
    expect_event_for(client, cch, EventKind::Disconnected, conn.client.id, 0);
    ok(client.destroy_qp(conn.client.id), "destroy_qp");
    ok(server.destroy_qp(conn.server.id), "destroy_qp");
    for mr in [r.head, r.body, r.landing] {
        ok(client.dereg_mr(mr.handle), "dereg_mr");
    }
    for mr in [r.inbox, r.remote] {
        ok(server.dereg_mr(mr.handle), "dereg_mr");
    }
    teardown(client, &[conn.client.id], cch);
    teardown(server, &[conn.server.id, conn.listener], ch);
}

/// The plain bytes of the UD scenario's datagram.
pub const DATAGRAM: &[u8] = b"udaddy, inline";

/// A UD pair as udaddy makes it (`crate::ud_datapath::ud_connect`, the server's receive
/// posted); the client sends [`DATAGRAM`] inline from plain bytes through an address handle
/// of the server's ESTABLISHED data, and one byte above its QP's granted `max_inline_data`
/// (EINVAL). Returns the client's UD QP capacities and the time from the post to the send's
/// completion.
pub fn ud_inline_send<B: DataPath>(server: &B, client: &B, addr: SocketAddr) -> (QpCap, Duration) {
    use crate::ud_datapath::{assert_ud_receive, assert_ud_sent, teardown_pair, ud_connect};
    let rx = std::cell::Cell::new(None);
    let pair = ud_connect(server, client, addr, |s| {
        let mr = region(
            server,
            s.pd,
            GRH_LEN as usize + 64,
            0,
            AccessFlags::LOCAL_WRITE,
        );
        ok(
            server.post_recvv(s.id, 1, &[mr.sge(0, mr.length as u32)]),
            "rdma_post_recvv",
        );
        rx.set(Some(mr));
    });
    let rx = rx.get().expect("posted before accept");
    let cap = ok(client.query_qp_cap(pair.client.qp), "query_qp_cap");
    let ah = ok(
        client.create_ah(pair.client.pd, &pair.to_server.ah_attr),
        "create_ah",
    );
    let (id, qpn, sig) = (pair.client.id, pair.to_server.qp_num, SendFlags::SIGNALED);
    let over = vec![b'x'; cap.max_inline_data as usize + 1];
    let refused = client.post_ud_send_inline(id, 3, &over, sig, ah, qpn);
    expect_errno(refused, Call::PostSend, Errno::EINVAL);
    let posted = client.now();
    ok(
        client.post_ud_send_inline(id, 2, DATAGRAM, sig, ah, qpn),
        "rdma_post_ud_send inline",
    );
    let wc = crate::ud_datapath::next_completion(client, &pair.client);
    let after = client.now() - posted;
    assert_ud_sent(&wc, &pair.client, 2, DATAGRAM.len());
    let wc = crate::ud_datapath::next_completion(server, &pair.server);
    let expected = (1, pair.client.qpn, &pair.to_server.ah_attr);
    assert_ud_receive(server, &wc, expected, &rx, DATAGRAM);
    ok(client.destroy_ah(ah), "destroy_ah");
    teardown_pair(server, client, &pair);
    ok(server.dereg_mr(rx.handle), "dereg_mr");
    (cap, after)
}
