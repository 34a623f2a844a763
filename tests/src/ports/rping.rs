//! rping's protocol (rdma-core's `librdmacm/examples/rping.c`), wire-compatible with the C
//! `rping -s` and `rping -c`.
//!
//! Each ping: the client fills its start buffer with the ping's text and sends its address,
//! rkey and length (16 bytes: a big-endian u64 and two big-endian u32); the server RDMA-reads
//! that many bytes into its own buffer and sends a 16-byte "go ahead"; the client advertises
//! its second buffer the same way; the server RDMA-writes its buffer's string (up to and with
//! its NUL) there and sends "go ahead" again. With verification the client compares both of
//! its buffers (and this server checks what it read against the ping's expected text). The
//! server serves until the client disconnects. Connection parameters, queue depths and the
//! single CQ with its completion channel are rping's.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, QpInitAttrEx, SendFlags, WcOpcode, WcStatus,
    WorkCompletion,
};
use cmtwin::{ChannelHandle, CmError, ConnParam, EventKind, IdHandle, PortSpace, QpCap, Result};

use super::session::{self, CompletionWait, Next, Verbs};

/// The length of a buffer advertisement (`struct rping_rdma_info`).
pub const INFO_LEN: usize = 16;
/// rping's default port.
pub const DEFAULT_PORT: u16 = 7174;
/// The smallest buffer rping accepts (room for the longest ping text and its NUL).
pub const MIN_SIZE: usize = 26;
/// The largest buffer rping accepts.
pub const MAX_SIZE: usize = 64 * 1024 - 1;
/// rping's send queue depth (the CQ has twice as many entries).
const SQ_DEPTH: u32 = 16;
/// The first and last characters of the filler after a ping's text.
const FILL_FIRST: u8 = b'A';
const FILL_LAST: u8 = b'z';

/// What to run (rping's `-S`, `-C`, `-V`, `-v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The buffer size (`-S`, default 64).
    pub size: usize,
    /// How many pings the client sends (`-C`); the server serves until the client leaves.
    pub count: u32,
    /// Compare the data (`-V`).
    pub validate: bool,
    /// Print every ping's data (`-v`).
    pub verbose: bool,
    /// How long a client retries a rejected connect (its server may not listen yet).
    pub patience: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            size: 64,
            count: 10,
            validate: true,
            verbose: false,
            patience: Duration::ZERO,
        }
    }
}

impl Options {
    fn check(&self) -> Result<()> {
        if (MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            Ok(())
        } else {
            Err(CmError::application(format!(
                "invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
                self.size
            )))
        }
    }
}

/// A buffer advertisement: where the peer may read or write, under which key, how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advert {
    /// The buffer's device address.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length in bytes.
    pub size: u32,
}

impl Advert {
    /// The advertisement of `size` bytes of `mr`.
    pub fn of(mr: &MemoryRegion, size: usize) -> Advert {
        Advert {
            addr: mr.addr,
            rkey: mr.rkey,
            size: size as u32,
        }
    }

    /// The wire form: address, rkey, size, each big-endian.
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut m = [0u8; INFO_LEN];
        m[..8].copy_from_slice(&self.addr.to_be_bytes());
        m[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        m[12..].copy_from_slice(&self.size.to_be_bytes());
        m
    }

    /// Reads the wire form.
    pub fn decode(m: &[u8; INFO_LEN]) -> Advert {
        let word = |r: std::ops::Range<usize>| u32::from_be_bytes(m[r].try_into().expect("4"));
        Advert {
            addr: u64::from_be_bytes(m[..8].try_into().expect("8 bytes")),
            rkey: word(8..12),
            size: word(12..16),
        }
    }
}

/// The start buffer of ping `ping` (from 0): `rdma-ping-<ping>: `, then letters from 'A' + ping
/// (modulo the 58 characters 'A'..='z'), each next one the following character ('z' wraps
/// to 'A'), and a final NUL.
pub fn ping_data(ping: u32, size: usize) -> Vec<u8> {
    let span = u32::from(FILL_LAST - FILL_FIRST) + 1;
    let mut data = format!("rdma-ping-{ping}: ").into_bytes();
    data.truncate(size - 1);
    let mut c = FILL_FIRST + (ping % span) as u8;
    while data.len() < size - 1 {
        data.push(c);
        c = if c == FILL_LAST { FILL_FIRST } else { c + 1 };
    }
    data.push(0);
    data
}

/// The text of a buffer: its bytes up to the first NUL.
fn text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// What a run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Pings completed (both transfers and both "go ahead" messages).
    pub pings: u32,
    /// Bytes moved by RDMA reads and writes.
    pub rdma_bytes: u64,
}

/// One side's connection: id, objects, regions and its completion wait.
struct Side {
    id: IdHandle,
    verbs: Verbs,
    recv: MemoryRegion,
    send: MemoryRegion,
    rdma: MemoryRegion,
    start: Option<MemoryRegion>,
    wait: CompletionWait,
}

/// Gives `id` rping's objects: PD, completion channel, one CQ for both queues, the QP, the
/// advertisement regions and the RDMA buffers (`start` on the client), and posts the receive.
fn setup<B: DataPath>(
    cm: &B,
    id: IdHandle,
    size: usize,
    client: bool,
    cm_channel: ChannelHandle,
) -> Result<Side> {
    let mut verbs = Verbs::new(cm, id, true)?;
    let cq = verbs.cq(cm, id, SQ_DEPTH * 2)?;
    let channel = verbs.channel.expect("made with a channel");
    let wait = CompletionWait::new(cm, cq, channel, cm_channel)?;
    let mut attr = QpInitAttrEx::rc(verbs.pd, cq, cq);
    attr.cap = QpCap {
        max_send_wr: SQ_DEPTH,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    attr.sq_sig_all = false;
    cm.create_qp_ex(id, &attr)?;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let recv = verbs.region(cm, INFO_LEN, AccessFlags::LOCAL_WRITE)?;
    let send = verbs.region(cm, INFO_LEN, AccessFlags::NONE)?;
    let rdma = verbs.region(cm, size, remote)?;
    let start = if client {
        Some(verbs.region(cm, size, remote)?)
    } else {
        None
    };
    cm.post_recv_msg(id, 0, &recv, 0, INFO_LEN as u32)?;
    Ok(Side {
        id,
        verbs,
        recv,
        send,
        rdma,
        start,
        wait,
    })
}

impl From<Side> for Verbs {
    fn from(side: Side) -> Verbs {
        side.verbs
    }
}

impl Side {
    /// The next successful completion that is not a send's (sends are only counted by the
    /// device), or `None` when the peer disconnected: DISCONNECTED, or a flushed work
    /// request (the QP left RTS; siw flushes the posted receive before the CM reports the
    /// disconnect, rxe after it; rping counts flushes as the end too).
    fn next<B: DataPath>(&self, cm: &B) -> Result<Option<WorkCompletion>> {
        loop {
            match self.wait.next(cm)? {
                Next::Disconnected => return Ok(None),
                Next::Completion(wc) if wc.status == WcStatus::WR_FLUSH_ERR => return Ok(None),
                Next::Completion(wc) if wc.status != WcStatus::SUCCESS => {
                    return Err(CmError::application(format!("completion failed: {wc:?}")))
                }
                Next::Completion(wc) if wc.opcode == WcOpcode::Send => continue,
                Next::Completion(wc) => return Ok(Some(wc)),
            }
        }
    }

    /// Waits for `opcode`'s completion; an error if the peer disconnects first.
    fn expect<B: DataPath>(&self, cm: &B, opcode: WcOpcode, ping: u32) -> Result<WorkCompletion> {
        match self.next(cm)? {
            Some(wc) if wc.opcode == opcode => Ok(wc),
            Some(wc) => Err(CmError::application(format!(
                "ping {ping}: {:?} instead of {opcode:?}",
                wc.opcode
            ))),
            None => Err(CmError::application(format!(
                "ping {ping}: the peer disconnected waiting for {opcode:?}"
            ))),
        }
    }

    /// Takes the advertisement of a receive completion and posts the next receive.
    fn advert<B: DataPath>(&self, cm: &B, wc: &WorkCompletion) -> Result<[u8; INFO_LEN]> {
        if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
            return Err(CmError::application(format!("received bogus data: {wc:?}")));
        }
        let mut m = [0u8; INFO_LEN];
        cm.mr_read(self.recv.handle, 0, &mut m)?;
        cm.post_recv_msg(self.id, 0, &self.recv, 0, INFO_LEN as u32)?;
        Ok(m)
    }

    /// Sends `message` (an advertisement, or "go ahead").
    fn send<B: DataPath>(&self, cm: &B, message: &[u8; INFO_LEN]) -> Result<()> {
        cm.mr_write(self.send.handle, 0, message)?;
        cm.post_send_msg(
            self.id,
            0,
            &self.send,
            0,
            INFO_LEN as u32,
            SendFlags::SIGNALED,
        )
    }
}

/// Listens on `addr`, serves one client until it disconnects, and releases everything.
pub fn server<B: DataPath>(cm: &B, addr: SocketAddr, opts: &Options) -> Result<Summary> {
    opts.check()?;
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 3)?;
    let id = session::expect_event(cm, channel, EventKind::ConnectRequest)?;
    let side = setup(cm, id, opts.size, false, channel)?;
    // As rping's server: one RDMA read in flight each way. Without it the server's ORD is
    // what the request carried, which on iWARP (siw) leaves it no RDMA read to issue.
    cm.accept(id, Some(&conn_param()))?;
    let summary = serve_pings(cm, &side, opts)?;
    cm.disconnect(id)?;
    side.verbs.release(cm, id)?;
    cm.destroy_id(id)?;
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    Ok(summary)
}

/// The server's loop: read the advertised buffer, "go ahead", write it back, "go ahead",
/// until the client disconnects.
fn serve_pings<B: DataPath>(cm: &B, side: &Side, opts: &Options) -> Result<Summary> {
    let go_ahead = [0u8; INFO_LEN];
    let mut summary = Summary {
        pings: 0,
        rdma_bytes: 0,
    };
    loop {
        let ping = summary.pings;
        let Some(wc) = side.next(cm)? else {
            return Ok(summary);
        };
        let source = Advert::decode(&side.advert(cm, &wc)?);
        let len = source.size as usize;
        if len > opts.size {
            return Err(CmError::application(format!(
                "ping {ping}: the client's {len} bytes exceed the {}-byte buffer",
                opts.size
            )));
        }
        let (rdma, addr) = (&side.rdma, source.addr);
        let signaled = SendFlags::SIGNALED;
        cm.post_read(side.id, 1, rdma, 0, len as u32, signaled, addr, source.rkey)?;
        side.expect(cm, WcOpcode::RdmaRead, ping)?;
        let mut data = vec![0u8; len];
        cm.mr_read(rdma.handle, 0, &mut data)?;
        if opts.validate && data != ping_data(ping, len) {
            return Err(CmError::application(format!(
                "ping {ping}: read {:?}, not the ping's text",
                text(&data)
            )));
        }
        if opts.verbose {
            println!("server ping data: {}", text(&data));
        }
        side.send(cm, &go_ahead)?;
        let wc = side.expect(cm, WcOpcode::Recv, ping)?;
        let sink = Advert::decode(&side.advert(cm, &wc)?);
        // The string and its NUL, as rping writes it.
        let echo = data.iter().position(|&b| b == 0).map_or(len, |n| n + 1);
        let echo = echo.min(sink.size as usize) as u32;
        cm.post_write(side.id, 2, rdma, 0, echo, signaled, sink.addr, sink.rkey)?;
        side.expect(cm, WcOpcode::RdmaWrite, ping)?;
        side.send(cm, &go_ahead)?;
        summary.pings += 1;
        summary.rdma_bytes += len as u64 + u64::from(echo);
    }
}

/// rping's connection parameters, on both sides: one RDMA read in flight each way, seven
/// transport and RNR retries.
fn conn_param() -> ConnParam {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// Connects to `server`, runs `opts.count` pings, disconnects and releases everything.
pub fn client<B: DataPath>(cm: &B, server: SocketAddr, opts: &Options) -> Result<Summary> {
    opts.check()?;
    let channel = cm.create_event_channel()?;
    let param = conn_param();
    let (id, side) =
        session::connect_when_listening(cm, channel, server, &param, opts.patience, |id| {
            setup(cm, id, opts.size, true, channel)
        })?;
    let summary = run_pings(cm, &side, opts)?;
    cm.disconnect(id)?;
    session::expect_event(cm, channel, EventKind::Disconnected)?;
    side.verbs.release(cm, id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    Ok(summary)
}

/// The client's loop: advertise the start buffer, wait, advertise the sink, wait, compare.
fn run_pings<B: DataPath>(cm: &B, side: &Side, opts: &Options) -> Result<Summary> {
    let start = side.start.expect("the client has a start buffer");
    let size = opts.size;
    for ping in 0..opts.count {
        let data = ping_data(ping, size);
        cm.mr_write(start.handle, 0, &data)?;
        side.send(cm, &Advert::of(&start, size).encode())?;
        let wc = side.expect(cm, WcOpcode::Recv, ping)?;
        side.advert(cm, &wc)?;
        side.send(cm, &Advert::of(&side.rdma, size).encode())?;
        let wc = side.expect(cm, WcOpcode::Recv, ping)?;
        side.advert(cm, &wc)?;
        let mut echo = vec![0u8; size];
        cm.mr_read(side.rdma.handle, 0, &mut echo)?;
        if opts.validate && echo != data {
            return Err(CmError::application(format!(
                "ping {ping}: data mismatch: {:?} came back for {:?}",
                text(&echo),
                text(&data)
            )));
        }
        if opts.verbose {
            println!("ping data: {}", text(&echo));
        }
    }
    Ok(Summary {
        pings: opts.count,
        rdma_bytes: 2 * size as u64 * u64::from(opts.count),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_fill_and_nul_follow_rping() {
        let d = ping_data(0, 26);
        assert_eq!(&d, b"rdma-ping-0: ABCDEFGHIJKL\0");
        let d = ping_data(57, 30);
        assert_eq!(&d, b"rdma-ping-57: zABCDEFGHIJKLMN\0");
        assert_eq!(ping_data(58, 27), b"rdma-ping-58: ABCDEFGHIJKL\0".to_vec());
    }

    #[test]
    fn advert_is_big_endian_address_rkey_size() {
        let a = Advert {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x0a0b_0c0d,
            size: 64,
        };
        let m = a.encode();
        assert_eq!(m, [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 0, 0, 0, 64]);
        assert_eq!(Advert::decode(&m), a);
    }
}
