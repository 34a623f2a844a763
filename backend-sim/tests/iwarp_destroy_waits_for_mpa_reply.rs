//! siw's `rdma_destroy_id` of an initiator whose MPA request is unanswered blocks: iw_cm's
//! `destroy_cm_id` waits for the MPA reply, or for siw's MPA timeout (10 s after the request,
//! on the kernel's timer wheel), before the id goes (measured on siw, Linux 6.1 and 6.12:
//! 10.08 to 10.16 s). The timeout also closes the TCP connection, so the passive side can no
//! longer accept the request (ECONNRESET). The rdma_cm hands out no event of an id being
//! destroyed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{
    ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr, QpType,
    Transport, Wait,
};
use cmtwin_sim::{Fabric, SimBackend};

const SERVER: &str = "10.0.0.1:7000";

fn iwarp_fabric() -> Fabric {
    Fabric::builder(1)
        .host("server", Transport::Iwarp, &["10.0.0.1".parse().unwrap()])
        .host("client", Transport::Iwarp, &["10.0.0.2".parse().unwrap()])
        .build()
        .unwrap()
}

fn next(cm: &SimBackend, ch: ChannelHandle) -> (EventKind, i32, IdHandle) {
    let e = cm.get_cm_event(ch, Wait::Block).unwrap();
    let got = (e.kind(), e.status(), e.id());
    cm.ack_cm_event(e).unwrap();
    got
}

/// A listener on `server`; returns its channel and id.
fn listen(server: &SimBackend) -> Result<(ChannelHandle, IdHandle), CmError> {
    let ch = server.create_event_channel()?;
    let listener = server.create_id(Some(ch), 0, PortSpace::TCP)?;
    server.bind_addr(listener, SERVER.parse().unwrap())?;
    server.listen(listener, 1)?;
    Ok((ch, listener))
}

/// An id of `client` connecting to the listener; returns its channel and id.
fn connect(client: &SimBackend) -> Result<(ChannelHandle, IdHandle), CmError> {
    let addr: SocketAddr = SERVER.parse().unwrap();
    let ch = client.create_event_channel()?;
    let id = client.create_id(Some(ch), 0, PortSpace::TCP)?;
    client.resolve_addr(id, None, addr, Duration::from_secs(2))?;
    assert_eq!(next(client, ch).0, EventKind::AddrResolved);
    client.resolve_route(id, Duration::from_secs(2))?;
    assert_eq!(next(client, ch).0, EventKind::RouteResolved);
    client.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
    client.connect(id, None)?;
    Ok((ch, id))
}

#[test]
fn destroy_blocks_until_the_mpa_timeout_and_the_request_cannot_be_accepted() {
    let fabric = iwarp_fabric();
    let (server, client) = (fabric.backend("server"), fabric.backend("client"));
    let (sch, listener) = listen(&server).unwrap();
    let (cch, id) = connect(&client).unwrap();
    let connected = fabric.now();
    let (kind, _, child) = next(&server, sch);
    assert_eq!(kind, EventKind::ConnectRequest);
    server
        .create_qp(child, &QpInitAttr::new(QpType::Rc))
        .unwrap();
    client.destroy_id(id).unwrap();
    // 10 s on the 250 Hz kernel's timer wheel: 2 500 ticks after the request, filed in the
    // level whose granule is 64 ticks, fire at the next granule boundary (the wheel counts
    // from INITIAL_JIFFIES, 8 ticks past a boundary at boot): 2 552 ticks after boot.
    assert_eq!(fabric.now(), Duration::from_nanos(10_208_000_000));
    assert_eq!(
        connected,
        Duration::from_micros(20),
        "resolution, then the handshake"
    );
    assert_eq!(
        client
            .get_cm_event(cch, Wait::NonBlocking)
            .unwrap_err()
            .errno,
        Errno::EAGAIN,
        "the UNREACHABLE of the timeout is not handed out: the id is being destroyed"
    );
    fabric.run_for(Duration::from_millis(1)).unwrap();
    let accepted = server.accept(child, None).unwrap_err();
    assert_eq!(accepted.errno, Errno::ECONNRESET, "{accepted}");
    assert_eq!(
        server
            .get_cm_event(sch, Wait::NonBlocking)
            .unwrap_err()
            .errno,
        Errno::EAGAIN,
        "the unaccepted child hears nothing"
    );
    server.destroy_id(child).unwrap();
    server.destroy_id(listener).unwrap();
}

#[test]
fn destroy_returns_when_the_mpa_reply_arrives() {
    let fabric = iwarp_fabric();
    let destroyed_at = Arc::new(Mutex::new(None));
    let server_saw = Arc::new(Mutex::new(Vec::new()));
    let (d, saw) = (destroyed_at.clone(), server_saw.clone());
    fabric.spawn("server", "server", move |cm| {
        let (ch, listener) = listen(&cm)?;
        let (kind, _, child) = next(&cm, ch);
        assert_eq!(kind, EventKind::ConnectRequest);
        cm.create_qp(child, &QpInitAttr::new(QpType::Rc))?;
        cm.sleep(Duration::from_secs(1))?;
        cm.accept(child, None)?;
        for _ in 0..2 {
            let (kind, status, _) = next(&cm, ch);
            saw.lock().unwrap().push((kind, status, cm.now()));
        }
        cm.destroy_id(child)?;
        cm.destroy_id(listener)
    });
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(1))?; // the server listens first
        let (_, id) = connect(&cm)?;
        cm.destroy_id(id)?;
        *d.lock().unwrap() = Some(cm.now());
        Ok(())
    });
    fabric.run().expect("both processes end");
    // The request reached the server at 1.029260 ms (sent at 1.020 ms, after the 10 µs of
    // address resolution and the 10 µs TCP handshake), the server accepted 1 s later
    // (ESTABLISHED at once on iWARP), and its MPA reply reached the client 7.794 µs after
    // that: the destroy returns then, not 10 s after the request; its close reaches the
    // server 9.822 µs later.
    let reply_arrived = Duration::from_nanos(1_001_037_054);
    assert_eq!(*destroyed_at.lock().unwrap(), Some(reply_arrived));
    assert_eq!(
        *server_saw.lock().unwrap(),
        [
            (
                EventKind::Established,
                0,
                Duration::from_nanos(1_001_029_260)
            ),
            (
                EventKind::Disconnected,
                0,
                Duration::from_nanos(1_001_046_876)
            ),
        ],
        "the destroy of the now established initiator closes the connection"
    );
}
