//! A process's exit or crash frees the verbs objects it made and left (the kernel closes its
//! device files: uverbs' cleanup), as its rdma_cm files' close destroys its ids: handles of
//! them are stale afterwards, while objects made outside the process live on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::verbs::{AccessFlags, DataPath, QpInitAttrEx, QpState, SrqAttr};
use cmtwin::{
    Call, CmBackend, CmError, CompChannelHandle, CqHandle, Errno, MrHandle, PdHandle, PortSpace,
    QpHandle, SrqHandle, Wait,
};
use cmtwin_sim::{Fabric, FaultAction, FaultPlan, SimConfig, Trigger};
use cmtwin_tests::steps::{expect_errno, ok, resolved_client};
use cmtwin_tests::{SimBed, TestBed};

/// What the process made: PD, region, completion channel, CQ, SRQ, external QP.
type Made = (
    PdHandle,
    MrHandle,
    CompChannelHandle,
    CqHandle,
    SrqHandle,
    QpHandle,
);

/// Spawns process `name` on the client: it resolves an id to `server` (for the device), makes
/// one object of each kind, checks its QP is live, then sleeps `linger` and returns without
/// destroying anything. What it made is put in `made`.
fn leave_objects(
    fabric: &Fabric,
    name: &str,
    server: SocketAddr,
    linger: Duration,
    made: Arc<Mutex<Option<Made>>>,
) {
    fabric.spawn("client", name, move |cm| -> Result<(), CmError> {
        let channel = cm.create_event_channel()?;
        let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, server, Duration::from_secs(1))?;
        cm.ack_cm_event(cm.get_cm_event(channel, Wait::Block)?)?;
        let pd = cm.alloc_pd(id)?;
        let mr = cm.reg_mr(pd, vec![7; 64], AccessFlags::LOCAL_WRITE)?;
        let comp = cm.create_comp_channel(id)?;
        let cq = cm.create_cq(id, 16, Some(comp))?;
        let (srq, _) = cm.create_srq(pd, &SrqAttr::new(4, 1))?;
        let qp = cm.create_external_qp(&QpInitAttrEx::rc(pd, cq, cq))?;
        assert_eq!(cm.query_qp_state(qp)?, QpState::Reset);
        *made.lock().expect("not poisoned") = Some((pd, mr.handle, comp, cq, srq, qp));
        cm.sleep(linger)
    });
}

/// Every object of `made` is gone: each destroy call fails as on a stale handle.
fn expect_all_freed(cm: &impl DataPath, made: Made) {
    let (pd, mr, comp, cq, srq, qp) = made;
    expect_errno(cm.destroy_srq(srq), Call::DestroySrq, Errno::EBADF);
    expect_errno(
        cm.destroy_external_qp(qp),
        Call::DestroyExternalQp,
        Errno::EBADF,
    );
    expect_errno(cm.destroy_cq(cq), Call::DestroyCq, Errno::EBADF);
    expect_errno(cm.dereg_mr(mr), Call::DeregMr, Errno::EBADF);
    expect_errno(
        cm.destroy_comp_channel(comp),
        Call::DestroyCompChannel,
        Errno::EBADF,
    );
    expect_errno(cm.dealloc_pd(pd), Call::DeallocPd, Errno::EBADF);
}

/// A process that returns leaving a PD, a region, a completion channel, a CQ, an SRQ and an
/// external QP: all are freed with it; a PD the test made itself on the same host stays.
#[test]
fn a_process_exit_frees_the_verbs_objects_it_left() {
    let bed = SimBed::jitterless(51, cmtwin::Transport::Roce);
    let own = resolved_client(&bed, PortSpace::TCP, bed.server_addr());
    let own_pd = ok(bed.client().alloc_pd(own.id), "alloc_pd outside processes");
    let made = Arc::new(Mutex::new(None));
    let server = bed.server_addr();
    leave_objects(
        &bed.fabric,
        "app",
        server,
        Duration::ZERO,
        Arc::clone(&made),
    );
    bed.fabric.run().expect("the process succeeds");
    let made = made.lock().unwrap().expect("the process made its objects");
    expect_all_freed(bed.client(), made);
    ok(
        bed.client().dealloc_pd(own_pd),
        "the test's own PD lives on",
    );
}

/// The same objects left by a process that crashes (a fault plan's CrashProcess) while it
/// sleeps: freed as at an exit.
#[test]
fn a_process_crash_frees_the_verbs_objects_it_left() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 100 },
        FaultAction::CrashProcess {
            process: "app".into(),
        },
    );
    let fabric = Fabric::builder(52)
        .config(SimConfig {
            wire_jitter: Duration::ZERO,
            ..SimConfig::default()
        })
        .host("server", cmtwin::Transport::Roce, &[SimBed::SERVER_IP])
        .host("client", cmtwin::Transport::Roce, &[SimBed::CLIENT_IP])
        .plan(plan)
        .build()
        .expect("a valid configuration");
    let made = Arc::new(Mutex::new(None));
    let server = SocketAddr::new(SimBed::SERVER_IP, 7000);
    leave_objects(
        &fabric,
        "app",
        server,
        Duration::from_secs(1),
        Arc::clone(&made),
    );
    fabric.run().expect("a crash is a fault, not a failure");
    assert_eq!(
        fabric.now(),
        Duration::from_millis(100),
        "the crash ended the run"
    );
    let made = made.lock().unwrap().expect("the process made its objects");
    expect_all_freed(&fabric.backend("client"), made);
}
