//! The verbs data path: protection domains, memory regions, completion queues and channels,
//! QPs with chosen CQs, address handles, work requests (UD sends to an address handle
//! included) and completions, as libibverbs has them, behind the
//! [`DataPath`] trait that extends [`crate::CmBackend`].
//!
//! A connection's first request, written once for every backend that implements it:
//!
//! ```
//! use cmtwin::verbs::{AccessFlags, DataPath, Payload, SendOp, SendWr, WcStatus, WorkCompletion};
//! use cmtwin::{IdHandle, Result};
//!
//! /// Sends `request` from a registered region of `pd` and waits for its completion on `cq`.
//! fn send_request<B: DataPath>(
//!     dp: &B,
//!     id: IdHandle,
//!     pd: cmtwin::PdHandle,
//!     cq: cmtwin::CqHandle,
//!     request: &[u8],
//! ) -> Result<WcStatus> {
//!     let mr = dp.reg_mr(pd, request.to_vec(), AccessFlags::NONE)?;
//!     let sge = [mr.sge(0, request.len() as u32)];
//!     let qp = dp.qp(id)?.ok_or_else(|| cmtwin::CmError::application("no QP"))?;
//!     dp.post_send(qp, &SendWr::new(1, SendOp::Send, Payload::Sges(&sge)))?;
//!     let mut wc = [WorkCompletion::default()];
//!     while dp.poll_cq(cq, &mut wc)? == 0 {}
//!     dp.dereg_mr(mr.handle)?;
//!     Ok(wc[0].status)
//! }
//! ```

mod completion;
mod datapath;
mod helpers;
mod memory;
mod poll;
mod qp;
mod qp_mask;
mod qp_transitions;
mod send_flags;
mod srq;
mod work;

pub use completion::{WcOpcode, WcStatus, WorkCompletion, GRH_LEN};
pub use datapath::DataPath;
pub use memory::{AccessFlags, MemoryRegion};
pub use poll::{list_sources, PollSource};
pub use qp::{QpAttr, QpCqs, QpInitAttrEx, QpState, VerbsAsyncEvent};
pub use qp_mask::QpAttrMask;
pub use qp_transitions::{modify_qp_is_ok, qp_transition, QpModifyRefusal, QpTransition};
pub use send_flags::SendFlags;
pub use srq::{SrqAttr, SrqAttrMask};
pub use work::{Payload, RecvWr, SendOp, SendWr, Sge, UdDest, MULTICAST_QPN};
