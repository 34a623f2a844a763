//! `ibv_post_send` and `ibv_post_recv`: each request goes to the device under a token of the
//! backend's (its `wr_id` in C), recorded with the application's `wr_id` and the regions its
//! entries name; the completion brings the token back (`cqs.rs` translates it and releases
//! the regions). Tokens of a QP count up; the low bit is 1 for receives. Send tokens follow
//! the send queue's order (posts of one QP are serialised), so a send's completion also
//! completes every earlier send of the queue (unsignaled ones report nothing themselves).
//!
//! A send refused before RTS may stay in the send queue (`kept_though_refused`): it keeps
//! its token, so that its completion, when it comes, carries the application's `wr_id`.
//!
//! A send on a UD QP must name its destination (`wr.ud`: an address handle of the QP's PD)
//! and be a send (with or without immediate data) of at most the port's active MTU; what
//! rxe would take and silently not send (an over-long datagram) is refused with EINVAL, as
//! the simulator refuses it. A connected QP refuses a `wr.ud`.

use std::sync::Arc;

use cmtwin::verbs::{Payload, RecvWr, SendOp, SendWr, Sge, WcOpcode};
use cmtwin::{Call, QpHandle, Result};

use super::objects::{AhObj, Posted, QpObj};
use super::regions::{keys_for_post, release_all, KeyTable, Region};
use crate::ffi::{
    RawSge, SendReq, SEND_FENCE, SEND_INLINE, SEND_SIGNALED, SEND_SOLICITED, WR_ATOMIC_CMP_AND_SWP,
    WR_ATOMIC_FETCH_AND_ADD, WR_RDMA_READ, WR_RDMA_WRITE, WR_RDMA_WRITE_WITH_IMM, WR_SEND,
    WR_SEND_WITH_IMM,
};
use crate::registry::lock;
use crate::{c_err, err, VerbsBackend};

/// The C entries of `sges`.
pub(super) fn raw_sges(sges: &[Sge]) -> Vec<RawSge> {
    sges.iter()
        .map(|s| RawSge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// Counts the request against every registered region its entries name by key.
pub(super) fn hold(keys: &KeyTable, ctx: usize, sges: &[Sge]) -> Vec<Arc<Region>> {
    sges.iter()
        .filter_map(|s| keys.get(&(ctx, s.lkey)))
        .map(|r| {
            r.hold();
            Arc::clone(r)
        })
        .collect()
}

/// The errno of a refused post.
fn post_errno(call: Call, errno: i32, qp: &QpObj, send: bool) -> cmtwin::CmError {
    match errno {
        libc::ENOMEM => {
            let depth = if send {
                qp.cap.max_send_wr
            } else {
                qp.cap.max_recv_wr
            };
            err(
                call,
                errno,
                format!("the queue holds its {depth} requests (or the device's limit)"),
            )
        }
        e => c_err(call, e),
    }
}

/// Whether a send the device refused with `errno` may still be in QP `qp`'s send queue: the
/// providers write the request into the queue, then ring the kernel's doorbell, which refuses
/// a QP below RTS (rxe: EINVAL, in INIT or RTR; siw: ENOTCONN) and leaves the request there
/// (rxe sends it with the next post that succeeds; siw never). Such a request keeps its
/// token and its regions busy, as posted work does, until it completes or the QP goes.
fn kept_though_refused(qp: &QpObj, errno: i32) -> bool {
    match errno {
        libc::ENOTCONN => true,
        // INIT (1) or RTR (2); a state that cannot be read keeps it, to be safe.
        libc::EINVAL => matches!(qp.raw.state(), Ok(1 | 2) | Err(_)),
        _ => false,
    }
}

impl VerbsBackend {
    pub(crate) fn post_send_impl(&self, h: QpHandle, wr: &SendWr<'_>) -> Result<()> {
        let call = Call::PostSend;
        let qp = self.qp_obj(call, h)?;
        let ud = self.ud_destination(h, &qp, wr)?;
        let mut atomic = None;
        let (opcode, imm, remote, completes_as) = match wr.op {
            SendOp::Send => (WR_SEND, None, None, WcOpcode::Send),
            SendOp::SendWithImm(i) => (WR_SEND_WITH_IMM, Some(i), None, WcOpcode::Send),
            SendOp::RdmaWrite { remote_addr, rkey } => (
                WR_RDMA_WRITE,
                None,
                Some((remote_addr, rkey)),
                WcOpcode::RdmaWrite,
            ),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (
                WR_RDMA_WRITE_WITH_IMM,
                Some(imm),
                Some((remote_addr, rkey)),
                WcOpcode::RdmaWrite,
            ),
            SendOp::RdmaRead { remote_addr, rkey } => (
                WR_RDMA_READ,
                None,
                Some((remote_addr, rkey)),
                WcOpcode::RdmaRead,
            ),
            SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare_add,
                swap,
            } => {
                atomic = Some((compare_add, swap));
                let remote = Some((remote_addr, rkey));
                (WR_ATOMIC_CMP_AND_SWP, None, remote, WcOpcode::CompSwap)
            }
            SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                compare_add,
            } => {
                atomic = Some((compare_add, 0));
                let remote = Some((remote_addr, rkey));
                (WR_ATOMIC_FETCH_AND_ADD, None, remote, WcOpcode::FetchAdd)
            }
        };
        let mut flags = 0;
        if wr.signaled {
            flags |= SEND_SIGNALED;
        }
        if wr.solicited {
            flags |= SEND_SOLICITED;
        }
        if wr.fence {
            flags |= SEND_FENCE;
        }
        let (sges, entries): (Vec<RawSge>, &[Sge]) = match wr.payload {
            Payload::Inline(_) if opcode == WR_RDMA_READ => {
                return Err(err(call, libc::EINVAL, "an RDMA read cannot be inline"))
            }
            Payload::Inline(_) if atomic.is_some() => {
                return Err(err(call, libc::EINVAL, "an atomic cannot be inline"))
            }
            Payload::Inline(bytes) if bytes.len() > qp.cap.max_inline_data as usize => {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!(
                        "{} inline bytes exceed max_inline_data {}",
                        bytes.len(),
                        qp.cap.max_inline_data
                    ),
                ))
            }
            Payload::Inline(bytes) => {
                flags |= SEND_INLINE;
                let sge = RawSge {
                    addr: bytes.as_ptr() as usize as u64,
                    length: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                    lkey: 0,
                };
                (if bytes.is_empty() { vec![] } else { vec![sge] }, &[])
            }
            Payload::Sges(s) if s.len() > qp.cap.max_send_sge as usize => {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!(
                        "{} entries exceed max_send_sge {}",
                        s.len(),
                        qp.cap.max_send_sge
                    ),
                ))
            }
            Payload::Sges(s) => (raw_sges(s), s),
        };
        let _order = lock(&qp.send_order);
        let keys = keys_for_post();
        let holds = hold(&keys, qp.ctx.addr(), entries);
        let token = {
            let mut q = lock(&qp.queues);
            let t = q.next << 1;
            q.next += 1;
            q.sq.insert(
                t,
                Posted {
                    wr_id: wr.wr_id,
                    opcode: completes_as,
                    holds,
                },
            );
            t
        };
        let req = SendReq {
            wr_id: token,
            opcode,
            flags,
            imm,
            remote,
            atomic,
            ud: ud.as_ref().map(|(ah, qpn, qkey)| (&ah.raw, *qpn, *qkey)),
            sges: &sges,
        };
        // The table's read lock is held across the post (see `regions.rs`).
        qp.raw.post_send(&req).map_err(|e| {
            if !kept_though_refused(&qp, e) {
                if let Some(p) = lock(&qp.queues).sq.remove(&token) {
                    release_all(&p.holds);
                }
            }
            post_errno(call, e, &qp, true)
        })
    }

    /// The destination of send `wr` on QP `h`: on a UD QP its address handle (of the QP's
    /// PD), remote QP number and qkey, checked as the module's documentation says; `None` on
    /// a connected QP (which refuses one).
    fn ud_destination(
        &self,
        h: QpHandle,
        qp: &QpObj,
        wr: &SendWr<'_>,
    ) -> Result<Option<(Arc<AhObj>, u32, u32)>> {
        let call = Call::PostSend;
        let dest = match (qp.ud, wr.ud) {
            (false, None) => return Ok(None),
            (false, Some(_)) => {
                return Err(err(
                    call,
                    libc::EINVAL,
                    "a UD destination (wr.ud) on a connected QP",
                ))
            }
            (true, None) => {
                return Err(err(
                    call,
                    libc::EINVAL,
                    "a send on a UD QP needs a destination (wr.ud)",
                ))
            }
            (true, Some(dest)) => dest,
        };
        if !matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)) {
            let why = format!("{:?} on a UD QP (only sends are)", wr.op);
            return Err(err(call, libc::EINVAL, why));
        }
        let (ah, ah_pd) = self.ah_obj(call, dest.ah)?;
        let qp_pd = self.reg().verbs.qps.get(&h.raw()).map(|e| e.pd);
        if qp_pd != Some(ah_pd) {
            let why = format!("{} is of another PD than the QP", dest.ah);
            return Err(err(call, libc::EINVAL, why));
        }
        let len: u64 = match wr.payload {
            Payload::Inline(bytes) => bytes.len() as u64,
            Payload::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
        };
        let mtu = 128u64 << qp.ctx.active_mtu(1).map_err(|e| c_err(call, e))?;
        if len > mtu {
            // rxe would complete it as sent and emit nothing (IB C10-93.1.1).
            let why = format!("{len} bytes exceed the port's MTU {mtu}");
            return Err(err(call, libc::EINVAL, why));
        }
        Ok(Some((ah, dest.remote_qpn, dest.remote_qkey)))
    }

    /// The bytes of `sgl`, in order, for an inline post on `h`: each entry inside a region
    /// of the QP's device that its key names (read under the region's lock, never through
    /// the entry's address).
    pub(crate) fn inline_bytes_impl(&self, h: QpHandle, sgl: &[Sge]) -> Result<Vec<u8>> {
        let call = Call::PostSend;
        let qp = self.qp_obj(call, h)?;
        let keys = keys_for_post();
        let mut data = Vec::new();
        for (n, s) in sgl.iter().enumerate() {
            let region = keys.get(&(qp.ctx.addr(), s.lkey));
            let offset =
                region.and_then(|r| usize::try_from(s.addr.checked_sub(r.raw.addr())?).ok());
            let at = data.len();
            data.resize(at + s.length as usize, 0);
            let read = region
                .zip(offset)
                .and_then(|(r, off)| r.read(off, &mut data[at..]));
            if read.is_none() {
                let why =
                    format!("inline entry {n} ({s:?}) is not inside the region its key names");
                return Err(err(call, libc::EINVAL, why));
            }
        }
        Ok(data)
    }

    pub(crate) fn post_recv_impl(&self, h: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        let call = Call::PostRecv;
        let qp = self.qp_obj(call, h)?;
        if qp.srq {
            let why = "the QP takes its receives from an SRQ (ibv_post_srq_recv)";
            return Err(err(call, libc::EINVAL, why));
        }
        if wr.sg_list.len() > qp.cap.max_recv_sge as usize {
            return Err(err(
                call,
                libc::EINVAL,
                format!(
                    "{} entries exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_recv_sge
                ),
            ));
        }
        let sges = raw_sges(wr.sg_list);
        let keys = keys_for_post();
        let holds = hold(&keys, qp.ctx.addr(), wr.sg_list);
        let token = {
            let mut q = lock(&qp.queues);
            let t = (q.next << 1) | 1;
            q.next += 1;
            q.rq.insert(
                t,
                Posted {
                    wr_id: wr.wr_id,
                    opcode: WcOpcode::Recv,
                    holds,
                },
            );
            t
        };
        qp.raw.post_recv(token, &sges).map_err(|e| {
            if let Some(p) = lock(&qp.queues).rq.remove(&token) {
                release_all(&p.holds);
            }
            post_errno(call, e, &qp, false)
        })
    }
}
