//! SPDK issue 1184: DEVICE_REMOVAL on the target's listening id taken for a qpair's.

use std::time::{Duration, Instant};

use cmtwin::{CmError, EventKind};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
use cmtwin_zoo::connector::connect_times;
use cmtwin_zoo::harness::{
    outcome, run_both, server_addr, swarm_space, sweep_catches, sweep_passes, SERVER,
};
use cmtwin_zoo::spdk_listener_removal::{target, Caught, TargetEnd};
use cmtwin_zoo::Variant;

/// How long the target waits without an event before it shuts down.
const QUIET: Duration = Duration::from_secs(10);

type Sides = (Result<TargetEnd, Caught>, Result<Vec<EventKind>, CmError>);

/// The trigger: the target's RDMA device is removed 1 s in, when the host's connection has
/// come and gone and only the listener is left on it.
fn removal_plan() -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 1000 },
        FaultAction::RemoveDevice {
            host: SERVER.into(),
        },
    )
}

fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        move |cm| target(&cm, server_addr(), QUIET, variant),
        |cm| connect_times(&cm, server_addr(), 1),
    )
    .expect("the run itself failed")
}

#[test]
fn buggy_takes_the_listening_port_for_a_qpair() {
    let started = Instant::now();
    let (server, client) = run(&RunContext::new(1, removal_plan()), Variant::Buggy);
    let wall = started.elapsed();
    assert_eq!(client.unwrap(), vec![EventKind::Established]);
    eprintln!("spdk 1184 buggy caught in {wall:?}: {server:?}");
    match server {
        Err(Caught::ContextOfAnotherType {
            kind,
            context,
            is,
            taken_for,
        }) => assert_eq!(
            (kind, context, is, taken_for),
            (EventKind::DeviceRemoval, 1, "listening port", "qpair")
        ),
        other => panic!("expected the port taken for a qpair, got {other:?}"),
    }
}

#[test]
fn fixed_removes_the_port() {
    let (server, client) = run(&RunContext::new(1, removal_plan()), Variant::Fixed);
    assert_eq!(client.unwrap(), vec![EventKind::Established]);
    let end = TargetEnd {
        qpairs: 1,
        port_removed: true,
    };
    assert_eq!(server.unwrap(), end);
}

#[test]
fn both_serve_a_host_without_faults() {
    for variant in [Variant::Buggy, Variant::Fixed] {
        let (server, client) = run(&RunContext::new(1, FaultPlan::new()), variant);
        assert_eq!(client.unwrap(), vec![EventKind::Established]);
        let end = TargetEnd {
            qpairs: 1,
            port_removed: false,
        };
        assert_eq!(server.unwrap(), end);
    }
}

/// Both sides, for sweeps.
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant);
        outcome(client)?;
        outcome(server)
    }
}

#[test]
fn fixed_survives_a_thousand_swarm_worlds() {
    sweep_passes(
        "spdk-listener-removal-fixed",
        0..1000,
        swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_swarm_sweep_catches_the_buggy_one() {
    sweep_catches(
        "spdk-listener-removal-buggy",
        0..100,
        swarm_space(),
        swept(Variant::Buggy),
        "a listening port taken for a qpair",
    );
}
