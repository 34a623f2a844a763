//! Device removal (CM-SEMANTICS §8): DEVICE_REMOVAL to the ids on the device, ENXIO for later
//! calls on them, and address resolution that finds no device (ADDR_ERROR -ENODEV).
//!
//! The bed removes the client's device ([`TestBed::remove_device`]); where both sides share one
//! device (real rxe), the server's ids get DEVICE_REMOVAL too. Every id is destroyed before the
//! device is restored ([`TestBed::restore_device`]).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{Call, CmBackend, ConnParam, Errno, EventKind, PortSpace};

use crate::steps::{
    client_endpoint, expect_errno, expect_event_for, expect_no_event, expect_quiet, listen_on, ok,
    resolved_client, teardown, teardown_listener, Endpoint, Listener, RESOLVE_TIMEOUT,
};
use crate::TestBed;

/// A listener on the server and a client id resolved to it; then the client's device is
/// removed, and the client id's DEVICE_REMOVAL (status 0, no data) is awaited, as is the
/// listener's where the sides share the device.
fn remove_under_bound_ids<T: TestBed>(bed: &T) -> (Listener, Endpoint) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    bed.remove_device()
        .unwrap_or_else(|e| panic!("remove the device: {e}"));
    let removal = expect_event_for(
        bed.client(),
        client.channel,
        EventKind::DeviceRemoval,
        client.id,
        0,
    );
    assert!(
        removal.private_data.is_empty(),
        "DEVICE_REMOVAL carries no data"
    );
    if bed.sides_share_a_device() {
        expect_event_for(
            bed.server(),
            listener.channel,
            EventKind::DeviceRemoval,
            listener.id,
            0,
        );
    } else {
        expect_quiet(bed.server(), listener.channel, Duration::from_millis(300));
    }
    (listener, client)
}

/// Restores the device after every id on it was destroyed.
fn restore<T: TestBed>(bed: &T) {
    bed.restore_device()
        .unwrap_or_else(|e| panic!("restore the device: {e}"));
}

/// §8.1, §8.3 (Linux 6.1: 36 of 36 calls ENXIO, issue 7 item 2): a resolved client id and a
/// listener get DEVICE_REMOVAL (status 0) and nothing after it; once ucma's background
/// teardown of the id ran (§8.1 step 4; before it, state-checked calls are EINVAL, as seen on
/// rxe right after the event), every command on the removed id fails with ENXIO; destroy_id
/// still returns 0; once the device is back a new id resolves again.
pub fn removed_device_gives_device_removal_then_enxio<T: TestBed>(bed: &T) {
    let client_cm = bed.client();
    let (listener, client) = remove_under_bound_ids(bed);
    ok(
        client_cm.sleep(Duration::from_millis(500)),
        "let the background teardown run",
    );
    expect_errno(
        client_cm.resolve_route(client.id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::ENXIO,
    );
    expect_errno(
        client_cm.connect(client.id, Some(&ConnParam::default())),
        Call::Connect,
        Errno::ENXIO,
    );
    expect_errno(
        client_cm.disconnect(client.id),
        Call::Disconnect,
        Errno::ENXIO,
    );
    expect_errno(
        client_cm.resolve_addr(client.id, None, listener.addr, RESOLVE_TIMEOUT),
        Call::ResolveAddr,
        Errno::ENXIO,
    );
    expect_no_event(client_cm, client.channel);
    teardown(client_cm, &[client.id], client.channel);
    teardown_listener(bed, &listener);
    restore(bed);
    let again = resolved_client(bed, PortSpace::TCP, bed.server_addr());
    teardown(client_cm, &[again.id], again.channel);
}

/// §8.1 step 1, §4.3, §4.4 (Linux 6.1, issue 7 item 8): with the client's device gone its
/// netdev still routes, so `resolve_addr` without a source returns 0 and ADDR_ERROR -ENODEV
/// follows; binding the device's address, or resolving from it, fails at once with ENODEV:
/// the address is still on its netdev, which has no RDMA device any more (an address on no
/// interface at all is EADDRNOTAVAIL instead; measured on rxe and siw, Linux 6.1 and 6.12).
pub fn resolving_after_device_removal_is_addr_error_enodev<T: TestBed>(bed: &T) {
    let client_cm = bed.client();
    let (listener, witness) = remove_under_bound_ids(bed);
    let fresh = client_endpoint(bed, PortSpace::TCP);
    ok(
        client_cm.resolve_addr(fresh.id, None, listener.addr, RESOLVE_TIMEOUT),
        "resolve_addr without a source",
    );
    let err = expect_event_for(
        client_cm,
        fresh.channel,
        EventKind::AddrError,
        fresh.id,
        -Errno::ENODEV.0,
    );
    assert!(err.private_data.is_empty(), "ADDR_ERROR carries no data");
    let source = SocketAddr::new(bed.client_ip(), 0);
    let other = client_endpoint(bed, PortSpace::TCP);
    expect_errno(
        client_cm.resolve_addr(other.id, Some(source), listener.addr, RESOLVE_TIMEOUT),
        Call::ResolveAddr,
        Errno::ENODEV,
    );
    expect_errno(
        client_cm.bind_addr(other.id, source),
        Call::BindAddr,
        Errno::ENODEV,
    );
    teardown(client_cm, &[other.id], other.channel);
    teardown(client_cm, &[fresh.id], fresh.channel);
    teardown(client_cm, &[witness.id], witness.channel);
    teardown_listener(bed, &listener);
    restore(bed);
}
