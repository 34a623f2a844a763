//! Address handles: `ibv_create_ah` and `ibv_create_ah_from_wc` in a PD of the backend, and
//! `ibv_destroy_ah`. A handle
//! counts as a user of its PD (which cannot be deallocated meanwhile); a posted send does not
//! hold its handle (the device copied the address vector when it took the request).

use std::sync::Arc;

use cmtwin::verbs::{WcOpcode, WcStatus, WorkCompletion, GRH_LEN};
use cmtwin::{AhAttr, AhHandle, Call, PdHandle, Result};

use super::cqs::bad_handle;
use super::objects::{in_use, AhEntry, AhObj};
use crate::ffi::{RawAh, RawCtx};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

impl VerbsBackend {
    /// The live address handle `h` and the key of its PD.
    pub(crate) fn ah_obj(&self, call: Call, h: AhHandle) -> Result<(Arc<AhObj>, u64)> {
        let reg = self.reg();
        reg.verbs
            .ahs
            .get(&h.raw())
            .map(|e| (Arc::clone(&e.obj), e.pd))
            .ok_or_else(|| bad_handle(&reg, call, "address handle", h.raw(), h))
    }

    pub(crate) fn create_ah_impl(&self, h: PdHandle, attr: &AhAttr) -> Result<AhHandle> {
        let call = Call::CreateAh;
        let pd = self.pd_obj(call, h)?;
        let port = if attr.port_num == 0 { 1 } else { attr.port_num };
        let raw = RawAh::create(&pd.raw, attr, port).map_err(|e| c_err(call, e))?;
        self.register_ah(call, h, pd.ctx, raw)
    }

    pub(crate) fn create_ah_from_wc_impl(
        &self,
        h: PdHandle,
        wc: &WorkCompletion,
        grh: &[u8; GRH_LEN as usize],
    ) -> Result<AhHandle> {
        let call = Call::CreateAhFromWc;
        if wc.status != WcStatus::SUCCESS || wc.opcode != WcOpcode::Recv {
            let why = "not a successful receive";
            return Err(err(call, libc::EINVAL, why));
        }
        let pd = self.pd_obj(call, h)?;
        let raw = RawAh::from_wc(&pd.raw, wc, grh, 1).map_err(|e| c_err(call, e))?;
        self.register_ah(call, h, pd.ctx, raw)
    }

    /// Records `raw`, made in PD `h` on `ctx`, as a new address handle.
    fn register_ah(&self, call: Call, h: PdHandle, ctx: RawCtx, raw: RawAh) -> Result<AhHandle> {
        let mut reg = self.reg();
        let Some(pd_entry) = reg.verbs.pds.get_mut(&h.raw()) else {
            drop(reg);
            let _ = raw.destroy();
            return Err(c_err(call, libc::EBADF));
        };
        pd_entry.users += 1;
        let Ok(key) = reg.issue() else {
            if let Some(p) = reg.verbs.pds.get_mut(&h.raw()) {
                p.users -= 1;
            }
            drop(reg);
            let _ = raw.destroy();
            return Err(keys_exhausted(call));
        };
        let obj = Arc::new(AhObj { raw, ctx });
        reg.verbs.ahs.insert(key, AhEntry { obj, pd: h.raw() });
        Ok(AhHandle::from_raw(key))
    }

    pub(crate) fn destroy_ah_impl(&self, h: AhHandle) -> Result<()> {
        let call = Call::DestroyAh;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.ahs.get(&h.raw()) else {
            return Err(bad_handle(&reg, call, "address handle", h.raw(), h));
        };
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let e = reg.verbs.ahs.remove(&h.raw()).expect("checked");
        let obj = Arc::try_unwrap(e.obj).unwrap_or_else(|_| unreachable!("last reference"));
        let ctx = obj.ctx;
        match obj.raw.destroy() {
            Ok(()) => {
                if let Some(p) = reg.verbs.pds.get_mut(&e.pd) {
                    p.users -= 1;
                }
                Ok(())
            }
            Err((errno, raw)) => {
                let obj = Arc::new(AhObj { raw, ctx });
                reg.verbs.ahs.insert(h.raw(), AhEntry { obj, pd: e.pd });
                Err(c_err(call, errno))
            }
        }
    }
}
