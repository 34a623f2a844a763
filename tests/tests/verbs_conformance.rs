//! The conformance suite on real librdmacm. Needs an RDMA device: every test is ignored by
//! default; `scripts/verbs-tests-in-vm` runs them inside the Soft-RoCE VM with `--ignored
//! --test-threads=1` (`CMTWIN_RDMA_ADDR` names the device's address).

use cmtwin_tests::{conformance_suite, VerbsBed};

conformance_suite!(
    VerbsBed::from_env(),
    #[ignore = "needs RDMA: run inside the Soft-RoCE VM"]
);
