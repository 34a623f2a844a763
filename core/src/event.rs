//! CM events: owned values that must be acknowledged exactly once.

use std::fmt;
use std::sync::Weak;

use crate::{EventKind, IdHandle, PortSpace};

/// Connection data of an RC/UC event (`struct rdma_conn_param` as delivered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnData {
    /// Responder resources (on a CONNECT_REQUEST: the peer's initiator depth).
    pub responder_resources: u8,
    /// Initiator depth (on a CONNECT_REQUEST: the peer's responder resources).
    pub initiator_depth: u8,
    /// Whether the peer uses end-to-end flow control.
    pub flow_control: u8,
    /// Transport retry count (0..=7).
    pub retry_count: u8,
    /// RNR retry count (0..=7).
    pub rnr_retry_count: u8,
    /// Whether the peer uses an SRQ.
    pub srq: u8,
    /// The peer's QP number.
    pub qp_num: u32,
}

/// The global route header part of an address handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// Address handle attributes (`struct ibv_ah_attr`) for sending datagrams to a peer or group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Global route header, when `is_global`.
    pub grh: GlobalRoute,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether the GRH is used (always on RoCE).
    pub is_global: bool,
    /// Local port number.
    pub port_num: u8,
}

/// Datagram data of a UD event (`struct rdma_ud_param` as delivered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdData {
    /// Address handle attributes to reach the peer (zero on a passive CONNECT_REQUEST).
    pub ah_attr: AhAttr,
    /// The peer's QP number (0xFFFFFF for multicast).
    pub qp_num: u32,
    /// The peer's qkey.
    pub qkey: u32,
}

/// The event's parameters: which union member of `rdma_cm_event.param` is meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventParam {
    /// No parameters carry meaning (e.g. ADDR_RESOLVED, DISCONNECTED).
    #[default]
    None,
    /// Connection data (RC/UC connection events).
    Conn(ConnData),
    /// Datagram data (UD connection events).
    Ud(UdData),
    /// Multicast events: datagram data for the group and the context given to `join_multicast`.
    Multicast {
        /// Address handle, QPN 0xFFFFFF and qkey of the group.
        ud: UdData,
        /// The context passed to `join_multicast`.
        context: u64,
    },
    /// The 64-bit argument of a USER event.
    User(u64),
}

/// Everything an event says, as a plain value (copyable, with no obligation to acknowledge).
///
/// This is what a synchronous id keeps as its current event (`CmBackend::sync_event`). It
/// grows as librdmacm's event does, so it is built with [`EventInfo::new`] and its fields are
/// then set.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventInfo {
    /// The kind of event.
    pub kind: EventKind,
    /// The raw status: 0, a negative errno, an IB reject reason, a SIDR status, or a USER status.
    pub status: i32,
    /// The id the event is for (the new child id for CONNECT_REQUEST).
    pub id: IdHandle,
    /// The port space of the event's id (`event->id->ps`; a CONNECT_REQUEST's child has its
    /// listener's).
    pub port_space: PortSpace,
    /// The listener, for CONNECT_REQUEST only.
    pub listen_id: Option<IdHandle>,
    /// The parameters.
    pub param: EventParam,
    /// Private data as delivered: zero-padded to the CM message's field size on IB and RoCE,
    /// empty when librdmacm's `private_data` pointer is NULL (see
    /// [`CmEvent::private_data_opt`]).
    pub private_data: Vec<u8>,
}

impl EventInfo {
    /// An event of `kind` with `status` for `id` of `port_space`, with no listener, no
    /// parameters and no private data (for backend implementors and tests).
    #[must_use]
    pub fn new(kind: EventKind, status: i32, id: IdHandle, port_space: PortSpace) -> Self {
        EventInfo {
            kind,
            status,
            id,
            port_space,
            listen_id: None,
            param: EventParam::None,
            private_data: Vec::new(),
        }
    }

    /// The private data as librdmacm's pointer gives it: `None` where `private_data` is NULL.
    ///
    /// librdmacm sets the pointer only when the kernel delivered a non-zero length (cma.c
    /// copies connection and datagram parameters that way for every kind), so `Some` is never
    /// empty:
    ///
    /// * IB and RoCE: CONNECT_REQUEST (56 bytes RC, 180 UD), CONNECT_RESPONSE and the active
    ///   ESTABLISHED (196), REJECTED (148), the UD ESTABLISHED and a SIDR UNREACHABLE (136)
    ///   always carry the message's whole field, zero-padded, even when the peer sent nothing.
    /// * iWARP: exactly what the peer sent; nothing sent is `None`.
    /// * The passive ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT, address and route events,
    ///   USER and ADDRINFO events: `None`.
    /// * MULTICAST_JOIN/ERROR: `None` here; librdmacm's pointer carries the join context
    ///   (length 0), which is [`EventParam::Multicast`]'s `context`.
    pub fn private_data_opt(&self) -> Option<&[u8]> {
        if self.private_data.is_empty() {
            None
        } else {
            Some(&self.private_data)
        }
    }

    /// The connection data, if this event carries it (what [`CmEvent::conn`] gives, for
    /// the copy a call such as `expect_event` returns after the acknowledgement).
    pub fn conn(&self) -> Option<&ConnData> {
        match &self.param {
            EventParam::Conn(c) => Some(c),
            _ => None,
        }
    }

    /// The datagram data, if this event carries it (UD or multicast events).
    pub fn ud(&self) -> Option<&UdData> {
        match &self.param {
            EventParam::Ud(u) | EventParam::Multicast { ud: u, .. } => Some(u),
            _ => None,
        }
    }

    /// The argument of a USER event.
    pub fn user_arg(&self) -> Option<u64> {
        match self.param {
            EventParam::User(arg) => Some(arg),
            _ => None,
        }
    }
}

/// A ticket that the issuing backend uses to recognise the event when it is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AckTicket(pub u64);

/// How a dropped event reaches the backend that issued it (for backend implementors).
///
/// A backend gives each event it returns a weak reference to its implementation of this trait
/// ([`CmEvent::with_release`]). Dropping an event that was not acknowledged calls
/// [`EventRelease::release_dropped`] once, on the dropping thread, if the backend still exists.
pub trait EventRelease: Send + Sync {
    /// Releases the unacknowledged event `info` issued with `ticket`, as an acknowledgement
    /// would. It must tolerate any ticket (one already released, or foreign) and must not
    /// panic.
    fn release_dropped(&self, info: &EventInfo, ticket: AckTicket);
}

/// A CM event returned by `get_cm_event`. It is acknowledged exactly once: by
/// `ack_cm_event`, which consumes it (so a double ack does not compile, and the private data,
/// borrowed from the event, cannot outlive the ack), or else by its drop.
///
/// Dropping an unacknowledged event acknowledges it, so `destroy_id` of its id is not held up
/// (librdmacm would block forever; an explicit ack stays available to see its errors). The
/// drop is harmless in every case: after the backend is gone it does nothing; on another
/// thread it acknowledges there (on the simulator, while `Fabric::run` is in progress, only a
/// drop by one of the fabric's own processes acknowledges: a drop on any other thread leaves
/// the event outstanding, so that the trace never depends on the OS's thread scheduling).
/// On the simulator the acknowledgement happens at the drop, in program order, and is traced
/// as `... (dropped)`.
#[must_use = "a CM event is acknowledged when dropped; read it first, or ack it explicitly \
              with ack_cm_event"]
pub struct CmEvent {
    info: EventInfo,
    ticket: AckTicket,
    release: Option<Weak<dyn EventRelease>>,
}

impl fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmEvent")
            .field("info", &self.info)
            .field("ticket", &self.ticket)
            .field("released_by_drop", &self.release.is_some())
            .finish()
    }
}

impl Drop for CmEvent {
    fn drop(&mut self) {
        if let Some(backend) = self.release.take().and_then(|w| w.upgrade()) {
            backend.release_dropped(&self.info, self.ticket);
        }
    }
}

impl CmEvent {
    /// Builds an event whose drop does nothing (for backend implementors and tests).
    pub fn new(info: EventInfo, ticket: AckTicket) -> Self {
        CmEvent {
            info,
            ticket,
            release: None,
        }
    }

    /// The same event, released through `backend` when dropped unacknowledged (for backend
    /// implementors).
    #[inline]
    pub fn with_release(mut self, backend: Weak<dyn EventRelease>) -> Self {
        self.arm(backend);
        self
    }

    /// Makes the event released through `backend` when dropped unacknowledged, in place (for
    /// backend implementors: [`CmEvent::with_release`] without moving the event).
    #[inline]
    pub fn arm(&mut self, backend: Weak<dyn EventRelease>) {
        self.release = Some(backend);
    }

    /// Forgets how to release the event, so that dropping it does nothing; a backend calls
    /// this once an explicit acknowledgement succeeded. An application calling it leaves the
    /// event outstanding, as `std::mem::forget` would.
    #[inline]
    pub fn disarm(&mut self) {
        self.release = None;
    }

    /// The kind of event.
    pub fn kind(&self) -> EventKind {
        self.info.kind
    }

    /// The raw status (`event->status`).
    pub fn status(&self) -> i32 {
        self.info.status
    }

    /// The id the event is for.
    pub fn id(&self) -> IdHandle {
        self.info.id
    }

    /// The port space of the event's id (`event->id->ps`).
    pub fn port_space(&self) -> PortSpace {
        self.info.port_space
    }

    /// The listener of a CONNECT_REQUEST.
    pub fn listen_id(&self) -> Option<IdHandle> {
        self.info.listen_id
    }

    /// The event's parameters.
    pub fn param(&self) -> &EventParam {
        &self.info.param
    }

    /// The connection data, if this event carries it.
    pub fn conn(&self) -> Option<&ConnData> {
        self.info.conn()
    }

    /// The datagram data, if this event carries it (UD or multicast events).
    pub fn ud(&self) -> Option<&UdData> {
        self.info.ud()
    }

    /// The argument of a USER event.
    pub fn user_arg(&self) -> Option<u64> {
        self.info.user_arg()
    }

    /// Private data as delivered (empty when the event carries none).
    pub fn private_data(&self) -> &[u8] {
        &self.info.private_data
    }

    /// Private data as librdmacm's pointer gives it: `None` where it is NULL (see
    /// [`EventInfo::private_data_opt`] for which events carry what).
    pub fn private_data_opt(&self) -> Option<&[u8]> {
        self.info.private_data_opt()
    }

    /// Everything the event says.
    pub fn info(&self) -> &EventInfo {
        &self.info
    }

    /// The backend's ticket for this event (for backend implementors).
    pub fn ticket(&self) -> AckTicket {
        self.ticket
    }
}
