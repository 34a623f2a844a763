//! Completion channels and CQs: creation and destruction, arming, CQ events, polling.

use std::sync::Arc;

use cmtwin::verbs::{WcOpcode, WcStatus, WorkCompletion};
use cmtwin::{Call, CompChannelHandle, CqHandle, IdHandle, Result, Wait};

use super::objects::{in_use, ChannelEntry, ChannelObj, CqEntry, CqObj};
use super::regions::release_all;
use crate::deadline::Deadline;
use crate::ffi::{RawCompChannel, RawCq, RawWc};
use crate::registry::{lock, Registry};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

/// The most completions one `poll_cq` reads from the device at a time.
const POLL_BATCH: usize = 64;

impl VerbsBackend {
    /// The live completion channel `h`.
    pub(crate) fn comp_channel(&self, call: Call, h: CompChannelHandle) -> Result<Arc<ChannelObj>> {
        let reg = self.reg();
        reg.verbs
            .channels
            .get(&h.raw())
            .map(|e| Arc::clone(&e.obj))
            .ok_or_else(|| bad_handle(&reg, call, "completion channel", h.raw(), h))
    }

    /// The live CQ `h`.
    pub(crate) fn cq(&self, call: Call, h: CqHandle) -> Result<Arc<CqObj>> {
        let reg = self.reg();
        reg.verbs
            .cqs
            .get(&h.raw())
            .map(|e| Arc::clone(&e.obj))
            .ok_or_else(|| bad_handle(&reg, call, "CQ", h.raw(), h))
    }

    pub(crate) fn create_comp_channel_impl(&self, id: IdHandle) -> Result<CompChannelHandle> {
        let call = Call::CreateCompChannel;
        let (ctx, local) = self.id_device(call, id)?;
        self.anchor(call, ctx, local)?;
        let raw = RawCompChannel::create(ctx).map_err(|e| {
            self.unanchor(ctx);
            c_err(call, e)
        })?;
        let mut reg = self.reg();
        let Ok(key) = reg.issue() else {
            drop(reg);
            let _ = raw.destroy();
            self.unanchor(ctx);
            return Err(keys_exhausted(call));
        };
        let obj = Arc::new(ChannelObj { raw, ctx });
        reg.verbs.channels.insert(
            key,
            ChannelEntry {
                obj,
                cqs: 0,
                implicit: false,
            },
        );
        Ok(CompChannelHandle::from_raw(key))
    }

    pub(crate) fn destroy_comp_channel_impl(&self, h: CompChannelHandle) -> Result<()> {
        let call = Call::DestroyCompChannel;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.channels.get(&h.raw()) else {
            return Err(bad_handle(&reg, call, "completion channel", h.raw(), h));
        };
        if e.cqs > 0 || e.implicit {
            let why = if e.implicit {
                "it belongs to an id's QP (destroy_qp destroys it)".to_string()
            } else {
                format!("{} CQ(s) report to it", e.cqs)
            };
            return Err(err(call, libc::EBUSY, format!("{h}: {why}")));
        }
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let e = reg.verbs.channels.remove(&h.raw()).expect("checked");
        drop(reg);
        let obj = Arc::try_unwrap(e.obj).unwrap_or_else(|_| unreachable!("last reference"));
        let ctx = obj.ctx;
        // A failed destroy leaves the channel unusable but open: it stays anchored.
        obj.raw.destroy().map_err(|e| c_err(call, e))?;
        self.unanchor(ctx);
        Ok(())
    }

    pub(crate) fn create_cq_impl(
        &self,
        id: IdHandle,
        cqe: u32,
        channel: Option<CompChannelHandle>,
    ) -> Result<CqHandle> {
        let call = Call::CreateCq;
        let (ctx, local) = self.id_device(call, id)?;
        if cqe == 0 {
            return Err(err(call, libc::EINVAL, "a CQ of 0 entries"));
        }
        let ch = channel.map(|c| self.comp_channel(call, c)).transpose()?;
        if let Some(ch) = &ch {
            if ch.ctx != ctx {
                return Err(err(call, libc::EINVAL, "the channel is on another device"));
            }
        }
        self.anchor(call, ctx, local)?;
        let raw = RawCq::create(ctx, cqe, ch.as_ref().map(|c| &c.raw)).map_err(|e| {
            self.unanchor(ctx);
            c_err(call, e)
        })?;
        let addr = raw.addr();
        let mut reg = self.reg();
        let Ok(key) = reg.issue() else {
            drop(reg);
            let _ = raw.destroy();
            self.unanchor(ctx);
            return Err(keys_exhausted(call));
        };
        if let Some(c) = channel.and_then(|c| reg.verbs.channels.get_mut(&c.raw())) {
            c.cqs += 1;
        }
        let obj = Arc::new(CqObj { raw, ctx });
        reg.verbs.cq_by_addr.insert(addr, key);
        reg.verbs.cqs.insert(
            key,
            CqEntry {
                obj,
                channel: channel.map(|c| c.raw()),
                users: 0,
                unacked: 0,
                implicit: false,
            },
        );
        super::async_events::own_cq(addr, &self.shared.inbox);
        Ok(CqHandle::from_raw(key))
    }

    pub(crate) fn destroy_cq_impl(&self, h: CqHandle) -> Result<()> {
        let call = Call::DestroyCq;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.cqs.get(&h.raw()) else {
            return Err(bad_handle(&reg, call, "CQ", h.raw(), h));
        };
        if e.users > 0 || e.implicit {
            return Err(err(call, libc::EBUSY, format!("QPs complete into {h}")));
        }
        if e.unacked > 0 {
            return Err(err(
                call,
                libc::EBUSY,
                format!(
                    "{} CQ event(s) of {h} are not acknowledged (libibverbs would block)",
                    e.unacked
                ),
            ));
        }
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let e = reg.verbs.remove_cq(h.raw()).expect("checked");
        let obj = Arc::try_unwrap(e.obj).unwrap_or_else(|_| unreachable!("last reference"));
        match obj.raw.destroy() {
            Ok(()) => {
                drop(reg);
                self.unanchor(obj.ctx);
                Ok(())
            }
            Err((errno, raw)) => {
                // Put it back as it was.
                let addr = raw.addr();
                let obj = Arc::new(CqObj { raw, ctx: obj.ctx });
                if let Some(c) = e.channel.and_then(|c| reg.verbs.channels.get_mut(&c)) {
                    c.cqs += 1;
                }
                reg.verbs.cq_by_addr.insert(addr, h.raw());
                reg.verbs.cqs.insert(h.raw(), CqEntry { obj, ..e });
                Err(c_err(call, errno))
            }
        }
    }

    pub(crate) fn req_notify_cq_impl(&self, h: CqHandle, solicited_only: bool) -> Result<()> {
        let call = Call::ReqNotifyCq;
        let cq = {
            let reg = self.reg();
            let Some(e) = reg.verbs.cqs.get(&h.raw()) else {
                return Err(bad_handle(&reg, call, "CQ", h.raw(), h));
            };
            if e.channel.is_none() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{h} has no completion channel"),
                ));
            }
            Arc::clone(&e.obj)
        };
        cq.raw
            .req_notify(solicited_only)
            .map_err(|e| c_err(call, e))
    }

    pub(crate) fn get_cq_event_impl(&self, h: CompChannelHandle, wait: Wait) -> Result<CqHandle> {
        let call = Call::GetCqEvent;
        let ch = self.comp_channel(call, h)?;
        let mut deadline = Deadline::of(wait);
        loop {
            {
                // The event is read and counted under the registry lock, so that destroy_cq
                // never sees a fetched event uncounted (libibverbs would block it).
                let mut reg = self.reg();
                match ch.raw.next_event() {
                    Ok(addr) => match reg.verbs.cq_by_addr.get(&addr).copied() {
                        Some(key) => {
                            reg.verbs.cqs.get_mut(&key).expect("indexed").unacked += 1;
                            return Ok(CqHandle::from_raw(key));
                        }
                        None => continue,
                    },
                    Err(libc::EAGAIN) => {}
                    Err(e) => return Err(c_err(call, e)),
                }
            }
            let Some(timeout_ms) = deadline.poll_timeout() else {
                let errno = match wait {
                    Wait::NonBlocking => libc::EAGAIN,
                    _ => libc::ETIMEDOUT,
                };
                return Err(err(call, errno, format!("no CQ event on {h}")));
            };
            crate::ffi::poll_readable(&[ch.raw.fd()], timeout_ms).map_err(|e| c_err(call, e))?;
        }
    }

    pub(crate) fn ack_cq_events_impl(&self, h: CqHandle, count: u32) -> Result<()> {
        let call = Call::AckCqEvents;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.cqs.get_mut(&h.raw()) else {
            return Err(bad_handle(&reg, call, "CQ", h.raw(), h));
        };
        if count > e.unacked {
            return Err(err(
                call,
                libc::EINVAL,
                format!("{count} acknowledgements for {} fetched events", e.unacked),
            ));
        }
        e.obj.raw.ack_events(count);
        e.unacked -= count;
        Ok(())
    }

    pub(crate) fn poll_cq_impl(&self, h: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
        let call = Call::PollCq;
        let cq = self.cq(call, h)?;
        let mut raw = [RawWc::default(); POLL_BATCH];
        let mut done = 0;
        while done < wc.len() {
            let want = (wc.len() - done).min(POLL_BATCH);
            let n = cq.raw.poll(&mut raw[..want]).map_err(|e| c_err(call, e))?;
            let mut reg = self.reg();
            for (slot, r) in wc[done..].iter_mut().zip(&raw[..n]) {
                *slot = translate(&mut reg, cq.ctx.addr(), r);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }
}

/// The application's view of completion `r` of a CQ on context `ctx`: its `wr_id` and
/// opcode from the request its token names, whose regions are released (with, for a send,
/// those of every earlier request of the send queue, which completed before it).
fn translate(reg: &mut Registry, ctx: usize, r: &RawWc) -> WorkCompletion {
    let status = WcStatus(r.status);
    let mut out = WorkCompletion {
        wr_id: r.wr_id,
        status,
        opcode: hw_opcode(r.opcode),
        byte_len: r.byte_len,
        // Immediate data is the receiver's: rxe also flags the sender's completion of a
        // send or write with immediate, with no value.
        imm: r.imm.filter(|_| r.opcode & 0x80 != 0),
        qp_num: r.qp_num,
        src_qp: r.src_qp,
        grh: r.grh,
        slid: r.slid,
        sl: r.sl,
        dlid_path_bits: r.dlid_path_bits,
        pkey_index: r.pkey_index,
    };
    let token = r.wr_id;
    if let Some((wr_id, opcode)) = super::srqs::take_srq_receive(reg, token) {
        out.wr_id = wr_id;
        if status != WcStatus::SUCCESS {
            out.opcode = opcode;
        }
        return out;
    }
    let posted = reg
        .verbs
        .qp_by_num
        .get(&(ctx, r.qp_num))
        .and_then(|q| reg.verbs.qps.get(q))
        .and_then(|e| {
            let mut q = lock(&e.obj.queues);
            if token & 1 == 1 {
                q.rq.remove(&token)
            } else {
                let later = q.sq.split_off(&(token + 1));
                let done = std::mem::replace(&mut q.sq, later);
                let mut this = None;
                for (t, p) in done {
                    if t == token {
                        this = Some(p);
                    } else {
                        release_all(&p.holds);
                    }
                }
                this
            }
        });
    match posted {
        Some(p) => {
            release_all(&p.holds);
            out.wr_id = p.wr_id;
            if status != WcStatus::SUCCESS {
                out.opcode = p.opcode;
            }
        }
        None => {
            if let Some((wr_id, opcode, _)) = reg.verbs.orphans.remove(&(ctx, r.qp_num, token)) {
                out.wr_id = wr_id;
                if status != WcStatus::SUCCESS {
                    out.opcode = opcode;
                }
            }
        }
    }
    out
}

/// `enum ibv_wc_opcode` as the trait has it (the kinds it can post).
fn hw_opcode(op: u32) -> WcOpcode {
    match op {
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::CompSwap,
        4 => WcOpcode::FetchAdd,
        128 => WcOpcode::Recv,
        129 => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    }
}

/// EBADF for a handle that is not a live verbs object of this backend.
pub(crate) fn bad_handle(
    reg: &Registry,
    call: Call,
    what: &str,
    raw: u64,
    shown: impl std::fmt::Display,
) -> cmtwin::CmError {
    let why = if reg.is_mine(raw) {
        "destroyed, or never created"
    } else {
        "issued by another backend value"
    };
    err(
        call,
        libc::EBADF,
        format!("{shown} is not a live {what} of this backend ({why})"),
    )
}
