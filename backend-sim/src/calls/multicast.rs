//! Multicast: join and leave (§13.3). Produces MULTICAST_JOIN.
//!
//! As librdmacm does, an id keeps one membership per join, even of the same group (the kernel
//! joins again for each): every join gets its own MULTICAST_JOIN, and a leave ends the most
//! recent membership of that address (librdmacm prepends joins to its list and a leave takes
//! the first match).

use std::net::SocketAddr;

use cmtwin::{
    Call, CmError, Errno, EventKind, EventParam, IdHandle, JoinFlags, Result, Transport, UdData,
};

use crate::world::{Action, CmState, HostKey, IdKey, McKey, Membership, World};

/// The QPN multicast events carry.
const MULTICAST_QPN: u32 = 0xFF_FFFF;

impl World {
    /// `rdma_join_multicast` (`call` JoinMulticast) and `rdma_join_multicast_ex` (flags).
    ///
    /// A send-only full member join takes the same checks and gives the same MULTICAST_JOIN
    /// as a full one; below this model the kernel asks the SA for JoinState 0x8 on IB (which
    /// every SA since 2015 grants) and sends no IGMP join on RoCE. librdmacm attaches no QP to
    /// the group: the id's QP does not receive the group's datagrams (it may send to it).
    pub(crate) fn join_multicast(
        &mut self,
        host: HostKey,
        call: Call,
        h: IdHandle,
        addr: SocketAddr,
        flags: JoinFlags,
        context: u64,
    ) -> Result<()> {
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let attached = self.id(key).librdmacm_device().is_some();
        let Some(transport) = self.transport_of(key).filter(|_| attached) else {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "the id is bound to no device",
            ));
        };
        let id = self.id(key);
        if !matches!(id.state, CmState::AddrBound | CmState::AddrResolved) {
            return Err(self.wrong_state(call, key));
        }
        if id.qp_type.is_connected() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("multicast needs a UD id, not {:?}", id.ps),
            ));
        }
        if transport == Transport::Iwarp {
            return Err(CmError::new(
                call,
                Errno::ENOSYS,
                "iWARP ports have no multicast",
            ));
        }
        if transport == Transport::Roce && addr.ip().is_unspecified() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "RoCE cannot join the all-zero group",
            ));
        }
        if transport == Transport::Roce && addr.is_ipv6() {
            // cma_iboe_join_multicast: only IPv4 groups on a port whose default GID type is
            // RoCE v2 (the simulator's RoCE, as rxe's); the kernel's own ENOTSUPP reaches the
            // caller as errno 524.
            return Err(CmError::new(
                call,
                Errno::ENOTSUPP,
                "an IPv6 group on a RoCE v2 port",
            ));
        }
        let dev = id.device.expect("checked");
        // On RoCE, cma_iboe_join_multicast zeroes the member record the handle is made from
        // and never reads the id's TOS: traffic class, flow label and SL 0; an IPv4 group on
        // a RoCE v2 port gets hop limit 64 (IPV6_DEFAULT_HOPLIMIT), as ah_attr_to gives.
        let ud = UdData {
            ah_attr: self.ah_attr_to(dev, addr.ip()),
            qp_num: MULTICAST_QPN,
            qkey: id.qkey,
        };
        let mc = self.fresh_key();
        let attached = flags != JoinFlags::SendOnlyFullMember;
        self.id_mut(key).multicast_mut().insert(
            mc,
            Membership {
                addr,
                context,
                attached,
                lost: false,
            },
        );
        let delay = if transport == Transport::InfiniBand {
            self.cfg.sa_latency
        } else {
            Default::default()
        };
        let param = EventParam::Multicast { ud, context };
        self.after(
            delay,
            Action::IdEvent {
                id: key,
                gen: None,
                kind: EventKind::MulticastJoin,
                status: 0,
                param,
                membership: Some(mc),
            },
        );
        Ok(())
    }

    /// The id's most recent membership of `addr`.
    fn latest_membership(&self, key: IdKey, addr: SocketAddr) -> Option<McKey> {
        self.id(key)
            .multicast()
            .iter()
            .rev()
            .find(|(_, m)| m.addr == addr)
            .map(|(mc, _)| *mc)
    }

    /// Ends membership `mc`: it and its unfetched events are gone.
    fn drop_membership(&mut self, key: IdKey, mc: McKey) {
        self.id_mut(key).multicast_mut().remove(&mc);
        self.discard_queued(key, |q| q.membership == Some(mc));
    }

    /// `rdma_leave_multicast`: librdmacm first takes the membership off its list (EADDRNOTAVAIL
    /// if there is none), then asks the kernel, which refuses a removed id (ENXIO) after the
    /// membership is already gone.
    pub(crate) fn leave_multicast(
        &mut self,
        host: HostKey,
        h: IdHandle,
        addr: SocketAddr,
    ) -> Result<()> {
        let call = Call::LeaveMulticast;
        let key = self.id_key(host, call, h)?;
        let Some(mc) = self.latest_membership(key, addr) else {
            return Err(CmError::new(
                call,
                Errno::EADDRNOTAVAIL,
                format!("{addr} is not joined"),
            ));
        };
        if self.id(key).state == CmState::DeviceRemoval {
            self.drop_membership(key, mc);
            return self.check_not_removed(call, key);
        }
        let unacked: Vec<String> = self
            .kernel
            .outstanding
            .iter()
            .filter(|(_, o)| o.owner == key && o.membership == Some(mc))
            .map(|(t, o)| format!("{} (ticket {t})", o.kind))
            .collect();
        if !unacked.is_empty() {
            return Err(CmError::new(
                call,
                Errno::EBUSY,
                format!(
                    "unacknowledged events of the membership: {}",
                    unacked.join(", ")
                ),
            ));
        }
        self.drop_membership(key, mc);
        Ok(())
    }
}
