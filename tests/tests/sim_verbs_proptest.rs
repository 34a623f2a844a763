//! Property test over random data path call sequences on the simulator: random verbs calls
//! and librdmacm helpers on random handles (live, stale and foreign), with random arguments,
//! on both hosts of a bed whose RC connection and UD pair move data.
//!
//! The ops ([`Op`]) and the contract they are checked against live in
//! `cmtwin_tests::random_verbs` (shared with the cargo-fuzz target `verbs_sequences`); its
//! module documentation lists the properties. This file holds only the proptest strategy
//! and the test. `CMTWIN_PROPTEST_VERBOSE=1` prints every op, call and completion.

use cmtwin_tests::random_verbs::op::{CapSpec, Pick, RemoteSpec, SgeSpec, UdSpec};
use cmtwin_tests::random_verbs::{self, Op};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// A handle: mostly one of the first objects (the setup's), mostly on its own host.
fn pick() -> impl Strategy<Value = Pick> {
    (
        prop_oneof![3 => 0usize..8, 1 => any::<usize>()],
        prop::bool::weighted(0.9),
    )
        .prop_map(|(idx, owner)| Pick { idx, owner })
}

/// An index into a pool, mostly one of the first.
fn idx() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..8, 1 => any::<usize>()]
}

/// An entry: mostly a good key over bytes inside the region, sometimes zero-length,
/// beyond the region or huge.
fn sge() -> impl Strategy<Value = SgeSpec> {
    let len = prop_oneof![
        24 => 1u32..64,
        2 => Just(0u32),
        2 => 200u32..300,
        1 => Just(u32::MAX),
        1 => Just(0x8000_0000u32),
    ];
    let offset = prop_oneof![24 => 4u16..40, 1 => 0u16..4, 1 => any::<u16>()];
    (
        idx(),
        prop_oneof![24 => Just(0u8), 1 => any::<u8>()],
        offset,
        len,
    )
        .prop_map(|(mr, key, offset, len)| SgeSpec {
            mr,
            key,
            offset,
            len,
        })
}

fn remote() -> impl Strategy<Value = RemoteSpec> {
    let offset = prop_oneof![12 => 4u16..40, 1 => 0u16..4, 1 => 250u16..270];
    (
        idx(),
        prop_oneof![12 => Just(0u8), 1 => any::<u8>()],
        offset,
    )
        .prop_map(|(mr, key, offset)| RemoteSpec { mr, key, offset })
}

fn ud() -> impl Strategy<Value = UdSpec> {
    (
        idx(),
        prop_oneof![4 => Just(0u8), 1 => any::<u8>()],
        prop::bool::weighted(0.9),
    )
        .prop_map(|(ah, qpn, right_qkey)| UdSpec {
            ah,
            qpn,
            right_qkey,
        })
}

fn cap() -> impl Strategy<Value = CapSpec> {
    (
        any::<u8>(),
        prop_oneof![Just(1u8), Just(4), any::<u8>()],
        prop_oneof![Just(0u16), Just(64), any::<u16>()],
    )
        .prop_map(|(depth, sge, inline)| CapSpec { depth, sge, inline })
}

/// Posts and completions weighted over object churn, with the arguments near the limits.
fn op_strategy() -> impl Strategy<Value = Op> {
    let sges = || {
        prop_oneof![
            8 => prop::collection::vec(sge(), 0..3),
            1 => prop::collection::vec(sge(), 3..6),
            1 => prop::collection::vec(sge(), 30..36),
        ]
    };
    prop_oneof![
        1 => pick().prop_map(|id| Op::AllocPd { id }),
        1 => pick().prop_map(|pd| Op::DeallocPd { pd }),
        3 => (pick(), prop_oneof![Just(0u16), 1u16..300], any::<u8>())
            .prop_map(|(pd, len, access)| Op::RegMr { pd, len, access }),
        1 => (pick(), any::<u8>(), 0u16..300).prop_map(|(id, kind, len)| Op::RegHelper { id, kind, len }),
        2 => pick().prop_map(|mr| Op::DeregMr { mr }),
        1 => (pick(), 0u16..300, 0u16..300).prop_map(|(mr, offset, len)| Op::MrRead { mr, offset, len }),
        2 => (pick(), 0u16..300, 0u16..300, any::<u8>())
            .prop_map(|(mr, offset, len, byte)| Op::MrWrite { mr, offset, len, byte }),
        1 => pick().prop_map(|id| Op::CreateCompChannel { id }),
        1 => pick().prop_map(|ch| Op::DestroyCompChannel { ch }),
        1 => (pick(), prop_oneof![Just(0u32), Just(1), Just(2), Just(64), Just(32767), Just(32768)], prop::option::of(idx()))
            .prop_map(|(id, cqe, channel)| Op::CreateCq { id, cqe, channel }),
        1 => pick().prop_map(|cq| Op::DestroyCq { cq }),
        3 => (pick(), any::<bool>()).prop_map(|(cq, solicited_only)| Op::ReqNotifyCq { cq, solicited_only }),
        3 => (pick(), prop_oneof![Just(0u8), 1u8..20]).prop_map(|(ch, wait_ms)| Op::GetCqEvent { ch, wait_ms }),
        2 => (pick(), any::<u8>()).prop_map(|(cq, count)| Op::AckCqEvents { cq, count }),
        12 => (pick(), any::<u8>()).prop_map(|(cq, n)| Op::PollCq { cq, n }),
        1 => (pick(), idx(), idx(), idx(), prop::bool::weighted(0.2), cap(), any::<bool>())
            .prop_map(|(id, pd, send_cq, recv_cq, ud, cap, sq_sig_all)| Op::CreateQpEx { id, pd, send_cq, recv_cq, ud, cap, sq_sig_all }),
        1 => (any::<bool>(), idx(), idx(), idx(), cap(), any::<bool>())
            .prop_map(|(server, pd, send_cq, recv_cq, cap, sq_sig_all)| Op::CreateExternalQp { server, pd, send_cq, recv_cq, cap, sq_sig_all }),
        1 => pick().prop_map(|qp| Op::DestroyExternalQp { qp }),
        1 => pick().prop_map(|id| Op::DestroyQp { id }),
        1 => (pick(), any::<u8>()).prop_map(|(id, state)| Op::InitQpAttr { id, state }),
        3 => (pick(), any::<u8>(), idx(), prop_oneof![Just(14u8), any::<u8>()], any::<u8>(), any::<u8>())
            .prop_map(|(qp, state, attrs_of, timeout, retry, rnr)| Op::ModifyQp { qp, state, attrs_of, timeout, retry, rnr }),
        1 => (pick(), idx()).prop_map(|(qp, attrs_of)| Op::Reconnect { qp, attrs_of }),
        1 => pick().prop_map(|qp| Op::QueryQp { qp }),
        1 => (pick(), any::<u8>()).prop_map(|(pd, attr)| Op::CreateAh { pd, attr }),
        1 => (pick(), prop::bool::weighted(0.2)).prop_map(|(pd, garbage)| Op::CreateAhFromWc { pd, garbage }),
        1 => pick().prop_map(|ah| Op::DestroyAh { ah }),
        28 => (pick(), any::<u8>(), sges(), prop::option::weighted(0.15, prop_oneof![0u16..70, 250u16..320]), remote(),
               prop::option::weighted(0.5, ud()), prop::bool::weighted(0.8), any::<bool>())
            .prop_map(|(qp, op, sges, inline, remote, ud, signaled, solicited)| Op::PostSend { qp, op, sges, inline, remote, ud, signaled, solicited }),
        20 => (pick(), sges()).prop_map(|(qp, sges)| Op::PostRecv { qp, sges }),
        2 => (pick(), any::<u8>(), any::<bool>()).prop_map(|(qp, count, recv)| Op::Flood { qp, count, recv }),
        3 => (pick(), idx(), 0u16..40, 0u16..300).prop_map(|(id, mr, offset, len)| Op::PostRecvMsg { id, mr, offset, len }),
        3 => (pick(), idx(), 0u16..40, 0u16..300, any::<bool>())
            .prop_map(|(id, mr, offset, len, solicited)| Op::PostSendMsg { id, mr, offset, len, solicited }),
        2 => (pick(), idx(), 0u16..40, 0u16..300, ud())
            .prop_map(|(id, mr, offset, len, ud)| Op::PostUdSend { id, mr, offset, len, ud }),
        3 => (pick(), any::<bool>(), idx(), 0u16..40, 0u16..300, remote())
            .prop_map(|(id, write, mr, offset, len, remote)| Op::PostRdma { id, write, mr, offset, len, remote }),
        2 => (pick(), any::<bool>()).prop_map(|(id, send)| Op::GetComp { id, send }),
        2 => (any::<bool>(), prop_oneof![Just(0u8), 1u8..10]).prop_map(|(server, wait_ms)| Op::GetAsyncEvent { server, wait_ms }),
        1 => any::<bool>().prop_map(|server| Op::NewId { server }),
        1 => pick().prop_map(|id| Op::Disconnect { id }),
        1 => pick().prop_map(|id| Op::DestroyId { id }),
        1 => any::<bool>().prop_map(|server| Op::RemoveDevice { server }),
        1 => any::<u8>().prop_map(|count| Op::LosePackets { count }),
        6 => (any::<u16>(), any::<u8>()).prop_map(|(us, scale)| Op::Run { us, scale }),
        10 => atomic(),
        // Regions atomics may target (LOCAL_WRITE and REMOTE_ATOMIC, with or without the rest).
        4 => (prop_oneof![3 => (0usize..2).prop_map(|idx| Pick { idx, owner: true }), 1 => pick()], 8u16..300, prop_oneof![Just(0x09u8), Just(0x0f)])
            .prop_map(|(pd, len, access)| Op::RegMr { pd, len, access }),
        2 => (pick(), any::<u8>()).prop_map(|(qp, access)| Op::ModifyQpAccess { qp, access }),
    ]
}

/// An atomic: mostly signaled, into one 8-byte entry, at an aligned address of a region of
/// the peer under its rkey, adding a small value; sometimes longer, shorter or split
/// entries, misaligned or out-of-range addresses, bad keys, inline, a UD destination.
fn atomic() -> impl Strategy<Value = Op> {
    let entry = |len| {
        (
            idx(),
            prop_oneof![24 => Just(0u8), 1 => any::<u8>()],
            prop_oneof![8 => (0u16..5).prop_map(|k| 4 + 8 * k), 1 => 0u16..48],
        )
            .prop_map(move |(mr, key, offset)| SgeSpec {
                mr,
                key,
                offset,
                len,
            })
    };
    let sges = prop_oneof![
        12 => entry(8).prop_map(|e| vec![e]),
        2 => entry(16).prop_map(|e| vec![e]),
        1 => entry(4).prop_map(|e| vec![e]),
        1 => (entry(4), entry(4)).prop_map(|(a, b)| vec![a, b]),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(sge(), 1..3),
    ];
    let remote = (
        idx(),
        prop_oneof![12 => Just(0u8), 1 => any::<u8>()],
        prop_oneof![10 => (0u16..6).prop_map(|k| 4 + 8 * k), 1 => 0u16..48, 1 => 250u16..270],
    )
        .prop_map(|(mr, key, offset)| RemoteSpec { mr, key, offset });
    let value = prop_oneof![4 => 1u64..256, 1 => any::<u64>()];
    // Mostly the RC connection's QPs (the setup's first two).
    let qp = prop_oneof![
        3 => (0usize..2, prop::bool::weighted(0.95)).prop_map(|(idx, owner)| Pick { idx, owner }),
        1 => pick(),
    ];
    (
        qp,
        any::<bool>(),
        sges,
        remote,
        any::<u64>(),
        value,
        prop::bool::weighted(0.05),
        prop::option::weighted(0.05, ud()),
        prop::bool::weighted(0.9),
    )
        .prop_map(
            |(qp, add, sges, remote, compare, value, inline, ud, signaled)| Op::PostAtomic {
                qp,
                add,
                sges,
                remote,
                compare,
                value,
                inline,
                ud,
                signaled,
            },
        )
}

/// An atomic that should succeed while the connection and its regions live: from an RC
/// QP of the setup, one 8-byte entry of a region of its PD, an aligned word within the
/// first 48 bytes of the peer's regions with REMOTE_ATOMIC, a small value.
fn good_atomic() -> impl Strategy<Value = Op> {
    (
        0usize..2,
        any::<bool>(),
        0u16..30,
        (0usize..4).prop_map(|k| 4 * k + 1),
        0u16..6,
        any::<u64>(),
        1u64..256,
        prop::bool::weighted(0.9),
    )
        .prop_map(
            |(qp, add, local, mr, word, compare, value, signaled)| Op::PostAtomic {
                qp: Pick {
                    idx: qp,
                    owner: true,
                },
                add,
                sges: vec![SgeSpec {
                    mr: 1,
                    key: 0,
                    offset: 4 + 8 * local,
                    len: 8,
                }],
                remote: RemoteSpec {
                    mr,
                    key: 0,
                    offset: 4 + 8 * word,
                },
                compare,
                value,
                inline: false,
                ud: None,
                signaled,
            },
        )
}

/// Atomics on the RC connection among the steps that make them interesting: regions with
/// and without atomic rights, QP rights taken away and given back, polls, lost packets and
/// time (so that requests and acknowledgements are resent), as the contract's ledger needs
/// to see fetch and adds through to the end.
fn atomic_op_strategy() -> impl Strategy<Value = Op> {
    let rc_qp = (0usize..2).prop_map(|idx| Pick { idx, owner: true });
    prop_oneof![
        12 => good_atomic(),
        3 => atomic(),
        3 => (prop_oneof![3 => (0usize..2).prop_map(|idx| Pick { idx, owner: true }), 1 => pick()], 64u16..300, prop_oneof![4 => Just(0x09u8), 4 => Just(0x0f), 1 => any::<u8>()])
            .prop_map(|(pd, len, access)| Op::RegMr { pd, len, access }),
        1 => (rc_qp.clone(), prop_oneof![3 => Just(0x0fu8), 1 => any::<u8>()]).prop_map(|(qp, access)| Op::ModifyQpAccess { qp, access }),
        8 => ((0usize..2).prop_map(|idx| Pick { idx, owner: true }), Just(8u8)).prop_map(|(cq, n)| Op::PollCq { cq, n }),
        2 => (0u8..3).prop_map(|count| Op::LosePackets { count }),
        4 => (0u16..2000, 0u8..4).prop_map(|(us, scale)| Op::Run { us, scale }),
        1 => (pick(), 0u16..300, 0u16..300, any::<u8>())
            .prop_map(|(mr, offset, len, byte)| Op::MrWrite { mr, offset, len, byte }),
        1 => op_strategy(),
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
            RngSeed::Fixed(0x0da7_a9a7)
        },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random data path sequences never panic, fail only with the documented errnos,
    /// complete every request exactly once and leave regions alone except where work
    /// targeted them.
    #[test]
    fn random_verbs_sequences_keep_the_data_path_contract(
        seed in any::<u64>(),
        ops in prop::collection::vec(op_strategy(), 50),
    ) {
        random_verbs::run(seed, &ops);
    }

    /// The same contract over sequences where atomics run on a connection that mostly
    /// lives: their statuses, values before and each fetch and add applied exactly once.
    #[test]
    fn random_atomic_sequences_keep_the_data_path_contract(
        seed in any::<u64>(),
        ops in prop::collection::vec(atomic_op_strategy(), 60),
    ) {
        // Each side starts with a region atomics may target.
        let region = |idx| Op::RegMr { pd: Pick { idx, owner: true }, len: 64, access: 0x0f };
        let ops: Vec<Op> = [region(0), region(1)].into_iter().chain(ops).collect();
        random_verbs::run(seed, &ops);
    }
}
