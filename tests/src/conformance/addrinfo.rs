//! `rdma_resolve_addrinfo` and `rdma_query_addrinfo` in DNS mode (CM-SEMANTICS §10.3):
//! natively on librdmacm ≥ v60, emulated by the backend on older ones, simulated on the fabric.

use std::net::SocketAddr;

use cmtwin::{rai, AddrInfo, AddrInfoHints, Call, CmBackend, Errno, EventKind, PortSpace, QpType};

use crate::steps::{expect_errno, expect_event_for, expect_no_event, ok};
use crate::TestBed;

/// §10.3: resolving a numeric address and service gives ADDRINFO_RESOLVED (status 0); the
/// results name that destination; they can be taken once (then ENOENT); a second resolution
/// while results wait to be taken is EBUSY.
pub fn numeric_destination_resolves<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "id");
    let node = bed.server_ip().to_string();
    ok(
        cm.resolve_addrinfo(id, Some(&node), Some("7471"), None),
        "resolve_addrinfo",
    );
    expect_event_for(cm, channel, EventKind::AddrinfoResolved, id, 0);
    expect_errno(
        cm.resolve_addrinfo(id, Some(&node), Some("7471"), None),
        Call::ResolveAddrinfo,
        Errno::EBUSY,
    );
    let results = ok(cm.query_addrinfo(id), "query_addrinfo");
    let want = SocketAddr::new(bed.server_ip(), 7471);
    assert!(
        results.iter().any(|r| r.dst_addr == Some(want)),
        "the results name {want}: {results:?}"
    );
    expect_errno(cm.query_addrinfo(id), Call::QueryAddrinfo, Errno::ENOENT);
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §10.3: querying an id that never resolved anything is ENOENT.
pub fn query_without_resolution_is_enoent<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "id");
    expect_errno(cm.query_addrinfo(id), Call::QueryAddrinfo, Errno::ENOENT);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §10.3 (rdma-core 44's `rdma_resolve_addrinfo` without native support, emulated as
/// librdmacm does it): DNS mode runs `rdma_getaddrinfo` synchronously, so a name that does not
/// resolve fails at once (ENOENT) and queues no event: ADDRINFO_ERROR exists only for SA-mode
/// queries (Linux ≥ 6.18). The id is left free for another resolution.
pub fn unknown_name_fails_at_once_without_event<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "id");
    expect_errno(
        cm.resolve_addrinfo(id, Some("cmtwin-no-such-host.invalid"), Some("7471"), None),
        Call::ResolveAddrinfo,
        Errno::ENOENT,
    );
    expect_no_event(cm, channel);
    let node = bed.server_ip().to_string();
    ok(
        cm.resolve_addrinfo(id, Some(&node), Some("7471"), None),
        "a later resolution on the same id",
    );
    expect_event_for(cm, channel, EventKind::AddrinfoResolved, id, 0);
    ok(cm.query_addrinfo(id), "query_addrinfo");
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}

/// §10.3: `rdma_getaddrinfo` needs no id: a numeric destination and service give one active
/// result naming them, an RC QP over RDMA_PS_TCP and no flags; passive hints without a node
/// give the IPv4 wildcard as the source, active hints without a node the IPv6 loopback as the
/// destination (glibc's first answers); a name that does not resolve is ENOENT and nothing at
/// all EINVAL, both naming `rdma_getaddrinfo`.
pub fn getaddrinfo_needs_no_id<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let node = bed.server_ip().to_string();
    let results = ok(
        cm.getaddrinfo(Some(&node), Some("7471"), None),
        "getaddrinfo",
    );
    let want = SocketAddr::new(bed.server_ip(), 7471);
    let active = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(want));
    assert_eq!(results, [active]);
    let passive = AddrInfoHints::new(rai::PASSIVE);
    let results = ok(
        cm.getaddrinfo(None, Some("7471"), Some(&passive)),
        "passive getaddrinfo",
    );
    let any = SocketAddr::from(([0, 0, 0, 0], 7471));
    let wildcard = AddrInfo::new(rai::PASSIVE, PortSpace::TCP, QpType::Rc, Some(any), None);
    assert_eq!(results, [wildcard]);
    let results = ok(
        cm.getaddrinfo(None, Some("7471"), Some(&AddrInfoHints::new(0))),
        "active getaddrinfo without a node",
    );
    let loopback = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 7471));
    let to_loopback = AddrInfo::new(0, PortSpace::TCP, QpType::Rc, None, Some(loopback));
    assert_eq!(results, [to_loopback]);
    expect_errno(
        cm.getaddrinfo(Some("cmtwin-no-such-host.invalid"), Some("7471"), None),
        Call::GetAddrinfo,
        Errno::ENOENT,
    );
    expect_errno(
        cm.getaddrinfo(None, None, None),
        Call::GetAddrinfo,
        Errno::EINVAL,
    );
}

/// §5.1 (ADDRINFO_ERROR), §10.3: SA mode (RAI_SA) on an id bound to an InfiniBand device asks
/// the SA for service records; with none recorded the answer is ADDRINFO_ERROR -ENOENT, there
/// is nothing to query (ENOENT), and the id (back in ADDR_BOUND) can ask again.
pub fn sa_query_without_records_is_addrinfo_error<T: TestBed>(bed: &T) {
    let sa = cmtwin::AddrInfoHints::new(cmtwin::rai::SA);
    let service = Some("0x1000000000000001");
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "id");
    ok(
        cm.bind_addr(id, SocketAddr::new(bed.client_ip(), 0)),
        "bind",
    );
    ok(
        cm.resolve_addrinfo(id, None, service, Some(&sa)),
        "SA-mode resolve_addrinfo",
    );
    let err = expect_event_for(cm, channel, EventKind::AddrinfoError, id, -Errno::ENOENT.0);
    assert!(
        err.private_data.is_empty(),
        "ADDRINFO_ERROR carries no data"
    );
    expect_errno(cm.query_addrinfo(id), Call::QueryAddrinfo, Errno::ENOENT);
    ok(
        cm.resolve_addrinfo(id, None, service, Some(&sa)),
        "SA mode again after the error",
    );
    expect_event_for(cm, channel, EventKind::AddrinfoError, id, -Errno::ENOENT.0);
    expect_no_event(cm, channel);
    ok(cm.destroy_id(id), "destroy");
    ok(cm.destroy_event_channel(channel), "destroy channel");
}
