//! The random data path calls: one [`Op`] per verbs call (or librdmacm helper), with handles
//! picked from pools by index and the arguments that matter as small choices.

/// A handle picked from a pool: `idx` modulo the pool's size (every object ever made, live and
/// destroyed, and the other fabric's); `owner` false calls on the other host's backend (a
/// foreign handle there).
#[derive(Clone, Copy, Debug, arbitrary::Arbitrary)]
pub struct Pick {
    /// Index into the pool.
    pub idx: usize,
    /// Call on the object's own host (else on the other host).
    pub owner: bool,
}

/// One scatter/gather entry over a region: `len` bytes at `offset - 4` from the region's
/// start (offsets 0 to 3 start before it), under key choice `key`.
#[derive(Clone, Copy, Debug, arbitrary::Arbitrary)]
pub struct SgeSpec {
    /// The region: three times in four (`mr % 4 != 0`) the `mr / 4`-th live region of the
    /// QP's PD, if there is one; else index `mr` into the region pool.
    pub mr: usize,
    /// 0 to 5: the region's lkey; 6: lkey + 1 (no region, or another's); 7: 0xdead_beef.
    pub key: u8,
    /// The entry starts `offset - 4` bytes into the region.
    pub offset: u16,
    /// Its length (0, inside, beyond, huge).
    pub len: u32,
}

/// The remote part of an RDMA write or read: `offset - 4` bytes into a region under key
/// choice `key` (as [`SgeSpec::key`], with the rkey).
#[derive(Clone, Copy, Debug, arbitrary::Arbitrary)]
pub struct RemoteSpec {
    /// The region: three times in four a live region of the other host, if there is one
    /// (as [`SgeSpec::mr`]); else index `mr` into the pool (one's own, stale, foreign).
    pub mr: usize,
    /// Key choice, as for an entry.
    pub key: u8,
    /// The remote address is `offset - 4` bytes into the region.
    pub offset: u16,
}

/// A UD destination: an address handle of the pool, a QP number and a qkey.
#[derive(Clone, Copy, Debug, arbitrary::Arbitrary)]
pub struct UdSpec {
    /// Index into the address handle pool.
    pub ah: usize,
    /// 0: the peer UD QP's number, 1: the multicast QPN, 2: 0x123 (no QP), 3: the QP's own.
    pub qpn: u8,
    /// The right qkey (else 0).
    pub right_qkey: bool,
}

/// QP capacities, as small choices.
#[derive(Clone, Copy, Debug, arbitrary::Arbitrary)]
pub struct CapSpec {
    /// `max_send_wr` and `max_recv_wr` (0 included: refused).
    pub depth: u8,
    /// `max_send_sge` and `max_recv_sge`.
    pub sge: u8,
    /// `max_inline_data` (above the device's 256 included).
    pub inline: u16,
}

/// One random data path call, or a step of the fabric.
#[derive(Clone, Debug, arbitrary::Arbitrary)]
#[allow(missing_docs)] // the fields are named after the call's parameters
pub enum Op {
    /// `ibv_alloc_pd(id->verbs)`.
    AllocPd { id: Pick },
    /// `ibv_dealloc_pd`.
    DeallocPd { pd: Pick },
    /// `ibv_reg_mr` of `len` bytes (0 included) with access bits `access`.
    RegMr { pd: Pick, len: u16, access: u8 },
    /// `rdma_reg_msgs`, `rdma_reg_read` or `rdma_reg_write` (`kind` modulo 3).
    RegHelper { id: Pick, kind: u8, len: u16 },
    /// `ibv_dereg_mr`.
    DeregMr { mr: Pick },
    /// Reads `len` bytes of a region from `offset`.
    MrRead { mr: Pick, offset: u16, len: u16 },
    /// Writes `len` bytes of `byte` into a region at `offset`.
    MrWrite {
        mr: Pick,
        offset: u16,
        len: u16,
        byte: u8,
    },
    /// `ibv_create_comp_channel(id->verbs)`.
    CreateCompChannel { id: Pick },
    /// `ibv_destroy_comp_channel`.
    DestroyCompChannel { ch: Pick },
    /// `ibv_create_cq` with `cqe` entries and an optional channel of the pool.
    CreateCq {
        id: Pick,
        cqe: u32,
        channel: Option<usize>,
    },
    /// `ibv_destroy_cq`.
    DestroyCq { cq: Pick },
    /// `ibv_req_notify_cq`.
    ReqNotifyCq { cq: Pick, solicited_only: bool },
    /// `ibv_get_cq_event`, non-blocking (`wait_ms` 0) or with a timeout of `wait_ms`.
    GetCqEvent { ch: Pick, wait_ms: u8 },
    /// `ibv_ack_cq_events`.
    AckCqEvents { cq: Pick, count: u8 },
    /// `ibv_poll_cq` for up to `n` completions (0 included).
    PollCq { cq: Pick, n: u8 },
    /// `rdma_create_qp_ex` with a PD and CQs of the pools.
    CreateQpEx {
        id: Pick,
        pd: usize,
        send_cq: usize,
        recv_cq: usize,
        ud: bool,
        cap: CapSpec,
        sq_sig_all: bool,
    },
    /// `ibv_create_qp` apart from ids.
    CreateExternalQp {
        server: bool,
        pd: usize,
        send_cq: usize,
        recv_cq: usize,
        cap: CapSpec,
        sq_sig_all: bool,
    },
    /// `ibv_destroy_qp` of a QP apart from ids.
    DestroyExternalQp { qp: Pick },
    /// `rdma_destroy_qp`.
    DestroyQp { id: Pick },
    /// `rdma_init_qp_attr` to state `state` (modulo 7).
    InitQpAttr { id: Pick, state: u8 },
    /// `ibv_modify_qp` to state `state` (modulo 8; 7: none), with the attributes
    /// `rdma_init_qp_attr` gives for it (an even `attrs_of`: the QP's own id's, if it has
    /// one; else id `attrs_of / 2`'s) when there are any, and `timeout`, `retry` and `rnr`
    /// for RTS.
    ModifyQp {
        qp: Pick,
        state: u8,
        attrs_of: usize,
        timeout: u8,
        retry: u8,
        rnr: u8,
    },
    /// `ibv_modify_qp` to RESET (discarding its work), then INIT, RTR and RTS with the
    /// attributes `rdma_init_qp_attr` gives the QP's id (or id `attrs_of`).
    Reconnect { qp: Pick, attrs_of: usize },
    /// `ibv_query_qp` for the state.
    QueryQp { qp: Pick },
    /// `ibv_create_ah`: 0: to the server's UD QP, 1: all zero, 2: port 9, 3: an unknown GID.
    CreateAh { pd: Pick, attr: u8 },
    /// `ibv_create_ah_from_wc` of the latest UD receive (`garbage`: a corrupted header).
    CreateAhFromWc { pd: Pick, garbage: bool },
    /// `ibv_destroy_ah`.
    DestroyAh { ah: Pick },
    /// `ibv_post_send`: `op` modulo 5 is send, send with immediate, write, write with
    /// immediate, read; `inline` sends that many bytes inline instead of the entries.
    PostSend {
        qp: Pick,
        op: u8,
        sges: Vec<SgeSpec>,
        inline: Option<u16>,
        remote: RemoteSpec,
        ud: Option<UdSpec>,
        signaled: bool,
        solicited: bool,
    },
    /// `ibv_post_recv`.
    PostRecv { qp: Pick, sges: Vec<SgeSpec> },
    /// `count` signaled sends of one byte, to fill the send queue and the peer's receives.
    Flood { qp: Pick, count: u8, recv: bool },
    /// `rdma_post_recv` of `len` bytes of a region from `offset`.
    PostRecvMsg {
        id: Pick,
        mr: usize,
        offset: u16,
        len: u16,
    },
    /// `rdma_post_send`.
    PostSendMsg {
        id: Pick,
        mr: usize,
        offset: u16,
        len: u16,
        solicited: bool,
    },
    /// `rdma_post_ud_send` through an address handle of the pool.
    PostUdSend {
        id: Pick,
        mr: usize,
        offset: u16,
        len: u16,
        ud: UdSpec,
    },
    /// `rdma_post_read` (`write` false) or `rdma_post_write`.
    PostRdma {
        id: Pick,
        write: bool,
        mr: usize,
        offset: u16,
        len: u16,
        remote: RemoteSpec,
    },
    /// `rdma_get_send_comp` (`send`) or `rdma_get_recv_comp`, only when work is outstanding
    /// on the CQ (the helpers block).
    GetComp { id: Pick, send: bool },
    /// `ibv_get_async_event`, non-blocking or with a short timeout.
    GetAsyncEvent { server: bool, wait_ms: u8 },
    /// A new id bound to a host's address (a device, no QP).
    NewId { server: bool },
    /// `rdma_disconnect` (the QP enters ERROR).
    Disconnect { id: Pick },
    /// `rdma_destroy_id` (its QP goes with it).
    DestroyId { id: Pick },
    /// Removes a host's device (its QPs enter ERROR).
    RemoveDevice { server: bool },
    /// Loses the next `count` data packets.
    LosePackets { count: u8 },
    /// Runs the fabric for `us` microseconds of virtual time, times 2^`scale` (modulo 16).
    Run { us: u16, scale: u8 },
    /// `ibv_post_send` of an RDMA atomic: a fetch and add of `value` (`add`), else a compare
    /// and swap to `value`, comparing with the target's bytes as they are now (an even
    /// `compare`) or with `compare` itself; the value before lands in `sges` (8 bytes and
    /// more, fewer, none); `remote` aligned or not (`offset - 4` from a region's start);
    /// `remote.mr` three times in four picks among the other host's live regions with
    /// REMOTE_ATOMIC, if any; `inline` posts 8 bytes inline; `ud` adds a UD destination. (Drawn
    /// after the older ops, so that their encoding keeps its meaning.)
    PostAtomic {
        qp: Pick,
        add: bool,
        sges: Vec<SgeSpec>,
        remote: RemoteSpec,
        compare: u64,
        value: u64,
        inline: bool,
        ud: Option<UdSpec>,
        signaled: bool,
    },
    /// `ibv_modify_qp` of `qp_access_flags` alone (`access` modulo 16): a responder with or
    /// without remote write, read and atomic rights, in whatever state it is.
    ModifyQpAccess { qp: Pick, access: u8 },
}
