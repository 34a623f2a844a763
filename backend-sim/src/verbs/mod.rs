//! The verbs data path, modelled at the level of libibverbs' objects: protection domains,
//! memory regions (keys, device addresses, bounds, access, busy while work uses them),
//! completion queues shared by QPs with completion channels and arming, address handles, RC
//! QPs whose state the CM drives as librdmacm and the kernel drive it, and UD QPs with
//! unicast and multicast datagrams.
//!
//! * `rc.rs`: one RC QP as a sans-IO state machine (posts, CM-driven state changes, packets,
//!   its timer in; packets, completions, timers and COMM_EST out); `packet.rs` its wire
//!   format.
//! * `ud.rs`: one UD QP as a sans-IO state machine (posts and datagrams in; datagrams and
//!   completions out: unreliable, the GRH space and `src_qp` of UD receives);
//!   `machine.rs` a QP's machine of either kind; `address_handles.rs` `ibv_create_ah`,
//!   `ibv_create_ah_from_wc` and `ibv_destroy_ah`; `ud_wire.rs` datagrams on the data wire, unicast and to every member
//!   of a multicast group, the receiver's qkey check, the route header a receive gets.
//! * `objects.rs`: PDs, regions, CQs and completion channels (the calls that make, use and
//!   destroy them, and where completions and CQ events go).
//! * `qps.rs`: QPs on ids: creation, the CM's transitions (INIT at creation, RTR/RTS at
//!   `accept` and at the CONNECT_RESPONSE's processing, ERROR at `disconnect`, a fetched
//!   REJECTED and device removal); `posts.rs` the posts; `drive.rs` the machine's inputs
//!   with the regions it may touch, and its outputs carried out.
//! * `srq.rs`: shared receive queues (`ibv_create_srq` and its kin, `rdma_create_srq`): the
//!   SRQ keeps the receives; a QP attached to it is lent them for each input (`drive.rs`),
//!   which raises the SRQ's limit event.
//! * `device_profile.rs`: what each transport's device answers to `ibv_query_device` and
//!   `ibv_query_port` (rxe, siw, a ConnectX-like InfiniBand device), and the maxima enforced
//!   from the same answer; `devices.rs` the calls (`rdma_get_devices`, the queries, an id's
//!   device and port).
//! * `modify.rs`: the external-QP path: RC and UD QPs made apart from ids (`ibv_create_qp`),
//!   the CM's attributes for them (`rdma_init_qp_attr`) and explicit transitions
//!   (`ibv_modify_qp`).
//! * `iw_qp.rs`: the QP an iWARP connection's CM drives, the id's own or the external one its
//!   `connect` or `accept` named (`iw_get_qp`), and siw's moves of it; `tcp_timer.rs` TCP's
//!   retransmission timer under a siw QP; `tcp_orphan.rs` the socket a dropped siw connection
//!   leaves retransmitting its unacknowledged bytes, and the peer's FIN held behind them.
//! * `modify_mask.rs`: `ibv_modify_qp` with an attribute mask: the kernel's transition table,
//!   the kernel's, rxe's and siw's checks of values, the attributes applied, SQD.
//! * `wire.rs`: data packets between QPs, a path parallel to the CM's messages: the same
//!   latency and jitter (their own random streams), the fabric's random loss probability,
//!   their own FIFO links (a delayed CM message does not hold data back), targeted losses and
//!   delays (`Fabric::drop_data_packets`, `Fabric::delay_data_packets`, and the fault plans'
//!   `drop_data_packets` and `delay_data_packets` actions), and nothing to or from a removed
//!   device. Fault plans' per-kind chances apply to CM messages only.
//! * `backend.rs`: [`cmtwin::verbs::DataPath`] for `SimBackend`; `wait.rs` its blocking
//!   waits (CQ events, asynchronous events) through the scheduler; `stuck.rs` when the
//!   timeline holds nothing but RC sends retrying for ever in vain (after RNR NAKs with
//!   `rnr_retry` 7 at responders without a receive, or rxe's transport retries with
//!   `retry_count` 7 toward a peer that cannot answer), which blocked callers take as an
//!   empty timeline (EDEADLK).
//!
//! InfiniBand ports have LIDs (`topology::ib_lid`: 1 + the address's last byte, the one
//! source the CM's address handles and the completions' `slid` take them from); a UD receive
//! without GRH names the sender's LID, and a handle without destination GID goes by its LID.
//! Service levels, path bits and partition keys are one each: `sl`, `dlid_path_bits` and
//! `pkey_index` are 0, and a UD QP's INIT takes pkey index 0 and port 1 only.
//!
//! Not modelled (yet): XRC SRQs, atomics, memory windows, SQD, path-MTU segmentation (a UD send
//! above the port's 4096-byte MTU is refused), `ibv_attach_mcast` (a UD QP made apart from ids
//! sends to groups but receives from none), multicast joins' attachment delay (a membership
//! receives from the `rdma_join_multicast` call on, not from its MULTICAST_JOIN).

mod address_handles;
mod backend;
mod device_profile;
mod devices;
mod drive;
mod endpoint;
mod faults;
mod invariants;
mod iw_qp;
mod machine;
mod modify;
mod modify_mask;
mod objects;
mod packet;
mod posts;
mod process_exit;
mod qps;
mod rc;
mod readiness;
mod responder_resources;
mod srq;
mod stuck;
pub(crate) use stuck::EndlessRetries;
mod tcp_orphan;
mod tcp_timer;
mod ud;
mod ud_wire;
mod wait;
mod wire;

use crate::lazy_deque::LazyDeque;
use std::collections::{BTreeMap, VecDeque};

use cmtwin::verbs::{AccessFlags, VerbsAsyncEvent, WorkCompletion};

use crate::engine::timeline::{SimTime, TimerKey};
use crate::store::{BoxedStore, KeyMap, SlabStore, Store};
use crate::topology::{DevKey, HostKey};
use crate::world::IdKey;

pub(crate) use device_profile::{makes_qp_type, MAX_RD_ATOM};
pub(crate) use machine::QpMachine;
pub(crate) use packet::Packet;
pub(crate) use qps::{check_cap_maxima, check_librdmacm_cqs, device_cap};
pub(crate) use rc::RcQp;
pub(crate) use ud::{Datagram, UdQp};

/// Key of a PD, region, CQ, completion channel or QP (one serial counter for all of them).
pub(crate) type ObjKey = u64;

/// A protection domain.
pub(crate) struct Pd {
    pub host: HostKey,
    pub dev: DevKey,
    /// Regions and QPs using it.
    pub users: u32,
}

/// A registered memory region, owning its buffer.
pub(crate) struct Mr {
    pub host: HostKey,
    pub dev: DevKey,
    pub pd: ObjKey,
    pub key: u32,
    pub addr: u64,
    pub buf: Vec<u8>,
    pub access: AccessFlags,
    /// Posted, uncompleted requests' entries naming it.
    pub busy: u32,
}

/// A completion channel.
pub(crate) struct CompChannel {
    pub host: HostKey,
    pub dev: DevKey,
    /// CQ events not yet fetched, oldest first.
    pub events: LazyDeque<ObjKey>,
    /// CQs reporting to it.
    pub cqs: u32,
}

/// A completion queue.
pub(crate) struct Cq {
    pub host: HostKey,
    pub dev: DevKey,
    pub cqe: u32,
    pub channel: Option<ObjKey>,
    pub entries: LazyDeque<WorkCompletion>,
    /// Armed by `req_notify_cq` (`Some(solicited_only)`).
    pub armed: Option<bool>,
    /// CQ events fetched and not acknowledged.
    pub unacked: u32,
    /// QPs completing into it.
    pub users: u32,
    /// Made by `create_qp` for the id's QP, and destroyed with it.
    pub implicit: bool,
}

/// A QP (on an id, or made apart for the external-QP path): the machine and where it lives.
pub(crate) struct Qp {
    pub host: HostKey,
    pub dev: DevKey,
    /// The id whose QP it is (`None`: made by `create_external_qp`).
    pub id: Option<IdKey>,
    pub qpn: u32,
    pub pd: ObjKey,
    pub send_cq: ObjKey,
    pub recv_cq: ObjKey,
    /// Whether the CQs were made for it by `create_qp` (its PD is then its device's default).
    pub implicit: bool,
    /// The peer QP: (host, QP number), once connected.
    pub peer: Option<(HostKey, u32)>,
    /// The timeline entry of the machine's timer, and when that entry runs.
    pub timer: Option<(TimerKey, SimTime)>,
    /// When the machine's timer is due: a restart to a later time only moves this, and the
    /// entry, when it runs early, is put off to it (progress restarts the transport timer on
    /// every acknowledgement, which would otherwise cancel and schedule an entry each time).
    pub timer_due: SimTime,
    pub machine: QpMachine,
}

/// A shared receive queue.
pub(crate) struct Srq {
    pub host: HostKey,
    pub dev: DevKey,
    pub pd: ObjKey,
    /// The id whose SRQ it is (`rdma_create_srq`), if any.
    pub id: Option<IdKey>,
    /// How many receives it holds (`query_srq`'s `max_wr`).
    pub max_wr: u32,
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub limit: u32,
    /// Posted receives, oldest first (lent to a QP during its inputs).
    pub rq: LazyDeque<rc::RecvEntry>,
    /// QPs attached to it.
    pub users: u32,
}

/// An address handle: where UD sends through it go.
pub(crate) struct Ah {
    pub host: HostKey,
    pub pd: ObjKey,
    pub attr: cmtwin::AhAttr,
}

/// A targeted fault on data packets: the next `count` are lost, or delayed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DataFault {
    pub count: u32,
    pub delay: Option<std::time::Duration>,
}

/// Something the data path's timeline does.
pub(crate) enum VerbsAction {
    /// A data packet arrives at host `to.0`'s QP `to.1`, from QP `from.1` of host `from.0`.
    Deliver {
        from: (HostKey, u32),
        to: (HostKey, u32),
        packet: Packet,
    },
    /// QP `qp`'s timer fires.
    QpTimer { qp: ObjKey },
    /// The retransmission timer of the orphaned siw socket of (host, QP number) `stream`
    /// fires (`tcp_orphan.rs`).
    OrphanTimer { stream: (HostKey, u32) },
    /// A datagram arrives at host `to.0`'s QP `to.1`, from QP `from.1` of host `from.0`
    /// whose GID is `sgid`.
    DeliverDatagram {
        from: (HostKey, u32),
        to: (HostKey, u32),
        sgid: [u8; 16],
        datagram: Datagram,
    },
}

/// Every verbs object of the fabric.
pub(crate) struct Verbs {
    next_serial: u64,
    /// The next region's key and device address.
    next_mr_key: u32,
    next_addr: u64,
    pub pds: Store<Pd>,
    pub mrs: Store<Mr>,
    /// Regions by (device, key).
    pub mr_by_key: BTreeMap<(DevKey, u32), ObjKey>,
    /// Each in an allocation of its own (as are channels and QPs): the tables hold one
    /// pointer per bucket, and growing them moves pointers, not objects.
    pub cqs: SlabStore<Cq>,
    pub channels: SlabStore<CompChannel>,
    pub qps: BoxedStore<Qp>,
    pub ahs: Store<Ah>,
    pub srqs: Store<Srq>,
    /// Each id's SRQ (`id->srq`).
    pub srq_of_id: BTreeMap<IdKey, ObjKey>,
    /// The SRQ each QP with one takes its receives from (apart from `Qp`, which stays
    /// compact: most QPs have none).
    pub srq_of_qp: BTreeMap<ObjKey, ObjKey>,
    /// The reads and atomics each QP's responder executed and keeps for duplicates (its
    /// responder resources, [`rc::Memory::keep_request`]; apart from `Qp`, which stays
    /// compact: most QPs take no reads or atomics). Emptied when the QP is reset or its
    /// `max_dest_rd_atomic` modified.
    pub kept_requests: BTreeMap<ObjKey, responder_resources::KeptRequests>,
    /// QPs by (host, QP number).
    pub qp_by_num: KeyMap<(HostKey, u32), ObjKey>,
    /// Each device's default PD (librdmacm's `id->pd` for ids without a QP of their own PD),
    /// made when first needed and kept (only ever looked up, and counted by the invariant
    /// checks in no order: a hash table).
    pub default_pd: KeyMap<DevKey, ObjKey>,
    /// Each host's asynchronous events, oldest first.
    pub async_events: BTreeMap<HostKey, VecDeque<VerbsAsyncEvent>>,
    /// The latest delivery time on each (from host, to host) data link (only ever looked
    /// up: a hash table, not an ordered map).
    pub link_clock: KeyMap<(HostKey, HostKey), SimTime>,
    /// Targeted faults on the next data packets.
    pub faults: VecDeque<DataFault>,
    /// The sockets of dropped siw connections still retransmitting, by the closed QP's
    /// (host, number) (`tcp_orphan.rs`).
    pub orphans: BTreeMap<(HostKey, u32), tcp_orphan::TcpOrphan>,
    /// Reused buffer for a QP's outputs.
    pub outputs: Vec<rc::QpOutput>,
    /// The objects each process group made explicitly, freed at its exit (`process_exit.rs`).
    pub owned: BTreeMap<usize, Vec<ObjKey>>,
}

impl Default for Verbs {
    fn default() -> Self {
        Verbs {
            next_serial: 1,
            next_mr_key: 0x1000,
            next_addr: 0x7f00_0000_0000,
            pds: Store::default(),
            mrs: Store::default(),
            mr_by_key: BTreeMap::new(),
            cqs: SlabStore::default(),
            channels: SlabStore::default(),
            qps: BoxedStore::default(),
            ahs: Store::default(),
            srqs: Store::default(),
            srq_of_id: BTreeMap::new(),
            srq_of_qp: BTreeMap::new(),
            kept_requests: BTreeMap::new(),
            qp_by_num: KeyMap::default(),
            default_pd: KeyMap::default(),
            async_events: BTreeMap::new(),
            link_clock: KeyMap::default(),
            faults: VecDeque::new(),
            orphans: BTreeMap::new(),
            outputs: Vec::new(),
            owned: BTreeMap::new(),
        }
    }
}

impl Verbs {
    /// A fresh serial for a verbs object.
    fn fresh(&mut self) -> ObjKey {
        let k = self.next_serial;
        self.next_serial += 1;
        k
    }

    /// The key and device address of a new region of `len` bytes (addresses page-aligned,
    /// a guard page apart; keys never reused).
    fn place_region(&mut self, len: usize) -> (u32, u64) {
        let key = self.next_mr_key;
        self.next_mr_key += 1;
        let addr = self.next_addr;
        let pages = (len as u64).div_ceil(4096) + 1;
        self.next_addr += pages * 4096;
        (key, addr)
    }
}

/// The key a process waiting for completion channel `key`'s events blocks on (apart from
/// the keys of `cmtwin::sync`, which count up from 1, and those of `rdma_destroy_id`).
pub(crate) fn comp_channel_wait_key(key: ObjKey) -> u64 {
    (1 << 62) | key
}

/// The key a process waiting for host `host`'s asynchronous events blocks on.
pub(crate) fn async_wait_key(host: HostKey) -> u64 {
    (1 << 62) | (1 << 61) | host as u64
}
