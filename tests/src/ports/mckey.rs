//! mckey's multicast exchange (rdma-core's `librdmacm/examples/mckey.c`, one membership a
//! process), wire-compatible with the C `mckey`.
//!
//! Every member makes an id in the UDP port space, binds it to its local address when it has
//! one, and resolves the group's address from there (ADDR_RESOLVED). It then gives the id a PD,
//! one CQ of twice `message_count` entries for both queues, a UD QP signalling only sends
//! marked so, and one region of a message plus the 40 bytes of GRH space; a receiver posts
//! `message_count` receives of the whole region. It joins the group (a full member, or a
//! send-only one with mckey's `-o`), and the MULTICAST_JOIN carries the group's address handle
//! attributes, QP number (0xFFFFFF) and qkey, from which every member makes an address
//! handle. After mckey's pause for the subnet manager ([`Options::settle`], 3 s), a sender
//! sends `message_count` messages of `message_size` bytes through it to the group as sends
//! with immediate data (its own QP number); a receiver takes `message_count` receives,
//! whoever sent them. Both then leave the group and release their objects.
//!
//! Message contents are not part of the protocol; a receiver checks lengths, statuses and that
//! each datagram's immediate data names the QP it came from. mckey's sender posts every send
//! unsignaled and may tear its QP down before they leave; this port signals the last one and
//! waits for its completion (nothing of it is seen on the wire). mckey's receiver polls its CQ
//! in a busy loop; this port waits through a completion channel instead. mckey's `-l` makes
//! the QP with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: it receives none of its own datagrams to
//! the group (a device without the flag, such as rxe, refuses the QP: EOPNOTSUPP).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, Payload, QpInitAttrEx, SendWr, UdDest, WcOpcode, WcStatus,
    WorkCompletion, GRH_LEN, MULTICAST_QPN,
};
use cmtwin::{
    AhHandle, ChannelHandle, CmError, CompChannelHandle, CqHandle, EventKind, EventParam, IdHandle,
    JoinFlags, PortSpace, QpCap, QpType, Result, UdData, Wait,
};

use super::session::{self, Verbs};
use crate::steps::RESOLVE_TIMEOUT;

/// The context this port gives its join (mckey gives its node's address); the
/// MULTICAST_JOIN must carry it back.
const JOIN_CONTEXT: u64 = 0x006d_636b_6579;

/// Which side of the exchange a member is (mckey's `-s`, or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sends the messages to the group (`mckey -s`).
    Sender,
    /// Receives them (mckey without `-s`).
    Receiver,
}

/// What to run (mckey's `-C`, `-S`, `-o`, and its pause).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Messages the sender sends and each receiver expects (`-C`, default 10; 0: join and
    /// leave only).
    pub message_count: u32,
    /// Bytes of each message (`-S`, default 100; 0 means no messages, as in mckey), at most
    /// the port's MTU.
    pub message_size: u32,
    /// Join as a send-only full member (`-o`): the QP is not attached to the group.
    pub send_only: bool,
    /// Make the QP with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (`-l`): no copy of its own
    /// datagrams to the group comes back to it.
    pub block_self_loopback: bool,
    /// How long a member waits after its MULTICAST_JOIN before it sends (mckey: 3 s, for the
    /// subnet manager to program the switches). A receiver does not wait: its receives are
    /// posted before it joins.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            message_count: 10,
            message_size: 100,
            send_only: false,
            block_self_loopback: false,
            settle: Duration::from_secs(3),
        }
    }
}

impl Options {
    /// The messages the exchange has: none when the size is 0 (mckey's rule).
    pub fn messages(&self) -> u32 {
        if self.message_size == 0 {
            0
        } else {
            self.message_count
        }
    }
}

/// What a member saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The member's QP number.
    pub qpn: u32,
    /// The group as its MULTICAST_JOIN gave it (address handle attributes, QPN, qkey).
    pub group: UdData,
    /// When the MULTICAST_JOIN came (the backend's clock).
    pub joined: Duration,
    /// Sends posted (the sender's; the last one completed successfully).
    pub sent: u32,
    /// Messages received, each of `message_size` bytes after the GRH space.
    pub received: u32,
    /// The QPs the messages came from, each with how many, in QP number order.
    pub sources: Vec<(u32, u32)>,
    /// When the member's last send completed or its last receive was taken.
    pub finished: Duration,
}

/// A member's objects.
struct Node {
    verbs: Verbs,
    comp: CompChannelHandle,
    cq: CqHandle,
    message: Option<MemoryRegion>,
    qpn: u32,
}

impl From<Node> for Verbs {
    fn from(node: Node) -> Verbs {
        node.verbs
    }
}

/// mckey's `init_node` (and `post_recvs` for a receiver): PD, completion channel, one CQ of
/// twice `message_count` entries (2 without messages), a UD QP of `message_count` entries a
/// queue (1 without), the message region with its GRH space, the receives.
fn setup<B: DataPath>(cm: &B, id: IdHandle, role: Role, opts: &Options) -> Result<Node> {
    let n = opts.messages();
    let mut verbs = Verbs::new(cm, id, true)?;
    let cq = verbs.cq(cm, id, (n * 2).max(2))?;
    cm.req_notify_cq(cq, false)?;
    let mut attr = QpInitAttrEx::rc(verbs.pd, cq, cq);
    attr.qp_type = QpType::Ud;
    attr.sq_sig_all = false;
    attr.block_self_multicast_loopback = opts.block_self_loopback;
    attr.cap = QpCap {
        max_send_wr: n.max(1),
        max_recv_wr: n.max(1),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qpn = cm.create_qp_ex(id, &attr)?;
    let message = if n == 0 {
        None
    } else {
        let len = opts.message_size + GRH_LEN;
        let mr = verbs.region(cm, len as usize, AccessFlags::LOCAL_WRITE)?;
        if role == Role::Receiver {
            for _ in 0..n {
                cm.post_recv_msg(id, 0, &mr, 0, len)?;
            }
        }
        Some(mr)
    };
    Ok(Node {
        comp: verbs.channel.expect("made with a channel"),
        verbs,
        cq,
        message,
        qpn,
    })
}

/// The group's datagram data from the next event of `channel`, which must be the
/// MULTICAST_JOIN of this port's join (its context, QPN 0xFFFFFF); an error naming the event
/// otherwise.
fn expect_join(cm: &impl DataPath, channel: ChannelHandle) -> Result<UdData> {
    let event = cm.get_cm_event(channel, Wait::Timeout(session::STEP))?;
    let (kind, status, param) = (event.kind(), event.status(), *event.param());
    cm.ack_cm_event(event)?;
    match (kind, param) {
        (EventKind::MulticastJoin, EventParam::Multicast { ud, context })
            if context == JOIN_CONTEXT && ud.qp_num == MULTICAST_QPN =>
        {
            Ok(ud)
        }
        _ => Err(CmError::application(format!(
            "{kind} (status {status}, {param:?}) instead of the group's MULTICAST_JOIN"
        ))),
    }
}

/// Joins `group` as `role` from `local` (the id bound there first, as with mckey's `-b`, when
/// given), exchanges the messages, leaves the group and releases everything.
pub fn member<B: DataPath>(
    cm: &B,
    role: Role,
    local: Option<SocketAddr>,
    group: SocketAddr,
    opts: &Options,
) -> Result<Summary> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::UDP)?;
    if let Some(local) = local {
        cm.bind_addr(id, local)?;
    }
    // Bound or not, the source is the id's: a bound id resolves from its address.
    cm.resolve_addr(id, None, group, RESOLVE_TIMEOUT)?;
    session::expect_event(cm, channel, EventKind::AddrResolved)?;
    let node = setup(cm, id, role, opts)?;
    let flags = if opts.send_only {
        JoinFlags::SendOnlyFullMember
    } else {
        JoinFlags::FullMember
    };
    cm.join_multicast_ex(id, group, flags, JOIN_CONTEXT)?;
    let joined_group = expect_join(cm, channel)?;
    let joined = cm.now();
    let ah = cm.create_ah(node.verbs.pd, &joined_group.ah_attr)?;
    let exchanged = match role {
        Role::Sender => send(cm, id, &node, ah, &joined_group, opts),
        Role::Receiver => receive(cm, &node, opts),
    };
    let left = cm.leave_multicast(id, group);
    let (sent, received, sources) = exchanged?;
    left?;
    let summary = Summary {
        qpn: node.qpn,
        group: joined_group,
        joined,
        sent,
        received,
        sources,
        finished: cm.now(),
    };
    cm.destroy_ah(ah)?;
    Verbs::from(node).release(cm, id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    Ok(summary)
}

/// What an exchange gave: sends, receives, and the sources of the receives.
type Exchanged = (u32, u32, Vec<(u32, u32)>);

/// After the pause, posts the messages to the group as sends with immediate data (the QP's
/// number), the last one signaled, and waits for its completion.
fn send<B: DataPath>(
    cm: &B,
    id: IdHandle,
    node: &Node,
    ah: AhHandle,
    group: &UdData,
    opts: &Options,
) -> Result<Exchanged> {
    cm.sleep(opts.settle)?;
    let Some(message) = node.message else {
        return Ok((0, 0, Vec::new()));
    };
    let qp = cm
        .qp(id)?
        .ok_or_else(|| CmError::application(format!("{id} lost its QP")))?;
    let to = UdDest {
        ah,
        remote_qpn: group.qp_num,
        remote_qkey: group.qkey,
    };
    let sge = [message.sge(0, opts.message_size)];
    let n = opts.messages();
    for i in 1..=n {
        let mut wr = SendWr::ud_send(u64::from(i), to, Some(node.qpn), Payload::Sges(&sge));
        wr.signaled = i == n;
        cm.post_send(qp, &wr)?;
    }
    let done = session::take_completions(cm, node.cq, node.comp, 1)?;
    let wc = done[0];
    if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Send || wc.wr_id != u64::from(n) {
        return Err(CmError::application(format!(
            "{wc:?} instead of the last send's completion"
        )));
    }
    Ok((n, 0, Vec::new()))
}

/// Takes the receives the sender's messages complete, and checks them.
fn receive<B: DataPath>(cm: &B, node: &Node, opts: &Options) -> Result<Exchanged> {
    let n = opts.messages();
    if n == 0 {
        return Ok((0, 0, Vec::new()));
    }
    let got = session::take_completions(cm, node.cq, node.comp, n as usize)?;
    let sources = check_receives(&got, opts)?;
    Ok((0, got.len() as u32, sources))
}

/// Checks that `wcs` are receives of one message each, with the sending QP's number as
/// immediate data; returns the sending QPs with their counts, in QP number order.
fn check_receives(wcs: &[WorkCompletion], opts: &Options) -> Result<Vec<(u32, u32)>> {
    let want = opts.message_size + GRH_LEN;
    let mut sources = std::collections::BTreeMap::new();
    for wc in wcs {
        let ok = wc.status == WcStatus::SUCCESS
            && wc.opcode == WcOpcode::Recv
            && wc.byte_len == want
            && wc.imm == Some(wc.src_qp);
        if !ok {
            return Err(CmError::application(format!(
                "{wc:?} instead of a receive of {want} bytes from a QP naming itself"
            )));
        }
        *sources.entry(wc.src_qp).or_insert(0) += 1;
    }
    Ok(sources.into_iter().collect())
}
