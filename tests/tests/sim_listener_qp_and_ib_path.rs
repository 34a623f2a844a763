//! Two refusals the kernel makes and the simulator once let through, found by an outside
//! user's ports: a connected QP on a listener bound to a device (librdmacm's `rdma_create_qp`
//! moves the QP to INIT with `rdma_init_qp_attr`, which the listener's IB or iWARP CM id,
//! in LISTEN, refuses: cm.c `cm_init_qp_init_attr`, iwcm.c `iwcm_init_qp_init_attr`), and
//! `RDMA_OPTION_IB_PATH` records none of which is flagged GMP | PRIMARY | BIDIRECTIONAL
//! (ucma.c `ucma_set_ib_path`; CM-SEMANTICS.md §4.5). And `rdma_notify` on a listener bound to
//! a device, which the kernel hands to the listener's own CM id: on iWARP cma.c `rdma_notify`
//! returns 0 for any event, where the simulator said EINVAL (found by an outside user's
//! notify calls; unmeasured on siw); on IB and RoCE the IB CM refuses it in LISTEN (EINVAL).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::verbs::{DataPath, QpState};
use cmtwin::{
    AsyncEvent, Call, CmBackend, CmOption, Errno, EventKind, PortSpace, QpInitAttr, QpType,
    Transport, Wait, IB_PATH_PRIMARY_FLAGS, IB_PATH_RECORD_LEN,
};
use cmtwin_sim::{Fabric, SimBackend};

const SERVER: &str = "10.0.0.1";
const CLIENT: &str = "10.0.0.2";

fn fabric(transport: Transport) -> Fabric {
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    Fabric::builder(0x0007_3001)
        .host("server", transport, &[ip(SERVER)])
        .host("client", transport, &[ip(CLIENT)])
        .build()
        .unwrap()
}

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

fn assert_einval<T: std::fmt::Debug>(result: cmtwin::Result<T>, call: Call, detail: &str) {
    let err = result.expect_err("the kernel refuses this call");
    assert_eq!((err.call, err.errno), (call, Errno::EINVAL), "{err}");
    assert!(err.detail.contains(detail), "{err}");
}

/// A listener bound to its device's address: an RC QP on it is EINVAL (the QP librdmacm made
/// is destroyed again), as is `rdma_init_qp_attr`; the id stays a listener without a QP, and
/// a QP made before `listen` is allowed.
fn listener_refuses_a_connected_qp(transport: Transport) {
    let fabric = fabric(transport);
    let server = fabric.backend("server");
    let channel = server.create_event_channel().unwrap();
    let listener = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
    server.bind_addr(listener, addr(SERVER, 7471)).unwrap();
    server.listen(listener, 8).unwrap();
    let refused = "a listener's CM id gives no QP attributes";
    assert_einval(
        server.create_qp(listener, &QpInitAttr::new(QpType::Rc)),
        Call::CreateQp,
        refused,
    );
    assert_eq!(server.qp_num(listener).unwrap(), None);
    let init = server.init_qp_attr(listener, QpState::Init);
    assert_eq!(
        init.map_err(|e| (e.call, e.errno)).unwrap_err(),
        (Call::InitQpAttr, Errno::EINVAL)
    );
    server.destroy_id(listener).unwrap();

    // Bound, not yet listening: the id has no CM id, and the QP is made.
    let early = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
    server.bind_addr(early, addr(SERVER, 7472)).unwrap();
    let qpn = server
        .create_qp(early, &QpInitAttr::new(QpType::Rc))
        .unwrap();
    server.listen(early, 8).unwrap();
    assert_eq!(server.qp_num(early).unwrap(), Some(qpn));
    server.destroy_id(early).unwrap();
    server.destroy_event_channel(channel).unwrap();
}

#[test]
fn a_roce_listener_refuses_a_connected_qp() {
    listener_refuses_a_connected_qp(Transport::Roce);
}

#[test]
fn an_infiniband_listener_refuses_a_connected_qp() {
    listener_refuses_a_connected_qp(Transport::InfiniBand);
}

#[test]
fn an_iwarp_listener_refuses_a_connected_qp() {
    listener_refuses_a_connected_qp(Transport::Iwarp);
}

/// A UD listener's QP takes its attributes from the id, not from a CM id: allowed.
#[test]
fn a_ud_listener_takes_a_ud_qp() {
    let fabric = fabric(Transport::Roce);
    let server = fabric.backend("server");
    let channel = server.create_event_channel().unwrap();
    let listener = server.create_id(Some(channel), 0, PortSpace::UDP).unwrap();
    server.bind_addr(listener, addr(SERVER, 7471)).unwrap();
    server.listen(listener, 8).unwrap();
    let qpn = server
        .create_qp(listener, &QpInitAttr::new(QpType::Ud))
        .unwrap();
    assert_eq!(server.qp_num(listener).unwrap(), Some(qpn));
    server.destroy_id(listener).unwrap();
    server.destroy_event_channel(channel).unwrap();
}

/// One 72-byte `struct ib_path_rec_data` with these flags and a zero path record.
fn path_record(flags: u32) -> Vec<u8> {
    let mut record = vec![0; IB_PATH_RECORD_LEN];
    record[..4].copy_from_slice(&flags.to_ne_bytes());
    record
}

/// An id whose ADDR_RESOLVED is fetched, on its own channel.
fn resolved(client: &SimBackend) -> (cmtwin::ChannelHandle, cmtwin::IdHandle) {
    let channel = client.create_event_channel().unwrap();
    let id = client.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
    client
        .resolve_addr(id, None, addr(SERVER, 7471), Duration::from_secs(2))
        .unwrap();
    let event = client
        .get_cm_event(channel, Wait::Timeout(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(event.kind(), EventKind::AddrResolved);
    client.ack_cm_event(event).unwrap();
    (channel, id)
}

#[test]
fn an_ib_path_without_a_primary_record_is_einval_and_changes_nothing() {
    let fabric = fabric(Transport::InfiniBand);
    let client = fabric.backend("client");
    let (channel, id) = resolved(&client);
    let no_primary = "no record flagged GMP | PRIMARY | BIDIRECTIONAL";
    for records in [
        path_record(0),
        path_record(IB_PATH_PRIMARY_FLAGS | 0x4), // also ALTERNATE: not the exact flags
        path_record(0x1 | 0x2 | 0x8),             // OUTBOUND only
        [path_record(0x1), path_record(0x2)].concat(),
    ] {
        assert_einval(
            client.set_option(id, &CmOption::IbPath(records)),
            Call::SetOption,
            no_primary,
        );
    }
    // Nothing was queued and the id is still ADDR_RESOLVED: the route resolves as usual.
    let quiet = client
        .get_cm_event(channel, Wait::NonBlocking)
        .map(|e| e.kind());
    assert_eq!(quiet.unwrap_err().errno, Errno::EAGAIN);
    client.resolve_route(id, Duration::from_secs(2)).unwrap();
    let event = client
        .get_cm_event(channel, Wait::Timeout(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        (event.kind(), event.status()),
        (EventKind::RouteResolved, 0)
    );
    client.ack_cm_event(event).unwrap();
    client.destroy_id(id).unwrap();
    client.destroy_event_channel(channel).unwrap();
}

#[test]
fn an_ib_path_with_a_primary_record_anywhere_resolves_the_route_at_once() {
    let fabric = fabric(Transport::InfiniBand);
    let client = fabric.backend("client");
    let (channel, id) = resolved(&client);
    let before = fabric.now();
    let records = [path_record(0x1 | 0x4), path_record(IB_PATH_PRIMARY_FLAGS)].concat();
    client.set_option(id, &CmOption::IbPath(records)).unwrap();
    let event = client.get_cm_event(channel, Wait::NonBlocking).unwrap();
    assert_eq!(
        (event.kind(), event.status()),
        (EventKind::RouteResolved, 0)
    );
    assert_eq!(fabric.now(), before, "queued before the call returned");
    client.ack_cm_event(event).unwrap();
    client.destroy_id(id).unwrap();
    client.destroy_event_channel(channel).unwrap();
}

/// `rdma_notify` on listeners: one bound to the device's address has a CM id (iWARP: 0 for
/// COMM_EST, PATH_MIG or any other event; IB and RoCE: EINVAL naming the listener); a wildcard
/// listener has no device (EINVAL, as for any id without one, §9.2).
#[test]
fn notify_on_a_listener_is_zero_on_iwarp_and_einval_on_ib_and_roce() {
    for transport in [Transport::Iwarp, Transport::Roce, Transport::InfiniBand] {
        let fabric = fabric(transport);
        let server = fabric.backend("server");
        let channel = server.create_event_channel().unwrap();
        let bound = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
        server.bind_addr(bound, addr(SERVER, 7471)).unwrap();
        server.listen(bound, 8).unwrap();
        let wildcard = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
        server.bind_addr(wildcard, addr("0.0.0.0", 7472)).unwrap();
        server.listen(wildcard, 8).unwrap();
        for event in [AsyncEvent::COMM_EST, AsyncEvent::PATH_MIG, AsyncEvent(99)] {
            let on_bound = server.notify(bound, event);
            if transport == Transport::Iwarp {
                assert_eq!(on_bound, Ok(()), "{event:?}");
            } else {
                assert_einval(on_bound, Call::Notify, "on a listener (IB CM state Listen)");
            }
            assert_einval(server.notify(wildcard, event), Call::Notify, "no device");
        }
        server.destroy_id(bound).unwrap();
        server.destroy_id(wildcard).unwrap();
        server.destroy_event_channel(channel).unwrap();
    }
}
