//! Shared receive queues (`struct ibv_srq`) as owned wrappers, and `id->srq`.
//!
//! # Ownership
//!
//! A [`RawSrq`] holds one live SRQ the backend made with `ibv_create_srq`, freed only by
//! [`RawSrq::destroy`], which consumes it. An id's SRQ (librdmacm's `rdma_create_srq`) is
//! made the same way and only *named* in `id->srq` ([`super::RawId::set_srq`]), which is all
//! `rdma_create_srq` does for a basic SRQ besides choosing the PD; the backend clears the
//! field before it destroys the SRQ or the id, so librdmacm never holds a dangling pointer
//! and never frees the SRQ itself (librdmacm's `rdma_destroy_srq` would also destroy CQs
//! the id's QP uses).
//!
//! # Memory
//!
//! A posted receive names registered memory by key only: the device checks keys and bounds
//! and fails the receive rather than touch anything else. The regions it names are kept
//! registered while it is outstanding by the caller (`verbs/srqs.rs`).

use std::ffi::c_int;
use std::mem;
use std::ptr::{self, NonNull};

use rdma_sys as sys;

use super::{check_ibv, last_errno, CResult, RawPd, RawSge};

/// An SRQ's attributes in C (`struct ibv_srq_attr`).
pub(crate) type SrqAttrC = sys::ibv_srq_attr;

/// An owned `struct ibv_srq`.
pub(crate) struct RawSrq(NonNull<sys::ibv_srq>);

// SAFETY: libibverbs SRQs may be used from any thread (providers lock their queues).
unsafe impl Send for RawSrq {}
// SAFETY: as above.
unsafe impl Sync for RawSrq {}

impl RawSrq {
    /// `ibv_create_srq(pd, attr)`: the SRQ and the attributes written back into `attr`.
    pub(crate) fn create(pd: &RawPd, attr: SrqAttrC) -> CResult<(RawSrq, SrqAttrC)> {
        // SAFETY: plain data; all-zero means no context.
        let mut init: sys::ibv_srq_init_attr = unsafe { mem::zeroed() };
        init.attr = attr;
        // SAFETY: live PD; `init` is valid for the call.
        let p = unsafe { sys::ibv_create_srq(pd.as_ptr(), &mut init) };
        let srq = NonNull::new(p).ok_or_else(last_errno)?;
        Ok((RawSrq(srq), init.attr))
    }

    /// The SRQ's address: a lookup key for its asynchronous events.
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }

    pub(super) fn as_ptr(&self) -> *mut sys::ibv_srq {
        self.0.as_ptr()
    }

    /// `ibv_modify_srq` with the attributes of `mask`.
    pub(crate) fn modify(&self, mut attr: SrqAttrC, mask: c_int) -> CResult<()> {
        // SAFETY: live SRQ; `attr` is valid for the call.
        check_ibv(unsafe { sys::ibv_modify_srq(self.as_ptr(), &mut attr, mask) })
    }

    /// `ibv_query_srq`.
    pub(crate) fn query(&self) -> CResult<SrqAttrC> {
        // SAFETY: plain data.
        let mut attr: SrqAttrC = unsafe { mem::zeroed() };
        // SAFETY: live SRQ; `attr` is a valid out-pointer.
        check_ibv(unsafe { sys::ibv_query_srq(self.as_ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_post_srq_recv` of one receive.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[RawSge]) -> CResult<()> {
        let mut sges: Vec<RawSge> = sges.to_vec();
        let mut wr = super::verbs::recv_wr(wr_id, &mut sges)?;
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: live SRQ; `wr` and its entries are valid for the call (the provider copies
        // them into its ring); the entries name memory by key (see the module's notes).
        check_ibv(unsafe { sys::ibv_post_srq_recv(self.as_ptr(), &mut wr, &mut bad) })
    }

    /// `ibv_destroy_srq`; gives the SRQ back when libibverbs refuses (EBUSY while a QP uses
    /// it).
    pub(crate) fn destroy(self) -> Result<(), (i32, RawSrq)> {
        // SAFETY: consumes the only owner of a live SRQ; `id->srq` no longer names it.
        check_ibv(unsafe { sys::ibv_destroy_srq(self.as_ptr()) }).map_err(|e| (e, self))
    }
}

impl super::RawId {
    /// Names `srq` (or nothing) in `id->srq`, as `rdma_create_srq` and `rdma_destroy_srq`
    /// set it: `rdma_create_qp` then gives the id's QP that SRQ.
    pub(crate) fn set_srq(&self, srq: Option<&RawSrq>) {
        let p = srq.map_or(ptr::null_mut(), RawSrq::as_ptr);
        // SAFETY: live id (the caller holds its call lock); writing a pointer field that
        // librdmacm only reads (in rdma_create_qp_ex, rdma_post_recv); the SRQ outlives the
        // field's naming it (the caller clears it first).
        unsafe { (*self.as_ptr()).srq = p };
    }
}
