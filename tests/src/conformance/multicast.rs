//! Multicast: joining and leaving groups on UD ids (CM-SEMANTICS §13.3).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::{
    Call, ChannelHandle, CmBackend, Errno, EventKind, EventParam, IdHandle, JoinFlags, PortSpace,
    Transport, RDMA_UDP_QKEY,
};

use crate::steps::{expect_errno, expect_event_for, expect_no_event, ok, RESOLVE_TIMEOUT};
use crate::TestBed;

/// A group address for the test (administratively scoped IPv4 multicast).
fn group(port: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(239, 7, 7, (port % 200) as u8 + 1)),
        0,
    )
}

/// A UD id of the server on a channel of its own, bound to the server's address with a fresh
/// port, and the group that port picks: (channel, id, group).
fn bound_ud_id<T: TestBed>(bed: &T) -> (ChannelHandle, IdHandle, SocketAddr) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    let addr = bed.server_addr();
    ok(cm.bind_addr(id, addr), "bind to the device's address");
    (channel, id, group(addr.port()))
}

/// §13.3: a UDP-space id bound to a device joins a group: MULTICAST_JOIN (status 0) carries
/// the join context, QPN 0xFFFFFF and the id's qkey; leaving works once, a second leave is
/// EADDRNOTAVAIL. iWARP has no multicast: ENOSYS.
pub fn join_then_leave<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let (channel, id, group) = bound_ud_id(bed);
    if bed.transport() == Transport::Iwarp {
        // Neither IB multicast nor RoCE: ENOSYS (§13.3).
        expect_errno(
            cm.join_multicast(id, group, 0xc0ffee),
            Call::JoinMulticast,
            Errno::ENOSYS,
        );
    } else {
        join_and_leave_once(cm, channel, id, group);
    }
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// IB and RoCE: one join (MULTICAST_JOIN with the context, QPN 0xFFFFFF and the id's qkey),
/// one leave, a second leave EADDRNOTAVAIL, nothing else.
fn join_and_leave_once<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    group: SocketAddr,
) {
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

/// The join context a MULTICAST_JOIN carries.
fn join_context(info: &cmtwin::EventInfo) -> u64 {
    match info.param {
        EventParam::Multicast { context, .. } => context,
        ref other => panic!("MULTICAST_JOIN without multicast data: {other:?}"),
    }
}

/// §4.4, §13.3 (mckey's default flow; measured on Linux 6.1 with rxe, issue 7 item 3):
/// `resolve_addr` from a bound source to a multicast group resolves: the group goes out of the
/// source's interface with no route needed, and its link-layer address is mapped, not asked
/// for (addr.c), so ADDR_RESOLVED (status 0) follows at once; the resolved id can then join
/// the group (iWARP: ENOSYS, it has no multicast). (Without a source the group needs a route:
/// `tests/sim_only.rs` checks that case.)
pub fn resolve_addr_to_a_group_then_join<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let (channel, id, group) = bound_ud_id(bed);
    ok(
        cm.resolve_addr(id, None, group, RESOLVE_TIMEOUT),
        "resolve_addr to the group from the bound source",
    );
    expect_event_for(cm, channel, EventKind::AddrResolved, id, 0);
    if bed.transport() == Transport::Iwarp {
        expect_errno(
            cm.join_multicast(id, group, 7),
            Call::JoinMulticast,
            Errno::ENOSYS,
        );
    } else {
        ok(cm.join_multicast(id, group, 7), "join the resolved group");
        let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
        assert_eq!(join_context(&join), 7, "the join context comes back");
        ok(cm.leave_multicast(id, group), "leave");
    }
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §13.3 (librdmacm's `rdma_join_multicast2` / `rdma_leave_multicast`; measured on Linux 6.1
/// with rxe, issue 7 item 4): every join of a group is a membership of its own, even twice on
/// one id; a leave ends the most recent one (librdmacm prepends joins to its list and leaves
/// the first match), so leaving before fetching drops the second join's MULTICAST_JOIN and
/// the first join's still comes, with its context. Two joins take two leaves, both 0; a third
/// is EADDRNOTAVAIL.
pub fn each_join_is_a_membership<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let (channel, id, group) = bound_ud_id(bed);
    if bed.transport() == Transport::Iwarp {
        // No multicast (ENOSYS), and a failed join leaves no membership behind.
        expect_errno(
            cm.join_multicast(id, group, 1),
            Call::JoinMulticast,
            Errno::ENOSYS,
        );
        expect_errno(
            cm.leave_multicast(id, group),
            Call::LeaveMulticast,
            Errno::EADDRNOTAVAIL,
        );
    } else {
        two_joins_are_two_memberships(cm, channel, id, group);
    }
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// IB and RoCE: two joins of one group on one id are two memberships, left newest first.
fn two_joins_are_two_memberships<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    id: IdHandle,
    group: SocketAddr,
) {
    ok(cm.join_multicast(id, group, 1), "first join");
    ok(
        cm.join_multicast(id, group, 2),
        "second join of the same group",
    );
    ok(cm.leave_multicast(id, group), "leave the second membership");
    let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    assert_eq!(
        join_context(&join),
        1,
        "the first membership's MULTICAST_JOIN remains"
    );
    ok(cm.join_multicast(id, group, 3), "join once more");
    let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    assert_eq!(
        join_context(&join),
        3,
        "the new membership's MULTICAST_JOIN"
    );
    ok(cm.leave_multicast(id, group), "leave the newest membership");
    ok(cm.leave_multicast(id, group), "leave the first membership");
    expect_errno(
        cm.leave_multicast(id, group),
        Call::LeaveMulticast,
        Errno::EADDRNOTAVAIL,
    );
    expect_no_event(cm, channel);
}

/// §13.3 (`rdma_join_multicast_ex`): a send-only full member join takes the same checks and
/// gives the same MULTICAST_JOIN (context, QPN 0xFFFFFF, qkey) as a full join; leave works
/// the same. Preconditions name `rdma_join_multicast_ex`.
pub fn send_only_join_then_leave<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UD id");
    let addr = bed.server_addr();
    let group = group(addr.port());
    expect_errno(
        cm.join_multicast_ex(id, group, JoinFlags::SendOnlyFullMember, 1),
        Call::JoinMulticastEx,
        Errno::EINVAL,
    );
    ok(cm.bind_addr(id, addr), "bind to the device's address");
    if bed.transport() == Transport::Iwarp {
        expect_errno(
            cm.join_multicast_ex(id, group, JoinFlags::SendOnlyFullMember, 1),
            Call::JoinMulticastEx,
            Errno::ENOSYS,
        );
    } else {
        ok(
            cm.join_multicast_ex(id, group, JoinFlags::SendOnlyFullMember, 0x5e4d),
            "send-only join",
        );
        let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
        match join.param {
            EventParam::Multicast { ud, context } => {
                assert_eq!(context, 0x5e4d, "the join context comes back");
                assert_eq!(ud.qp_num, 0xFF_FFFF, "multicast QPN");
                assert_eq!(ud.qkey, RDMA_UDP_QKEY, "the id's qkey");
            }
            other => panic!("MULTICAST_JOIN without multicast data: {other:?}"),
        }
        assert_eq!(join.private_data_opt(), None, "no private data");
        ok(cm.leave_multicast(id, group), "leave");
    }
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §5.1 (MULTICAST_ERROR), §13.3: a group lost after the join (port error, SM change...)
/// gives its member MULTICAST_ERROR -ENETRESET carrying the join's context; the membership
/// can still be left once.
pub fn lost_group_is_multicast_error<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let (channel, id, group) = bound_ud_id(bed);
    ok(cm.join_multicast(id, group, 0xfeed), "join");
    let join = expect_event_for(cm, channel, EventKind::MulticastJoin, id, 0);
    assert_eq!(join_context(&join), 0xfeed, "the join context comes back");
    bed.lose_multicast_group(group.ip())
        .unwrap_or_else(|e| panic!("lose the group: {e}"));
    let lost = expect_event_for(
        cm,
        channel,
        EventKind::MulticastError,
        id,
        -Errno::ENETRESET.0,
    );
    assert_eq!(
        join_context(&lost),
        0xfeed,
        "MULTICAST_ERROR carries the context"
    );
    ok(cm.leave_multicast(id, group), "leave after the loss");
    expect_errno(
        cm.leave_multicast(id, group),
        Call::LeaveMulticast,
        Errno::EADDRNOTAVAIL,
    );
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}
