//! Property test over random call sequences on the simulator: random calls on random handles
//! (live, stale and foreign), with random arguments, on both hosts of a fabric.
//!
//! The ops ([`Op`]) and the model of the CM's contract they are checked against live in
//! `cmtwin_tests::random_calls` (shared with the cargo-fuzz target in `fuzz/`); its module
//! documentation lists the properties. This file holds only the proptest strategy and the
//! test. `CMTWIN_PROPTEST_VERBOSE=1` prints every op, call and result.

use cmtwin_tests::random_calls::{self, Op};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Ops weighted towards what makes connections happen, with the arguments near the
/// interesting limits (private data sizes, timeouts of 0, backlogs of 0 and below).
fn op_strategy() -> impl Strategy<Value = Op> {
    let idx = any::<usize>;
    let owner = || prop::bool::weighted(0.9);
    prop_oneof![
        2 => any::<bool>().prop_map(|server| Op::CreateChannel { server }),
        1 => (idx(), owner()).prop_map(|(ch, owner)| Op::DestroyChannel { ch, owner }),
        4 => (any::<bool>(), prop::option::weighted(0.85, idx()), 0u8..6)
            .prop_map(|(server, ch, ps)| Op::CreateId { server, ch, ps }),
        2 => (idx(), owner()).prop_map(|(id, owner)| Op::DestroyId { id, owner }),
        3 => (idx(), owner(), 0u8..6).prop_map(|(id, owner, addr)| Op::Bind { id, owner, addr }),
        4 => (idx(), owner(), 0u8..8, prop_oneof![Just(0u16), Just(100), Just(2000)])
            .prop_map(|(id, owner, dst, timeout_ms)| Op::ResolveAddr { id, owner, dst, timeout_ms }),
        3 => (idx(), owner(), prop_oneof![Just(0u16), Just(2000)])
            .prop_map(|(id, owner, timeout_ms)| Op::ResolveRoute { id, owner, timeout_ms }),
        3 => (idx(), owner(), -2i8..4).prop_map(|(id, owner, backlog)| Op::Listen { id, owner, backlog }),
        1 => (idx(), owner()).prop_map(|(id, owner)| Op::GetRequest { id, owner }),
        4 => (idx(), owner(), prop_oneof![Just(0u8), Just(56), Just(57), Just(180), Just(181), Just(255)], any::<bool>())
            .prop_map(|(id, owner, len, param)| Op::Connect { id, owner, len, param }),
        3 => (idx(), owner(), prop_oneof![Just(0u8), Just(136), Just(137), Just(196), Just(197)], any::<bool>())
            .prop_map(|(id, owner, len, param)| Op::Accept { id, owner, len, param }),
        2 => (idx(), owner(), prop_oneof![Just(0u8), Just(136), Just(148), Just(149)])
            .prop_map(|(id, owner, len)| Op::Reject { id, owner, len }),
        2 => (idx(), owner()).prop_map(|(id, owner)| Op::Disconnect { id, owner }),
        1 => (idx(), owner(), prop_oneof![Just(4), Just(6), Just(0)])
            .prop_map(|(id, owner, event)| Op::Notify { id, owner, event }),
        1 => (idx(), owner()).prop_map(|(id, owner)| Op::Establish { id, owner }),
        2 => (idx(), owner(), prop_oneof![3 => Just(18), 1 => 0i32..21],
              prop_oneof![Just(0), Just(-110), Just(7), Just(i32::MIN), any::<i32>()])
            .prop_map(|(id, owner, kind, status)| Op::WriteEvent { id, owner, kind, status }),
        8 => (idx(), owner(), prop_oneof![4 => Just(0u8), 4 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(ch, owner, wait)| Op::GetEvent { ch, owner, wait }),
        5 => idx().prop_map(|which| Op::Ack { which }),
        2 => idx().prop_map(|which| Op::DropEvent { which }),
        3 => (idx(), owner(), any::<bool>()).prop_map(|(id, owner, ud)| Op::CreateQp { id, owner, ud }),
        1 => (idx(), owner()).prop_map(|(id, owner)| Op::DestroyQp { id, owner }),
        1 => (idx(), owner(), prop::option::weighted(0.8, idx()))
            .prop_map(|(id, owner, ch)| Op::Migrate { id, owner, ch }),
        1 => (idx(), owner(), 0u8..5).prop_map(|(id, owner, option)| Op::SetOption { id, owner, option }),
        1 => (0u16..6000).prop_map(|ms| Op::Sleep { ms }),
        6 => (prop::bool::weighted(0.3), prop::bool::weighted(0.8), prop_oneof![Just(0u8), Just(56), Just(57)])
            .prop_map(|(ud, qp, len)| Op::Dial { ud, qp, len }),
        6 => (prop::bool::weighted(0.7), prop_oneof![Just(0u8), Just(136), Just(196), Just(197)])
            .prop_map(|(accept, len)| Op::Serve { accept, len }),
        4 => any::<bool>().prop_map(|server| Op::Pump { server }),
        1 => any::<bool>().prop_map(|server| Op::RemoveDevice { server }),
    ]
}

proptest! {
    // 256 cases from a fixed seed by default (fast and reproducible); PROPTEST_CASES=<n> and
    // PROPTEST_RNG_SEED=<n> for a longer or different campaign.
    #![proptest_config(ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            ProptestConfig::default().cases
        } else {
            256
        },
        rng_seed: if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
            ProptestConfig::default().rng_seed
        } else {
            RngSeed::Fixed(0x00c3_7719)
        },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random call sequences never panic, fail only with the kernel's errnos, and deliver each
    /// event at most once.
    #[test]
    fn random_call_sequences_keep_the_cm_contract(
        seed in any::<u64>(),
        ops in prop::collection::vec(op_strategy(), 40),
    ) {
        random_calls::run(seed, &ops);
    }
}
