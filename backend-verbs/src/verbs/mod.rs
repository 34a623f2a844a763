//! The data path ([`cmtwin::verbs::DataPath`]) over libibverbs: the backend's verbs objects
//! and how they are kept safe.
//!
//! * `anchors.rs`: the backend's own ids that keep librdmacm from closing a (removed)
//!   device while the backend's PDs, CQs and channels live on it.
//! * `objects.rs`: the registry of PDs, regions, completion channels, CQs and QPs by handle,
//!   with the counts that refuse a destroy while something uses the object (EBUSY).
//! * `memory.rs`: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`, `ibv_dereg_mr`, and the
//!   copies in and out of a region.
//! * `regions.rs`: memory regions that own their buffer, the process-wide table of
//!   registered keys, and the busy counts of posted work.
//! * `cqs.rs`: completion channels and CQs: arming, CQ events, polling (with completions
//!   translated back to the application's `wr_id`).
//! * `qps.rs`: QPs on ids (`rdma_create_qp` with the backend's PD, with chosen CQs or with
//!   the CQs librdmacm makes), apart from ids (the external-QP path), `rdma_init_qp_attr`,
//!   `ibv_modify_qp`, and their retirement before librdmacm or libibverbs frees them.
//! * `qp_modify.rs`: `ibv_modify_qp` with the application's attribute mask.
//! * `address_handles.rs`: `ibv_create_ah`, `ibv_create_ah_from_wc` and `ibv_destroy_ah`.
//! * `posts.rs`: `ibv_post_send` (with a UD send's destination; the atomics in `wr.atomic`,
//!   an inline one refused with EINVAL as the simulator refuses it, where librxe would take
//!   it; the other atomic refusals are the provider's own) and `ibv_post_recv`, each request
//!   under a token of the backend's that the completion brings back.
//! * `srqs.rs`: shared receive queues (`ibv_create_srq` and its kin, `id->srq`), their
//!   receives under tokens of their own.
//! * `async_events.rs`: the devices' asynchronous events, routed to the backend value whose
//!   QP, CQ or SRQ they concern.
//! * `datapath.rs`: the trait's methods.
//!
//! Where it differs from the simulator by design:
//!
//! * A region stays busy (EBUSY for `dereg_mr`) until the completion of the last request
//!   that names it has been *polled* (for unsignaled sends: the polled completion of a later
//!   request of the same send queue), or until its QP is destroyed or reset; the simulator
//!   frees it when the completion is queued. libibverbs gives no other way to know that the
//!   device is done with the memory.
//! * Destroying a PD, CQ, completion channel, region or QP while another thread is inside a
//!   call on it (a `get_cq_event` waiting on the channel, a `poll_cq`, an `mr_read`) is
//!   EBUSY, as for ids and event channels; `destroy_id`/`destroy_qp` too while a call uses the
//!   id's QP or the CQs and channels librdmacm made for it, or while CQ events of those CQs
//!   are unacknowledged (librdmacm would block).
//! * `create_qp` (`CmBackend`) and `id->pd` use a PD the backend allocates on the device (one
//!   per device), not librdmacm's, which librdmacm frees under the application when the
//!   device's last id goes. The backend's goes, unless regions or QPs use it, with the
//!   backend's last id (a later `id->pd` makes a new one).
//! * Capacities are the device's: `create_cq`/`create_qp_ex` beyond them fail with the
//!   driver's errno (EINVAL on rxe); a post on a QP in RESET fails as the driver says.
//! * An id's SRQ (`create_id_srq`) is made with `ibv_create_srq` and named in `id->srq`, not
//!   made by `rdma_create_srq`, whose `rdma_destroy_srq` would also destroy the CQs the id's
//!   QP uses; a second one on the same id is EINVAL (librdmacm would lose the first).
//! * `modify_qp` to RTR takes the path MTU from the port's active MTU, and the port from
//!   `ah_attr.port_num` (1 when 0); `modify_qp_with_mask` takes `path_mtu` 0 for the port's
//!   active MTU too, and the port as given. An address that leads nowhere is accepted, and
//!   requests then end in RETRY_EXC_ERR.

mod address_handles;
mod anchors;
mod async_events;
mod cqs;
mod datapath;
mod memory;
mod objects;
mod posts;
mod qp_modify;
mod qps;
mod readiness;
mod regions;
mod srqs;

pub(crate) use async_events::AsyncInbox;
pub(crate) use objects::VerbsObjects;
