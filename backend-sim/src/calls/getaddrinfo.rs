//! `rdma_getaddrinfo` as librdmacm 44 runs it over glibc's `getaddrinfo` (addrinfo.c:
//! `rdma_getaddrinfo`, `ucma_convert_to_ai`, `ucma_convert_to_rai`), the lookup behind DNS
//! mode of `rdma_resolve_addrinfo`. A pure function of its inputs and of the fabric's names.
//!
//! What it gives, and what decides it:
//! * No node, no service, no hints: EINVAL (`rdma_getaddrinfo`'s first check).
//! * No node, no service, hints: one result copied from the hints (flags, port space, QP type,
//!   destination, source), and no lookup.
//! * Otherwise exactly one result, made from the head of glibc's list (`ucma_getaddrinfo`
//!   converts only the first `struct addrinfo`): its flags are RAI_PASSIVE or nothing (the
//!   other hint flags are not copied), its address is the source of a passive result and the
//!   destination of an active one; an active result takes the hints' source address, if any.
//! * The QP type and port space of the hints become glibc's socket type and protocol (RC and
//!   UC stream, UD datagram; RDMA_PS_TCP TCP, RDMA_PS_UDP and RDMA_PS_IPOIB UDP, RDMA_PS_IB
//!   the protocol of the socket type); what the hints leave open is taken back from glibc's
//!   first answer (a stream over TCP unless UDP or a datagram was asked for). A socket type
//!   and protocol that do not go together fail in glibc (EAI_SOCKTYPE).
//! * RAI_NUMERICHOST with a name fails in glibc (EAI_NONAME); without a node a passive result
//!   is the IPv4 wildcard (glibc's first answer for AI_PASSIVE).
//!
//! Every glibc failure is a negative `EAI_*` code, which the call reports as ENOENT.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::{rai, AddrInfo, AddrInfoHints, Errno, PortSpace, QpType};

/// glibc's socket types, as `ucma_convert_to_ai` derives them from a QP type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SockType {
    Stream,
    Datagram,
}

/// glibc's protocols, as `ucma_convert_to_ai` derives them from a port space.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Tcp,
    Udp,
}

/// Why a lookup failed: the errno and a description for the call's error.
pub(crate) type LookupError = (Errno, String);

/// `rdma_getaddrinfo(node, service, hints)` on the fabric whose host names `host_ip` resolves
/// (the first address of the named host). See the module documentation for the rules.
pub(crate) fn rdma_getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<&AddrInfoHints>,
    host_ip: impl Fn(&str) -> Option<IpAddr>,
) -> Result<AddrInfo, LookupError> {
    if node.is_none() && service.is_none() {
        let Some(h) = hints else {
            return Err((
                Errno::EINVAL,
                "rdma_getaddrinfo needs a node, a service or hints".into(),
            ));
        };
        let ps = h.port_space.unwrap_or(PortSpace(0));
        let qp = h.qp_type.unwrap_or(QpType::Rc);
        return Ok(AddrInfo::new(h.flags, ps, qp, h.src_addr, h.dst_addr));
    }
    let h = hints.copied().unwrap_or_default();
    let (qp, ps) = types(&h)?;
    let port = match service {
        None => 0,
        Some(s) => s
            .parse::<u16>()
            .map_err(|_| (Errno::ENOENT, format!("unknown service {s:?}")))?,
    };
    let passive = h.flags & rai::PASSIVE != 0;
    let ip = match node {
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Some(n) => match n.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) if h.flags & rai::NUMERICHOST != 0 => {
                return Err((
                    Errno::ENOENT,
                    format!("RAI_NUMERICHOST with the name {n:?} (EAI_NONAME)"),
                ))
            }
            Err(_) => host_ip(n).ok_or_else(|| (Errno::ENOENT, format!("unknown host {n:?}")))?,
        },
    };
    let addr = Some(SocketAddr::new(ip, port));
    Ok(if passive {
        AddrInfo::new(rai::PASSIVE, ps, qp, addr, None)
    } else {
        AddrInfo::new(0, ps, qp, h.src_addr, addr)
    })
}

/// The QP type and port space of the result: the hints' own, or taken back from glibc's first
/// answer for the socket type and protocol the hints became.
fn types(h: &AddrInfoHints) -> Result<(QpType, PortSpace), LookupError> {
    let sock = h.qp_type.map(|q| match q {
        QpType::Rc | QpType::Uc => SockType::Stream,
        QpType::Ud => SockType::Datagram,
    });
    let ps = h.port_space.filter(|p| p.0 != 0);
    let proto = match ps {
        Some(PortSpace::TCP) => Some(Protocol::Tcp),
        Some(PortSpace::UDP | PortSpace::IPOIB) => Some(Protocol::Udp),
        Some(PortSpace::IB) => sock.map(|s| match s {
            SockType::Stream => Protocol::Tcp,
            SockType::Datagram => Protocol::Udp,
        }),
        _ => None,
    };
    let sock =
        match (sock, proto) {
            (Some(SockType::Stream), Some(Protocol::Udp))
            | (Some(SockType::Datagram), Some(Protocol::Tcp)) => return Err((
                Errno::ENOENT,
                "the QP type's socket type does not suit the port space's protocol (EAI_SOCKTYPE)"
                    .into(),
            )),
            (Some(s), _) => s,
            (None, Some(Protocol::Udp)) => SockType::Datagram,
            (None, _) => SockType::Stream,
        };
    let qp = h.qp_type.unwrap_or(match sock {
        SockType::Stream => QpType::Rc,
        SockType::Datagram => QpType::Ud,
    });
    let ps = ps.unwrap_or(match sock {
        SockType::Stream => PortSpace::TCP,
        SockType::Datagram => PortSpace::UDP,
    });
    Ok((qp, ps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_names(_: &str) -> Option<IpAddr> {
        None
    }

    #[test]
    fn a_ud_qp_type_alone_gives_the_udp_port_space() {
        let h = AddrInfoHints::new(0).with_qp_type(QpType::Ud);
        let info = rdma_getaddrinfo(Some("10.0.0.1"), Some("7471"), Some(&h), no_names).unwrap();
        assert_eq!(
            (info.port_space, info.qp_type),
            (PortSpace::UDP, QpType::Ud)
        );
    }

    #[test]
    fn nothing_at_all_is_einval_and_hints_alone_are_copied() {
        let e = rdma_getaddrinfo(None, None, None, no_names).unwrap_err();
        assert_eq!(e.0, Errno::EINVAL);
        let h = AddrInfoHints::new(rai::PASSIVE | rai::NUMERICHOST).with_port_space(PortSpace::IB);
        let info = rdma_getaddrinfo(None, None, Some(&h), no_names).unwrap();
        assert_eq!(
            info,
            AddrInfo::new(
                rai::PASSIVE | rai::NUMERICHOST,
                PortSpace::IB,
                QpType::Rc,
                None,
                None
            )
        );
    }

    #[test]
    fn the_hints_source_goes_to_active_results_only() {
        let src: SocketAddr = "10.0.0.2:0".parse().unwrap();
        let h = AddrInfoHints::new(0).with_src_addr(src);
        let info = rdma_getaddrinfo(Some("10.0.0.1"), Some("1"), Some(&h), no_names).unwrap();
        assert_eq!(
            (info.src_addr, info.dst_addr),
            (Some(src), "10.0.0.1:1".parse().ok())
        );
        let h = AddrInfoHints::new(rai::PASSIVE).with_src_addr(src);
        let info = rdma_getaddrinfo(Some("10.0.0.1"), Some("1"), Some(&h), no_names).unwrap();
        assert_eq!(
            (info.src_addr, info.dst_addr),
            ("10.0.0.1:1".parse().ok(), None)
        );
    }

    #[test]
    fn conflicting_socket_type_and_protocol_fail() {
        let h = AddrInfoHints::new(0)
            .with_port_space(PortSpace::TCP)
            .with_qp_type(QpType::Ud);
        let e = rdma_getaddrinfo(Some("10.0.0.1"), None, Some(&h), no_names).unwrap_err();
        assert_eq!(e.0, Errno::ENOENT);
    }
}
