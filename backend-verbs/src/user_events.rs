//! `rdma_write_cm_event`: USER events, through librdmacm when it can, else through the
//! backend's own per-channel queue.
//!
//! The symbol exists only in rdma-core v60+ and the kernel command only in Linux 6.18+, so it is
//! looked up at run time (one build works everywhere). When it is absent, or the kernel refuses
//! it with EINVAL (too old), the event is appended to the channel's injected queue and its
//! eventfd is signalled, which wakes a thread blocked in `get_cm_event` on that channel.

use cmtwin::{Call, EventKind, IdHandle, PortSpace, Result};

use crate::events::user_event;
use crate::registry::{lock, Injected};
use crate::{c_err, err, VerbsBackend};

impl VerbsBackend {
    pub(crate) fn write_cm_event_impl(
        &self,
        id: IdHandle,
        kind: EventKind,
        status: i32,
        arg: u64,
    ) -> Result<()> {
        let call = Call::WriteCmEvent;
        // No call lock: writing an event must be possible while another thread waits.
        let obj = self.id_obj(call, id)?;
        if kind != EventKind::User {
            return Err(err(
                call,
                libc::EINVAL,
                format!("only RDMA_CM_EVENT_USER can be written, not {kind}"),
            ));
        }
        let native = {
            let _switch = lock(&obj.channel_switch);
            obj.raw.write_cm_event(kind.as_raw(), status, arg)
        };
        match native {
            Some(Ok(())) => return Ok(()),
            // EINVAL for USER means the kernel lacks the command (< 6.18): emulate.
            Some(Err(libc::EINVAL)) | None => {}
            Some(Err(e)) => return Err(c_err(call, e)),
        }
        let (channel, unaccepted) = {
            let st = lock(&obj.state);
            (st.channel.clone(), st.unaccepted)
        };
        if unaccepted {
            // As the kernel does (uid 0, §10.1): the write succeeds, the event is never seen.
            return Ok(());
        }
        let Some(channel) = channel else {
            return Err(err(
                call,
                libc::EOPNOTSUPP,
                format!(
                    "{id} is synchronous and this librdmacm/kernel cannot queue USER events \
                     (needs rdma-core v60 and Linux 6.18); migrate it to a channel first"
                ),
            ));
        };
        channel.inject(Injected {
            id,
            info: user_event(id, PortSpace(obj.raw.port_space()), status, arg),
        });
        Ok(())
    }
}
