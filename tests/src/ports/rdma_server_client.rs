//! rdma-core's synchronous pair `rdma_server` / `rdma_client` (`librdmacm/examples/`), and
//! `rdma_xserver` / `rdma_xclient` in their RC mode, written with `rdma_getaddrinfo`,
//! `rdma_create_ep` and librdmacm's `rdma_verbs.h` helpers, call for call, wire-compatible
//! with the C tools.
//!
//! * [`Flavor::Plain`] (`rdma_server`, `rdma_client`): both sides make their endpoint with a
//!   QP of one send and one receive request, one entry each, 16 inline bytes and every send
//!   signaled; each sends inline when its QP's `max_inline_data` holds the 16-byte message
//!   (the server asks `ibv_query_qp`, the client reads what `rdma_create_ep` wrote back),
//!   registers its receive buffer (and, without inline sends, its send buffer) with
//!   `rdma_reg_msgs` and posts the receive before it connects or accepts. The
//!   client sends first; the server answers once the client's message arrived; each side
//!   disconnects after its last completion (`rdma_disconnect` of a synchronous id returns with
//!   the DISCONNECTED event, whichever side disconnected first).
//! * [`Flavor::X`] (`rdma_xserver`, `rdma_xclient` with `-c r`): one message, from the client
//!   to the server. The server accepts with 4 bytes of private data (the SRQ number, 0 in RC
//!   mode) and zeroed connection parameters; the client sends its message inline without
//!   asking for inline room (rxe and siw have it) and without `IBV_SEND_SIGNALED` (its QP
//!   signals every send). `rdma_xserver` disconnects as soon as its receive completes: if its
//!   QP enters ERROR before rxe's responder has sent the ACK, rxe drops the ACK (a response
//!   of a QP not ready) and the client's send, retried without end (the CM's retry count 7
//!   means so on rxe), never completes, and C's `rdma_xclient` would wait in
//!   `rdma_get_send_comp` for ever. The port waits [`ACK_PATIENCE`] for the completion, then
//!   disconnects, which flushes the send ([`Summary::acknowledged`] false).
//!
//! The C tools send their zero-filled static buffers and never look at what they receive;
//! this port sends [`Options::message`] and returns what it received, so that a run between
//! two ports checks the bytes, and a run against the C tool finds 16 zero bytes.
//! Unlike the C tools, a completion that is not a successful send or a 16-byte receive is an
//! error, and a client with [`Options::patience`] retries a refused connect (its server may
//! not listen yet).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{DataPath, MemoryRegion, SendFlags, WcOpcode, WcStatus};
use cmtwin::{
    rai, AddrInfo, AddrInfoHints, CmError, ConnParam, Errno, EventKind, IdHandle, PortSpace, QpCap,
    QpInitAttr, QpType, Result,
};

/// The tools' default port (`-p 7471`).
pub const DEFAULT_PORT: u16 = 7471;
/// The bytes of every message (the C tools' `send_msg[16]` and `recv_msg[16]`).
pub const MESSAGE_LEN: usize = 16;
/// The bytes of `rdma_xserver`'s private data: its SRQ number, big-endian (0 without XRC).
pub const SRQN_LEN: usize = 4;
/// The pause between two connect attempts of a client whose server does not listen yet.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long the X client waits for its send's acknowledgement before it takes the server's
/// disconnect for the end (see [`Flavor::X`]).
const ACK_PATIENCE: Duration = Duration::from_secs(5);

/// Which pair of rdma-core's tools to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `rdma_server` and `rdma_client`: a message each way.
    Plain,
    /// `rdma_xserver` and `rdma_xclient` in RC mode (`-c r`): the client's message only.
    X,
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Which pair.
    pub flavor: Flavor,
    /// The 16 bytes this side sends (the C tools send zeros).
    pub message: [u8; MESSAGE_LEN],
    /// How long a client retries a refused connect (its server may not listen yet).
    pub patience: Duration,
}

impl Options {
    /// The server's options of `flavor`: its message is `"cmtwin server 16"`.
    pub fn server(flavor: Flavor) -> Options {
        Options {
            flavor,
            message: *b"cmtwin server 16",
            patience: Duration::ZERO,
        }
    }

    /// The client's options of `flavor`: its message is `"cmtwin client 16"`.
    pub fn client(flavor: Flavor) -> Options {
        Options {
            message: *b"cmtwin client 16",
            ..Options::server(flavor)
        }
    }
}

/// What a side did, with the times (on the backend's clock, [`cmtwin::CmBackend::now`]) at
/// which its blocking steps returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The message received (`None`: this side receives none, `rdma_xclient`).
    pub received: Option<[u8; MESSAGE_LEN]>,
    /// Whether this side sent a message (`rdma_xserver` sends none).
    pub sent: bool,
    /// `max_inline_data` of the QP as the server's `ibv_query_qp` and the client's
    /// `rdma_create_ep` (written back into its attributes) gave it (the plain pair; 0 for the
    /// X pair, which does not ask).
    pub max_inline_data: u32,
    /// Whether the message went inline (`IBV_SEND_INLINE`) rather than from a region.
    pub inline: bool,
    /// The client of the X pair: the SRQ number of the server's private data, as the
    /// ESTABLISHED event its `rdma_connect` kept (`id->event`) carries it.
    pub srqn: Option<u32>,
    /// When `rdma_connect` or `rdma_accept` returned (ESTABLISHED).
    pub connected: Duration,
    /// When the last completion came.
    pub exchanged: Duration,
    /// When `rdma_disconnect` returned (with DISCONNECTED).
    pub disconnected: Duration,
    /// Whether this side's message was acknowledged: its send completed with success before
    /// the disconnect (false for a side that sends none, and for an X client whose send the
    /// server's early disconnect left unacknowledged: flushed by its own disconnect).
    pub acknowledged: bool,
}

/// The QP attributes each tool gives `rdma_create_ep`: one request and one entry each way;
/// the plain pair asks for 16 inline bytes and signals every send, `rdma_xserver` asks for
/// neither, `rdma_xclient` signals every send.
pub fn qp_init_attr(flavor: Flavor, server: bool) -> QpInitAttr {
    let inline = if flavor == Flavor::Plain {
        MESSAGE_LEN as u32
    } else {
        0
    };
    let mut attr = QpInitAttr::new(QpType::Rc);
    attr.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: inline,
    };
    attr.sq_sig_all = flavor == Flavor::Plain || !server;
    attr
}

/// `rdma_getaddrinfo(node, port, hints)` with the tools' hints (`RDMA_PS_TCP`, `RAI_PASSIVE`
/// for a server; the X pair also names the RC QP type, which the plain pair leaves to
/// librdmacm: RC for a stream socket): its one result.
fn addrinfo<B: DataPath>(
    cm: &B,
    node: Option<std::net::IpAddr>,
    port: u16,
    passive: bool,
    flavor: Flavor,
) -> Result<AddrInfo> {
    let flags = if passive { rai::PASSIVE } else { 0 };
    let mut hints = AddrInfoHints::new(flags).with_port_space(PortSpace::TCP);
    if flavor == Flavor::X {
        hints = hints.with_qp_type(QpType::Rc);
    }
    let node = node.map(|ip| ip.to_string());
    let service = port.to_string();
    let mut res = cm.getaddrinfo(node.as_deref(), Some(&service), Some(&hints))?;
    if res.is_empty() {
        return Err(CmError::application(format!(
            "no address for {node:?} port {port}"
        )));
    }
    Ok(res.remove(0))
}

/// The id's QP capacities as `ibv_query_qp(id->qp, ..., IBV_QP_CAP, ...)` gives them.
fn qp_cap<B: DataPath>(cm: &B, id: IdHandle) -> Result<QpCap> {
    let qp = cm
        .qp(id)?
        .ok_or_else(|| CmError::application(format!("{id} has no QP after rdma_create_ep")))?;
    cm.query_qp_cap(qp)
}

/// A side's buffers: the receive region and, for sends not inline, the send region.
struct Buffers {
    recv: Option<MemoryRegion>,
    send: Option<MemoryRegion>,
}

impl Buffers {
    /// `rdma_reg_msgs` of the receive buffer (if this side receives) and of the send buffer
    /// (if this side sends, not inline, or registers it all the same as `rdma_xclient` does).
    fn register<B: DataPath>(
        cm: &B,
        id: IdHandle,
        receives: bool,
        send_region: bool,
        message: [u8; MESSAGE_LEN],
    ) -> Result<Buffers> {
        let recv = match receives {
            true => Some(cm.reg_msgs(id, vec![0; MESSAGE_LEN])?),
            false => None,
        };
        let send = match send_region {
            true => Some(cm.reg_msgs(id, message.to_vec())?),
            false => None,
        };
        Ok(Buffers { recv, send })
    }

    /// `rdma_post_recv` of the whole receive buffer.
    fn post_recv<B: DataPath>(&self, cm: &B, id: IdHandle) -> Result<()> {
        match &self.recv {
            Some(mr) => cm.post_recv_msg(id, 0, mr, 0, MESSAGE_LEN as u32),
            None => Ok(()),
        }
    }

    /// `rdma_dereg_mr` of both: what the receive buffer holds.
    fn release<B: DataPath>(self, cm: &B) -> Result<Option<[u8; MESSAGE_LEN]>> {
        if let Some(mr) = self.send {
            cm.dereg_mr(mr.handle)?;
        }
        let Some(mr) = self.recv else {
            return Ok(None);
        };
        let bytes = cm.dereg_mr(mr.handle)?;
        let mut got = [0; MESSAGE_LEN];
        got.copy_from_slice(&bytes[..MESSAGE_LEN]);
        Ok(Some(got))
    }
}

/// `rdma_post_send` of the message: inline from `message` (`IBV_SEND_INLINE`, the QP
/// signalling it), or from the send region.
fn post_message<B: DataPath>(
    cm: &B,
    id: IdHandle,
    buffers: &Buffers,
    inline: bool,
    message: &[u8; MESSAGE_LEN],
) -> Result<()> {
    match (&buffers.send, inline) {
        // The tools' send_flags: 0 when not inline (their QPs signal every send).
        (Some(mr), false) => cm.post_send_msg(id, 0, mr, 0, MESSAGE_LEN as u32, SendFlags::NONE),
        // `rdma_post_send(id, NULL, send_msg, 16, NULL, IBV_SEND_INLINE)`.
        _ => cm.post_send_inline(id, 0, message, SendFlags::NONE),
    }
}

/// `rdma_get_send_comp`, which must be a successful send.
fn send_completion<B: DataPath>(cm: &B, id: IdHandle) -> Result<()> {
    check_send(cm.get_send_comp(id)?)
}

/// [`send_completion`] waiting at most `limit`: false if none came by then (the completion
/// stays to come, or to be flushed).
fn send_completion_within<B: DataPath>(cm: &B, id: IdHandle, limit: Duration) -> Result<bool> {
    match cm.get_send_comp_waiting(id, cmtwin::Wait::Timeout(limit)) {
        Ok(wc) => check_send(wc).map(|()| true),
        Err(e) if e.errno == Errno::ETIMEDOUT => Ok(false),
        Err(e) => Err(e),
    }
}

/// A send's completion, which must be a success.
fn check_send(wc: cmtwin::verbs::WorkCompletion) -> Result<()> {
    if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Send {
        return Err(CmError::application(format!(
            "{wc:?} instead of a send's success"
        )));
    }
    Ok(())
}

/// `rdma_get_recv_comp`, which must be a successful receive of a whole message.
fn recv_completion<B: DataPath>(cm: &B, id: IdHandle) -> Result<()> {
    let wc = cm.get_recv_comp(id)?;
    let whole = wc.byte_len == MESSAGE_LEN as u32;
    if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Recv || !whole {
        return Err(CmError::application(format!(
            "{wc:?} instead of a receive of {MESSAGE_LEN} bytes"
        )));
    }
    Ok(())
}

/// `rdma_server -s <ip> -p <port>` of `addr` (or `rdma_xserver -p <port> -c r`, on the
/// wildcard address: it takes no address): listens, takes one connection request, receives
/// the client's message, answers it (plain pair), disconnects, and releases it all.
pub fn server<B: DataPath>(cm: &B, addr: SocketAddr, opts: &Options) -> Result<Summary> {
    let node = (opts.flavor == Flavor::Plain).then_some(addr.ip());
    let res = addrinfo(cm, node, addr.port(), true, opts.flavor)?;
    let listen = cm.create_ep(&res, Some(&mut qp_init_attr(opts.flavor, true)))?;
    let served = cm
        .listen(listen, 0)
        .and_then(|()| cm.get_request(listen))
        .and_then(|id| {
            let served = serve(cm, id, opts);
            let destroyed = cm.destroy_ep(id);
            served.and_then(|s| destroyed.map(|()| s))
        });
    let destroyed = cm.destroy_ep(listen);
    served.and_then(|s| destroyed.map(|()| s))
}

/// The server's exchange on the id `rdma_get_request` gave (with its QP).
fn serve<B: DataPath>(cm: &B, id: IdHandle, opts: &Options) -> Result<Summary> {
    let plain = opts.flavor == Flavor::Plain;
    let max_inline_data = match plain {
        true => qp_cap(cm, id)?.max_inline_data,
        false => 0,
    };
    let inline = plain && max_inline_data >= MESSAGE_LEN as u32;
    let buffers = Buffers::register(cm, id, true, plain && !inline, opts.message)?;
    let exchanged = buffers.post_recv(cm, id).and_then(|()| {
        let param = match plain {
            true => None,
            // rdma_xserver's memset parameters: only the SRQ number (0 in RC mode).
            false => Some(zeroed_param_with(&[0; SRQN_LEN])),
        };
        cm.accept(id, param.as_ref())?;
        let connected = cm.now();
        recv_completion(cm, id)?;
        if plain {
            post_message(cm, id, &buffers, inline, &opts.message)?;
            send_completion(cm, id)?;
        }
        Ok((connected, cm.now()))
    });
    let shape = Shape {
        sent: plain,
        acknowledged: plain && exchanged.is_ok(),
        max_inline_data,
        inline,
        srqn: None,
    };
    finish(cm, id, buffers, exchanged, shape)
}

/// What a side's summary holds besides what it received and the times.
struct Shape {
    sent: bool,
    acknowledged: bool,
    max_inline_data: u32,
    inline: bool,
    srqn: Option<u32>,
}

/// A connection's end, as the tools' error paths also take it: `rdma_disconnect`, the
/// regions deregistered; the summary of `shape`, what was received and the times, or the
/// exchange's first error.
fn finish<B: DataPath>(
    cm: &B,
    id: IdHandle,
    buffers: Buffers,
    exchanged: Result<(Duration, Duration)>,
    shape: Shape,
) -> Result<Summary> {
    let disconnected = cm.disconnect(id).map(|()| cm.now());
    // A send left unacknowledged is flushed by the disconnect (or its acknowledgement came
    // just after the patience ran out): its completion first, so that its region (if not
    // inline) is no longer busy.
    let acknowledged = match (shape.sent, shape.acknowledged, &exchanged) {
        (true, false, Ok(_)) => late_send(cm, id),
        _ => Ok(shape.acknowledged),
    };
    let received = buffers.release(cm);
    let (connected, exchanged) = exchanged?;
    Ok(Summary {
        received: received?,
        sent: shape.sent,
        max_inline_data: shape.max_inline_data,
        inline: shape.inline,
        srqn: shape.srqn,
        connected,
        exchanged,
        disconnected: disconnected?,
        acknowledged: acknowledged?,
    })
}

/// The completion of a send still outstanding at the disconnect: flushed (false), or a
/// success that came meanwhile (true).
fn late_send<B: DataPath>(cm: &B, id: IdHandle) -> Result<bool> {
    let wc = cm.get_send_comp(id)?;
    match wc.status {
        WcStatus::WR_FLUSH_ERR => Ok(false),
        WcStatus::SUCCESS => check_send(wc).map(|()| true),
        _ => Err(CmError::application(format!(
            "{wc:?} instead of the flush of an unacknowledged send"
        ))),
    }
}

/// `struct rdma_conn_param` zeroed but for `private_data` (what `rdma_xserver` accepts with).
fn zeroed_param_with(private_data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private_data.to_vec(),
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        qp_num: 0,
    }
}

/// `rdma_client` (or `rdma_xclient -c r`): connects to `server`, sends its message, receives
/// the answer (plain pair), disconnects, and releases it all.
pub fn client<B: DataPath>(cm: &B, server: SocketAddr, opts: &Options) -> Result<Summary> {
    let res = addrinfo(cm, Some(server.ip()), server.port(), false, opts.flavor)?;
    let start = cm.now();
    loop {
        let mut attr = qp_init_attr(opts.flavor, false);
        let id = cm.create_ep(&res, Some(&mut attr))?;
        let client = match prepare(cm, id, opts, attr.cap.max_inline_data) {
            Ok(client) => client,
            Err(e) => {
                let _ = cm.destroy_ep(id);
                return Err(e);
            }
        };
        let e = match cm.connect(id, None) {
            Ok(()) => {
                let done = exchange(cm, id, opts, client, cm.now());
                let destroyed = cm.destroy_ep(id);
                return done.and_then(|s| destroyed.map(|()| s));
            }
            Err(e) => e,
        };
        // The endpoint goes first: its QP held the flushed receive, which keeps the region
        // busy on libibverbs until polled or destroyed.
        cm.destroy_ep(id)?;
        client.buffers.release(cm)?;
        if e.errno != Errno::ECONNREFUSED || cm.now() - start >= opts.patience {
            return Err(e);
        }
        cm.sleep(RETRY_PAUSE)?;
    }
}

/// A client endpoint made ready to connect: its buffers and how it sends.
struct Prepared {
    buffers: Buffers,
    max_inline_data: u32,
    inline: bool,
}

/// The client's steps between `rdma_create_ep` and `rdma_connect`: the inline check against
/// `written_back` (the `max_inline_data` `rdma_create_ep` wrote back), the regions, the
/// receive posted (the plain pair).
fn prepare<B: DataPath>(
    cm: &B,
    id: IdHandle,
    opts: &Options,
    written_back: u32,
) -> Result<Prepared> {
    let plain = opts.flavor == Flavor::Plain;
    // rdma_client reads the inline room rdma_create_ep wrote back into its attributes;
    // rdma_xclient sends inline without asking.
    let max_inline_data = match plain {
        true => written_back,
        false => 0,
    };
    let inline = !plain || max_inline_data >= MESSAGE_LEN as u32;
    // rdma_xclient registers its send buffer although it sends inline.
    let buffers = Buffers::register(cm, id, plain, !plain || !inline, opts.message)?;
    buffers.post_recv(cm, id)?;
    Ok(Prepared {
        buffers,
        max_inline_data,
        inline,
    })
}

/// The client's exchange on its connected endpoint.
fn exchange<B: DataPath>(
    cm: &B,
    id: IdHandle,
    opts: &Options,
    client: Prepared,
    connected: Duration,
) -> Result<Summary> {
    let plain = opts.flavor == Flavor::Plain;
    let Prepared {
        buffers,
        max_inline_data,
        inline,
    } = client;
    let srqn = match plain {
        true => Ok(None),
        false => accepted_srqn(cm, id).map(Some),
    };
    let mut acknowledged = true;
    let exchanged = srqn.clone().and_then(|_| {
        post_message(cm, id, &buffers, inline, &opts.message)?;
        match plain {
            true => send_completion(cm, id)?,
            false => acknowledged = send_completion_within(cm, id, ACK_PATIENCE)?,
        }
        if plain {
            recv_completion(cm, id)?;
        }
        Ok((connected, cm.now()))
    });
    let shape = Shape {
        sent: true,
        acknowledged: acknowledged && exchanged.is_ok(),
        max_inline_data,
        inline,
        srqn: srqn.ok().flatten(),
    };
    finish(cm, id, buffers, exchanged, shape)
}

/// The SRQ number `rdma_xserver` accepted with: the first 4 bytes (big-endian) of the
/// private data of the ESTABLISHED event that `rdma_connect` kept as the id's event.
fn accepted_srqn<B: DataPath>(cm: &B, id: IdHandle) -> Result<u32> {
    let event = cm.sync_event(id)?;
    match event {
        Some(e) if e.kind == EventKind::Established && e.private_data.len() >= SRQN_LEN => {
            let mut srqn = [0; SRQN_LEN];
            srqn.copy_from_slice(&e.private_data[..SRQN_LEN]);
            Ok(u32::from_be_bytes(srqn))
        }
        other => Err(CmError::application(format!(
            "rdma_connect kept {other:?}, not an ESTABLISHED with the server's SRQ number"
        ))),
    }
}
