//! Tests that run on any machine, with or without RDMA devices: handle checking, and the
//! clear ENODEV of a machine without RDMA (this project's build host).

use std::time::Duration;

use cmtwin::{
    AckTicket, Call, ChannelHandle, CmBackend, CmEvent, Errno, EventInfo, EventKind, EventParam,
    IdHandle, PortSpace, Wait,
};
use cmtwin_verbs::VerbsBackend;

/// Whether this machine has an RDMA device (the host tests adapt; the ENODEV checks need none).
fn has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn no_device_means_enodev_with_a_clear_message() {
    if has_rdma() {
        eprintln!("skipped: this machine has an RDMA device");
        return;
    }
    let cm = VerbsBackend::new();
    let e = cm.create_event_channel().unwrap_err();
    assert_eq!(e.call, Call::CreateEventChannel);
    assert_eq!(e.errno, Errno::ENODEV);
    assert!(e.detail.contains("no RDMA device"), "{e}");
    let e = cm.create_id(None, 0, PortSpace::TCP).unwrap_err();
    assert_eq!(e.errno, Errno::ENODEV, "{e}");
    let e = cm.devices().unwrap_err();
    assert_eq!((e.call, e.errno), (Call::GetDevices, Errno::ENODEV), "{e}");
    let e = cmtwin::verbs::DataPath::query_device(&cm, "rxe0").unwrap_err();
    assert_eq!((e.call, e.errno), (Call::QueryDevice, Errno::ENODEV), "{e}");
}

#[test]
fn unknown_handles_are_enoent_and_ebadf() {
    let cm = VerbsBackend::new();
    let id = IdHandle::from_raw(0x1234_5678_0000_0001);
    let ch = ChannelHandle::from_raw(0x1234_5678_0000_0002);
    let addr = "192.0.2.1:1".parse().unwrap();
    let d = Duration::from_millis(10);
    let checks: Vec<(Call, cmtwin::Result<()>)> = vec![
        (Call::DestroyId, cm.destroy_id(id)),
        (Call::BindAddr, cm.bind_addr(id, addr)),
        (Call::ResolveAddr, cm.resolve_addr(id, None, addr, d)),
        (Call::ResolveRoute, cm.resolve_route(id, d)),
        (Call::Listen, cm.listen(id, 1)),
        (Call::GetRequest, cm.get_request(id).map(|_| ())),
        (Call::Connect, cm.connect(id, None)),
        (Call::Accept, cm.accept(id, None)),
        (Call::Reject, cm.reject(id, &[])),
        (Call::Disconnect, cm.disconnect(id)),
        (Call::Notify, cm.notify(id, cmtwin::AsyncEvent::COMM_EST)),
        (Call::Establish, cm.establish(id)),
        (
            Call::WriteCmEvent,
            cm.write_cm_event(id, EventKind::User, 0, 0),
        ),
        (Call::JoinMulticast, cm.join_multicast(id, addr, 0)),
        (Call::LeaveMulticast, cm.leave_multicast(id, addr)),
        (
            Call::ResolveAddrinfo,
            cm.resolve_addrinfo(id, Some("localhost"), None, None),
        ),
        (Call::QueryAddrinfo, cm.query_addrinfo(id).map(|_| ())),
        (Call::MigrateId, cm.migrate_id(id, None)),
        (
            Call::SetOption,
            cm.set_option(id, &cmtwin::CmOption::Tos(0)),
        ),
        (
            Call::CreateQp,
            cm.create_qp(id, &cmtwin::QpInitAttr::new(cmtwin::QpType::Rc))
                .map(|_| ()),
        ),
        (Call::DestroyQp, cm.destroy_qp(id)),
        (
            Call::JoinMulticastEx,
            cm.join_multicast_ex(id, addr, cmtwin::JoinFlags::SendOnlyFullMember, 0),
        ),
        (Call::SyncEvent, cm.sync_event(id).map(|_| ())),
        (Call::LocalAddr, cm.local_addr(id).map(|_| ())),
        (Call::PeerAddr, cm.peer_addr(id).map(|_| ())),
        (Call::Context, cm.context(id).map(|_| ())),
        (Call::SetContext, cm.set_context(id, 1)),
        (Call::QpNum, cm.qp_num(id).map(|_| ())),
        (Call::IdDevice, cm.id_device(id).map(|_| ())),
    ];
    for (call, r) in checks {
        let e = r.unwrap_err();
        assert_eq!(e.errno, Errno::ENOENT, "{call}: {e}");
        assert_eq!(e.call, call, "{e}");
        assert!(e.detail.contains("another backend"), "{e}");
    }
    for r in [
        cm.destroy_event_channel(ch),
        cm.get_cm_event(ch, Wait::NonBlocking).map(|_| ()),
        cm.get_cm_event(ch, Wait::Block).map(|_| ()),
        cm.get_cm_event(ch, Wait::Timeout(d)).map(|_| ()),
        cm.get_cm_event_any(&[ch], Wait::Block).map(|_| ()),
        cm.poll_channels(&[ch], Wait::Block).map(|_| ()),
        cm.channel_fd(ch).map(|_| ()),
        cm.create_id(Some(ch), 0, PortSpace::TCP).map(|_| ()),
        cm.migrate_id(id, Some(ch)),
    ] {
        assert_eq!(r.unwrap_err().errno, Errno::EBADF);
    }
}

#[test]
fn handles_of_one_backend_are_foreign_to_another() {
    // Without a device no object can be created; a handle of instance 0 is never issued.
    let cm = VerbsBackend::new();
    let e = cm.destroy_id(IdHandle::from_raw(1)).unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT);
    assert!(e.detail.contains("another backend"), "{e}");
    let e = cm.channel_fd(ChannelHandle::from_raw(1)).unwrap_err();
    assert_eq!(e.errno, Errno::EBADF);
}

#[test]
fn dropping_a_backend_with_nothing_in_it_is_fine() {
    for _ in 0..3 {
        drop(VerbsBackend::new());
    }
}

#[test]
fn acking_an_event_this_backend_never_issued_is_einval() {
    let cm = VerbsBackend::new();
    let mut info = EventInfo::new(EventKind::User, 0, IdHandle::from_raw(7), PortSpace::TCP);
    info.param = EventParam::User(1);
    let e = cm
        .ack_cm_event(CmEvent::new(info, AckTicket(42)))
        .unwrap_err();
    assert_eq!(e.call, Call::AckCmEvent);
    assert_eq!(e.errno, Errno::EINVAL);
}

#[test]
fn waiting_on_no_channel_at_all_is_einval() {
    let cm = VerbsBackend::new();
    let e = cm.get_cm_event_any(&[], Wait::Block).unwrap_err();
    assert_eq!((e.call, e.errno), (Call::GetCmEvent, Errno::EINVAL), "{e}");
    let e = cm.poll_channels(&[], Wait::Block).unwrap_err();
    assert_eq!((e.call, e.errno), (Call::Poll, Errno::EINVAL), "{e}");
}

/// A timeout no clock can hold is a wait without end, not a panic (`Instant + Duration::MAX`
/// overflowed): with no QP or CQ to report an event, EDEADLK as for a blocking wait.
#[test]
fn an_endless_timeout_for_an_asynchronous_event_is_a_blocking_wait() {
    if has_rdma() {
        eprintln!("skipped: this machine has an RDMA device");
        return;
    }
    let cm = VerbsBackend::new();
    let e =
        cmtwin::verbs::DataPath::get_async_event(&cm, Wait::Timeout(Duration::MAX)).unwrap_err();
    assert_eq!(
        (e.call, e.errno),
        (Call::GetAsyncEvent, Errno::EDEADLK),
        "{e}"
    );
}

#[test]
fn clock_and_sleep() {
    let cm = VerbsBackend::new();
    let t0 = cm.now();
    cm.sleep(Duration::from_millis(20)).unwrap();
    assert!(cm.now() >= t0 + Duration::from_millis(20));
}

#[test]
fn version_probes_do_not_crash() {
    // rdma-core 44 (Debian 12) has neither; newer versions have both.
    let w = VerbsBackend::has_native_write_cm_event();
    let r = VerbsBackend::has_native_resolve_addrinfo();
    assert_eq!(w, r, "both arrived in rdma-core v60");
    if !has_rdma() {
        assert_eq!(VerbsBackend::release_removed_devices(), 0);
    }
}

#[test]
fn backend_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<VerbsBackend>();
}
