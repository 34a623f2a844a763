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
//! * RAI_NUMERICHOST with a name fails in glibc (EAI_NONAME). Without a node, glibc answers
//!   the wildcards for AI_PASSIVE, IPv4 first (`0.0.0.0`, then `::`), and the loopback
//!   addresses otherwise, IPv6 first (`::1`, then `127.0.0.1`): a passive result is the IPv4
//!   wildcard, an active one goes to `[::1]` (measured with glibc 2.36 on the CI host, with
//!   and without AI_ADDRCONFIG, which NULL hints imply: the host has IPv6 addresses).
//! * Numbers are read as glibc reads them (measured with glibc 2.36): a numeric host in any
//!   form `inet_aton` takes (`10.1`, `167772161`, `0x0a.0.0.1`, octal `010.0.0.1` = 8.0.0.1),
//!   nothing around it; a service through `strtoul` (white space and a sign before the digits)
//!   kept in an `int` and sent as its low 16 bits (`65536` is port 0, `70000` 4464; one
//!   negative as an `int`, such as `-1`, is looked up as a name); an empty service is none
//!   (port 0). Service names (`/etc/services`) are not modelled: ENOENT.
//!
//! Every glibc failure is a negative `EAI_*` code, which the call reports as ENOENT.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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
        None | Some("") => 0,
        Some(s) => {
            numeric_port(s).ok_or_else(|| (Errno::ENOENT, format!("unknown service {s:?}")))?
        }
    };
    let passive = h.flags & rai::PASSIVE != 0;
    let ip = match node {
        None if passive => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V6(Ipv6Addr::LOCALHOST),
        Some(n) => match numeric_host(n) {
            Some(ip) => ip,
            None if h.flags & rai::NUMERICHOST != 0 => {
                return Err((
                    Errno::ENOENT,
                    format!("RAI_NUMERICHOST with the name {n:?} (EAI_NONAME)"),
                ))
            }
            None => host_ip(n).ok_or_else(|| (Errno::ENOENT, format!("unknown host {n:?}")))?,
        },
    };
    let addr = Some(SocketAddr::new(ip, port));
    Ok(if passive {
        AddrInfo::new(rai::PASSIVE, ps, qp, addr, None)
    } else {
        AddrInfo::new(0, ps, qp, h.src_addr, addr)
    })
}

/// The port glibc's `getaddrinfo` makes of a numeric service: `strtoul` in base 10 over the
/// whole string (white space and a sign may come first; a value beyond 64 bits is
/// `ULONG_MAX`), kept in an `int`, then `htons` of it: its low 16 bits. `None` where glibc
/// looks the service up by name: not a number, or negative as an `int`.
fn numeric_port(service: &str) -> Option<u16> {
    let rest = service.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match rest.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, rest.strip_prefix('+').unwrap_or(rest)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let parsed = digits.bytes().try_fold(0u64, |v, d| {
        v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    let value = match parsed {
        None => u64::MAX,
        Some(v) if negative => v.wrapping_neg(),
        Some(v) => v,
    };
    // The int `gaih_service.num`: the low 32 bits.
    let num = value as u32 as i32;
    (num >= 0).then_some(num as u16)
}

/// A numeric host as glibc's `getaddrinfo` reads it: IPv4 in any form `inet_aton` takes
/// (glibc's `__inet_aton_exact`), else IPv6 (`inet_pton`).
fn numeric_host(node: &str) -> Option<IpAddr> {
    inet_aton(node)
        .map(IpAddr::V4)
        .or_else(|| node.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6))
}

/// `inet_aton` with nothing after the address: one to four parts separated by dots, each
/// decimal, octal (after a 0) or hexadecimal (after 0x), every part but the last one byte,
/// the last filling the bytes left (`10.1` is 10.0.0.1, `167772161` too).
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let values = parts
        .iter()
        .map(|p| c_number(p))
        .collect::<Option<Vec<u32>>>()?;
    let (&last, head) = values.split_last()?;
    if head.iter().any(|&v| v > 0xff) {
        return None;
    }
    let room = 32 - 8 * head.len() as u32;
    if room < 32 && last >> room != 0 {
        return None;
    }
    let word = (head.iter().enumerate()).fold(last, |w, (i, &v)| w | v << (24 - 8 * i));
    Some(Ipv4Addr::from(word))
}

/// One part of an `inet_aton` address: `strtoul` in base 0 from a digit, over the whole
/// part, at most 32 bits.
fn c_number(part: &str) -> Option<u32> {
    let (digits, radix) = match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
        None => (part, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
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
    fn without_a_node_passive_is_the_ipv4_wildcard_and_active_the_ipv6_loopback() {
        let passive = AddrInfoHints::new(rai::PASSIVE);
        let info = rdma_getaddrinfo(None, Some("7471"), Some(&passive), no_names).unwrap();
        assert_eq!(
            (info.src_addr, info.dst_addr),
            ("0.0.0.0:7471".parse().ok(), None)
        );
        for hints in [Some(AddrInfoHints::new(0)), None] {
            let info = rdma_getaddrinfo(None, Some("7471"), hints.as_ref(), no_names).unwrap();
            assert_eq!(
                (info.src_addr, info.dst_addr),
                (None, "[::1]:7471".parse().ok())
            );
        }
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

    /// What glibc 2.36 answered (Python's `socket.getaddrinfo` on the project's host).
    #[test]
    fn numbers_are_read_as_glibc_reads_them() {
        let ports = [
            ("65536", Some(0)),
            ("70000", Some(4464)),
            ("4294967296", Some(0)),
            ("4294967297", Some(1)),
            (" 80", Some(80)),
            ("+80", Some(80)),
            ("-1", None),
            ("-65535", None),
            ("99999999999999999999999", None),
            ("80 ", None),
            ("0x50", None),
        ];
        for (service, want) in ports {
            assert_eq!(numeric_port(service), want, "{service:?}");
        }
        let hosts = [
            ("167772161", Some("10.0.0.1")),
            ("10.1", Some("10.0.0.1")),
            ("10.0.1", Some("10.0.0.1")),
            ("0x0a.0.0.1", Some("10.0.0.1")),
            ("010.0.0.1", Some("8.0.0.1")),
            ("10.0.0.1 ", None),
            (" 10.0.0.1", None),
            ("10.0.0.256", None),
            ("08.0.0.1", None),
            ("0x", None),
            ("10..1", None),
            ("::1", Some("::1")),
        ];
        for (node, want) in hosts {
            let want = want.map(|w| w.parse::<IpAddr>().unwrap());
            assert_eq!(numeric_host(node), want, "{node:?}");
        }
        let info = rdma_getaddrinfo(Some("10.0.0.1"), Some(""), None, no_names).unwrap();
        assert_eq!(info.dst_addr, "10.0.0.1:0".parse().ok());
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
