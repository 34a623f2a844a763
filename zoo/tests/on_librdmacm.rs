//! The zoo's bugs on the real librdmacm (Soft-RoCE in the VM: `scripts/verbs-tests-in-vm` runs
//! this with `--ignored`), for every bug whose trigger rxe produces without a fault: the same
//! ports, each side on a thread with a `VerbsBackend` of its own, as two processes would be.
//! The buggy logic fails there as on the simulator, the fixed logic passes. The other bugs
//! need a fault (device removal, message loss, an SA path failure, a power cycle), a race
//! window of the scheduler (rping -P, UCX's REJ crossing the RTU) or an unbounded wait (SPDK
//! 3592, cmtime): `zoo/README.md` says which, per bug.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use cmtwin::{Call, CmError, Errno, EventKind};
use cmtwin_verbs::VerbsBackend;
use cmtwin_zoo::connector::{connect_times, connect_until_peer_closes};
use cmtwin_zoo::peer::{serve, PeerConfig};
use cmtwin_zoo::Variant;

/// How long a passive side waits without an event before it finishes (wall time here).
const QUIET: Duration = Duration::from_secs(2);
/// The LDMS daemon's quiet period: longer than rxe's timewait (≈ 2.2 s on Linux 6.1), which
/// its TIMEWAIT_EXIT ends.
const LDMS_QUIET: Duration = Duration::from_secs(5);
/// How long the active side lets the passive side start listening.
const HEAD_START: Duration = Duration::from_millis(300);
/// The same for the first run of the process: the first device open and, under valgrind (CI
/// runs this binary under it on one bed), the first use of every code path take seconds.
const FIRST_HEAD_START: Duration = Duration::from_secs(3);

/// The head start of this run.
fn head_start() -> Duration {
    static FIRST: std::sync::Once = std::sync::Once::new();
    let mut first = false;
    FIRST.call_once(|| first = true);
    if first {
        FIRST_HEAD_START
    } else {
        HEAD_START
    }
}

/// A fresh port on the VM's RDMA address for each run.
fn server_addr() -> SocketAddr {
    static NEXT: AtomicU16 = AtomicU16::new(32_000);
    let ip: IpAddr = std::env::var("CMTWIN_RDMA_ADDR")
        .expect("CMTWIN_RDMA_ADDR names the RDMA address")
        .parse()
        .expect("an IP address");
    SocketAddr::new(ip, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `passive` and, after a head start, `active`, each on a thread with its own backend.
fn run_both<S: Send + 'static, T: Send + 'static>(
    passive: impl FnOnce(VerbsBackend) -> S + Send + 'static,
    active: impl FnOnce(VerbsBackend) -> T + Send + 'static,
) -> (S, T) {
    let server = std::thread::spawn(move || passive(VerbsBackend::new()));
    std::thread::sleep(head_start());
    let client = std::thread::spawn(move || active(VerbsBackend::new()));
    let t = client.join().expect("the active side does not panic");
    let s = server.join().expect("the passive side does not panic");
    (s, t)
}

fn peer(addr: SocketAddr) -> PeerConfig {
    PeerConfig {
        addr,
        disconnect_first: false,
        reject_all: false,
        linger: QUIET,
    }
}

// ----- perftest PR 60 --------------------------------------------------------------------------

fn perftest(variant: Variant) -> Result<cmtwin_zoo::perftest::Connection, CmError> {
    let addr = server_addr();
    let rejecting = PeerConfig {
        reject_all: true,
        ..peer(addr)
    };
    let (served, got) = run_both(
        move |cm| serve(&cm, &rejecting),
        move |cm| cmtwin_zoo::perftest::client(&cm, addr, variant),
    );
    served.expect("the rejecting peer runs");
    got
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn perftest_buggy_destroy_is_refused_for_the_unacknowledged_rejected() {
    let err = perftest(Variant::Buggy).expect_err("the buggy cleanup fails");
    assert_eq!(
        (err.call, err.errno),
        (Call::DestroyId, Errno::EBUSY),
        "{err}"
    );
    assert!(err.detail.contains("REJECTED"), "{err}");
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn perftest_fixed_cleans_up() {
    assert_eq!(
        perftest(Variant::Fixed).expect("the fixed cleanup works"),
        cmtwin_zoo::perftest::Connection::Failed(EventKind::Rejected)
    );
}

// ----- libfabric PR 9622 -------------------------------------------------------------------

fn reject_leak(variant: Variant) -> (Result<usize, CmError>, Result<Vec<EventKind>, CmError>) {
    let addr = server_addr();
    run_both(
        move |cm| cmtwin_zoo::libfabric_reject_leak::rejecting_server(&cm, addr, QUIET, variant),
        move |cm| connect_times(&cm, addr, 3),
    )
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libfabric_9622_buggy_leaks_the_rejected_ids() {
    let (server, client) = reject_leak(Variant::Buggy);
    assert_eq!(
        client.expect("the client runs"),
        vec![EventKind::Rejected; 3]
    );
    let err = server.expect_err("the endpoint's close finds the leaked ids");
    assert_eq!(
        (err.call, err.errno),
        (Call::DestroyEventChannel, Errno::EBUSY),
        "{err}"
    );
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libfabric_9622_fixed_destroys_them() {
    let (server, client) = reject_leak(Variant::Fixed);
    assert_eq!(
        client.expect("the client runs"),
        vec![EventKind::Rejected; 3]
    );
    assert_eq!(server.expect("no leak"), 3);
}

// ----- libfabric de5b92d00 -----------------------------------------------------------------

type RejectSides = (
    Result<Vec<cmtwin_zoo::libfabric_reject_closed::RejectResult>, CmError>,
    Result<Vec<EventKind>, CmError>,
);

fn reject_closed(variant: Variant) -> RejectSides {
    let addr = server_addr();
    run_both(
        move |cm| cmtwin_zoo::libfabric_reject_closed::refusing_server(&cm, addr, QUIET, variant),
        move |cm| connect_times(&cm, addr, 1),
    )
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libfabric_de5b92d00_buggy_rejects_through_the_destroyed_id() {
    let (server, client) = reject_closed(Variant::Buggy);
    let err = server.expect_err("the stale id is refused");
    assert_eq!(
        (err.call, err.errno),
        (Call::Reject, Errno::ENOENT),
        "{err}"
    );
    assert_eq!(client.expect("the client runs")[0], EventKind::Rejected);
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libfabric_de5b92d00_fixed_refuses_cleanly() {
    use cmtwin_zoo::libfabric_reject_closed::RejectResult;
    let (server, client) = reject_closed(Variant::Fixed);
    assert_eq!(
        server.expect("the fixed reject path works"),
        vec![RejectResult::Busy]
    );
    assert_eq!(client.expect("the client runs"), vec![EventKind::Rejected]);
}

// ----- LDMS PR 556 -------------------------------------------------------------------------

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn ldms_556_buggy_reads_the_freed_endpoint_on_timewait_exit() {
    use cmtwin_zoo::ldms_timewait::{daemon, Caught};
    let addr = server_addr();
    let (server, client) = run_both(
        move |cm| daemon(&cm, addr, LDMS_QUIET, Variant::Buggy),
        move |cm| connect_times(&cm, addr, 1),
    );
    assert_eq!(
        client.expect("the client runs"),
        vec![EventKind::Established]
    );
    match server {
        Err(Caught::EventOnFreedRecord { kind, context }) => {
            assert_eq!((kind, context), (EventKind::TimewaitExit, 1))
        }
        other => panic!("expected TIMEWAIT_EXIT on the freed endpoint, got {other:?}"),
    }
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn ldms_556_fixed_shuts_down() {
    use cmtwin_zoo::ldms_timewait::daemon;
    let addr = server_addr();
    let (server, client) = run_both(
        move |cm| daemon(&cm, addr, LDMS_QUIET, Variant::Fixed),
        move |cm| connect_times(&cm, addr, 1),
    );
    assert_eq!(
        client.expect("the client runs"),
        vec![EventKind::Established]
    );
    assert_eq!(server.expect("the fixed daemon runs"), 1);
}

// ----- libevpl PR 52 -----------------------------------------------------------------------

fn libevpl(variant: Variant) -> std::thread::Result<Result<usize, String>> {
    let addr = server_addr();
    let server = std::thread::spawn(move || {
        cmtwin_zoo::libevpl_close::server(&VerbsBackend::new(), addr, QUIET, variant)
            .map_err(|e| e.to_string())
    });
    std::thread::sleep(head_start());
    let client = connect_until_peer_closes(&VerbsBackend::new(), addr, 1);
    client.expect("the client runs");
    server.join()
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libevpl_52_buggy_closes_the_recycled_bind_again() {
    let payload = libevpl(Variant::Buggy).expect_err("the buggy server aborts");
    let text = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(text.contains("bind 0 already closed"), "{text}");
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn libevpl_52_fixed_waits_for_the_disconnected() {
    let served = libevpl(Variant::Fixed).expect("no abort");
    served.expect("the fixed server runs");
}

// ----- SPDK issue 2515 ---------------------------------------------------------------------

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn spdk_2515_buggy_gets_the_disconnected_of_the_freed_qpair() {
    use cmtwin_zoo::caught::Caught;
    let addr = server_addr();
    let p = peer(addr);
    let (served, got) = run_both(
        move |cm| serve(&cm, &p),
        move |cm| cmtwin_zoo::spdk_freed_qpair::controller(&cm, addr, Variant::Buggy),
    );
    served.expect("the peer runs");
    match got {
        Err(Caught::EventOnFreedRecord { kind, context }) => {
            assert_eq!((kind, context), (EventKind::Disconnected, 2))
        }
        other => panic!("expected the event on the freed record, got {other:?}"),
    }
}

#[test]
#[ignore = "needs RDMA: run inside the Soft-RoCE VM (scripts/test does)"]
fn spdk_2515_fixed_deletes_the_qpair_cleanly() {
    let addr = server_addr();
    let p = peer(addr);
    let (served, got) = run_both(
        move |cm| serve(&cm, &p),
        move |cm| cmtwin_zoo::spdk_freed_qpair::controller(&cm, addr, Variant::Fixed),
    );
    served.expect("the peer runs");
    assert!(got.expect("the fixed controller runs"));
}
