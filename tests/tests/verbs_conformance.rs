//! The conformance suite on real librdmacm. Needs an RDMA device: without `CMTWIN_RDMA_ADDR`
//! every trial is ignored ("needs RDMA"); `scripts/verbs-tests-in-vm` runs this binary inside
//! a VM with Soft-RoCE or Soft-iWARP, where the variable is set, one trial at a time
//! (scenarios share the kernel's port space and the device). A scenario the bed cannot run is
//! ignored with its reason as the trial's kind (see `cmtwin_tests::harness`).
//!
//! The run first prints which bed it is on (driver and kernel, e.g. `siw-6.12`) and its
//! simulated twin (`cmtwin_tests::bed_id`); timers are checked against the twin's.
//!
//! With `CMTWIN_FIDELITY_DIR` set, every scenario's run is recorded and its normalized trace
//! written to `$CMTWIN_FIDELITY_DIR/<bed>/` (`cmtwin_tests::fidelity`), for the `fidelity`
//! program to compare with the simulated twin.

use std::path::PathBuf;

use cmtwin_tests::fidelity::write_bed;
use cmtwin_tests::harness::{bed_trials, recorded_trials, run, unavailable_trials};
use cmtwin_tests::VerbsBed;

fn main() {
    let trials = if std::env::var_os(VerbsBed::ADDR_ENV).is_some() {
        let id = VerbsBed::from_env().id().clone();
        eprintln!("{}", id.describe());
        match std::env::var_os("CMTWIN_FIDELITY_DIR") {
            Some(root) => {
                let dir = PathBuf::from(root).join(id.name());
                if let Err(e) = write_bed(&dir, &id) {
                    eprintln!("cannot record traces in {}: {e}", dir.display());
                    std::process::exit(1);
                }
                recorded_trials("", dir, VerbsBed::from_env)
            }
            None => bed_trials("", vec![0], |_| VerbsBed::from_env()),
        }
    } else {
        unavailable_trials::<VerbsBed>(
            "",
            "needs RDMA - run inside the Soft-RoCE VM (scripts/verbs-tests-in-vm)",
        )
    };
    run(trials, Some(1))
}
