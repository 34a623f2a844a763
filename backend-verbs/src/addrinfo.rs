//! `rdma_resolve_addrinfo` and `rdma_query_addrinfo`.
//!
//! With rdma-core v60+ on Linux 6.18+ the real calls are used (found at run time). Otherwise
//! DNS mode is emulated as librdmacm does it: `rdma_getaddrinfo` runs synchronously in the
//! calling thread; a failure is returned at once (no event, as in librdmacm), a success is
//! stored for `query_addrinfo` and announced by an ADDRINFO_RESOLVED event queued on the id's
//! channel through the backend's injected-event path (or made the current event of a
//! synchronous id). SA mode needs the real call (and InfiniBand): EOPNOTSUPP otherwise.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

use cmtwin::{rai, AddrInfo, AddrInfoHints, Call, EventKind, IdHandle, PortSpace, QpType, Result};

use crate::events::addrinfo_event;
use crate::ffi::{self, AddrInfoHintsIn, AddrInfoOut, QPT_RC, QPT_UC, QPT_UD};
use crate::registry::{lock, AddrinfoState, Injected};
use crate::{c_err, err, VerbsBackend};

/// Set once the kernel refused the real `rdma_resolve_addrinfo` (too old): later calls go
/// straight to the emulation (librdmacm may keep the id marked as resolving after such a
/// failure, so calling it again could report a stale EBUSY).
static NATIVE_REFUSED: AtomicBool = AtomicBool::new(false);

fn cstring(call: Call, s: Option<&str>) -> Result<Option<CString>> {
    s.map(|s| CString::new(s).map_err(|_| err(call, libc::EINVAL, "a NUL byte inside a string")))
        .transpose()
}

fn convert(list: Vec<AddrInfoOut>) -> Vec<AddrInfo> {
    list.into_iter()
        .map(|a| AddrInfo {
            flags: a.flags as u32,
            port_space: PortSpace(a.port_space as u32),
            qp_type: match a.qp_type as u32 {
                QPT_UD => QpType::Ud,
                QPT_UC => QpType::Uc,
                _ => QpType::Rc,
            },
            src_addr: a.src,
            dst_addr: a.dst,
        })
        .collect()
}

impl VerbsBackend {
    pub(crate) fn resolve_addrinfo_impl(
        &self,
        id: IdHandle,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<()> {
        let call = Call::ResolveAddrinfo;
        let node = cstring(call, node)?;
        let service = cstring(call, service)?;
        let flags = hints.map_or(0, |h| h.flags);
        if flags & rai::SA != 0 && flags & rai::DNS != 0 {
            return Err(err(
                call,
                libc::EOPNOTSUPP,
                "RAI_SA and RAI_DNS exclude each other",
            ));
        }
        let hints_in = hints.map(|h| AddrInfoHintsIn {
            flags: h.flags as i32,
            port_space: h.port_space.map_or(0, |p| p.0 as i32),
            qp_type: h.qp_type.map_or(0, |q| match q {
                QpType::Rc => QPT_RC as i32,
                QpType::Uc => QPT_UC as i32,
                QpType::Ud => QPT_UD as i32,
            }),
        });
        self.on_id(call, id, |o| {
            if !matches!(lock(&o.state).addrinfo, AddrinfoState::Idle) {
                return Err(err(
                    call,
                    libc::EBUSY,
                    format!("{id} has a resolution pending or not yet queried"),
                ));
            }
            lock(&o.state).sync_override = None;
            let native = if NATIVE_REFUSED.load(Ordering::Relaxed) {
                None
            } else {
                o.raw.resolve_addrinfo_native(
                    node.as_deref(),
                    service.as_deref(),
                    hints_in.as_ref(),
                )
            };
            if let Some(r) = native {
                match r {
                    Ok(()) => {
                        lock(&o.state).addrinfo = AddrinfoState::NativePending;
                        return Ok(());
                    }
                    // An old kernel makes the DNS path fail with errno -1 (reported as 0) or
                    // EINVAL: emulate below.
                    Err(0) | Err(libc::EINVAL) if flags & rai::SA == 0 => {
                        NATIVE_REFUSED.store(true, Ordering::Relaxed);
                    }
                    Err(0) => return Err(err(call, libc::EINVAL, "rdma_resolve_addrinfo failed")),
                    Err(e) => return Err(c_err(call, e)),
                }
            }
            if flags & rai::SA != 0 {
                return Err(err(
                    call,
                    libc::EOPNOTSUPP,
                    "SA-mode resolution needs rdma-core v60, Linux 6.18 and InfiniBand",
                ));
            }
            let list = ffi::getaddrinfo(node.as_deref(), service.as_deref(), hints_in.as_ref())
                .map_err(|code| {
                    if code > 0 {
                        c_err(call, code)
                    } else {
                        err(
                            call,
                            libc::ENOENT,
                            format!("rdma_getaddrinfo found nothing (getaddrinfo code {code})"),
                        )
                    }
                })?;
            let event = addrinfo_event(id, EventKind::AddrinfoResolved, 0);
            let mut st = lock(&o.state);
            st.addrinfo = AddrinfoState::Resolved(convert(list));
            match st.channel.clone() {
                Some(ch) => {
                    drop(st);
                    ch.inject(Injected { id, info: event });
                }
                None => st.sync_override = Some(event),
            }
            Ok(())
        })
    }

    pub(crate) fn query_addrinfo_impl(&self, id: IdHandle) -> Result<Vec<AddrInfo>> {
        let call = Call::QueryAddrinfo;
        self.on_id(call, id, |o| {
            let state = std::mem::take(&mut lock(&o.state).addrinfo);
            match state {
                AddrinfoState::Resolved(list) => Ok(list),
                AddrinfoState::NativePending => match o.raw.query_addrinfo_native() {
                    Some(Ok(list)) => Ok(convert(list)),
                    Some(Err(e)) => {
                        lock(&o.state).addrinfo = AddrinfoState::NativePending;
                        Err(c_err(call, e))
                    }
                    None => Err(err(call, libc::ENOENT, "nothing resolved")),
                },
                AddrinfoState::Idle => Err(err(
                    call,
                    libc::ENOENT,
                    format!("{id} has no resolved address information (resolve_addrinfo first, or already queried)"),
                )),
            }
        })
    }
}
