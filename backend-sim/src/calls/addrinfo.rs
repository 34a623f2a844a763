//! `rdma_resolve_addrinfo`, `rdma_query_addrinfo` and `rdma_getaddrinfo` (§10.3): DNS mode
//! resolves the fabric's host names and numeric addresses. Produces ADDRINFO_RESOLVED and
//! ADDRINFO_ERROR.
//!
//! DNS mode runs `rdma_getaddrinfo` synchronously inside the call (librdmacm, and
//! cmtwin-verbs' emulation on rdma-core 44; `getaddrinfo.rs` models it): a name that does not
//! resolve is an ENOENT from the call, never an event, and a success is one result.
//! ADDRINFO_ERROR comes only from SA mode (RAI_SA, Linux ≥ 6.18: the `Mainline` profile, on
//! InfiniBand): the simulated SA holds no service records, so every SA-mode query ends in
//! ADDRINFO_ERROR -ENOENT after the SA round trip, with the id back in ADDR_BOUND.

use cmtwin::{
    rai, AddrInfo, AddrInfoHints, Call, CmError, Errno, EventKind, EventParam, IdHandle, Result,
};

use super::getaddrinfo;
use crate::config::KernelProfile;
use crate::world::{Action, AddrinfoState, CmState, HostKey, IdKey, World};

/// The status of an SA service query that found no records (-ENOENT).
const NO_SERVICE_RECORDS: i32 = -2;

impl World {
    /// `rdma_resolve_addrinfo`.
    pub(crate) fn resolve_addrinfo(
        &mut self,
        host: HostKey,
        h: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()> {
        let call = Call::ResolveAddrinfo;
        check_c_strings(call, node, service)?;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let flags = hints.map_or(0, |h| h.flags);
        if flags & rai::SA != 0 && flags & rai::DNS != 0 {
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                "RAI_SA and RAI_DNS together",
            ));
        }
        if !matches!(self.id(key).addrinfo(), AddrinfoState::None) {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                "a resolution is pending or not yet queried",
            ));
        }
        if flags & rai::SA != 0 {
            return match self.cfg.kernel {
                // Linux 6.1 and 6.12 have no SA-mode command: EINVAL.
                KernelProfile::Linux61 | KernelProfile::Linux612 => Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    "IB service resolution (RAI_SA) needs Linux 6.18",
                )),
                KernelProfile::Mainline => self.resolve_ib_service(call, key, node, service),
            };
        }
        let list = vec![self.lookup(call, node, service, hints)?];
        *self.id_mut(key).addrinfo_mut() = AddrinfoState::Resolved(list);
        let action = Action::IdEvent {
            id: key,
            gen: None,
            kind: EventKind::AddrinfoResolved,
            status: 0,
            param: EventParam::None,
            membership: None,
        };
        self.after(Default::default(), action);
        Ok(())
    }

    /// `rdma_getaddrinfo` without an id.
    pub(crate) fn getaddrinfo(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>> {
        let call = Call::GetAddrinfo;
        check_c_strings(call, node, service)?;
        Ok(vec![self.lookup(call, node, service, hints)?])
    }

    /// `rdma_getaddrinfo`'s one result, names being the fabric's host names (a host's first
    /// device's first address).
    fn lookup(
        &self,
        call: Call,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<AddrInfo> {
        let topo = &self.topo;
        let host_ip = |name: &str| {
            let hk = topo.hosts.position(|hst| hst.name == name)?;
            topo.hosts[hk]
                .devices
                .iter()
                .find_map(|d| topo.devices[*d].ips.first().copied())
        };
        getaddrinfo::rdma_getaddrinfo(node, service, hints, host_ip)
            .map_err(|(errno, why)| CmError::new(call, errno, why))
    }

    /// `rdma_query_addrinfo`.
    pub(crate) fn query_addrinfo(&mut self, host: HostKey, h: IdHandle) -> Result<Vec<AddrInfo>> {
        let call = Call::QueryAddrinfo;
        let key = self.id_key(host, call, h)?;
        match std::mem::take(self.id_mut(key).addrinfo_mut()) {
            AddrinfoState::Resolved(list) => Ok(list),
            other => {
                *self.id_mut(key).addrinfo_mut() = other;
                Err(CmError::new(
                    call,
                    Errno::ENOENT,
                    "nothing resolved, or already queried",
                ))
            }
        }
    }
}

impl World {
    /// SA mode of `resolve_addrinfo` (§10.3): a service (not a node) on an id bound to an
    /// InfiniBand device; the SA query answers after its round trip.
    fn resolve_ib_service(
        &mut self,
        call: Call,
        key: IdKey,
        node: Option<&str>,
        service: Option<&str>,
    ) -> Result<()> {
        if node.is_some() {
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                "SA mode resolves a service, not a node",
            ));
        }
        if service.is_none() {
            return Err(CmError::new(call, Errno::EINVAL, "SA mode needs a service"));
        }
        if self.id(key).state != CmState::AddrBound || self.id(key).device.is_none() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!(
                    "SA mode needs an id bound to a device, not {:?}",
                    self.id(key).state
                ),
            ));
        }
        if self.transport_of(key) != Some(cmtwin::Transport::InfiniBand) {
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                "SA mode needs an InfiniBand port",
            ));
        }
        let id = self.id_mut(key);
        id.state = CmState::AddrinfoQuery;
        *id.addrinfo_mut() = AddrinfoState::Pending;
        id.op_gen += 1;
        let gen = id.op_gen;
        let action = Action::AddrinfoDone {
            id: key,
            gen,
            status: NO_SERVICE_RECORDS,
        };
        self.after(self.cfg.sa_latency, action);
        Ok(())
    }

    /// The SA service query of `id` finished: with no records, ADDRINFO_ERROR and the id back
    /// in ADDR_BOUND (librdmacm clears its resolving flag when the event is fetched).
    pub(crate) fn addrinfo_done(&mut self, key: IdKey, gen: u64, status: i32) {
        let Some(id) = self.kernel.ids.get(&key) else {
            return;
        };
        if id.op_gen != gen || id.state != CmState::AddrinfoQuery {
            return;
        }
        self.id_mut(key).state = CmState::AddrBound;
        self.queue_event(
            key,
            EventKind::AddrinfoError,
            status,
            EventParam::None,
            Vec::new(),
        );
    }
}

/// EINVAL for a string no C string holds (a NUL byte inside): cmtwin-verbs refuses it before
/// anything else.
fn check_c_strings(call: Call, node: Option<&str>, service: Option<&str>) -> Result<()> {
    if [node, service].iter().flatten().any(|s| s.contains('\0')) {
        return Err(CmError::new(
            call,
            Errno::EINVAL,
            "a NUL byte inside a string",
        ));
    }
    Ok(())
}
