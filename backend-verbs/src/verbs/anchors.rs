//! Device anchors: what keeps librdmacm from closing a device context while the backend's
//! PDs, CQs and completion channels live on it.
//!
//! librdmacm opens each device once and closes the context of a *removed* device when no id
//! uses it any more (at its next device-list refresh, which `destroy_id` triggers after a
//! DEVICE_REMOVAL). Objects on the context would then dangle. So the first PD, CQ or channel
//! the backend makes on a context comes with an anchor: a synchronous id of the backend's own,
//! bound to the address of the id the object was made through, which holds librdmacm's
//! reference to the device. The anchor goes with the last such object (and the device list
//! is refreshed then, so that a removed device can finish going).

use std::net::SocketAddr;

use cmtwin::{Call, PortSpace, Result};

use crate::ffi::{RawCtx, RawId};
use crate::{c_err, err, VerbsBackend};

/// An anchor of one context and how many objects rely on it.
pub(crate) struct Anchor {
    id: RawId,
    users: usize,
}

impl VerbsBackend {
    /// Counts one more object on `ctx`, making its anchor (bound to `local`) if it has none.
    pub(crate) fn anchor(&self, call: Call, ctx: RawCtx, local: Option<SocketAddr>) -> Result<()> {
        if let Some(a) = self.reg().verbs.anchors.get_mut(&ctx.addr()) {
            a.users += 1;
            return Ok(());
        }
        let local = local.ok_or_else(|| {
            err(
                call,
                libc::EINVAL,
                "the id has a device but no local address",
            )
        })?;
        let id = RawId::create(None, 0, PortSpace::TCP.0).map_err(|e| c_err(call, e))?;
        let bind = SocketAddr::new(local.ip(), 0);
        if let Err(e) = id.bind_addr(&bind) {
            let _ = id.destroy();
            return Err(c_err(call, e));
        }
        if id.ctx() != Some(ctx) {
            let _ = id.destroy();
            return Err(err(
                call,
                libc::ENXIO,
                "the id's address is on another device now",
            ));
        }
        let mut reg = self.reg();
        match reg.verbs.anchors.get_mut(&ctx.addr()) {
            // Another thread anchored it meanwhile.
            Some(a) => {
                a.users += 1;
                drop(reg);
                let _ = id.destroy();
            }
            None => {
                reg.verbs
                    .anchors
                    .insert(ctx.addr(), Anchor { id, users: 1 });
            }
        }
        Ok(())
    }

    /// One object less on `ctx`: its anchor goes with the last.
    pub(crate) fn unanchor(&self, ctx: RawCtx) {
        let gone = {
            let mut reg = self.reg();
            let last = reg
                .verbs
                .anchors
                .get_mut(&ctx.addr())
                .map(|a| {
                    a.users -= 1;
                    a.users == 0
                })
                .unwrap_or(false);
            if last {
                reg.verbs.anchors.remove(&ctx.addr())
            } else {
                None
            }
        };
        if let Some(a) = gone {
            release(a);
        }
    }
}

/// Destroys an anchor and lets librdmacm close its device if it was removed.
pub(crate) fn release(a: Anchor) {
    let _ = a.id.destroy();
    crate::ffi::refresh_device_list();
}
