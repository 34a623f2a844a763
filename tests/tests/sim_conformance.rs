//! The conformance suite on the simulator: every scenario on a RoCE fabric, for a few seeds.
//!
//! `CMTWIN_SEED=<n>` runs every scenario with that one seed instead (the replay line the
//! simulator prints on failure).

use cmtwin_tests::{conformance_suite, SimBed};

/// The seeds every scenario runs with, or the one in `CMTWIN_SEED`.
fn seeds() -> Vec<u64> {
    match std::env::var("CMTWIN_SEED") {
        Ok(seed) => vec![seed.parse().expect("CMTWIN_SEED must be a number")],
        Err(_) => vec![1, 7, 0x5eed_cafe],
    }
}

conformance_suite!(for seed in seeds() => SimBed::new(seed));

/// The suite on an InfiniBand fabric (routes through the SA; otherwise as RoCE).
mod infiniband {
    use cmtwin::Transport;
    use cmtwin_tests::{conformance_suite, SimBed};

    conformance_suite!(SimBed::with_transport(11, Transport::InfiniBand));
}

/// The suite on an iWARP fabric (no timewait, no UD, MPA rejects, exact-length data).
mod iwarp {
    use cmtwin::Transport;
    use cmtwin_tests::{conformance_suite, SimBed};

    conformance_suite!(SimBed::with_transport(13, Transport::Iwarp));
}
