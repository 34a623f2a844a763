//! cmtwin-sim: a seeded, deterministic, in-memory RDMA fabric implementing
//! [`cmtwin::CmBackend`]. It emits the CM's whole event taxonomy in virtual time, including the
//! rare events that real deployments trip over (DEVICE_REMOVAL, ADDR_CHANGE, MULTICAST_ERROR,
//! spontaneous UNREACHABLE, TIMEWAIT_EXIT, the EISCONN race of `rdma_notify`).
//!
//! Where things are:
//!
//! * [`Fabric`] (`fabric.rs`): build a world from a seed, get one [`SimBackend`] per host, run
//!   simulated processes, inject faults (`faults.rs`), read the trace (`trace.rs`).
//! * `world.rs`: all state (hosts, devices, channels, ids, endpoints) and the timeline
//!   (`time.rs`); `rng.rs` the seeded random streams; `config.rs` the CM's timing.
//! * `calls/`: each librdmacm call as the kernel executes it, with its legality checks and
//!   errnos (see `calls/mod.rs` for which file produces which event).
//! * `ibcm.rs` and `wire.rs`: the IB CM's messages, retransmissions and timewait.
//! * `backend.rs`: the `CmBackend` implementation; `process.rs`: blocking and the scheduler.
//!
//! Determinism: one queue ordered by (virtual time, sequence number); randomness only from
//! ChaCha streams seeded from the run's seed; ordered maps only; no wall clock. The same seed
//! and the same calls give a byte-identical [`Trace`]; a failed [`Fabric::run`] names the line
//! that replays it.
//!
//! Fidelity. The default [`SimConfig`] follows Linux 6.1 with Soft-RoCE as measured in
//! CM-SEMANTICS.md §19 (packet life time 18: 2048 ms timewait, 6144 ms REQ retransmissions,
//! ≈ 98 s to UNREACHABLE; ENODEV for binding an unconfigured address); [`SimConfig::mainline`]
//! follows newer kernels. Modelled: the rdma_cm id state machine and legal-call table, IP
//! addressing (one /24 or /64 per device, on-link neighbours, silent addresses, NOARP),
//! ephemeral ports and REUSEADDR/AFONLY conflicts, RC connections over REQ/MRA/REP/RTU/REJ/
//! DREQ/DREP with retransmissions and timewait, UD over SIDR, iWARP's differences (no
//! timewait, no CONNECT_RESPONSE, exact-length private data, -ECONNREFUSED), multicast joins,
//! librdmacm's processing at fetch time, synchronous ids, DNS-mode `resolve_addrinfo`, and the
//! faults of `faults.rs`, the ACK_TIMEOUT option's effect on RoCE paths. Not modelled (yet): AF_IB addressing, SA-mode `resolve_addrinfo`,
//! alternate paths and LAP, the UD qkey-mismatch ADDR_ERROR, ECE, and the data path.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod calls;
mod cm;
mod config;
mod endpoints;
mod engine;
mod fabric;
mod faults;
mod invariants;
mod process;
mod requests;
mod rng;
mod store;
mod trace;
mod wire;
mod world;

pub use backend::SimBackend;
pub use cm::messages::MessageKind;
pub use config::{
    ack_timeout, cm_ms, kernel_timer_delay, mra_timeout, req_timeout, KernelProfile, SimConfig,
};
pub use engine::timeline::SimTime;
pub use fabric::{Fabric, FabricBuilder, SimError};
pub use trace::{TraceKind, TraceRecord};
pub use world::CmState;
