//! The conformance suite: behaviour of the CM, written once against [`TestBed`], run on every
//! backend. `tests/sim_*.rs` run it on the simulator; `tests/verbs_*.rs` run it on real
//! librdmacm (inside the Soft-RoCE VM in CI, or on hardware with `CMTWIN_RDMA_ADDR` set).
//!
//! Every check is written against CM-SEMANTICS.md: the section it follows is named in each test.
//!
//! * [`bed`]: the [`TestBed`] trait and [`SimBed`]; [`bed_verbs`]: [`VerbsBed`];
//!   [`bed_id`]: which real bed (driver, kernel) a run is on, and its simulated twin.
//! * [`steps`]: the small steps scenarios are made of (`expect_event`, `listen_on`,
//!   `connect_pair`, teardown).
//! * [`capability`]: what a scenario can need from a bed ([`capability::Need`]);
//!   [`device_link`]: removing and restoring the VM's rxe or siw device.
//! * [`conformance`]: the scenarios, one file per area, with what each needs;
//!   [`harness`]: one trial per bed and scenario (libtest-mimic), ignored with its reason
//!   where the bed lacks a need.
//! * [`datapath`]: steps of data path scenarios (connections with PDs, CQs and completion
//!   channels, regions, waiting for completions), generic over `cmtwin::verbs::DataPath`.
//! * [`iwarp_external_qp`]: iWARP connections over external QPs as transcripts, and the
//!   transcripts siw gives on Linux 6.1 and 6.12, which the simulator and the real beds both
//!   reproduce.
//! * [`ports`]: ports of rdma-core's `rping` and `ucmatose`, wire-compatible with the C tools,
//!   and a reconnecting key-value RPC (`ports::kv_rpc`).
//! * [`random_calls`]: random call sequences on the simulator ([`random_calls::Op`]) and the
//!   model of the CM's contract they are checked against ([`random_calls::Model`]: errnos from
//!   the kernel's set, events at most once), shared by `tests/sim_proptest.rs` and the
//!   cargo-fuzz target in `fuzz/` (feature `arbitrary`).
//! * [`random_verbs`]: random data path call sequences on the simulator and the contract
//!   they are checked against (every request completes once, errnos, regions' contents,
//!   atomics' statuses and each fetch and add applied once),
//!   shared by `tests/sim_verbs_proptest.rs` and the cargo-fuzz target `verbs_sequences`.
//! * [`cm_model`]: a reference model of the CM that predicts every call's exact result and
//!   every event's exact kind, id and status, over random lifecycles generic over [`TestBed`].
//! * `tests/sim_conformance.rs`: the suite on RoCE (three seeds), InfiniBand, iWARP and
//!   mainline-InfiniBand fabrics; `tests/verbs_conformance.rs`: on real librdmacm (ignored
//!   unless `CMTWIN_RDMA_ADDR` names an RDMA device);
//!   `tests/sim_only.rs`: what only the simulator can check (exact times derived independently
//!   of its timer code, deadlocks, processes, faults at an exact moment, kernel profiles);
//!   `tests/sim_determinism.rs`: a seed replays byte for byte;
//!   `tests/sim_proptest.rs`: random call sequences keep the CM's contract;
//!   `tests/sim_model.rs` and `tests/verbs_model.rs`: the CM model on the simulator (RoCE,
//!   InfiniBand, iWARP) and on real librdmacm;
//!   `tests/sim_datapath.rs`: the verbs data path on the simulator;
//!   `tests/sim_atomics.rs`: RDMA atomics on the simulator (the shared scenarios of
//!   [`atomics`], which the rxe and siw beds run in backend-verbs' data path tests);
//!   `tests/sim_rpc.rs`: the key-value RPC under seeded faults, 1000 seeds (example:
//!   `tests/examples/request_response.rs`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod atomics;
pub mod bed;
pub mod bed_id;
pub mod bed_verbs;
pub mod capability;
pub mod cm_model;
pub mod conformance;
pub mod datapath;
pub mod device_link;
pub mod devices;
pub mod early_send;
pub mod ep_helpers;
pub mod fidelity;
pub mod fuzzing;
pub mod harness;
pub mod iwarp_datapath;
pub mod iwarp_external_qp;
pub mod measured_devices;
pub mod ports;
pub mod qp_modify;
pub mod random_calls;
pub mod random_verbs;
pub mod recording;
pub mod srq_datapath;
pub mod steps;
pub mod trace_text;
pub mod ud_datapath;
pub mod vec_helpers;

pub use bed::{SimBed, TestBed};
pub use bed_verbs::VerbsBed;
