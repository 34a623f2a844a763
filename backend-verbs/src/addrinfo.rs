//! `rdma_resolve_addrinfo` and `rdma_query_addrinfo`.
//!
//! With rdma-core v60+ on Linux 6.18+ the real calls are used. Whether librdmacm has them is
//! decided once, by looking the symbols up (`dlsym`); whether the kernel can serve them is
//! decided per call, from that call's answer alone (see [`route`]), so no error of one call
//! changes how a later one is made. Otherwise DNS mode is emulated as librdmacm does it:
//! `rdma_getaddrinfo` runs synchronously in the calling thread (holding no lock); a failure is
//! returned at once (no event, as in librdmacm), a success is stored for `query_addrinfo` and
//! announced by an ADDRINFO_RESOLVED event queued on the id's channel through the backend's
//! injected-event path (or made the current event of a synchronous id). SA mode needs the real
//! call (and InfiniBand): EOPNOTSUPP otherwise.

use std::ffi::CString;

use cmtwin::{
    rai, AddrInfo, AddrInfoHints, Call, CmError, EventKind, IdHandle, PortSpace, QpType, Result,
};

use crate::events::addrinfo_event;
use crate::ffi::{self, AddrInfoHintsIn, AddrInfoOut, CResult, QPT_RC, QPT_UC, QPT_UD};
use crate::id::FetchLocks;
use crate::registry::{lock, AddrinfoState, IdObj, Injected};
use crate::{c_err, err, VerbsBackend};

/// How one `resolve_addrinfo` call goes on after its attempt at the native call.
#[derive(Debug, PartialEq)]
enum Route {
    /// The native resolution is under way; its results come from `rdma_query_addrinfo`.
    NativePending,
    /// Resolve with the emulation (this call only).
    Emulate,
}

/// Decides how a call goes on from `native`, the answer of the native `rdma_resolve_addrinfo`
/// to this very call (`None`: librdmacm lacks the symbol), with `sa` telling SA mode.
///
/// In DNS mode librdmacm resolves the name itself, then asks the kernel to queue the
/// ADDRINFO_RESOLVED event (the WRITE_CM_EVENT command of Linux 6.18). A kernel without that
/// command makes the call fail with errno -1 (librdmacm replaces the kernel's errno by its own
/// -1), which is also what a failure of its own `rdma_getaddrinfo` gives; EINVAL or ENOSYS is
/// what a librdmacm that passed the kernel's errno on would report. For these answers this call
/// is emulated: the emulation looks the name up again, so it reports a lookup failure exactly,
/// and otherwise delivers the event the kernel could not queue. Nothing is remembered: the next
/// call tries the native path again. A negative `EAI_*` code means the name did not resolve;
/// any other errno is the answer.
fn route(call: Call, sa: bool, native: Option<CResult<()>>) -> Result<Route> {
    match native {
        Some(Ok(())) => Ok(Route::NativePending),
        None if sa => Err(err(
            call,
            libc::EOPNOTSUPP,
            "SA-mode resolution needs rdma-core v60, Linux 6.18 and InfiniBand",
        )),
        None => Ok(Route::Emulate),
        Some(Err(-1 | 0)) if sa => Err(err(
            call,
            libc::EINVAL,
            "librdmacm's rdma_resolve_addrinfo failed without an errno \
             (SA mode needs Linux 6.18 and an InfiniBand port)",
        )),
        Some(Err(-1 | 0 | libc::EINVAL | libc::ENOSYS)) if !sa => Ok(Route::Emulate),
        Some(Err(code)) => Err(lookup_error(call, code)),
    }
}

/// The error for a failed name lookup: `code` is an errno, or a (negative) `EAI_*` code, which
/// is reported as ENOENT.
fn lookup_error(call: Call, code: i32) -> CmError {
    if code > 0 {
        c_err(call, code)
    } else {
        err(
            call,
            libc::ENOENT,
            format!("rdma_getaddrinfo found nothing (getaddrinfo code {code})"),
        )
    }
}

fn cstring(call: Call, s: Option<&str>) -> Result<Option<CString>> {
    s.map(|s| CString::new(s).map_err(|_| err(call, libc::EINVAL, "a NUL byte inside a string")))
        .transpose()
}

fn convert(list: Vec<AddrInfoOut>) -> Vec<AddrInfo> {
    list.into_iter()
        .map(|a| {
            let qp_type = match a.qp_type as u32 {
                QPT_UD => QpType::Ud,
                QPT_UC => QpType::Uc,
                _ => QpType::Rc,
            };
            let ps = PortSpace(a.port_space as u32);
            AddrInfo::new(a.flags as u32, ps, qp_type, a.src, a.dst)
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
        let hints_in = hints.map(hints_in);
        let sa = flags & rai::SA != 0;
        // The native call changes only librdmacm's own resolution state (under its own lock)
        // and may look a name up: the channel's fetch lock is not taken.
        let route = self.on_id_locking(call, id, FetchLocks::NotNeeded, |o| {
            Self::check_idle(call, id, o)?;
            lock(&o.state).sync_override = None;
            let native = o.raw.resolve_addrinfo_native(
                node.as_deref(),
                service.as_deref(),
                hints_in.as_ref(),
            );
            let route = route(call, sa, native)?;
            if route == Route::NativePending {
                lock(&o.state).addrinfo = AddrinfoState::NativePending;
            }
            Ok(route)
        })?;
        if route == Route::NativePending {
            return Ok(());
        }
        // The emulation: the lookup runs with no lock held.
        let list = ffi::getaddrinfo(node.as_deref(), service.as_deref(), hints_in.as_ref())
            .map_err(|code| lookup_error(call, code))?;
        self.on_id(call, id, |o| {
            // Another thread may have started a resolution on the id meanwhile.
            Self::check_idle(call, id, o)?;
            let ps = PortSpace(o.raw.port_space());
            let event = addrinfo_event(id, ps, EventKind::AddrinfoResolved, 0);
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

    pub(crate) fn getaddrinfo_impl(
        &self,
        node: Option<&str>,
        service: Option<&str>,
        hints: Option<&AddrInfoHints>,
    ) -> Result<Vec<AddrInfo>> {
        let call = Call::GetAddrinfo;
        let node = cstring(call, node)?;
        let service = cstring(call, service)?;
        let hints_in = hints.map(hints_in);
        let list = ffi::getaddrinfo(node.as_deref(), service.as_deref(), hints_in.as_ref())
            .map_err(|code| lookup_error(call, code))?;
        Ok(convert(list))
    }

    /// EBUSY if `o` has a resolution pending or not yet queried.
    fn check_idle(call: Call, id: IdHandle, o: &IdObj) -> Result<()> {
        if matches!(lock(&o.state).addrinfo, AddrinfoState::Idle) {
            Ok(())
        } else {
            Err(err(
                call,
                libc::EBUSY,
                format!("{id} has a resolution pending or not yet queried"),
            ))
        }
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

/// The hints as librdmacm takes them.
fn hints_in(h: &AddrInfoHints) -> AddrInfoHintsIn {
    AddrInfoHintsIn {
        flags: h.flags as i32,
        port_space: h.port_space.map_or(0, |p| p.0 as i32),
        qp_type: h.qp_type.map_or(0, |q| match q {
            QpType::Rc => QPT_RC as i32,
            QpType::Uc => QPT_UC as i32,
            QpType::Ud => QPT_UD as i32,
        }),
        src: h.src_addr.as_ref().map(ffi::addrinfo_addr),
        dst: h.dst_addr.as_ref().map(ffi::addrinfo_addr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: Call = Call::ResolveAddrinfo;

    fn errno_of(r: Result<Route>) -> i32 {
        r.unwrap_err().errno.0
    }

    #[test]
    fn a_kernel_that_cannot_queue_the_event_is_emulated_for_that_call_only() {
        // An old kernel's answer, then a kernel that can: each call follows its own answer.
        for answer in [-1, 0, libc::EINVAL, libc::ENOSYS] {
            assert_eq!(route(CALL, false, Some(Err(answer))), Ok(Route::Emulate));
            assert_eq!(route(CALL, false, Some(Ok(()))), Ok(Route::NativePending));
        }
    }

    #[test]
    fn without_the_symbol_dns_is_emulated_and_sa_unsupported() {
        assert_eq!(route(CALL, false, None), Ok(Route::Emulate));
        assert_eq!(errno_of(route(CALL, true, None)), libc::EOPNOTSUPP);
    }

    #[test]
    fn other_native_answers_are_reported_as_they_are() {
        assert_eq!(
            errno_of(route(CALL, false, Some(Err(libc::EBUSY)))),
            libc::EBUSY
        );
        assert_eq!(
            errno_of(route(CALL, true, Some(Err(libc::ENODEV)))),
            libc::ENODEV
        );
        // EAI_NONAME (-2): the name does not resolve, as the emulation reports it.
        let e = route(CALL, false, Some(Err(libc::EAI_NONAME))).unwrap_err();
        assert_eq!(e.errno.0, libc::ENOENT);
        assert!(e.detail.contains("getaddrinfo code -2"), "{e}");
        // SA mode has no emulation: the answer without an errno is EINVAL.
        assert_eq!(errno_of(route(CALL, true, Some(Err(-1)))), libc::EINVAL);
        assert_eq!(
            errno_of(route(CALL, true, Some(Err(libc::EINVAL)))),
            libc::EINVAL
        );
    }
}
