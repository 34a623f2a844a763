//! cmtwin: the RDMA connection manager (librdmacm) behind one safe trait, [`CmBackend`], with two
//! implementations: the real librdmacm (`cmtwin-verbs`) and a seeded, deterministic, in-memory
//! simulated fabric (`cmtwin-sim`).
//!
//! This crate holds what both share: the trait, the event taxonomy ([`EventKind`], numbered as
//! librdmacm numbers it), event data ([`CmEvent`], [`EventParam`]), call parameters, port
//! spaces, transports and their private-data limits, the error type ([`CmError`], which
//! names the call and the errno), and the verbs data path ([`verbs::DataPath`]). It has no `unsafe` and does no I/O.
//!
//! The [`guide`] shows the whole path: protocol code written once, tested on the simulator
//! with faults and seeds, run on Soft-RoCE and on RDMA hardware.
//!
//! Protocol code is written once, generic over the backend:
//!
//! ```
//! use cmtwin::{CmBackend, ChannelHandle, EventKind, Result, Wait};
//!
//! /// Waits for the next event on `channel`, checks its kind, acknowledges it.
//! fn expect_event<B: CmBackend>(cm: &B, channel: ChannelHandle, want: EventKind) -> Result<i32> {
//!     let event = cm.get_cm_event(channel, Wait::Block)?;
//!     let (kind, status) = (event.kind(), event.status());
//!     cm.ack_cm_event(event)?;
//!     assert_eq!(kind, want, "unexpected event");
//!     Ok(status)
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod device;
mod dispatch;
pub mod ep;
mod error;
mod event;
mod event_kind;
mod expect;
pub mod guide;
mod handle;
mod params;
mod port_space;
pub mod runtime;
mod status;
pub mod sync;
pub mod task;
pub mod thread;
mod transport;
pub mod verbs;

pub use backend::CmBackend;
pub use device::{
    AtomicCap, DeviceAttr, DeviceInfo, IdDevice, LinkLayer, Mtu, NodeType, PortAttr, PortState,
    TransportType,
};
pub use dispatch::{Dispatcher, Flow, Routed};
pub use error::{Call, CmError, Errno, Result};
pub use event::{
    AckTicket, AhAttr, CmEvent, ConnData, EventInfo, EventParam, EventRelease, GlobalRoute, UdData,
};
pub use event_kind::EventKind;
pub use expect::{expect_event, ExpectError};
pub use handle::{
    AhHandle, ChannelHandle, CompChannelHandle, CqHandle, IdHandle, MrHandle, PdHandle, QpHandle,
    SrqHandle,
};
pub use params::{
    rai, AddrInfo, AddrInfoHints, AsyncEvent, CmOption, ConnParam, JoinFlags, QpCap, QpInitAttr,
    Wait, IB_PATH_PRIMARY_FLAGS, IB_PATH_RECORD_LEN, RDMA_MAX_RESP_RES, RDMA_UDP_QKEY,
};
pub use port_space::{PortSpace, QpType};
pub use status::{EventStatus, IbRejReason, SidrStatus};
pub use transport::{
    delivered_private_data_len, max_private_data, PrivateDataOp, Transport, CMA_HEADER_LEN,
};

/// The README's example, compiled as a doc test so that it stays true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
