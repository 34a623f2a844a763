//! `rdma_resolve_addrinfo` and `rdma_query_addrinfo` (§10.3): DNS mode resolves the fabric's
//! host names and numeric addresses. Produces ADDRINFO_RESOLVED and ADDRINFO_ERROR.
//!
//! DNS mode runs `rdma_getaddrinfo` synchronously inside the call (librdmacm, and cmtwin-verbs'
//! emulation on rdma-core 44): a name that does not resolve is an ENOENT from the call, never
//! an event. ADDRINFO_ERROR comes only from SA mode (RAI_SA, Linux ≥ 6.18: the `Mainline`
//! profile, on InfiniBand): the simulated SA holds no service records, so every SA-mode query
//! ends in ADDRINFO_ERROR -ENOENT after the SA round trip, with the id back in ADDR_BOUND.

use std::net::{IpAddr, SocketAddr};

use cmtwin::{
    rai, AddrInfo, AddrInfoHints, Call, CmError, Errno, EventKind, EventParam, IdHandle, PortSpace,
    Result,
};

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
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let hints = hints.copied().unwrap_or_default();
        if hints.flags & rai::SA != 0 && hints.flags & rai::DNS != 0 {
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
        if hints.flags & rai::SA != 0 {
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
        let port = match service {
            None => 0,
            Some(s) => s
                .parse::<u16>()
                .map_err(|_| CmError::new(call, Errno::ENOENT, format!("unknown service {s:?}")))?,
        };
        let ips: Vec<IpAddr> = match node {
            None => vec![IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)],
            Some(n) => match n.parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => {
                    let Some(hk) = self.topo.hosts.position(|hst| hst.name == n) else {
                        return Err(CmError::new(
                            call,
                            Errno::ENOENT,
                            format!("unknown host {n:?}"),
                        ));
                    };
                    self.topo.hosts[hk]
                        .devices
                        .iter()
                        .flat_map(|d| self.topo.devices[*d].ips.clone())
                        .collect()
                }
            },
        };
        let ps = hints.port_space.unwrap_or(PortSpace::TCP);
        let passive = hints.flags & rai::PASSIVE != 0;
        let list = ips
            .into_iter()
            .map(|ip| {
                let addr = Some(SocketAddr::new(ip, port));
                AddrInfo::new(
                    hints.flags,
                    ps,
                    hints.qp_type.unwrap_or(ps.default_qp_type()),
                    if passive { addr } else { None },
                    if passive { None } else { addr },
                )
            })
            .collect();
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
