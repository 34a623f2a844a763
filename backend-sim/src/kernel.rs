//! The hosts' rdma_cm state as the kernel keeps it: ids with their state machine, event
//! channels with their queues, bound ports, and the events fetched but not yet acknowledged.
//! The calls that change it are in `calls/`; the world ties it to the wire, the CM endpoints
//! and the clock.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;

use cmtwin::{EventInfo, EventKind, PortSpace, QpType};

use crate::chunked_queue::ChunkedQueue;
use crate::store::{BoxedStore, KeyMap, OptKey, Store};
use crate::topology::{DevKey, HostKey};

/// Key of a channel (the low half of its handle).
pub(crate) type ChanKey = u64;
/// Key of an id (the low half of its handle).
pub(crate) type IdKey = u64;
/// Key of a multicast membership (one per join, as librdmacm keeps them).
pub(crate) type McKey = u64;

/// The kernel's `enum rdma_cm_state` (CM-SEMANTICS.md §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CmState {
    /// Freshly created.
    Idle,
    /// Address resolution in progress.
    AddrQuery,
    /// Destination resolved, device bound.
    AddrResolved,
    /// Route resolution in progress.
    RouteQuery,
    /// Ready to connect.
    RouteResolved,
    /// Connecting, connected, or refused: kept until DISCONNECTED.
    Connect,
    /// DISCONNECTED was generated.
    Disconnect,
    /// Source address bound.
    AddrBound,
    /// Listening.
    Listen,
    /// The device went away.
    DeviceRemoval,
    /// An SA service query of `resolve_addrinfo` in progress (Linux ≥ 6.18).
    AddrinfoQuery,
}

/// An event as the kernel queued it on a channel, before librdmacm's processing at fetch time.
pub(crate) struct Queued {
    pub info: EventInfo,
    /// The id whose events these are.
    pub owner: IdKey,
    /// The id whose destroy waits for the ack (the listener for CONNECT_REQUEST).
    pub counted_against: IdKey,
    /// The multicast membership the event belongs to.
    pub membership: Option<McKey>,
}

/// An event channel: one FIFO.
pub(crate) struct Channel {
    pub host: HostKey,
    /// The simulated process (its group: a top-level process and the threads it spawned) that
    /// made the channel, which a crash of that process closes (`None`: made outside a run).
    pub owner: Option<usize>,
    pub queue: ChunkedQueue<Queued>,
    /// For the private channel of a synchronous id: that id.
    pub private_for: Option<IdKey>,
}

impl Channel {
    /// Takes the oldest queued event. The queue frees its chunks as they are fetched, so the
    /// memory of a burst of events is not held once the burst is fetched.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Queued> {
        self.queue.pop_front()
    }
}

/// What a listening id keeps.
#[derive(Clone, Copy)]
pub(crate) struct ListenState {
    pub backlog: usize,
    /// CONNECT_REQUESTs queued and not yet fetched (they take backlog slots).
    pub pending: usize,
}

/// State of `resolve_addrinfo` on an id.
#[derive(Clone, Debug, Default)]
pub(crate) enum AddrinfoState {
    #[default]
    None,
    /// An SA-mode query is in flight, or ended in an ADDRINFO_ERROR not yet fetched.
    Pending,
    Resolved(Vec<cmtwin::AddrInfo>),
}

/// A simulated `rdma_cm_id`.
pub(crate) struct Id {
    pub host: HostKey,
    pub channel: ChanKey,
    pub sync: bool,
    pub context: u64,
    pub ps: PortSpace,
    pub qp_type: QpType,
    pub state: CmState,
    pub device: Option<DevKey>,
    /// The kernel's source address (`route.addr.src_addr`).
    pub local: Option<SocketAddr>,
    /// The kernel's destination address (`route.addr.dst_addr`), once a resolution gave one;
    /// kept after ADDR_ERROR, as `addr_handler` restores only the source.
    pub peer: Option<SocketAddr>,
    /// librdmacm's copy of the source was never refreshed (`ucma_query_addr` after bind or
    /// listen, or as ADDR_RESOLVED or the CONNECT_REQUEST is fetched): it reads as none.
    pub user_src_unset: bool,
    /// librdmacm's copy of the source, where the kernel changed `local` after the copy was
    /// taken (a wildcard replaced when the resolution completed, before ADDR_RESOLVED is
    /// fetched); boxed, as only that window needs it.
    pub user_src_held: Option<Box<SocketAddr>>,
    /// librdmacm attached the kernel's device (`id->verbs`, set by `ucma_get_device` when an
    /// address query after bind or listen, or as ADDR_RESOLVED or the CONNECT_REQUEST is
    /// processed, finds one): what calls needing the device look at, not `device`.
    pub user_device: bool,
    /// The (port space, port) this id holds in its host's port table.
    pub port: Option<u16>,
    pub reuseaddr: bool,
    pub afonly: Option<bool>,
    pub tos: u8,
    pub ack_timeout: Option<u8>,
    /// The packet life time of the id's path, once its route is resolved (or its request
    /// arrived): RoCE takes ACK_TIMEOUT − 1 when that option was set before (§4.5).
    pub path_plt: Option<u8>,
    /// The traffic class of the id's route: on RoCE the TOS the id had when it resolved its
    /// route (cma.c `cma_resolve_iboe_route`), or on a passive id the REQ's (cm.c
    /// `cm_format_paths_from_req`); 0 elsewhere (an SA path carries none).
    pub path_tclass: u8,
    /// The number of the id's QP (`id->qp`), through [`Id::qp`] and [`Id::set_qp`]: QP
    /// numbers are never 0, so none takes no room of its own.
    pub qp_num: Option<NonZeroU32>,
    /// The key of the verbs QP last made for this id, where `World::qp_of` looks before it
    /// searches by number (0: none, or a key beyond 32 bits); a hint in 4 bytes of the id's
    /// padding, checked against the QP it names.
    pub qp_hint: u32,
    pub qkey: u32,
    /// The id's CM endpoint (an `EpKey`), while it has one.
    pub ep: OptKey,
    /// Whether user space owns the id (false for an unaccepted child: its events are dropped).
    pub owned: bool,
    pub sync_event: Option<Box<SyncEvent>>,
    /// Bumped to cancel pending address/route/multicast work of this id.
    pub op_gen: u64,
    /// What only some ids have (a listen, multicast joins, an addrinfo result), boxed so that
    /// the common id does not carry it: see [`IdExtras`].
    pub extras: Option<Box<IdExtras>>,
    /// The kinds of event queued for this id so far, a bit per kind (for the invariants).
    pub reported: u64,
    /// How many of this id's events are queued on channels (destroy looks only when some are).
    pub queued: u32,
    /// The channel (a `ChanKey`) holding this child's unfetched CONNECT_REQUEST.
    pub request_queued_on: OptKey,
    /// How many fetched events counted against this id are unacknowledged.
    pub unacked: u32,
    /// librdmacm turned a CONNECT_RESPONSE of this id into CONNECT_ERROR: it swallows the
    /// REJECTED and DISCONNECTED that follow (cma.c, `connect_error`).
    pub connect_error: bool,
    /// `rdma_destroy_id` has begun and blocks in the kernel (an iWARP initiator waiting for
    /// its MPA reply): the rdma_cm queues no more events for the id.
    pub destroying: bool,
    /// The connection data of the REQ this id sent (active) or received (passive child): the
    /// QPs take their transport retry count from it (and the passive side its RNR retry count
    /// and the peer's QP number).
    pub req_conn: Option<cmtwin::ConnData>,
    /// The REP's connection data of an active id, once librdmacm processed its
    /// CONNECT_RESPONSE (what `rdma_init_qp_attr` takes the peer's QP number and RNR retry
    /// count from); on iWARP, as its MPA reply arrives, with the acceptor's QP number. For a
    /// passive id, the reply its `rdma_accept` sent.
    pub rep_conn: Option<cmtwin::ConnData>,
}

impl Id {
    /// A fresh id of `host` on `channel` (its private one when `sync`), as `rdma_create_id`
    /// makes it: idle, unbound, owned by user space.
    pub(crate) fn new(
        host: HostKey,
        channel: ChanKey,
        sync: bool,
        context: u64,
        ps: PortSpace,
    ) -> Self {
        Id {
            host,
            channel,
            sync,
            context,
            ps,
            qp_type: ps.default_qp_type(),
            state: CmState::Idle,
            device: None,
            local: None,
            peer: None,
            user_src_unset: true,
            user_src_held: None,
            user_device: false,
            port: None,
            reuseaddr: false,
            afonly: None,
            tos: 0,
            ack_timeout: None,
            path_plt: None,
            path_tclass: 0,
            qp_num: None,
            qp_hint: 0,
            qkey: cmtwin::RDMA_UDP_QKEY,
            ep: OptKey::NONE,
            owned: true,
            sync_event: None,
            op_gen: 0,
            extras: None,
            reported: 0,
            queued: 0,
            request_queued_on: OptKey::NONE,
            unacked: 0,
            connect_error: false,
            destroying: false,
            req_conn: None,
            rep_conn: None,
        }
    }
}

impl Id {
    /// The number of the id's QP (`id->qp`), if it has one.
    pub(crate) fn qp(&self) -> Option<u32> {
        self.qp_num.map(NonZeroU32::get)
    }

    /// Gives the id QP number `qpn` (never 0), or none.
    pub(crate) fn set_qp(&mut self, qpn: Option<u32>) {
        debug_assert_ne!(qpn, Some(0), "QP numbers are never 0");
        self.qp_num = qpn.and_then(NonZeroU32::new);
    }

    /// The source address librdmacm holds in `id->route.addr.src_addr`, which
    /// `rdma_get_local_addr` reads.
    pub(crate) fn user_local(&self) -> Option<SocketAddr> {
        if self.user_src_unset {
            None
        } else if let Some(held) = &self.user_src_held {
            Some(**held)
        } else {
            self.local
        }
    }

    /// The destination address librdmacm holds in `id->route.addr.dst_addr`, which
    /// `rdma_get_peer_addr` reads: the one `rdma_resolve_addr` was given once the call
    /// succeeded (or a request's source), else, once the copy was refreshed, the kernel's
    /// destination as a bind leaves it: the bound family's unspecified address, port 0.
    pub(crate) fn user_peer(&self) -> Option<SocketAddr> {
        self.peer.or_else(|| {
            self.user_local().map(|a| {
                let zero = match a {
                    SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                };
                SocketAddr::new(zero, 0)
            })
        })
    }

    /// librdmacm copies the kernel's addresses (`ucma_query_addr`), and attaches the device
    /// the kernel reports, if it has none yet (`ucma_get_device`).
    pub(crate) fn refresh_user_addrs(&mut self) {
        self.user_src_unset = false;
        self.user_src_held = None;
        self.user_device |= self.device.is_some();
    }

    /// The id's device as librdmacm knows it (`id->verbs`): the kernel's, once an address
    /// query found it. Between the kernel attaching it (address resolution completing, or the
    /// bind inside `rdma_resolve_addr`) and ADDR_RESOLVED being processed, librdmacm has none
    /// and would dereference a NULL `id->verbs` in the calls that need it.
    pub(crate) fn librdmacm_device(&self) -> Option<DevKey> {
        self.device.filter(|_| self.user_device)
    }

    /// The kernel changes the source to `src`: librdmacm's copy, if taken, keeps the old one
    /// until it is refreshed.
    pub(crate) fn change_local(&mut self, src: SocketAddr) {
        if let Some(old) = self.local.filter(|old| *old != src) {
            if !self.user_src_unset && self.user_src_held.is_none() {
                self.user_src_held = Some(Box::new(old));
            }
        }
        self.local = Some(src);
    }
}

/// The parts of an id that only listeners, multicast members and `resolve_addrinfo` users
/// have: an [`Id`] holds them behind one pointer, made on first use.
#[derive(Default)]
pub(crate) struct IdExtras {
    listen: Option<ListenState>,
    /// Multicast memberships, one per join, by key (a later join has a larger key).
    multicast: BTreeMap<McKey, Membership>,
    addrinfo: AddrinfoState,
    /// The QP attributes `rdma_create_ep` kept on a passive id: `get_request` gives each new
    /// id a QP of them.
    request_qp: Option<cmtwin::ep::EpQpAttr>,
    /// On iWARP, the number of the QP made apart from ids that the connection's iWARP CM
    /// holds (iwcm.c `cm_id_priv->qp`, from `conn_param->qp_num`): set by `rdma_connect` or
    /// `rdma_accept` of an id without a QP of its own.
    iw_qp: Option<u32>,
}

/// The empty multicast table of an id that never joined.
static NO_MEMBERSHIPS: BTreeMap<McKey, Membership> = BTreeMap::new();

impl Id {
    fn extras_mut(&mut self) -> &mut IdExtras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// The listen state, if the id listens.
    pub(crate) fn listen(&self) -> Option<&ListenState> {
        self.extras.as_ref()?.listen.as_ref()
    }

    /// The listen state to change, if the id listens.
    pub(crate) fn listen_mut(&mut self) -> Option<&mut ListenState> {
        self.extras.as_mut()?.listen.as_mut()
    }

    /// Makes the id a listener.
    pub(crate) fn set_listen(&mut self, listen: ListenState) {
        self.extras_mut().listen = Some(listen);
    }

    /// The QP attributes that requests taken from this id get (`rdma_create_ep`, passive).
    pub(crate) fn request_qp(&self) -> Option<&cmtwin::ep::EpQpAttr> {
        self.extras.as_ref()?.request_qp.as_ref()
    }

    /// The number of the external QP the id's iWARP CM holds, if any.
    pub(crate) fn iw_qp(&self) -> Option<u32> {
        self.extras.as_ref()?.iw_qp
    }

    /// Makes the id's iWARP CM hold external QP `qpn` (or none).
    pub(crate) fn set_iw_qp(&mut self, qpn: Option<u32>) {
        if qpn.is_some() || self.extras.is_some() {
            self.extras_mut().iw_qp = qpn;
        }
    }

    /// Keeps the QP attributes that requests taken from this id get.
    pub(crate) fn set_request_qp(&mut self, attr: cmtwin::ep::EpQpAttr) {
        self.extras_mut().request_qp = Some(attr);
    }

    /// The id's multicast memberships, by key.
    pub(crate) fn multicast(&self) -> &BTreeMap<McKey, Membership> {
        self.extras
            .as_ref()
            .map_or(&NO_MEMBERSHIPS, |e| &e.multicast)
    }

    /// The id's multicast memberships, to change.
    pub(crate) fn multicast_mut(&mut self) -> &mut BTreeMap<McKey, Membership> {
        &mut self.extras_mut().multicast
    }

    /// Where the id's `resolve_addrinfo` stands.
    pub(crate) fn addrinfo(&self) -> &AddrinfoState {
        self.extras
            .as_ref()
            .map_or(&AddrinfoState::None, |e| &e.addrinfo)
    }

    /// Where the id's `resolve_addrinfo` stands, to change.
    pub(crate) fn addrinfo_mut(&mut self) -> &mut AddrinfoState {
        &mut self.extras_mut().addrinfo
    }
}

/// The ids bound to one port, in the order they bound it: nearly always one, held inline
/// (only ports shared through REUSEADDR or by listeners on distinct addresses need a vector,
/// kept behind a pointer so that the common case weighs two words).
#[derive(Default)]
pub(crate) enum PortHolders {
    /// None.
    #[default]
    Empty,
    /// One id.
    One(IdKey),
    /// Two and more. Boxed on purpose: a vector inline would make every port's entry a word
    /// wider for a case that is rare.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<IdKey>>),
}

impl PortHolders {
    /// The holders, oldest first.
    pub(crate) fn as_slice(&self) -> &[IdKey] {
        match self {
            PortHolders::Empty => &[],
            PortHolders::One(key) => std::slice::from_ref(key),
            PortHolders::Many(keys) => keys,
        }
    }

    /// The holders, oldest first.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, IdKey> {
        self.as_slice().iter()
    }

    /// Adds `key` as the newest holder.
    pub(crate) fn push(&mut self, key: IdKey) {
        match self {
            PortHolders::Empty => *self = PortHolders::One(key),
            PortHolders::One(first) => *self = PortHolders::Many(Box::new(vec![*first, key])),
            PortHolders::Many(keys) => keys.push(key),
        }
    }

    /// Takes `key` out; true when no holder is left.
    pub(crate) fn remove(&mut self, key: IdKey) -> bool {
        match self {
            PortHolders::One(only) if *only == key => *self = PortHolders::Empty,
            PortHolders::Empty | PortHolders::One(_) => {}
            PortHolders::Many(keys) => {
                keys.retain(|k| *k != key);
                if let [only] = keys[..] {
                    *self = PortHolders::One(only);
                }
            }
        }
        self.as_slice().is_empty()
    }
}

impl<'a> IntoIterator for &'a PortHolders {
    type Item = &'a IdKey;
    type IntoIter = std::slice::Iter<'a, IdKey>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The event a synchronous id holds as its current one (librdmacm keeps it until the next
/// call or the destroy acknowledges it), with the serial of its ticket.
pub(crate) struct SyncEvent {
    pub info: EventInfo,
    pub ticket: u64,
}

/// An event fetched by the application and not yet acknowledged.
pub(crate) struct Outstanding {
    pub host: HostKey,
    pub counted_against: IdKey,
    pub owner: IdKey,
    pub kind: EventKind,
    pub membership: Option<McKey>,
}

/// One multicast join of an id: the group, the join's context, and whether the id's QP
/// receives the group's datagrams (librdmacm attaches it unless the join is send-only).
#[derive(Clone, Copy)]
pub(crate) struct Membership {
    pub addr: SocketAddr,
    pub context: u64,
    pub attached: bool,
    /// The subnet manager dropped it (the group was lost on InfiniBand): the fabric no
    /// longer forwards the group's datagrams to the member, whose QP stays attached.
    pub lost: bool,
}

/// Every host's ids, channels, ports and fetched events (keys are fabric-wide serials; each
/// object names its host).
pub(crate) struct Kernel {
    pub channels: Store<Channel>,
    /// Each in an allocation of its own: the table holds one pointer per id.
    pub ids: BoxedStore<Id>,
    /// Bound ports per (host, port space, port): the ids holding them.
    pub ports: KeyMap<(HostKey, PortSpace, u16), PortHolders>,
    /// Fetched, unacknowledged events by ticket serial.
    pub outstanding: crate::tickets::Tickets,
    /// The serial of the next fetched event's ticket.
    pub next_ticket: u64,
    /// SA path queries still to fail: (host, how many more, how).
    pub path_faults: Vec<(HostKey, u32, crate::faults::PathFailure)>,
}

impl Default for Kernel {
    fn default() -> Self {
        Kernel {
            channels: Store::default(),
            ids: BoxedStore::default(),
            ports: KeyMap::default(),
            outstanding: Default::default(),
            // Tickets count from 1, as the trace shows them.
            next_ticket: 1,
            path_faults: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PortHolders;

    #[test]
    fn port_holders_keep_binding_order_inline_and_spilled() {
        let mut h = PortHolders::default();
        assert!(h.as_slice().is_empty());
        h.push(7);
        assert!(matches!(h, PortHolders::One(7)));
        h.push(3);
        h.push(9);
        assert_eq!(h.as_slice(), &[7, 3, 9]);
        assert!(!h.remove(3));
        assert_eq!(h.as_slice(), &[7, 9]);
        assert!(!h.remove(7));
        assert!(matches!(h, PortHolders::One(9)));
        assert!(
            !h.remove(1),
            "a key that does not hold the port changes nothing"
        );
        assert!(h.remove(9));
        assert!(h.as_slice().is_empty());
        h.push(4);
        assert_eq!(h.iter().copied().collect::<Vec<_>>(), vec![4]);
    }
}
