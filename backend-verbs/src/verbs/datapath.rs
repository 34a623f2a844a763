//! [`DataPath`] for [`VerbsBackend`]: each method calls its implementation in the files of
//! this module; `get_async_event` is here.

use std::collections::BTreeSet;
use std::time::Instant;

use cmtwin::verbs::{
    AccessFlags, DataPath, MemoryRegion, PollSource, QpAttr, QpAttrMask, QpCqs, QpInitAttrEx,
    QpState, RecvWr, SendWr, Sge, SrqAttr, SrqAttrMask, VerbsAsyncEvent, WorkCompletion,
};
use cmtwin::{
    AhAttr, AhHandle, AsyncEvent, Call, CompChannelHandle, CqHandle, IdHandle, MrHandle, PdHandle,
    QpCap, QpHandle, Result, SrqHandle, Wait,
};

use crate::ffi::{RawAsyncEvent, RawCtx};
use crate::{c_err, err, VerbsBackend};

impl VerbsBackend {
    /// The device contexts this backend has QPs or CQs on.
    pub(super) fn contexts(&self) -> Vec<RawCtx> {
        let reg = self.reg();
        let mut seen = BTreeSet::new();
        let qps = reg.verbs.qps.values().map(|e| e.obj.ctx);
        let cqs = reg.verbs.cqs.values().map(|e| e.obj.ctx);
        qps.chain(cqs).filter(|c| seen.insert(c.addr())).collect()
    }

    /// The trait's view of event `ev` of context `ctx`.
    fn async_event(&self, ctx: usize, ev: RawAsyncEvent) -> VerbsAsyncEvent {
        let reg = self.reg();
        let qp = ev
            .qp_num
            .and_then(|n| reg.verbs.qp_by_num.get(&(ctx, n)))
            .and_then(|q| reg.verbs.qps.get(q));
        VerbsAsyncEvent {
            kind: AsyncEvent(ev.kind),
            qp_num: ev.qp_num,
            id: qp.and_then(|e| e.id),
            cq: ev
                .cq
                .and_then(|a| reg.verbs.cq_by_addr.get(&a))
                .map(|&k| CqHandle::from_raw(k)),
            srq: ev
                .srq
                .and_then(|a| reg.verbs.srq_by_addr.get(&a))
                .map(|&k| SrqHandle::from_raw(k)),
        }
    }

    fn get_async_event_impl(&self, wait: Wait) -> Result<VerbsAsyncEvent> {
        let call = Call::GetAsyncEvent;
        let inbox = &self.shared.inbox;
        // A timeout beyond what the clock can hold is no deadline (`Instant + d` would panic).
        let deadline = match wait {
            Wait::Timeout(d) => Instant::now().checked_add(d),
            _ => None,
        };
        loop {
            if let Some((ctx, ev)) = inbox.pop() {
                return Ok(self.async_event(ctx, ev));
            }
            let ctxs = self.contexts();
            let wake = inbox.wake.as_ref().map_err(|e| c_err(call, *e))?;
            let mut fds = vec![wake.fd()];
            for ctx in &ctxs {
                // O_NONBLOCK first: the pump reads until EAGAIN.
                fds.push(ctx.async_fd().map_err(|e| c_err(call, e))?);
                super::async_events::pump(*ctx).map_err(|e| c_err(call, e))?;
            }
            if let Some((ctx, ev)) = inbox.pop() {
                return Ok(self.async_event(ctx, ev));
            }
            let timeout_ms = match (wait, deadline) {
                (Wait::NonBlocking, _) => {
                    return Err(err(call, libc::EAGAIN, "no asynchronous event"))
                }
                (_, Some(d)) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(err(call, libc::ETIMEDOUT, "no asynchronous event"));
                    }
                    crate::id::timeout_ms(left).max(1)
                }
                _ if ctxs.is_empty() => {
                    return Err(err(
                        call,
                        libc::EDEADLK,
                        "this backend has no QP or CQ that could report an event",
                    ))
                }
                // New QPs may appear meanwhile: look again now and then.
                _ => 1000,
            };
            crate::ffi::poll_readable(&fds, timeout_ms).map_err(|e| c_err(call, e))?;
        }
    }
}

impl DataPath for VerbsBackend {
    fn alloc_pd(&self, id: IdHandle) -> Result<PdHandle> {
        self.alloc_pd_impl(id)
    }

    fn dealloc_pd(&self, pd: PdHandle) -> Result<()> {
        self.dealloc_pd_impl(pd)
    }

    fn reg_mr(&self, pd: PdHandle, buffer: Vec<u8>, access: AccessFlags) -> Result<MemoryRegion> {
        self.reg_mr_impl(pd, buffer, access)
    }

    fn dereg_mr(&self, mr: MrHandle) -> Result<Vec<u8>> {
        self.dereg_mr_impl(mr)
    }

    fn mr_read(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<()> {
        self.mr_read_impl(mr, offset, out)
    }

    fn mr_write(&self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<()> {
        self.mr_write_impl(mr, offset, data)
    }

    fn create_comp_channel(&self, id: IdHandle) -> Result<CompChannelHandle> {
        self.create_comp_channel_impl(id)
    }

    fn destroy_comp_channel(&self, channel: CompChannelHandle) -> Result<()> {
        self.destroy_comp_channel_impl(channel)
    }

    fn create_cq(
        &self,
        id: IdHandle,
        cqe: u32,
        channel: Option<CompChannelHandle>,
    ) -> Result<CqHandle> {
        self.create_cq_impl(id, cqe, channel)
    }

    fn destroy_cq(&self, cq: CqHandle) -> Result<()> {
        self.destroy_cq_impl(cq)
    }

    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        self.req_notify_cq_impl(cq, solicited_only)
    }

    fn get_cq_event(&self, channel: CompChannelHandle, wait: Wait) -> Result<CqHandle> {
        self.get_cq_event_impl(channel, wait)
    }

    fn ack_cq_events(&self, cq: CqHandle, count: u32) -> Result<()> {
        self.ack_cq_events_impl(cq, count)
    }

    fn poll_cq(&self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
        self.poll_cq_impl(cq, wc)
    }

    fn create_ep_ex(
        &self,
        info: &cmtwin::AddrInfo,
        qp_init: &mut QpInitAttrEx,
    ) -> Result<IdHandle> {
        cmtwin::ep::with_verbs_attr(qp_init, |ep| self.create_ep_of(info, ep))
    }

    fn create_qp_ex(&self, id: IdHandle, attr: &QpInitAttrEx) -> Result<u32> {
        self.create_qp_ex_impl(id, attr)
    }

    fn qp_cqs(&self, id: IdHandle) -> Result<Option<QpCqs>> {
        self.qp_cqs_impl(id)
    }

    fn pd(&self, id: IdHandle) -> Result<PdHandle> {
        self.id_pd_impl(id)
    }

    fn qp(&self, id: IdHandle) -> Result<Option<QpHandle>> {
        self.id_qp_impl(id)
    }

    fn create_external_qp(&self, attr: &QpInitAttrEx) -> Result<QpHandle> {
        self.create_external_qp_impl(attr)
    }

    fn destroy_external_qp(&self, qp: QpHandle) -> Result<()> {
        self.destroy_external_qp_impl(qp)
    }

    fn init_qp_attr(&self, id: IdHandle, state: QpState) -> Result<QpAttr> {
        self.init_qp_attr_impl(id, state)
    }

    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr) -> Result<()> {
        self.modify_qp_impl(qp, attr)
    }

    fn modify_qp_with_mask(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.modify_qp_with_mask_impl(qp, attr, mask)
    }

    fn query_qp_state(&self, qp: QpHandle) -> Result<QpState> {
        self.query_qp_state_impl(qp)
    }

    fn query_qp_cap(&self, qp: QpHandle) -> Result<QpCap> {
        self.query_qp_cap_impl(qp)
    }

    fn qp_number(&self, qp: QpHandle) -> Result<u32> {
        self.qp_number_impl(qp)
    }

    fn create_ah(&self, pd: PdHandle, attr: &AhAttr) -> Result<AhHandle> {
        self.create_ah_impl(pd, attr)
    }

    fn create_ah_from_wc(
        &self,
        pd: PdHandle,
        wc: &WorkCompletion,
        grh: &[u8; cmtwin::verbs::GRH_LEN as usize],
    ) -> Result<AhHandle> {
        self.create_ah_from_wc_impl(pd, wc, grh)
    }

    fn destroy_ah(&self, ah: AhHandle) -> Result<()> {
        self.destroy_ah_impl(ah)
    }

    fn post_send(&self, qp: QpHandle, wr: &SendWr<'_>) -> Result<()> {
        self.post_send_impl(qp, wr)
    }

    fn post_recv(&self, qp: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.post_recv_impl(qp, wr)
    }

    fn inline_bytes(&self, qp: QpHandle, sgl: &[Sge]) -> Result<Vec<u8>> {
        self.inline_bytes_impl(qp, sgl)
    }

    fn create_srq(&self, pd: PdHandle, attr: &SrqAttr) -> Result<(SrqHandle, SrqAttr)> {
        self.create_srq_impl(pd, attr)
    }

    fn modify_srq(&self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.modify_srq_impl(srq, attr, mask)
    }

    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr> {
        self.query_srq_impl(srq)
    }

    fn destroy_srq(&self, srq: SrqHandle) -> Result<()> {
        self.destroy_srq_impl(srq)
    }

    fn post_srq_recv(&self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.post_srq_recv_impl(srq, wr)
    }

    fn create_id_srq(
        &self,
        id: IdHandle,
        pd: Option<PdHandle>,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        self.create_id_srq_impl(id, pd, attr)
    }

    fn destroy_id_srq(&self, id: IdHandle) -> Result<()> {
        self.destroy_id_srq_impl(id)
    }

    fn srq(&self, id: IdHandle) -> Result<Option<SrqHandle>> {
        self.id_srq_impl(id)
    }

    fn get_async_event(&self, wait: Wait) -> Result<VerbsAsyncEvent> {
        self.get_async_event_impl(wait)
    }

    fn poll_sources(&self, sources: &[PollSource], wait: Wait) -> Result<Vec<PollSource>> {
        self.poll_sources_impl(sources, wait)
    }

    fn query_device(&self, device: &str) -> Result<cmtwin::DeviceAttr> {
        crate::ffi::query_device(device)
            .map_err(|e| err(Call::QueryDevice, e, format!("device {device:?}")))
    }

    fn query_port(&self, device: &str, port: u8) -> Result<cmtwin::PortAttr> {
        crate::ffi::query_port(device, port).map_err(|e| {
            err(
                Call::QueryPort,
                e,
                format!("port {port} of device {device:?}"),
            )
        })
    }
}
