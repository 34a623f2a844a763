//! The conformance suite on the simulator: every scenario on a RoCE fabric (a few seeds), on
//! InfiniBand, on iWARP, on RoCE and iWARP with the Linux 6.12 profile (the twins of the real
//! beds rxe-6.12 and siw-6.12; RoCE and iWARP on 6.1 are the twins of rxe-6.1 and siw-6.1), and
//! on InfiniBand with the mainline kernel profile. A scenario a bed
//! cannot run is listed as ignored, its reason as the trial's kind (see
//! `cmtwin_tests::harness`).
//!
//! `CMTWIN_SEED=<n>` runs every RoCE scenario with that one seed instead (the replay line the
//! simulator prints on failure).

use cmtwin::Transport;
use cmtwin_sim::{KernelProfile, SimConfig};
use cmtwin_tests::bed_id::twin_prefix;
use cmtwin_tests::harness::{bed_trials, run};
use cmtwin_tests::SimBed;

/// The seeds every RoCE scenario runs with, or the one in `CMTWIN_SEED`.
fn seeds() -> Vec<u64> {
    match std::env::var("CMTWIN_SEED") {
        Ok(seed) => vec![seed.parse().expect("CMTWIN_SEED must be a number")],
        Err(_) => vec![1, 7, 0x5eed_cafe],
    }
}

fn main() {
    let mut trials = bed_trials("", seeds(), SimBed::new);
    // Routes through the SA; otherwise as RoCE.
    trials.extend(bed_trials("infiniband::", vec![11], |seed| {
        SimBed::with_transport(seed, Transport::InfiniBand)
    }));
    // No timewait, no UD, no multicast, MPA rejects with exact-length data.
    trials.extend(bed_trials("iwarp::", vec![13], |seed| {
        SimBed::with_transport(seed, Transport::Iwarp)
    }));
    // The twins of the real Linux 6.12 beds (rxe-6.12, siw-6.12): RoCE paths' shorter packet
    // life time.
    for transport in [Transport::Roce, Transport::Iwarp] {
        let prefix = twin_prefix(transport, KernelProfile::Linux612);
        trials.extend(bed_trials(&prefix, vec![23], move |seed| {
            SimBed::with_config(seed, transport, SimConfig::linux612())
        }));
    }
    // Linux ≥ 6.18 (SA-mode resolve_addrinfo, WRITE_CM_EVENT) on InfiniBand.
    trials.extend(bed_trials("infiniband_mainline::", vec![19], |seed| {
        SimBed::with_config(seed, Transport::InfiniBand, SimConfig::mainline())
    }));
    run(trials, None)
}
