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
//! ChaCha streams seeded from the run's seed; ordered maps only; no wall clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod calls;
mod config;
mod fabric;
mod faults;
mod ibcm;
mod invariants;
mod process;
mod rng;
mod time;
mod trace;
mod wire;
mod world;

pub use backend::SimBackend;
pub use config::{ack_timeout, cm_ms, KernelProfile, SimConfig};
pub use fabric::{Fabric, FabricBuilder, SimError};
pub use time::SimTime;
pub use trace::{Trace, TraceKind, TraceRecord};
pub use wire::MessageKind;
pub use world::CmState;
