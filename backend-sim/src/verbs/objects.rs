//! Protection domains, memory regions, completion queues and completion channels: the calls
//! that make, read, arm and destroy them, and where completions and CQ events go.

use cmtwin::verbs::{AccessFlags, MemoryRegion, WorkCompletion};
use cmtwin::{
    AsyncEvent, Call, CmError, CompChannelHandle, CqHandle, Errno, IdHandle, MrHandle, PdHandle,
    Result,
};

use super::{CompChannel, Cq, Mr, ObjKey, Pd, VerbsAsyncEvent};
use crate::trace::TraceKind;
use crate::world::{DevKey, HostKey, IdKey, World};

/// The access bits libibverbs knows.
const KNOWN_ACCESS: u32 = 0xf;

/// EBADF naming a handle that is not a live object of this host.
fn bad(call: Call, what: &str, shown: impl std::fmt::Display) -> CmError {
    CmError::new(
        call,
        Errno::EBADF,
        format!("{shown} is not a live {what} of this host"),
    )
}

impl World {
    /// The serial behind a verbs handle's raw value, if this fabric stamped it.
    fn verbs_serial(&self, raw: u64) -> Option<ObjKey> {
        self.unstamp(raw)
    }

    /// The device of id `h` of `host` (EINVAL without one, ENXIO once removed).
    pub(crate) fn id_device(
        &self,
        host: HostKey,
        call: Call,
        h: IdHandle,
    ) -> Result<(IdKey, DevKey)> {
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let dev = self.id(key).librdmacm_device().ok_or_else(|| {
            CmError::new(
                call,
                Errno::EINVAL,
                "the id has no device (bind or resolve it first)",
            )
        })?;
        Ok((key, dev))
    }

    /// The live PD behind `h`.
    pub(crate) fn pd_key(&self, host: HostKey, call: Call, h: PdHandle) -> Result<ObjKey> {
        self.verbs_serial(h.raw())
            .filter(|k| self.verbs.pds.get(k).is_some_and(|p| p.host == host))
            .ok_or_else(|| bad(call, "protection domain", h))
    }

    /// The live region behind `h`.
    pub(crate) fn mr_key(&self, host: HostKey, call: Call, h: MrHandle) -> Result<ObjKey> {
        self.verbs_serial(h.raw())
            .filter(|k| self.verbs.mrs.get(k).is_some_and(|m| m.host == host))
            .ok_or_else(|| bad(call, "memory region", h))
    }

    /// The live CQ behind `h`.
    pub(crate) fn cq_key(&self, host: HostKey, call: Call, h: CqHandle) -> Result<ObjKey> {
        self.verbs_serial(h.raw())
            .filter(|k| self.verbs.cqs.get(k).is_some_and(|c| c.host == host))
            .ok_or_else(|| bad(call, "completion queue", h))
    }

    /// The live completion channel behind `h`.
    pub(crate) fn comp_channel_key(
        &self,
        host: HostKey,
        call: Call,
        h: CompChannelHandle,
    ) -> Result<ObjKey> {
        self.verbs_serial(h.raw())
            .filter(|k| self.verbs.channels.get(k).is_some_and(|c| c.host == host))
            .ok_or_else(|| bad(call, "completion channel", h))
    }

    /// The handle of CQ `key`.
    pub(crate) fn cq_handle(&self, key: ObjKey) -> CqHandle {
        CqHandle::from_raw(self.stamp(key))
    }

    // ----- protection domains ------------------------------------------------------------

    /// `ibv_alloc_pd`.
    pub(crate) fn alloc_pd(&mut self, host: HostKey, id: IdHandle) -> Result<PdHandle> {
        let (_, dev) = self.id_device(host, Call::AllocPd, id)?;
        let key = self.new_pd(host, dev);
        self.own_verbs_object(key);
        Ok(PdHandle::from_raw(self.stamp(key)))
    }

    /// A new PD on `dev`.
    pub(crate) fn new_pd(&mut self, host: HostKey, dev: DevKey) -> ObjKey {
        let key = self.verbs.fresh();
        let pd = Pd {
            host,
            dev,
            users: 0,
        };
        self.verbs.pds.insert(key, pd);
        key
    }

    /// `ibv_dealloc_pd`.
    pub(crate) fn dealloc_pd(&mut self, host: HostKey, h: PdHandle) -> Result<()> {
        let call = Call::DeallocPd;
        let key = self.pd_key(host, call, h)?;
        let users = self.verbs.pds[&key].users;
        if users > 0 {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("{users} regions or QPs still use {h}"),
            ));
        }
        self.verbs.pds.remove(&key);
        Ok(())
    }

    // ----- memory regions ----------------------------------------------------------------

    /// `ibv_reg_mr`: the region takes `buffer`.
    pub(crate) fn reg_mr(
        &mut self,
        host: HostKey,
        h: PdHandle,
        buffer: Vec<u8>,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        let call = Call::RegMr;
        let pd = self.pd_key(host, call, h)?;
        if buffer.is_empty() {
            return Err(CmError::new(call, Errno::EINVAL, "an empty buffer"));
        }
        if access.0 & !KNOWN_ACCESS != 0 {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("unknown access bits in {access:?}"),
            ));
        }
        let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.0 & needs_local_write.0 != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "remote write or atomic access needs LOCAL_WRITE",
            ));
        }
        let dev = self.verbs.pds[&pd].dev;
        let (mr_key, addr) = self.verbs.place_region(buffer.len());
        let key = self.verbs.fresh();
        let length = buffer.len();
        self.verbs.mrs.insert(
            key,
            Mr {
                host,
                dev,
                pd,
                key: mr_key,
                addr,
                buf: buffer,
                access,
                busy: 0,
            },
        );
        self.verbs.mr_by_key.insert((dev, mr_key), key);
        self.verbs.pds.get_mut(&pd).expect("live PD").users += 1;
        self.own_verbs_object(key);
        Ok(MemoryRegion {
            handle: MrHandle::from_raw(self.stamp(key)),
            lkey: mr_key,
            rkey: mr_key,
            addr,
            length,
            access,
        })
    }

    /// `ibv_dereg_mr`: hands the buffer back.
    pub(crate) fn dereg_mr(&mut self, host: HostKey, h: MrHandle) -> Result<Vec<u8>> {
        let call = Call::DeregMr;
        let key = self.mr_key(host, call, h)?;
        let busy = self.verbs.mrs[&key].busy;
        if busy > 0 {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("{busy} entries of posted, uncompleted requests use {h}"),
            ));
        }
        Ok(self.remove_mr(key))
    }

    /// Forgets region `key`; its buffer.
    pub(crate) fn remove_mr(&mut self, key: ObjKey) -> Vec<u8> {
        let mr = self.verbs.mrs.remove(&key).expect("live region");
        self.verbs.mr_by_key.remove(&(mr.dev, mr.key));
        if let Some(pd) = self.verbs.pds.get_mut(&mr.pd) {
            pd.users -= 1;
        }
        mr.buf
    }

    /// The bytes `offset..offset + len` of region `h`, checked.
    fn mr_range(
        &self,
        host: HostKey,
        call: Call,
        h: MrHandle,
        offset: usize,
        len: usize,
    ) -> Result<(ObjKey, std::ops::Range<usize>)> {
        let key = self.mr_key(host, call, h)?;
        let size = self.verbs.mrs[&key].buf.len();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok((key, offset..end)),
            _ => Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{len} bytes at offset {offset} exceed the region's {size}"),
            )),
        }
    }

    /// Reads region `h`.
    pub(crate) fn mr_read(
        &self,
        host: HostKey,
        h: MrHandle,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        let (key, range) = self.mr_range(host, Call::MrRead, h, offset, out.len())?;
        out.copy_from_slice(&self.verbs.mrs[&key].buf[range]);
        Ok(())
    }

    /// Writes region `h`.
    pub(crate) fn mr_write(
        &mut self,
        host: HostKey,
        h: MrHandle,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        let (key, range) = self.mr_range(host, Call::MrWrite, h, offset, data.len())?;
        self.verbs.mrs.get_mut(&key).expect("checked").buf[range].copy_from_slice(data);
        Ok(())
    }

    // ----- completion channels and CQs ---------------------------------------------------

    /// `ibv_create_comp_channel`.
    pub(crate) fn create_comp_channel(
        &mut self,
        host: HostKey,
        id: IdHandle,
    ) -> Result<CompChannelHandle> {
        let (_, dev) = self.id_device(host, Call::CreateCompChannel, id)?;
        let key = self.new_comp_channel(host, dev, 0);
        self.own_verbs_object(key);
        Ok(CompChannelHandle::from_raw(self.stamp(key)))
    }

    /// A new completion channel on `dev`.
    pub(crate) fn new_comp_channel(&mut self, host: HostKey, dev: DevKey, cqs: u32) -> ObjKey {
        let key = self.verbs.fresh();
        let channel = CompChannel {
            host,
            dev,
            events: Default::default(),
            cqs,
        };
        self.verbs.channels.insert(key, channel);
        key
    }

    /// `ibv_destroy_comp_channel`.
    pub(crate) fn destroy_comp_channel(
        &mut self,
        host: HostKey,
        h: CompChannelHandle,
    ) -> Result<()> {
        let call = Call::DestroyCompChannel;
        let key = self.comp_channel_key(host, call, h)?;
        let cqs = self.verbs.channels[&key].cqs;
        if cqs > 0 {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("{cqs} CQs report to {h}"),
            ));
        }
        self.remove_comp_channel(key);
        Ok(())
    }

    /// Forgets completion channel `key`: whoever waited on it learns that it is gone.
    pub(crate) fn remove_comp_channel(&mut self, key: ObjKey) {
        self.verbs.channels.remove(&key);
        self.sched.wake_all(super::comp_channel_wait_key(key));
    }

    /// `ibv_create_cq`.
    pub(crate) fn create_cq(
        &mut self,
        host: HostKey,
        id: IdHandle,
        cqe: u32,
        channel: Option<CompChannelHandle>,
    ) -> Result<CqHandle> {
        let call = Call::CreateCq;
        let (_, dev) = self.id_device(host, call, id)?;
        // rxe_cq_chk_attr, siw_create_cq: 1 to the device's `max_cqe`.
        let max_cqe = super::device_profile::maxima(self.topo.devices[dev].transport).cqe;
        if cqe == 0 || cqe > max_cqe {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{cqe} entries (1 to the device's max_cqe {max_cqe})"),
            ));
        }
        let channel = match channel {
            Some(c) => {
                let key = self.comp_channel_key(host, call, c)?;
                if self.verbs.channels[&key].dev != dev {
                    return Err(CmError::new(
                        call,
                        Errno::EINVAL,
                        format!("{c} is on another device"),
                    ));
                }
                Some(key)
            }
            None => None,
        };
        let key = self.new_cq(host, dev, cqe, channel, false);
        self.own_verbs_object(key);
        Ok(self.cq_handle(key))
    }

    /// A new CQ on `dev`, asked for `cqe` entries: it holds as many completions as the
    /// device's ring for that many does (`rxe_cq_from_init` sizes it with `rxe_queue_init`,
    /// `siw_create_cq` rounds up to a power of two: see [`super::qps::queue_depth`]).
    pub(crate) fn new_cq(
        &mut self,
        host: HostKey,
        dev: DevKey,
        cqe: u32,
        channel: Option<ObjKey>,
        implicit: bool,
    ) -> ObjKey {
        let cqe = super::qps::queue_depth(cqe, self.topo.devices[dev].transport);
        // An implicit CQ (librdmacm's, made by `attach_qp` for one QP) is counted by its
        // channel as the channel is made, and counts that QP as its user from the start.
        if let Some(c) = channel.filter(|_| !implicit) {
            self.verbs.channels.get_mut(&c).expect("live channel").cqs += 1;
        }
        let key = self.verbs.fresh();
        let cq = Cq {
            host,
            dev,
            cqe,
            channel,
            entries: Default::default(),
            armed: None,
            unacked: 0,
            users: u32::from(implicit),
            implicit,
        };
        self.verbs.cqs.insert(key, cq);
        key
    }

    /// `ibv_destroy_cq`.
    pub(crate) fn destroy_cq(&mut self, host: HostKey, h: CqHandle) -> Result<()> {
        let call = Call::DestroyCq;
        let key = self.cq_key(host, call, h)?;
        let cq = &self.verbs.cqs[&key];
        if cq.users > 0 || cq.implicit {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("QPs complete into {h}"),
            ));
        }
        if cq.unacked > 0 {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!("{} CQ events of {h} are not acknowledged", cq.unacked),
            ));
        }
        self.remove_cq(key);
        Ok(())
    }

    /// Forgets CQ `key` and its unfetched events.
    pub(crate) fn remove_cq(&mut self, key: ObjKey) {
        let Some(cq) = self.verbs.cqs.remove(&key) else {
            return;
        };
        if let Some(ch) = cq.channel.and_then(|c| self.verbs.channels.get_mut(&c)) {
            ch.cqs -= 1;
            ch.events.retain(|&c| c != key);
        }
    }

    /// `ibv_req_notify_cq`.
    pub(crate) fn req_notify_cq(
        &mut self,
        host: HostKey,
        h: CqHandle,
        solicited_only: bool,
    ) -> Result<()> {
        let call = Call::ReqNotifyCq;
        let key = self.cq_key(host, call, h)?;
        let dev = self.verbs.cqs[&key].dev;
        let siw = self.topo.devices[dev].transport == cmtwin::Transport::Iwarp;
        let cq = self.verbs.cqs.get_mut(&key).expect("checked");
        if cq.channel.is_none() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{h} has no completion channel"),
            ));
        }
        // Arming for every completion wins over solicited-only (the kernel's drivers keep
        // IB_CQ_NEXT_COMP until it fires). libsiw writes the CQ's flags in the process's
        // memory instead: the last arming wins.
        cq.armed = Some(solicited_only && (siw || cq.armed.unwrap_or(true)));
        Ok(())
    }

    /// Takes the head of completion channel `key`'s events, counting it as unacknowledged.
    pub(crate) fn take_cq_event(&mut self, key: ObjKey) -> Option<CqHandle> {
        let cq = self.verbs.channels.get_mut(&key)?.events.pop_front()?;
        self.verbs
            .cqs
            .get_mut(&cq)
            .expect("a CQ with events is live")
            .unacked += 1;
        Some(self.cq_handle(cq))
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_cq_events(&mut self, host: HostKey, h: CqHandle, count: u32) -> Result<()> {
        let call = Call::AckCqEvents;
        let key = self.cq_key(host, call, h)?;
        let cq = self.verbs.cqs.get_mut(&key).expect("checked");
        if count > cq.unacked {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("{count} acknowledgements for {} fetched events", cq.unacked),
            ));
        }
        cq.unacked -= count;
        Ok(())
    }

    /// `ibv_poll_cq`.
    pub(crate) fn poll_cq(
        &mut self,
        host: HostKey,
        h: CqHandle,
        wc: &mut [WorkCompletion],
    ) -> Result<usize> {
        let key = self.cq_key(host, Call::PollCq, h)?;
        let cq = self.verbs.cqs.get_mut(&key).expect("checked");
        let n = wc.len().min(cq.entries.len());
        for (slot, entry) in wc.iter_mut().zip(cq.entries.drain(..n)) {
            *slot = entry;
        }
        Ok(n)
    }

    /// Adds `wc` to CQ `key` and, if the CQ is armed for it, queues a CQ event on its channel
    /// (`wakes_solicited`: whether it wakes a CQ armed for solicited completions only, the
    /// driver's rule); false if the CQ is full: it loses the completion and reports CQ_ERR, as
    /// an overrun CQ does (rxe's `rxe_cq_post`).
    pub(crate) fn push_completion(
        &mut self,
        key: ObjKey,
        wc: WorkCompletion,
        wakes_solicited: bool,
    ) -> bool {
        let Some(cq) = self.verbs.cqs.get_mut(&key) else {
            return false;
        };
        let host = cq.host;
        if cq.entries.len() >= cq.cqe as usize {
            let event = VerbsAsyncEvent {
                kind: AsyncEvent::CQ_ERR,
                qp_num: None,
                id: None,
                cq: Some(self.cq_handle(key)),
                srq: None,
            };
            self.record_text(Some(host), TraceKind::Drop, |w| {
                format!(
                    "{} overrun: completion of wr {} lost",
                    w.cq_handle(key),
                    wc.wr_id
                )
            });
            self.queue_async_event(host, event);
            return false;
        }
        cq.entries.push_back(wc);
        let fires = cq.armed.is_some_and(|only| !only || wakes_solicited);
        if self.trace.is_on() {
            let h = self.cq_handle(key);
            self.record_text(Some(host), TraceKind::Queue, |_| {
                let imm = wc.imm.map(|i| format!(" imm {i:#x}")).unwrap_or_default();
                let src = match (wc.src_qp, wc.grh) {
                    (0, false) => String::new(),
                    (src, grh) => format!(" from qp {src:#x}{}", if grh { " grh" } else { "" }),
                };
                format!(
                    "cqe on {h}: wr {} {:?} {} qp {:#x} {} bytes{imm}{src}",
                    wc.wr_id, wc.opcode, wc.status, wc.qp_num, wc.byte_len
                )
            });
        }
        if !fires {
            return true;
        }
        let cq = self.verbs.cqs.get_mut(&key).expect("live CQ");
        cq.armed = None;
        let Some(channel) = cq.channel else {
            return true;
        };
        if let Some(ch) = self.verbs.channels.get_mut(&channel) {
            ch.events.push_back(key);
            self.sched.wake_all(super::comp_channel_wait_key(channel));
        }
        true
    }

    /// Queues an asynchronous event of `host`'s devices.
    pub(crate) fn queue_async_event(&mut self, host: HostKey, event: VerbsAsyncEvent) {
        if self.trace.is_on() {
            self.record_text(Some(host), TraceKind::Queue, |_| {
                let qp = event
                    .qp_num
                    .map(|q| format!(" qp {q:#x}"))
                    .unwrap_or_default();
                format!("async event {}{qp}", event.kind.0)
            });
        }
        self.verbs
            .async_events
            .entry(host)
            .or_default()
            .push_back(event);
        self.sched.wake_all(super::async_wait_key(host));
    }
}
