//! The normalized traces the sim-vs-real comparison is made of (`cmtwin_tests::recording`),
//! on the simulator: a scenario's trace names nothing that differs from run to run or from
//! fabric to fabric, so that recording it twice gives the same text, and it shows what the
//! scenario did.

use cmtwin::Transport;
use cmtwin_sim::SimConfig;
use cmtwin_tests::conformance::scenarios;
use cmtwin_tests::fidelity::{compare, trace_text};
use cmtwin_tests::harness::unmet;
use cmtwin_tests::recording::RecordingBed;
use cmtwin_tests::SimBed;

/// Every scenario the twin of `transport` on Linux 6.1 can run, recorded on two fabrics of
/// different seeds built in one process: the traces must be identical (handles, ports and
/// QP numbers are named by appearance, addresses by role, times as timer intervals only).
fn traces_repeat(transport: Transport) {
    let mut recorded = 0;
    for scenario in scenarios::<RecordingBed<SimBed>>() {
        let trace = |seed| {
            let bed = RecordingBed::new(SimBed::with_config(seed, transport, SimConfig::default()));
            if unmet(&bed, &scenario).is_some() {
                return None;
            }
            (scenario.run)(&bed);
            Some(trace_text(&bed, None))
        };
        let (Some(a), Some(b)) = (trace(3), trace(4)) else {
            continue;
        };
        assert_eq!(compare(&a, &b), None, "{}:\n{a}\n---\n{b}", scenario.name);
        // A few scenarios check tables and make no call.
        recorded += usize::from(!a.is_empty());
    }
    assert!(recorded > 100, "only {recorded} scenarios recorded calls");
}

#[test]
fn roce_traces_repeat_across_fabrics_and_seeds() {
    traces_repeat(Transport::Roce);
}

#[test]
fn iwarp_traces_repeat_across_fabrics_and_seeds() {
    traces_repeat(Transport::Iwarp);
}

/// The trace of a connection's setup and teardown, line by line: what the comparison sees.
#[test]
fn a_connection_is_recorded_call_by_call() {
    let scenario = scenarios::<RecordingBed<SimBed>>()
        .into_iter()
        .find(|s| s.name == "timewait::timewait_exit_follows_the_disconnect")
        .expect("the scenario exists");
    let bed = RecordingBed::new(SimBed::new(1));
    (scenario.run)(&bed);
    let trace = trace_text(&bed, None);
    print!("{trace}");
    assert!(
        trace.starts_with("S create_event_channel() = ch1\n"),
        "{trace}"
    );
    assert!(
        trace.contains("S bind_addr(id1, host:p1) = ok\n"),
        "{trace}"
    );
    // The CM's timer is the only interval long enough to show (seed 1's timewait, on the
    // 6.1 profile's timer wheel).
    let shown: Vec<&str> = trace.lines().filter(|l| l.contains("  +")).collect();
    assert_eq!(
        shown,
        ["S get_cm_event(ch1, 30000ms) = TIMEWAIT_EXIT status=0 id=id3 listen=- ps=RDMA_PS_TCP - pd=none  +2.272s"],
        "{trace}"
    );
    assert!(
        trace.ends_with("S destroy_event_channel(ch1) = ok\n"),
        "{trace}"
    );
}
