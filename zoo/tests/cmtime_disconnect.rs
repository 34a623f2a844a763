//! rdma-core cmtime 737ac31fd / 1dd867d6c: a lost DREP stalls the client's disconnect step for
//! a whole DREQ timeout; a lost DREQ leaves the server waiting forever.

use std::time::{Duration, Instant};

use cmtwin::{Call, Errno};
use cmtwin_sim::sweep::{Outcome, RunContext};
use cmtwin_sim::{FaultAction, FaultPlan, MessageKind, Trigger};
use cmtwin_zoo::cmtime_disconnect::{
    client, server, ClientEnd, CmtimeError, ServerEnd, SERVER_DISCONNECT_TIMEOUT,
};
use cmtwin_zoo::harness::{
    message_swarm_space, run_both, server_addr, sweep_catches, sweep_passes,
};
use cmtwin_zoo::Variant;

/// Connections cmtime makes.
const CONNS: usize = 1;

type Sides = (
    Result<ServerEnd, CmtimeError>,
    Result<ClientEnd, CmtimeError>,
);

fn run(ctx: &RunContext, variant: Variant) -> Sides {
    run_both(
        ctx,
        move |cm| server(&cm, server_addr(), CONNS, variant),
        move |cm| client(&cm, server_addr(), CONNS, variant),
    )
    .expect("the run itself failed")
}

/// The first `count` messages of `kind` are lost.
fn lose(kind: MessageKind, count: u32) -> FaultPlan {
    FaultPlan::new().scheduled(
        Trigger::Message { kind, nth: 1 },
        FaultAction::DropMessages { kind, count },
    )
}

/// What the fixed client's disconnect step takes: the `rdma_disconnect` call (its QP moved to
/// ERROR), 20 µs of virtual time.
const CALL: Duration = Duration::from_micros(20);
/// The buggy client's disconnect step when the DREP is lost: the call, then the whole DREQ
/// timeout of this fabric: 16 transmissions (the first and 15 retries), each waiting
/// Treq = 4096 ms + 2 * cm_ms(PLT 18) = 6144 ms on the 250 Hz timer wheel, which rounds each
/// wait up (CM-SEMANTICS.md §19: 6.2-6.4 s per retransmission).
const WHOLE_DREQ_TIMEOUT: Duration = Duration::from_nanos(102_367_946_770);

#[test]
fn buggy_client_stalls_a_whole_dreq_timeout_on_a_lost_drep() {
    let started = Instant::now();
    let (server, client) = run(
        &RunContext::new(1, lose(MessageKind::Drep, 1)),
        Variant::Buggy,
    );
    let wall = started.elapsed();
    let step = client.unwrap().disconnect_step;
    eprintln!("cmtime 737ac31fd buggy caught in {wall:?}: disconnect step {step:?}");
    assert_eq!(step, WHOLE_DREQ_TIMEOUT);
    assert_eq!(server.unwrap().timed_out, 0);
}

#[test]
fn fixed_client_ends_its_step_at_the_call() {
    let (server, client) = run(
        &RunContext::new(1, lose(MessageKind::Drep, 1)),
        Variant::Fixed,
    );
    assert_eq!(client.unwrap().disconnect_step, CALL);
    assert_eq!(server.unwrap().timed_out, 0);
}

#[test]
fn buggy_server_waits_forever_when_every_dreq_is_lost() {
    let started = Instant::now();
    let (server, client) = run(
        &RunContext::new(1, lose(MessageKind::Dreq, 16)),
        Variant::Buggy,
    );
    let wall = started.elapsed();
    let Err(CmtimeError::Cm(err)) = server else {
        panic!("expected the server's wait to deadlock, got {server:?}");
    };
    eprintln!("cmtime 1dd867d6c buggy caught in {wall:?}: {err}");
    assert_eq!((err.call, err.errno), (Call::GetCmEvent, Errno::EDEADLK));
    assert!(
        err.detail
            .contains("process passive blocked in rdma_get_cm_event"),
        "{}",
        err.detail
    );
    // The client's sync was never answered: its request timed out.
    assert!(
        matches!(client, Err(CmtimeError::Exit { status: -110, .. })),
        "{client:?}"
    );
}

#[test]
fn fixed_server_disconnects_itself_after_its_timeout() {
    let (server, client) = run(
        &RunContext::new(1, lose(MessageKind::Dreq, 16)),
        Variant::Fixed,
    );
    let end = ServerEnd {
        disconnect_phase: SERVER_DISCONNECT_TIMEOUT + CALL,
        timed_out: 1,
    };
    assert_eq!(server.unwrap(), end);
    assert_eq!(client.unwrap().disconnect_step, CALL);
}

#[test]
fn both_run_in_microseconds_without_faults() {
    for (variant, step) in [
        (Variant::Buggy, Duration::from_nanos(56_157)),
        (Variant::Fixed, CALL),
    ] {
        let (server, client) = run(&RunContext::new(1, FaultPlan::new()), variant);
        assert_eq!(client.unwrap().disconnect_step, step);
        assert_eq!(server.unwrap().timed_out, 0);
    }
}

/// Both sides, for sweeps: a stall is a server that never finishes or a client whose
/// disconnect step took longer than a second (cmtime's timings are then worthless).
fn swept(variant: Variant) -> impl Fn(&RunContext) -> Outcome + Sync {
    move |ctx| {
        let (server, client) = run(ctx, variant);
        server.map_err(|e| format!("cmtime stalled: server: {e}"))?;
        let step = client.map_err(|e| format!("client: {e}"))?.disconnect_step;
        if step > Duration::from_secs(1) {
            return Err(format!("cmtime stalled: client's disconnect step took {step:?}").into());
        }
        Ok(())
    }
}

#[test]
fn fixed_survives_a_thousand_message_swarm_worlds() {
    sweep_passes(
        "cmtime-disconnect-fixed",
        0..1000,
        message_swarm_space(),
        swept(Variant::Fixed),
    );
}

#[test]
fn a_message_swarm_catches_the_buggy_one() {
    sweep_catches(
        "cmtime-disconnect-buggy",
        0..100,
        message_swarm_space(),
        swept(Variant::Buggy),
        "cmtime stalled",
    );
}
