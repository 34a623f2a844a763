//! What the `rdma_verbs.h` helpers of [`DataPath`] share: checking a region's bytes, finding
//! an id's CQs, and waiting for a CQ's next completion through its channel.

use crate::verbs::{DataPath, MemoryRegion, QpCqs, SendFlags, Sge, WorkCompletion};
use crate::{Call, CmError, CompChannelHandle, CqHandle, Errno, IdHandle, QpHandle, Result, Wait};

/// The entry over `len` bytes of `mr` from `offset`; EINVAL naming `call` if they are not
/// inside it.
pub(crate) fn sge_in(call: Call, mr: &MemoryRegion, offset: usize, len: u32) -> Result<Sge> {
    match offset.checked_add(len as usize) {
        Some(end) if end <= mr.length => Ok(mr.sge(offset, len)),
        _ => Err(CmError::new(
            call,
            Errno::EINVAL,
            format!(
                "{len} bytes at offset {offset} exceed the {}-byte region",
                mr.length
            ),
        )),
    }
}

/// Posts `op` on `id`'s QP over `len` bytes of `mr` from `offset` with C's `flags` (the
/// one-region work requests of the rdma_verbs.h helpers), after `shape` sets what else the
/// helper's request carries (a UD destination). With [`SendFlags::INLINE`] the bytes are
/// copied from the region now, as the driver copies them at post time (the key unused).
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_one<B: DataPath + ?Sized>(
    dp: &B,
    id: IdHandle,
    wr_id: u64,
    op: crate::verbs::SendOp,
    (mr, offset, len): (&MemoryRegion, usize, u32),
    flags: SendFlags,
    shape: impl FnOnce(&mut crate::verbs::SendWr<'_>),
) -> Result<()> {
    let qp = qp_of(dp, Call::PostSend, id)?;
    let sge = [sge_in(Call::PostSend, mr, offset, len)?];
    let mut bytes = Vec::new();
    let payload = match flags.contains(SendFlags::INLINE) {
        true => {
            bytes.resize(len as usize, 0);
            dp.mr_read(mr.handle, offset, &mut bytes)
                .map_err(|e| CmError::new(Call::PostSend, e.errno, e.detail))?;
            crate::verbs::Payload::Inline(&bytes)
        }
        false => crate::verbs::Payload::Sges(&sge),
    };
    let mut wr = crate::verbs::SendWr::new(wr_id, op, payload);
    wr.signaled = flags.contains(SendFlags::SIGNALED);
    wr.solicited = flags.contains(SendFlags::SOLICITED);
    wr.fence = flags.contains(SendFlags::FENCE);
    shape(&mut wr);
    dp.post_send(qp, &wr)
}

/// `id`'s QP (EINVAL naming `call` without one; a dead id's error names `call` too, so
/// that the helper's caller reads the call it made).
pub(crate) fn qp_of<B: DataPath + ?Sized>(dp: &B, call: Call, id: IdHandle) -> Result<QpHandle> {
    dp.qp(id)
        .map_err(|e| CmError::new(call, e.errno, e.detail))?
        .ok_or_else(|| CmError::new(call, Errno::EINVAL, format!("{id} has no QP")))
}

/// The CQs of `id`'s QP (EINVAL without one; a dead id's error names `call`).
pub(crate) fn cqs_of<B: DataPath + ?Sized>(dp: &B, call: Call, id: IdHandle) -> Result<QpCqs> {
    dp.qp_cqs(id)
        .map_err(|e| CmError::new(call, e.errno, e.detail))?
        .ok_or_else(|| CmError::new(call, Errno::EINVAL, format!("{id} has no QP")))
}

/// The next completion of `cq`, waiting on `channel` when there is none.
pub(crate) fn next_completion<B: DataPath + ?Sized>(
    dp: &B,
    cq: CqHandle,
    channel: Option<CompChannelHandle>,
) -> Result<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    loop {
        if dp.poll_cq(cq, &mut wc)? == 1 {
            return Ok(wc[0]);
        }
        let channel = channel.ok_or_else(|| {
            CmError::new(
                Call::GetCqEvent,
                Errno::EINVAL,
                format!("{cq} has no completion channel to wait on"),
            )
        })?;
        dp.req_notify_cq(cq, false)?;
        // A completion may have arrived between the poll and the arming.
        if dp.poll_cq(cq, &mut wc)? == 1 {
            return Ok(wc[0]);
        }
        let fired = dp.get_cq_event(channel, Wait::Block)?;
        dp.ack_cq_events(fired, 1)?;
    }
}
