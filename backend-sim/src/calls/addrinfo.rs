//! `rdma_resolve_addrinfo` and `rdma_query_addrinfo` (§10.3): DNS mode resolves the fabric's
//! host names and numeric addresses. Produces ADDRINFO_RESOLVED.
//!
//! DNS mode runs `rdma_getaddrinfo` synchronously inside the call (librdmacm, and cmtwin-verbs'
//! emulation on rdma-core 44): a name that does not resolve is an ENOENT from the call, never
//! an event. ADDRINFO_ERROR comes only from SA-mode queries (Linux ≥ 6.18), not modelled.

use std::net::{IpAddr, SocketAddr};

use cmtwin::{
    rai, AddrInfo, AddrInfoHints, Call, CmError, Errno, EventKind, EventParam, IdHandle, PortSpace,
    Result,
};

use crate::config::KernelProfile;
use crate::world::{Action, AddrinfoState, HostKey, World};

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
        if !matches!(self.id(key).addrinfo, AddrinfoState::None) {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                "a resolution is pending or not yet queried",
            ));
        }
        if hints.flags & rai::SA != 0 {
            let errno = match self.cfg.kernel {
                KernelProfile::Linux61 => Errno::EINVAL,
                KernelProfile::Mainline => Errno::EOPNOTSUPP,
            };
            return Err(CmError::new(
                call,
                errno,
                "IB service resolution (RAI_SA) is not available",
            ));
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
                    let Some(hk) = self.hosts.iter().position(|hst| hst.name == n) else {
                        return Err(CmError::new(
                            call,
                            Errno::ENOENT,
                            format!("unknown host {n:?}"),
                        ));
                    };
                    self.hosts[hk]
                        .devices
                        .iter()
                        .flat_map(|d| self.devices[*d].ips.clone())
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
                AddrInfo {
                    flags: hints.flags,
                    port_space: ps,
                    qp_type: hints.qp_type.unwrap_or(ps.default_qp_type()),
                    src_addr: if passive { addr } else { None },
                    dst_addr: if passive { None } else { addr },
                }
            })
            .collect();
        self.id_mut(key).addrinfo = AddrinfoState::Resolved(list);
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
        match std::mem::take(&mut self.id_mut(key).addrinfo) {
            AddrinfoState::Resolved(list) => Ok(list),
            other => {
                self.id_mut(key).addrinfo = other;
                Err(CmError::new(
                    call,
                    Errno::ENOENT,
                    "nothing resolved, or already queried",
                ))
            }
        }
    }
}
