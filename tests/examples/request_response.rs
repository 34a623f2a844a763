//! A small request/response protocol over the data path, written against
//! `cmtwin::verbs::DataPath` with librdmacm's `rdma_verbs.h` helpers (`reg_msgs`,
//! `post_recv_msg`, `post_send_msg`, `get_recv_comp`, `get_send_comp`): a key-value server
//! answering PUT and GET requests of one client, which checks every answer.
//!
//! `cargo run -p cmtwin-tests --example request_response [seed] [requests]` runs it on the
//! simulator, the server and the client as two simulated processes; `CMTWIN_TRACE=1` prints
//! the trace. With `CMTWIN_RDMA_ADDR=<ip of an RDMA interface>` the same code runs on the real
//! librdmacm and libibverbs, the server and the client on two threads, each with its own
//! `VerbsBackend` (the seed is then ignored).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{DataPath, MemoryRegion, WcOpcode, WcStatus, WorkCompletion};
use cmtwin::{
    CmBackend, CmError, EventKind, IdHandle, PortSpace, QpInitAttr, QpType, Result, Transport, Wait,
};
use cmtwin_sim::Fabric;
use cmtwin_verbs::VerbsBackend;

/// A request or answer: operation, key, value (little-endian u64 each).
const MSG_LEN: usize = 24;
const PUT: u64 = 1;
const GET: u64 = 2;
const BYE: u64 = 3;
/// Every wait's bound.
const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));

fn encode(op: u64, key: u64, value: u64) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    for (i, v) in [op, key, value].into_iter().enumerate() {
        m[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    m
}

fn decode(m: &[u8; MSG_LEN]) -> (u64, u64, u64) {
    let field = |i: usize| u64::from_le_bytes(m[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (field(0), field(1), field(2))
}

/// Waits for the next event of `id`'s channel, which must be `kind`.
fn expect<B: DataPath>(
    cm: &B,
    channel: cmtwin::ChannelHandle,
    kind: EventKind,
) -> Result<IdHandle> {
    let event = cm.get_cm_event(channel, WAIT)?;
    let (got, id) = (event.kind(), event.id());
    cm.ack_cm_event(event)?;
    if got != kind {
        return Err(CmError::application(format!("{got} instead of {kind}")));
    }
    Ok(id)
}

/// A successful completion of `opcode`, or the failure it reports.
fn check(wc: WorkCompletion, opcode: WcOpcode) -> Result<WorkCompletion> {
    if wc.status != WcStatus::SUCCESS || wc.opcode != opcode {
        return Err(CmError::application(format!("completion {wc:?}")));
    }
    Ok(wc)
}

/// Reads the message in `mr`.
fn read_msg<B: DataPath>(cm: &B, mr: &MemoryRegion) -> Result<[u8; MSG_LEN]> {
    let mut m = [0u8; MSG_LEN];
    cm.mr_read(mr.handle, 0, &mut m)?;
    Ok(m)
}

/// Sends `msg` from `tx` and waits for its completion.
fn send<B: DataPath>(cm: &B, id: IdHandle, tx: &MemoryRegion, msg: &[u8; MSG_LEN]) -> Result<()> {
    cm.mr_write(tx.handle, 0, msg)?;
    cm.post_send_msg(id, 1, tx, 0, MSG_LEN as u32, false)?;
    check(cm.get_send_comp(id)?, WcOpcode::Send).map(|_| ())
}

/// The server: accepts one connection and answers its requests until BYE.
fn serve<B: DataPath>(cm: &B, addr: SocketAddr) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 1)?;
    let id = expect(cm, channel, EventKind::ConnectRequest)?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    let rx = cm.reg_msgs(id, vec![0; MSG_LEN])?;
    let tx = cm.reg_msgs(id, vec![0; MSG_LEN])?;
    // The first request may come as soon as the client is established: receive before accept.
    cm.post_recv_msg(id, 0, &rx, 0, MSG_LEN as u32)?;
    cm.accept(id, None)?;
    expect(cm, channel, EventKind::Established)?;
    let mut store = BTreeMap::new();
    loop {
        check(cm.get_recv_comp(id)?, WcOpcode::Recv)?;
        let (op, key, value) = decode(&read_msg(cm, &rx)?);
        cm.post_recv_msg(id, 0, &rx, 0, MSG_LEN as u32)?;
        let answer = match op {
            PUT => store.insert(key, value).unwrap_or(0),
            GET => store.get(&key).copied().unwrap_or(0),
            _ => 0,
        };
        send(cm, id, &tx, &encode(op, key, answer))?;
        if op == BYE {
            break;
        }
    }
    expect(cm, channel, EventKind::Disconnected)?;
    cm.disconnect(id)?;
    // The disconnect flushed the receive posted for a next request.
    let flushed = cm.get_recv_comp(id)?;
    if flushed.status != WcStatus::WR_FLUSH_ERR {
        return Err(CmError::application(format!(
            "{flushed:?} instead of a flush"
        )));
    }
    cm.dereg_mr(rx.handle)?;
    cm.dereg_mr(tx.handle)?;
    cm.destroy_id(id)?;
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)?;
    println!("server: {} keys stored", store.len());
    Ok(())
}

/// The client: PUTs `n` keys, GETs them back, checks every answer, says BYE.
fn ask<B: DataPath>(cm: &B, server: SocketAddr, n: u64) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::AddrResolved)?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::RouteResolved)?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    let rx = cm.reg_msgs(id, vec![0; MSG_LEN])?;
    let tx = cm.reg_msgs(id, vec![0; MSG_LEN])?;
    cm.connect(id, None)?;
    expect(cm, channel, EventKind::Established)?;
    let call = |op: u64, key: u64, value: u64| -> Result<u64> {
        cm.post_recv_msg(id, 0, &rx, 0, MSG_LEN as u32)?;
        send(cm, id, &tx, &encode(op, key, value))?;
        check(cm.get_recv_comp(id)?, WcOpcode::Recv)?;
        let (rop, rkey, answer) = decode(&read_msg(cm, &rx)?);
        if (rop, rkey) != (op, key) {
            return Err(CmError::application(format!(
                "answer to {rop}/{rkey} for {op}/{key}"
            )));
        }
        Ok(answer)
    };
    for key in 1..=n {
        call(PUT, key, key * key)?;
    }
    for key in 1..=n {
        let value = call(GET, key, 0)?;
        if value != key * key {
            return Err(CmError::application(format!("GET {key} gave {value}")));
        }
    }
    call(BYE, 0, 0)?;
    cm.disconnect(id)?;
    expect(cm, channel, EventKind::Disconnected)?;
    cm.dereg_mr(rx.handle)?;
    cm.dereg_mr(tx.handle)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)?;
    println!("client: {n} PUTs and {n} GETs answered correctly");
    Ok(())
}

/// The real backend: server and client on two threads at `ip`, port 7471.
fn on_verbs(ip: IpAddr, n: u64) -> std::result::Result<(), String> {
    let addr = SocketAddr::new(ip, 7471);
    let server = std::thread::spawn(move || serve(&VerbsBackend::new(), addr));
    let cm = VerbsBackend::new();
    let client = cm
        .sleep(Duration::from_millis(200))
        .and_then(|()| ask(&cm, addr, n));
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    server.map_err(|e| format!("server: {e}"))?;
    client.map_err(|e| format!("client: {e}"))?;
    println!("librdmacm on {ip}: done");
    Ok(())
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (seed, n) = (arg(1, 1), arg(2, 16));
    if let Ok(ip) = std::env::var("CMTWIN_RDMA_ADDR") {
        let ip: IpAddr = ip.parse().expect("CMTWIN_RDMA_ADDR is an IP address");
        if let Err(e) = on_verbs(ip, n) {
            eprintln!("failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    let server_ip: IpAddr = "10.0.0.1".parse().expect("literal");
    let fabric = Fabric::builder(seed)
        .host("server", Transport::Roce, &[server_ip])
        .host(
            "client",
            Transport::Roce,
            &["10.0.0.2".parse().expect("literal")],
        )
        .build()
        .expect("a valid fabric");
    let addr = SocketAddr::new(server_ip, 7471);
    fabric.spawn("server", "server", move |cm| serve(&cm, addr));
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(200))?;
        ask(&cm, addr, n)
    });
    let outcome = fabric.run();
    if std::env::var_os("CMTWIN_TRACE").is_some() {
        println!("--- trace (seed {seed}) ---\n{}", fabric.trace_text());
    }
    match outcome {
        Ok(()) => println!(
            "simulator (seed {seed}): done after {:?} of virtual time",
            fabric.now()
        ),
        Err(e) => {
            eprintln!("failed: {e}");
            std::process::exit(1);
        }
    }
}
