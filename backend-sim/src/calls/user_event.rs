//! `rdma_write_cm_event` (§10.1). Produces USER.

use cmtwin::{Call, CmError, Errno, EventKind, EventParam, IdHandle, Result};

use crate::world::{HostKey, World};

impl World {
    /// `rdma_write_cm_event`: only USER; queued at once on the id's current channel.
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
        self.check_not_torn_down(call, key)?;
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
