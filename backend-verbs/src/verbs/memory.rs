//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`,
//! `ibv_dereg_mr`, and the copies in and out of a region.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use cmtwin::verbs::{AccessFlags, MemoryRegion};
use cmtwin::{Call, IdHandle, MrHandle, PdHandle, Result};

use super::cqs::bad_handle;
use super::objects::{in_use, MrEntry, PdEntry, PdObj};
use super::regions::{keys_for_change, Region};
use crate::ffi::{RawMr, RawPd};
use crate::{c_err, err, keys_exhausted, VerbsBackend};

/// The access bits libibverbs knows here.
const KNOWN_ACCESS: u32 = 0xf;

impl VerbsBackend {
    /// The live PD `h`.
    pub(crate) fn pd_obj(&self, call: Call, h: PdHandle) -> Result<Arc<PdObj>> {
        let reg = self.reg();
        reg.verbs
            .pds
            .get(&h.raw())
            .map(|e| Arc::clone(&e.obj))
            .ok_or_else(|| bad_handle(&reg, call, "PD", h.raw(), h))
    }

    /// The live region `h`.
    fn region(&self, call: Call, h: MrHandle) -> Result<Arc<Region>> {
        let reg = self.reg();
        reg.verbs
            .mrs
            .get(&h.raw())
            .map(|e| Arc::clone(&e.region))
            .ok_or_else(|| bad_handle(&reg, call, "memory region", h.raw(), h))
    }

    pub(crate) fn alloc_pd_impl(&self, id: IdHandle) -> Result<PdHandle> {
        let call = Call::AllocPd;
        let (ctx, local) = self.id_device(call, id)?;
        self.anchor(call, ctx, local)?;
        let raw = RawPd::alloc(ctx).map_err(|e| {
            self.unanchor(ctx);
            c_err(call, e)
        })?;
        let mut reg = self.reg();
        let Ok(key) = reg.issue() else {
            drop(reg);
            let _ = raw.dealloc();
            self.unanchor(ctx);
            return Err(keys_exhausted(call));
        };
        reg.verbs.pds.insert(
            key,
            PdEntry {
                obj: Arc::new(PdObj { raw, ctx }),
                users: 0,
                default: false,
            },
        );
        Ok(PdHandle::from_raw(key))
    }

    pub(crate) fn dealloc_pd_impl(&self, h: PdHandle) -> Result<()> {
        let call = Call::DeallocPd;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.pds.get(&h.raw()) else {
            return Err(bad_handle(&reg, call, "PD", h.raw(), h));
        };
        if e.default {
            return Err(err(
                call,
                libc::EBUSY,
                format!("{h} is the device's PD of this backend (id->pd), kept with it"),
            ));
        }
        if e.users > 0 {
            return Err(err(
                call,
                libc::EBUSY,
                format!("{} regions or QPs still use {h}", e.users),
            ));
        }
        let n = Arc::strong_count(&e.obj) - 1;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let e = reg.verbs.pds.remove(&h.raw()).expect("checked");
        let obj = Arc::try_unwrap(e.obj).unwrap_or_else(|_| unreachable!("last reference"));
        let ctx = obj.ctx;
        obj.raw.dealloc().map_err(|(errno, raw)| {
            let obj = Arc::new(PdObj { raw, ctx });
            reg.verbs.pds.insert(h.raw(), PdEntry { obj, ..e });
            c_err(call, errno)
        })?;
        drop(reg);
        self.unanchor(ctx);
        Ok(())
    }

    pub(crate) fn reg_mr_impl(
        &self,
        h: PdHandle,
        buffer: Vec<u8>,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        let call = Call::RegMr;
        let pd = self.pd_obj(call, h)?;
        if buffer.is_empty() {
            return Err(err(call, libc::EINVAL, "an empty buffer"));
        }
        if access.0 & !KNOWN_ACCESS != 0 {
            return Err(err(
                call,
                libc::EINVAL,
                format!("unknown access bits in {access:?}"),
            ));
        }
        let needs_local_write = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0;
        if access.0 & needs_local_write != 0 && !access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(err(
                call,
                libc::EINVAL,
                "remote write or atomic access needs LOCAL_WRITE",
            ));
        }
        // Registry, then the key table (the order every call takes them in); both held until
        // the region is in both, so that no post sees its keys valid and unrecorded.
        let mut reg = self.reg();
        let Ok(key) = reg.issue() else {
            return Err(keys_exhausted(call));
        };
        let mut keys = keys_for_change();
        let raw = RawMr::register(&pd.raw, buffer.into_boxed_slice(), access.0)
            .map_err(|(errno, _buffer)| c_err(call, errno))?;
        let ctx = pd.ctx.addr();
        let desc = MemoryRegion {
            handle: MrHandle::from_raw(key),
            lkey: raw.lkey(),
            rkey: raw.rkey(),
            addr: raw.addr(),
            length: raw.len(),
            access,
        };
        let region = Arc::new(Region {
            raw,
            ctx,
            busy: AtomicU32::new(0),
            cpu: Mutex::new(()),
        });
        keys.insert((ctx, desc.lkey), Arc::clone(&region));
        reg.verbs.mrs.insert(
            key,
            MrEntry {
                region,
                pd: h.raw(),
            },
        );
        reg.verbs.pds.get_mut(&h.raw()).expect("live PD").users += 1;
        Ok(desc)
    }

    pub(crate) fn dereg_mr_impl(&self, h: MrHandle) -> Result<Vec<u8>> {
        let call = Call::DeregMr;
        let mut reg = self.reg();
        let Some(e) = reg.verbs.mrs.get(&h.raw()) else {
            return Err(bad_handle(&reg, call, "memory region", h.raw(), h));
        };
        let mut keys = keys_for_change();
        let busy = e.region.busy();
        if busy > 0 {
            return Err(err(
                call,
                libc::EBUSY,
                format!(
                    "{busy} posted request(s) whose completion was not polled yet use {h} \
                     (the device may still touch it)"
                ),
            ));
        }
        // The registry's and the key table's references, no other.
        let n = Arc::strong_count(&e.region) - 2;
        if n > 0 {
            return Err(in_use(call, h, n));
        }
        let lkey = e.region.raw.lkey();
        let ctx = e.region.ctx;
        let pd = e.pd;
        let e = reg.verbs.mrs.remove(&h.raw()).expect("checked");
        keys.remove(&(ctx, lkey));
        let region = Arc::try_unwrap(e.region).unwrap_or_else(|_| unreachable!("last reference"));
        match region.raw.dereg() {
            Ok(buffer) => {
                if let Some(p) = reg.verbs.pds.get_mut(&pd) {
                    p.users -= 1;
                }
                Ok(buffer.into_vec())
            }
            Err((errno, raw)) => {
                let region = Arc::new(Region { raw, ..region });
                keys.insert((ctx, lkey), Arc::clone(&region));
                reg.verbs.mrs.insert(h.raw(), MrEntry { region, pd });
                Err(c_err(call, errno))
            }
        }
    }

    pub(crate) fn mr_read_impl(&self, h: MrHandle, offset: usize, out: &mut [u8]) -> Result<()> {
        let call = Call::MrRead;
        let r = self.region(call, h)?;
        r.read(offset, out)
            .ok_or_else(|| out_of_range(call, offset, out.len(), &r))
    }

    pub(crate) fn mr_write_impl(&self, h: MrHandle, offset: usize, data: &[u8]) -> Result<()> {
        let call = Call::MrWrite;
        let r = self.region(call, h)?;
        r.write(offset, data)
            .ok_or_else(|| out_of_range(call, offset, data.len(), &r))
    }
}

/// EINVAL: `len` bytes at `offset` are not inside region `r`.
fn out_of_range(call: Call, offset: usize, len: usize, r: &Region) -> cmtwin::CmError {
    err(
        call,
        libc::EINVAL,
        format!(
            "{len} bytes at offset {offset} exceed the region's {}",
            r.raw.len()
        ),
    )
}
