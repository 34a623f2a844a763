//! Multicast: joining and leaving groups on UD ids (CM-SEMANTICS §13.3).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::{Call, CmBackend, Errno, EventKind, EventParam, PortSpace, Transport, RDMA_UDP_QKEY};

use crate::steps::{expect_errno, expect_event_for, expect_no_event, ok};
use crate::TestBed;

/// A group address for the test (administratively scoped IPv4 multicast).
fn group(port: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(239, 7, 7, (port % 200) as u8 + 1)),
        0,
    )
}

/// §13.3: a UDP-space id bound to a device joins a group: MULTICAST_JOIN (status 0) carries
/// the join context, QPN 0xFFFFFF and the id's qkey; leaving works once, a second leave is
/// EADDRNOTAVAIL. iWARP has no multicast: ENOSYS.
pub fn join_then_leave<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    let addr = bed.server_addr();
    ok(cm.bind_addr(id, addr), "bind to the device's address");
    let group = group(addr.port());
    if bed.transport() == Transport::Iwarp {
        // Neither IB multicast nor RoCE: ENOSYS (§13.3).
        expect_errno(
            cm.join_multicast(id, group, 0xc0ffee),
            Call::JoinMulticast,
            Errno::ENOSYS,
        );
        ok(cm.destroy_id(id), "destroy");
        ok(cm.destroy_event_channel(channel), "destroy channel");
        return;
    }
    ok(cm.join_multicast(id, group, 0xc0ffee), "join");
    let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    match join.param {
        EventParam::Multicast { ud, context } => {
            assert_eq!(context, 0xc0ffee, "the join context comes back");
            assert_eq!(ud.qp_num, 0xFF_FFFF, "multicast QPN");
            assert_eq!(ud.qkey, RDMA_UDP_QKEY, "the id's qkey");
        }
        other => panic!("MULTICAST_JOIN without multicast data: {other:?}"),
    }
    assert!(
        join.private_data.is_empty(),
        "no private data on MULTICAST_JOIN"
    );
    ok(cm.leave_multicast(id, group), "leave");
    expect_errno(
        cm.leave_multicast(id, group),
        Call::LeaveMulticast,
        Errno::EADDRNOTAVAIL,
    );
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §13.3: joining needs a UD id bound to a device: a TCP-space id is EINVAL, a fresh (unbound)
/// id is EINVAL; leaving a group never joined is EADDRNOTAVAIL.
pub fn join_preconditions<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let tcp = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "TCP id");
    let addr = bed.server_addr();
    ok(cm.bind_addr(tcp, addr), "bind");
    let group = group(addr.port());
    expect_errno(
        cm.join_multicast(tcp, group, 1),
        Call::JoinMulticast,
        Errno::EINVAL,
    );
    let unbound = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    expect_errno(
        cm.join_multicast(unbound, group, 1),
        Call::JoinMulticast,
        Errno::EINVAL,
    );
    expect_errno(
        cm.leave_multicast(unbound, group),
        Call::LeaveMulticast,
        Errno::EADDRNOTAVAIL,
    );
    expect_no_event(cm, channel);
    for id in [tcp, unbound] {
        ok(cm.destroy_id(id), "destroy");
    }
    ok(cm.destroy_event_channel(channel), "destroy channel");
}
