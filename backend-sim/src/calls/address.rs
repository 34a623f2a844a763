//! Addresses: bind (with the port table of §4.3), address resolution (§4.4), route resolution
//! (§4.5). Produces ADDR_RESOLVED, ADDR_ERROR, ROUTE_RESOLVED and ROUTE_ERROR.
//!
//! IP routing and RDMA devices are separate, as on Linux: a removed device's netdev keeps its
//! addresses and routes, so resolving through it succeeds at the IP level and only the
//! device's attachment at the end fails (ADDR_ERROR -ENODEV). An id that resolves without a
//! bound device is attached to one only when its resolution completes (`addr_handler` in
//! cma.c), so until then device faults do not reach it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use cmtwin::{Call, CmError, Errno, EventKind, EventParam, IdHandle, PortSpace, Result, Transport};

use crate::faults::PathFailure;
use crate::rng::Stream;
use crate::world::{Action, CmState, DevKey, HostKey, IdKey, World};

/// First and last ephemeral port (`ip_local_port_range`).
const EPHEMERAL: (u16, u16) = (32768, 60999);

/// Whether `ip` is an any or a loopback address (cma.c `cma_any_addr` or
/// `cma_loopback_addr`): binding to one attaches no device, resolving one goes through loopback
/// resolution (the sender's own port), and `validate_net_dev` refuses one in a request.
pub(crate) fn is_any(ip: IpAddr) -> bool {
    ip.is_unspecified() || ip.is_loopback()
}

/// `timeout` as librdmacm takes it: whole milliseconds (an `int`), truncated and saturating
/// as cmtwin-verbs converts it.
fn whole_millis(timeout: Duration) -> Duration {
    Duration::from_millis(timeout.as_millis().min(i32::MAX as u128) as u64)
}

/// Whether `a` and `b` share a subnet (/24 for IPv4, /64 for IPv6): the fabric's routing.
fn same_subnet(a: IpAddr, b: IpAddr) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => a.octets()[..3] == b.octets()[..3],
        (IpAddr::V6(a), IpAddr::V6(b)) => a.octets()[..8] == b.octets()[..8],
        _ => false,
    }
}

impl World {
    /// Whether `other`'s binding of the same port conflicts with binding `ip` for `key`; the
    /// errno says how (§4.3, `cma_check_port`). `reuse` is whether `key`'s REUSEADDR counts:
    /// a bind's does, a listen's re-check does not.
    pub(crate) fn port_conflict(
        &self,
        key: IdKey,
        ip: IpAddr,
        other: IdKey,
        reuse: bool,
    ) -> Option<Errno> {
        let (me, them) = (self.id(key), self.id(other));
        let their_ip = them.local.map(|a| a.ip())?;
        if ip.is_ipv4() != their_ip.is_ipv4() {
            let v6_afonly = if ip.is_ipv6() { me.afonly } else { them.afonly };
            if v6_afonly == Some(true) || !(is_any(ip) || is_any(their_ip)) {
                return None;
            }
        }
        let both_reuse = reuse && them.reuseaddr;
        if is_any(ip) || is_any(their_ip) {
            (!both_reuse).then_some(Errno::EADDRNOTAVAIL)
        } else if ip == their_ip {
            (!both_reuse).then_some(Errno::EADDRINUSE)
        } else {
            None
        }
    }

    /// Takes `port` (0: an ephemeral one) in the id's port space for `ip`.
    fn take_port(&mut self, key: IdKey, ip: IpAddr, port: u16) -> Result<u16, Errno> {
        let (host, ps, reuse) = (self.id(key).host, self.id(key).ps, self.id(key).reuseaddr);
        let free = |w: &World, p: u16| {
            w.kernel.ports.get(&(host, ps, p)).is_none_or(|holders| {
                holders
                    .iter()
                    .all(|o| w.port_conflict(key, ip, *o, reuse).is_none())
            })
        };
        let port = if port == 0 {
            let (lo, hi) = EPHEMERAL;
            let span = u64::from(hi - lo) + 1;
            let start = self.rng.range(Stream::Ports, 0, span - 1);
            let last = self.topo.hosts[host].last_ephemeral.get(&ps).copied();
            let found = (0..span)
                .map(|i| lo + ((start + i) % span) as u16)
                .find(|p| Some(*p) != last && free(self, *p))
                .ok_or(Errno::EADDRNOTAVAIL)?;
            self.topo.hosts[host].last_ephemeral.insert(ps, found);
            found
        } else {
            if let Some(holders) = self.kernel.ports.get(&(host, ps, port)) {
                if let Some(e) = holders
                    .iter()
                    .find_map(|o| self.port_conflict(key, ip, *o, reuse))
                {
                    return Err(e);
                }
            }
            port
        };
        self.kernel
            .ports
            .entry((host, ps, port))
            .or_default()
            .push(key);
        self.id_mut(key).port = Some(port);
        Ok(port)
    }

    /// Gives back the id's port.
    pub(crate) fn release_port(&mut self, key: IdKey) {
        let id = self.id(key);
        let Some(port) = id.port else { return };
        let slot = (id.host, id.ps, port);
        if let Some(holders) = self.kernel.ports.get_mut(&slot) {
            if holders.remove(key) {
                self.kernel.ports.remove(&slot);
            }
        }
        self.id_mut(key).port = None;
    }

    /// The kernel's bind: attaches the device owning a specific address, takes the port.
    fn bind_inner(&mut self, call: Call, key: IdKey, addr: SocketAddr) -> Result<()> {
        let host = self.id(key).host;
        if let SocketAddr::V6(a) = addr {
            // fe80::/10 (`Ipv6Addr::is_unicast_link_local` is newer than the MSRV).
            let link_local = a.ip().segments()[0] & 0xffc0 == 0xfe80;
            if link_local && a.scope_id() == 0 {
                // cma_check_linklocal: the scope id names the link, and is required.
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!("{} is link-local and has no scope id", a.ip()),
                ));
            }
        }
        let device = if is_any(addr.ip()) {
            None
        } else {
            let netdev = self.topo.netdev_with_ip(host, addr.ip());
            if self.ipoib_refused(key, netdev) {
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    format!(
                        "{} is on a {:?} netdev, and RDMA_PS_IPOIB needs InfiniBand",
                        addr.ip(),
                        self.topo.devices[netdev.expect("refused for its netdev")].transport
                    ),
                ));
            }
            match self.topo.device_with_ip(host, addr.ip()) {
                Some(d) => Some(d),
                // The address of a removed device stays on its netdev, which has no RDMA
                // device any more: ENODEV (cma_acquire_dev_by_src_ip). An address on no
                // interface at all: EADDRNOTAVAIL (rdma_translate_ip). Both measured on rxe
                // and siw, Linux 6.1 and 6.12 (tests/FIDELITY.md).
                None if self.topo.removed_device_with_ip(host, addr.ip()) => {
                    return Err(CmError::new(
                        call,
                        Errno::ENODEV,
                        format!("{} belongs to a removed RDMA device", addr.ip()),
                    ));
                }
                None => {
                    return Err(CmError::new(
                        call,
                        Errno::EADDRNOTAVAIL,
                        format!("{} is configured on no interface of this host", addr.ip()),
                    ));
                }
            }
        };
        let port = self.take_port(key, addr.ip(), addr.port()).map_err(|e| {
            CmError::new(
                call,
                e,
                format!("port {} of {:?} is taken", addr.port(), self.id(key).ps),
            )
        })?;
        let id = self.id_mut(key);
        // The kernel keeps the whole address given (an IPv6 scope id and flow label too).
        let mut local = addr;
        local.set_port(port);
        id.local = Some(local);
        id.device = device;
        id.state = CmState::AddrBound;
        Ok(())
    }

    /// Whether attaching `key` to a device through `netdev` is refused for its port space:
    /// RDMA_PS_IPOIB on a netdev that is not InfiniBand (RoCE's and iWARP's are Ethernet),
    /// whether its RDMA device is present or removed (`cma_acquire_dev_by_src_ip` looks at the
    /// netdev's type before it looks for a device).
    fn ipoib_refused(&self, key: IdKey, netdev: Option<DevKey>) -> bool {
        self.id(key).ps == PortSpace::IPOIB
            && netdev.is_some_and(|d| self.topo.devices[d].transport != Transport::InfiniBand)
    }

    /// `rdma_bind_addr`.
    pub(crate) fn bind_addr(&mut self, host: HostKey, h: IdHandle, addr: SocketAddr) -> Result<()> {
        let call = Call::BindAddr;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        if self.id(key).state != CmState::Idle {
            return Err(self.wrong_state(call, key));
        }
        self.bind_inner(call, key, addr)?;
        // librdmacm queries the addresses after a successful bind.
        self.id_mut(key).refresh_user_addrs();
        Ok(())
    }

    /// Auto-bind of `listen` on an IDLE id: 0.0.0.0, ephemeral port.
    pub(crate) fn auto_bind_any(&mut self, call: Call, key: IdKey) -> Result<()> {
        self.bind_inner(
            call,
            key,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        )
    }

    /// The device whose netdev carries `host`'s route to `dst`, present or removed (the
    /// netdev outlives its RDMA device): the device owning `dst`, else one on `dst`'s subnet.
    /// A multicast group goes out of the bound source's netdev, with no route needed (the
    /// source picks the interface, `ip_route_output_key`); without a source it needs a route,
    /// and the fabric's hosts have only their subnets' (no default route): none.
    fn netdev_route(&self, host: HostKey, bound: Option<DevKey>, dst: IpAddr) -> Option<DevKey> {
        let devices = &self.topo.hosts[host].devices;
        if dst.is_multicast() {
            return bound;
        }
        let on = |pred: &dyn Fn(IpAddr) -> bool| {
            devices
                .iter()
                .copied()
                .find(|d| self.topo.devices[*d].ips.iter().any(|ip| pred(*ip)))
        };
        on(&|ip| ip == dst).or_else(|| on(&|ip| same_subnet(ip, dst)))
    }

    /// The device an id without one is attached to when resolving `dst` completes
    /// (`cma_acquire_dev_by_src_ip`); `None` if that device was removed meanwhile.
    fn device_for(&self, host: HostKey, dst: IpAddr) -> Option<DevKey> {
        if is_any(dst) {
            self.topo.first_device(host)
        } else {
            self.netdev_route(host, None, dst)
                .filter(|d| self.topo.devices[*d].present)
        }
    }

    /// `rdma_resolve_addr`.
    pub(crate) fn resolve_addr(
        &mut self,
        host: HostKey,
        h: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let call = Call::ResolveAddr;
        let timeout = whole_millis(timeout);
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        // cma.c `resolve_prepare_src` (Linux 6.1) binds an idle id to the source first and
        // compares families only afterwards: a source of the other family stays bound (its
        // port taken, the id ADDR_BOUND) when the call fails with EINVAL, and a bound id's
        // source argument is ignored, whatever its family.
        match self.id(key).state {
            CmState::Idle => {
                // cma_bind_addr: without a source, the family's wildcard, which takes an IPv6
                // destination's scope id.
                let any = match dst {
                    SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
                    SocketAddr::V6(d) => {
                        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, d.scope_id()).into()
                    }
                };
                self.bind_inner(call, key, src.unwrap_or(any))?;
            }
            CmState::AddrBound => {}
            _ => return Err(self.wrong_state(call, key)),
        }
        let local = self.id(key).local.expect("bound");
        if local.is_ipv4() != dst.is_ipv4() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the bound address's family differs from the destination's",
            ));
        }
        let bound = self.id(key).device;
        let (delay, status) = if is_any(dst.ip()) {
            // Loopback resolution (cma_resolve_loopback): the bound device, or the host's first.
            let Some(dev) = bound.or_else(|| self.topo.first_device(host)) else {
                return Err(CmError::new(
                    call,
                    Errno::ENODEV,
                    "no RDMA device on this host",
                ));
            };
            if bound.is_none() && self.topo.devices[dev].transport == Transport::Iwarp {
                // cma_bind_loopback attaches the device with its P_Key 0; an iWARP device has
                // no P_Key table (measured on siw, Linux 6.1 and 6.12).
                return Err(CmError::new(
                    call,
                    Errno::EINVAL,
                    "loopback resolution needs a P_Key, and an iWARP device has none",
                ));
            }
            (Duration::ZERO, 0)
        } else {
            if self.netdev_route(host, bound, dst.ip()).is_none() {
                return Err(CmError::new(
                    call,
                    Errno::ENETUNREACH,
                    format!("no route to {}", dst.ip()),
                ));
            }
            self.neighbour_resolution(host, dst.ip(), timeout)
        };
        let id = self.id_mut(key);
        id.peer = Some(dst);
        id.state = CmState::AddrQuery;
        id.op_gen += 1;
        let gen = id.op_gen;
        self.after(
            delay,
            Action::AddrDone {
                id: key,
                gen,
                status,
            },
        );
        Ok(())
    }

    /// How long resolving the link-layer address of routed `dst` takes, and its status: none
    /// for the host's own addresses and multicast groups (mapped, not asked for), an ARP/ND
    /// round trip for a neighbour that answers, the deadline (-ETIMEDOUT) for one that does not.
    /// A deadline of 0 ms has passed when the request is first looked at again, before any
    /// answer (`process_one_req`): -ETIMEDOUT at once, whoever the neighbour is.
    fn neighbour_resolution(
        &self,
        host: HostKey,
        dst: IpAddr,
        timeout: Duration,
    ) -> (Duration, i32) {
        let own = self.topo.hosts[host]
            .devices
            .iter()
            .any(|d| self.topo.devices[*d].ips.contains(&dst));
        if own || dst.is_multicast() {
            (Duration::ZERO, 0)
        } else if timeout.is_zero() && !self.cfg.noarp {
            (Duration::ZERO, -110)
        } else if self.topo.owner_of_ip(dst).is_some() || self.topo.silent_ips.contains(&dst) {
            (self.cfg.wire_latency * 2, 0)
        } else if self.cfg.noarp {
            // A NOARP netdev (such as a dummy interface) needs no neighbour resolution.
            (Duration::ZERO, 0)
        } else {
            (timeout, -110)
        }
    }

    /// Address resolution of `id` finished.
    pub(crate) fn addr_done(&mut self, key: IdKey, gen: u64, status: i32) {
        let Some(id) = self.kernel.ids.get(&key) else {
            return;
        };
        if id.op_gen != gen || id.state != CmState::AddrQuery {
            return;
        }
        let dst = id.peer.expect("resolving id has a destination");
        let device = id.device.or_else(|| self.device_for(id.host, dst.ip()));
        // An IPoIB id without a device resolved through an Ethernet netdev: the device is
        // refused (-EINVAL). Loopback resolution attaches its device without this check
        // (cma_bind_loopback).
        let refused = status == 0
            && id.device.is_none()
            && !is_any(dst.ip())
            && self.ipoib_refused(key, self.netdev_route(id.host, None, dst.ip()));
        // The route and neighbour resolved, but no RDMA device is left to attach: -ENODEV.
        let status = match (status, device) {
            _ if refused => -22,
            (0, None) => -19,
            _ => status,
        };
        if let (0, Some(dev)) = (status, device) {
            let local = id.local.expect("bound");
            // A specific source stays, also towards a loopback destination: the kernel
            // replaces the source only of an id without a device (cma_resolve_loopback calls
            // cma_bind_loopback then; addr_handler takes the routed source).
            // The routed address replaces only the wildcard's IP: an IPv6 source keeps its
            // scope id and flow label (addr6_resolve fills in sin6_addr alone).
            let mut src = local;
            if is_any(local.ip()) && is_any(dst.ip()) {
                src.set_ip(if dst.is_ipv4() {
                    IpAddr::V4(Ipv4Addr::LOCALHOST)
                } else {
                    IpAddr::V6(Ipv6Addr::LOCALHOST)
                });
            } else if is_any(local.ip()) {
                let d = &self.topo.devices[dev];
                let ip = d
                    .ips
                    .iter()
                    .copied()
                    .find(|ip| same_subnet(*ip, dst.ip()) || *ip == dst.ip())
                    .unwrap_or(d.ips[0]);
                src.set_ip(ip);
            }
            let id = self.id_mut(key);
            id.change_local(src);
            id.device = Some(dev);
            id.state = CmState::AddrResolved;
            self.queue_event(
                key,
                EventKind::AddrResolved,
                0,
                EventParam::None,
                Vec::new(),
            );
        } else {
            self.id_mut(key).state = CmState::AddrBound;
            self.queue_event(
                key,
                EventKind::AddrError,
                status,
                EventParam::None,
                Vec::new(),
            );
        }
    }

    /// `rdma_resolve_route`.
    pub(crate) fn resolve_route(
        &mut self,
        host: HostKey,
        h: IdHandle,
        timeout: Duration,
    ) -> Result<()> {
        let call = Call::ResolveRoute;
        let timeout = whole_millis(timeout);
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        if self.id(key).librdmacm_device().is_none() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the id has no device (resolve the address first)",
            ));
        }
        if timeout.is_zero() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "timeout of 0 ms (librdmacm takes whole milliseconds)",
            ));
        }
        if self.id(key).state != CmState::AddrResolved {
            return Err(self.wrong_state(call, key));
        }
        let loopback = self.id(key).local.is_some_and(|a| a.ip().is_loopback());
        if loopback && self.transport_of(key) == Some(Transport::Roce) {
            // A loopback-resolved RoCE id is bound to `lo`, which is no RoCE netdev (seen on
            // Soft-RoCE, Linux 6.1).
            return Err(CmError::new(
                call,
                Errno::ENODEV,
                "the bound netdev (loopback) has no RoCE port",
            ));
        }
        // Only InfiniBand asks the SA for a path; RoCE and iWARP routes are computed locally
        // and cannot fail asynchronously (§14.2). A failed SA query is ROUTE_ERROR with the SA
        // client's status (cma_query_handler).
        let (delay, status) = match self.transport_of(key) {
            Some(Transport::InfiniBand) => match self.take_path_fault(host) {
                None => (self.cfg.sa_latency, 0),
                Some(PathFailure::NoPath) => (self.cfg.sa_latency, -22),
                Some(PathFailure::Timeout) => (timeout, -110),
            },
            _ => (Duration::ZERO, 0),
        };
        if self.transport_of(key) == Some(Transport::Roce) {
            // cma_resolve_iboe_route reads the TOS now, into the path's traffic class.
            let id = self.id_mut(key);
            id.path_tclass = id.tos;
        }
        let id = self.id_mut(key);
        id.state = CmState::RouteQuery;
        id.op_gen += 1;
        let gen = id.op_gen;
        self.after(
            delay,
            Action::RouteDone {
                id: key,
                gen,
                status,
            },
        );
        Ok(())
    }

    /// The packet life time a route resolved now gets: on RoCE, ACK_TIMEOUT − 1 if that option
    /// was set (non-zero), else the fabric's (§4.5, §7.2).
    pub(crate) fn route_plt(&self, key: IdKey) -> u8 {
        let id = self.id(key);
        match (self.transport_of(key), id.ack_timeout) {
            (Some(Transport::Roce), Some(t)) if t > 0 => t - 1,
            _ => self.cfg.packet_life_time,
        }
    }

    /// Route resolution of `id` finished: ROUTE_RESOLVED, or ROUTE_ERROR with `status` and the
    /// id back in ADDR_RESOLVED, so that it can try again.
    pub(crate) fn route_done(&mut self, key: IdKey, gen: u64, status: i32) {
        let Some(id) = self.kernel.ids.get(&key) else {
            return;
        };
        if id.op_gen != gen || id.state != CmState::RouteQuery {
            return;
        }
        if status != 0 {
            self.id_mut(key).state = CmState::AddrResolved;
            self.queue_event(
                key,
                EventKind::RouteError,
                status,
                EventParam::None,
                Vec::new(),
            );
            return;
        }
        self.id_mut(key).state = CmState::RouteResolved;
        self.id_mut(key).path_plt = Some(self.route_plt(key));
        self.queue_event(
            key,
            EventKind::RouteResolved,
            0,
            EventParam::None,
            Vec::new(),
        );
    }
}
