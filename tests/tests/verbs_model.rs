//! The CM model (`cmtwin_tests::cm_model`) on real librdmacm: the same cases as on the
//! simulator (fewer of them), every call's result and every event checked exactly against
//! the model. Needs an RDMA device: the test is ignored ("needs RDMA") unless run with
//! `--ignored` where `CMTWIN_RDMA_ADDR` names one (`scripts/verbs-tests-in-vm` does, on every
//! bed: rxe and siw). It prints the bed and the run's coverage, and checks it against the
//! generator's weights. `CMTWIN_MODEL_CASES=<n>` runs more (or fewer) cases.

use cmtwin::{EventKind, Transport};
use cmtwin_tests::cm_model::{campaign, run_case, Draws};
use cmtwin_tests::{TestBed, VerbsBed};

/// The campaign's seed: the simulator's (`tests/sim_model.rs`), so the first cases are the
/// same on both.
const SEED: u64 = 0x00c3_0de1;

#[test]
#[ignore = "needs RDMA - run inside the Soft-RoCE VM (scripts/verbs-tests-in-vm) or set CMTWIN_RDMA_ADDR and pass --ignored"]
fn model_holds_on_librdmacm() {
    let bed = VerbsBed::from_env();
    eprintln!("{}", bed.id().describe());
    let cases = std::env::var("CMTWIN_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    // A failing case shrinks a little only: each step is a run on the real CM. Faults are
    // drawn only where the bed has their hooks (none here: the cases are the fault-free ones).
    let stats = campaign(cases, SEED, 32, Draws::for_bed(&bed), |_, ops| {
        run_case(&bed, ops)
    });
    eprintln!("{}: {stats}", bed.id().name());
    for kind in [EventKind::Established, EventKind::Disconnected] {
        let share = stats.share(kind);
        assert!(
            share >= 0.5,
            "{kind} reached in {:.1}% of the cases",
            share * 100.0
        );
    }
    let timewait = stats.share(EventKind::TimewaitExit);
    if bed.transport() == Transport::Iwarp {
        assert_eq!(timewait, 0.0, "iWARP has no timewait (CM-SEMANTICS §5.3)");
    } else {
        assert!(
            timewait >= 0.5,
            "TIMEWAIT_EXIT reached in {:.1}% of the cases",
            timewait * 100.0
        );
    }
}
