//! The unsafe half of the data path: libibverbs objects (PDs, regions, completion channels,
//! CQs, QPs, asynchronous events) as owned wrappers, on the device contexts librdmacm opened.
//!
//! # Ownership
//!
//! [`RawPd`], [`RawMr`], [`RawCompChannel`], [`RawCq`] and [`RawQp`] each hold one live
//! libibverbs object. Those the backend made are freed only by a method that consumes the
//! wrapper; those librdmacm made for an id (`rdma_create_qp`'s QP, CQs and channels) are
//! *borrowed*: the backend retires them from its registry, under the same locks, before
//! `rdma_destroy_qp` or `rdma_destroy_id` frees them, and only after proving that no other
//! thread is inside a call on them (see `verbs/registry.rs`). A [`RawCtx`] is a device
//! context librdmacm opened; librdmacm keeps healthy devices open for the life of the process.
//!
//! # Memory
//!
//! A [`RawMr`] owns its buffer from registration to deregistration: the buffer is leaked out
//! of its `Box` before `ibv_reg_mr` and rebuilt only after `ibv_dereg_mr` succeeded, so the
//! device never writes memory Rust could free, move or hand out. While registered, the bytes
//! are reached only through raw-pointer copies (`read`, `write`): the device may write them
//! at any time (receives, a peer's RDMA writes), so no Rust reference to them ever exists.

use std::ffi::{c_int, c_uint, c_void};
use std::mem;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};

use rdma_sys as sys;

use super::{check_ibv, last_errno, set_nonblocking, CResult, RawSrq};

/// A device context opened by librdmacm (`id->verbs`): a lookup key and a parent for new
/// objects; never closed by the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RawCtx(NonNull<sys::ibv_context>);

// SAFETY: libibverbs contexts are thread-safe; the wrapper is only a pointer that is passed
// to libibverbs calls.
unsafe impl Send for RawCtx {}
// SAFETY: as above.
unsafe impl Sync for RawCtx {}

impl RawCtx {
    /// The context's address, a lookup key.
    pub(crate) fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The context's asynchronous event fd, set to O_NONBLOCK.
    pub(crate) fn async_fd(self) -> CResult<RawFd> {
        // SAFETY: the context is open (librdmacm never closes a healthy device); `async_fd`
        // is a plain int.
        let fd = unsafe { (*self.0.as_ptr()).async_fd };
        set_nonblocking(fd)?;
        Ok(fd)
    }

    /// The active MTU (`enum ibv_mtu`) of port `port`.
    pub(crate) fn active_mtu(self, port: u8) -> CResult<u32> {
        // SAFETY: ibv_port_attr is plain data; all-zero is a valid value to be overwritten.
        let mut attr: sys::ibv_port_attr = unsafe { mem::zeroed() };
        // SAFETY: open context; `attr` is a valid out-pointer for the full port attributes
        // (rdma-sys' port of the header's inline `ibv_query_port`).
        check_ibv(unsafe { sys::___ibv_query_port(self.0.as_ptr(), port, &mut attr) })?;
        Ok(attr.active_mtu)
    }

    /// Reads one asynchronous event without blocking (EAGAIN when there is none) and
    /// acknowledges it at once: `ibv_destroy_qp`/`ibv_destroy_cq` wait for the
    /// acknowledgement of the events they reported, so none is ever held.
    pub(crate) fn next_async_event(self) -> CResult<RawAsyncEvent> {
        let mut ev = AsyncEventC {
            element: 0,
            event_type: 0,
        };
        // SAFETY: open context whose async fd is O_NONBLOCK; `ev` has the layout of
        // `struct ibv_async_event` (a pointer-sized union, then the enum as an int: the event
        // type is read as an int so that an unknown value is no undefined behaviour).
        let ret = unsafe { ibv_get_async_event_int(self.0.as_ptr(), &mut ev) };
        if ret != 0 {
            return Err(last_errno());
        }
        let kind = ev.event_type;
        let qp_num = if is_qp_event(kind) && ev.element != 0 {
            // SAFETY: for QP events the element is the QP, live until the event is acked
            // (its destruction waits for that), which happens below.
            Some(unsafe { (*(ev.element as *const sys::ibv_qp)).qp_num })
        } else {
            None
        };
        let cq = (kind == EVENT_CQ_ERR).then_some(ev.element);
        let srq = is_srq_event(kind).then_some(ev.element);
        // SAFETY: `ev` was returned by ibv_get_async_event and is acked exactly once.
        unsafe { ibv_ack_async_event_int(&mut ev) };
        Ok(RawAsyncEvent {
            kind,
            qp_num,
            cq,
            srq,
        })
    }
}

/// `struct ibv_async_event` with the element as an integer and the type as an int.
#[repr(C)]
struct AsyncEventC {
    element: usize,
    event_type: c_int,
}

extern "C" {
    #[link_name = "ibv_get_async_event"]
    fn ibv_get_async_event_int(context: *mut sys::ibv_context, event: *mut AsyncEventC) -> c_int;
    #[link_name = "ibv_ack_async_event"]
    fn ibv_ack_async_event_int(event: *mut AsyncEventC);
}

/// `IBV_EVENT_CQ_ERR`.
const EVENT_CQ_ERR: c_int = 0;

/// Whether events of type `kind` name a QP (`IBV_EVENT_QP_FATAL` .. `PATH_MIG_ERR`,
/// `QP_LAST_WQE_REACHED`).
fn is_qp_event(kind: c_int) -> bool {
    matches!(kind, 1..=7 | 16)
}

/// Whether events of type `kind` name an SRQ (`IBV_EVENT_SRQ_ERR`,
/// `IBV_EVENT_SRQ_LIMIT_REACHED`).
fn is_srq_event(kind: c_int) -> bool {
    matches!(kind, 14 | 15)
}

/// An asynchronous event, copied and already acknowledged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawAsyncEvent {
    /// `enum ibv_event_type`.
    pub kind: c_int,
    /// The QP's number, for QP events.
    pub qp_num: Option<u32>,
    /// The CQ's address (a key only), for CQ events.
    pub cq: Option<usize>,
    /// The SRQ's address (a key only), for SRQ events.
    pub srq: Option<usize>,
}

// ---------------------------------------------------------------------------------------------
// Protection domains.
// ---------------------------------------------------------------------------------------------

/// An owned `struct ibv_pd`.
pub(crate) struct RawPd(NonNull<sys::ibv_pd>);

// SAFETY: libibverbs objects may be used from any thread.
unsafe impl Send for RawPd {}
// SAFETY: as above.
unsafe impl Sync for RawPd {}

impl RawPd {
    /// `ibv_alloc_pd`.
    pub(crate) fn alloc(ctx: RawCtx) -> CResult<RawPd> {
        // SAFETY: open context.
        let p = unsafe { sys::ibv_alloc_pd(ctx.0.as_ptr()) };
        NonNull::new(p).map(RawPd).ok_or_else(last_errno)
    }

    /// `ibv_dealloc_pd`; gives the PD back when libibverbs refuses.
    pub(crate) fn dealloc(self) -> Result<(), (i32, RawPd)> {
        // SAFETY: consumes the only owner of a live PD.
        check_ibv(unsafe { sys::ibv_dealloc_pd(self.0.as_ptr()) }).map_err(|e| (e, self))
    }

    pub(super) fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.0.as_ptr()
    }
}

// ---------------------------------------------------------------------------------------------
// Memory regions.
// ---------------------------------------------------------------------------------------------

/// A registered region that owns its buffer (see the module's "Memory").
pub(crate) struct RawMr {
    mr: NonNull<sys::ibv_mr>,
    buf: NonNull<[u8]>,
}

// SAFETY: the region is a libibverbs object (thread-safe) and a heap buffer reached only
// through raw copies that the caller serialises (`Region::cpu`).
unsafe impl Send for RawMr {}
// SAFETY: as above.
unsafe impl Sync for RawMr {}

impl RawMr {
    /// `ibv_reg_mr` of `buf` (non-empty) in `pd` with `access`; gives the buffer back on
    /// failure.
    pub(crate) fn register(
        pd: &RawPd,
        buf: Box<[u8]>,
        access: u32,
    ) -> Result<RawMr, (i32, Box<[u8]>)> {
        let len = buf.len();
        let raw: *mut [u8] = Box::into_raw(buf);
        // SAFETY: live PD; `raw` is a heap allocation of `len` bytes that nothing else
        // references (leaked from its Box above) and that stays allocated until `dereg`.
        let mr =
            unsafe { sys::ibv_reg_mr(pd.as_ptr(), raw.cast::<c_void>(), len, access as c_int) };
        match NonNull::new(mr) {
            Some(mr) => Ok(RawMr {
                mr,
                // SAFETY: from Box::into_raw, never null.
                buf: unsafe { NonNull::new_unchecked(raw) },
            }),
            // SAFETY: registration failed, so the device never knew the buffer: it is ours
            // again, rebuilt from the pointer Box::into_raw gave.
            None => Err((last_errno(), unsafe { Box::from_raw(raw) })),
        }
    }

    /// The local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: live region; plain field.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// The remote key.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: live region; plain field.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// The address of the first byte, as the device knows it.
    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_ptr().cast::<u8>() as usize as u64
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Copies `out.len()` bytes from `offset` into `out`; `None` if the range is not inside.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Option<()> {
        let end = offset.checked_add(out.len())?;
        (end <= self.len()).then_some(())?;
        // SAFETY: `offset..end` lies inside the live buffer; `out` is a distinct Rust slice.
        // The device may write the same bytes concurrently (outside Rust's memory model, as
        // shared memory with another process); no reference to them is created.
        unsafe {
            let src = self.buf.as_ptr().cast::<u8>().add(offset);
            ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len());
        }
        Some(())
    }

    /// Copies `data` to `offset`; `None` if the range is not inside.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Option<()> {
        let end = offset.checked_add(data.len())?;
        (end <= self.len()).then_some(())?;
        // SAFETY: as in `read`, in the other direction; the caller serialises CPU access.
        unsafe {
            let dst = self.buf.as_ptr().cast::<u8>().add(offset);
            ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
        }
        Some(())
    }

    /// `ibv_dereg_mr`, then the buffer back; the region back when libibverbs refuses.
    pub(crate) fn dereg(self) -> Result<Box<[u8]>, (i32, RawMr)> {
        // SAFETY: consumes the only owner of a live region.
        if let Err(e) = check_ibv(unsafe { sys::ibv_dereg_mr(self.mr.as_ptr()) }) {
            return Err((e, self));
        }
        // SAFETY: the registration is gone, so the device no longer reaches the buffer, which
        // came from Box::into_raw in `register` and was never freed.
        Ok(unsafe { Box::from_raw(self.buf.as_ptr()) })
    }
}

// ---------------------------------------------------------------------------------------------
// Completion channels and CQs.
// ---------------------------------------------------------------------------------------------

/// A `struct ibv_comp_channel`: owned, or borrowed from librdmacm (an id's implicit CQs').
pub(crate) struct RawCompChannel {
    ptr: NonNull<sys::ibv_comp_channel>,
    owned: bool,
}

// SAFETY: libibverbs objects may be used from any thread.
unsafe impl Send for RawCompChannel {}
// SAFETY: as above.
unsafe impl Sync for RawCompChannel {}

impl RawCompChannel {
    /// `ibv_create_comp_channel`, its fd made O_NONBLOCK.
    pub(crate) fn create(ctx: RawCtx) -> CResult<RawCompChannel> {
        // SAFETY: open context.
        let p = unsafe { sys::ibv_create_comp_channel(ctx.0.as_ptr()) };
        let ch = RawCompChannel {
            ptr: NonNull::new(p).ok_or_else(last_errno)?,
            owned: true,
        };
        if let Err(e) = set_nonblocking(ch.fd()) {
            let _ = ch.destroy();
            return Err(e);
        }
        Ok(ch)
    }

    /// Borrows librdmacm's channel `p` (made O_NONBLOCK).
    fn borrowed(p: NonNull<sys::ibv_comp_channel>) -> CResult<RawCompChannel> {
        let ch = RawCompChannel {
            ptr: p,
            owned: false,
        };
        set_nonblocking(ch.fd())?;
        Ok(ch)
    }

    /// The channel's fd.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: live channel; plain field.
        unsafe { (*self.ptr.as_ptr()).fd }
    }

    /// `ibv_get_cq_event` without blocking (EAGAIN when none): the CQ's address.
    pub(crate) fn next_event(&self) -> CResult<usize> {
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut ctx: *mut c_void = ptr::null_mut();
        // SAFETY: live channel with an O_NONBLOCK fd; valid out-pointers.
        check_ibv(unsafe { sys::ibv_get_cq_event(self.ptr.as_ptr(), &mut cq, &mut ctx) })?;
        Ok(cq as usize)
    }

    /// `ibv_destroy_comp_channel` of an owned channel (a borrowed one is librdmacm's to
    /// destroy: nothing happens).
    pub(crate) fn destroy(self) -> CResult<()> {
        if !self.owned {
            return Ok(());
        }
        // SAFETY: consumes the only owner of a live channel with no CQ left (checked by the
        // caller).
        check_ibv(unsafe { sys::ibv_destroy_comp_channel(self.ptr.as_ptr()) })
    }
}

/// A `struct ibv_cq`: owned, or borrowed from librdmacm.
pub(crate) struct RawCq {
    ptr: NonNull<sys::ibv_cq>,
    owned: bool,
}

// SAFETY: libibverbs objects may be used from any thread.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

/// A work completion as the backend reads it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `IBV_WC_GRH`.
    pub grh: bool,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub pkey_index: u16,
}

impl RawCq {
    /// `ibv_create_cq(ctx, cqe, NULL, channel, 0)`.
    pub(crate) fn create(
        ctx: RawCtx,
        cqe: u32,
        channel: Option<&RawCompChannel>,
    ) -> CResult<RawCq> {
        let cqe = c_int::try_from(cqe).map_err(|_| libc::EINVAL)?;
        let ch = channel.map_or(ptr::null_mut(), |c| c.ptr.as_ptr());
        // SAFETY: open context; `ch` is NULL or a live channel of the same context (checked
        // by the caller).
        let p = unsafe { sys::ibv_create_cq(ctx.0.as_ptr(), cqe, ptr::null_mut(), ch, 0) };
        NonNull::new(p)
            .map(|ptr| RawCq { ptr, owned: true })
            .ok_or_else(last_errno)
    }

    /// The CQ's address, a lookup key.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// `ibv_poll_cq` into `out` (up to its length); how many.
    pub(crate) fn poll(&self, out: &mut [RawWc]) -> CResult<usize> {
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: ibv_wc is plain data; all-zero is valid.
        let mut wcs: Vec<sys::ibv_wc> = (0..n).map(|_| unsafe { mem::zeroed() }).collect();
        // SAFETY: live CQ; `wcs` has room for `n` entries.
        let got = unsafe { sys::ibv_poll_cq(self.ptr.as_ptr(), n, wcs.as_mut_ptr()) };
        if got < 0 {
            return Err(if got < -1 { -got } else { libc::EIO });
        }
        let got = got as usize;
        for (slot, wc) in out.iter_mut().zip(&wcs[..got]) {
            let with_imm = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            *slot = RawWc {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data (network
                // order); both members are plain u32s.
                imm: with_imm
                    .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
                qp_num: wc.qp_num,
                src_qp: wc.src_qp,
                grh: wc.wc_flags & sys::ibv_wc_flags::IBV_WC_GRH.0 != 0,
                slid: wc.slid,
                sl: wc.sl,
                dlid_path_bits: wc.dlid_path_bits,
                pkey_index: wc.pkey_index,
            };
        }
        Ok(got)
    }

    /// `ibv_req_notify_cq`.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> CResult<()> {
        // SAFETY: live CQ.
        let ret = unsafe { sys::ibv_req_notify_cq(self.ptr.as_ptr(), c_int::from(solicited_only)) };
        match ret {
            0 => Ok(()),
            r if r > 0 => Err(r),
            _ => Err(last_errno()),
        }
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_events(&self, count: u32) {
        // SAFETY: live CQ; the caller checked that `count` events were fetched and not acked.
        unsafe { sys::ibv_ack_cq_events(self.ptr.as_ptr(), count as c_uint) }
    }

    /// `ibv_destroy_cq` of an owned CQ (nothing for a borrowed one); the CQ back on failure.
    pub(crate) fn destroy(self) -> Result<(), (i32, RawCq)> {
        if !self.owned {
            return Ok(());
        }
        // SAFETY: consumes the only owner of a live CQ that no QP uses and whose events are
        // all acknowledged (checked by the caller, so this does not block).
        check_ibv(unsafe { sys::ibv_destroy_cq(self.ptr.as_ptr()) }).map_err(|e| (e, self))
    }
}

// ---------------------------------------------------------------------------------------------
// QPs.
// ---------------------------------------------------------------------------------------------

/// The capacities `ibv_create_qp` wrote back into `attr->cap`.
fn written_cap(c: &sys::ibv_qp_cap) -> cmtwin::QpCap {
    cmtwin::QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Capacities and signalling of a new QP.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: bool,
    pub qp_type: u32,
    /// `IBV_QP_CREATE_*` flags (with chosen CQs only: `rdma_create_qp_ex`).
    pub create_flags: u32,
}

impl QpCaps {
    fn init_attr(
        &self,
        send_cq: &RawCq,
        recv_cq: &RawCq,
        srq: Option<&RawSrq>,
    ) -> sys::ibv_qp_init_attr {
        // SAFETY: plain data; all-zero means no SRQ and no context.
        let mut init: sys::ibv_qp_init_attr = unsafe { mem::zeroed() };
        init.send_cq = send_cq.ptr.as_ptr();
        init.recv_cq = recv_cq.ptr.as_ptr();
        init.srq = srq.map_or(ptr::null_mut(), RawSrq::as_ptr);
        init.cap.max_send_wr = self.max_send_wr;
        init.cap.max_recv_wr = self.max_recv_wr;
        init.cap.max_send_sge = self.max_send_sge;
        init.cap.max_recv_sge = self.max_recv_sge;
        init.cap.max_inline_data = self.max_inline_data;
        init.qp_type = self.qp_type;
        init.sq_sig_all = c_int::from(self.sq_sig_all);
        init
    }
}

/// A `struct ibv_qp`: owned (`ibv_create_qp`), or an id's (`id->qp`, librdmacm's).
pub(crate) struct RawQp {
    ptr: NonNull<sys::ibv_qp>,
    owned: bool,
}

// SAFETY: libibverbs QPs may be used from any thread (providers lock their queues).
unsafe impl Send for RawQp {}
// SAFETY: as above.
unsafe impl Sync for RawQp {}

/// An address handle the backend made (`ibv_create_ah`), destroyed by `destroy`.
pub(crate) struct RawAh(NonNull<sys::ibv_ah>);

// SAFETY: an ibv_ah is a plain handle; libibverbs' calls on it are thread-safe.
unsafe impl Send for RawAh {}
// SAFETY: as above.
unsafe impl Sync for RawAh {}

impl RawAh {
    /// `ibv_create_ah(pd, attr)` on port `port`.
    pub(crate) fn create(pd: &RawPd, a: &cmtwin::AhAttr, port: u8) -> CResult<RawAh> {
        let mut c = zeroed_qp_attr();
        set_ah_attr(&mut c, a, port);
        // SAFETY: live PD; `c.ah_attr` is valid for the call (libibverbs copies it).
        let p = unsafe { sys::ibv_create_ah(pd.as_ptr(), &mut c.ah_attr) };
        NonNull::new(p).map(RawAh).ok_or_else(last_errno)
    }

    /// `ibv_create_ah_from_wc(pd, wc, grh, port)` for the receive `w` (the fields
    /// libibverbs reads: QP numbers, source LID, service level, path bits, `IBV_WC_GRH`)
    /// that placed the route header `grh`.
    pub(crate) fn from_wc(
        pd: &RawPd,
        w: &cmtwin::verbs::WorkCompletion,
        grh: &[u8; 40],
        port: u8,
    ) -> CResult<RawAh> {
        // SAFETY: ibv_wc is plain data; all-zero is valid.
        let mut wc: sys::ibv_wc = unsafe { mem::zeroed() };
        wc.qp_num = w.qp_num;
        wc.src_qp = w.src_qp;
        wc.slid = w.slid;
        wc.sl = w.sl;
        wc.dlid_path_bits = w.dlid_path_bits;
        wc.pkey_index = w.pkey_index;
        if w.grh {
            wc.wc_flags = sys::ibv_wc_flags::IBV_WC_GRH.0;
        }
        let mut header = *grh;
        // SAFETY: live PD; `wc` and the 40 bytes of `header` (the size of struct ibv_grh,
        // which libibverbs only reads) are valid for the call.
        let p = unsafe {
            sys::ibv_create_ah_from_wc(
                pd.as_ptr(),
                &mut wc,
                header.as_mut_ptr().cast::<sys::ibv_grh>(),
                port,
            )
        };
        NonNull::new(p).map(RawAh).ok_or_else(last_errno)
    }

    /// `ibv_destroy_ah`; on failure the handle is given back.
    pub(crate) fn destroy(self) -> Result<(), (i32, RawAh)> {
        // SAFETY: a live address handle the backend made; consumed here.
        check_ibv(unsafe { sys::ibv_destroy_ah(self.0.as_ptr()) }).map_err(|e| (e, self))
    }
}

/// One scatter/gather entry in C form.
pub(crate) type RawSge = sys::ibv_sge;

/// A send-queue request in C terms.
#[derive(Clone, Copy)]
pub(crate) struct SendReq<'a> {
    pub wr_id: u64,
    /// `IBV_WR_*`.
    pub opcode: u32,
    /// `IBV_SEND_*`.
    pub flags: u32,
    pub imm: Option<u32>,
    /// The peer's address and key (`wr.rdma`; `wr.atomic`'s with `atomic`).
    pub remote: Option<(u64, u32)>,
    /// An atomic's `compare_add` and `swap` (`wr.atomic`, with `remote`).
    pub atomic: Option<(u64, u64)>,
    /// A UD send's destination: address handle, remote QP number, remote qkey.
    pub ud: Option<(&'a RawAh, u32, u32)>,
    pub sges: &'a [RawSge],
}

/// `IBV_WR_RDMA_WRITE`, `_WITH_IMM`, `IBV_WR_SEND`, `_WITH_IMM`, `IBV_WR_RDMA_READ`.
pub(crate) const WR_RDMA_WRITE: u32 = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub(crate) const WR_RDMA_WRITE_WITH_IMM: u32 = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
/// `IBV_WR_SEND`.
pub(crate) const WR_SEND: u32 = sys::ibv_wr_opcode::IBV_WR_SEND;
/// `IBV_WR_SEND_WITH_IMM`.
pub(crate) const WR_SEND_WITH_IMM: u32 = sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
/// `IBV_WR_RDMA_READ`.
pub(crate) const WR_RDMA_READ: u32 = sys::ibv_wr_opcode::IBV_WR_RDMA_READ;
/// `IBV_WR_ATOMIC_CMP_AND_SWP`.
pub(crate) const WR_ATOMIC_CMP_AND_SWP: u32 = sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
/// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
pub(crate) const WR_ATOMIC_FETCH_AND_ADD: u32 = sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
/// `IBV_SEND_SIGNALED`.
pub(crate) const SEND_SIGNALED: u32 = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
/// `IBV_SEND_SOLICITED`.
pub(crate) const SEND_SOLICITED: u32 = sys::ibv_send_flags::IBV_SEND_SOLICITED.0;
/// `IBV_SEND_FENCE`.
pub(crate) const SEND_FENCE: u32 = sys::ibv_send_flags::IBV_SEND_FENCE.0;
/// `IBV_SEND_INLINE`.
pub(crate) const SEND_INLINE: u32 = sys::ibv_send_flags::IBV_SEND_INLINE.0;

/// One receive request over `sges` (which must outlive its use).
pub(super) fn recv_wr(wr_id: u64, sges: &mut [RawSge]) -> CResult<sys::ibv_recv_wr> {
    // SAFETY: plain data; all-zero is a valid empty request.
    let mut wr: sys::ibv_recv_wr = unsafe { mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = if sges.is_empty() {
        ptr::null_mut()
    } else {
        sges.as_mut_ptr()
    };
    wr.num_sge = c_int::try_from(sges.len()).map_err(|_| libc::EINVAL)?;
    Ok(wr)
}

/// The C form of QP attributes and the mask of those set.
pub(crate) type QpAttrC = sys::ibv_qp_attr;

impl RawQp {
    /// `ibv_create_qp` in `pd` completing into the CQs (taking its receives from `srq`): a
    /// QP in RESET.
    pub(crate) fn create(
        pd: &RawPd,
        (send_cq, recv_cq): (&RawCq, &RawCq),
        srq: Option<&RawSrq>,
        caps: &QpCaps,
    ) -> CResult<RawQp> {
        let mut init = caps.init_attr(send_cq, recv_cq, srq);
        // SAFETY: live PD, CQs and SRQ of one context (checked by the caller); `init` is
        // valid for the call.
        let p = unsafe { sys::ibv_create_qp(pd.as_ptr(), &mut init) };
        NonNull::new(p)
            .map(|ptr| RawQp { ptr, owned: true })
            .ok_or_else(last_errno)
    }

    /// The QP's number.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: live QP; plain field.
        unsafe { (*self.ptr.as_ptr()).qp_num }
    }

    /// The QP's context.
    pub(crate) fn ctx(&self) -> RawCtx {
        // SAFETY: live QP; its context pointer is never null.
        RawCtx(unsafe { NonNull::new_unchecked((*self.ptr.as_ptr()).context) })
    }

    /// `ibv_post_send` of one request.
    pub(crate) fn post_send(&self, req: &SendReq<'_>) -> CResult<()> {
        let mut sges: Vec<RawSge> = req.sges.to_vec();
        // SAFETY: ibv_send_wr is plain data (pointers, ints, unions of those); all-zero is a
        // valid empty request.
        let mut wr: sys::ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = req.wr_id;
        wr.next = ptr::null_mut();
        wr.sg_list = if sges.is_empty() {
            ptr::null_mut()
        } else {
            sges.as_mut_ptr()
        };
        wr.num_sge = c_int::try_from(sges.len()).map_err(|_| libc::EINVAL)?;
        wr.opcode = req.opcode;
        wr.send_flags = req.flags;
        if let Some(imm) = req.imm {
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        match (req.remote, req.atomic) {
            (Some((remote_addr, rkey)), Some((compare_add, swap))) => {
                wr.wr.atomic = sys::atomic_t {
                    remote_addr,
                    compare_add,
                    swap,
                    rkey,
                };
            }
            (Some((remote_addr, rkey)), None) => wr.wr.rdma = sys::rdma_t { remote_addr, rkey },
            _ => {}
        }
        if let Some((ah, remote_qpn, remote_qkey)) = req.ud {
            wr.wr.ud = sys::ud_t {
                ah: ah.0.as_ptr(),
                remote_qpn,
                remote_qkey,
            };
        }
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP; `wr` and the entries it points to are valid for the call, and so
        // is a UD send's address handle (the device copies its address vector). Entries
        // name registered memory by key: the device checks keys and bounds and fails the
        // request (LOC_PROT_ERR) rather than touch anything else. Inline bytes are copied
        // during the call.
        let ret = unsafe { sys::ibv_post_send(self.ptr.as_ptr(), &mut wr, &mut bad) };
        match ret {
            0 => Ok(()),
            r if r > 0 => Err(r),
            r if r < -1 => Err(-r),
            _ => Err(last_errno()),
        }
    }

    /// `ibv_post_recv` of one request.
    pub(crate) fn post_recv(&self, wr_id: u64, sges: &[RawSge]) -> CResult<()> {
        let mut sges: Vec<RawSge> = sges.to_vec();
        let mut wr = recv_wr(wr_id, &mut sges)?;
        let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
        // SAFETY: as in `post_send`.
        let ret = unsafe { sys::ibv_post_recv(self.ptr.as_ptr(), &mut wr, &mut bad) };
        match ret {
            0 => Ok(()),
            r if r > 0 => Err(r),
            r if r < -1 => Err(-r),
            _ => Err(last_errno()),
        }
    }

    /// `ibv_modify_qp` with the attributes of `mask`.
    pub(crate) fn modify(&self, attr: &mut QpAttrC, mask: c_int) -> CResult<()> {
        // SAFETY: live QP; `attr` is valid for the call.
        let ret = unsafe { sys::ibv_modify_qp(self.ptr.as_ptr(), attr, mask) };
        match ret {
            0 => Ok(()),
            r if r > 0 => Err(r),
            r if r < -1 => Err(-r),
            _ => Err(last_errno()),
        }
    }

    /// `ibv_query_qp` for the state.
    pub(crate) fn state(&self) -> CResult<u32> {
        let (attr, _) = self.query(sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int)?;
        Ok(attr.qp_state)
    }

    /// `ibv_query_qp` for the capacities the device granted.
    pub(crate) fn cap(&self) -> CResult<sys::ibv_qp_cap> {
        let (attr, _) = self.query(sys::ibv_qp_attr_mask::IBV_QP_CAP.0 as c_int)?;
        Ok(attr.cap)
    }

    /// `ibv_query_qp` for the attributes of `mask`.
    fn query(&self, mask: c_int) -> CResult<(sys::ibv_qp_attr, sys::ibv_qp_init_attr)> {
        // SAFETY: plain data, overwritten by the call.
        let mut attr: sys::ibv_qp_attr = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut init: sys::ibv_qp_init_attr = unsafe { mem::zeroed() };
        // SAFETY: live QP; valid out-pointers.
        let ret = unsafe { sys::ibv_query_qp(self.ptr.as_ptr(), &mut attr, mask, &mut init) };
        match ret {
            0 => Ok((attr, init)),
            r if r > 0 => Err(r),
            _ => Err(last_errno()),
        }
    }

    /// `ibv_destroy_qp` of an owned QP; the QP back on failure. A QP of an id is destroyed
    /// by librdmacm (`RawId::destroy_qp`).
    pub(crate) fn destroy(self) -> Result<(), (i32, RawQp)> {
        if !self.owned {
            return Ok(());
        }
        // SAFETY: consumes the only owner of a live QP; its asynchronous events were acked
        // when read, so this does not block.
        check_ibv(unsafe { sys::ibv_destroy_qp(self.ptr.as_ptr()) }).map_err(|e| (e, self))
    }
}

// ---------------------------------------------------------------------------------------------
// The verbs side of ids.
// ---------------------------------------------------------------------------------------------

/// What `rdma_create_qp` left on an id: its QP, and the CQs and channels librdmacm made for
/// it (absent when the application gave its own).
pub(crate) struct IdQpParts {
    pub qp: RawQp,
    pub send_cq: Option<RawCq>,
    pub recv_cq: Option<RawCq>,
    pub send_channel: Option<RawCompChannel>,
    pub recv_channel: Option<RawCompChannel>,
}

impl super::RawId {
    /// `id->verbs`, if the id has a device.
    pub(crate) fn ctx(&self) -> Option<RawCtx> {
        // SAFETY: live id; reading a pointer field.
        NonNull::new(unsafe { (*self.as_ptr()).verbs }).map(RawCtx)
    }

    /// `rdma_create_qp(id, pd, attr)` with the given CQs and SRQ (without one, librdmacm
    /// gives the QP `id->srq`); returns the QP number and the capacities libibverbs wrote
    /// back into `attr->cap`.
    pub(crate) fn create_qp_with(
        &self,
        pd: &RawPd,
        cqs: Option<(&RawCq, &RawCq)>,
        srq: Option<&RawSrq>,
        caps: &QpCaps,
    ) -> CResult<(u32, cmtwin::QpCap)> {
        if let (Some((s, r)), true) = (cqs, caps.create_flags != 0) {
            return self.create_qp_flagged(pd, (s, r), srq, caps);
        }
        // SAFETY: plain data; zero CQs make librdmacm create them.
        let mut init: sys::ibv_qp_init_attr = unsafe { mem::zeroed() };
        if let Some((s, r)) = cqs {
            init = caps.init_attr(s, r, srq);
        } else {
            init.cap.max_send_wr = caps.max_send_wr;
            init.cap.max_recv_wr = caps.max_recv_wr;
            init.cap.max_send_sge = caps.max_send_sge;
            init.cap.max_recv_sge = caps.max_recv_sge;
            init.cap.max_inline_data = caps.max_inline_data;
            init.qp_type = caps.qp_type;
            init.sq_sig_all = c_int::from(caps.sq_sig_all);
        }
        // SAFETY: live id with a device and no QP (checked by the caller); the PD and CQs are
        // live objects of the id's context (checked by the caller; librdmacm checks the PD).
        super::check(unsafe { sys::rdma_create_qp(self.as_ptr(), pd.as_ptr(), &mut init) })?;
        Ok((self.qp_num().ok_or(libc::EIO)?, written_cap(&init.cap)))
    }

    /// `rdma_create_qp_ex(id, attr)` with the PD, the CQs and `caps.create_flags`; returns
    /// the QP number and the capacities written back.
    fn create_qp_flagged(
        &self,
        pd: &RawPd,
        (send_cq, recv_cq): (&RawCq, &RawCq),
        srq: Option<&RawSrq>,
        caps: &QpCaps,
    ) -> CResult<(u32, cmtwin::QpCap)> {
        let base = caps.init_attr(send_cq, recv_cq, srq);
        // SAFETY: plain data; all-zero means no XRC domain, indirection table or TSO.
        let mut init: sys::ibv_qp_init_attr_ex = unsafe { mem::zeroed() };
        init.send_cq = base.send_cq;
        init.recv_cq = base.recv_cq;
        init.cap = base.cap;
        init.qp_type = base.qp_type;
        init.sq_sig_all = base.sq_sig_all;
        init.srq = base.srq;
        init.pd = pd.as_ptr();
        init.create_flags = caps.create_flags;
        init.comp_mask = sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
            | sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_CREATE_FLAGS.0;
        // SAFETY: live id with a device and no QP (checked by the caller); the PD and CQs are
        // live objects of the id's context (checked by the caller); `init` is valid for the
        // call (librdmacm copies what it keeps).
        super::check(unsafe { sys::rdma_create_qp_ex(self.as_ptr(), &mut init) })?;
        Ok((self.qp_num().ok_or(libc::EIO)?, written_cap(&init.cap)))
    }

    /// Borrowed views of the id's QP and of the CQs and channels librdmacm made for it.
    pub(crate) fn qp_parts(&self) -> CResult<Option<IdQpParts>> {
        // SAFETY: live id; pointer fields that librdmacm set in rdma_create_qp and clears in
        // rdma_destroy_qp (the caller holds the id's call lock).
        unsafe {
            let id = &*self.as_ptr();
            let Some(qp) = NonNull::new(id.qp) else {
                return Ok(None);
            };
            let cq = |p: *mut sys::ibv_cq| NonNull::new(p).map(|ptr| RawCq { ptr, owned: false });
            let ch = |p: *mut sys::ibv_comp_channel| {
                NonNull::new(p).map(RawCompChannel::borrowed).transpose()
            };
            Ok(Some(IdQpParts {
                qp: RawQp {
                    ptr: qp,
                    owned: false,
                },
                send_cq: cq(id.send_cq),
                recv_cq: cq(id.recv_cq),
                send_channel: ch(id.send_cq_channel)?,
                recv_channel: ch(id.recv_cq_channel)?,
            }))
        }
    }

    /// `rdma_init_qp_attr` for `state`: the attributes and their mask.
    pub(crate) fn init_qp_attr(&self, state: u32) -> CResult<(QpAttrC, c_int)> {
        // SAFETY: plain data; the state is an input.
        let mut attr: sys::ibv_qp_attr = unsafe { mem::zeroed() };
        attr.qp_state = state;
        let mut mask: c_int = 0;
        // SAFETY: live id with a device (checked by the caller); valid out-pointers.
        super::check(unsafe { sys::rdma_init_qp_attr(self.as_ptr(), &mut attr, &mut mask) })?;
        Ok((attr, mask))
    }
}

/// An `ibv_qp_attr` of zeros (no attribute set).
pub(crate) fn zeroed_qp_attr() -> QpAttrC {
    // SAFETY: plain data (ints and unions of byte arrays); all-zero is valid.
    unsafe { mem::zeroed() }
}

/// `union ibv_gid`.
pub(crate) type Gid = sys::ibv_gid;

/// The 16 bytes of a GID.
pub(crate) fn gid_raw(g: &Gid) -> [u8; 16] {
    // SAFETY: every member of the union is 16 bytes of plain data; any bit pattern is valid.
    unsafe { g.raw }
}

/// Sets the address vector of `c` from the trait's `AhAttr`, on port `port`.
pub(crate) fn set_ah_attr(c: &mut QpAttrC, a: &cmtwin::AhAttr, port: u8) {
    c.ah_attr.grh.dgid = sys::ibv_gid { raw: a.grh.dgid };
    c.ah_attr.grh.flow_label = a.grh.flow_label;
    c.ah_attr.grh.sgid_index = a.grh.sgid_index;
    c.ah_attr.grh.hop_limit = a.grh.hop_limit;
    c.ah_attr.grh.traffic_class = a.grh.traffic_class;
    c.ah_attr.dlid = a.dlid;
    c.ah_attr.sl = a.sl;
    c.ah_attr.src_path_bits = a.src_path_bits;
    c.ah_attr.static_rate = a.static_rate;
    c.ah_attr.is_global = u8::from(a.is_global);
    c.ah_attr.port_num = port;
}
