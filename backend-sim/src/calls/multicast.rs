//! Multicast: join and leave (§13.3). Produces MULTICAST_JOIN.

use std::net::SocketAddr;

use cmtwin::{Call, CmError, Errno, EventKind, EventParam, IdHandle, Result, Transport, UdData};

use crate::world::{Action, CmState, HostKey, World};

/// The QPN multicast events carry.
const MULTICAST_QPN: u32 = 0xFF_FFFF;

impl World {
    /// `rdma_join_multicast`.
    pub(crate) fn join_multicast(
        &mut self,
        host: HostKey,
        h: IdHandle,
        addr: SocketAddr,
        context: u64,
    ) -> Result<()> {
        let call = Call::JoinMulticast;
        let key = self.id_key(host, call, h)?;
        self.check_not_removed(call, key)?;
        let Some(transport) = self.transport_of(key) else {
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
        let dev = id.device.expect("checked");
        let ud = UdData {
            ah_attr: self.ah_attr_to(dev, addr.ip()),
            qp_num: MULTICAST_QPN,
            qkey: id.qkey,
        };
        self.id_mut(key).multicast.insert(addr, context);
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
                mc_addr: Some(addr),
            },
        );
        Ok(())
    }

    /// `rdma_leave_multicast`.
    pub(crate) fn leave_multicast(
        &mut self,
        host: HostKey,
        h: IdHandle,
        addr: SocketAddr,
    ) -> Result<()> {
        let call = Call::LeaveMulticast;
        let key = self.id_key(host, call, h)?;
        self.check_not_torn_down(call, key)?;
        if !self.id(key).multicast.contains_key(&addr) {
            return Err(CmError::new(
                call,
                Errno::EADDRNOTAVAIL,
                format!("{addr} was never joined"),
            ));
        }
        let unacked: Vec<String> = self
            .outstanding
            .iter()
            .filter(|(_, o)| o.owner == key && o.mc_addr == Some(addr))
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
        self.id_mut(key).multicast.remove(&addr);
        self.discard_queued(key, |q| q.mc_addr == Some(addr));
        Ok(())
    }
}
