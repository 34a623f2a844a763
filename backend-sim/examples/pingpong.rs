//! Quickstart: a client and a server host connect over the simulated fabric, exchange private
//! data, disconnect, see TIMEWAIT_EXIT, and the trace is printed.
//!
//! `cargo run --example pingpong [seed]`
//!
//! The protocol code (`server`, `client`) is generic over `CmBackend`: the same functions run on
//! real RDMA with `cmtwin-verbs`.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, ConnParam, EventInfo, EventKind, PortSpace, QpInitAttr, QpType,
    Result, Wait,
};
use cmtwin_sim::Fabric;

const WAIT: Wait = Wait::Timeout(Duration::from_secs(30));

/// Waits for the next event on `channel`, checks its kind, acknowledges it, returns its data.
fn expect<B: CmBackend>(cm: &B, channel: ChannelHandle, kind: EventKind) -> Result<EventInfo> {
    let event = cm.get_cm_event(channel, WAIT)?;
    let info = event.info().clone();
    cm.ack_cm_event(event)?;
    assert_eq!(
        info.kind, kind,
        "expected {kind}, got {} (status {})",
        info.kind, info.status
    );
    Ok(info)
}

/// Accepts one connection, answers "pong", waits for the client to disconnect.
fn server<B: CmBackend>(cm: &B, addr: SocketAddr) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 4)?;
    let request = expect(cm, channel, EventKind::ConnectRequest)?;
    let ping = &request.private_data[..4];
    println!(
        "server: CONNECT_REQUEST with {:?} ({} bytes delivered)",
        String::from_utf8_lossy(ping),
        request.private_data.len()
    );
    let id = request.id;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.accept(id, Some(&ConnParam::with_private_data(b"pong")))?;
    expect(cm, channel, EventKind::Established)?;
    expect(cm, channel, EventKind::Disconnected)?;
    cm.disconnect(id)?;
    expect(cm, channel, EventKind::TimewaitExit)?;
    println!("server: TIMEWAIT_EXIT at {:?}", cm.now());
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_id(listener)?;
    cm.destroy_event_channel(channel)
}

/// Connects with "ping", reads "pong", disconnects.
fn client<B: CmBackend>(cm: &B, server: SocketAddr) -> Result<()> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::AddrResolved)?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    expect(cm, channel, EventKind::RouteResolved)?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::with_private_data(b"ping")))?;
    let established = expect(cm, channel, EventKind::Established)?;
    println!(
        "client: ESTABLISHED with {:?}",
        String::from_utf8_lossy(&established.private_data[..4])
    );
    cm.disconnect(id)?;
    expect(cm, channel, EventKind::Disconnected)?;
    expect(cm, channel, EventKind::TimewaitExit)?;
    println!("client: TIMEWAIT_EXIT at {:?}", cm.now());
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)
}

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let server_ip = "10.0.0.1".parse().unwrap();
    let fabric = Fabric::builder(seed)
        .host("server", cmtwin::Transport::Roce, &[server_ip])
        .host(
            "client",
            cmtwin::Transport::Roce,
            &["10.0.0.2".parse().unwrap()],
        )
        .build()
        .expect("a valid configuration");
    let addr = SocketAddr::new(server_ip, 7471);
    fabric.spawn("server", "server", move |cm| server(&cm, addr));
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(1))?; // let the server listen first
        client(&cm, addr)
    });
    let outcome = fabric.run();
    println!("\n--- trace (seed {seed}) ---\n{}", fabric.trace_text());
    if let Err(e) = outcome {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
