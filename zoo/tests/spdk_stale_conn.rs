//! SPDK issue 450: after a host power-off, every reconnect is rejected as a stale connection.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmtwin::{CmBackend, EventKind, IbRejReason, Transport};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::harness::{
    default_peer, server_addr, swarm_space, sweep_catches, sweep_passes, CLIENT, CLIENT_IP, SERVER,
    SERVER_IP,
};
use cmtwin_zoo::peer::serve;
use cmtwin_zoo::spdk_stale_conn::{connect_controller, first_life, Attempt, Controller};
use cmtwin_zoo::Variant;

/// The host loses power 1 s in, with its admin qpair connected, and is back at 2 s.
fn power_cycle() -> FaultPlan {
    let at = |ms| Trigger::Time { at_ms: ms };
    FaultPlan::new()
        .scheduled(
            at(1000),
            FaultAction::PowerOff {
                host: CLIENT.into(),
            },
        )
        .scheduled(
            at(2000),
            FaultAction::PowerOn {
                host: CLIENT.into(),
            },
        )
}

/// What the two lives of the host ended with.
type Lives = (Attempt, Controller);

/// The target (the zoo's peer), the host's first life, and, 3 s in, the rebooted host's
/// controller connect; the run's own faults come from `ctx`, the power cycle is added.
fn run(ctx: &RunContext, variant: Variant) -> Result<Lives, Box<dyn std::error::Error>> {
    let fabric = ctx.build(
        ctx.builder()
            .host(SERVER, Transport::Roce, &[IpAddr::from(SERVER_IP)])
            .host(CLIENT, Transport::Roce, &[IpAddr::from(CLIENT_IP)]),
    )?;
    fabric.apply_plan(&power_cycle())?;
    let peer = default_peer();
    fabric.spawn(SERVER, "target", move |cm| serve(&cm, &peer).map(|_| ()));
    let first = Arc::new(Mutex::new(None));
    let second = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&first);
    fabric.spawn(CLIENT, "perf", move |cm| {
        cm.sleep(Duration::from_millis(1))?;
        *slot.lock().expect("slot") = Some(first_life(&cm, server_addr())?);
        Ok(())
    });
    let slot = Arc::clone(&second);
    fabric.spawn(CLIENT, "perf-after-reboot", move |cm| {
        cm.sleep(Duration::from_secs(3))?;
        *slot.lock().expect("slot") = Some(connect_controller(&cm, server_addr(), variant)?);
        Ok(())
    });
    fabric.run()?;
    let first = first.lock().expect("slot").take().ok_or("no first life")?;
    let second = second
        .lock()
        .expect("slot")
        .take()
        .ok_or("no second life")?;
    Ok((first, second))
}

const STALE: Controller = Controller::Failed(Attempt::Failed(
    EventKind::Rejected,
    IbRejReason::STALE_CONN,
));

#[test]
fn buggy_controller_fails_on_the_stale_connection_reject() {
    let started = Instant::now();
    let (first, second) =
        run(&RunContext::new(1, FaultPlan::new()), Variant::Buggy).expect("the run itself works");
    eprintln!(
        "spdk 450 buggy caught in {:?}: {first:?}, {second:?}",
        started.elapsed()
    );
    assert_eq!(first, Attempt::HostLost(cmtwin::Errno::EBADF));
    assert_eq!(second, STALE);
}

#[test]
fn fixed_controller_reconnects_with_a_new_qp() {
    let (first, second) =
        run(&RunContext::new(1, FaultPlan::new()), Variant::Fixed).expect("the run itself works");
    assert_eq!(first, Attempt::HostLost(cmtwin::Errno::EBADF));
    assert_eq!(second, Controller::Connected { stale_retries: 1 });
}

/// A sweep's verdict: the rebooted host's controller must come back; the only failure that
/// is the bug is giving up on a stale-connection reject (a device removed or a peer that no
/// longer answers under the swarm's faults are not).
fn verdict(ctx: &RunContext, variant: Variant) -> Outcome {
    let (_, second) = run(ctx, variant)?;
    match second {
        STALE => Err("the controller gave up on a stale-connection reject".into()),
        _ => Ok(()),
    }
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    let caught = sweep_catches(
        "spdk-450-buggy",
        0..100,
        swarm_space(),
        |ctx| verdict(ctx, Variant::Buggy),
        "gave up on a stale-connection reject",
    );
    eprintln!("spdk 450: {caught} of 100 swarm seeds caught it");
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes("spdk-450-fixed", 0..1000, swarm_space(), |ctx| {
        verdict(ctx, Variant::Fixed)
    });
}
