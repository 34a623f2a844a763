//! Random CM call sequences on the simulator, and the model they are checked against: shared by
//! the property test (`tests/sim_proptest.rs`, which draws [`Op`]s with proptest) and the
//! cargo-fuzz target (`fuzz/fuzz_targets/call_sequences.rs`, which builds them with
//! `arbitrary`, behind this crate's `arbitrary` feature).
//!
//! An [`Op`] is one random call on random handles (live, stale and foreign), with random
//! arguments, on either host of a [`SimBed`]. A [`Model`] applies ops and checks, after every
//! call and event, the CM's contract:
//! * nothing panics;
//! * every failure names the call made and carries one of the kernel's errnos
//!   (CM-SEMANTICS §2.10, [`ALLOWED`]) or EDEADLK (the simulator's "this can never complete");
//! * every event is delivered at most once: tickets never repeat, every USER event written
//!   comes back at most once, and acked events never reappear;
//! * no event is delivered for an id that was destroyed, nor for an id the application never
//!   saw (other than the new id of a CONNECT_REQUEST, which is always a fresh id);
//! * per id, ESTABLISHED, DISCONNECTED and TIMEWAIT_EXIT come at most once, and no kernel
//!   event comes after DEVICE_REMOVAL (§5.5);
//! * once every event is acked, every id and then every channel can be destroyed
//!   ([`Model::finish`]).
//!
//! [`run`] does a whole sequence: [`Model::new`], [`Model::apply`] for each op, then
//! [`Model::finish`]. Every field of every op accepts any value (indices wrap around the
//! pools, choices wrap around their lists), so ops built from arbitrary bytes are as valid as
//! the proptest strategy's. `CMTWIN_PROPTEST_VERBOSE=1` prints every op, call and result.
//!
//! This is a contract, not a prediction: any errno of [`ALLOWED`] passes. The exact result of
//! each call and the exact events are checked by the CM model (`crate::cm_model`), on both
//! backends.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use cmtwin::{
    AsyncEvent, Call, ChannelHandle, CmBackend, CmError, CmEvent, CmOption, ConnParam, Errno,
    EventInfo, EventKind, EventParam, IdHandle, PortSpace, QpInitAttr, QpType, Transport, Wait,
};
use cmtwin_sim::{SimBackend, SimConfig};

use crate::{SimBed, TestBed};

/// The errnos of CM-SEMANTICS §2.10 (kernel and librdmacm), plus EDEADLK.
pub const ALLOWED: &[Errno] = &[
    Errno::EPERM,
    Errno::ENOENT,
    Errno::EINTR,
    Errno::EIO,
    Errno::ENXIO,
    Errno::EBADF,
    Errno::EAGAIN,
    Errno::ENOMEM,
    Errno::EACCES,
    Errno::EFAULT,
    Errno::EBUSY,
    Errno::ENODEV,
    Errno::EINVAL,
    Errno::ENOSPC,
    Errno::ENOSYS,
    Errno::EBADE,
    Errno::ENODATA,
    Errno::EPROTONOSUPPORT,
    Errno::EOPNOTSUPP,
    Errno::EAFNOSUPPORT,
    Errno::EADDRINUSE,
    Errno::EADDRNOTAVAIL,
    Errno::ENETUNREACH,
    Errno::ENETRESET,
    Errno::ECONNABORTED,
    Errno::ECONNRESET,
    Errno::EISCONN,
    Errno::ETIMEDOUT,
    Errno::ECONNREFUSED,
    Errno::EHOSTUNREACH,
    Errno::EALREADY,
    Errno::ENOTSUPP,
    Errno::EDEADLK,
];

/// The port spaces [`Op::CreateId`] chooses from (`ps` modulo their number): TCP twice (the
/// common case), UDP, IB, IPOIB and an unknown one.
const PORT_SPACES: [PortSpace; 6] = [
    PortSpace::TCP,
    PortSpace::TCP,
    PortSpace::UDP,
    PortSpace::IB,
    PortSpace::IPOIB,
    PortSpace(0x0999),
];

/// One random call. Handles are indices into the pools of every id / channel ever created
/// (stale ones included), modulo the pool's size; `owner` false uses the other host's backend
/// (a foreign handle). An op on an empty pool does nothing.
#[derive(Clone, Debug, arbitrary::Arbitrary)]
pub enum Op {
    /// `rdma_create_event_channel` on one host.
    CreateChannel {
        /// On the server (else the client).
        server: bool,
    },
    /// `rdma_destroy_event_channel`.
    DestroyChannel {
        /// Index into the channel pool.
        ch: usize,
        /// Call it on the channel's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_create_id`.
    CreateId {
        /// On the server (else the client).
        server: bool,
        /// Index into the channel pool (the host's own backend is used), or a synchronous id.
        ch: Option<usize>,
        /// Port space: TCP, TCP, UDP, IB, IPOIB or an unknown one (modulo 6).
        ps: u8,
    },
    /// `rdma_destroy_id`.
    DestroyId {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_bind_addr`.
    Bind {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Address: own IP (port 5000, or 1: port 0), 2: wildcard, 3: the peer's IP,
        /// 4: an unconfigured IP, 5 and above: IPv6 wildcard.
        addr: u8,
    },
    /// `rdma_resolve_addr` (no source address).
    ResolveAddr {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Destination: 0 to 2: the peer (port 5000, or 1: port 5001), 3: a silent host,
        /// 4: an unroutable IP, 5: loopback, 6: IPv6, 7 and above: the host's own IP.
        dst: u8,
        /// Timeout in milliseconds.
        timeout_ms: u16,
    },
    /// `rdma_resolve_route`.
    ResolveRoute {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Timeout in milliseconds.
        timeout_ms: u16,
    },
    /// `rdma_listen`.
    Listen {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Backlog (0 and negative values included).
        backlog: i8,
    },
    /// `rdma_get_request`.
    GetRequest {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_connect`.
    Connect {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Private data length.
        len: u8,
        /// Pass connection parameters (else none).
        param: bool,
    },
    /// `rdma_accept`.
    Accept {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Private data length.
        len: u8,
        /// Pass connection parameters (else none).
        param: bool,
    },
    /// `rdma_reject`.
    Reject {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Private data length.
        len: u8,
    },
    /// `rdma_disconnect`.
    Disconnect {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_notify`.
    Notify {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// The verbs async event number.
        event: i32,
    },
    /// `rdma_establish`.
    Establish {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_write_cm_event` (only USER is accepted; its arg is numbered by the model).
    WriteEvent {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Raw event kind (18 is USER).
        kind: i32,
        /// Event status.
        status: i32,
    },
    /// `rdma_get_cm_event`; the event is checked and kept unacked.
    GetEvent {
        /// Index into the channel pool.
        ch: usize,
        /// Call it on the channel's own host (else on the other one).
        owner: bool,
        /// 0: non-blocking, 1: 1.5 s timeout, 2 and above: blocking.
        wait: u8,
    },
    /// `rdma_ack_cm_event` of one fetched, unacked event.
    Ack {
        /// Index into the unacked events.
        which: usize,
    },
    /// Drops one fetched, unacked event, which acknowledges it.
    DropEvent {
        /// Index into the unacked events.
        which: usize,
    },
    /// `rdma_create_qp`.
    CreateQp {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// A UD QP (else RC).
        ud: bool,
    },
    /// `rdma_destroy_qp`.
    DestroyQp {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
    },
    /// `rdma_migrate_id`.
    Migrate {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// Index into the channel pool, or none (make the id synchronous).
        ch: Option<usize>,
    },
    /// `rdma_set_option`.
    SetOption {
        /// Index into the id pool.
        id: usize,
        /// Call it on the id's own host (else on the other one).
        owner: bool,
        /// 0: TOS, 1: REUSEADDR, 2: AFONLY, 3: ACK_TIMEOUT, 4 and above: IB_PATH.
        option: u8,
    },
    /// Sleep in virtual time (on the client's backend).
    Sleep {
        /// Milliseconds.
        ms: u16,
    },
    /// A client doing the usual steps towards the server's listener (each step checked):
    /// create an id, resolve address and route (fetching and acking the events), maybe create
    /// a QP, connect with `len` bytes.
    Dial {
        /// To the UDP listener with a UD QP (else TCP, RC).
        ud: bool,
        /// Create a QP before connecting.
        qp: bool,
        /// Private data length.
        len: u8,
    },
    /// The server fetching one event; a CONNECT_REQUEST is accepted (with a QP) or rejected.
    Serve {
        /// Accept a CONNECT_REQUEST (else reject it).
        accept: bool,
        /// Private data length.
        len: u8,
    },
    /// Fetch and ack whatever is queued on one host's first channel.
    Pump {
        /// On the server (else the client).
        server: bool,
    },
    /// Unregister one host's RDMA device (DEVICE_REMOVAL, then ENXIO, §8).
    RemoveDevice {
        /// The server's device (else the client's).
        server: bool,
    },
}

/// The state the contract is checked against: a [`SimBed`] and everything the application
/// has seen of it.
pub struct Model {
    bed: SimBed,
    /// Every id ever seen: (on the server?, handle).
    ids: Vec<(bool, IdHandle)>,
    /// Every channel ever created.
    channels: Vec<(bool, ChannelHandle)>,
    destroyed_ids: BTreeSet<(bool, IdHandle)>,
    destroyed_channels: BTreeSet<(bool, ChannelHandle)>,
    /// Fetched, not yet acked events (on the server?, event).
    outstanding: Vec<(bool, CmEvent)>,
    /// Every ticket ever delivered, per host.
    tickets: BTreeSet<(bool, u64)>,
    /// USER args written and not yet delivered / already delivered.
    user_written: BTreeSet<u64>,
    user_delivered: BTreeSet<u64>,
    /// Kinds delivered on channels, per id, for the once-per-id rules of §5.5.
    seen_kinds: BTreeMap<(bool, IdHandle), Vec<EventKind>>,
    /// Statuses of USER events written.
    user_statuses: BTreeSet<i32>,
    next_user_arg: u64,
    /// Print every call and its result (`CMTWIN_PROPTEST_VERBOSE=1`), to read a failing case.
    verbose: bool,
}

/// Runs one sequence: [`Model::new`] from `seed`, [`Model::apply`] for each op (a panic is
/// re-raised prefixed with the seed, the op's index and the op), then [`Model::finish`].
///
/// # Panics
///
/// When the simulator breaks the CM's contract (see the module documentation) or one of its
/// own invariants.
pub fn run(seed: u64, ops: &[Op]) {
    run_on(Model::new(seed), seed, ops);
}

/// [`run`] without the fabric's trace: the same calls, checks and invariants, for the fuzz
/// target, which reads no trace and runs thousands of sequences a second (formatting every
/// call's arguments for the trace was a tenth of a run). A failure replays with the trace on
/// through [`run`].
///
/// # Panics
///
/// As [`run`].
pub fn run_untraced(seed: u64, ops: &[Op]) {
    let config = SimConfig {
        trace: false,
        ..SimConfig::default()
    };
    run_on(
        Model::with_bed(SimBed::with_config(seed, Transport::Roce, config)),
        seed,
        ops,
    );
}

fn run_on(mut model: Model, seed: u64, ops: &[Op]) {
    for (i, op) in ops.iter().enumerate() {
        // The replay line is written only when it is printed: formatting it for every op was
        // a fifth of a fuzz execution.
        let replay = || format!("seed {seed}, op {i}: {op:?}");
        if model.verbose {
            eprintln!("{}", replay());
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.apply(op)));
        if let Err(panic) = outcome {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{}: {msg}", replay());
        }
    }
    model.finish();
}

impl Model {
    /// A fresh [`SimBed`] from `seed`, with a starting point that makes connections likely: a
    /// channel on each host (the server's first, so [`Op::Dial`], [`Op::Serve`] and
    /// [`Op::Pump`] find them) and a TCP and a UDP listener on 10.0.0.1:5000.
    pub fn new(seed: u64) -> Self {
        Self::with_bed(SimBed::new(seed))
    }

    /// The same starting point as [`Model::new`] on a `bed` built by the caller (e.g. with
    /// the trace off).
    pub fn with_bed(bed: SimBed) -> Self {
        let mut model = Model {
            bed,
            ids: Vec::new(),
            channels: Vec::new(),
            destroyed_ids: BTreeSet::new(),
            destroyed_channels: BTreeSet::new(),
            outstanding: Vec::new(),
            tickets: BTreeSet::new(),
            user_written: BTreeSet::new(),
            user_delivered: BTreeSet::new(),
            user_statuses: BTreeSet::new(),
            seen_kinds: BTreeMap::new(),
            next_user_arg: 1,
            verbose: std::env::var_os("CMTWIN_PROPTEST_VERBOSE").is_some(),
        };
        for server in [true, false] {
            model.apply(&Op::CreateChannel { server });
        }
        let server_channel = model.channels[0].1;
        for ps in [PortSpace::TCP, PortSpace::UDP] {
            let cm = model.bed.server().clone();
            let listener = cm.create_id(Some(server_channel), 0, ps).expect("listener");
            cm.bind_addr(listener, SocketAddr::new(SimBed::SERVER_IP, 5000))
                .expect("bind");
            cm.listen(listener, 2).expect("listen");
            model.learn_id(true, listener);
        }
        model
    }

    fn cm(&self, server: bool) -> &SimBackend {
        if server {
            self.bed.server()
        } else {
            self.bed.client()
        }
    }

    /// The id at `idx` (any, possibly stale) and the backend to call it on.
    fn id(&self, idx: usize, owner: bool) -> Option<(bool, IdHandle)> {
        if self.ids.is_empty() {
            return None;
        }
        let (server, id) = self.ids[idx % self.ids.len()];
        Some((if owner { server } else { !server }, id))
    }

    fn channel(&self, idx: usize, owner: bool) -> Option<(bool, ChannelHandle)> {
        if self.channels.is_empty() {
            return None;
        }
        let (server, ch) = self.channels[idx % self.channels.len()];
        Some((if owner { server } else { !server }, ch))
    }

    fn addr(&self, server: bool, choice: u8) -> SocketAddr {
        let (own, other) = if server {
            (SimBed::SERVER_IP, SimBed::CLIENT_IP)
        } else {
            (SimBed::CLIENT_IP, SimBed::SERVER_IP)
        };
        let ip: IpAddr = match choice {
            0 | 1 => own,
            2 => "0.0.0.0".parse().unwrap(),
            3 => other,
            4 => "10.0.0.99".parse().unwrap(),
            _ => "::".parse().unwrap(),
        };
        SocketAddr::new(ip, if choice == 1 { 0 } else { 5000 })
    }

    fn dst(&self, server: bool, choice: u8) -> SocketAddr {
        let peer = if server {
            SimBed::CLIENT_IP
        } else {
            SimBed::SERVER_IP
        };
        let ip: IpAddr = match choice {
            0..=2 => peer,
            3 => SimBed::SILENT_IP,
            4 => SimBed::UNROUTABLE_IP,
            5 => "127.0.0.1".parse().unwrap(),
            6 => "2001:db8::1".parse().unwrap(),
            _ => {
                if server {
                    SimBed::SERVER_IP
                } else {
                    SimBed::CLIENT_IP
                }
            }
        };
        SocketAddr::new(ip, if choice == 1 { 5001 } else { 5000 })
    }

    fn learn_id(&mut self, server: bool, id: IdHandle) {
        if !self.ids.contains(&(server, id)) {
            self.ids.push((server, id));
        }
    }

    /// Checks a failed call: the call named and an allowed errno. A synchronous call
    /// completed by a USER event returns that event's status as errno (§11.2: status > 0 →
    /// errno = status, status < 0 → errno = −status), so statuses written are allowed there.
    fn check_err(&self, call: Call, err: &CmError) {
        assert_eq!(err.call, call, "the error names another call: {err}");
        let from_user_status = err.detail.contains("RDMA_CM_EVENT_USER")
            && self
                .user_statuses
                .iter()
                .any(|s| *s == err.errno.0 || s.wrapping_neg() == err.errno.0);
        // §11.3: rdma_get_request turns any non-zero status into errno = −status, so a
        // positive status (an IB reject reason ≤ 35, a SIDR status ≤ 5) gives a negative errno.
        let get_request_quirk = call == Call::GetRequest && (-35..=-1).contains(&err.errno.0);
        assert!(
            ALLOWED.contains(&err.errno) || from_user_status || get_request_quirk,
            "{call} failed with {}, not one of the kernel's errnos: {err}",
            err.errno
        );
    }

    fn check<T: std::fmt::Debug>(&self, call: Call, result: Result<T, CmError>) -> Option<T> {
        if self.verbose {
            eprintln!("    {call} -> {result:?}");
        }
        match result {
            Ok(v) => Some(v),
            Err(err) => {
                self.check_err(call, &err);
                None
            }
        }
    }

    /// Checks a delivered event and keeps it unacked.
    fn delivered(&mut self, server: bool, event: CmEvent) {
        let ticket = event.ticket().0;
        assert!(
            self.tickets.insert((server, ticket)),
            "event ticket {ticket} delivered twice ({} for {})",
            event.kind(),
            event.id()
        );
        assert!(
            !matches!(event.kind(), EventKind::Unknown(_)),
            "an event of unknown kind {}",
            event.kind()
        );
        let id = (server, event.id());
        assert!(
            !self.destroyed_ids.contains(&id),
            "{} delivered for destroyed {}",
            event.kind(),
            event.id()
        );
        let kinds = self.seen_kinds.entry(id).or_default();
        // USER events are the application's own: writing one works until the background
        // teardown (§8.3), so one may follow DEVICE_REMOVAL; kernel events may not (§5.5).
        assert!(
            event.kind() == EventKind::User || !kinds.contains(&EventKind::DeviceRemoval),
            "{} delivered for {} after DEVICE_REMOVAL",
            event.kind(),
            event.id()
        );
        if matches!(
            event.kind(),
            EventKind::Established | EventKind::Disconnected | EventKind::TimewaitExit
        ) {
            assert!(
                !kinds.contains(&event.kind()),
                "a second {} for {}",
                event.kind(),
                event.id()
            );
        }
        kinds.push(event.kind());
        if event.kind() == EventKind::ConnectRequest {
            assert!(
                !self.ids.contains(&id),
                "CONNECT_REQUEST carries an id already known: {}",
                event.id()
            );
            let listener = event
                .listen_id()
                .expect("CONNECT_REQUEST names its listener");
            assert!(
                self.ids.contains(&(server, listener)),
                "CONNECT_REQUEST for an unknown listener {listener}"
            );
            self.learn_id(server, event.id());
        } else {
            assert!(
                self.ids.contains(&id),
                "{} delivered for an id never seen: {}",
                event.kind(),
                event.id()
            );
        }
        if let Some(arg) = event.user_arg() {
            assert!(
                self.user_written.contains(&arg),
                "USER event with an arg never written: {arg}"
            );
            assert!(
                self.user_delivered.insert(arg),
                "USER event {arg} delivered twice"
            );
        }
        self.outstanding.push((server, event));
    }

    /// Makes the call `op` describes and checks its result and any event it fetched.
    ///
    /// # Panics
    ///
    /// When the result or an event breaks the CM's contract (see the module documentation),
    /// or the simulator one of its own invariants.
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::CreateChannel { server } => {
                if let Some(ch) = self.check(
                    Call::CreateEventChannel,
                    self.cm(server).create_event_channel(),
                ) {
                    self.channels.push((server, ch));
                }
            }
            Op::DestroyChannel { ch, owner } => {
                let Some((server, ch)) = self.channel(ch, owner) else {
                    return;
                };
                if self
                    .check(
                        Call::DestroyEventChannel,
                        self.cm(server).destroy_event_channel(ch),
                    )
                    .is_some()
                {
                    self.destroyed_channels.insert((server, ch));
                }
            }
            Op::CreateId { server, ch, ps } => {
                let channel = match ch {
                    Some(idx) => match self.channel(idx, true) {
                        Some((_, ch)) => Some(ch),
                        None => return,
                    },
                    None => None,
                };
                let ps = PORT_SPACES[usize::from(ps) % PORT_SPACES.len()];
                if let Some(id) =
                    self.check(Call::CreateId, self.cm(server).create_id(channel, 0, ps))
                {
                    self.learn_id(server, id);
                }
            }
            Op::DestroyId { id, owner } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                if self
                    .check(Call::DestroyId, self.cm(server).destroy_id(id))
                    .is_some()
                {
                    self.destroyed_ids.insert((server, id));
                }
            }
            Op::Bind { id, owner, addr } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let addr = self.addr(server, addr);
                self.check(Call::BindAddr, self.cm(server).bind_addr(id, addr));
            }
            Op::ResolveAddr {
                id,
                owner,
                dst,
                timeout_ms,
            } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let dst = self.dst(server, dst);
                let timeout = Duration::from_millis(timeout_ms.into());
                self.check(
                    Call::ResolveAddr,
                    self.cm(server).resolve_addr(id, None, dst, timeout),
                );
            }
            Op::ResolveRoute {
                id,
                owner,
                timeout_ms,
            } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let timeout = Duration::from_millis(timeout_ms.into());
                self.check(
                    Call::ResolveRoute,
                    self.cm(server).resolve_route(id, timeout),
                );
            }
            Op::Listen { id, owner, backlog } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(Call::Listen, self.cm(server).listen(id, backlog.into()));
            }
            Op::GetRequest { id, owner } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                if let Some(child) = self.check(Call::GetRequest, self.cm(server).get_request(id)) {
                    self.learn_id(server, child);
                }
            }
            Op::Connect {
                id,
                owner,
                len,
                param,
            } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let p = ConnParam::with_private_data(&vec![0xab; len.into()]);
                let p = param.then_some(&p);
                self.check(Call::Connect, self.cm(server).connect(id, p));
            }
            Op::Accept {
                id,
                owner,
                len,
                param,
            } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let p = ConnParam::with_private_data(&vec![0xcd; len.into()]);
                let p = param.then_some(&p);
                self.check(Call::Accept, self.cm(server).accept(id, p));
            }
            Op::Reject { id, owner, len } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(
                    Call::Reject,
                    self.cm(server).reject(id, &vec![0xef; len.into()]),
                );
            }
            Op::Disconnect { id, owner } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(Call::Disconnect, self.cm(server).disconnect(id));
            }
            Op::Notify { id, owner, event } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(Call::Notify, self.cm(server).notify(id, AsyncEvent(event)));
            }
            Op::Establish { id, owner } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(Call::Establish, self.cm(server).establish(id));
            }
            Op::WriteEvent {
                id,
                owner,
                kind,
                status,
            } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let arg = self.next_user_arg;
                self.next_user_arg += 1;
                let kind = EventKind::from_raw(kind);
                if self
                    .check(
                        Call::WriteCmEvent,
                        self.cm(server).write_cm_event(id, kind, status, arg),
                    )
                    .is_some()
                {
                    assert_eq!(kind, EventKind::User, "write_cm_event accepted {kind}");
                    self.user_written.insert(arg);
                    self.user_statuses.insert(status);
                }
            }
            Op::GetEvent { ch, owner, wait } => {
                let Some((server, ch)) = self.channel(ch, owner) else {
                    return;
                };
                let wait = match wait {
                    0 => Wait::NonBlocking,
                    1 => Wait::Timeout(Duration::from_millis(1500)),
                    _ => Wait::Block,
                };
                if let Some(event) =
                    self.check(Call::GetCmEvent, self.cm(server).get_cm_event(ch, wait))
                {
                    self.delivered(server, event);
                }
            }
            Op::Ack { which } => {
                if self.outstanding.is_empty() {
                    return;
                }
                let (server, event) = self.outstanding.remove(which % self.outstanding.len());
                self.check(Call::AckCmEvent, self.cm(server).ack_cm_event(event))
                    .expect("acking a delivered event must succeed");
            }
            Op::DropEvent { which } => {
                if self.outstanding.is_empty() {
                    return;
                }
                let (_, event) = self.outstanding.remove(which % self.outstanding.len());
                drop(event);
            }
            Op::CreateQp { id, owner, ud } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let qp_type = if ud { QpType::Ud } else { QpType::Rc };
                self.check(
                    Call::CreateQp,
                    self.cm(server).create_qp(id, &QpInitAttr::new(qp_type)),
                );
            }
            Op::DestroyQp { id, owner } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                self.check(Call::DestroyQp, self.cm(server).destroy_qp(id));
            }
            Op::Migrate { id, owner, ch } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let channel = match ch {
                    Some(idx) => match self.channel(idx, true) {
                        Some((_, ch)) => Some(ch),
                        None => return,
                    },
                    None => None,
                };
                self.check(Call::MigrateId, self.cm(server).migrate_id(id, channel));
            }
            Op::SetOption { id, owner, option } => {
                let Some((server, id)) = self.id(id, owner) else {
                    return;
                };
                let option = match option {
                    0 => CmOption::Tos(8),
                    1 => CmOption::ReuseAddr(true),
                    2 => CmOption::AfOnly(true),
                    3 => CmOption::AckTimeout(14),
                    _ => CmOption::IbPath(vec![0; 72]),
                };
                self.check(Call::SetOption, self.cm(server).set_option(id, &option));
            }
            Op::Dial { ud, qp, len } => {
                let _ = self.dial(ud, qp, len);
            }
            Op::Serve { accept, len } => {
                let _ = self.serve(accept, len);
            }
            Op::Pump { server } => self.pump(server),
            Op::RemoveDevice { server } => {
                if self.verbose {
                    eprintln!("    remove_device({server})");
                }
                self.bed
                    .fabric
                    .remove_device(if server { "server" } else { "client" })
                    .expect("both hosts have a device");
            }
            Op::Sleep { ms } => {
                self.check(
                    Call::Sleep,
                    self.bed.client().sleep(Duration::from_millis(ms.into())),
                );
            }
        }
    }

    /// Fetches one event from `ch` on `server`, checks it, acks it and returns what it said.
    fn fetch(&mut self, server: bool, ch: ChannelHandle, wait: Wait) -> Option<EventInfo> {
        let event = self.check(Call::GetCmEvent, self.cm(server).get_cm_event(ch, wait))?;
        let info = event.info().clone();
        self.delivered(server, event);
        let (server, event) = self.outstanding.pop().expect("just delivered");
        self.check(Call::AckCmEvent, self.cm(server).ack_cm_event(event))
            .expect("acking a delivered event must succeed");
        Some(info)
    }

    fn dial(&mut self, ud: bool, qp: bool, len: u8) -> Option<()> {
        let (_, ch) = self.channels[1];
        let ps = if ud { PortSpace::UDP } else { PortSpace::TCP };
        let cm = self.bed.client().clone();
        let id = self.check(Call::CreateId, cm.create_id(Some(ch), 0, ps))?;
        self.learn_id(false, id);
        let dst = SocketAddr::new(SimBed::SERVER_IP, 5000);
        self.check(
            Call::ResolveAddr,
            cm.resolve_addr(id, None, dst, Duration::from_millis(2000)),
        )?;
        let ev = self.fetch(false, ch, Wait::Timeout(Duration::from_secs(3)))?;
        if ev.id != id || ev.kind != EventKind::AddrResolved {
            return None;
        }
        self.check(
            Call::ResolveRoute,
            cm.resolve_route(id, Duration::from_millis(2000)),
        )?;
        let ev = self.fetch(false, ch, Wait::Timeout(Duration::from_secs(3)))?;
        if ev.id != id || ev.kind != EventKind::RouteResolved {
            return None;
        }
        if qp {
            let qp_type = if ud { QpType::Ud } else { QpType::Rc };
            self.check(Call::CreateQp, cm.create_qp(id, &QpInitAttr::new(qp_type)))?;
        }
        let param = ConnParam {
            qp_num: 0x42,
            ..ConnParam::with_private_data(&vec![1; len.into()])
        };
        self.check(Call::Connect, cm.connect(id, Some(&param)))
    }

    fn serve(&mut self, accept: bool, len: u8) -> Option<()> {
        let (_, ch) = self.channels[0];
        let cm = self.bed.server().clone();
        let ev = self.fetch(true, ch, Wait::Timeout(Duration::from_secs(3)))?;
        if ev.kind != EventKind::ConnectRequest {
            return Some(());
        }
        let data = vec![2; len.into()];
        if accept {
            let qp_type = if matches!(ev.param, EventParam::Ud(_)) {
                QpType::Ud
            } else {
                QpType::Rc
            };
            self.check(
                Call::CreateQp,
                cm.create_qp(ev.id, &QpInitAttr::new(qp_type)),
            )?;
            self.check(
                Call::Accept,
                cm.accept(ev.id, Some(&ConnParam::with_private_data(&data))),
            )
        } else {
            self.check(Call::Reject, cm.reject(ev.id, &data))
        }
    }

    fn pump(&mut self, server: bool) {
        let (_, ch) = self.channels[usize::from(!server)];
        while self.fetch(server, ch, Wait::NonBlocking).is_some() {}
    }

    /// Acks everything outstanding, then destroys every id and channel still alive.
    ///
    /// # Panics
    ///
    /// When an ack, or the destruction of a live id or channel, fails.
    pub fn finish(mut self) {
        // Ids the application received only as a synchronous id's kept CONNECT_REQUEST (a
        // synchronous call returns on any event, §11.2) are the application's too.
        for (server, id) in self.ids.clone() {
            if let Ok(Some(info)) = self.cm(server).sync_event(id) {
                if info.kind == EventKind::ConnectRequest {
                    self.learn_id(server, info.id);
                }
            }
        }
        for (server, event) in std::mem::take(&mut self.outstanding) {
            self.cm(server)
                .ack_cm_event(event)
                .expect("acking a delivered event must succeed");
        }
        // Listeners last: children first.
        let ids: Vec<_> = self.ids.iter().rev().copied().collect();
        for (server, id) in ids {
            if self.destroyed_ids.contains(&(server, id)) {
                continue;
            }
            match self.cm(server).destroy_id(id) {
                Ok(()) => {}
                Err(err) => panic!("destroying live {id} after every ack: {err}"),
            }
        }
        for (server, ch) in self.channels.clone() {
            if self.destroyed_channels.contains(&(server, ch)) {
                continue;
            }
            if let Err(err) = self.cm(server).destroy_event_channel(ch) {
                panic!("destroying {ch} after every id is gone: {err}");
            }
        }
    }
}
