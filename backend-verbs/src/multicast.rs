//! Multicast: `rdma_join_multicast` and `rdma_leave_multicast`. MULTICAST_JOIN/ERROR events
//! carry the join context (see `events.rs`).

use std::net::SocketAddr;

use cmtwin::{Call, IdHandle, Result};

use crate::{c_err, err, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn join_multicast_impl(
        &self,
        id: IdHandle,
        addr: SocketAddr,
        context: u64,
    ) -> Result<()> {
        let call = Call::JoinMulticast;
        self.on_id(call, id, |o| {
            if !o.raw.has_device() {
                return Err(err(
                    call,
                    libc::EINVAL,
                    format!("{id} is not attached to an RDMA device (bind or resolve first)"),
                ));
            }
            crate::registry::lock(&o.state).sync_override = None;
            o.raw
                .join_multicast(&addr, context)
                .map_err(|e| c_err(call, e))
        })
    }

    pub(crate) fn leave_multicast_impl(&self, id: IdHandle, addr: SocketAddr) -> Result<()> {
        let call = Call::LeaveMulticast;
        self.on_id(call, id, |o| {
            o.raw.leave_multicast(&addr).map_err(|e| c_err(call, e))
        })
    }
}
