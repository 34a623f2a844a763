//! The quickstart on a tokio runtime, over the real librdmacm: the server and the client are
//! two tokio tasks, each awaiting its channel's events through `cmtwin_verbs::AsyncChannel`
//! (the channel's fds registered with tokio's reactor), no thread of their own.
//!
//! `CMTWIN_RDMA_ADDR=<ip of an RDMA interface> cargo run --example pingpong_tokio`. tokio runs
//! over real file descriptors, so this example needs librdmacm; on the simulator the same
//! protocol code runs with `cmtwin::task` (`cargo run --example pingpong_async`). Without
//! `CMTWIN_RDMA_ADDR` it says so and exits.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{CmBackend, CmError, ConnParam, EventInfo, EventKind, PortSpace, QpInitAttr, QpType};
use cmtwin_verbs::{AsyncChannel, VerbsBackend};

/// The next event of `channel`, acknowledged; an application error naming what came when it
/// is not `kind`.
async fn expect(
    cm: &VerbsBackend,
    channel: &AsyncChannel,
    kind: EventKind,
) -> Result<EventInfo, CmError> {
    let event = channel.event().await?;
    let info = event.info().clone();
    cm.ack_cm_event(event)?;
    if info.kind != kind {
        return Err(CmError::application(format!(
            "expected {kind}, got {} (status {})",
            info.kind, info.status
        )));
    }
    Ok(info)
}

async fn server(cm: VerbsBackend, addr: SocketAddr) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let listener = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
    cm.bind_addr(listener, addr)?;
    cm.listen(listener, 4)?;
    let events = AsyncChannel::new(&cm, ch)?;
    let request = expect(&cm, &events, EventKind::ConnectRequest).await?;
    println!(
        "server: CONNECT_REQUEST with {:?}",
        String::from_utf8_lossy(&request.private_data[..4])
    );
    cm.create_qp(request.id, &QpInitAttr::new(QpType::Rc))?;
    cm.accept(request.id, Some(&ConnParam::with_private_data(b"pong")))?;
    expect(&cm, &events, EventKind::Established).await?;
    expect(&cm, &events, EventKind::Disconnected).await?;
    cm.disconnect(request.id)?;
    cm.destroy_qp(request.id)?;
    cm.destroy_id(request.id)?;
    cm.destroy_id(listener)?;
    drop(events);
    cm.destroy_event_channel(ch)?;
    println!("server: done");
    Ok(())
}

async fn client(cm: VerbsBackend, server: SocketAddr) -> Result<(), CmError> {
    let ch = cm.create_event_channel()?;
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
    let events = AsyncChannel::new(&cm, ch)?;
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    expect(&cm, &events, EventKind::AddrResolved).await?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    expect(&cm, &events, EventKind::RouteResolved).await?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::with_private_data(b"ping")))?;
    let established = expect(&cm, &events, EventKind::Established).await?;
    println!(
        "client: ESTABLISHED with {:?}",
        String::from_utf8_lossy(&established.private_data[..4])
    );
    cm.disconnect(id)?;
    expect(&cm, &events, EventKind::Disconnected).await?;
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    drop(events);
    cm.destroy_event_channel(ch)?;
    println!("client: done");
    Ok(())
}

fn main() {
    let Ok(ip) = std::env::var("CMTWIN_RDMA_ADDR") else {
        println!(
            "pingpong_tokio runs over librdmacm: set CMTWIN_RDMA_ADDR to an RDMA interface's \
             address (on the simulator, see the pingpong_async example)"
        );
        return;
    };
    let ip: IpAddr = ip.parse().expect("CMTWIN_RDMA_ADDR is an IP address");
    let addr = SocketAddr::new(ip, 7475);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    let cm = VerbsBackend::new();
    let outcome = rt.block_on(async {
        let served = rt_spawn(server(cm.clone(), addr));
        // Let the server listen first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        client(cm.clone(), addr).await?;
        served
            .await
            .map_err(|e| CmError::application(format!("server task: {e}")))?
    });
    if let Err(e) = outcome {
        eprintln!("failed: {e}");
        std::process::exit(1);
    }
    println!("librdmacm on {ip} with tokio: done");
}

/// Spawns `task` on the current runtime.
fn rt_spawn(
    task: impl std::future::Future<Output = Result<(), CmError>> + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), CmError>> {
    tokio::spawn(task)
}
