//! A reference model of the CM, checked on any [`TestBed`](crate::TestBed): for every call of
//! a case it predicts the exact result (success, or the exact errno), and for every event the
//! exact kind, id and status; the case fails at the first disagreement.
//!
//! * [`op`]: the operations and the proptest strategy drawing cases: sequences of variable
//!   length, mostly well-formed lifecycles (create, resolve address and route, QP, connect,
//!   accept or reject, disconnect on either side first, destroy; on IB and RoCE some of them
//!   UD exchanges of UDP ids) with misuse calls, stale and foreign handles sprinkled in,
//!   weighted so that most cases reach ESTABLISHED,
//!   DISCONNECTED and (IB, RoCE) TIMEWAIT_EXIT; they shrink by dropping lifecycles and ops.
//!   What a bed allows ([`Draws::for_bed`]) adds more: on a bed that can lose CM messages
//!   (the simulator on IB and RoCE), a third of the lifecycles lose their REQ, REP, RTU or
//!   DREQ once or twice, which the IB CM retransmits (same events, later); on a bed with a
//!   third host (`SimBed::with_third_host`), lifecycles of that host run inside others, so
//!   that two pairs are connected to the server at once. The real beds have neither: their
//!   cases are the fault-free, two-host ones.
//! * [`state`]: the model's state: per id, cma.c's state refined by the IB or iWARP CM's
//!   (REQ answered or not, DREQ sent or received), its QP, its peer; per channel, live or not.
//! * [`predict`]: the prediction for each call in each state, with the CM-SEMANTICS section
//!   and the conformance scenario pinning it; calls whose outcome the model does not know
//!   exactly are not made (counted apart as not made), never checked against a set of results.
//! * [`driver`]: makes the calls on a bed and checks them; every event the model expects is
//!   fetched (bounded wait) before the next call, so predictions stay exact on a real machine.
//! * [`stats`]: what a run covered (share of cases reaching each event kind, faults applied,
//!   cases with two hosts connected at once, calls, errnos).
//!
//! [`campaign`] runs many cases from a fixed proptest seed; `tests/sim_model.rs` runs it on
//! the simulator (RoCE, InfiniBand, iWARP) and `tests/verbs_model.rs` on real librdmacm.
//! `CMTWIN_MODEL_VERBOSE=1` prints every op, call, prediction and event.

pub mod driver;
pub mod op;
pub mod predict;
pub mod state;
pub mod stats;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

pub use driver::run_case;
pub use op::{Draws, Op};
pub use stats::{CaseStats, Stats};

/// Runs `cases` cases drawn from `seed` (each a bed seed and a sequence of ops, with what
/// `draws` allows: [`Draws::for_bed`]); `run` runs one on a bed (e.g. `|seed, ops|
/// run_case(&SimBed::new(seed), ops)`). Returns the run's coverage.
///
/// # Panics
///
/// On the first case where the bed disagrees with the model, after shrinking it (at most
/// `max_shrink_iters` steps): the message names the smallest failing case and the op.
pub fn campaign(
    cases: u32,
    seed: u64,
    max_shrink_iters: u32,
    draws: Draws,
    run: impl Fn(u64, &[Op]) -> std::result::Result<CaseStats, String>,
) -> Stats {
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters,
        ..Config::default()
    };
    let stats = RefCell::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&(any::<u64>(), op::case(draws)), |(bed_seed, ops)| {
        let case = run(bed_seed, &ops).map_err(TestCaseError::fail)?;
        stats.borrow_mut().add(&case);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("the CM model disagrees (campaign seed {seed}): {failure}");
    }
    stats.into_inner()
}
