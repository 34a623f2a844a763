//! Multicast: `rdma_join_multicast`, `rdma_join_multicast_ex` and `rdma_leave_multicast`. MULTICAST_JOIN/ERROR events
//! carry the join context (see `events.rs`).

use std::net::SocketAddr;

use cmtwin::{Call, IdHandle, JoinFlags, Result};

use crate::{c_err, err, VerbsBackend};

impl VerbsBackend {
    /// `rdma_join_multicast` (`flags` `None`) or `rdma_join_multicast_ex` with `flags`.
    pub(crate) fn join_multicast_impl(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        flags: Option<JoinFlags>,
        context: u64,
    ) -> Result<()> {
        let call = match flags {
            None => Call::JoinMulticast,
            Some(_) => Call::JoinMulticastEx,
        };
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is not attached to an RDMA device (bind or resolve first)"),
                ));
            }
            crate::registry::lock(&o.state).sync_override = None;
            match flags {
                None => o.raw.join_multicast(&addr, context),
                Some(f) => o.raw.join_multicast_ex(&addr, f.as_raw(), context),
            }
            .map_err(|e| c_err(call, e))?;
            crate::registry::lock(&o.state).groups.push(addr);
            Ok(())
        })
    }

    pub(crate) fn leave_multicast_impl(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        let call = Call::LeaveMulticast;
        self.on_id(call, id, |o| {
            o.raw.leave_multicast(&addr).map_err(|e| c_err(call, e))?;
            let mut state = crate::registry::lock(&o.state);
            if let Some(i) = state.groups.iter().position(|g| *g == addr) {
                state.groups.remove(i);
            }
            Ok(())
        })
    }
}
