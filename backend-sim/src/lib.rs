//! cmtwin-sim: a seeded, deterministic, in-memory RDMA fabric implementing
//! [`cmtwin::CmBackend`]. It emits the CM's whole event taxonomy in virtual time, including the
//! rare events that real deployments trip over (DEVICE_REMOVAL, ADDR_CHANGE, MULTICAST_ERROR,
//! spontaneous UNREACHABLE, TIMEWAIT_EXIT, the EISCONN race of `rdma_notify`).
//!
//! Where things are (arrows point down: the world uses the CM machines and the engine, never
//! the other way):
//!
//! * [`Fabric`] (`fabric.rs`): build a world from a seed, get one [`SimBackend`] per host, run
//!   simulated processes (`run.rs`, `process.rs`: the scheduler; `handoff.rs`: the world's
//!   lock and how a process's thread waits for the baton), inject faults (`faults.rs`),
//!   read the trace (`trace.rs`); `error.rs`: [`FabricError`] and [`SimError`].
//! * `backend.rs`: the `CmBackend` implementation, one host's calls into the world.
//! * `world.rs`: the world, split by owner: `topology.rs` (hosts, devices, addresses),
//!   `kernel.rs` (each host's ids, channels, ports and fetched events), `endpoints.rs` (the CM
//!   endpoints: creating them, feeding them inputs, carrying out their outputs), `wire.rs` (links,
//!   latency, loss, targeted faults, delivery), `requests.rs` (requests arriving at a CM), the
//!   timeline, the trace and the scheduler; `invariants.rs` checks it after steps and calls in
//!   debug builds (amortized: constant cost per step).
//! * `calls/`: each librdmacm call as the kernel executes it, with its legality checks and
//!   errnos (see `calls/mod.rs` for which file produces which event).
//! * `cm/`: the CM protocol apart from the world: `messages.rs` (the wire formats) and
//!   `endpoint.rs`, one side of one connection attempt as a sans-IO state machine (inputs: a
//!   call, a message, its timer; outputs: messages, its timer, events), unit-tested alone.
//! * The testing toolkit on top: `plan/` ([`FaultPlan`]: declarative faults in JSON, armed in
//!   the world through hooks in the wire and the kernel's event queue; swarm plans drawn from a
//!   seed), [`replay`] (seeds and plans from `CMTWIN_SEED`/`CMTWIN_PLAN`, the replay line of a
//!   failing test), [`sweep`] (many seeds over the cores, sharded, failing plans reduced),
//!   [`scenarios`] (the ones the `cmtwin-sweep` command runs) and `diagram.rs`
//!   ([`sequence_diagram`]: a trace as an SVG sequence diagram).
//! * `verbs/`: the data path at the level of libibverbs' objects (see `verbs/mod.rs`): the RC
//!   QP as a sans-IO machine (`verbs/rc.rs`), data packets on their own wire path.
//! * `engine/timeline.rs`: virtual time and the timeline of cancellable actions (a slab with
//!   generations under a (time, sequence) heap); `store.rs`: objects by never-reused serial
//!   keys; `rng.rs`: the seeded random streams; `config.rs`: the CM's timing.
//!
//! Handles, events and tickets carry the fabric's number above a 40-bit serial that is never
//! reused, so a stale or foreign one is refused (ENOENT, EBADF, EINVAL), never aliased; an
//! acknowledgement must name the very event (id and kind) its ticket was issued for.
//!
//! Tracing off is free: records are structured values ([`TraceRecord`] text is made only when
//! asked), and with `SimConfig::trace` false nothing is formatted or allocated for them.
//!
//! Driving. Either one thread drives the fabric, or its processes do:
//!
//! * Outside [`Fabric::run`], a blocking call (`Wait::Block`, a timeout, `sleep`, a call on a
//!   synchronous id) runs the timeline inline until it is satisfied and fails with EDEADLK as
//!   soon as the timeline is empty (or holds nothing but RC sends retrying for ever in vain,
//!   `verbs/stuck.rs`: after RNR NAKs at responders without a receive, or rxe's transport
//!   retries toward a peer that cannot answer; so does a run whose
//!   processes are all blocked): it never waits for another OS thread. An event loop can
//!   instead drive the timeline itself with [`Fabric::step`], [`Fabric::next_event_time`] and
//!   [`Fabric::run_until`]. Several threads may share a fabric there, but the trace then follows
//!   the order in which the OS lets them in.
//! * While [`Fabric::run`] is in progress, only the fabric's own processes may call into it,
//!   one at a time in virtual time: a [`SimBackend`] call from any other thread fails with
//!   EPERM (only `now` is allowed), fault injection from another thread fails with
//!   [`FabricError::Running`], driving the timeline is refused to everyone, and a second `run`
//!   (nested in a process, or from another thread) is refused. So the trace of a run never
//!   depends on the OS's thread scheduling. In a process, an unproductive poll
//!   (`Wait::NonBlocking`, a zero timeout, a zero sleep) yields: the other processes run first,
//!   or, if none can, the timeline runs its next action. When the timeline is empty and every
//!   process that can run keeps polling in vain with nothing changed in between (10 000 times
//!   in a row each), nothing ever can: where hardware would spin for ever, the poll fails with
//!   EDEADLK naming the livelock (a spin on `cmtwin::thread::yield_now` ends its process with
//!   that report).
//!
//! Threads and tasks. A process may start more processes of its host with
//! `cmtwin::thread::spawn` while the run is in progress, and use `cmtwin::sync`'s mutex,
//! condition variable, semaphore and channel: each operation is a yield point, a wait lets the
//! others run, and a deadlock names who waits for what and who holds it. Which runnable process
//! goes next is the scheduler's seeded choice ([`SchedConfig`]: random, PCT or round-robin),
//! with optional preemption at yield points (every trait call, every primitive operation) and a
//! seeded wake-up latency for woken processes; sweeps draw one schedule per seed
//! ([`SchedConfig::drawn`]). `cmtwin::task` runs many connections as async tasks of one
//! process, waiting through the fabric in virtual time.
//!
//! The link model (`wire.rs`): each ordered pair of hosts is a FIFO link; jitter never
//! reorders it; a delayed message ([`Fabric::delay_next`]) holds back every later message of
//! its link; a reordered one ([`Fabric::reorder_next`]) is overtaken by them, which only the IB
//! CM's messages (datagrams) can be, never iWARP's (TCP).
//!
//! Determinism: one queue ordered by (virtual time, sequence number); randomness only from
//! ChaCha streams seeded from the run's seed; hash tables only for lookups, never iterated in
//! their own order; no wall clock. The same seed
//! and the same calls give a byte-identical trace; a failed [`Fabric::run`] names the line
//! that replays it.
//!
//! Fidelity. The default [`SimConfig`] follows Linux 6.1 with Soft-RoCE as measured in
//! CM-SEMANTICS.md §19 (packet life time 18 with rxe's ACK delay and a 250 Hz timer wheel:
//! about 2.27 s of timewait, 6.37 s between REQ retransmissions, 102.37 s to UNREACHABLE,
//! where §19 measured 2.2-2.3 s, 6.2-6.4 s and 102.1-102.3 s); [`SimConfig::mainline`]
//! follows newer kernels. Modelled: the rdma_cm id state machine and legal-call table, IP
//! addressing (one /24 or /64 per device, on-link neighbours, silent addresses, NOARP),
//! ephemeral ports and REUSEADDR/AFONLY conflicts, RC connections over REQ/MRA/REP/RTU/REJ/
//! DREQ/DREP with retransmissions and timewait, UD over SIDR, iWARP's differences (no
//! timewait, no CONNECT_RESPONSE, exact-length private data, -ECONNREFUSED), multicast joins,
//! librdmacm's processing at fetch time, synchronous ids, DNS-mode `resolve_addrinfo`, and the
//! faults of `faults.rs` and of fault plans, the ACK_TIMEOUT option's effect on RoCE paths. Not modelled (yet):
//! AF_IB addressing, alternate paths and LAP, the UD qkey-mismatch ADDR_ERROR, ECE.
//! Calls cost no virtual time of their own (a system call's microseconds are not modelled):
//! time moves with the wire, the kernel's timers and the subnet manager, and inside a call
//! only where the kernel blocks in it (`rdma_disconnect` moving the QP to ERROR,
//! [`SimConfig::disconnect_qp_time`]; siw's TCP handshake in `rdma_connect`; the waits of
//! synchronous ids). A port of `cmtime` therefore measures 0 for `rdma_create_id`, QP
//! creation or `rdma_destroy_id`, and the wire and timers for the rest.
//!
//! The data path ([`cmtwin::verbs::DataPath`], `verbs/`): PDs, memory regions, CQs shared by
//! QPs with completion channels and arming, RC QPs whose states the CM drives, and RC
//! delivery in order and exactly once over the simulated links with transport and RNR retries,
//! with the completion statuses hardware reports; address handles and UD datagrams, unicast
//! and to every member of a multicast group, unreliable on the same links.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod calls;
mod chunked_queue;
mod cm;
mod config;
mod diagram;
mod endpoints;
mod engine;
mod error;
mod fabric;
mod faults;
mod handoff;
mod invariants;
mod kernel;
mod lazy_deque;
mod plan;
mod polling;
mod process;
pub mod replay;
mod requests;
mod rng;
mod run;
pub mod scenarios;
mod schedule;
mod sim_runtime;
mod slab;
mod store;
#[cfg(feature = "proptest")]
pub mod strategies;
pub mod sweep;
mod tickets;
mod topology;
mod trace;
mod verbs;
mod wire;
mod world;

pub use backend::{SimBackend, IW_TCP_SYN_GIVE_UP};
pub use cm::messages::MessageKind;
pub use config::{
    ack_timeout, cm_ms, kernel_timer_delay, mra_timeout, req_timeout, KernelProfile, SimConfig,
    MAX_CA_ACK_DELAY, MAX_CM_RETRIES, MAX_KERNEL_HZ, MAX_PACKET_LIFE_TIME, MAX_SIM_DURATION,
};
pub use diagram::sequence_diagram;
pub use engine::timeline::SimTime;
pub use error::{FabricError, SimError};
pub use fabric::{Fabric, FabricBuilder};
pub use faults::PathFailure;
pub use kernel::CmState;
pub use plan::{Fault, FaultAction, FaultPlan, MessageChance, PlanError, SwarmSpace, Trigger};
pub use schedule::{SchedConfig, SchedPolicy, MAX_PCT_DEPTH, MAX_WAKE_LATENCY};
pub use trace::{TraceKind, TraceRecord};

/// The per-connection objects stay compact: the benches' heap per connected id is their sum
/// plus the tables that index them (BENCHMARKS.md). A field that grows one of them fails here
/// first, with the size to weigh against the figure.
#[cfg(test)]
mod storage_sizes {
    use std::mem::size_of;

    #[test]
    fn per_connection_objects_keep_their_size() {
        assert_eq!(size_of::<crate::kernel::Id>(), 224, "rdma_cm id");
        assert_eq!(size_of::<crate::verbs::Qp>(), 184, "QP");
        assert_eq!(size_of::<crate::verbs::RcQp>(), 80, "RC machine");
        assert_eq!(size_of::<crate::endpoints::EpRecord>(), 120, "CM endpoint");
        assert_eq!(size_of::<crate::verbs::Cq>(), 48, "CQ");
        assert_eq!(
            size_of::<crate::verbs::CompChannel>(),
            24,
            "completion channel"
        );
        assert_eq!(
            size_of::<crate::kernel::PortHolders>(),
            16,
            "a port's holders"
        );
    }
}
