//! A passive side may accept a connection whose initiator's device went away after its REQ:
//! the QP is moved to RTR and RTS towards an address the fabric still knows (only nobody
//! answers there), as librdmacm's accept does on hardware; the unanswered REP then ends the
//! connection attempt like any REP that no RTU answers.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{CmBackend, EventKind, PortSpace, QpInitAttr, QpType, Transport, Wait};
use cmtwin_sim::Fabric;

#[test]
fn accept_succeeds_after_the_initiators_device_is_removed() {
    let fabric = Fabric::builder(1)
        .host("server", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .host("client", Transport::Roce, &["10.0.0.2".parse().unwrap()])
        .build()
        .unwrap();
    let (server, client) = (fabric.backend("server"), fabric.backend("client"));
    let addr: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let step = Wait::Timeout(Duration::from_secs(1));
    let sch = server.create_event_channel().unwrap();
    let listener = server.create_id(Some(sch), 0, PortSpace::TCP).unwrap();
    server.bind_addr(listener, addr).unwrap();
    server.listen(listener, 1).unwrap();
    let cch = client.create_event_channel().unwrap();
    let id = client.create_id(Some(cch), 0, PortSpace::TCP).unwrap();
    client
        .resolve_addr(id, None, addr, Duration::from_secs(2))
        .unwrap();
    let next = |cm: &cmtwin_sim::SimBackend, ch| {
        let e = cm.get_cm_event(ch, step).unwrap();
        let got = (e.kind(), e.status(), e.id());
        cm.ack_cm_event(e).unwrap();
        got
    };
    assert_eq!(next(&client, cch).0, EventKind::AddrResolved);
    client.resolve_route(id, Duration::from_secs(2)).unwrap();
    assert_eq!(next(&client, cch).0, EventKind::RouteResolved);
    client.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
    client.connect(id, None).unwrap();
    let (kind, _, child) = next(&server, sch);
    assert_eq!(kind, EventKind::ConnectRequest);
    fabric.remove_device("client").unwrap();
    server
        .create_qp(child, &QpInitAttr::new(QpType::Rc))
        .unwrap();
    let accepted = fabric.now();
    assert_eq!(server.accept(child, None), Ok(()));
    let (kind, status, at) = {
        let e = server.get_cm_event(sch, Wait::Block).unwrap();
        let got = (e.kind(), e.status(), fabric.now() - accepted);
        server.ack_cm_event(e).unwrap();
        got
    };
    // No RTU ever answers the REP: after its retransmissions the passive side gets
    // UNREACHABLE -ETIMEDOUT (cma.c maps IB_CM_REP_ERROR so), as when the initiator is silent.
    assert_eq!(
        (kind, status, at),
        (
            EventKind::Unreachable,
            -110,
            Duration::from_nanos(69_599_980_740)
        )
    );
}
