//! The `DataPath` trait: libibverbs' objects and work requests, one method each.

use crate::verbs::{
    AccessFlags, MemoryRegion, PollSource, QpAttr, QpAttrMask, QpCqs, QpInitAttrEx, QpState,
    RecvWr, SendFlags, SendWr, Sge, SrqAttr, SrqAttrMask, VerbsAsyncEvent, WorkCompletion,
};
use crate::{
    AhAttr, AhHandle, CmBackend, CompChannelHandle, CqHandle, IdHandle, MrHandle, PdHandle, QpCap,
    QpHandle, Result, SrqHandle, Wait,
};

/// The verbs data path of a connection manager backend: protection domains, memory regions,
/// completion queues and channels, QPs with chosen CQs on ids, work requests and their
/// completions, as libibverbs has them (`ibv_` calls, named without the prefix).
///
/// Implemented by the simulator (`cmtwin-sim`) and by the real backend (`cmtwin-verbs`, over
/// libibverbs).
///
/// * Errors carry the call and the errno libibverbs gives for the misuse. Every method taking
///   an id fails with **ENOENT** for an id that is not live in this backend, and every method
///   taking a PD, MR, CQ, completion channel, QP or address handle with **EBADF** for one that is not
///   (destroyed, never created, or another backend's); these are not repeated below. Objects live on the
///   device of the id they were created through; calls that need the device of an id whose
///   device was removed (`alloc_pd`, `pd`, `reg_msgs`, ...) give **ENXIO**, while objects made
///   before the removal stay valid handles: its QP is in ERROR, and what is posted to it
///   completes with WR_FLUSH_ERR.
/// * Memory is safe by construction: a region owns its buffer from `reg_mr` until `dereg_mr`
///   hands it back, and is read and written only through `mr_read` and `mr_write`;
///   deregistration is refused (EBUSY) while a posted request uses the region. So no sequence
///   of safe calls can free, move or alias memory the device may touch.
/// * QPs follow the CM as librdmacm and the kernel drive them: INIT at creation, RTR and RTS
///   on the passive side in `accept` and on the active side when librdmacm processes the
///   CONNECT_RESPONSE, ERROR (every outstanding request flushed) in `disconnect`, when a
///   REJECTED is fetched, and when the device is removed. Receiving a DREQ does not touch the
///   QP (the application's `disconnect` does).
/// * Blocking waits (`get_cq_event`, `get_async_event`) on the simulator advance virtual time
///   and fail with **EDEADLK** when nothing left could end them; an unproductive `poll_cq` of
///   a simulated process yields, so that a polling loop lets time advance.
pub trait DataPath: CmBackend {
    /// `ibv_alloc_pd(id->verbs)`: a protection domain on the id's device (it outlives the id).
    ///
    /// * EINVAL: the id has no device yet (bind or resolve it first).
    fn alloc_pd(&self, id: IdHandle) -> Result<PdHandle>;

    /// `ibv_dealloc_pd`.
    ///
    /// * EBUSY: regions or QPs of the PD still exist.
    fn dealloc_pd(&self, pd: PdHandle) -> Result<()>;

    /// `ibv_reg_mr` over `buffer`, which the backend owns until `dereg_mr` returns it.
    ///
    /// * EINVAL: an empty buffer, or REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE (as
    ///   libibverbs refuses them), or unknown access bits.
    fn reg_mr(&self, pd: PdHandle, buffer: Vec<u8>, access: AccessFlags) -> Result<MemoryRegion>;

    /// `ibv_dereg_mr`: invalidates the keys and hands the buffer back.
    ///
    /// * EBUSY: a posted request that has not completed uses the region (libibverbs would let
    ///   the device write freed memory).
    fn dereg_mr(&self, mr: MrHandle) -> Result<Vec<u8>>;

    /// Copies `out.len()` bytes of the region from `offset` into `out`.
    ///
    /// * EINVAL: the range is not inside the region.
    fn mr_read(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<()>;

    /// Copies `data` into the region at `offset`.
    ///
    /// * EINVAL: the range is not inside the region.
    fn mr_write(&self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<()>;

    /// `ibv_create_comp_channel(id->verbs)`.
    ///
    /// * EINVAL: the id has no device.
    fn create_comp_channel(&self, id: IdHandle) -> Result<CompChannelHandle>;

    /// `ibv_destroy_comp_channel`.
    ///
    /// * EBUSY: CQs still report to the channel.
    fn destroy_comp_channel(&self, channel: CompChannelHandle) -> Result<()>;

    /// `ibv_create_cq(id->verbs, cqe, ..., channel, 0)`: a CQ of at least `cqe` entries,
    /// reporting to `channel` when armed.
    ///
    /// * EINVAL: `cqe` is 0 or above the device's `max_cqe` (`query_device`), or the
    ///   channel is on another device.
    fn create_cq(
        &self,
        id: IdHandle,
        cqe: u32,
        channel: Option<CompChannelHandle>,
    ) -> Result<CqHandle>;

    /// `ibv_destroy_cq`.
    ///
    /// * EBUSY: QPs still complete into it, or CQ events fetched from its channel are not
    ///   acknowledged (libibverbs would block forever).
    fn destroy_cq(&self, cq: CqHandle) -> Result<()>;

    /// `ibv_req_notify_cq`: arms the CQ once: its next completion (with `solicited_only`, the
    /// next one the driver takes as solicited) queues one CQ event on its channel. Which
    /// those are is the driver's: by the InfiniBand specification (the simulator's InfiniBand
    /// devices) a receive of a solicited message or any failed completion; on rxe only a
    /// receive completed from a packet with the solicited-event bit, failed or not, and on
    /// Linux 6.1 a receive flushed (6.12 flushes unsolicited), never a send-queue completion,
    /// even a failed one; on siw only the completion of a send posted solicited, on the
    /// sender's CQ, never a receive. Arming for every completion outlasts a later
    /// solicited-only arming, except on siw, where the last arming wins.
    ///
    /// * EINVAL: the CQ has no completion channel.
    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()>;

    /// `ibv_get_cq_event`: the CQ whose event is at the head of the channel, waiting as `wait`
    /// says. Each event must be acknowledged with `ack_cq_events`.
    ///
    /// * EAGAIN: `Wait::NonBlocking` and no event. ETIMEDOUT: the timeout passed.
    /// * EDEADLK (simulator): a blocking wait nothing can end.
    fn get_cq_event(&self, channel: CompChannelHandle, wait: Wait) -> Result<CqHandle>;

    /// `ibv_ack_cq_events`: acknowledges `count` fetched events of the CQ.
    ///
    /// * EINVAL: more than are fetched and unacknowledged.
    fn ack_cq_events(&self, cq: CqHandle, count: u32) -> Result<()>;

    /// `ibv_poll_cq`: moves up to `wc.len()` completions, oldest first, into `wc`; returns
    /// how many.
    fn poll_cq(&self, cq: CqHandle, wc: &mut [WorkCompletion]) -> Result<usize>;

    /// `rdma_create_qp` with a PD and chosen CQs (`rdma_create_qp_ex`); returns the QP number.
    /// The QP is in INIT (a UD QP in RTS).
    ///
    /// * The errnos of `CmBackend::create_qp`.
    /// * EINVAL: the PD or a CQ is on another device than the id, or a capacity is 0 (send
    ///   or receive queue) or above the device's maximum (`max_qp_wr` requests, `max_sge`
    ///   entries of `query_device`; 256 inline bytes on the simulator), or `block_self_multicast_loopback` on a QP that is
    ///   not UD.
    /// * EOPNOTSUPP: `block_self_multicast_loopback` on a device without it (rxe takes no
    ///   creation flags, measured; the simulator has it).
    fn create_qp_ex(&self, id: IdHandle, attr: &QpInitAttrEx) -> Result<u32>;

    /// `rdma_create_ep(&id, res, pd, qp_init_attr)` with a PD and CQs of the program's own
    /// (and, if it names one, an SRQ): `CmBackend::create_ep` whose QP is made by
    /// `create_qp_ex` of `qp_init` (its `pd`, `send_cq`, `recv_cq`, `srq`, `sq_sig_all`,
    /// ...). A passive `info` keeps a copy for `get_request`, which makes each new id's QP
    /// in that PD, sharing those CQs (and SRQ), as librdmacm does with the listener's PD and
    /// attributes; `qp_init` is left as it is. An active one writes `info`'s QP type and the
    /// capacities granted back into `qp_init`, as `create_ep` does. The PD and CQs come from
    /// the device the endpoint will use (`alloc_pd` and `create_cq` through an id bound
    /// there; they outlive that id).
    ///
    /// * The errnos of `create_ep`, and of `create_qp_ex` (EINVAL: the PD or a CQ on another
    ///   device than the endpoint's).
    fn create_ep_ex(&self, info: &crate::AddrInfo, qp_init: &mut QpInitAttrEx) -> Result<IdHandle>;

    /// The CQs of the id's QP and their channels (`id->send_cq`, `id->send_cq_channel`, ...):
    /// for a QP made by `create_qp`, the CQs the backend made for it, each with its own
    /// completion channel as librdmacm makes them; for one made by `create_qp_ex`, the CQs
    /// given and their channels. `None` without QP.
    fn qp_cqs(&self, id: IdHandle) -> Result<Option<QpCqs>>;

    /// The id's protection domain (`id->pd`): its QP's, else the default PD of its device
    /// (librdmacm's, shared by the ids of the device and kept while the device is open).
    ///
    /// * EINVAL: the id has no device.
    fn pd(&self, id: IdHandle) -> Result<PdHandle>;

    /// The id's QP (`id->qp`), if it has one.
    fn qp(&self, id: IdHandle) -> Result<Option<QpHandle>>;

    /// `ibv_create_qp`: an RC, UC or UD QP apart from any id, in RESET, for the external-QP
    /// path: the application announces an RC or UC QP's number in `connect`'s or `accept`'s
    /// parameters (`qp_num`) and drives it with `init_qp_attr` and `modify_qp` (the way to
    /// connect UC QPs: see `CmBackend::create_qp`); a UD QP it
    /// drives as librdmacm drives an id's (INIT with the id's `init_qp_attr`: pkey index,
    /// port, qkey; RTR; RTS with `sq_psn`), and sends datagrams from it to any UD QP.
    /// There is no `ibv_attach_mcast` here: such a QP sends to a multicast group but does
    /// not receive from one. On iWARP the CM drives an RC QP named in `qp_num` itself
    /// (iwcm.c looks it up by number on the id's device): siw moves it to RTS when MPA
    /// completes and out of it when the connection closes, and the application's INIT and
    /// RTR change nothing (tests/BEDS.md).
    ///
    /// * EINVAL: the CQs on another device than the PD, capacities as for `create_qp_ex`, or
    ///   `block_self_multicast_loopback` (such a QP joins no group).
    /// * EOPNOTSUPP: a UC or UD QP on an iWARP device (siw makes RC QPs only).
    fn create_external_qp(&self, attr: &QpInitAttrEx) -> Result<QpHandle>;

    /// `ibv_destroy_qp` of a QP made by `create_external_qp` (outstanding requests are
    /// discarded without completions).
    ///
    /// * EINVAL: the QP belongs to an id (`destroy_qp` destroys it).
    fn destroy_external_qp(&self, qp: QpHandle) -> Result<()>;

    /// `rdma_init_qp_attr`: the attributes the CM computed for moving a QP of this connection
    /// to `state` (INIT, RTR or RTS), each state only its own, as the kernel fills them: RTR
    /// the peer's QP number and path, the RQ PSN, the RNR timer 0; RTS the SQ PSN, the id's
    /// ACK timeout, the retry counts of the REQ (and, on the active side, the RNR retry count
    /// of the REP). For an id of the UDP or IPoIB port space, whatever the
    /// state, what a UD QP's INIT takes: pkey index 0, the id's port (`ah_attr.port_num`)
    /// and the id's qkey. On iWARP (cma.c `rdma_init_qp_attr`, iwcm.c
    /// `iw_cm_init_qp_attr`): the port in every answer (`ah_attr.port_num`); no access flags
    /// before the connection has an iWARP CM id (before `connect` or a request); then
    /// remote write and read for INIT and RTR, and nothing more for RTS.
    ///
    /// * EINVAL: another state, an id without device, a connected id listening (its CM id is
    ///   in LISTEN), or RTR/RTS of a connected id before
    ///   the peer's QP number is known (a passive id before its request, an active id before
    ///   the REP); on IB and RoCE also any state once the connection's IB CM id has none to
    ///   give (its request abandoned by the initiator, the connection over: cm.c
    ///   `cm_init_qp_init_attr`).
    fn init_qp_attr(&self, id: IdHandle, state: QpState) -> Result<QpAttr>;

    /// `ibv_modify_qp` to `attr.qp_state` with the mask that transition requires:
    /// RESET → INIT → RTR → RTS, any state but RESET → ERROR (flushing outstanding
    /// requests), any state → RESET (discarding them). The mask is [`QpAttrMask::STATE`] and,
    /// on an RC or UC QP, INIT `ACCESS_FLAGS | PKEY_INDEX | PORT` (the pkey index taken as
    /// 0), RTR `AV | PATH_MTU | DEST_QPN | RQ_PSN` and on RC `MAX_DEST_RD_ATOMIC |
    /// MIN_RNR_TIMER`, RTS `SQ_PSN` and on RC `TIMEOUT | RETRY_CNT | RNR_RETRY |
    /// MAX_QP_RD_ATOMIC`; on a UD QP INIT `PKEY_INDEX | PORT | QKEY`, RTS `SQ_PSN`. The port
    /// is `ah_attr.port_num`, 0 taken as 1. Any other transition, or other attributes, are
    /// [`modify_qp_with_mask`](DataPath::modify_qp_with_mask)'s.
    /// A siw QP (iWARP) keeps only its state (siw_qp.c `siw_qp_modify`): RESET, INIT and RTR
    /// change nothing, RTS is EINVAL (only the connection moves it there), ERROR flushes and,
    /// from RTS, closes the connection.
    ///
    /// * EINVAL: no state, a transition the QP's state does not allow, or an RTR whose
    ///   `ah_attr` leads to no host of the fabric.
    /// * The errnos of `modify_qp_with_mask`.
    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr) -> Result<()>;

    /// `ibv_modify_qp(qp, attr, mask)`: the attributes of `attr` that `mask` names. With
    /// [`QpAttrMask::STATE`] the QP moves to `attr.qp_state`; without it the QP stays in its
    /// state and only the attributes change: rxe on Linux 6.1 (and the simulator's 6.1
    /// profile) checks them as the transition from the state to itself, rxe on 6.12 (and the
    /// simulator's later profiles) takes any attribute then (measured). The transition starts
    /// from the QP's state, or from `attr.cur_qp_state` with [`QpAttrMask::CUR_STATE`] (the
    /// kernel believes the caller: a state other than the QP's is taken, and only the table
    /// below judges it; the simulator moves its QPs only from a state that leads there).
    ///
    /// On RoCE and InfiniBand devices (rxe, and the simulator's), the transition and the
    /// mask must be in the kernel's table ([`qp_transition`](super::qp_transition),
    /// `ib_modify_qp_is_ok`): the required attributes given, no attribute the transition does
    /// not take. So on an RC QP: RTS → RTS takes only `ACCESS_FLAGS`, `MIN_RNR_TIMER`,
    /// `ALT_PATH`, `PATH_MIG_STATE` and `CUR_STATE` (perftest's RNR timer after `accept`);
    /// the timeout and retry counts change only in SQD → SQD, so RTS → SQD → SQD → RTS;
    /// INIT → INIT takes access flags, port and pkey index. RTS → SQD stops sending new
    /// requests; once every request sent is acknowledged, the device raises
    /// IBV_EVENT_SQ_DRAINED (`get_async_event`), and until then the QP cannot leave SQD but
    /// to ERROR (rxe: not even to RESET). rxe on 6.12 drains again on SQD → SQD (a second
    /// SQ_DRAINED, to wait for before SQD → RTS); rxe on 6.1 does not (measured; the
    /// simulator follows its kernel profile). Applied attributes take effect for what
    /// follows: the RNR timer for the next RNR NAK this QP answers, the timeout and retry counts for the next
    /// transport timer and retries, the PSNs for the next request sent or expected. The
    /// simulator does not model access flags, path MTU, RDMA read and atomic depths or the
    /// path migration state: it checks and takes them, without effect.
    ///
    /// On iWARP devices (siw, and the simulator's) the table is not consulted: siw
    /// (`siw_verbs_modify_qp`) takes only the access flags and the state, ignores every other
    /// attribute, and moving to the QP's own state changes nothing. The simulator's iWARP QPs
    /// move as siw moves them (see `modify_qp`); SQD and SQE (which siw maps to closing and
    /// terminating the connection) are EOPNOTSUPP there.
    ///
    /// A pkey index is taken whatever it is (rxe took index 1 of its one-entry table).
    ///
    /// * EINVAL (the kernel's `ib_modify_qp_is_ok`, rxe's `rxe_qp_chk_attr`, uverbs'
    ///   `modify_qp`): `STATE` without `qp_state` or `CUR_STATE` without `cur_qp_state`; a
    ///   transition not in the table, a required attribute missing or one the transition does
    ///   not take; `CUR_STATE` naming a state other than RTR, RTS, SQD and SQE; leaving SQD
    ///   for any state but ERROR while requests sent are unacknowledged; `PORT` or `AV` on a
    ///   port the device does not have (rxe and the simulator have port 1 only); `PATH_MTU`
    ///   above 4096 (5); `MAX_QP_RD_ATOMIC` above the device's 128; `TIMEOUT` above 31; `ALT_PATH` on RoCE (the kernel bans alternate
    ///   paths there); `AV` whose destination is no host of the fabric (simulator).
    /// * EOPNOTSUPP: bits outside [`QpAttrMask::STANDARD`] (`RATE_LIMIT`), which rxe and siw
    ///   refuse; `ALT_PATH` on the simulator's InfiniBand devices (alternate paths are not
    ///   modelled).
    fn modify_qp_with_mask(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;

    /// `ibv_query_qp(qp, ...)` for the QP's state. siw on Linux 6.1 reads RESET in every
    /// state; on 6.12 its IDLE reads INIT and its CLOSING SQD (measured, tests/BEDS.md).
    fn query_qp_state(&self, qp: QpHandle) -> Result<QpState>;

    /// `ibv_query_qp(qp, ..., IBV_QP_CAP, ...)`: the capacities the device made of those asked
    /// for, which may be larger (C's `ibv_create_qp` writes back the same into `attr->cap`,
    /// except the queue depths on rxe of Linux 6.1, which it leaves as asked, and everything
    /// on siw, which writes back nothing). Every
    /// queue takes this many requests before a post fails with ENOMEM. On rxe (and the
    /// simulator's RoCE and InfiniBand devices) a queue asked for `n` requests holds the next
    /// power of two above `n`, minus one (16 → 31), and a send request has room for
    /// `max_send_sge` entries or `max_inline_data` bytes, whichever is larger (one entry:
    /// 16 inline bytes); siw (and the simulator's iWARP devices) rounds each depth up to a
    /// power of two, keeps the entries asked, and takes 80 inline bytes on every QP (more
    /// asked is EINVAL at creation).
    fn query_qp_cap(&self, qp: QpHandle) -> Result<QpCap>;

    /// The QP's number (`qp->qp_num`), what `connect` and `accept` announce for an external
    /// QP.
    fn qp_number(&self, qp: QpHandle) -> Result<u32>;

    /// `ibv_create_ah(pd, attr)`: an address handle for UD sends from QPs of `pd`, from the
    /// `ah_attr` a UD ESTABLISHED or a MULTICAST_JOIN carries (a group's GID reaches every
    /// member). An address that leads to no host is taken; datagrams to it are lost. On
    /// InfiniBand a handle without a global route goes to the port of LID `dlid`.
    ///
    /// * EINVAL: `port_num` is not a port of the PD's device (0 is taken as 1), or the
    ///   device is RoCE and the address has no global route (`is_global` false), as the
    ///   kernel refuses it.
    fn create_ah(&self, pd: PdHandle, attr: &AhAttr) -> Result<AhHandle>;

    /// `ibv_create_ah_from_wc(pd, wc, grh, port)`: an address handle back to the sender of
    /// the UD receive `wc`, as libibverbs builds it: the destination LID `wc.slid`, service
    /// level `wc.sl` and source path bits `wc.dlid_path_bits`, and, when the receive has a
    /// GRH (`wc.grh`), the global route from the header `grh` the receive placed in the
    /// first [`super::GRH_LEN`] bytes of its buffer (on RoCE over IPv4 the IPv4 header in its
    /// last 20 bytes, as rxe places it). Without a GRH (an InfiniBand datagram through a
    /// local address handle) the handle is LID-routed and `grh` is not read. With
    /// `remote_qpn` `wc.src_qp` it answers the sender.
    ///
    /// * EINVAL: `wc` is not a successful receive, `grh` is neither an IB GRH nor rxe's IPv4
    ///   header, or there is no GRH on a RoCE device (the kernel refuses an address handle
    ///   without a global route on RoCE, as libibverbs passes it on).
    fn create_ah_from_wc(
        &self,
        pd: PdHandle,
        wc: &super::WorkCompletion,
        grh: &[u8; super::GRH_LEN as usize],
    ) -> Result<AhHandle>;

    /// `ibv_destroy_ah`. Posted sends keep their destination (the device copied it).
    fn destroy_ah(&self, ah: AhHandle) -> Result<()>;

    /// `ibv_post_send(qp, wr, ...)`. The local bytes are checked when the device takes the
    /// request: a bad key or range completes it with LOC_PROT_ERR and the QP enters ERROR.
    ///
    /// On iWARP (siw, and the simulator's iWARP devices) a SEND or RDMA WRITE completes
    /// SUCCESS as soon as its bytes are handed to TCP, inside this call, before the peer has
    /// them; there are no RNR or transport retry errors: a message the peer cannot take (no
    /// receive posted, a bad rkey) makes the peer terminate the connection, which both sides
    /// see as DISCONNECTED with their QPs in ERROR (measured, tests/BEDS.md).
    ///
    /// On a UD QP a send (`wr.ud`) is unreliable: it completes SUCCESS once transmitted,
    /// whether or not a receiver takes it; a receiver without a posted receive, or whose
    /// qkey differs, drops it. A receive smaller than [`super::GRH_LEN`] + the payload is the
    /// driver's: LOC_LEN_ERR on an InfiniBand HCA (the QP stays usable); on rxe, LOC_QP_OP_ERR
    /// with the receiver's QP in ERROR on Linux 6.1, and on 6.12 the datagram dropped with
    /// the receive kept for the next one (REM_INV_REQ_ERR for a receive from an SRQ).
    ///
    /// On RC a send longer than the receive it meets fails that receive and moves both QPs
    /// to ERROR: LOC_LEN_ERR there and REM_INV_REQ_ERR here on an InfiniBand HCA; on rxe
    /// (Linux 6.1 and 6.12), which finds the overflow only as it copies, LOC_QP_OP_ERR there
    /// and REM_OP_ERR here. On UC the sender completes SUCCESS whatever happens: rxe fails the
    /// receive with LOC_QP_OP_ERR and moves the receiver's QP to ERROR (measured); the
    /// simulator's InfiniBand devices drop the message and keep the receive.
    ///
    /// The atomics ([`super::SendOp::AtomicCmpAndSwp`], [`super::SendOp::AtomicFetchAndAdd`])
    /// have no librdmacm helper (rdma_verbs.h has none): this is their entry point. On RC
    /// (rxe, the simulator's RoCE and InfiniBand devices) the responder operates on its 8
    /// bytes exactly once, a lost acknowledgement replaying the saved value before rather
    /// than operating again; the value before lands in the local entries. A region without
    /// `IBV_ACCESS_REMOTE_ATOMIC` is a REM_ACCESS_ERR; a responder QP without remote atomic
    /// access or without responder resources (`max_dest_rd_atomic` 0) a REM_INV_REQ_ERR. On
    /// UC the post is taken and the request completes with LOC_QP_OP_ERR (as a read does).
    /// rxe's requester sends reads and atomics only within the QP's `max_rd_atomic`
    /// (rounded up to a power of two), the rest of the send queue waiting behind them: a QP
    /// whose peer accepted with no responder resources gets 0 from the CM and never sends
    /// them (measured; the simulator keeps the same bound on RoCE and InfiniBand, and a
    /// blocked wait for such a completion is a deadlock there, tests/BEDS.md).
    ///
    /// * EINVAL for an atomic: entries shorter than 8 bytes together, a `remote_addr` not
    ///   8-byte aligned (librxe's checks), inline (the simulator's and this crate's choice:
    ///   the value before needs registered memory), on a UD QP, or on siw (libsiw has no
    ///   opcode for it; its devices report `atomic_cap` NONE).
    /// * EINVAL: the QP is in RESET, more entries than `max_send_sge`, entries longer than
    ///   2^31 bytes together (the largest message, as rxe checks it), inline bytes above
    ///   `max_inline_data` or for an RDMA read; both capacities as the device sized the send
    ///   queue, which libibverbs would hand back in `attr->cap`: room for `max_send_sge`
    ///   entries of 16 bytes or `max_inline_data` bytes, whichever is larger, is room for
    ///   either (rxe; one entry and no inline bytes asked for still send 16 bytes inline); on a UD QP: no `wr.ud`, an operation other
    ///   than a send, an address handle of another PD, or a payload above the port's MTU
    ///   (which rxe would report as sent and drop); on a connected QP: a `wr.ud`.
    /// * EINVAL (rxe, the simulator's RoCE and InfiniBand devices): a QP in INIT or RTR, not
    ///   yet RTS, e.g. a send posted before the connection is established, or on a UD QP made
    ///   apart from ids before it was moved to RTS. The request is written to the send queue
    ///   all the same and stays there: it goes with the next post that succeeds, before that
    ///   post's request (reaching RTS sends nothing), and ERROR flushes it.
    /// * ENOTCONN (siw, the simulator's iWARP devices): the same post before RTS. The request
    ///   keeps its ring slot, and siw never takes it: later posts succeed, but nothing of the
    ///   send queue is sent, completed or flushed again (the receive queue still is).
    /// * EBADF: `wr.ud`'s address handle is not live.
    /// * ENOMEM: the send queue holds `max_send_wr` requests.
    fn post_send(&self, qp: QpHandle, wr: &SendWr<'_>) -> Result<()>;

    /// `ibv_post_recv(qp, wr, ...)`.
    ///
    /// * EINVAL: the QP is in RESET, more entries than `max_recv_sge`, or entries of 2^31
    ///   bytes or more together (rxe's check: no message is that long); the QP takes its
    ///   receives from an SRQ (it has no receive queue: librxe refuses it so); on iWARP (siw,
    ///   and the simulator's iWARP devices) a receive of no entries, as on an SRQ there
    ///   (libsiw takes 1 to 6; rxe takes an empty receive, for messages of no bytes).
    /// * ENOMEM: the receive queue holds `max_recv_wr` requests.
    fn post_recv(&self, qp: QpHandle, wr: &RecvWr<'_>) -> Result<()>;

    /// The bytes the entries of `sgl` name, gathered in order, as a device copies an inline
    /// request's entries when it is posted (`IBV_SEND_INLINE` over a list: what
    /// [`post_sendv`](DataPath::post_sendv) and [`post_writev`](DataPath::post_writev) send
    /// inline). Each entry must lie inside a live region of `qp`'s device that its `lkey`
    /// names (any PD); C's driver reads the address and ignores the key, cmtwin reads only
    /// registered memory.
    ///
    /// * EINVAL (`ibv_post_send`): an entry whose key names no region of the device, or
    ///   whose bytes are not inside it.
    fn inline_bytes(&self, qp: QpHandle, sgl: &[Sge]) -> Result<Vec<u8>>;

    /// `ibv_create_srq(pd, attr)`: a shared receive queue on the PD's device, and the
    /// attributes granted as `ibv_create_srq` writes them back into `attr->attr`. QPs made
    /// with it in [`QpInitAttrEx::srq`] take their receives from it, any of them the oldest
    /// posted receive. A QP entering ERROR leaves the SRQ's receives where they are (only
    /// one the QP had taken is flushed); rxe on Linux 6.1 raises no
    /// IBV_EVENT_QP_LAST_WQE_REACHED then, rxe on 6.12 raises it once for that QP (both
    /// measured; the simulator follows its kernel profile), an InfiniBand HCA raises it (the
    /// IB specification's affiliated event; so does the simulated InfiniBand device on every
    /// profile); an empty SRQ answers a send with RNR NAKs, as an
    /// empty receive queue does. A region a posted receive names cannot be deregistered
    /// (EBUSY) until its completion is polled (cmtwin-verbs) or queued (the simulator), or the
    /// SRQ is destroyed. The limit (`srq_limit`, 0: not
    /// armed) raises IBV_EVENT_SRQ_LIMIT_REACHED (`get_async_event`, naming the SRQ) once,
    /// when a message takes a receive and fewer than the limit are left, and disarms it.
    ///
    /// rxe (and the simulator's RoCE and InfiniBand devices) writes back `max_wr` as asked
    /// (0 sge taken as 1) and holds the next power of two above `max_wr` minus one, what
    /// `query_srq` reads; it does not check the limit at creation. siw (and the simulator's
    /// iWARP devices) rounds `max_wr` up to a power of two and writes that back, and refuses
    /// a limit above `max_wr`.
    ///
    /// * EINVAL: `max_wr` 0 or above the device's `max_srq_wr`, `max_sge` above its
    ///   `max_srq_sge` (`query_device`); on iWARP `srq_limit` above `max_wr`.
    fn create_srq(&self, pd: PdHandle, attr: &SrqAttr) -> Result<(SrqHandle, SrqAttr)>;

    /// `ibv_modify_srq(srq, attr, mask)`: with [`SrqAttrMask::LIMIT`] arms the limit at
    /// `attr.srq_limit` (0 disarms it; an SRQ already below it raises nothing until a message
    /// takes a receive); with [`SrqAttrMask::MAX_WR`] resizes the queue to hold `attr.max_wr`
    /// receives (rounded as at creation), keeping those posted. Other bits are ignored, as
    /// rxe ignores them.
    ///
    /// * EINVAL (rxe's `rxe_srq_chk_attr`): `max_wr` 0 or above the device's `max_srq_wr`,
    ///   below the armed limit, or below the receives posted; `srq_limit` above the
    ///   device's `max_srq_wr` or above what the queue holds (`query_srq`'s `max_wr`).
    /// * EOPNOTSUPP: `MAX_WR` on iWARP (siw does not resize an SRQ).
    fn modify_srq(&self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()>;

    /// `ibv_query_srq`: what the queue holds (`max_wr`, on rxe the power of two above what
    /// was asked, minus one), its entries per receive and its limit (0 once it fired).
    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr>;

    /// `ibv_destroy_srq`: its posted receives are discarded without completions (their
    /// regions free again).
    ///
    /// * EBUSY: a QP still takes its receives from it (destroy the QP first), or it is an
    ///   id's (`destroy_id_srq` destroys it).
    fn destroy_srq(&self, srq: SrqHandle) -> Result<()>;

    /// `ibv_post_srq_recv(srq, wr, ...)`: a receive any attached QP may consume.
    ///
    /// * EINVAL: more entries than the SRQ's `max_sge`, or entries of 2^31 bytes or more
    ///   together.
    /// * ENOMEM: the SRQ holds as many receives as `query_srq`'s `max_wr`.
    fn post_srq_recv(&self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<()>;

    /// `rdma_create_srq(id, pd, attr)`: an SRQ as `create_srq` makes it, in `pd` or, with
    /// `None`, the id's PD ([`pd`](DataPath::pd)), kept as the id's (`id->srq`): a QP the id
    /// makes afterwards takes its receives from it, and `post_recv_msg` posts to it.
    ///
    /// An SRQ made after the id's QP is not that QP's (librdmacm gives it none either).
    ///
    /// * EINVAL: the id already has an SRQ (librdmacm would lose the first), or `pd` is on
    ///   another device than the id.
    /// * The errnos of `pd` and `create_srq`.
    fn create_id_srq(
        &self,
        id: IdHandle,
        pd: Option<PdHandle>,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr)>;

    /// `rdma_destroy_srq(id)`: destroys the id's SRQ (`id->srq` becomes NULL).
    ///
    /// * EINVAL: the id has no SRQ.
    /// * EBUSY: a QP still takes its receives from it (the id's: `destroy_qp` first).
    fn destroy_id_srq(&self, id: IdHandle) -> Result<()>;

    /// The id's SRQ (`id->srq`), if it has one (`create_id_srq`).
    fn srq(&self, id: IdHandle) -> Result<Option<SrqHandle>>;

    /// `ibv_get_async_event` on the devices of this backend (then `ibv_ack_async_event`):
    /// COMM_EST when a QP of an InfiniBand HCA (and of the simulator's InfiniBand devices)
    /// receives its first message (rxe and siw raise none: their drivers have no such event),
    /// CQ_ERR when a CQ overflows.
    ///
    /// * EAGAIN, ETIMEDOUT, EDEADLK: as `get_cq_event`.
    fn get_async_event(&self, wait: Wait) -> Result<VerbsAsyncEvent>;

    /// Which of `sources` are ready, without taking anything: `poll(2)` on the fds of CM
    /// event channels, completion channels and the devices' asynchronous events together, as
    /// an event loop waits for whichever comes first (a CM event, a CQ event, an asynchronous
    /// event). The ready ones come back in the order given; at the end of the wait, an empty
    /// list (as `poll(2)` returns 0), never EAGAIN or ETIMEDOUT. A source is ready when its
    /// fetch (`get_cm_event`, `get_cq_event`, `get_async_event`) would not wait; on
    /// cmtwin-verbs a CM channel is ready when its fd is readable, and librdmacm may still
    /// discard that event (see `CmBackend::poll_channels`); on the simulator readiness is
    /// exact. A CQ is not a source: arm it with `req_notify_cq` and poll its channel.
    ///
    /// * EINVAL: no source given. EBADF: a channel or completion channel is not live
    ///   (destroyed, foreign, or destroyed during the wait).
    /// * EDEADLK (simulator): a blocking wait nothing can end.
    fn poll_sources(&self, sources: &[PollSource], wait: Wait) -> Result<Vec<PollSource>>;

    /// `ibv_query_device` on the device named `device` (a [`crate::DeviceInfo::name`]
    /// from `devices` or `id_device`). Taking the name rather than an id lets a program size
    /// its queues before it has one, as it would from `rdma_get_devices`' contexts.
    /// The answer bounds what the device takes: a QP's queues above `max_qp_wr` requests or
    /// `max_sge` entries, a CQ above `max_cqe` entries, `responder_resources` above
    /// `max_qp_rd_atom` and `initiator_depth` above `max_qp_init_rd_atom` are refused.
    /// On the simulator each transport and kernel profile answers what the device it stands
    /// for answers (rxe on RoCE, siw on iWARP, measured on Linux 6.1 and 6.12; a
    /// ConnectX-like profile on InfiniBand, which no bed measures: tests/BEDS.md).
    ///
    /// * ENODEV: no device of that name on the host (never one, or removed).
    fn query_device(&self, device: &str) -> Result<crate::DeviceAttr>;

    /// `ibv_query_port` on port `port` of the device named `device`. Ports count from 1.
    ///
    /// * EINVAL: `port` is not a port of the device (0, or above `phys_port_cnt`: the
    ///   kernel's `rdma_is_port_valid` in `ib_query_port`, measured on rxe and siw).
    /// * ENODEV: no device of that name on the host.
    fn query_port(&self, device: &str, port: u8) -> Result<crate::PortAttr>;

    // ----- librdmacm's rdma_verbs.h helpers, built on the calls above ---------------------

    /// `rdma_reg_msgs`: registers `buffer` in the id's PD for sends and receives.
    ///
    /// * The errnos of `pd` and `reg_mr`.
    fn reg_msgs(&self, id: IdHandle, buffer: Vec<u8>) -> Result<MemoryRegion> {
        let pd = self.pd(id)?;
        self.reg_mr(pd, buffer, AccessFlags::LOCAL_WRITE)
    }

    /// `rdma_reg_read`: registers `buffer` in the id's PD for the peer's RDMA reads.
    ///
    /// * The errnos of `pd` and `reg_mr`.
    fn reg_read(&self, id: IdHandle, buffer: Vec<u8>) -> Result<MemoryRegion> {
        let pd = self.pd(id)?;
        self.reg_mr(
            pd,
            buffer,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
    }

    /// `rdma_reg_write`: registers `buffer` in the id's PD for the peer's RDMA writes.
    ///
    /// * The errnos of `pd` and `reg_mr`.
    fn reg_write(&self, id: IdHandle, buffer: Vec<u8>) -> Result<MemoryRegion> {
        let pd = self.pd(id)?;
        self.reg_mr(
            pd,
            buffer,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
    }

    /// `rdma_post_recv`: a receive into `len` bytes of `mr` from `offset` (named apart from
    /// `post_recv`, which is `ibv_post_recv`), posted to the id's SRQ if it has one
    /// (`ibv_post_srq_recv`), else to its QP.
    ///
    /// * EINVAL: the id has neither SRQ nor QP, or the bytes are not inside the region
    ///   (librdmacm asserts it).
    /// * The errnos of `post_recv` and `post_srq_recv`.
    fn post_recv_msg(
        &self,
        id: IdHandle,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: u32,
    ) -> Result<()> {
        let queue = super::helpers::recv_queue(self, id)?;
        let sge = [super::helpers::sge_in(queue.call(), mr, offset, len)?];
        queue.post(
            self,
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        )
    }

    /// `rdma_post_send(id, context, addr, length, mr, flags)`: a send of `len` bytes of `mr`
    /// from `offset` (named apart from `post_send`, which is `ibv_post_send`), with C's
    /// `flags` passed on as they are ([`SendFlags`]): [`SendFlags::NONE`] on a QP made with
    /// `sq_sig_all` false reports no completion when it succeeds (pass
    /// [`SendFlags::SIGNALED`] to get one); [`SendFlags::INLINE`] copies the bytes from the
    /// region at post time, up to the QP's granted `max_inline_data`.
    ///
    /// * EINVAL: the id has no QP, or the bytes are not inside the region.
    /// * The errnos of `post_send` (EINVAL for inline bytes above `max_inline_data`).
    fn post_send_msg(
        &self,
        id: IdHandle,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: u32,
        flags: SendFlags,
    ) -> Result<()> {
        let op = super::SendOp::Send;
        super::helpers::post_one(self, id, wr_id, op, (mr, offset, len), flags, |_| {})
    }

    /// `rdma_post_ud_send(id, context, addr, length, mr, flags, ah, remote_qpn)`: a UD send
    /// of `len` bytes of `mr` from `offset` to QP `remote_qpn` through `ah`, with librdmacm's
    /// qkey ([`crate::RDMA_UDP_QKEY`]) and C's `flags` as `post_send_msg` takes them.
    ///
    /// * EINVAL: the id has no QP, or the bytes are not inside the region.
    /// * The errnos of `post_send`.
    #[allow(clippy::too_many_arguments)]
    fn post_ud_send(
        &self,
        id: IdHandle,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: u32,
        flags: SendFlags,
        ah: AhHandle,
        remote_qpn: u32,
    ) -> Result<()> {
        let dest = super::UdDest {
            ah,
            remote_qpn,
            remote_qkey: crate::RDMA_UDP_QKEY,
        };
        let op = super::SendOp::Send;
        let shape = |wr: &mut SendWr<'_>| wr.ud = Some(dest);
        super::helpers::post_one(self, id, wr_id, op, (mr, offset, len), flags, shape)
    }

    /// `rdma_post_read(id, context, addr, length, mr, flags, remote_addr, rkey)`: reads `len`
    /// bytes of the peer's memory at `remote_addr` (its region's `rkey`) into `mr` from
    /// `offset`, with C's `flags` as `post_send_msg` takes them ([`SendFlags::INLINE`] is
    /// refused for a read with EINVAL by cmtwin on both backends: the verbs define inline
    /// data for sends and writes only, and rxe's provider checks only the inline length).
    ///
    /// * EINVAL: the id has no QP, or the local bytes are not inside the region.
    /// * The errnos of `post_send`.
    #[allow(clippy::too_many_arguments)]
    fn post_read(
        &self,
        id: IdHandle,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: u32,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let op = super::SendOp::RdmaRead { remote_addr, rkey };
        super::helpers::post_one(self, id, wr_id, op, (mr, offset, len), flags, |_| {})
    }

    /// `rdma_post_write(id, context, addr, length, mr, flags, remote_addr, rkey)`: writes
    /// `len` bytes of `mr` from `offset` to the peer's memory at `remote_addr` (its region's
    /// `rkey`), with C's `flags` as `post_send_msg` takes them.
    ///
    /// * EINVAL: the id has no QP, or the local bytes are not inside the region.
    /// * The errnos of `post_send`.
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &self,
        id: IdHandle,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: u32,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let op = super::SendOp::RdmaWrite { remote_addr, rkey };
        super::helpers::post_one(self, id, wr_id, op, (mr, offset, len), flags, |_| {})
    }

    /// `rdma_post_recvv(id, context, sgl, nsge)`: a receive scattering into the entries of
    /// `sgl` in order (each made with [`MemoryRegion::sge`]), posted to the id's SRQ if it
    /// has one (`ibv_post_srq_recv`), else to its QP, as [`post_recv_msg`](DataPath::post_recv_msg)
    /// posts. No entry is legal, as in libibverbs and rxe: such a receive takes only a
    /// message of no bytes (a longer one fails it: LOC_LEN_ERR on an InfiniBand HCA,
    /// LOC_QP_OP_ERR on rxe, as [`post_send`](DataPath::post_send) says).
    ///
    /// * EINVAL: the id has neither SRQ nor QP; more entries than the QP's granted
    ///   `max_recv_sge` (`query_qp_cap`) or the SRQ's `max_sge`, as rxe refuses them.
    /// * The errnos of `post_recv` and `post_srq_recv` (ENOMEM: the queue is full).
    fn post_recvv(&self, id: IdHandle, wr_id: u64, sgl: &[Sge]) -> Result<()> {
        super::helpers::recv_queue(self, id)?.post(
            self,
            &RecvWr {
                wr_id,
                sg_list: sgl,
            },
        )
    }

    /// `rdma_post_sendv(id, context, sgl, nsge, flags)`: a send gathering the entries of
    /// `sgl` in order into one message, with C's `flags` as [`post_send_msg`](DataPath::post_send_msg)
    /// takes them. No entry is legal, as in libibverbs and rxe: a message of no bytes, which
    /// consumes one receive of the peer (completing with `byte_len` 0).
    ///
    /// With [`SendFlags::INLINE`] the entries' bytes are copied when posted
    /// ([`inline_bytes`](DataPath::inline_bytes)): the regions may change right after.
    ///
    /// * EINVAL: the id has no QP; more entries than the QP's granted `max_send_sge`
    ///   (`query_qp_cap`), as rxe refuses them; with [`SendFlags::INLINE`], more bytes than
    ///   its `max_inline_data`, or an entry outside the region its key names.
    /// * The errnos of `post_send` (ENOMEM: the send queue is full).
    fn post_sendv(&self, id: IdHandle, wr_id: u64, sgl: &[Sge], flags: SendFlags) -> Result<()> {
        let op = super::SendOp::Send;
        let call = ("rdma_post_sendv", id, wr_id);
        super::helpers::post_entries(self, call, op, sgl, flags)
    }

    /// `rdma_post_readv(id, context, sgl, nsge, flags, remote_addr, rkey)`: reads the sum of
    /// the entries' lengths from the peer's memory at `remote_addr` (its region's `rkey`),
    /// scattered into the entries of `sgl` in order, with C's `flags` as
    /// [`post_send_msg`](DataPath::post_send_msg) takes them. No entry is legal (a read of
    /// no bytes).
    ///
    /// * EINVAL: the id has no QP; more entries than the QP's granted `max_send_sge`;
    ///   [`SendFlags::INLINE`] (the verbs define inline data for sends and writes only;
    ///   rxe's provider checks only the inline length, so cmtwin refuses it on both backends,
    ///   as `post_read` does).
    /// * The errnos of `post_send`.
    fn post_readv(
        &self,
        id: IdHandle,
        wr_id: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let op = super::SendOp::RdmaRead { remote_addr, rkey };
        let call = ("rdma_post_readv", id, wr_id);
        super::helpers::post_entries(self, call, op, sgl, flags)
    }

    /// `rdma_post_writev(id, context, sgl, nsge, flags, remote_addr, rkey)`: writes the
    /// entries of `sgl`, gathered in order, to the peer's memory at `remote_addr` (its
    /// region's `rkey`), with C's `flags` as [`post_send_msg`](DataPath::post_send_msg) takes
    /// them. No entry is legal (a write of no bytes).
    ///
    /// * EINVAL: as for [`post_sendv`](DataPath::post_sendv) (no QP, too many entries; with
    ///   [`SendFlags::INLINE`], which copies the entries' bytes when posted, too many bytes or
    ///   an entry outside its region).
    /// * The errnos of `post_send`.
    fn post_writev(
        &self,
        id: IdHandle,
        wr_id: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let op = super::SendOp::RdmaWrite { remote_addr, rkey };
        let call = ("rdma_post_writev", id, wr_id);
        super::helpers::post_entries(self, call, op, sgl, flags)
    }

    /// `rdma_post_send(id, context, addr, length, NULL, flags | IBV_SEND_INLINE)`: a send of
    /// `bytes`, copied when posted from memory that is not registered (C passes no region:
    /// no key is used). [`SendFlags::INLINE`] is implied; the other `flags` are taken as
    /// [`post_send_msg`](DataPath::post_send_msg) takes them. No bytes is a message of none.
    ///
    /// * EINVAL: the id has no QP; more bytes than the QP's granted `max_inline_data`
    ///   (`query_qp_cap`).
    /// * The errnos of `post_send`.
    fn post_send_inline(
        &self,
        id: IdHandle,
        wr_id: u64,
        bytes: &[u8],
        flags: SendFlags,
    ) -> Result<()> {
        let op = super::SendOp::Send;
        super::helpers::post_inline(self, (id, wr_id), op, bytes, flags, |_| {})
    }

    /// `rdma_post_ud_send(id, context, addr, length, NULL, flags | IBV_SEND_INLINE, ah,
    /// remote_qpn)`: a UD send of `bytes`, copied when posted, to QP `remote_qpn` through
    /// `ah`, with librdmacm's qkey ([`crate::RDMA_UDP_QKEY`]); `flags` as for
    /// [`post_send_inline`](DataPath::post_send_inline).
    ///
    /// * EINVAL: the id has no QP; more bytes than the QP's granted `max_inline_data`.
    /// * The errnos of `post_send` (on a UD QP).
    fn post_ud_send_inline(
        &self,
        id: IdHandle,
        wr_id: u64,
        bytes: &[u8],
        flags: SendFlags,
        ah: AhHandle,
        remote_qpn: u32,
    ) -> Result<()> {
        let dest = super::UdDest {
            ah,
            remote_qpn,
            remote_qkey: crate::RDMA_UDP_QKEY,
        };
        let op = super::SendOp::Send;
        let shape = |wr: &mut SendWr<'_>| wr.ud = Some(dest);
        super::helpers::post_inline(self, (id, wr_id), op, bytes, flags, shape)
    }

    /// `rdma_post_write(id, context, addr, length, NULL, flags | IBV_SEND_INLINE,
    /// remote_addr, rkey)`: writes `bytes`, copied when posted, to the peer's memory at
    /// `remote_addr` (its region's `rkey`); `flags` as for
    /// [`post_send_inline`](DataPath::post_send_inline).
    ///
    /// * EINVAL: the id has no QP; more bytes than the QP's granted `max_inline_data`.
    /// * The errnos of `post_send`.
    fn post_write_inline(
        &self,
        id: IdHandle,
        wr_id: u64,
        bytes: &[u8],
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        let op = super::SendOp::RdmaWrite { remote_addr, rkey };
        super::helpers::post_inline(self, (id, wr_id), op, bytes, flags, |_| {})
    }

    /// `rdma_get_send_comp`: the next completion of the id's send CQ, waiting on its channel
    /// (poll, arm, poll again, wait for the CQ event and acknowledge it).
    ///
    /// * EINVAL: the id has no QP, or its send CQ has no completion channel.
    /// * The errnos of `poll_cq`, `req_notify_cq`, `get_cq_event` (blocking).
    fn get_send_comp(&self, id: IdHandle) -> Result<WorkCompletion> {
        self.get_send_comp_waiting(id, Wait::Block)
    }

    /// [`get_send_comp`](DataPath::get_send_comp) with a bounded wait (not in librdmacm,
    /// whose helper blocks until a completion comes): `Wait::Timeout(d)` gives up after `d`
    /// in all (ETIMEDOUT), `Wait::NonBlocking` at once (EAGAIN), `Wait::Block` is
    /// `get_send_comp`. A program that cannot be sure its send will ever complete (a peer
    /// that may close before acknowledging it, when the retry count means "without end")
    /// waits so, then decides.
    ///
    /// * ETIMEDOUT, EAGAIN: no completion within the wait.
    /// * The errnos of `get_send_comp`.
    fn get_send_comp_waiting(&self, id: IdHandle, wait: Wait) -> Result<WorkCompletion> {
        let cqs = super::helpers::cqs_of(self, crate::Call::PollCq, id)?;
        super::helpers::next_completion(self, cqs.send_cq, cqs.send_channel, wait)
    }

    /// `rdma_get_recv_comp`: the next completion of the id's receive CQ, waiting as
    /// `get_send_comp` does.
    ///
    /// * The errnos of `get_send_comp`.
    fn get_recv_comp(&self, id: IdHandle) -> Result<WorkCompletion> {
        self.get_recv_comp_waiting(id, Wait::Block)
    }

    /// [`get_recv_comp`](DataPath::get_recv_comp) with a bounded wait, as
    /// [`get_send_comp_waiting`](DataPath::get_send_comp_waiting).
    ///
    /// * ETIMEDOUT, EAGAIN: no completion within the wait.
    /// * The errnos of `get_recv_comp`.
    fn get_recv_comp_waiting(&self, id: IdHandle, wait: Wait) -> Result<WorkCompletion> {
        let cqs = super::helpers::cqs_of(self, crate::Call::PollCq, id)?;
        super::helpers::next_completion(self, cqs.recv_cq, cqs.recv_channel, wait)
    }
}
