//! Ids: `rdma_create_id`, `rdma_destroy_id`, `rdma_bind_addr`, `rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_listen`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_disconnect`, `rdma_notify`, `rdma_establish`, `rdma_migrate_id`, `rdma_set_option`,
//! `rdma_get_local_addr`, `rdma_get_peer_addr`.
//!
//! Every call first checks the handle, then refuses what would crash librdmacm (§16, §19) with
//! the kernel's errno, then calls librdmacm under the id's call lock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cmtwin::{
    AsyncEvent, Call, ChannelHandle, CmOption, ConnParam, IdHandle, PortSpace, PrivateDataOp,
    Result,
};

use crate::ffi::{ConnParamIn, RawId};
use crate::private_data;
use crate::registry::{lock, lock_fetches, ChannelObj, IdObj, IdState, TakeError};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

/// A timeout in milliseconds for librdmacm (saturating).
pub(crate) fn timeout_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Borrowed C form of `param`.
pub(crate) fn conn_param_in(p: &ConnParam) -> ConnParamIn<'_> {
    ConnParamIn {
        private_data: &p.private_data,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
        qp_num: p.qp_num,
    }
}

/// Which channels' fetch locks a call on an id holds besides the id's call lock.
pub(crate) enum FetchLocks<'a> {
    /// The id's own channel's (every call that reads or writes the id's fields).
    Own,
    /// The id's own channel's and this one's (`migrate_id`: its target).
    OwnAnd(&'a ChannelObj),
    /// None: the call touches nothing that librdmacm's event processing writes, and may
    /// block for long (a name lookup), which must not stall `get_cm_event` on the channel.
    NotNeeded,
}

/// EINVAL for a call that needs the id to be attached to an RDMA device.
fn no_device(call: Call, h: IdHandle, hint: &str) -> cmtwin::CmError {
    err(
        call,
        libc::EINVAL,
        format!("{h} is not attached to an RDMA device ({hint})"),
    )
}

impl VerbsBackend {
    /// Runs `f` on the live id `h` under its call lock and its channel's fetch lock (see
    /// `ChannelObj::fetch`: librdmacm writes the id's fields while processing its events), then
    /// refreshes what the backend tracks about a synchronous id's current event.
    pub(crate) fn on_id<T>(
        &self,
        call: Call,
        h: IdHandle,
        f: impl FnOnce(&IdObj) -> Result<T>,
    ) -> Result<T> {
        self.on_id_locking(call, h, FetchLocks::Own, f)
    }

    /// [`Self::on_id`] with the fetch locks `fetch`.
    pub(crate) fn on_id_locking<T>(
        &self,
        call: Call,
        h: IdHandle,
        fetch: FetchLocks<'_>,
        f: impl FnOnce(&IdObj) -> Result<T>,
    ) -> Result<T> {
        let obj = self.id_obj(call, h)?;
        let _call = lock(&obj.call);
        // The id's channel changes only in migrate_id, under the call lock held here. A
        // synchronous id has none: librdmacm processes its events inside the calls on the id,
        // which the call lock already serialises.
        let channel = lock(&obj.state).channel.clone();
        let _fetch = match fetch {
            FetchLocks::Own => lock_fetches(channel.as_deref(), None),
            FetchLocks::OwnAnd(also) => lock_fetches(channel.as_deref(), Some(also)),
            FetchLocks::NotNeeded => [None, None],
        };
        let result = f(&obj);
        let mut st = lock(&obj.state);
        if st.pending_request_of.is_some() && obj.raw.current_event().map(|e| e.kind) != Some(4) {
            st.pending_request_of = None;
        }
        result
    }

    /// Before a call that may wait for the id's next event: a synchronous id's emulated current
    /// event is replaced by what librdmacm stores.
    fn before_blocking(obj: &IdObj) {
        lock(&obj.state).sync_override = None;
    }

    pub(crate) fn create_id_impl(
        &self,
        channel: Option<ChannelHandle>,
        context: u64,
        port_space: PortSpace,
    ) -> Result<IdHandle> {
        let call = Call::CreateId;
        let chan = channel.map(|h| self.channel_obj(call, h)).transpose()?;
        if !port_space.is_valid() {
            return Err(err(
                call,
                libc::EINVAL,
                format!("{port_space:?} is not a port space the kernel knows"),
            ));
        }
        let raw = RawId::create(chan.as_ref().map(|c| &c.raw), context, port_space.0).map_err(
            |e| match e {
                libc::ENODEV => err(
                    call,
                    e,
                    "no RDMA device was found: librdmacm needs at least one RDMA device",
                ),
                e => c_err(call, e),
            },
        )?;
        let registered = self.reg().insert_id(raw, IdState::new(chan, port_space));
        match registered {
            Ok(obj) => Ok(obj.handle),
            Err(raw) => {
                let _ = raw.destroy();
                Err(keys_exhausted(call))
            }
        }
    }

    pub(crate) fn destroy_id_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::DestroyId;
        let (obj, retired) = {
            let mut reg = self.reg();
            if reg.id(id).is_none() {
                drop(reg);
                return self.id_obj(call, id).map(|_| ());
            }
            // As librdmacm, wait for the acknowledgement of the id's fetched events (another
            // thread may hold them), but not for ever: see `ACK_WAIT`.
            let deadline = Instant::now() + crate::ACK_WAIT;
            while !reg.outstanding_of(id).is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                reg = self.wait_acked(reg, left);
            }
            let outstanding = reg.outstanding_of(id);
            if !outstanding.is_empty() {
                let names: Vec<String> = outstanding
                    .iter()
                    .map(|(t, k)| format!("{k} (ticket {:#x})", t.0))
                    .collect();
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!(
                        "{id} has {} unacknowledged event(s): {}, still unacknowledged after \
                         {:?}; acknowledge them first (librdmacm would block until then)",
                        names.len(),
                        names.join(", "),
                        crate::ACK_WAIT
                    ),
                ));
            }
            let holders: Vec<String> = reg
                .ids()
                .filter(|o| lock(&o.state).pending_request_of == Some(id))
                .map(|o| o.handle.to_string())
                .collect();
            if !holders.is_empty() {
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!(
                        "ids returned by get_request still hold this listener's \
                         CONNECT_REQUEST ({}); accept or destroy them first",
                        holders.join(", ")
                    ),
                ));
            }
            reg.verbs.check_id_qp_retirable(call, id)?;
            match reg.take_id(id) {
                Ok(obj) => {
                    if reg.verbs.forget_id_srq(id) {
                        obj.raw.set_srq(None);
                    }
                    (obj, reg.verbs.retire_id_qp(id))
                }
                Err(TakeError::Unknown) => unreachable!("checked above under the same lock"),
                Err(TakeError::InUse(n)) => {
                    return Err(err(
                        call,
                        libc::EBUSY,
                        format!("{id} is in use by {n} call(s) in other threads"),
                    ))
                }
            }
        };
        let IdObj { raw, state, .. } = obj;
        let state = state.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(ch) = &state.channel {
            ch.take_injected_of(id);
        }
        let result = {
            // No rdma_get_cm_event may be processing an event of this id meanwhile (see
            // `ChannelObj::fetch`).
            let _fetch = state.channel.as_ref().map(|c| lock(&c.fetch));
            raw.destroy().map_err(|e| c_err(call, e))
        };
        // The QP is gone: the regions its requests named are free.
        drop(retired);
        // As librdmacm frees its PD with the device's last id: the backend's PD of the device
        // goes with the backend's last id, unless regions or QPs still use it.
        self.release_idle_default_pds();
        if state.device_removed {
            crate::ffi::refresh_device_list();
        }
        drop(state);
        result
    }

    pub(crate) fn bind_addr_impl(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        let call = Call::BindAddr;
        self.on_id(call, id, |o| {
            o.raw.bind_addr(&addr).map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn resolve_addr_impl(
        &self,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let call = Call::ResolveAddr;
        self.on_id(call, id, |o| {
            Self::before_blocking(o);
            o.raw
                .resolve_addr(src.as_ref(), &dst, timeout_ms(timeout))
                .map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn resolve_route_impl(&self, id: IdHandle, timeout: Duration) -> Result<()> {
        let call = Call::ResolveRoute;
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(no_device(call, id, "resolve its address first"));
            }
            Self::before_blocking(o);
            o.raw
                .resolve_route(timeout_ms(timeout))
                .map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn listen_impl(&self, id: IdHandle, backlog: i32) -> Result<()> {
        let call = Call::Listen;
        self.on_id(call, id, |o| {
            o.raw.listen(backlog).map_err(|e| c_err(call, e))?;
            lock(&o.state).listening = true;
            Ok(())
        })
    }

    pub(crate) fn connect_impl(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let call = Call::Connect;
        self.on_id(call, id, |o| {
            if lock(&o.state).listening {
                return Err(err(call, libc::EINVAL, format!("{id} is listening")));
            }
            if !o.raw.has_device() {
                return Err(no_device(call, id, "resolve its address and route first"));
            }
            let len = param.map_or(0, |p| p.private_data.len());
            private_data::check(
                call,
                &o.raw,
                PrivateDataOp::Connect,
                PrivateDataOp::ConnectUd,
                len,
            )?;
            if param.is_none() && o.raw.qp_num().is_none() && o.raw.port_space() == PortSpace::TCP.0
            {
                return Err(err(
                    call,
                    libc::EINVAL,
                    "an RDMA_PS_TCP id without QP needs connection parameters",
                ));
            }
            Self::before_blocking(o);
            let p = param.map(conn_param_in);
            o.raw.connect(p.as_ref()).map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn accept_impl(&self, id: IdHandle, param: Option<&ConnParam>) -> Result<()> {
        let call = Call::Accept;
        self.on_id(call, id, |o| {
            if lock(&o.state).listening {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is a listening id; accept the CONNECT_REQUEST's new id"),
                ));
            }
            if !o.raw.has_device() {
                return Err(no_device(call, id, "only a connection's id can accept"));
            }
            if param.is_none() && o.raw.qp_num().is_none() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} has no QP: accept needs connection parameters"),
                ));
            }
            let len = param.map_or(0, |p| p.private_data.len());
            private_data::check(
                call,
                &o.raw,
                PrivateDataOp::Accept,
                PrivateDataOp::AcceptUd,
                len,
            )?;
            Self::before_blocking(o);
            let p = param.map(conn_param_in);
            o.raw.accept(p.as_ref()).map_err(|e| c_err(call, e))?;
            lock(&o.state).unaccepted = false;
            Ok(())
        })
    }

    pub(crate) fn reject_impl(&self, id: IdHandle, data: &[u8]) -> Result<()> {
        let call = Call::Reject;
        self.on_id(call, id, |o| {
            if lock(&o.state).listening {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is a listening id; reject the CONNECT_REQUEST's new id"),
                ));
            }
            if !o.raw.has_device() {
                return Err(no_device(call, id, "only a connection's id can reject"));
            }
            private_data::check(
                call,
                &o.raw,
                PrivateDataOp::Reject,
                PrivateDataOp::RejectUd,
                data.len(),
            )?;
            o.raw.reject(data).map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn disconnect_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::Disconnect;
        self.on_id(call, id, |o| {
            Self::before_blocking(o);
            o.raw.disconnect().map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn notify_impl(&self, id: IdHandle, event: AsyncEvent) -> Result<()> {
        let call = Call::Notify;
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(no_device(call, id, "notify needs a connection"));
            }
            o.raw.notify(event.0).map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn establish_impl(&self, id: IdHandle) -> Result<()> {
        let call = Call::Establish;
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(no_device(call, id, "establish follows CONNECT_RESPONSE"));
            }
            o.raw.establish().map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn migrate_id_impl(
        &self,
        id: IdHandle,
        channel: Option<ChannelHandle>,
    ) -> Result<()> {
        let call = Call::MigrateId;
        let target = channel.map(|h| self.channel_obj(call, h)).transpose()?;
        let outstanding = self.reg().outstanding_of(id);
        let fetch = target
            .as_deref()
            .map_or(FetchLocks::Own, FetchLocks::OwnAnd);
        self.on_id_locking(call, id, fetch, |o| {
            if !outstanding.is_empty() {
                let names: Vec<String> = outstanding
                    .iter()
                    .map(|(t, k)| format!("{k} (ticket {:#x})", t.0))
                    .collect();
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!(
                        "{id} has unacknowledged event(s): {}; acknowledge them first \
                         (librdmacm would block forever)",
                        names.join(", ")
                    ),
                ));
            }
            let old = lock(&o.state).channel.clone();
            if target.is_none() && old.is_none() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is already synchronous"),
                ));
            }
            Self::before_blocking(o);
            // Both channels' fetch locks are held: the kernel moves the id's queued events to
            // the target, where they could otherwise be processed before librdmacm is done.
            {
                let _switch = lock(&o.channel_switch);
                o.raw
                    .migrate(target.as_ref().map(|c| &c.raw))
                    .map_err(|e| c_err(call, e))?;
            }
            lock(&o.state).channel = target.clone();
            if let Some(old) = old {
                let moved = old.take_injected_of(id);
                if let Some(new) = &target {
                    for e in moved {
                        new.inject(e);
                    }
                }
            }
            Ok(())
        })
    }

    pub(crate) fn set_option_impl(&self, id: IdHandle, option: &CmOption) -> Result<()> {
        let call = Call::SetOption;
        let (level, name, mut value): (i32, i32, Vec<u8>) = match option {
            CmOption::Tos(v) => (0, 0, vec![*v]),
            CmOption::ReuseAddr(b) => (0, 1, i32::from(*b).to_ne_bytes().to_vec()),
            CmOption::AfOnly(b) => (0, 2, i32::from(*b).to_ne_bytes().to_vec()),
            CmOption::AckTimeout(v) => (0, 3, vec![*v]),
            CmOption::IbPath(bytes) => (1, 1, bytes.clone()),
            other => {
                return Err(err(
                    call,
                    libc::ENOSYS,
                    format!("{other:?} is not known to this backend"),
                ))
            }
        };
        self.on_id(call, id, |o| {
            o.raw
                .set_option(level, name, &mut value)
                .map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn local_addr_impl(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.on_id(Call::LocalAddr, id, |o| Ok(o.raw.local_addr()))
    }

    pub(crate) fn peer_addr_impl(&self, id: IdHandle) -> Result<Option<SocketAddr>> {
        self.on_id(Call::PeerAddr, id, |o| Ok(o.raw.peer_addr()))
    }
}
