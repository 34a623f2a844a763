//! [`DataPath`] for [`SimBackend`]: each call locks the world (refused with EPERM for a
//! thread that is not one of the fabric's processes while `Fabric::run` is in progress, and a
//! yield point of a running process, as every `CmBackend` call), runs on it, and is traced
//! with its result. An unproductive `poll_cq` is not traced (polling loops would fill the
//! trace) and, in a process, yields.

use std::sync::Arc;

use cmtwin::verbs::{
    list_sources, AccessFlags, DataPath, MemoryRegion, Payload, PollSource, QpAttr, QpAttrMask,
    QpCqs, QpInitAttrEx, QpState, RecvWr, SendWr, Sge, SrqAttr, SrqAttrMask, VerbsAsyncEvent,
    WorkCompletion,
};
use cmtwin::{
    AhAttr, AhHandle, Call, CmError, CompChannelHandle, CqHandle, DeviceAttr, Errno, IdHandle,
    MrHandle, PdHandle, PortAttr, QpCap, QpHandle, Result, SrqHandle, Wait,
};

use super::wait::{wait_for, WaitOn};
use super::{async_wait_key, comp_channel_wait_key};
use crate::backend::SimBackend;
use crate::handoff::WorldGuard;
use crate::process::yield_now;
use crate::trace::{Args, Entry, Shown, TraceKind};
use crate::world::{HostKey, World};

impl SimBackend {
    /// Locks the world for data path call `call`, as every call does (see the module's
    /// documentation): a yield point, and EPERM for a thread outside a running fabric.
    fn verbs_lock(&self, call: Call) -> Result<WorldGuard<'_>> {
        self.lock(call)
    }

    /// As [`SimBackend::verbs_lock`] without the yield point (for tracing after a wait).
    fn verbs_lock_quiet(&self, call: Call) -> Result<WorldGuard<'_>> {
        self.lock_quiet(call)
    }

    /// Runs `f` as data path call `call` of this host and traces it with the arguments `args`
    /// and the result `shown` describe (both asked only when tracing is on).
    fn verbs_call<T>(
        &self,
        call: Call,
        args: impl FnOnce() -> String,
        shown: impl FnOnce(&T) -> String,
        f: impl FnOnce(&mut World, HostKey) -> Result<T>,
    ) -> Result<T> {
        let mut w = self.verbs_lock(call)?;
        let r = f(&mut w, self.host);
        #[cfg(debug_assertions)]
        w.check_invariants_amortized();
        trace_call(&mut w, self.host, call, args, shown, &r);
        r
    }
}

/// Records call `call` with its arguments and result, when tracing is on.
fn trace_call<T>(
    w: &mut World,
    host: HostKey,
    call: Call,
    args: impl FnOnce() -> String,
    shown: impl FnOnce(&T) -> String,
    r: &Result<T>,
) {
    if !w.trace.is_on() {
        return;
    }
    let result = match r {
        Ok(v) => Shown::Text(shown(v)),
        Err(e) => Shown::Errno(e.errno),
    };
    let args = Args::Text(args());
    w.record(
        Some(host),
        TraceKind::Call,
        Entry::Call { call, args, result },
    );
}

/// "0", for calls that return nothing.
/// An SRQ's attributes as the trace shows them.
fn show_srq_attr(a: &SrqAttr) -> String {
    format!(
        "{{wr {} sge {} limit {}}}",
        a.max_wr, a.max_sge, a.srq_limit
    )
}

fn zero<T>(_: &T) -> String {
    "0".to_string()
}

/// A send request as the trace shows it.
fn describe_send(qp: QpHandle, wr: &SendWr<'_>) -> String {
    let payload = match wr.payload {
        Payload::Sges(s) => format!(
            "{} sges {} bytes",
            s.len(),
            s.iter().map(|e| u64::from(e.length)).sum::<u64>()
        ),
        Payload::Inline(b) => format!("inline {} bytes", b.len()),
    };
    match wr.ud {
        Some(ud) => format!(
            "{qp}, wr {} {:?} {payload} to {} qpn {:#x} qkey {:#x}",
            wr.wr_id, wr.op, ud.ah, ud.remote_qpn, ud.remote_qkey
        ),
        None => format!("{qp}, wr {} {:?} {payload}", wr.wr_id, wr.op),
    }
}

impl DataPath for SimBackend {
    fn query_device(&self, device: &str) -> Result<DeviceAttr> {
        self.verbs_call(
            Call::QueryDevice,
            || format!("{device:?}"),
            |a: &DeviceAttr| {
                format!(
                    "max_qp_wr {} max_sge {} max_cqe {}",
                    a.max_qp_wr, a.max_sge, a.max_cqe
                )
            },
            |w, h| w.query_device(h, device),
        )
    }

    fn query_port(&self, device: &str, port: u8) -> Result<PortAttr> {
        self.verbs_call(
            Call::QueryPort,
            || format!("{device:?}, {port}"),
            |p: &PortAttr| format!("{:?} {:?}", p.state, p.link_layer),
            |w, h| w.query_port(h, device, port),
        )
    }

    fn alloc_pd(&self, id: IdHandle) -> Result<PdHandle> {
        self.verbs_call(
            Call::AllocPd,
            || id.to_string(),
            |pd: &PdHandle| pd.to_string(),
            |w, h| w.alloc_pd(h, id),
        )
    }

    fn dealloc_pd(&self, pd: PdHandle) -> Result<()> {
        self.verbs_call(
            Call::DeallocPd,
            || pd.to_string(),
            zero,
            |w, h| w.dealloc_pd(h, pd),
        )
    }

    fn reg_mr(&self, pd: PdHandle, buffer: Vec<u8>, access: AccessFlags) -> Result<MemoryRegion> {
        let len = buffer.len();
        self.verbs_call(
            Call::RegMr,
            || format!("{pd}, {len} bytes, {access:?}"),
            |mr: &MemoryRegion| format!("{} key {:#x} addr {:#x}", mr.handle, mr.lkey, mr.addr),
            |w, h| w.reg_mr(h, pd, buffer, access),
        )
    }

    fn dereg_mr(&self, mr: MrHandle) -> Result<Vec<u8>> {
        self.verbs_call(
            Call::DeregMr,
            || mr.to_string(),
            |_| "0".into(),
            |w, h| w.dereg_mr(h, mr),
        )
    }

    fn mr_read(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<()> {
        let len = out.len();
        self.verbs_call(
            Call::MrRead,
            || format!("{mr}, {offset}, {len} bytes"),
            zero,
            |w, h| w.mr_read(h, mr, offset, out),
        )
    }

    fn mr_write(&self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<()> {
        self.verbs_call(
            Call::MrWrite,
            || format!("{mr}, {offset}, {} bytes", data.len()),
            zero,
            |w, h| w.mr_write(h, mr, offset, data),
        )
    }

    fn create_comp_channel(&self, id: IdHandle) -> Result<CompChannelHandle> {
        self.verbs_call(
            Call::CreateCompChannel,
            || id.to_string(),
            |c: &CompChannelHandle| c.to_string(),
            |w, h| w.create_comp_channel(h, id),
        )
    }

    fn destroy_comp_channel(&self, channel: CompChannelHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroyCompChannel,
            || channel.to_string(),
            zero,
            |w, h| w.destroy_comp_channel(h, channel),
        )
    }

    fn create_cq(
        &self,
        id: IdHandle,
        cqe: u32,
        channel: Option<CompChannelHandle>,
    ) -> Result<CqHandle> {
        self.verbs_call(
            Call::CreateCq,
            || format!("{id}, {cqe}, {channel:?}"),
            |c: &CqHandle| c.to_string(),
            |w, h| w.create_cq(h, id, cqe, channel),
        )
    }

    fn destroy_cq(&self, cq: CqHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroyCq,
            || cq.to_string(),
            zero,
            |w, h| w.destroy_cq(h, cq),
        )
    }

    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        self.verbs_call(
            Call::ReqNotifyCq,
            || format!("{cq}, {}", u8::from(solicited_only)),
            zero,
            |w, h| w.req_notify_cq(h, cq, solicited_only),
        )
    }

    fn get_cq_event(&self, channel: CompChannelHandle, wait: Wait) -> Result<CqHandle> {
        let call = Call::GetCqEvent;
        let w = self.verbs_lock(call)?;
        let key = w.comp_channel_key(self.host, call, channel)?;
        let what: cmtwin::runtime::Describe =
            Arc::new(move || format!("ibv_get_cq_event on {channel}"));
        let r = wait_for(
            w,
            call,
            wait,
            WaitOn::key(comp_channel_wait_key(key)),
            what,
            |w| {
                if !w.verbs.channels.contains_key(&key) {
                    return Err(CmError::new(
                        call,
                        Errno::EBADF,
                        format!("{channel} was destroyed while waiting"),
                    ));
                }
                Ok(w.take_cq_event(key))
            },
        );
        let mut w = self.verbs_lock_quiet(call)?;
        trace_call(
            &mut w,
            self.host,
            call,
            || format!("{channel}, {wait:?}"),
            |c| c.to_string(),
            &r,
        );
        r
    }

    fn ack_cq_events(&self, cq: CqHandle, count: u32) -> Result<()> {
        self.verbs_call(
            Call::AckCqEvents,
            || format!("{cq}, {count}"),
            zero,
            |w, h| w.ack_cq_events(h, cq, count),
        )
    }

    fn poll_cq(&self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize> {
        let call = Call::PollCq;
        let mut w = self.verbs_lock(call)?;
        let r = w.poll_cq(self.host, cq, wc);
        match r {
            Ok(0) if !wc.is_empty() => {
                yield_now(w).map_err(|m| CmError::new(call, Errno::EDEADLK, m))?;
            }
            _ => trace_call(
                &mut w,
                self.host,
                call,
                || format!("{cq}, {}", wc.len()),
                |n| n.to_string(),
                &r,
            ),
        }
        r
    }

    fn create_qp_ex(&self, id: IdHandle, attr: &QpInitAttrEx) -> Result<u32> {
        self.verbs_call(
            Call::CreateQpEx,
            || {
                format!(
                    "{id}, {}, send {}, recv {}, {:?}",
                    attr.pd, attr.send_cq, attr.recv_cq, attr.qp_type
                )
            },
            |n| format!("{n:#x}"),
            |w, h| w.create_qp_ex(h, id, attr),
        )
    }

    fn create_ep_ex(
        &self,
        info: &cmtwin::AddrInfo,
        qp_init: &mut QpInitAttrEx,
    ) -> Result<IdHandle> {
        cmtwin::ep::with_verbs_attr(qp_init, |ep| self.create_ep_of(info, ep))
    }

    fn qp_cqs(&self, id: IdHandle) -> Result<Option<QpCqs>> {
        let w = self.verbs_lock(Call::QpCqs)?;
        w.qp_cqs(self.host, id)
    }

    fn pd(&self, id: IdHandle) -> Result<PdHandle> {
        let mut w = self.verbs_lock(Call::IdPd)?;
        w.id_pd(self.host, id)
    }

    fn qp(&self, id: IdHandle) -> Result<Option<QpHandle>> {
        let w = self.verbs_lock(Call::IdQp)?;
        w.id_qp(self.host, id)
    }

    fn create_external_qp(&self, attr: &QpInitAttrEx) -> Result<QpHandle> {
        self.verbs_call(
            Call::CreateExternalQp,
            || {
                format!(
                    "{}, send {}, recv {}, {:?}",
                    attr.pd, attr.send_cq, attr.recv_cq, attr.qp_type
                )
            },
            |qp: &QpHandle| qp.to_string(),
            |w, h| w.create_external_qp(h, attr),
        )
    }

    fn destroy_external_qp(&self, qp: QpHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroyExternalQp,
            || qp.to_string(),
            zero,
            |w, h| w.destroy_external_qp(h, qp),
        )
    }

    fn init_qp_attr(&self, id: IdHandle, state: QpState) -> Result<QpAttr> {
        self.verbs_call(
            Call::InitQpAttr,
            || format!("{id}, {state:?}"),
            |a: &QpAttr| {
                format!(
                    "dest qp {:#x} timeout {} retry {} rnr_retry {}",
                    a.dest_qp_num, a.timeout, a.retry_cnt, a.rnr_retry
                )
            },
            |w, h| w.init_qp_attr(h, id, state),
        )
    }

    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr) -> Result<()> {
        self.verbs_call(
            Call::ModifyQp,
            || format!("{qp}, {:?}", attr.qp_state),
            zero,
            |w, h| w.modify_qp(h, qp, attr),
        )
    }

    fn modify_qp_with_mask(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.verbs_call(
            Call::ModifyQp,
            || format!("{qp}, {:?}, {mask}", attr.qp_state),
            zero,
            |w, h| w.modify_qp_with_mask(h, qp, attr, mask),
        )
    }

    fn create_ah(&self, pd: PdHandle, attr: &AhAttr) -> Result<AhHandle> {
        self.verbs_call(
            Call::CreateAh,
            || format!("{pd}, dgid {:?}", std::net::Ipv6Addr::from(attr.grh.dgid)),
            |ah: &AhHandle| ah.to_string(),
            |w, h| w.create_ah(h, pd, attr),
        )
    }

    fn create_ah_from_wc(
        &self,
        pd: PdHandle,
        wc: &WorkCompletion,
        grh: &[u8; cmtwin::verbs::GRH_LEN as usize],
    ) -> Result<AhHandle> {
        self.verbs_call(
            Call::CreateAhFromWc,
            || format!("{pd}, wr {} from qp {:#x}", wc.wr_id, wc.src_qp),
            |ah: &AhHandle| ah.to_string(),
            |w, h| w.create_ah_from_wc(h, pd, wc, grh),
        )
    }

    fn destroy_ah(&self, ah: AhHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroyAh,
            || ah.to_string(),
            zero,
            |w, h| w.destroy_ah(h, ah),
        )
    }

    fn qp_number(&self, qp: QpHandle) -> Result<u32> {
        let w = self.verbs_lock(Call::QpNumber)?;
        let key = w.qp_key(self.host, Call::QpNumber, qp)?;
        Ok(w.verbs.qps[&key].qpn)
    }

    fn query_qp_state(&self, qp: QpHandle) -> Result<QpState> {
        let w = self.verbs_lock(Call::QueryQp)?;
        w.query_qp_state(self.host, qp)
    }

    fn query_qp_cap(&self, qp: QpHandle) -> Result<QpCap> {
        let w = self.verbs_lock(Call::QueryQp)?;
        w.query_qp_cap(self.host, qp)
    }

    fn post_send(&self, qp: QpHandle, wr: &SendWr<'_>) -> Result<()> {
        self.verbs_call(
            Call::PostSend,
            || describe_send(qp, wr),
            zero,
            |w, h| w.post_send(h, qp, wr),
        )
    }

    fn post_recv(&self, qp: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.verbs_call(
            Call::PostRecv,
            || format!("{qp}, wr {} {} sges", wr.wr_id, wr.sg_list.len()),
            zero,
            |w, h| w.post_recv(h, qp, wr),
        )
    }

    fn inline_bytes(&self, qp: QpHandle, sgl: &[Sge]) -> Result<Vec<u8>> {
        let w = self.verbs_lock(Call::PostSend)?;
        w.inline_bytes(self.host, qp, sgl)
    }

    fn create_srq(&self, pd: PdHandle, attr: &SrqAttr) -> Result<(SrqHandle, SrqAttr)> {
        self.verbs_call(
            Call::CreateSrq,
            || format!("{pd}, {}", show_srq_attr(attr)),
            |(s, a): &(SrqHandle, SrqAttr)| format!("{s} {}", show_srq_attr(a)),
            |w, h| w.create_srq(h, pd, attr),
        )
    }

    fn modify_srq(&self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.verbs_call(
            Call::ModifySrq,
            || format!("{srq}, {}, mask {:#x}", show_srq_attr(attr), mask.0),
            zero,
            |w, h| w.modify_srq(h, srq, attr, mask),
        )
    }

    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr> {
        self.verbs_call(
            Call::QuerySrq,
            || srq.to_string(),
            show_srq_attr,
            |w, h| w.query_srq(h, srq),
        )
    }

    fn destroy_srq(&self, srq: SrqHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroySrq,
            || srq.to_string(),
            zero,
            |w, h| w.destroy_srq(h, srq),
        )
    }

    fn post_srq_recv(&self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<()> {
        self.verbs_call(
            Call::PostSrqRecv,
            || format!("{srq}, wr {} ({} entries)", wr.wr_id, wr.sg_list.len()),
            zero,
            |w, h| w.post_srq_recv(h, srq, wr),
        )
    }

    fn create_id_srq(
        &self,
        id: IdHandle,
        pd: Option<PdHandle>,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)> {
        self.verbs_call(
            Call::CreateIdSrq,
            || format!("{id}, {pd:?}, {}", show_srq_attr(attr)),
            |(s, a): &(SrqHandle, SrqAttr)| format!("{s} {}", show_srq_attr(a)),
            |w, h| w.create_id_srq(h, id, pd, attr),
        )
    }

    fn destroy_id_srq(&self, id: IdHandle) -> Result<()> {
        self.verbs_call(
            Call::DestroyIdSrq,
            || id.to_string(),
            zero,
            |w, h| w.destroy_id_srq(h, id),
        )
    }

    fn srq(&self, id: IdHandle) -> Result<Option<SrqHandle>> {
        let w = self.verbs_lock(Call::IdSrq)?;
        w.id_srq(self.host, id)
    }

    fn get_async_event(&self, wait: Wait) -> Result<VerbsAsyncEvent> {
        let call = Call::GetAsyncEvent;
        let w = self.verbs_lock(call)?;
        let host = self.host;
        let what: cmtwin::runtime::Describe = Arc::new(|| "ibv_get_async_event".to_string());
        let r = wait_for(
            w,
            call,
            wait,
            WaitOn::key(async_wait_key(host)),
            what,
            |w| {
                Ok(w.verbs
                    .async_events
                    .get_mut(&host)
                    .and_then(|q| q.pop_front()))
            },
        );
        let mut w = self.verbs_lock_quiet(call)?;
        let shown = |e: &VerbsAsyncEvent| format!("event {} qp {:?}", e.kind.0, e.qp_num);
        trace_call(&mut w, host, call, || format!("{wait:?}"), shown, &r);
        r
    }

    fn poll_sources(&self, sources: &[PollSource], wait: Wait) -> Result<Vec<PollSource>> {
        let call = Call::Poll;
        let w = self.verbs_lock(call)?;
        let host = self.host;
        let on = w.sources_wait_on(host, call, sources)?;
        let watched = sources.to_vec();
        let what: cmtwin::runtime::Describe =
            Arc::new(move || format!("poll on {}", list_sources(&watched)));
        let r = wait_for(w, call, wait, on, what, |w| {
            let ready = w.sources_ready(host, call, sources)?;
            Ok((!ready.is_empty()).then_some(ready))
        });
        // The end of the wait is an empty answer, as poll(2) returns 0.
        let r = match r {
            Err(e) if matches!(e.errno, Errno::EAGAIN | Errno::ETIMEDOUT) => Ok(Vec::new()),
            r => r,
        };
        let mut w = self.verbs_lock_quiet(call)?;
        let args = || format!("{}, {wait:?}", list_sources(sources));
        trace_call(&mut w, host, call, args, |r| list_sources(r), &r);
        r
    }
}
