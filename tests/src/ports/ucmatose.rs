//! ucmatose's default message exchange (rdma-core's `librdmacm/examples/cmatose.c` without
//! `-C 0`), over one connection, wire-compatible with the C `ucmatose`.
//!
//! Each side gives its QP a PD, one CQ for sends and one for receives, a region of one message, and posts `message_count`
//! receives into it before it connects or accepts. Once ESTABLISHED, the server sends its
//! messages, waits for their completions and then for the client's messages; the client
//! waits for the server's messages and then sends its own. The server disconnects; the client
//! answers the DISCONNECTED with its own disconnect. Message contents are not part of the
//! protocol (ucmatose sends whatever its buffer holds); lengths and statuses are checked.
//! ucmatose polls its CQs in a busy loop; this port waits for their completions through one
//! completion channel instead (nothing of it is seen on the wire), which also lets two
//! simulated processes wait for each other without spinning.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, QpInitAttrEx, WcOpcode, WcStatus, WorkCompletion,
};
use cmtwin::verbs::{Payload, SendOp, SendWr};
use cmtwin::{
    CmError, CompChannelHandle, ConnParam, CqHandle, EventKind, IdHandle, PortSpace, QpCap, Result,
};

use super::session::{self, Verbs};

/// ucmatose's default port.
pub const DEFAULT_PORT: u16 = 7471;

/// What to run (ucmatose's `-C` and `-S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Messages each side sends (`-C`, default 10).
    pub message_count: u32,
    /// Bytes of each message (`-S`, default 100).
    pub message_size: u32,
    /// How long a client retries a rejected connect (its server may not listen yet).
    pub patience: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            message_count: 10,
            message_size: 100,
            patience: Duration::ZERO,
        }
    }
}

/// What a side saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Messages received, each of `message_size` bytes.
    pub received: u32,
    /// Sends that completed successfully.
    pub sent: u32,
    /// Sends flushed by the disconnect before their completion came (the client takes its
    /// send completions only after the server's DISCONNECTED: ucmatose never waits for them).
    pub flushed: u32,
}

/// A side's connection: its objects and CQs.
struct Node {
    verbs: Verbs,
    channel: CompChannelHandle,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    message: MemoryRegion,
}

impl From<Node> for Verbs {
    fn from(node: Node) -> Verbs {
        node.verbs
    }
}

/// ucmatose's `init_node` and `post_recvs`: PD, two CQs of `message_count` entries, a QP
/// signalling every send, one message region, and the receives.
fn setup<B: DataPath>(cm: &B, id: IdHandle, opts: &Options) -> Result<Node> {
    if opts.message_count == 0 || opts.message_size == 0 {
        return Err(CmError::application(
            "the message exchange needs a message count and size (ucmatose -C 0 has none)",
        ));
    }
    let mut verbs = Verbs::new(cm, id, true)?;
    let cqe = opts.message_count;
    let send_cq = verbs.cq(cm, id, cqe)?;
    let recv_cq = verbs.cq(cm, id, cqe)?;
    cm.req_notify_cq(send_cq, false)?;
    cm.req_notify_cq(recv_cq, false)?;
    let mut attr = QpInitAttrEx::rc(verbs.pd, send_cq, recv_cq);
    attr.cap = QpCap {
        max_send_wr: cqe,
        max_recv_wr: cqe,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    cm.create_qp_ex(id, &attr)?;
    let size = opts.message_size as usize;
    let fill: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let message = verbs.region(cm, size, AccessFlags::LOCAL_WRITE)?;
    cm.mr_write(message.handle, 0, &fill)?;
    for _ in 0..opts.message_count {
        cm.post_recv_msg(id, 0, &message, 0, opts.message_size)?;
    }
    Ok(Node {
        channel: verbs.channel.expect("made with a channel"),
        verbs,
        send_cq,
        recv_cq,
        message,
    })
}

/// Posts `message_count` unsignaled sends of the whole message (the QP signals them all).
fn post_sends<B: DataPath>(cm: &B, id: IdHandle, node: &Node, opts: &Options) -> Result<()> {
    let qp = cm
        .qp(id)?
        .ok_or_else(|| CmError::application(format!("{id} lost its QP")))?;
    let sge = [node.message.sge(0, opts.message_size)];
    let mut wr = SendWr::new(0, SendOp::Send, Payload::Sges(&sge));
    wr.signaled = false;
    for _ in 0..opts.message_count {
        cm.post_send(qp, &wr)?;
    }
    Ok(())
}

/// Checks that `wcs` are successful completions of `opcode` (of a whole message, for
/// receives).
fn check_all(wcs: &[WorkCompletion], opcode: WcOpcode, opts: &Options) -> Result<u32> {
    for wc in wcs {
        let whole = opcode != WcOpcode::Recv || wc.byte_len == opts.message_size;
        if wc.status != WcStatus::SUCCESS || wc.opcode != opcode || !whole {
            return Err(CmError::application(format!(
                "{wc:?} instead of a {opcode:?} of {} bytes",
                opts.message_size
            )));
        }
    }
    Ok(wcs.len() as u32)
}

/// Listens on `addr`, accepts one connection, exchanges the messages, disconnects.
pub fn server<B: DataPath>(cm: &B, addr: SocketAddr, opts: &Options) -> Result<Summary> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 0)?;
    let id = session::expect_event(cm, channel, EventKind::ConnectRequest)?;
    let node = setup(cm, id, opts)?;
    cm.accept(id, None)?;
    session::expect_event(cm, channel, EventKind::Established)?;
    let n = opts.message_count as usize;
    post_sends(cm, id, &node, opts)?;
    let sent = check_all(
        &session::take_completions(cm, node.send_cq, node.channel, n)?,
        WcOpcode::Send,
        opts,
    )?;
    let received = check_all(
        &session::take_completions(cm, node.recv_cq, node.channel, n)?,
        WcOpcode::Recv,
        opts,
    )?;
    cm.disconnect(id)?;
    session::expect_event(cm, channel, EventKind::Disconnected)?;
    node.verbs.release(cm, id)?;
    cm.destroy_id(id)?;
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(Summary {
        received,
        sent,
        flushed: 0,
    })
}

/// Connects to `server`, exchanges the messages, and disconnects when the server does.
pub fn client<B: DataPath>(cm: &B, server: SocketAddr, opts: &Options) -> Result<Summary> {
    let channel = cm.create_event_channel()?;
    // ucmatose's connect: one read each way, 5 transport retries, no RNR retry.
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 5,
        rnr_retry_count: 0,
        ..ConnParam::default()
    };
    let (id, node) =
        session::connect_when_listening(cm, channel, server, &param, opts.patience, |id| {
            setup(cm, id, opts)
        })?;
    let n = opts.message_count as usize;
    let received = check_all(
        &session::take_completions(cm, node.recv_cq, node.channel, n)?,
        WcOpcode::Recv,
        opts,
    )?;
    post_sends(cm, id, &node, opts)?;
    session::expect_event(cm, channel, EventKind::Disconnected)?;
    cm.disconnect(id)?;
    let (sent, flushed) = sends_after_disconnect(cm, &node, n)?;
    node.verbs.release(cm, id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    Ok(Summary {
        received,
        sent,
        flushed,
    })
}

/// The `n` send completions once the QP is in ERROR: successes and flushes (any other
/// status is an error).
fn sends_after_disconnect<B: DataPath>(cm: &B, node: &Node, n: usize) -> Result<(u32, u32)> {
    let (mut sent, mut flushed) = (0, 0);
    for wc in session::take_completions(cm, node.send_cq, node.channel, n)? {
        match wc.status {
            WcStatus::SUCCESS if wc.opcode == WcOpcode::Send => sent += 1,
            WcStatus::WR_FLUSH_ERR => flushed += 1,
            _ => return Err(CmError::application(format!("send completion {wc:?}"))),
        }
    }
    Ok((sent, flushed))
}
