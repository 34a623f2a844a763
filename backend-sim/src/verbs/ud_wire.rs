//! Datagrams of UD QPs on the data wire (`wire.rs`: the same latency, jitter, random and
//! targeted losses and delays, link order, and nothing to or from a removed device), and how
//! they are addressed and taken:
//!
//! * The address handle's destination GID names the receiver: the host whose device holds the
//!   address, and there QP `remote_qpn`; a handle without destination GID and not global
//!   (InfiniBand's LID-routed handle, as `ibv_create_ah_from_wc` makes one from a receive
//!   without GRH) names it by its LID instead (`topology::ib_lid`); or, for a multicast
//!   group's GID with `remote_qpn`
//!   0xFFFFFF, every UD QP whose id has joined the group, not send-only (the CM's
//!   memberships, one copy each, lost or delayed apart, as a switch replicates). The
//!   sender's own QP gets a copy only if its id joined too, not send-only: multicast
//!   loopback, as hardware does unless the QP was made with
//!   `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` (then it gets none), and as rxe does for a QP
//!   attached to the group.
//! * A copy for a QP of the sender's own host (its own loopback copy, or a local address)
//!   does not cross the wire: it is taken at once, before the send's completion, with no
//!   latency, loss or delay of the wire.
//! * The receiver drops, silently as hardware does, a datagram for a QP that does not exist
//!   or is not UD, one whose qkey is not the QP's, and one that finds the QP not ready or
//!   without a posted receive; the drop is traced.
//! * The global route header placed before the payload: on RoCE over IPv4 what rxe places
//!   (20 zero bytes, then the IPv4 header: version, length, TTL 64, UDP, the addresses; no
//!   checksum), else an InfiniBand GRH (version 6, payload length, next header 0x1B, hop
//!   limit 64, source and destination GIDs). InfiniBand datagrams carry one only when the
//!   sender's address handle is global.

use std::net::{IpAddr, Ipv6Addr};

use cmtwin::verbs::{GRH_LEN, MULTICAST_QPN};
use cmtwin::Transport;

use super::{Datagram, ObjKey, VerbsAction};
use crate::trace::TraceKind;
use crate::world::{Action, HostKey, World};

/// BTH, DETH and ICRC bytes around a UD payload (what the headers' lengths count).
const UD_TRANSPORT_OVERHEAD: usize = 12 + 8 + 4;

/// The IP address a GID carries (IPv4-mapped or IPv6).
pub(crate) fn gid_ip(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The GID of an IP address.
fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl World {
    /// Sends datagram `d` of UD QP `q` to every QP its address reaches.
    pub(crate) fn send_datagram(&mut self, q: ObjKey, d: Datagram) {
        let qp = &self.verbs.qps[&q];
        let (host, dev, from) = (qp.host, qp.dev, (qp.host, qp.qpn));
        let no_loopback = qp.machine.blocks_self_loopback();
        if !self.topo.devices[dev].present {
            return;
        }
        let local_ip = qp.id.and_then(|i| self.id(i).local).map(|a| a.ip());
        let Some(source_ip) = local_ip.or_else(|| self.topo.devices[dev].ips.first().copied())
        else {
            return;
        };
        let sgid = ip_gid(source_ip);
        let to_ip = gid_ip(&d.target.dgid);
        let by_lid = !d.target.global && d.target.dgid == [0; 16];
        let receivers = if by_lid {
            match self.topo.owner_of_lid(d.target.dlid) {
                Some((to_host, _)) => vec![(to_host, d.target.remote_qpn)],
                None => {
                    let to = (host, d.target.remote_qpn);
                    let why = "no InfiniBand port has the destination LID";
                    self.trace_packet(host, TraceKind::Loss, from, to, &d, why);
                    return;
                }
            }
        } else if to_ip.is_multicast() {
            if d.target.remote_qpn != MULTICAST_QPN {
                let to = (host, d.target.remote_qpn);
                let why = "a group's datagrams go to QPN 0xffffff";
                self.trace_packet(host, TraceKind::Loss, from, to, &d, why);
                return;
            }
            let mut members = self.group_members(to_ip);
            if no_loopback {
                members.retain(|&m| m != from);
            }
            members
        } else {
            match self.topo.owner_of_ip(to_ip) {
                Some((to_host, _)) => vec![(to_host, d.target.remote_qpn)],
                None => {
                    let to = (host, d.target.remote_qpn);
                    let why = "no host has the destination address";
                    self.trace_packet(host, TraceKind::Loss, from, to, &d, why);
                    return;
                }
            }
        };
        for to in receivers {
            if to.0 == host {
                // A copy for a QP of the sender's own host never crosses the wire: it is
                // taken before the send completes (rxe_loopback for a local address; the IP
                // stack's multicast loopback for a group, measured on rxe-6.1: a receive
                // posted right after the send's completion never catches the sender's own
                // copy, one posted before always does).
                self.trace_packet(host, TraceKind::Send, from, to, &d, "");
                self.deliver_datagram(from, to, sgid, d.clone());
                continue;
            }
            let Some(at) = self.wire_arrival(from, to, &d) else {
                continue;
            };
            let action = VerbsAction::DeliverDatagram {
                from,
                to,
                sgid,
                datagram: d.clone(),
            };
            self.timeline.schedule(at, Action::Verbs(action));
        }
    }

    /// The UD QPs whose ids joined group `group`, in the order they were made.
    fn group_members(&self, group: IpAddr) -> Vec<(HostKey, u32)> {
        let joined = |id| {
            let mut memberships = self.id(id).multicast().values();
            memberships.any(|m| m.attached && !m.lost && m.addr.ip() == group)
        };
        self.verbs
            .qps
            .iter()
            .filter(|(_, qp)| qp.machine.is_ud() && qp.id.is_some_and(joined))
            .map(|(_, qp)| (qp.host, qp.qpn))
            .collect()
    }

    /// Datagram `d` from QP `from` (GID `sgid`) arrives at QP `to`.
    pub(crate) fn deliver_datagram(
        &mut self,
        from: (HostKey, u32),
        to: (HostKey, u32),
        sgid: [u8; 16],
        d: Datagram,
    ) {
        let Some(&q) = self.verbs.qp_by_num.get(&to) else {
            self.trace_packet(to.0, TraceKind::Drop, from, to, &d, "no such QP");
            return;
        };
        let qp = self.verbs.qps.get_mut(&q).expect("indexed QP");
        let dev = qp.dev;
        let srq_of_qp = self.verbs.srq_of_qp.get(&q);
        let srq_posted = srq_of_qp.map(|s| self.verbs.srqs[s].rq.len());
        let why = match qp.machine.as_ud() {
            _ if !self.topo.devices[dev].present => "device removed",
            None => "not a UD QP",
            Some(m) if m.qkey() != d.target.remote_qkey => "qkey mismatch",
            Some(m) => m.refusal(srq_posted, d.data.len()).unwrap_or(""),
        };
        if !why.is_empty() {
            self.trace_packet(to.0, TraceKind::Drop, from, to, &d, why);
            return;
        }
        self.trace_packet(to.0, TraceKind::Recv, from, to, &d, "");
        let transport = self.topo.devices[dev].transport;
        let grh = (transport == Transport::Roce || d.target.global)
            .then(|| route_header(transport, &sgid, &d));
        let slid = match transport {
            Transport::InfiniBand => crate::topology::ib_lid(gid_ip(&sgid)),
            _ => 0,
        };
        let taken = self.drive_qp(q, |m, mem, out| {
            let ud = m.as_ud().expect("checked above");
            ud.on_datagram((from.1, slid), &d, grh, mem, out)
        });
        debug_assert!(taken.is_ok(), "refusal() said it would be taken");
    }
}

/// The global route header datagram `d` from `sgid` carries (see the module's documentation).
fn route_header(transport: Transport, sgid: &[u8; 16], d: &Datagram) -> [u8; GRH_LEN as usize] {
    let mut h = [0u8; GRH_LEN as usize];
    let (src, dst) = (gid_ip(sgid), gid_ip(&d.target.dgid));
    match (transport, src, dst) {
        (Transport::Roce, IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = &mut h[20..];
            let total = 20 + 8 + UD_TRANSPORT_OVERHEAD + d.data.len();
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&(total.min(0xffff) as u16).to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = 17; // UDP
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
        }
        _ => {
            let payload = UD_TRANSPORT_OVERHEAD + d.data.len();
            h[0] = 0x60;
            h[4..6].copy_from_slice(&(payload.min(0xffff) as u16).to_be_bytes());
            h[6] = 0x1b;
            h[7] = 64;
            h[8..24].copy_from_slice(sgid);
            h[24..40].copy_from_slice(&d.target.dgid);
        }
    }
    h
}
