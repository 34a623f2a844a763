//! Random data path call sequences on the simulator, and the contract they are checked
//! against: shared by the property test (`tests/sim_verbs_proptest.rs`, which draws [`Op`]s
//! with proptest) and the cargo-fuzz target (`fuzz/fuzz_targets/verbs_sequences.rs`, which
//! builds them with `arbitrary`).
//!
//! The bed is set up first so that posts really move data: an RC connection (the client's
//! one CQ of 4 entries serves both its queues, so that it can overrun) and a UD pair with an
//! address handle from the client to the server's QP. An [`Op`] is then one random verbs
//! call or librdmacm helper on random handles from pools (every object ever made, live and
//! destroyed, and objects of another fabric), with random arguments (bad keys,
//! out-of-bounds, zero-length and huge entries, oversize inline data, too many entries,
//! queues beyond capacity, random QP states), or a step of the fabric (virtual time,
//! packet loss, a disconnect, a device removal). A [`Model`] applies ops and checks, after
//! every one:
//! * nothing panics;
//! * every failure names one of the calls the op makes and carries an errno of [`ALLOWED`];
//!   a stale or foreign handle is refused (EBADF, ENOENT for an id), and the destroys and
//!   acknowledgements whose outcome the model knows (EBUSY for a PD, CQ or channel in use,
//!   EINVAL for more acknowledgements than events fetched) give exactly it;
//! * every completion is of a work request posted successfully (or refused before RTS but
//!   kept in the queue, as rxe and siw keep it: see `early_send`) and not completed yet, on
//!   that request's CQ and QP, with a byte count no larger than the posted length (equal to
//!   it for a successful send, write or read; a receive consumed by a write with immediate
//!   data counts the write's bytes, as rxe reports it), and with the opcode of the request;
//! * a QP moved to RESET or ERROR by `modify_qp` is in that state;
//! * a region's bytes change only where a posted receive, read, RDMA write or atomic could
//!   place them (its key and range; an atomic's 8 target bytes and its entries' first 8);
//! * an atomic taken by `ibv_post_send` has a remote address aligned to 8, entries of 8
//!   bytes or more, no inline data, and an RC QP; it completes only with a status rxe gives
//!   an atomic (never RNR nor a length error), and when successful with its opcode and its
//!   entries' length (rxe's `dma.length`, 8 for one 8-byte entry);
//!
//! and at the end ([`Model::finish`]): once every CQ is drained, no signaled request is
//! outstanding on a QP in ERROR; after ten minutes of virtual time (every retry and RNR wait
//! runs out), no send is outstanding on a UD QP in RTS or an RC QP in RTS with a transport
//! timeout; once every QP is moved to ERROR and the CQs drained again,
//! every signaled request has completed exactly once (unless its QP was reset or destroyed,
//! which discards work without completions, or its CQ overran, which loses completions with
//! a CQ_ERR event); every 8-byte word that only fetch and adds targeted, all of which
//! completed successfully, holds its first value plus their addends, and their values
//! before chain from that first value, each addend used once (each applied exactly once at
//! the responder, through lost packets and retransmissions); then every object can be
//! destroyed, in dependency order.
//!
//! Every field of every op accepts any value (indices wrap around the pools, choices around
//! their lists). `CMTWIN_PROPTEST_VERBOSE=1` prints every op.

mod apply;
mod atomics;
mod finish;
pub mod op;
mod posts;
mod setup;
mod track;

use std::collections::BTreeMap;

use cmtwin::verbs::{MemoryRegion, WcOpcode, WorkCompletion, GRH_LEN};
use cmtwin::{
    AhAttr, AhHandle, Call, ChannelHandle, CmError, CompChannelHandle, CqHandle, Errno, IdHandle,
    PdHandle, QpCap, QpHandle, Transport,
};
use cmtwin_sim::{SimBackend, SimConfig};

pub use op::Op;

use crate::{SimBed, TestBed};

/// The errnos a data path call may fail with: those `cmtwin::verbs::DataPath` documents
/// (libibverbs' for each misuse; ENOTCONN is siw's for a send posted before RTS), plus EDEADLK (the simulator's "this can never complete",
/// for the blocking helpers) and EPERM (none expected: calls here run outside
/// `Fabric::run`).
pub const ALLOWED: &[Errno] = &[
    Errno::EINVAL,
    Errno::EBADF,
    Errno::ENOENT,
    Errno::ENXIO,
    Errno::EBUSY,
    Errno::ENOMEM,
    Errno::EAGAIN,
    Errno::ETIMEDOUT,
    Errno::EDEADLK,
    Errno::ENOTCONN,
];

/// Whose an object is: a host of the bed, or the other fabric's server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Server,
    Client,
    Foreign,
}

/// What a handle is on the backend a call is made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Validity {
    Live,
    Stale,
    Foreign,
}

/// One object of a pool.
struct Entry<T> {
    home: Home,
    live: bool,
    v: T,
}

/// A protection domain; `default` for an id's default PD (held by its device).
#[derive(Clone, Copy)]
struct PdRec {
    pd: PdHandle,
    default: bool,
}

/// A region, with the bytes it should hold.
struct MrRec {
    mr: MemoryRegion,
    pd: usize,
    shadow: Vec<u8>,
}

/// A CQ: its channel (index into the channel pool) and its fetched, unacknowledged events.
#[derive(Clone, Copy)]
struct CqRec {
    cq: CqHandle,
    channel: Option<usize>,
    unacked: u32,
    overrun: bool,
}

/// A QP with the pools' indices of its PD and CQs, and its id's index if it has one.
#[derive(Clone, Copy)]
struct QpRec {
    qp: QpHandle,
    qpn: u32,
    pd: usize,
    send_cq: usize,
    recv_cq: usize,
    ud: bool,
    id: Option<usize>,
    sq_sig_all: bool,
    /// Moved to RTS with a transport timeout (the CM's, or a nonzero `timeout` of
    /// `modify_qp`): its sends end, one way or the other.
    timed: bool,
    /// siw refused a send posted before RTS (ENOTCONN): its send queue never sends again.
    wedged: bool,
}

/// An address handle and its PD's index.
#[derive(Clone, Copy)]
struct AhRec {
    ah: AhHandle,
    pd: usize,
}

/// A work request posted successfully and not completed yet.
#[derive(Clone, Debug)]
struct Wr {
    server: bool,
    qp: usize,
    recv: bool,
    signaled: bool,
    /// Bytes posted (sent, written, read, or a receive's capacity).
    len: u64,
    /// The successful completion's opcode, for send-queue requests.
    opcode: Option<WcOpcode>,
    /// Its QP was reset or destroyed: it may have completed before, or never will.
    discarded: bool,
    /// A UD receive's first entry: (region index, offset), where its route header lands.
    grh_at: Option<(usize, usize)>,
    /// An RDMA atomic's particulars.
    atomic: Option<atomics::AtomicWr>,
}

/// Where posted work may place bytes: key `key`, device addresses `start..end`.
#[derive(Clone, Copy, Debug)]
struct Writer {
    key: u32,
    start: u64,
    end: u64,
    role: Role,
    /// The work request.
    wr: u64,
}

/// What a [`Writer`] places: a fetch and add's result at its target, the value before of
/// atomic request `wr` in its local bytes, or anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    FetchAdd,
    ValueBefore(u64),
    Other,
}

/// The state the contract is checked against: the bed and everything the application has
/// made and posted there.
pub struct Model {
    bed: SimBed,
    /// Another fabric, whose objects are foreign handles here.
    other: SimBed,
    ids: Vec<Entry<IdHandle>>,
    pds: Vec<Entry<PdRec>>,
    mrs: Vec<Entry<MrRec>>,
    channels: Vec<Entry<CompChannelHandle>>,
    cqs: Vec<Entry<CqRec>>,
    qps: Vec<Entry<QpRec>>,
    ahs: Vec<Entry<AhRec>>,
    /// The CM event channels of the setup (destroyed last).
    event_channels: Vec<(bool, ChannelHandle)>,
    wrs: BTreeMap<u64, Wr>,
    next_wr: u64,
    writers: Vec<Writer>,
    /// The words RDMA fetch and adds were aimed at (see `atomics`).
    words: Vec<atomics::Word>,
    /// A QP was reset, destroyed or moved towards RTS after the setup: it may send from its
    /// first PSN again to a peer that has seen those PSNs, which answers an atomic there from
    /// its kept results without executing it (rxe's duplicate_request), so the ledger no
    /// longer holds.
    psns_restarted: bool,
    /// The UD QPs' numbers: the server's, the client's.
    ud_qpn: [u32; 2],
    /// The UD QPs' qkey.
    ud_qkey: u32,
    /// The address of the server's UD QP, as the client's ESTABLISHED gave it.
    to_server: AhAttr,
    /// The latest successful UD receive: on the server?, its completion, its route header.
    last_ud_recv: Option<(bool, WorkCompletion, [u8; GRH_LEN as usize])>,
    verbose: bool,
}

/// Runs one sequence: [`Model::new`] from `seed`, [`Model::apply`] for each op (a panic is
/// re-raised prefixed with the seed, the op's index and the op), then [`Model::finish`].
///
/// # Panics
///
/// When the simulator breaks the data path's contract (see the module documentation) or
/// one of its own invariants.
pub fn run(seed: u64, ops: &[Op]) {
    run_on(Model::new(seed), seed, ops);
}

/// [`run`] without the fabrics' traces (for the fuzz target).
///
/// # Panics
///
/// As [`run`].
pub fn run_untraced(seed: u64, ops: &[Op]) {
    let config = SimConfig {
        trace: false,
        ..SimConfig::default()
    };
    run_on(Model::with_config(seed, config), seed, ops);
}

fn run_on(mut model: Model, seed: u64, ops: &[Op]) {
    for (i, op) in ops.iter().enumerate() {
        let replay = || format!("seed {seed}, op {i}: {op:?}");
        if model.verbose {
            eprintln!("{} (at {:?})", replay(), model.bed.now());
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.apply(op);
            model.check_contents();
        }));
        if let Err(panic) = outcome {
            panic!("{}: {}", replay(), panic_text(&*panic));
        }
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.finish()));
    if let Err(panic) = outcome {
        panic!("seed {seed}, at the end: {}", panic_text(&*panic));
    }
}

/// A caught panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

impl Model {
    /// A fresh bed from `seed` (trace on), set up as the module documentation says.
    pub fn new(seed: u64) -> Self {
        Self::with_config(seed, SimConfig::default())
    }

    /// As [`Model::new`] with both fabrics built with `config`.
    pub fn with_config(seed: u64, config: SimConfig) -> Self {
        let bed = SimBed::with_config(seed, Transport::Roce, config.clone());
        let other = SimBed::with_config(seed ^ 0x5eed, Transport::Roce, config);
        setup::set_up(bed, other)
    }

    /// The backend of the server (else the client) of the bed.
    fn cm(&self, server: bool) -> &SimBackend {
        if server {
            self.bed.server()
        } else {
            self.bed.client()
        }
    }

    /// A fresh work request id.
    fn fresh_wr(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    /// Checks a call's result: a failure must name one of `calls` and carry an errno of
    /// [`ALLOWED`] (exactly `refused`, when given, for a handle that is not live here); a
    /// success must not have taken a stale or foreign handle.
    fn check<T>(
        &self,
        calls: &[Call],
        validity: Validity,
        refused: Option<Errno>,
        r: cmtwin::Result<T>,
    ) -> Option<T> {
        match r {
            Ok(v) => {
                assert_eq!(
                    validity,
                    Validity::Live,
                    "{calls:?} accepted a handle that is not live here"
                );
                Some(v)
            }
            Err(e) => {
                self.check_error(calls, &e);
                if let (true, Some(errno)) = (validity != Validity::Live, refused) {
                    assert_eq!(e.errno, errno, "a {validity:?} handle: {e}");
                }
                if self.verbose {
                    eprintln!("    -> {e}");
                }
                None
            }
        }
    }

    /// A failure names one of `calls` and carries an errno of [`ALLOWED`].
    fn check_error(&self, calls: &[Call], e: &CmError) {
        assert!(
            calls.contains(&e.call),
            "the error names {:?}, not one of {calls:?}: {e}",
            e.call
        );
        assert!(ALLOWED.contains(&e.errno), "errno outside the allowed: {e}");
    }

    /// The backend host and validity of entry `p` of `pool`, or `None` for an empty pool.
    fn pick<T>(pool: &[Entry<T>], p: op::Pick) -> Option<(bool, usize, Validity)> {
        if pool.is_empty() {
            return None;
        }
        let idx = p.idx % pool.len();
        let e = &pool[idx];
        let (server, validity) = match e.home {
            Home::Foreign => (p.owner, Validity::Foreign),
            Home::Server | Home::Client => {
                let own = e.home == Home::Server;
                match (p.owner, e.live) {
                    (false, _) => (!own, Validity::Foreign),
                    (true, true) => (own, Validity::Live),
                    (true, false) => (own, Validity::Stale),
                }
            }
        };
        Some((server, idx, validity))
    }

    /// The home of an object made on the server's (else the client's) backend.
    fn home(server: bool) -> Home {
        if server {
            Home::Server
        } else {
            Home::Client
        }
    }

    /// The validity of entry `idx` of `pool` on host `server`'s backend.
    fn validity_on<T>(pool: &[Entry<T>], idx: usize, server: bool) -> Validity {
        let e = &pool[idx];
        if e.home != Self::home(server) {
            Validity::Foreign
        } else if e.live {
            Validity::Live
        } else {
            Validity::Stale
        }
    }

    /// Work requests of QP `qp` that are still outstanding.
    fn outstanding_of(&self, qp: usize) -> impl Iterator<Item = (&u64, &Wr)> {
        self.wrs.iter().filter(move |(_, w)| w.qp == qp)
    }

    /// QP `qp` was reset or destroyed: its outstanding work may never complete.
    fn discard_work_of(&mut self, qp: usize) {
        for w in self.wrs.values_mut().filter(|w| w.qp == qp) {
            w.discarded = true;
        }
        self.psns_restarted = true;
    }
}

/// Capacities from a [`op::CapSpec`].
fn cap_of(c: op::CapSpec) -> QpCap {
    let depth = [0, 1, 2, 4, 8, 16][usize::from(c.depth) % 6];
    QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: u32::from(c.sge % 34),
        max_recv_sge: u32::from(c.sge % 34),
        max_inline_data: u32::from(c.inline % 300),
    }
}
