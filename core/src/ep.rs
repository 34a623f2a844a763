//! `rdma_create_ep` and `rdma_destroy_ep` as librdmacm composes them from its own calls
//! (cma.c): a synchronous id made ready to listen or to connect in one call. Both backends
//! run this composition over their own calls; what is theirs is where a passive id keeps the
//! QP attributes that `rdma_get_request` gives each new id, and how they learn the
//! capacities granted to an active id's QP.

use std::net::SocketAddr;
use std::time::Duration;

use crate::verbs::{DataPath, QpInitAttrEx};
use crate::{
    AddrInfo, Call, CmBackend, CmError, Errno, IdHandle, QpCap, QpInitAttr, QpType, Result,
};

/// How long `rdma_create_ep` lets each resolution take (librdmacm's 2000 ms).
pub const EP_RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// What an endpoint is made for: to listen at a source, or to connect (from a source, if
/// given) to a destination.
enum End {
    Passive(SocketAddr),
    Active(Option<SocketAddr>, SocketAddr),
}

/// The QP attributes given to `rdma_create_ep`: those of
/// [`CmBackend::create_ep`] (the backend makes the CQs, the QP takes the id's PD) or of
/// [`crate::verbs::DataPath::create_ep_ex`] (the PD, CQs and SRQ named). A passive endpoint
/// keeps them for the QP `get_request` gives each new id, as librdmacm keeps its
/// `qp_init_attr` and PD on the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpQpAttr {
    /// `rdma_create_ep(&id, res, NULL, attr)`: `rdma_create_qp` with librdmacm's CQs.
    Cm(QpInitAttr),
    /// `rdma_create_ep(&id, res, pd, attr)` with `attr` naming the CQs (and SRQ):
    /// `rdma_create_qp_ex`.
    Verbs(QpInitAttrEx),
}

impl EpQpAttr {
    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        match self {
            EpQpAttr::Cm(a) => a.qp_type,
            EpQpAttr::Verbs(a) => a.qp_type,
        }
    }

    /// The capacities asked for.
    pub fn cap(&self) -> QpCap {
        match self {
            EpQpAttr::Cm(a) => a.cap,
            EpQpAttr::Verbs(a) => a.cap,
        }
    }

    fn set_qp_type(&mut self, qp_type: QpType) {
        match self {
            EpQpAttr::Cm(a) => a.qp_type = qp_type,
            EpQpAttr::Verbs(a) => a.qp_type = qp_type,
        }
    }

    fn set_cap(&mut self, cap: QpCap) {
        match self {
            EpQpAttr::Cm(a) => a.cap = cap,
            EpQpAttr::Verbs(a) => a.cap = cap,
        }
    }

    /// Makes the id's QP of these attributes: `create_qp` or `create_qp_ex`; returns the QP
    /// number.
    pub fn create_qp_on<B: DataPath + ?Sized>(&self, dp: &B, id: IdHandle) -> Result<u32> {
        match self {
            EpQpAttr::Cm(a) => dp.create_qp(id, a),
            EpQpAttr::Verbs(a) => dp.create_qp_ex(id, a),
        }
    }
}

/// Runs `make` (a backend's `rdma_create_ep` of [`EpQpAttr`]) for
/// [`CmBackend::create_ep`]'s attributes, writing back into `qp_init` what `make` wrote.
pub fn with_cm_attr(
    qp_init: Option<&mut QpInitAttr>,
    make: impl FnOnce(Option<&mut EpQpAttr>) -> Result<IdHandle>,
) -> Result<IdHandle> {
    let mut ep = qp_init.as_deref().map(|a| EpQpAttr::Cm(*a));
    let id = make(ep.as_mut())?;
    if let (Some(out), Some(EpQpAttr::Cm(written))) = (qp_init, ep) {
        *out = written;
    }
    Ok(id)
}

/// Runs `make` for [`crate::verbs::DataPath::create_ep_ex`]'s attributes, writing back into
/// `qp_init` what `make` wrote.
pub fn with_verbs_attr(
    qp_init: &mut QpInitAttrEx,
    make: impl FnOnce(Option<&mut EpQpAttr>) -> Result<IdHandle>,
) -> Result<IdHandle> {
    let mut ep = EpQpAttr::Verbs(*qp_init);
    let id = make(Some(&mut ep))?;
    if let EpQpAttr::Verbs(written) = ep {
        *qp_init = written;
    }
    Ok(id)
}

/// `rdma_create_ep` over `cm`'s calls, for a backend's [`CmBackend::create_ep`] and
/// [`crate::verbs::DataPath::create_ep_ex`]: a synchronous id of `info`'s port space; for a
/// passive `info` (`rai::PASSIVE`) bound to its source, with a copy of `qp_init` (its QP type
/// set to `info`'s) handed to `keep` for the requests the id will take, `qp_init` itself
/// untouched; otherwise resolved to `info`'s destination (address, then route, each with
/// [`EP_RESOLVE_TIMEOUT`]) and given a QP of `qp_init`, if any, by `make_qp`, which returns
/// the capacities the device granted: they and `info`'s QP type are written back into
/// `qp_init`, as `rdma_create_ep` writes them back into C's `qp_init_attr`. A failure
/// destroys what was made and fails `rdma_create_ep` with the errno of the step that failed
/// (librdmacm returns the step's own -1 and errno), its detail naming that step: see
/// [`step_failed`].
pub fn create_ep_with<B: CmBackend + ?Sized>(
    cm: &B,
    info: &AddrInfo,
    qp_init: Option<&mut EpQpAttr>,
    keep: impl FnOnce(IdHandle, EpQpAttr) -> Result<()>,
    make_qp: impl FnOnce(IdHandle, &EpQpAttr) -> Result<QpCap>,
) -> Result<IdHandle> {
    let refuse = |why: &str| Err(CmError::new(Call::CreateEp, Errno::EINVAL, why));
    let passive = info.flags & crate::rai::PASSIVE != 0;
    let end = match (passive, info.src_addr, info.dst_addr) {
        (true, Some(src), _) => End::Passive(src),
        (false, src, Some(dst)) => End::Active(src, dst),
        (true, None, _) => return refuse("a passive addrinfo without a source address"),
        (false, _, None) => return refuse("an active addrinfo without a destination address"),
    };
    let id = cm
        .create_id(None, 0, info.port_space)
        .map_err(step_failed)?;
    let made = match end {
        End::Passive(src) => {
            let kept = qp_init.map(|a| {
                let mut kept = *a;
                kept.set_qp_type(info.qp_type);
                kept
            });
            passive_ep(cm, id, src, kept, keep)
        }
        End::Active(src, dst) => active_ep(cm, id, (src, dst), info.qp_type, qp_init, make_qp),
    };
    match made {
        Ok(()) => Ok(id),
        Err(e) => {
            // As librdmacm: whatever was made goes, and the step's error is the call's.
            let _ = destroy_ep(cm, id);
            Err(step_failed(e))
        }
    }
}

/// The error of `rdma_create_ep` whose inner call failed with `e`: the call is
/// `rdma_create_ep`, the errno the inner call's (as librdmacm leaves it in `errno`), and the
/// detail names the inner call, its errno and its own detail, e.g. `rdma_create_ep: ENETUNREACH
/// (101): rdma_resolve_addr failed with ENETUNREACH (101): ...`. An error already of
/// `rdma_create_ep` (its own checks) is returned as it is.
pub fn step_failed(e: CmError) -> CmError {
    if e.call == Call::CreateEp {
        return e;
    }
    let detail = format!("{} failed with {}: {}", e.call, e.errno, e.detail);
    CmError::new(Call::CreateEp, e.errno, detail)
}

fn passive_ep<B: CmBackend + ?Sized>(
    cm: &B,
    id: IdHandle,
    src: SocketAddr,
    attr: Option<EpQpAttr>,
    keep: impl FnOnce(IdHandle, EpQpAttr) -> Result<()>,
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
    (src, dst): (Option<SocketAddr>, SocketAddr),
    qp_type: QpType,
    attr: Option<&mut EpQpAttr>,
    make_qp: impl FnOnce(IdHandle, &EpQpAttr) -> Result<QpCap>,
) -> Result<()> {
    cm.resolve_addr(id, src, dst, EP_RESOLVE_TIMEOUT)?;
    cm.resolve_route(id, EP_RESOLVE_TIMEOUT)?;
    if let Some(attr) = attr {
        // librdmacm writes the QP type into the caller's attributes before making the QP,
        // and ibv_create_qp writes the granted capacities back.
        attr.set_qp_type(qp_type);
        let granted = make_qp(id, attr)?;
        attr.set_cap(granted);
    }
    Ok(())
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
