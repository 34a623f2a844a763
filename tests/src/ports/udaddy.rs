//! udaddy's message exchange (rdma-core's `librdmacm/examples/udaddy.c`, one connection),
//! wire-compatible with the C `udaddy`.
//!
//! Both sides give their UD QP a PD, one CQ for both queues and a region of one message plus
//! the 40 bytes of GRH space, and post `message_count` receives of the whole region. The
//! client resolves the server's address and route and connects (a SIDR request); the server
//! accepts the request announcing its QP. With the ESTABLISHED's QP number, qkey and address
//! handle, the client sends its messages as sends with immediate data (its QP number),
//! unsignaled, then waits for the replies; the server waits for the client's messages, makes
//! an address handle from the first one's completion and GRH (`ibv_create_ah_from_wc`),
//! sends as many replies to the QP number the immediate data names (signaled), and waits for
//! their completions. Message contents are not part of the protocol; lengths, statuses and the
//! immediate data are checked. udaddy polls its CQ in a busy loop; this port waits through a
//! completion channel instead (nothing of it is seen on the wire).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpInitAttrEx, SendWr, UdDest, WcOpcode, WcStatus,
    WorkCompletion, GRH_LEN,
};
use cmtwin::{
    AhHandle, CmError, CompChannelHandle, ConnParam, CqHandle, EventKind, EventParam, IdHandle,
    PortSpace, QpCap, QpType, Result, Wait, RDMA_UDP_QKEY,
};

use super::session::{self, Verbs};
use crate::steps::RESOLVE_TIMEOUT;

/// udaddy's default port.
pub const DEFAULT_PORT: u16 = 7174;

/// What to run (udaddy's `-C` and `-S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Messages each side sends (`-C`, default 10).
    pub message_count: u32,
    /// Bytes of each message (`-S`, default 100), at most the port's MTU.
    pub message_size: u32,
    /// How long a client tries again when its request finds no server (it may not listen
    /// yet).
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
    /// Messages received, each of `message_size` bytes after the GRH space.
    pub received: u32,
    /// Sends posted (the server's also completed successfully; the client's are unsignaled).
    pub sent: u32,
}

/// A side's objects.
struct Node {
    verbs: Verbs,
    channel: CompChannelHandle,
    cq: CqHandle,
    message: MemoryRegion,
    qpn: u32,
}

impl From<Node> for Verbs {
    fn from(node: Node) -> Verbs {
        node.verbs
    }
}

/// udaddy's `init_node` and `post_recvs`: PD, one CQ of twice `message_count` entries, a UD
/// QP signalling only sends marked so, the message region with its GRH space, the receives.
fn setup<B: DataPath>(cm: &B, id: IdHandle, opts: &Options) -> Result<Node> {
    if opts.message_count == 0 || opts.message_size == 0 {
        return Err(CmError::application(
            "the exchange needs a message count and size (udaddy -C 0 has none)",
        ));
    }
    let mut verbs = Verbs::new(cm, id, true)?;
    let cq = verbs.cq(cm, id, opts.message_count * 2)?;
    cm.req_notify_cq(cq, false)?;
    let mut attr = QpInitAttrEx::rc(verbs.pd, cq, cq);
    attr.qp_type = QpType::Ud;
    attr.sq_sig_all = false;
    attr.cap = QpCap {
        max_send_wr: opts.message_count,
        max_recv_wr: opts.message_count,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpn = cm.create_qp_ex(id, &attr)?;
    let len = opts.message_size + GRH_LEN;
    let message = verbs.region(cm, len as usize, AccessFlags::LOCAL_WRITE)?;
    for _ in 0..opts.message_count {
        cm.post_recv_msg(id, 0, &message, 0, len)?;
    }
    Ok(Node {
        channel: verbs.channel.expect("made with a channel"),
        verbs,
        cq,
        message,
        qpn,
    })
}

/// Posts `message_count` sends with immediate data (the QP's number) of one message to `to`.
fn post_sends<B: DataPath>(
    cm: &B,
    id: IdHandle,
    node: &Node,
    to: UdDest,
    signaled: bool,
    opts: &Options,
) -> Result<u32> {
    let qp = cm
        .qp(id)?
        .ok_or_else(|| CmError::application(format!("{id} lost its QP")))?;
    let sge = [node.message.sge(0, opts.message_size)];
    let mut wr = SendWr::ud_send(0, to, Some(node.qpn), Payload::Sges(&sge));
    wr.signaled = signaled;
    for _ in 0..opts.message_count {
        cm.post_send(qp, &wr)?;
    }
    Ok(opts.message_count)
}

/// Checks that `wcs` are receives of one message each, with a QP number as immediate data
/// and as source; returns that QP number.
fn check_receives(wcs: &[WorkCompletion], opts: &Options) -> Result<u32> {
    let want = opts.message_size + GRH_LEN;
    let first = wcs.first().map(|wc| wc.src_qp).unwrap_or_default();
    for wc in wcs {
        let ok = wc.status == WcStatus::SUCCESS
            && wc.opcode == WcOpcode::Recv
            && wc.byte_len == want
            && wc.src_qp == first
            && wc.imm == Some(first);
        if !ok {
            return Err(CmError::application(format!(
                "{wc:?} instead of a receive of {want} bytes from QP {first:#x} naming itself"
            )));
        }
    }
    Ok(first)
}

/// Listens on `addr`, answers one SIDR request, receives the client's messages and replies.
pub fn server<B: DataPath>(cm: &B, addr: SocketAddr, opts: &Options) -> Result<Summary> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::UDP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 0)?;
    let id = session::expect_event(cm, channel, EventKind::ConnectRequest)?;
    let node = setup(cm, id, opts)?;
    let announce = ConnParam {
        qp_num: node.qpn,
        ..ConnParam::default()
    };
    cm.accept(id, Some(&announce))?;
    let n = opts.message_count as usize;
    let received = session::take_completions(cm, node.cq, node.channel, n)?;
    let client_qpn = check_receives(&received, opts)?;
    let mut grh = [0; GRH_LEN as usize];
    cm.mr_read(node.message.handle, 0, &mut grh)?;
    let ah = cm.create_ah_from_wc(node.verbs.pd, &received[0], &grh)?;
    let to = UdDest {
        ah,
        remote_qpn: client_qpn,
        remote_qkey: RDMA_UDP_QKEY,
    };
    let sent = post_sends(cm, id, &node, to, true, opts)?;
    for wc in session::take_completions(cm, node.cq, node.channel, n)? {
        if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Send {
            return Err(CmError::application(format!("reply completion {wc:?}")));
        }
    }
    release(cm, id, node, ah)?;
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(Summary {
        received: received.len() as u32,
        sent,
    })
}

/// Resolves `server`, sends the messages once ESTABLISHED, and receives the replies.
pub fn client<B: DataPath>(cm: &B, server: SocketAddr, opts: &Options) -> Result<Summary> {
    let channel = cm.create_event_channel()?;
    let start = cm.now();
    let (id, node, ud) = loop {
        let id = cm.create_id(Some(channel), 0, PortSpace::UDP)?;
        cm.resolve_addr(id, None, server, RESOLVE_TIMEOUT)?;
        session::expect_event(cm, channel, EventKind::AddrResolved)?;
        cm.resolve_route(id, RESOLVE_TIMEOUT)?;
        session::expect_event(cm, channel, EventKind::RouteResolved)?;
        let node = setup(cm, id, opts)?;
        cm.connect(id, None)?;
        let event = cm.get_cm_event(channel, Wait::Timeout(session::STEP))?;
        let (kind, status, param) = (event.kind(), event.status(), *event.param());
        cm.ack_cm_event(event)?;
        match (kind, param) {
            (EventKind::Established, EventParam::Ud(ud)) => break (id, node, ud),
            (EventKind::Unreachable | EventKind::Rejected, _)
                if cm.now() - start < opts.patience =>
            {
                Verbs::from(node).release(cm, id)?;
                cm.destroy_id(id)?;
                cm.sleep(Duration::from_millis(100))?;
            }
            _ => {
                return Err(CmError::application(format!(
                    "resolving {server}: {kind} (status {status})"
                )))
            }
        }
    };
    let ah = cm.create_ah(node.verbs.pd, &ud.ah_attr)?;
    let to = UdDest {
        ah,
        remote_qpn: ud.qp_num,
        remote_qkey: ud.qkey,
    };
    let sent = post_sends(cm, id, &node, to, false, opts)?;
    let n = opts.message_count as usize;
    let replies = session::take_completions(cm, node.cq, node.channel, n)?;
    let from = check_receives(&replies, opts)?;
    if from != ud.qp_num {
        return Err(CmError::application(format!(
            "replies from QP {from:#x}, not the server's {:#x}",
            ud.qp_num
        )));
    }
    release(cm, id, node, ah)?;
    cm.destroy_event_channel(channel)?;
    Ok(Summary {
        received: replies.len() as u32,
        sent,
    })
}

/// udaddy's `destroy_node`: the address handle, the QP and objects, the id.
fn release<B: DataPath>(cm: &B, id: IdHandle, node: Node, ah: AhHandle) -> Result<()> {
    cm.destroy_ah(ah)?;
    Verbs::from(node).release(cm, id)?;
    cm.destroy_id(id)
}
