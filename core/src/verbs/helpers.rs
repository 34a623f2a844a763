//! What the `rdma_verbs.h` helpers of [`DataPath`] share: checking a region's bytes, posting
//! one region, a list of entries or inline bytes with C's flags, finding an id's QP and CQs,
//! and waiting for a CQ's next completion through its channel.

use crate::verbs::{
    DataPath, MemoryRegion, Payload, QpCqs, RecvWr, SendFlags, SendOp, SendWr, Sge, WorkCompletion,
};
use crate::{
    Call, CmError, CompChannelHandle, CqHandle, Errno, IdHandle, QpHandle, Result, SrqHandle, Wait,
};

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
    op: SendOp,
    (mr, offset, len): (&MemoryRegion, usize, u32),
    flags: SendFlags,
    shape: impl FnOnce(&mut SendWr<'_>),
) -> Result<()> {
    let qp = qp_of(dp, Call::PostSend, id)?;
    let sge = [sge_in(Call::PostSend, mr, offset, len)?];
    let mut bytes = Vec::new();
    let payload = match flags.contains(SendFlags::INLINE) {
        true => {
            bytes.resize(len as usize, 0);
            dp.mr_read(mr.handle, offset, &mut bytes)
                .map_err(|e| CmError::new(Call::PostSend, e.errno, e.detail))?;
            Payload::Inline(&bytes)
        }
        false => Payload::Sges(&sge),
    };
    post_flagged(dp, qp, SendWr::new(wr_id, op, payload), flags, shape)
}

/// Posts `op` on `id`'s QP gathering from (or, for a read, scattering into) `sgl` with C's
/// `flags` (the vectored helpers: `rdma_post_sendv`, `rdma_post_readv`, `rdma_post_writev`).
/// With [`SendFlags::INLINE`] the entries' bytes are copied now, as the driver copies them at
/// post time; a read cannot be inline (EINVAL, naming `helper`).
pub(crate) fn post_entries<B: DataPath + ?Sized>(
    dp: &B,
    (helper, id, wr_id): (&str, IdHandle, u64),
    op: SendOp,
    sgl: &[Sge],
    flags: SendFlags,
) -> Result<()> {
    let qp = qp_of(dp, Call::PostSend, id)?;
    if !flags.contains(SendFlags::INLINE) {
        let wr = SendWr::new(wr_id, op, Payload::Sges(sgl));
        return post_flagged(dp, qp, wr, flags, |_| {});
    }
    if let SendOp::RdmaRead { .. } = op {
        let why = format!("{helper}: an RDMA read cannot be inline");
        return Err(CmError::new(Call::PostSend, Errno::EINVAL, why));
    }
    let bytes = dp.inline_bytes(qp, sgl)?;
    post_flagged(
        dp,
        qp,
        SendWr::new(wr_id, op, Payload::Inline(&bytes)),
        flags,
        |_| {},
    )
}

/// Posts `op` on `id`'s QP carrying `bytes` inline (C's helpers with `mr` NULL and
/// `IBV_SEND_INLINE`), with C's `flags` and INLINE implied, after `shape` sets what else the
/// request carries (a UD destination).
pub(crate) fn post_inline<B: DataPath + ?Sized>(
    dp: &B,
    (id, wr_id): (IdHandle, u64),
    op: SendOp,
    bytes: &[u8],
    flags: SendFlags,
    shape: impl FnOnce(&mut SendWr<'_>),
) -> Result<()> {
    let qp = qp_of(dp, Call::PostSend, id)?;
    let wr = SendWr::new(wr_id, op, Payload::Inline(bytes));
    post_flagged(dp, qp, wr, flags, shape)
}

/// Posts `wr` on `qp` with C's `flags` (signaled, solicited, fenced as they say; INLINE is
/// the payload's), after `shape` has its say.
fn post_flagged<B: DataPath + ?Sized>(
    dp: &B,
    qp: QpHandle,
    mut wr: SendWr<'_>,
    flags: SendFlags,
    shape: impl FnOnce(&mut SendWr<'_>),
) -> Result<()> {
    wr.signaled = flags.contains(SendFlags::SIGNALED);
    wr.solicited = flags.contains(SendFlags::SOLICITED);
    wr.fence = flags.contains(SendFlags::FENCE);
    shape(&mut wr);
    dp.post_send(qp, &wr)
}

/// Where an id's receives go: its SRQ if it has one, else its QP (`rdma_post_recvv`).
pub(crate) enum RecvQueue {
    /// The id's SRQ (`ibv_post_srq_recv`).
    Srq(SrqHandle),
    /// The id's QP (`ibv_post_recv`).
    Qp(QpHandle),
}

impl RecvQueue {
    /// The call a post there is.
    pub(crate) fn call(&self) -> Call {
        match self {
            RecvQueue::Srq(_) => Call::PostSrqRecv,
            RecvQueue::Qp(_) => Call::PostRecv,
        }
    }

    /// Posts `wr` there.
    pub(crate) fn post<B: DataPath + ?Sized>(self, dp: &B, wr: &RecvWr<'_>) -> Result<()> {
        match self {
            RecvQueue::Srq(srq) => dp.post_srq_recv(srq, wr),
            RecvQueue::Qp(qp) => dp.post_recv(qp, wr),
        }
    }
}

/// Where `id`'s receives go (EINVAL without SRQ and QP; a dead id's error names
/// `ibv_post_recv`, as for one without either).
pub(crate) fn recv_queue<B: DataPath + ?Sized>(dp: &B, id: IdHandle) -> Result<RecvQueue> {
    let srq = dp
        .srq(id)
        .map_err(|e| CmError::new(Call::PostRecv, e.errno, e.detail))?;
    match srq {
        Some(srq) => Ok(RecvQueue::Srq(srq)),
        None => qp_of(dp, Call::PostRecv, id).map(RecvQueue::Qp),
    }
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

/// The next completion of `cq`, waiting on `channel` as `wait` says when there is none
/// (a timed wait counts from the call: a CQ event that brings no completion does not
/// restart it).
pub(crate) fn next_completion<B: DataPath + ?Sized>(
    dp: &B,
    cq: CqHandle,
    channel: Option<CompChannelHandle>,
    wait: Wait,
) -> Result<WorkCompletion> {
    let deadline = match wait {
        Wait::Timeout(limit) => Some(dp.now().saturating_add(limit)),
        Wait::Block | Wait::NonBlocking => None,
    };
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
        let this_wait = match deadline {
            Some(at) => Wait::Timeout(at.saturating_sub(dp.now())),
            None => wait,
        };
        let fired = dp.get_cq_event(channel, this_wait)?;
        dp.ack_cq_events(fired, 1)?;
    }
}
