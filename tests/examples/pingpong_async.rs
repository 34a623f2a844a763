//! The quickstart in async form: a server and a client exchange private data ("ping",
//! "pong") and disconnect, written with `async`/`await` (it does not wait for TIMEWAIT_EXIT,
//! which iWARP never delivers). The client runs
//! three connections as three tasks of one executor (one simulated process, one OS thread on
//! the real backend); the server serves them from one task per connection, spawned as their
//! requests come.
//!
//! `cargo run --example pingpong_async [seed]` runs it on the simulator (deterministic in
//! virtual time: the seed fixes the whole run); `CMTWIN_RDMA_ADDR=<ip> cargo run --example
//! pingpong_async` on the real librdmacm.

mod support;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use cmtwin::task::{CmAsync, Executor, Spawner};
use cmtwin::{
    ChannelHandle, CmBackend, CmError, ConnParam, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType,
};

/// Connections the client opens.
const CONNECTIONS: usize = 3;

#[derive(Clone)]
struct PingPongAsync;

/// One client connection: its own channel, "ping" out, "pong" back, then the close.
async fn connect<B: CmBackend>(cm: &B, server: SocketAddr, n: usize) -> Result<(), CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), n as u64, PortSpace::TCP)?;
    cm.resolve_addr(id, None, server, Duration::from_secs(2))?;
    cm.expect(channel, EventKind::AddrResolved).await?;
    cm.resolve_route(id, Duration::from_secs(2))?;
    cm.expect(channel, EventKind::RouteResolved).await?;
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.connect(id, Some(&ConnParam::with_private_data(b"ping")))?;
    let established = cm.expect(channel, EventKind::Established).await?;
    let pong = String::from_utf8_lossy(&established.private_data[..4]).into_owned();
    println!("client {n}: ESTABLISHED with {pong:?} at {:?}", cm.now());
    cm.disconnect(id)?;
    cm.expect(channel, EventKind::Disconnected).await?;
    println!("client {n}: DISCONNECTED at {:?}", cm.now());
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)
}

/// One server connection, on the channel it was moved to: accept with "pong", then its
/// ESTABLISHED and the client's disconnect.
async fn serve<B: CmBackend>(
    cm: &B,
    id: IdHandle,
    channel: ChannelHandle,
    n: u64,
) -> Result<(), CmError> {
    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    cm.accept(id, Some(&ConnParam::with_private_data(b"pong")))?;
    cm.expect(channel, EventKind::Established).await?;
    cm.expect(channel, EventKind::Disconnected).await?;
    cm.disconnect(id)?;
    println!("server connection {n}: closed at {:?}", cm.now());
    cm.destroy_qp(id)?;
    cm.destroy_id(id)?;
    cm.destroy_event_channel(channel)
}

/// The listening task: each request's id moves to a channel of its own (`rdma_migrate_id`)
/// and a task of its own serves it.
async fn listen<'s, B: CmBackend + Clone + 's>(
    cm: B,
    channel: ChannelHandle,
    spawner: Spawner<'s>,
    failed: Rc<RefCell<Option<CmError>>>,
) -> Result<(), CmError> {
    for n in 1..=CONNECTIONS as u64 {
        let request = cm.expect(channel, EventKind::ConnectRequest).await?;
        let ping = String::from_utf8_lossy(&request.private_data[..4]).into_owned();
        println!("server: CONNECT_REQUEST {n} with {ping:?}");
        let own = cm.create_event_channel()?;
        cm.migrate_id(request.id, Some(own))?;
        let (cm, failed) = (cm.clone(), Rc::clone(&failed));
        spawner.spawn(async move {
            if let Err(e) = serve(&cm, request.id, own, n).await {
                *failed.borrow_mut() = Some(e);
            }
        });
    }
    Ok(())
}

impl support::Program for PingPongAsync {
    fn server<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        addr: SocketAddr,
    ) -> Result<(), CmError> {
        let channel = cm.create_event_channel()?;
        let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.bind_addr(listener, addr)?;
        cm.listen(listener, 8)?;
        let failed: Rc<RefCell<Option<CmError>>> = Rc::new(RefCell::new(None));
        let mut executor = Executor::new(cm);
        let (spawner, listen_failed) = (executor.spawner(), Rc::clone(&failed));
        let cm2 = cm.clone();
        executor.spawn(async move {
            if let Err(e) = listen(cm2, channel, spawner, Rc::clone(&listen_failed)).await {
                *listen_failed.borrow_mut() = Some(e);
            }
        });
        executor.run()?;
        if let Some(e) = failed.borrow_mut().take() {
            return Err(e);
        }
        cm.destroy_id(listener)?;
        cm.destroy_event_channel(channel)?;
        println!("server: {CONNECTIONS} connections served by tasks of one executor");
        Ok(())
    }

    fn client<B: CmBackend + Clone + 'static>(
        &self,
        cm: &B,
        server: SocketAddr,
    ) -> Result<(), CmError> {
        // The connections advance together: one task each, in one executor.
        let results: Rc<RefCell<Vec<Result<(), CmError>>>> = Rc::default();
        let mut executor = Executor::new(cm);
        for n in 1..=CONNECTIONS {
            let results = Rc::clone(&results);
            executor.spawn(async move {
                let r = connect(cm, server, n).await;
                results.borrow_mut().push(r);
            });
        }
        executor.run()?;
        let results = results.take();
        if results.len() != CONNECTIONS {
            return Err(CmError::application("a connection task did not finish"));
        }
        results.into_iter().collect()
    }
}

fn main() {
    support::run(PingPongAsync, 7474);
}
