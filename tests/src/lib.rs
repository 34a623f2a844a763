//! The conformance suite: behaviour of the CM, written once against [`TestBed`], run on every
//! backend. `tests/sim_*.rs` run it on the simulator; `tests/verbs_*.rs` run it on real
//! librdmacm (inside the Soft-RoCE VM in CI, or on hardware with `CMTWIN_RDMA_ADDR` set).
//!
//! Every check is written against CM-SEMANTICS.md: the section it follows is named in each test.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bed;
pub mod conformance;
pub mod steps;

pub use bed::{SimBed, TestBed};
