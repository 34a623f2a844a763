//! cmtwin-zoo: connection-management bugs that shipped in real RDMA software, each ported onto
//! [`cmtwin::CmBackend`] twice (the buggy logic and the fixed one, same structure) and caught
//! by the simulator in well under a second. `zoo/README.md` has the table and the commands.
//!
//! * [`perftest`]: error events never acknowledged on the error path, so `rdma_destroy_id`
//!   would block forever (linux-rdma/perftest PR 60).
//! * [`spdk_freed_qpair`]: a qpair freed right after `rdma_disconnect`; its DISCONNECTED lands
//!   on the freed record (spdk/spdk issue 2515).
//! * [`spdk_close_wait`]: the close path waits for a DISCONNECTED that can never come
//!   (spdk/spdk issue 3592).
//! * [`spdk_stale_conn`]: after a host power-off, the reconnect is rejected as a stale
//!   connection and the controller gives up for good (spdk/spdk issue 450).
//! * [`spdk_listener_removal`]: DEVICE_REMOVAL on the target's listening id handled as if its
//!   context were a qpair (spdk/spdk issue 1184).
//! * [`ldms_timewait`]: a passive endpoint freed on DISCONNECTED; the TIMEWAIT_EXIT its id still
//!   delivers reads the freed endpoint (ovis-hpc/ldms PR 556).
//! * [`libevpl_close`]: a locally closed connection's bind is recycled while its DISCONNECTED
//!   is still owed; the event's handler closes the recycled bind again (chimera-nas/libevpl
//!   PR 52).
//! * [`libfabric_reject_closed`]: `fi_reject` through an id already destroyed with the
//!   endpoint opened on the request (ofiwg/libfabric commit de5b92d00).
//! * [`libfabric_reject_leak`]: one id leaked per rejected connection request
//!   (ofiwg/libfabric PR 9622).
//! * [`rping`]: `rping -P` accepts one request twice when a second arrives before the server
//!   thread took the first (rdma-core commit 6f8e0056e), and its main thread waits forever
//!   after a device removal (rdma-core commit d27efd53f); both are races between a CM thread
//!   and the threads it wakes, ported with `cmtwin::thread` and `cmtwin::sync`.
//! * [`libfabric_unreachable`]: an assertion fails when a spontaneous UNREACHABLE follows the
//!   endpoint's DISCONNECTED (ofiwg/libfabric issue 12362, PR 12378).
//! * [`ucx_connected_reject`]: a REJECTED on a QP-less client that already had its
//!   CONNECT_RESPONSE leaves an endpoint that cannot be disconnected (openucx/ucx commit
//!   8083e99).
//! * [`disni_route_error`]: ROUTE_ERROR is not handled, so `connect` waits forever
//!   (zrlio/disni issue 41).
//! * [`cmtime_disconnect`]: a lost DREQ leaves rdma-core's `cmtime` server waiting forever; a
//!   lost DREP stalls its client for a whole DREQ timeout (rdma-core commits 737ac31fd and
//!   1dd867d6c).
//!
//! Each port is written generically against `CmBackend`; [`harness`] runs it on a two-host
//! simulated fabric against a well-behaved peer ([`peer`]), with the seed and fault plan of a
//! [`cmtwin_sim::sweep::RunContext`], so that a test can give a targeted trigger or sweep
//! seeds with swarm faults.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod caught;
pub mod cmtime_disconnect;
pub mod connector;
pub mod disni_route_error;
pub mod harness;
pub mod ldms_timewait;
pub mod libevpl_close;
pub mod libfabric_reject_closed;
pub mod libfabric_reject_leak;
pub mod libfabric_unreachable;
pub mod peer;
pub mod perftest;
pub mod rping;
pub mod spdk_close_wait;
pub mod spdk_freed_qpair;
pub mod spdk_listener_removal;
pub mod spdk_stale_conn;
pub mod ucx_connected_reject;

/// Which logic of a ported bug runs: the one that shipped, or the one that fixed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The logic as it shipped, with the mistake.
    Buggy,
    /// The logic after the upstream fix.
    Fixed,
}
