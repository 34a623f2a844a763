//! Checked handles: stale and foreign handles are errors, never undefined behaviour (DESIGN,
//! CM-SEMANTICS §4.2, §4.15, §12.1), and an invalid port space is EINVAL (§2.3, §4.2).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{Call, CmBackend, ConnParam, Errno, EventKind, PortSpace, Wait};

use crate::steps::{client_endpoint, expect_errno, ok, teardown_client, RESOLVE_TIMEOUT};
use crate::TestBed;

/// §2.3, §4.2: a port space other than IPOIB/TCP/UDP/IB is EINVAL; the valid ones work.
pub fn invalid_port_space_is_einval<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    for ps in [PortSpace(0), PortSpace(0x0107), PortSpace(0xffff)] {
        expect_errno(
            cm.create_id(Some(channel), 0, ps),
            Call::CreateId,
            Errno::EINVAL,
        );
    }
    for ps in [PortSpace::TCP, PortSpace::UDP, PortSpace::IB] {
        let id = ok(
            cm.create_id(Some(channel), 0, ps),
            "create_id with a valid port space",
        );
        ok(cm.destroy_id(id), "destroy_id");
    }
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
}

/// §4.15 (ENOENT for an unknown handle): every call on a destroyed id fails with ENOENT.
pub fn destroyed_id_is_enoent<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    let id = ep.id;
    ok(cm.destroy_id(id), "destroy_id");
    let addr = SocketAddr::new(bed.client_ip(), bed.fresh_port());
    let param = ConnParam::default();
    expect_errno(cm.destroy_id(id), Call::DestroyId, Errno::ENOENT);
    expect_errno(cm.bind_addr(id, addr), Call::BindAddr, Errno::ENOENT);
    expect_errno(
        cm.resolve_addr(id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        Call::ResolveAddr,
        Errno::ENOENT,
    );
    expect_errno(
        cm.resolve_route(id, RESOLVE_TIMEOUT),
        Call::ResolveRoute,
        Errno::ENOENT,
    );
    expect_errno(cm.listen(id, 1), Call::Listen, Errno::ENOENT);
    expect_errno(cm.connect(id, Some(&param)), Call::Connect, Errno::ENOENT);
    expect_errno(cm.accept(id, Some(&param)), Call::Accept, Errno::ENOENT);
    expect_errno(cm.reject(id, b""), Call::Reject, Errno::ENOENT);
    expect_errno(cm.disconnect(id), Call::Disconnect, Errno::ENOENT);
    expect_errno(cm.establish(id), Call::Establish, Errno::ENOENT);
    expect_errno(
        cm.write_cm_event(id, EventKind::User, 0, 0),
        Call::WriteCmEvent,
        Errno::ENOENT,
    );
    expect_errno(
        cm.migrate_id(id, Some(ep.channel)),
        Call::MigrateId,
        Errno::ENOENT,
    );
    expect_errno(
        cm.set_option(id, &cmtwin::CmOption::Tos(0)),
        Call::SetOption,
        Errno::ENOENT,
    );
    assert_eq!(
        cm.context(id).map_err(|e| e.errno),
        Err(Errno::ENOENT),
        "context of a destroyed id"
    );
    assert_eq!(
        cm.local_addr(id).map_err(|e| e.errno),
        Err(Errno::ENOENT),
        "local_addr of a destroyed id"
    );
    ok(
        cm.destroy_event_channel(ep.channel),
        "destroy_event_channel",
    );
}

/// §12.1 (EBADF for a closed fd): every call on a destroyed channel fails with EBADF.
pub fn destroyed_channel_is_ebadf<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let channel = ok(cm.create_event_channel(), "create_event_channel");
    ok(cm.destroy_event_channel(channel), "destroy_event_channel");
    expect_errno(
        cm.get_cm_event(channel, Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EBADF,
    );
    expect_errno(
        cm.get_cm_event(channel, Wait::Timeout(Duration::from_millis(10))),
        Call::GetCmEvent,
        Errno::EBADF,
    );
    expect_errno(
        cm.create_id(Some(channel), 0, PortSpace::TCP),
        Call::CreateId,
        Errno::EBADF,
    );
    expect_errno(
        cm.destroy_event_channel(channel),
        Call::DestroyEventChannel,
        Errno::EBADF,
    );
    let ep = client_endpoint(bed, PortSpace::TCP);
    expect_errno(
        cm.migrate_id(ep.id, Some(channel)),
        Call::MigrateId,
        Errno::EBADF,
    );
    teardown_client(bed, &ep);
}

/// DESIGN (handles are checked): an id or channel of one backend value used on another is
/// unknown there (ENOENT / EBADF), and the owner is unaffected.
pub fn foreign_handles_are_refused<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let ep = client_endpoint(bed, PortSpace::TCP);
    expect_errno(server_cm.destroy_id(ep.id), Call::DestroyId, Errno::ENOENT);
    expect_errno(
        server_cm.bind_addr(ep.id, SocketAddr::new(bed.server_ip(), bed.fresh_port())),
        Call::BindAddr,
        Errno::ENOENT,
    );
    expect_errno(
        server_cm.get_cm_event(ep.channel, Wait::NonBlocking),
        Call::GetCmEvent,
        Errno::EBADF,
    );
    expect_errno(
        server_cm.destroy_event_channel(ep.channel),
        Call::DestroyEventChannel,
        Errno::EBADF,
    );
    assert!(
        ok(client_cm.local_addr(ep.id), "owner still works").is_none(),
        "an unbound id has no local address"
    );
    teardown_client(bed, &ep);
}
