//! Real librdmacm tests. They need an RDMA device whose IPv4 address is in `CMTWIN_RDMA_ADDR`
//! (the Soft-RoCE VM of `scripts/vm-run` sets it up: rxe0 on dummy0, 192.168.77.1), so they are
//! ignored by default; `scripts/verbs-tests-in-vm` runs them with `--ignored --test-threads=1`.
//!
//! Every test talks to itself over that one address: the server and client ids live in the
//! same backend, on two channels, and the test pumps both. Expected numbers are those of
//! CM-SEMANTICS.md §6.2 (delivered private-data lengths) and §19 (measured on the CI VM).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmtwin::{
    AddrInfoHints, AsyncEvent, ChannelHandle, CmBackend, CmEvent, ConnParam, Errno, EventKind,
    EventParam, IdHandle, PortSpace, QpInitAttr, QpType, Wait,
};
use cmtwin_verbs::VerbsBackend;

const STEP: Duration = Duration::from_secs(15);

fn rdma_ip() -> IpAddr {
    std::env::var("CMTWIN_RDMA_ADDR")
        .expect("CMTWIN_RDMA_ADDR must name the RDMA device's IPv4 address")
        .parse()
        .expect("CMTWIN_RDMA_ADDR is not an IP address")
}

fn fresh_addr() -> SocketAddr {
    static NEXT: AtomicU16 = AtomicU16::new(31_000);
    SocketAddr::new(rdma_ip(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Waits (bounded) for the next event on `ch` and checks its kind.
#[track_caller]
fn expect(cm: &VerbsBackend, ch: ChannelHandle, kind: EventKind) -> CmEvent {
    let e = cm
        .get_cm_event(ch, Wait::Timeout(STEP))
        .unwrap_or_else(|e| panic!("waiting for {kind}: {e}"));
    assert_eq!(
        e.kind(),
        kind,
        "unexpected event {} status {} on {}",
        e.kind(),
        e.status(),
        e.id()
    );
    e
}

#[track_caller]
fn expect_ack(cm: &VerbsBackend, ch: ChannelHandle, kind: EventKind) -> i32 {
    let e = expect(cm, ch, kind);
    let s = e.status();
    cm.ack_cm_event(e).unwrap();
    s
}

/// A listener on a fresh port of the RDMA address.
fn listener(
    cm: &VerbsBackend,
    ch: ChannelHandle,
    ps: PortSpace,
    ctx: u64,
) -> (IdHandle, SocketAddr) {
    let addr = fresh_addr();
    let id = cm.create_id(Some(ch), ctx, ps).unwrap();
    cm.bind_addr(id, addr).unwrap();
    cm.listen(id, 8).unwrap();
    (id, addr)
}

/// An active id on `ch` with address and route resolved towards `dst`.
fn resolved_client(
    cm: &VerbsBackend,
    ch: ChannelHandle,
    ps: PortSpace,
    dst: SocketAddr,
) -> IdHandle {
    let id = cm.create_id(Some(ch), 0, ps).unwrap();
    cm.resolve_addr(id, None, dst, Duration::from_secs(2))
        .unwrap();
    expect_ack(cm, ch, EventKind::AddrResolved);
    cm.resolve_route(id, Duration::from_secs(2)).unwrap();
    expect_ack(cm, ch, EventKind::RouteResolved);
    id
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8) | 1).collect()
}

/// An RC connection with QPs on both sides; returns (server child, client).
struct Pair {
    cm: VerbsBackend,
    sch: ChannelHandle,
    cch: ChannelHandle,
    listener: IdHandle,
    server: IdHandle,
    client: IdHandle,
}

impl Pair {
    fn connect() -> Pair {
        let cm = VerbsBackend::new();
        let sch = cm.create_event_channel().unwrap();
        let cch = cm.create_event_channel().unwrap();
        let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 5);
        let client = resolved_client(&cm, cch, PortSpace::TCP, addr);
        cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
        cm.connect(client, Some(&ConnParam::default())).unwrap();
        let req = expect(&cm, sch, EventKind::ConnectRequest);
        let server = req.id();
        cm.ack_cm_event(req).unwrap();
        cm.create_qp(server, &QpInitAttr::new(QpType::Rc)).unwrap();
        cm.accept(server, Some(&ConnParam::default())).unwrap();
        expect_ack(&cm, cch, EventKind::Established);
        expect_ack(&cm, sch, EventKind::Established);
        Pair {
            cm,
            sch,
            cch,
            listener,
            server,
            client,
        }
    }

    /// Destroys everything (destroying a connected id sends a DREQ: the peer may get
    /// DISCONNECTED, which is drained).
    fn teardown(self) {
        let cm = &self.cm;
        cm.destroy_id(self.client).unwrap();
        while let Ok(e) = cm.get_cm_event(self.sch, Wait::Timeout(Duration::from_millis(300))) {
            cm.ack_cm_event(e).unwrap();
        }
        while let Ok(e) = cm.get_cm_event(self.cch, Wait::NonBlocking) {
            cm.ack_cm_event(e).unwrap();
        }
        cm.destroy_id(self.server).unwrap();
        cm.destroy_id(self.listener).unwrap();
        cm.destroy_event_channel(self.sch).unwrap();
        cm.destroy_event_channel(self.cch).unwrap();
    }
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn rc_connect_accept_with_qps_private_data_disconnect_and_timewait() {
    let cm = VerbsBackend::new();
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 0xC0FFEE);
    assert_eq!(cm.local_addr(listener).unwrap(), Some(addr));
    let client = resolved_client(&cm, cch, PortSpace::TCP, addr);
    assert_eq!(cm.peer_addr(client).unwrap(), Some(addr));
    let cqpn = cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
    assert_eq!(cm.qp_num(client).unwrap(), Some(cqpn));
    assert_eq!(
        cm.create_qp(client, &QpInitAttr::new(QpType::Rc))
            .unwrap_err()
            .errno,
        Errno::EINVAL,
        "a second QP"
    );

    // 57 bytes exceed the REQ's 56 user bytes: refused before C.
    let e = cm
        .connect(client, Some(&ConnParam::with_private_data(&[1; 57])))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "{e}");
    let req_data = pattern(40, 3);
    cm.connect(client, Some(&ConnParam::with_private_data(&req_data)))
        .unwrap();

    let req = expect(&cm, sch, EventKind::ConnectRequest);
    let server = req.id();
    assert_ne!(server, listener);
    assert_eq!(req.listen_id(), Some(listener));
    assert_eq!(req.private_data().len(), 56, "§6.2: the whole REQ field");
    assert_eq!(&req.private_data()[..40], &req_data[..]);
    assert!(req.private_data()[40..].iter().all(|&b| b == 0));
    assert_eq!(req.conn().expect("conn data").qp_num, cqpn);
    assert_eq!(cm.context(server).unwrap(), 0xC0FFEE, "inherited context");
    assert_eq!(cm.local_addr(server).unwrap(), Some(addr));
    // The listener holds an unacked CONNECT_REQUEST: destroy is EBUSY naming it.
    let e = cm.destroy_id(listener).unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY);
    assert!(e.detail.contains("CONNECT_REQUEST"), "{e}");
    cm.ack_cm_event(req).unwrap();

    let sqpn = cm.create_qp(server, &QpInitAttr::new(QpType::Rc)).unwrap();
    let e = cm
        .accept(server, Some(&ConnParam::with_private_data(&[2; 197])))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "197 bytes > REP's 196: {e}");
    let rep_data = pattern(100, 9);
    cm.accept(server, Some(&ConnParam::with_private_data(&rep_data)))
        .unwrap();

    let est = expect(&cm, cch, EventKind::Established);
    assert_eq!(est.id(), client);
    assert_eq!(est.status(), 0);
    assert_eq!(est.private_data().len(), 196, "§6.2: the whole REP field");
    assert_eq!(&est.private_data()[..100], &rep_data[..]);
    assert_eq!(est.conn().expect("conn data").qp_num, sqpn);
    cm.ack_cm_event(est).unwrap();
    let est = expect(&cm, sch, EventKind::Established);
    assert_eq!(est.id(), server);
    assert!(
        est.private_data().is_empty(),
        "passive ESTABLISHED has no data"
    );
    cm.ack_cm_event(est).unwrap();

    // Orderly disconnect (§5.2 S10), then timewait on both sides (§19: about 2.2 s).
    cm.disconnect(client).unwrap();
    expect_ack(&cm, sch, EventKind::Disconnected);
    cm.disconnect(server).unwrap();
    let t0 = Instant::now();
    expect_ack(&cm, cch, EventKind::Disconnected);
    let mut exits = 0;
    while exits < 2 {
        let e = cm
            .get_cm_event(sch, Wait::Timeout(Duration::from_millis(50)))
            .or_else(|_| cm.get_cm_event(cch, Wait::Timeout(Duration::from_millis(50))));
        if let Ok(e) = e {
            assert_eq!(e.kind(), EventKind::TimewaitExit);
            exits += 1;
            cm.ack_cm_event(e).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no TIMEWAIT_EXIT");
    }
    eprintln!(
        "TIMEWAIT_EXIT on both sides {:?} after disconnect",
        t0.elapsed()
    );

    cm.destroy_id(client).unwrap();
    cm.destroy_id(server).unwrap();
    cm.destroy_id(listener).unwrap();
    assert_eq!(cm.destroy_id(client).unwrap_err().errno, Errno::ENOENT);
    cm.destroy_event_channel(sch).unwrap();
    cm.destroy_event_channel(cch).unwrap();
    assert_eq!(
        cm.destroy_event_channel(sch).unwrap_err().errno,
        Errno::EBADF
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn simultaneous_disconnect_then_timewait() {
    // Both sides disconnect before reading anything (§5.2 S11, §19). Both get DISCONNECTED.
    // Whether TIMEWAIT_EXIT follows without a second disconnect depends on whether the DREQs
    // crossed (S11: no DREP, no timewait) or the first arrived before the second side's call
    // (S10: DREP, timewait): report which, and make sure a second disconnect ends it.
    let p = Pair::connect();
    let cm = &p.cm;
    cm.disconnect(p.client).unwrap();
    cm.disconnect(p.server).unwrap();
    let t0 = Instant::now();
    expect_ack(cm, p.cch, EventKind::Disconnected);
    expect_ack(cm, p.sch, EventKind::Disconnected);
    let mut pending = vec![(p.client, p.cch), (p.server, p.sch)];
    let wait_exits = |pending: &mut Vec<(IdHandle, ChannelHandle)>, within: Duration| {
        let t = Instant::now();
        while !pending.is_empty() && t.elapsed() < within {
            pending.retain(|&(id, ch)| {
                match cm.get_cm_event(ch, Wait::Timeout(Duration::from_millis(50))) {
                    Ok(e) => {
                        assert_eq!((e.kind(), e.id()), (EventKind::TimewaitExit, id));
                        cm.ack_cm_event(e).unwrap();
                        false
                    }
                    Err(_) => true,
                }
            });
        }
    };
    wait_exits(&mut pending, Duration::from_secs(6));
    eprintln!(
        "simultaneous disconnect: TIMEWAIT_EXIT without a second disconnect on {} of 2 ids ({:?})",
        2 - pending.len(),
        t0.elapsed()
    );
    for &(id, _) in &pending {
        cm.disconnect(id).unwrap();
    }
    let t1 = Instant::now();
    wait_exits(&mut pending, Duration::from_secs(10));
    assert!(pending.is_empty(), "no TIMEWAIT_EXIT for {pending:?}");
    eprintln!(
        "... and the rest {:?} after a second disconnect",
        t1.elapsed()
    );
    p.teardown();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn qp_less_connect_gets_connect_response_then_establish() {
    let cm = VerbsBackend::new();
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 0);
    let client = resolved_client(&cm, cch, PortSpace::TCP, addr);
    let e = cm.connect(client, None).unwrap_err();
    assert_eq!(
        e.errno,
        Errno::EINVAL,
        "PS_TCP without QP needs params: {e}"
    );
    let p = ConnParam {
        qp_num: 0x123,
        ..ConnParam::with_private_data(b"hello")
    };
    cm.connect(client, Some(&p)).unwrap();
    let req = expect(&cm, sch, EventKind::ConnectRequest);
    let server = req.id();
    assert_eq!(req.conn().unwrap().qp_num, 0x123);
    assert_eq!(&req.private_data()[..5], b"hello");
    cm.ack_cm_event(req).unwrap();
    let e = cm.accept(server, None).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "no QP and no params: {e}");
    let p = ConnParam {
        qp_num: 0x456,
        ..ConnParam::with_private_data(b"world")
    };
    cm.accept(server, Some(&p)).unwrap();
    let resp = expect(&cm, cch, EventKind::ConnectResponse);
    assert_eq!(resp.private_data().len(), 196);
    assert_eq!(&resp.private_data()[..5], b"world");
    assert_eq!(resp.conn().unwrap().qp_num, 0x456);
    cm.ack_cm_event(resp).unwrap();
    cm.establish(client).unwrap();
    expect_ack(&cm, sch, EventKind::Established);
    cm.disconnect(client).unwrap();
    expect_ack(&cm, sch, EventKind::Disconnected);
    cm.disconnect(server).unwrap();
    expect_ack(&cm, cch, EventKind::Disconnected);
    for id in [client, server, listener] {
        cm.destroy_id(id).unwrap();
    }
    cm.destroy_event_channel(sch).unwrap();
    cm.destroy_event_channel(cch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn reject_delivers_status_28_and_148_bytes_and_listeners_refuse_accept() {
    let cm = VerbsBackend::new();
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 0);
    // §19: accept/reject on a listener crash librdmacm 44: refused with EINVAL.
    let p = ConnParam::default();
    assert_eq!(
        cm.accept(listener, Some(&p)).unwrap_err().errno,
        Errno::EINVAL
    );
    assert_eq!(cm.reject(listener, b"x").unwrap_err().errno, Errno::EINVAL);
    let client = resolved_client(&cm, cch, PortSpace::TCP, addr);
    cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
    cm.connect(client, Some(&ConnParam::default())).unwrap();
    let req = expect(&cm, sch, EventKind::ConnectRequest);
    let server = req.id();
    cm.ack_cm_event(req).unwrap();
    assert_eq!(
        cm.reject(server, &[0; 149]).unwrap_err().errno,
        Errno::EINVAL
    );
    let data = pattern(100, 17);
    cm.reject(server, &data).unwrap();
    let rej = expect(&cm, cch, EventKind::Rejected);
    assert_eq!(rej.status(), 28);
    assert_eq!(rej.private_data().len(), 148);
    assert_eq!(&rej.private_data()[..100], &data[..]);
    cm.ack_cm_event(rej).unwrap();
    for id in [client, server, listener] {
        cm.destroy_id(id).unwrap();
    }
    cm.destroy_event_channel(sch).unwrap();
    cm.destroy_event_channel(cch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn connect_without_listener_is_rejected_with_8() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let client = resolved_client(&cm, ch, PortSpace::TCP, fresh_addr());
    cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
    let t0 = Instant::now();
    cm.connect(client, Some(&ConnParam::default())).unwrap();
    let rej = expect(&cm, ch, EventKind::Rejected);
    assert_eq!(rej.status(), 8);
    assert_eq!(rej.private_data().len(), 148);
    assert!(rej.private_data().iter().all(|&b| b == 0));
    cm.ack_cm_event(rej).unwrap();
    eprintln!("REJECTED 8 after {:?}", t0.elapsed());
    cm.destroy_id(client).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn refusals_before_librdmacm_and_busy_objects() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    let d = Duration::from_secs(1);
    // §16: no device yet.
    assert_eq!(cm.resolve_route(id, d).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(
        cm.connect(id, Some(&ConnParam::default()))
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(
        cm.create_qp(id, &QpInitAttr::new(QpType::Rc))
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(
        cm.accept(id, Some(&ConnParam::default()))
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(cm.destroy_qp(id).unwrap_err().errno, Errno::EINVAL);
    // write_cm_event accepts only USER.
    assert_eq!(
        cm.write_cm_event(id, EventKind::Established, 0, 0)
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    // Invalid port space.
    assert_eq!(
        cm.create_id(Some(ch), 0, PortSpace(0x999))
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    // A wildcard listener has no device either.
    let wl = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    cm.listen(wl, 1).unwrap();
    assert_eq!(cm.resolve_route(wl, d).unwrap_err().errno, Errno::EINVAL);
    // The channel still has ids.
    let e = cm.destroy_event_channel(ch).unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");
    // Handles are foreign to another backend value.
    let other = VerbsBackend::new();
    assert_eq!(other.destroy_id(id).unwrap_err().errno, Errno::ENOENT);
    assert_eq!(other.channel_fd(ch).unwrap_err().errno, Errno::EBADF);
    // Unacked events make destroy EBUSY; a bad ack is EINVAL.
    cm.write_cm_event(id, EventKind::User, 1, 2).unwrap();
    let e = cm.get_cm_event(ch, Wait::Timeout(d)).unwrap();
    let err = cm.destroy_id(id).unwrap_err();
    assert_eq!(err.errno, Errno::EBUSY);
    assert!(err.detail.contains("RDMA_CM_EVENT_USER"), "{err}");
    let forged = CmEvent::new(e.info().clone(), cmtwin::AckTicket(e.ticket().0 ^ 1));
    assert_eq!(cm.ack_cm_event(forged).unwrap_err().errno, Errno::EINVAL);
    let copy = CmEvent::new(e.info().clone(), e.ticket());
    cm.ack_cm_event(e).unwrap();
    assert_eq!(
        cm.ack_cm_event(copy).unwrap_err().errno,
        Errno::EINVAL,
        "already acked"
    );
    cm.destroy_id(id).unwrap();
    cm.destroy_id(wl).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn nonblocking_and_timed_waits() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let e = cm.get_cm_event(ch, Wait::NonBlocking).unwrap_err();
    assert_eq!(e.errno, Errno::EAGAIN);
    let t0 = Instant::now();
    let e = cm
        .get_cm_event(ch, Wait::Timeout(Duration::from_millis(300)))
        .unwrap_err();
    let waited = t0.elapsed();
    assert_eq!(e.errno, Errno::ETIMEDOUT);
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // An event that is already queued is returned by a non-blocking wait.
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    cm.resolve_addr(id, None, fresh_addr(), Duration::from_secs(2))
        .unwrap();
    let mut got = None;
    for _ in 0..200 {
        match cm.get_cm_event(ch, Wait::NonBlocking) {
            Ok(e) => {
                got = Some(e);
                break;
            }
            Err(e) => {
                assert_eq!(e.errno, Errno::EAGAIN);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let e = got.expect("ADDR_RESOLVED");
    assert_eq!(e.kind(), EventKind::AddrResolved);
    cm.ack_cm_event(e).unwrap();
    assert!(cm.channel_fd(ch).unwrap() >= 0);
    // A timeout too long to represent waits like Block.
    cm.write_cm_event(id, EventKind::User, 0, 3).unwrap();
    let e = cm.get_cm_event(ch, Wait::Timeout(Duration::MAX)).unwrap();
    assert_eq!(e.user_arg(), Some(3));
    cm.ack_cm_event(e).unwrap();
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn write_cm_event_wakes_a_blocked_thread() {
    let cm = Arc::new(VerbsBackend::new());
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    let waiter = {
        let cm = Arc::clone(&cm);
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let e = cm.get_cm_event(ch, Wait::Block).unwrap();
            let info = (e.kind(), e.status(), e.id(), e.user_arg(), t0.elapsed());
            cm.ack_cm_event(e).unwrap();
            info
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // While a thread waits on it, the channel cannot be destroyed.
    assert_eq!(
        cm.destroy_event_channel(ch).unwrap_err().errno,
        Errno::EBUSY
    );
    cm.write_cm_event(id, EventKind::User, -5, 0xDEAD_BEEF)
        .unwrap();
    let (kind, status, eid, arg, waited) = waiter.join().unwrap();
    assert_eq!(kind, EventKind::User);
    assert_eq!(status, -5);
    assert_eq!(eid, id);
    assert_eq!(arg, Some(0xDEAD_BEEF));
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    eprintln!(
        "USER event woke the waiter (native rdma_write_cm_event: {})",
        VerbsBackend::has_native_write_cm_event()
    );
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn ud_sidr_connect_establishes_with_ud_data() {
    let cm = VerbsBackend::new();
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, sch, PortSpace::UDP, 0);
    let client = resolved_client(&cm, cch, PortSpace::UDP, addr);
    assert_eq!(
        cm.create_qp(client, &QpInitAttr::new(QpType::Rc))
            .unwrap_err()
            .errno,
        Errno::EINVAL,
        "an RC QP on a UD id"
    );
    cm.create_qp(client, &QpInitAttr::new(QpType::Ud)).unwrap();
    let e = cm
        .connect(client, Some(&ConnParam::with_private_data(&[7; 181])))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "SIDR REQ allows 180: {e}");
    cm.connect(client, Some(&ConnParam::with_private_data(&[7; 100])))
        .unwrap();
    let req = expect(&cm, sch, EventKind::ConnectRequest);
    let server = req.id();
    assert_eq!(req.private_data().len(), 180);
    assert!(
        matches!(req.param(), EventParam::Ud(_)),
        "{:?}",
        req.param()
    );
    cm.ack_cm_event(req).unwrap();
    let sqpn = cm.create_qp(server, &QpInitAttr::new(QpType::Ud)).unwrap();
    cm.accept(server, Some(&ConnParam::with_private_data(&[9; 50])))
        .unwrap();
    let est = expect(&cm, cch, EventKind::Established);
    let ud = *est.ud().expect("ud data");
    assert_eq!(ud.qp_num, sqpn);
    assert_eq!(ud.qkey, cmtwin::RDMA_UDP_QKEY);
    assert!(ud.ah_attr.is_global, "RoCE always uses a GRH");
    assert_eq!(est.private_data().len(), 136);
    assert_eq!(&est.private_data()[..50], &[9; 50][..]);
    cm.ack_cm_event(est).unwrap();
    for id in [client, server, listener] {
        cm.destroy_id(id).unwrap();
    }
    cm.destroy_event_channel(sch).unwrap();
    cm.destroy_event_channel(cch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn multicast_join_and_leave() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::UDP).unwrap();
    let group: SocketAddr = "239.1.2.3:0".parse().unwrap();
    assert_eq!(
        cm.join_multicast(id, group, 1).unwrap_err().errno,
        Errno::EINVAL,
        "no device yet"
    );
    cm.bind_addr(id, SocketAddr::new(rdma_ip(), 0)).unwrap();
    cm.create_qp(id, &QpInitAttr::new(QpType::Ud)).unwrap();
    cm.join_multicast(id, group, 0xABCD).unwrap();
    let e = cm.get_cm_event(ch, Wait::Timeout(STEP)).unwrap();
    assert_eq!(e.kind(), EventKind::MulticastJoin, "status {}", e.status());
    match e.param() {
        EventParam::Multicast { ud, context } => {
            assert_eq!(*context, 0xABCD);
            assert_eq!(ud.qp_num, 0xFF_FFFF);
        }
        other => panic!("{other:?}"),
    }
    cm.ack_cm_event(e).unwrap();
    cm.leave_multicast(id, group).unwrap();
    assert_eq!(
        cm.leave_multicast(id, group).unwrap_err().errno,
        Errno::EADDRNOTAVAIL
    );
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn notify_before_accept_is_einval_after_established_eisconn() {
    let cm = VerbsBackend::new();
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 0);
    let client = resolved_client(&cm, cch, PortSpace::TCP, addr);
    cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
    cm.connect(client, Some(&ConnParam::default())).unwrap();
    let req = expect(&cm, sch, EventKind::ConnectRequest);
    let server = req.id();
    cm.ack_cm_event(req).unwrap();
    assert_eq!(
        cm.notify(server, AsyncEvent::COMM_EST).unwrap_err().errno,
        Errno::EINVAL,
        "§9.2: before accept"
    );
    cm.create_qp(server, &QpInitAttr::new(QpType::Rc)).unwrap();
    cm.accept(server, Some(&ConnParam::default())).unwrap();
    expect_ack(&cm, cch, EventKind::Established);
    expect_ack(&cm, sch, EventKind::Established);
    assert_eq!(
        cm.notify(server, AsyncEvent::COMM_EST).unwrap_err().errno,
        Errno::EISCONN
    );
    assert_eq!(
        cm.notify(client, AsyncEvent::COMM_EST).unwrap_err().errno,
        Errno::EISCONN
    );
    let pair = Pair {
        cm,
        sch,
        cch,
        listener,
        server,
        client,
    };
    pair.teardown();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn migrate_id_moves_events_and_can_make_an_id_synchronous() {
    let cm = VerbsBackend::new();
    let ch1 = cm.create_event_channel().unwrap();
    let ch2 = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch1), 0, PortSpace::TCP).unwrap();
    cm.write_cm_event(id, EventKind::User, 0, 1).unwrap();
    let e = cm.get_cm_event(ch1, Wait::Timeout(STEP)).unwrap();
    assert_eq!(
        cm.migrate_id(id, Some(ch2)).unwrap_err().errno,
        Errno::EBUSY,
        "an unacked event of the id"
    );
    cm.ack_cm_event(e).unwrap();
    // A queued event moves with the id.
    cm.write_cm_event(id, EventKind::User, 0, 2).unwrap();
    cm.migrate_id(id, Some(ch2)).unwrap();
    assert_eq!(
        cm.get_cm_event(ch1, Wait::NonBlocking).unwrap_err().errno,
        Errno::EAGAIN
    );
    let e = expect(&cm, ch2, EventKind::User);
    assert_eq!(e.user_arg(), Some(2));
    cm.ack_cm_event(e).unwrap();
    cm.resolve_addr(id, None, fresh_addr(), Duration::from_secs(2))
        .unwrap();
    expect_ack(&cm, ch2, EventKind::AddrResolved);
    // ch1 is free now; ch2 is not.
    cm.destroy_event_channel(ch1).unwrap();
    assert_eq!(
        cm.destroy_event_channel(ch2).unwrap_err().errno,
        Errno::EBUSY
    );
    // Make it synchronous: calls now block until the id's next event.
    cm.migrate_id(id, None).unwrap();
    assert_eq!(
        cm.migrate_id(id, None).unwrap_err().errno,
        Errno::EINVAL,
        "already synchronous"
    );
    cm.resolve_route(id, Duration::from_secs(2)).unwrap();
    let ev = cm.sync_event(id).unwrap().expect("current event");
    assert_eq!(ev.kind, EventKind::RouteResolved);
    cm.destroy_event_channel(ch2).unwrap();
    cm.destroy_id(id).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn synchronous_ids_and_get_request() {
    let cm = Arc::new(VerbsBackend::new());
    let addr = fresh_addr();
    let listener = cm.create_id(None, 42, PortSpace::TCP).unwrap();
    cm.bind_addr(listener, addr).unwrap();
    cm.listen(listener, 4).unwrap();
    let client = {
        let cm = Arc::clone(&cm);
        std::thread::spawn(move || {
            let id = cm.create_id(None, 0, PortSpace::TCP).unwrap();
            cm.resolve_addr(id, None, addr, Duration::from_secs(2))
                .unwrap();
            assert_eq!(
                cm.sync_event(id).unwrap().unwrap().kind,
                EventKind::AddrResolved
            );
            cm.resolve_route(id, Duration::from_secs(2)).unwrap();
            assert_eq!(
                cm.sync_event(id).unwrap().unwrap().kind,
                EventKind::RouteResolved
            );
            cm.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
            // Blocks until the connection is established.
            cm.connect(id, Some(&ConnParam::with_private_data(b"sync")))
                .unwrap();
            let ev = cm.sync_event(id).unwrap().unwrap();
            (id, ev)
        })
    };
    let child = cm.get_request(listener).unwrap();
    let ev = cm.sync_event(child).unwrap().expect("the request");
    assert_eq!(ev.kind, EventKind::ConnectRequest);
    assert_eq!(ev.id, child);
    assert_eq!(ev.listen_id, Some(listener));
    assert_eq!(ev.private_data.len(), 56);
    assert_eq!(&ev.private_data[..4], b"sync");
    assert_eq!(cm.context(child).unwrap(), 42);
    let e = cm.destroy_id(listener).unwrap_err();
    assert_eq!(
        e.errno,
        Errno::EBUSY,
        "the child holds the listener's request: {e}"
    );
    cm.create_qp(child, &QpInitAttr::new(QpType::Rc)).unwrap();
    // Blocks until ESTABLISHED.
    cm.accept(child, Some(&ConnParam::default())).unwrap();
    assert_eq!(
        cm.sync_event(child).unwrap().unwrap().kind,
        EventKind::Established
    );
    let (cid, cev) = client.join().unwrap();
    assert_eq!(cev.kind, EventKind::Established);
    assert_eq!(cev.private_data.len(), 196);
    // get_request on an asynchronous listener is EINVAL.
    let ch = cm.create_event_channel().unwrap();
    let (al, _) = self::listener(&cm, ch, PortSpace::TCP, 0);
    assert_eq!(cm.get_request(al).unwrap_err().errno, Errno::EINVAL);
    cm.destroy_id(al).unwrap();
    cm.destroy_event_channel(ch).unwrap();
    cm.destroy_id(listener).unwrap();
    cm.destroy_id(cid).unwrap();
    cm.destroy_id(child).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn destroying_an_id_blocked_in_another_thread_is_ebusy() {
    let cm = Arc::new(VerbsBackend::new());
    let addr = fresh_addr();
    let listener = cm.create_id(None, 0, PortSpace::TCP).unwrap();
    cm.bind_addr(listener, addr).unwrap();
    cm.listen(listener, 4).unwrap();
    let waiter = {
        let cm = Arc::clone(&cm);
        std::thread::spawn(move || cm.get_request(listener).unwrap())
    };
    std::thread::sleep(Duration::from_millis(300));
    let e = cm.destroy_id(listener).unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");
    // A request unblocks the waiter; destroying its unaccepted id rejects the client (§19).
    let ch = cm.create_event_channel().unwrap();
    let client = resolved_client(&cm, ch, PortSpace::TCP, addr);
    cm.create_qp(client, &QpInitAttr::new(QpType::Rc)).unwrap();
    cm.connect(client, Some(&ConnParam::default())).unwrap();
    let child = waiter.join().unwrap();
    cm.destroy_id(child).unwrap();
    let rej = expect(&cm, ch, EventKind::Rejected);
    assert_eq!(rej.status(), 28);
    cm.ack_cm_event(rej).unwrap();
    cm.destroy_id(listener).unwrap();
    cm.destroy_id(client).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn dropping_the_backend_destroys_what_is_left() {
    let addr = fresh_addr();
    {
        let p = Pair::connect();
        let cm = &p.cm;
        let l2 = cm.create_id(Some(p.sch), 0, PortSpace::TCP).unwrap();
        cm.bind_addr(l2, addr).unwrap();
        cm.listen(l2, 1).unwrap();
        // An unacked event, a QP, a connection, a listener: all dropped with the backend.
        cm.write_cm_event(p.client, EventKind::User, 0, 0).unwrap();
        let _unacked = cm.get_cm_event(p.cch, Wait::Timeout(STEP)).unwrap();
    }
    // The port is free again: the listener was destroyed.
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    cm.bind_addr(id, addr).unwrap();
    cm.listen(id, 1).unwrap();
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn resolve_addrinfo_dns_mode() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    assert_eq!(cm.query_addrinfo(id).unwrap_err().errno, Errno::ENOENT);
    let ip = rdma_ip().to_string();
    let hints = AddrInfoHints::new(cmtwin::rai::NUMERICHOST).with_port_space(PortSpace::TCP);
    cm.resolve_addrinfo(id, Some(&ip), Some("7471"), Some(&hints))
        .unwrap();
    assert_eq!(
        cm.resolve_addrinfo(id, Some(&ip), Some("7471"), Some(&hints))
            .unwrap_err()
            .errno,
        Errno::EBUSY
    );
    expect_ack(&cm, ch, EventKind::AddrinfoResolved);
    let list = cm.query_addrinfo(id).unwrap();
    assert!(
        list.iter()
            .any(|a| a.dst_addr == Some(SocketAddr::new(rdma_ip(), 7471))),
        "{list:?}"
    );
    assert_eq!(cm.query_addrinfo(id).unwrap_err().errno, Errno::ENOENT);
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();

    // A synchronous id: the call returns once resolved; the event is the id's current event.
    let sid = cm.create_id(None, 0, PortSpace::TCP).unwrap();
    cm.resolve_addrinfo(sid, Some(&ip), Some("7472"), Some(&hints))
        .unwrap();
    let ev = cm.sync_event(sid).unwrap().expect("current event");
    assert_eq!((ev.kind, ev.status), (EventKind::AddrinfoResolved, 0));
    assert!(!cm.query_addrinfo(sid).unwrap().is_empty());
    if !VerbsBackend::has_native_write_cm_event() {
        let e = cm.write_cm_event(sid, EventKind::User, 0, 0).unwrap_err();
        assert_eq!(e.errno, Errno::EOPNOTSUPP, "{e}");
    }
    cm.destroy_id(sid).unwrap();
}

/// Waits for a child process (bounded) and returns its exit status and output.
fn finish(child: std::process::Child, what: &str) -> (bool, String) {
    let t0 = Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn ucmatose(args: &[&str]) -> std::process::Child {
    std::process::Command::new("ucmatose")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ucmatose (rdmacm-utils)")
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_client_with_rdma_core_ucmatose_server() {
    // ucmatose -C 0: connect/accept with QPs, no data; the server then disconnects and waits
    // for the DREP (which our disconnect sends), and exits 0.
    let addr = fresh_addr();
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let server = ucmatose(&["-b", &ip, "-p", &port, "-C", "0"]);
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let t0 = Instant::now();
    let client = loop {
        // Until ucmatose listens, the connect is REJECTED with 8.
        let id = resolved_client(&cm, ch, PortSpace::TCP, addr);
        cm.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
        cm.connect(id, Some(&ConnParam::default())).unwrap();
        let e = cm.get_cm_event(ch, Wait::Timeout(STEP)).unwrap();
        let (kind, status) = (e.kind(), e.status());
        cm.ack_cm_event(e).unwrap();
        if kind == EventKind::Established {
            break id;
        }
        assert_eq!((kind, status), (EventKind::Rejected, 8));
        cm.destroy_id(id).unwrap();
        assert!(t0.elapsed() < STEP, "ucmatose never listened");
        std::thread::sleep(Duration::from_millis(100));
    };
    expect_ack(&cm, ch, EventKind::Disconnected);
    cm.disconnect(client).unwrap();
    let (ok, out) = finish(server, "ucmatose server");
    assert!(ok, "{out}");
    eprintln!("interop with the ucmatose server took {:?}", t0.elapsed());
    cm.destroy_id(client).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_ucmatose_client_with_cmtwin_server() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let (listener, addr) = listener(&cm, ch, PortSpace::TCP, 0);
    let t0 = Instant::now();
    let client = ucmatose(&[
        "-s",
        &addr.ip().to_string(),
        "-p",
        &addr.port().to_string(),
        "-C",
        "0",
    ]);
    let req = expect(&cm, ch, EventKind::ConnectRequest);
    let server = req.id();
    assert_eq!(req.private_data().len(), 56);
    cm.ack_cm_event(req).unwrap();
    cm.create_qp(server, &QpInitAttr::new(QpType::Rc)).unwrap();
    cm.accept(server, Some(&ConnParam::default())).unwrap();
    expect_ack(&cm, ch, EventKind::Established);
    // The ucmatose client waits for our DREQ, answers it, and exits 0.
    cm.disconnect(server).unwrap();
    expect_ack(&cm, ch, EventKind::Disconnected);
    let (ok, out) = finish(client, "ucmatose client");
    assert!(ok, "{out}");
    eprintln!("interop with the ucmatose client took {:?}", t0.elapsed());
    cm.destroy_id(server).unwrap();
    cm.destroy_id(listener).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

/// How many pings and messages the interop runs exchange.
const INTEROP_COUNT: u32 = 10;

fn rping(args: &[&str]) -> std::process::Child {
    std::process::Command::new("rping")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rping (rdmacm-utils)")
}

/// The lines of `out` that start with `prefix`, without it.
fn lines_after<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines().filter_map(|l| l.strip_prefix(prefix)).collect()
}

/// The texts the pings carry (each ping's buffer up to its NUL).
fn ping_texts(size: usize) -> Vec<String> {
    (0..INTEROP_COUNT)
        .map(|p| {
            let d = cmtwin_tests::ports::rping::ping_data(p, size);
            String::from_utf8(d[..size - 1].to_vec()).unwrap()
        })
        .collect()
}

/// Runs `serve` on a thread once its port is known, then lets `client` start (the C tools do
/// not retry a rejected connect, so the server must be listening first; `serve` gets a
/// moment for its bind and listen).
fn serve_then<T: Send + 'static>(
    serve: impl FnOnce(SocketAddr) -> T + Send + 'static,
) -> (SocketAddr, std::thread::JoinHandle<T>) {
    let addr = fresh_addr();
    let server = std::thread::spawn(move || serve(addr));
    std::thread::sleep(Duration::from_millis(500));
    (addr, server)
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_rping_client_with_rdma_core_rping_server() {
    use cmtwin_tests::ports::rping::{client, Options};
    let addr = fresh_addr();
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let t0 = Instant::now();
    let server = rping(&["-s", "-v", "-V", "-a", &ip, "-p", &port]);
    let opts = Options {
        count: INTEROP_COUNT,
        patience: STEP,
        ..Options::default()
    };
    let summary = client(&VerbsBackend::new(), addr, &opts);
    let (ok, out) = finish(server, "rping server");
    let summary = summary.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(summary.pings, INTEROP_COUNT, "{out}");
    assert!(ok, "{out}");
    // What the C server read from our buffers, ping by ping.
    assert_eq!(
        lines_after(&out, "server ping data: "),
        ping_texts(64),
        "{out}"
    );
    eprintln!("interop with the rping server took {:?}", t0.elapsed());
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_rping_client_with_cmtwin_server() {
    use cmtwin_tests::ports::rping::{server, Options};
    let t0 = Instant::now();
    // The server checks every buffer it reads against the ping's expected text.
    let (addr, served) = serve_then(|addr| server(&VerbsBackend::new(), addr, &Options::default()));
    let count = INTEROP_COUNT.to_string();
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let client = rping(&["-c", "-v", "-V", "-C", &count, "-a", &ip, "-p", &port]);
    let (ok, out) = finish(client, "rping client");
    let summary = served
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(ok, "{out}");
    assert_eq!(summary.pings, INTEROP_COUNT, "{out}");
    // What the C client found in its sink after our RDMA writes (it compared it, -V).
    assert_eq!(lines_after(&out, "ping data: "), ping_texts(64), "{out}");
    eprintln!("interop with the rping client took {:?}", t0.elapsed());
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_ucmatose_client_with_rdma_core_ucmatose_server_exchanging_messages() {
    use cmtwin_tests::ports::ucmatose::{client, Options};
    let addr = fresh_addr();
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let t0 = Instant::now();
    // ucmatose's defaults: 10 messages of 100 bytes each way.
    let server = ucmatose(&["-b", &ip, "-p", &port]);
    let opts = Options {
        patience: STEP,
        ..Options::default()
    };
    let summary = client(&VerbsBackend::new(), addr, &opts);
    let (ok, out) = finish(server, "ucmatose server");
    let summary = summary.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(ok, "{out}");
    assert!(out.contains("data transfers complete"), "{out}");
    assert_eq!(summary.received, INTEROP_COUNT, "{out}");
    // The server had all our messages before it disconnected: none of ours was lost.
    assert_eq!(summary.sent + summary.flushed, INTEROP_COUNT, "{summary:?}");
    eprintln!(
        "interop with the ucmatose server took {:?} ({summary:?})",
        t0.elapsed()
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_ucmatose_client_with_cmtwin_server_exchanging_messages() {
    use cmtwin_tests::ports::ucmatose::{server, Options, Summary};
    let t0 = Instant::now();
    let (addr, served) = serve_then(|addr| server(&VerbsBackend::new(), addr, &Options::default()));
    let client = ucmatose(&["-s", &addr.ip().to_string(), "-p", &addr.port().to_string()]);
    let (ok, out) = finish(client, "ucmatose client");
    let summary = served
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(ok, "{out}");
    assert!(out.contains("data transfers complete"), "{out}");
    let all = Summary {
        received: INTEROP_COUNT,
        sent: INTEROP_COUNT,
        flushed: 0,
    };
    assert_eq!(summary, all, "{out}");
    eprintln!("interop with the ucmatose client took {:?}", t0.elapsed());
}

/// rdma-core's `udaddy` with `args` (it always uses port 7174: its `-p` is a port space).
fn udaddy(args: &[&str]) -> std::process::Child {
    std::process::Command::new("udaddy")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("udaddy (rdmacm-utils)")
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_udaddy_client_with_rdma_core_udaddy_server() {
    use cmtwin_tests::ports::udaddy::{client, Options, DEFAULT_PORT};
    let addr = SocketAddr::new(rdma_ip(), DEFAULT_PORT);
    let t0 = Instant::now();
    // udaddy's defaults: 10 datagrams of 100 bytes each way.
    let server = udaddy(&["-b", &addr.ip().to_string()]);
    let opts = Options {
        patience: STEP,
        ..Options::default()
    };
    let summary = client(&VerbsBackend::new(), addr, &opts);
    let (ok, out) = finish(server, "udaddy server");
    let summary = summary.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(ok, "{out}");
    assert!(out.contains("data transfers complete"), "{out}");
    assert_eq!(summary.received, INTEROP_COUNT, "{out}");
    assert_eq!(summary.sent, INTEROP_COUNT, "{out}");
    eprintln!(
        "interop with the udaddy server took {:?} ({summary:?})",
        t0.elapsed()
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_udaddy_client_with_cmtwin_udaddy_server() {
    use cmtwin_tests::ports::udaddy::{server, Options, Summary, DEFAULT_PORT};
    let addr = SocketAddr::new(rdma_ip(), DEFAULT_PORT);
    let t0 = Instant::now();
    let served =
        std::thread::spawn(move || server(&VerbsBackend::new(), addr, &Options::default()));
    std::thread::sleep(Duration::from_millis(500));
    let client = udaddy(&["-s", &addr.ip().to_string()]);
    let (ok, out) = finish(client, "udaddy client");
    let summary = served
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(ok, "{out}");
    assert!(out.contains("data transfers complete"), "{out}");
    let all = Summary {
        received: INTEROP_COUNT,
        sent: INTEROP_COUNT,
    };
    assert_eq!(summary, all, "{out}");
    eprintln!("interop with the udaddy client took {:?}", t0.elapsed());
}

/// rdma-core's `mckey` with `args`. Its output is block-buffered into the pipe, so it can be
/// read only once the process has ended: the tests give it a head start instead of waiting
/// for its "joined" line.
fn mckey(args: &[&str]) -> std::process::Child {
    std::process::Command::new("mckey")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mckey (rdmacm-utils)")
}

/// The bytes of each message of the mckey interop runs (mckey's default).
const MCKEY_SIZE: u32 = 100;

/// The options of the Rust side of the mckey interop runs: mckey's defaults (10 messages of
/// 100 bytes, the 3 s pause).
fn mckey_options() -> cmtwin_tests::ports::mckey::Options {
    cmtwin_tests::ports::mckey::Options {
        message_count: INTEROP_COUNT,
        message_size: MCKEY_SIZE,
        ..Default::default()
    }
}

/// Checks the output of a C `mckey` that ran its exchange to the end.
fn assert_mckey_completed(ok: bool, out: &str) {
    assert!(ok, "{out}");
    assert!(out.contains("mckey: joined dgid: "), "{out}");
    assert!(out.contains("data transfers complete"), "{out}");
    assert!(out.contains("return status 0"), "{out}");
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_mckey_receiver_with_cmtwin_mckey_sender() {
    use cmtwin_tests::ports::mckey::{member, Role};
    // Both members share the one rxe device: rxe gives a group datagram to every QP attached
    // to the group on the device (the IP stack loops the packet back to it).
    let group: SocketAddr = "239.1.77.1:0".parse().unwrap();
    let local = SocketAddr::new(rdma_ip(), 0);
    let (count, size) = (INTEROP_COUNT.to_string(), MCKEY_SIZE.to_string());
    let ip = rdma_ip().to_string();
    let t0 = Instant::now();
    let args = ["-m", "239.1.77.1", "-b", &ip, "-C", &count, "-S", &size];
    let receiver = mckey(&args);
    // The receiver posts its receives before it joins; our sender pauses 3 s after its own
    // join, as mckey does, before it sends.
    std::thread::sleep(Duration::from_millis(500));
    let sent = member(
        &VerbsBackend::new(),
        Role::Sender,
        Some(local),
        group,
        &mckey_options(),
    );
    let (ok, out) = finish(receiver, "mckey receiver");
    let sent = sent.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_mckey_completed(ok, &out);
    assert_eq!(sent.sent, INTEROP_COUNT, "{out}");
    assert_eq!(sent.group.qp_num, 0xFF_FFFF, "{out}");
    eprintln!(
        "interop with the mckey receiver took {:?} ({sent:?})",
        t0.elapsed()
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_mckey_sender_with_cmtwin_mckey_receiver() {
    use cmtwin_tests::ports::mckey::{member, Role};
    let group: SocketAddr = "239.1.77.2:0".parse().unwrap();
    let local = SocketAddr::new(rdma_ip(), 0);
    let t0 = Instant::now();
    let received = std::thread::spawn(move || {
        member(
            &VerbsBackend::new(),
            Role::Receiver,
            Some(local),
            group,
            &mckey_options(),
        )
    });
    // Our receiver's receives are posted before its join; the C sender pauses 3 s after its
    // join before it sends.
    std::thread::sleep(Duration::from_millis(500));
    let (count, size) = (INTEROP_COUNT.to_string(), MCKEY_SIZE.to_string());
    let ip = rdma_ip().to_string();
    let args = [
        "-m",
        "239.1.77.2",
        "-b",
        &ip,
        "-s",
        "-C",
        &count,
        "-S",
        &size,
    ];
    let (ok, out) = finish(mckey(&args), "mckey sender");
    let summary = received
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_mckey_completed(ok, &out);
    assert_eq!(summary.received, INTEROP_COUNT, "{out}");
    assert_eq!(
        summary.sources.len(),
        1,
        "one sending QP: {summary:?}\n{out}"
    );
    assert_eq!(summary.sources[0].1, INTEROP_COUNT, "{out}");
    eprintln!(
        "interop with the mckey sender took {:?} ({summary:?})",
        t0.elapsed()
    );
}

/// rdma-core's synchronous example `tool` (`rdma_server`, `rdma_client`, `rdma_xserver`,
/// `rdma_xclient`) with `args`.
fn rdma_example(tool: &str, args: &[&str]) -> std::process::Child {
    std::process::Command::new(tool)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool} (rdmacm-utils): {e}"))
}

/// What the C tools send: their static buffers, never written (16 zero bytes).
const C_TOOL_MESSAGE: [u8; 16] = [0; 16];

/// Checks the output of a C tool of the synchronous pair that ran to the end: it prints
/// `<argv[0]>: end 0` (its return value) and exits 0.
fn assert_rdma_example_completed(tool: &str, ok: bool, out: &str) {
    assert!(ok, "{out}");
    assert!(out.contains(&format!("{tool}: start")), "{out}");
    assert!(out.contains(&format!("{tool}: end 0")), "{out}");
}

/// Our client of `flavor` against the C server `tool` (with `args`, then `-p <port>`), which
/// it finds listening or not yet (it retries refused connects): our summary once the tool
/// ended its run (`<tool>: end 0`).
fn cmtwin_client_with_c_server(
    flavor: cmtwin_tests::ports::rdma_server_client::Flavor,
    tool: &str,
    args: &[&str],
) -> cmtwin_tests::ports::rdma_server_client::Summary {
    use cmtwin_tests::ports::rdma_server_client::{client, Options};
    let addr = fresh_addr();
    let port = addr.port().to_string();
    let t0 = Instant::now();
    let args: Vec<&str> = args.iter().copied().chain(["-p", &port]).collect();
    let server = rdma_example(tool, &args);
    let opts = Options {
        patience: STEP,
        ..Options::client(flavor)
    };
    let summary = client(&VerbsBackend::new(), addr, &opts);
    let (ok, out) = finish(server, tool);
    let summary = summary.unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_rdma_example_completed(tool, ok, &out);
    assert!(!out.contains("doesn't support IBV_SEND_INLINE"), "{out}");
    eprintln!("interop with {tool} took {:?} ({summary:?})", t0.elapsed());
    summary
}

/// The C client `tool` (with `-s <ip> -p <port>` and `args`) against our server of `flavor`,
/// listening first: our server's summary once the tool ended its run (`<tool>: end 0`).
fn c_client_with_cmtwin_server(
    flavor: cmtwin_tests::ports::rdma_server_client::Flavor,
    tool: &str,
    args: &[&str],
) -> cmtwin_tests::ports::rdma_server_client::Summary {
    use cmtwin_tests::ports::rdma_server_client::{server, Options};
    let t0 = Instant::now();
    let (addr, served) =
        serve_then(move |addr| server(&VerbsBackend::new(), addr, &Options::server(flavor)));
    let (ip, port) = (addr.ip().to_string(), addr.port().to_string());
    let args: Vec<&str> = ["-s", &ip, "-p", &port]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let (ok, out) = finish(rdma_example(tool, &args), tool);
    let summary = served
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_rdma_example_completed(tool, ok, &out);
    assert!(!out.contains("doesn't support IBV_SEND_INLINE"), "{out}");
    eprintln!("interop with {tool} took {:?} ({summary:?})", t0.elapsed());
    summary
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_client_with_rdma_core_rdma_server() {
    use cmtwin_tests::ports::rdma_server_client::Flavor;
    let ip = rdma_ip().to_string();
    let summary = cmtwin_client_with_c_server(Flavor::Plain, "rdma_server", &["-s", &ip]);
    // rdma_server answered our message with its own; our QP had room for it inline.
    assert_eq!(summary.received, Some(C_TOOL_MESSAGE));
    assert_eq!((summary.max_inline_data, summary.inline), (16, true));
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_rdma_client_with_cmtwin_server() {
    use cmtwin_tests::ports::rdma_server_client::Flavor;
    // rdma_client waited for our answer (its receive completion) before it ended.
    let summary = c_client_with_cmtwin_server(Flavor::Plain, "rdma_client", &[]);
    assert_eq!(summary.received, Some(C_TOOL_MESSAGE));
    assert_eq!((summary.sent, summary.inline), (true, true));
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_cmtwin_xclient_with_rdma_core_rdma_xserver() {
    use cmtwin_tests::ports::rdma_server_client::Flavor;
    // rdma_xserver listens on the wildcard address (it has no -s).
    let summary = cmtwin_client_with_c_server(Flavor::X, "rdma_xserver", &["-c", "r"]);
    // Its accept carried its SRQ number, 0 in RC mode; our message went inline. Whether
    // its ACK came before rdma_xserver's disconnect is a race (`Flavor::X`): printed.
    assert_eq!((summary.srqn, summary.received), (Some(0), None));
    assert!(summary.inline);
    eprintln!("our send acknowledged: {}", summary.acknowledged);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn interop_rdma_core_rdma_xclient_with_cmtwin_xserver() {
    use cmtwin_tests::ports::rdma_server_client::Flavor;
    // Its inline send (no inline room asked for) reached our receive.
    let summary = c_client_with_cmtwin_server(Flavor::X, "rdma_xclient", &["-c", "r"]);
    assert_eq!(summary.received, Some(C_TOOL_MESSAGE));
    assert!(!summary.sent);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn concurrent_calls_from_many_threads_never_crash() {
    // Threads create, use and destroy ids on one channel while others fetch and acknowledge
    // events and try to destroy ids they do not own. Every failure must be a clean error.
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    let cm = Arc::new(VerbsBackend::new());
    let ch = cm.create_event_channel().unwrap();
    let ids = Arc::new(Mutex::new(Vec::<IdHandle>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let allowed = [Errno::ENOENT, Errno::EBUSY, Errno::EAGAIN, Errno::ETIMEDOUT];
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let (cm, ids, stop) = (Arc::clone(&cm), Arc::clone(&ids), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = cm.create_id(Some(ch), t, PortSpace::TCP).unwrap();
                ids.lock().unwrap().push(id);
                for k in 0..3 {
                    if let Err(e) = cm.write_cm_event(id, EventKind::User, 0, k) {
                        assert_eq!(e.errno, Errno::ENOENT, "{e}");
                    }
                }
                if n & 1 == 0 {
                    let _ = cm.resolve_addr(id, None, fresh_addr(), Duration::from_secs(1));
                }
                let victim = {
                    let mut v = ids.lock().unwrap();
                    if v.is_empty() {
                        continue;
                    }
                    let i = (n as usize * 7 + t as usize) % v.len();
                    v.swap_remove(i)
                };
                match cm.destroy_id(victim) {
                    Ok(()) => {}
                    Err(e) if e.errno == Errno::EBUSY => ids.lock().unwrap().push(victim),
                    Err(e) => assert_eq!(e.errno, Errno::ENOENT, "{e}"),
                }
                n += 1;
            }
            n
        }));
    }
    for _ in 0..2 {
        let (cm, stop) = (Arc::clone(&cm), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                match cm.get_cm_event(ch, Wait::Timeout(Duration::from_millis(20))) {
                    Ok(e) => {
                        cm.ack_cm_event(e).unwrap();
                        n += 1;
                    }
                    Err(e) => assert!(allowed.contains(&e.errno), "{e}"),
                }
            }
            n
        }));
    }
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    eprintln!("iterations / events per thread: {counts:?}");
    // Clean up what is left.
    while let Ok(e) = cm.get_cm_event(ch, Wait::NonBlocking) {
        cm.ack_cm_event(e).unwrap();
    }
    for id in ids.lock().unwrap().drain(..) {
        cm.destroy_id(id).unwrap();
    }
    cm.destroy_event_channel(ch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn listener_destroyed_while_requests_arrive() {
    // Requests race with the listener's destroy while another thread fetches them: every
    // client ends REJECTED (8: no listener any more, 28: request refused or its id destroyed),
    // and nothing crashes or hangs.
    use std::sync::atomic::AtomicBool;
    let cm = Arc::new(VerbsBackend::new());
    let sch = cm.create_event_channel().unwrap();
    let cch = cm.create_event_channel().unwrap();
    for round in 0..3 {
        let (listener, addr) = listener(&cm, sch, PortSpace::TCP, 0);
        let clients: Vec<IdHandle> = (0..4)
            .map(|_| {
                let id = resolved_client(&cm, cch, PortSpace::TCP, addr);
                cm.create_qp(id, &QpInitAttr::new(QpType::Rc)).unwrap();
                id
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let getter = {
            let (cm, stop) = (Arc::clone(&cm), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut requests = 0;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(e) = cm.get_cm_event(sch, Wait::Timeout(Duration::from_millis(20))) {
                        let (kind, id) = (e.kind(), e.id());
                        cm.ack_cm_event(e).unwrap();
                        if kind == EventKind::ConnectRequest {
                            requests += 1;
                            cm.destroy_id(id).unwrap();
                        }
                    }
                }
                requests
            })
        };
        for &c in &clients {
            cm.connect(c, Some(&ConnParam::default())).unwrap();
        }
        if round > 0 {
            std::thread::sleep(Duration::from_millis(round * 2));
        }
        let t0 = Instant::now();
        loop {
            match cm.destroy_id(listener) {
                Ok(()) => break,
                Err(e) => assert_eq!(e.errno, Errno::EBUSY, "{e}"),
            }
            assert!(t0.elapsed() < STEP, "listener never destroyable");
        }
        let mut statuses = Vec::new();
        while statuses.len() < clients.len() {
            let e = expect(&cm, cch, EventKind::Rejected);
            statuses.push(e.status());
            cm.ack_cm_event(e).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let requests = getter.join().unwrap();
        assert!(statuses.iter().all(|s| *s == 8 || *s == 28), "{statuses:?}");
        eprintln!("round {round}: {requests} requests fetched, client statuses {statuses:?}");
        for c in clients {
            cm.destroy_id(c).unwrap();
        }
    }
    cm.destroy_event_channel(sch).unwrap();
    cm.destroy_event_channel(cch).unwrap();
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn queries_and_migrations_race_with_event_processing() {
    // While librdmacm processes ADDR_RESOLVED events (writing the ids' addresses and device) in
    // the fetching threads, other threads read those ids' addresses and QP numbers, and two
    // threads migrate ids between two channels in both directions at once (each migration
    // holds both channels' fetch locks). Every read is consistent, nothing deadlocks.
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::{mpsc, Mutex};
    let cm = Arc::new(VerbsBackend::new());
    let chans = [
        cm.create_event_channel().unwrap(),
        cm.create_event_channel().unwrap(),
    ];
    // Live ids with the destination each resolves to.
    let ids = Arc::new(Mutex::new(Vec::<(IdHandle, SocketAddr)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let seen_local = Arc::new(AtomicU64::new(0));
    let migrated = Arc::new(AtomicU64::new(0));
    let ip = rdma_ip();
    let mut threads = Vec::new();
    for ch in chans {
        let (cm, stop) = (Arc::clone(&cm), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match cm.get_cm_event(ch, Wait::Timeout(Duration::from_millis(20))) {
                    Ok(e) => cm.ack_cm_event(e).unwrap(),
                    Err(e) => assert_eq!(e.errno, Errno::ETIMEDOUT, "{e}"),
                }
            }
        }));
    }
    {
        let (cm, ids, stop) = (Arc::clone(&cm), Arc::clone(&ids), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let id = cm.create_id(Some(chans[0]), 0, PortSpace::TCP).unwrap();
                let dst = fresh_addr();
                cm.resolve_addr(id, None, dst, Duration::from_secs(1))
                    .unwrap();
                let mut live = ids.lock().unwrap();
                live.push((id, dst));
                if live.len() > 8 {
                    let (old, old_dst) = live.remove(0);
                    drop(live);
                    match cm.destroy_id(old) {
                        Ok(()) => {}
                        Err(e) if e.errno == Errno::EBUSY => {
                            ids.lock().unwrap().push((old, old_dst))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    {
        let (cm, ids, stop, seen) = (
            Arc::clone(&cm),
            Arc::clone(&ids),
            Arc::clone(&stop),
            Arc::clone(&seen_local),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let live = ids.lock().unwrap().clone();
                for (id, dst) in live {
                    match cm.local_addr(id) {
                        Ok(Some(a)) => {
                            assert_eq!(a.ip(), ip, "{id}");
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => {}
                        Err(e) => assert_eq!(e.errno, Errno::ENOENT, "{e}"),
                    }
                    match cm.peer_addr(id) {
                        Ok(Some(a)) => assert_eq!(a, dst, "{id}"),
                        Ok(None) => {}
                        Err(e) => assert_eq!(e.errno, Errno::ENOENT, "{e}"),
                    }
                    match cm.qp_num(id) {
                        Ok(n) => assert_eq!(n, None),
                        Err(e) => assert_eq!(e.errno, Errno::ENOENT, "{e}"),
                    }
                }
            }
        }));
    }
    for direction in 0..2 {
        let (cm, ids, stop, migrated) = (
            Arc::clone(&cm),
            Arc::clone(&ids),
            Arc::clone(&stop),
            Arc::clone(&migrated),
        );
        threads.push(std::thread::spawn(move || {
            let mut n = direction;
            while !stop.load(Ordering::Relaxed) {
                let pick = {
                    let live = ids.lock().unwrap();
                    (!live.is_empty()).then(|| live[n % live.len()].0)
                };
                n += 1;
                let Some(id) = pick else { continue };
                match cm.migrate_id(id, Some(chans[(n + direction) % 2])) {
                    Ok(()) => {
                        migrated.fetch_add(1, Ordering::Relaxed);
                    }
                    // Unacknowledged events, a destroy or another migration in progress.
                    Err(e) => assert!([Errno::EBUSY, Errno::ENOENT].contains(&e.errno), "{e}"),
                }
            }
        }));
    }
    // At least 3 s, and until both kinds of work happened at least once (under valgrind on a
    // busy machine the threads may need far longer to get going); at most 5 minutes.
    let started = std::time::Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let busy = seen_local.load(Ordering::Relaxed) > 0 && migrated.load(Ordering::Relaxed) > 0;
        let waited = started.elapsed();
        if (busy && waited >= Duration::from_secs(3)) || waited >= Duration::from_secs(300) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for t in threads {
            let r = t.join();
            let _ = done_tx.send(r.is_ok());
        }
    });
    for _ in 0..6 {
        let ok = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a thread did not stop: deadlock");
        assert!(ok, "a thread panicked");
    }
    let (seen, moved) = (
        seen_local.load(Ordering::Relaxed),
        migrated.load(Ordering::Relaxed),
    );
    eprintln!("{seen} resolved local addresses read, {moved} migrations");
    assert!(
        seen > 0 && moved > 0,
        "{seen} addresses read, {moved} migrations"
    );
    for ch in chans {
        while let Ok(e) = cm.get_cm_event(ch, Wait::NonBlocking) {
            cm.ack_cm_event(e).unwrap();
        }
    }
    for (id, _) in ids.lock().unwrap().drain(..) {
        cm.destroy_id(id).unwrap();
    }
    for ch in chans {
        cm.destroy_event_channel(ch).unwrap();
    }
}

/// Runs a command (iproute2's `ip`/`rdma`) and checks it succeeded.
fn run(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `rdma link delete <dev>` in the background: the kernel finishes it only once this
/// process has released the device (rxe cannot disassociate user contexts).
fn spawn_link_delete(dev: &str) -> std::process::Child {
    std::process::Command::new("rdma")
        .args(["link", "delete", dev])
        .spawn()
        .expect("the rdma tool (iproute2)")
}

#[track_caller]
fn wait_child(mut child: std::process::Child, what: &str, mut each: impl FnMut()) -> Duration {
    let t0 = Instant::now();
    loop {
        each();
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "{what} failed");
            return t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{what} hangs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn zz_device_removal_then_rxe_is_re_added() {
    // Named to run last (tests run in name order with --test-threads=1); it re-adds rxe0.
    // A second device (rxe1 on dummy1) exists meanwhile: librdmacm 44 releases a removed
    // device only when it re-reads a non-empty device list.
    run("ip", &["link", "add", "dummy1", "type", "dummy"]);
    run("ip", &["link", "set", "dummy1", "up"]);
    run(
        "rdma",
        &["link", "add", "rxe1", "type", "rxe", "netdev", "dummy1"],
    );
    let pair = Pair::connect();
    let cm = &pair.cm;
    let delete = spawn_link_delete("rxe0");
    let mut seen = Vec::new();
    let t0 = Instant::now();
    // A DISCONNECTED may come first: a peer id torn down before this one sends a DREQ (§8.1).
    let removed = |seen: &Vec<(EventKind, IdHandle)>| {
        [pair.client, pair.server, pair.listener]
            .iter()
            .all(|id| seen.contains(&(EventKind::DeviceRemoval, *id)))
    };
    while !removed(&seen) && t0.elapsed() < STEP {
        for ch in [pair.sch, pair.cch] {
            if let Ok(e) = cm.get_cm_event(ch, Wait::Timeout(Duration::from_millis(100))) {
                seen.push((e.kind(), e.id()));
                cm.ack_cm_event(e).unwrap();
            }
        }
    }
    eprintln!("after rdma link delete: {seen:?} within {:?}", t0.elapsed());
    for id in [pair.client, pair.server, pair.listener] {
        assert!(
            seen.contains(&(EventKind::DeviceRemoval, id)),
            "DEVICE_REMOVAL for {id}: {seen:?}"
        );
    }
    // Calls on a removed id fail (EINVAL or ENXIO, §8.3); destroy works.
    let e = cm
        .connect(pair.client, Some(&ConnParam::default()))
        .unwrap_err();
    assert!(matches!(e.errno, Errno::EINVAL | Errno::ENXIO), "{e}");
    cm.destroy_id(pair.client).unwrap();
    cm.destroy_id(pair.server).unwrap();
    cm.destroy_id(pair.listener).unwrap();
    cm.destroy_event_channel(pair.sch).unwrap();
    cm.destroy_event_channel(pair.cch).unwrap();
    let took = wait_child(delete, "rdma link delete rxe0", || {});
    eprintln!("rdma link delete rxe0 finished {took:?} after the ids were destroyed");
    run(
        "rdma",
        &["link", "add", "rxe0", "type", "rxe", "netdev", "dummy0"],
    );
    let delete = spawn_link_delete("rxe1");
    // No id used rxe1, but librdmacm opened it while re-reading the device list: it lets go
    // once it sees the device gone.
    wait_child(delete, "rdma link delete rxe1", || {
        VerbsBackend::release_removed_devices();
    });
    run("ip", &["link", "delete", "dummy1"]);
    // The device is usable again.
    let p = Pair::connect();
    p.teardown();
}

/// An ADDR_RESOLVED of `id` on `ch`, fetched and not acknowledged.
fn resolved_event(cm: &VerbsBackend, ch: ChannelHandle, id: IdHandle) -> CmEvent {
    cm.resolve_addr(id, None, fresh_addr(), Duration::from_secs(2))
        .unwrap();
    expect(cm, ch, EventKind::AddrResolved)
}

/// An event dropped unacknowledged releases its ticket (the C event was acked at fetch):
/// `destroy_id` succeeds at once, whether the drop happens on this thread or another.
#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn a_dropped_event_releases_its_id_on_any_thread() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let here = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    let there = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    let event = resolved_event(&cm, ch, here);
    assert_eq!(cm.destroy_id(here).unwrap_err().errno, Errno::EBUSY);
    drop(event);
    cm.destroy_id(here).unwrap();
    let event = resolved_event(&cm, ch, there);
    std::thread::spawn(move || drop(event)).join().unwrap();
    cm.destroy_id(there).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

/// An event that outlives its backend is dropped harmlessly (the backend destroyed its ids
/// and channels; the event only holds a weak path to it), and stays readable.
#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn an_event_outliving_its_backend_is_harmless() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).unwrap();
    let event = resolved_event(&cm, ch, id);
    drop(cm);
    assert_eq!(event.kind(), EventKind::AddrResolved);
    assert_eq!(event.port_space(), PortSpace::TCP);
    drop(event);
}

/// A send-only join through `rdma_join_multicast_ex` on rxe: MULTICAST_JOIN with the
/// context, no private data, and the leave works.
#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn send_only_join_on_soft_roce() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::UDP).unwrap();
    cm.bind_addr(id, fresh_addr()).unwrap();
    let group: SocketAddr = "239.9.9.9:0".parse().unwrap();
    cm.join_multicast_ex(id, group, cmtwin::JoinFlags::SendOnlyFullMember, 0xabc)
        .unwrap();
    let join = expect(&cm, ch, EventKind::MulticastJoin);
    match join.param() {
        EventParam::Multicast { context, .. } => assert_eq!(*context, 0xabc),
        other => panic!("no multicast data: {other:?}"),
    }
    assert_eq!(join.private_data_opt(), None);
    cm.ack_cm_event(join).unwrap();
    cm.leave_multicast(id, group).unwrap();
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}

/// `destroy_id` waits, as librdmacm does, for another thread to acknowledge the id's fetched
/// event (here 300 ms later), then destroys it; alone with its unacknowledged event, it fails
/// with EBUSY after `ACK_WAIT`.
#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn destroy_id_waits_for_another_threads_acknowledgement() {
    let cm = VerbsBackend::new();
    let ch = cm.create_event_channel().unwrap();
    let id = cm.create_id(Some(ch), 0, PortSpace::UDP).unwrap();
    cm.bind_addr(id, fresh_addr()).unwrap();
    cm.write_cm_event(id, EventKind::User, 0, 1).unwrap();
    let event = cm.get_cm_event(ch, Wait::Timeout(STEP)).unwrap();
    let holder = {
        let cm = cm.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            cm.ack_cm_event(event).unwrap();
        })
    };
    let started = std::time::Instant::now();
    cm.destroy_id(id).unwrap();
    let waited = started.elapsed();
    holder.join().unwrap();
    assert!(
        waited >= Duration::from_millis(250) && waited < cmtwin_verbs::ACK_WAIT,
        "{waited:?}"
    );

    let id = cm.create_id(Some(ch), 0, PortSpace::UDP).unwrap();
    cm.bind_addr(id, fresh_addr()).unwrap();
    cm.write_cm_event(id, EventKind::User, 0, 2).unwrap();
    let event = cm.get_cm_event(ch, Wait::Timeout(STEP)).unwrap();
    let started = std::time::Instant::now();
    let e = cm.destroy_id(id).unwrap_err();
    assert_eq!(e.errno, Errno::EBUSY, "{e}");
    assert!(started.elapsed() >= cmtwin_verbs::ACK_WAIT);
    cm.ack_cm_event(event).unwrap();
    cm.destroy_id(id).unwrap();
    cm.destroy_event_channel(ch).unwrap();
}
