//! `rdma_write_cm_event` (§10.1). Produces USER.

use cmtwin::{Call, CmError, Errno, EventKind, EventParam, IdHandle, Result};

use crate::config::KernelProfile;
use crate::world::{HostKey, World};

impl World {
    /// `rdma_write_cm_event`: only USER; queued at once on the id's current channel. On the
    /// Linux 6.1 profile a synchronous id refuses it (EOPNOTSUPP), as cmtwin-verbs must there.
    pub(crate) fn write_cm_event(
        &mut self,
        host: HostKey,
        h: IdHandle,
        kind: EventKind,
        status: i32,
        arg: u64,
    ) -> Result<()> {
        let call = Call::WriteCmEvent;
        let key = self.id_key(host, call, h)?;
        if kind != EventKind::User {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("only USER events can be written, not {kind}"),
            ));
        }
        self.check_not_removed(call, key)?;
        if self.id(key).sync && self.cfg.kernel != KernelProfile::Mainline {
            // Without the kernel's WRITE_CM_EVENT (before 6.18) nothing can reach librdmacm's
            // private channel of a synchronous id; cmtwin-verbs refuses the same way.
            return Err(CmError::new(
                call,
                Errno::EOPNOTSUPP,
                "USER events on synchronous ids need the kernel's WRITE_CM_EVENT (Linux 6.18)",
            ));
        }
        self.queue_event(
            key,
            EventKind::User,
            status,
            EventParam::User(arg),
            Vec::new(),
        );
        Ok(())
    }
}
