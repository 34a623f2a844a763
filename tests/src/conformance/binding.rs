//! Binding addresses and ports (CM-SEMANTICS §4.3, §3.4, §19).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::{Call, CmBackend, Errno, PortSpace};

use crate::steps::{expect_errno, expect_unconfigured_address, ok, teardown};
use crate::TestBed;

/// An address from TEST-NET-1 (RFC 5737), configured on no interface of any bed.
const UNCONFIGURED: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

/// §4.3: binding port 0 picks an ephemeral port on the given address.
pub fn bind_port_zero_picks_an_ephemeral_port<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(
        cm.bind_addr(id, SocketAddr::new(bed.server_ip(), 0)),
        "bind port 0",
    );
    let local = ok(cm.local_addr(id), "local_addr").expect("bound");
    assert_eq!(local.ip(), bed.server_ip(), "bound address");
    assert_ne!(local.port(), 0, "an ephemeral port was chosen");
    teardown(cm, &[id], channel);
}

/// §4.3: a second id binding the same specific address and port (no REUSEADDR) gets
/// EADDRINUSE; a failed bind leaves the id IDLE (§3.4), so it can bind another port.
pub fn bind_same_address_and_port_is_eaddrinuse<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let a = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id a",
    );
    let b = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id b",
    );
    let addr = bed.server_addr();
    ok(cm.bind_addr(a, addr), "first bind");
    expect_errno(cm.bind_addr(b, addr), Call::BindAddr, Errno::EADDRINUSE);
    assert_eq!(
        ok(cm.local_addr(b), "local_addr"),
        None,
        "a failed bind leaves no address"
    );
    let other = bed.server_addr();
    ok(cm.bind_addr(b, other), "bind after a failed bind");
    assert_eq!(ok(cm.local_addr(b), "local_addr"), Some(other));
    teardown(cm, &[a, b], channel);
}

/// §4.3: a wildcard bind of a port already bound to a specific address (and the reverse) is
/// EADDRNOTAVAIL.
pub fn bind_wildcard_over_specific_is_eaddrnotavail<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let a = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id a",
    );
    let b = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id b",
    );
    let addr = bed.server_addr();
    let wildcard = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port());
    ok(cm.bind_addr(a, addr), "specific bind");
    expect_errno(
        cm.bind_addr(b, wildcard),
        Call::BindAddr,
        Errno::EADDRNOTAVAIL,
    );
    teardown(cm, &[a, b], channel);

    let channel = ok(cm.create_event_channel(), "channel");
    let a = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id a",
    );
    let b = ok(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        "create_id b",
    );
    let port = bed.fresh_port();
    ok(
        cm.bind_addr(a, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)),
        "wildcard bind",
    );
    expect_errno(
        cm.bind_addr(b, SocketAddr::new(bed.server_ip(), port)),
        Call::BindAddr,
        Errno::EADDRNOTAVAIL,
    );
    teardown(cm, &[a, b], channel);
}

/// §4.3: ports are per port space: TCP and UDP ids may bind the same address and port. Both
/// listen on IB and RoCE; on iWARP every listener holds a TCP port, whatever its port space,
/// so the UDP id's listen is EADDRINUSE (measured on siw).
pub fn port_spaces_are_independent<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let tcp = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "TCP id");
    let udp = ok(cm.create_id(Some(channel), 0, PortSpace::UDP), "UDP id");
    let addr = bed.server_addr();
    ok(cm.bind_addr(tcp, addr), "TCP bind");
    ok(
        cm.bind_addr(udp, addr),
        "UDP bind of the same address and port",
    );
    ok(cm.listen(tcp, 1), "TCP listen");
    if bed.transport() == cmtwin::Transport::Iwarp {
        expect_errno(
            cm.listen(udp, 1),
            cmtwin::Call::Listen,
            cmtwin::Errno::EADDRINUSE,
        );
    } else {
        ok(cm.listen(udp, 1), "UDP listen");
    }
    teardown(cm, &[tcp, udp], channel);
}

/// §4.15: destroying an id releases its port: a new id can bind it.
pub fn destroy_releases_the_port<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let addr = bed.server_addr();
    let a = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(cm.bind_addr(a, addr), "bind");
    ok(cm.listen(a, 1), "listen");
    ok(cm.destroy_id(a), "destroy");
    let b = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    ok(cm.bind_addr(b, addr), "bind the released port");
    teardown(cm, &[b], channel);
}

/// §4.3: binding an IPv4 address configured on no interface is EADDRNOTAVAIL (measured on
/// rxe and siw, Linux 6.1 and 6.12; §19's ENODEV is what the address of a removed device
/// gets, `device_removal`); the id stays IDLE.
pub fn bind_unconfigured_address_fails<T: TestBed>(bed: &T) {
    let cm = bed.server();
    let channel = ok(cm.create_event_channel(), "channel");
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    expect_unconfigured_address(
        bed,
        cm.bind_addr(id, SocketAddr::new(UNCONFIGURED, bed.fresh_port())),
        Call::BindAddr,
    );
    ok(
        cm.bind_addr(id, bed.server_addr()),
        "bind after the failure",
    );
    teardown(cm, &[id], channel);
}
