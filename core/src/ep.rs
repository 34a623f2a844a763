//! `rdma_create_ep` and `rdma_destroy_ep` as librdmacm composes them from its own calls
//! (cma.c): a synchronous id made ready to listen or to connect in one call. Both backends
//! run this composition over their own calls; what is theirs is where a passive id keeps the
//! QP attributes that `rdma_get_request` gives each new id.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{AddrInfo, Call, CmBackend, CmError, Errno, IdHandle, QpInitAttr, Result};

/// How long `rdma_create_ep` lets each resolution take (librdmacm's 2000 ms).
pub const EP_RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// What an endpoint is made for: to listen at a source, or to connect (from a source, if
/// given) to a destination.
enum End {
    Passive(SocketAddr),
    Active(Option<SocketAddr>, SocketAddr),
}

/// `rdma_create_ep` over `cm`'s calls, for a backend's [`CmBackend::create_ep`]: a
/// synchronous id of `info`'s port space; for a passive `info` (`rai::PASSIVE`) bound to its
/// source, with `qp_init` (its QP type set to `info`'s) handed to `keep` for the requests the
/// id will take; otherwise resolved to `info`'s destination (address, then route, each with
/// [`EP_RESOLVE_TIMEOUT`]) and given a QP of `qp_init`, if any. A failure destroys what was
/// made and returns the error of the step that failed.
pub fn create_ep_with<B: CmBackend + ?Sized>(
    cm: &B,
    info: &AddrInfo,
    qp_init: Option<&QpInitAttr>,
    keep: impl FnOnce(IdHandle, QpInitAttr) -> Result<()>,
) -> Result<IdHandle> {
    let refuse = |why: &str| Err(CmError::new(Call::CreateEp, Errno::EINVAL, why));
    let passive = info.flags & crate::rai::PASSIVE != 0;
    let end = match (passive, info.src_addr, info.dst_addr) {
        (true, Some(src), _) => End::Passive(src),
        (false, src, Some(dst)) => End::Active(src, dst),
        (true, None, _) => return refuse("a passive addrinfo without a source address"),
        (false, _, None) => return refuse("an active addrinfo without a destination address"),
    };
    let attr = qp_init.map(|a| QpInitAttr {
        qp_type: info.qp_type,
        ..*a
    });
    let id = cm.create_id(None, 0, info.port_space)?;
    let made = match end {
        End::Passive(src) => passive_ep(cm, id, src, attr, keep),
        End::Active(src, dst) => active_ep(cm, id, src, dst, attr),
    };
    match made {
        Ok(()) => Ok(id),
        Err(e) => {
            // As librdmacm: whatever was made goes, and the step's error is the call's.
            let _ = destroy_ep(cm, id);
            Err(e)
        }
    }
}

fn passive_ep<B: CmBackend + ?Sized>(
    cm: &B,
    id: IdHandle,
    src: SocketAddr,
    attr: Option<QpInitAttr>,
    keep: impl FnOnce(IdHandle, QpInitAttr) -> Result<()>,
) -> Result<()> {
    cm.bind_addr(id, src)?;
    match attr {
        Some(attr) => keep(id, attr),
        None => Ok(()),
    }
}

fn active_ep<B: CmBackend + ?Sized>(
    cm: &B,
    id: IdHandle,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    attr: Option<QpInitAttr>,
) -> Result<()> {
    cm.resolve_addr(id, src, dst, EP_RESOLVE_TIMEOUT)?;
    cm.resolve_route(id, EP_RESOLVE_TIMEOUT)?;
    match attr {
        Some(attr) => cm.create_qp(id, &attr).map(|_| ()),
        None => Ok(()),
    }
}

/// `rdma_destroy_ep` over `cm`'s calls: the id's QP (with the CQs made for it), then the id.
/// An id that is not live fails as `destroy_id` fails for it (ENOENT naming
/// `rdma_destroy_id`), not as the look-up of its QP.
pub fn destroy_ep<B: CmBackend + ?Sized>(cm: &B, id: IdHandle) -> Result<()> {
    let qp = cm
        .qp_num(id)
        .map_err(|e| CmError::new(Call::DestroyId, e.errno, e.detail))?;
    if qp.is_some() {
        cm.destroy_qp(id)?;
    }
    cm.destroy_id(id)
}
