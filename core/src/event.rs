//! CM events: owned values that must be acknowledged exactly once.

use crate::{EventKind, IdHandle};

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
/// This is what a synchronous id keeps as its current event (`CmBackend::sync_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// The kind of event.
    pub kind: EventKind,
    /// The raw status: 0, a negative errno, an IB reject reason, a SIDR status, or a USER status.
    pub status: i32,
    /// The id the event is for (the new child id for CONNECT_REQUEST).
    pub id: IdHandle,
    /// The listener, for CONNECT_REQUEST only.
    pub listen_id: Option<IdHandle>,
    /// The parameters.
    pub param: EventParam,
    /// Private data as delivered: zero-padded to the CM message's field size on IB and RoCE.
    pub private_data: Vec<u8>,
}

/// A ticket that the issuing backend uses to recognise the event when it is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AckTicket(pub u64);

/// A CM event returned by `get_cm_event`. It must be given back with `ack_cm_event`, which
/// consumes it: a double ack does not compile, and the private data, borrowed from the event,
/// cannot outlive the ack.
///
/// An event that is dropped without being acknowledged stays outstanding, as in librdmacm:
/// `destroy_id` of its id then fails with EBUSY naming it.
#[must_use = "a CM event must be acknowledged with ack_cm_event"]
#[derive(Debug)]
pub struct CmEvent {
    info: EventInfo,
    ticket: AckTicket,
}

impl CmEvent {
    /// Builds an event (for backend implementors).
    pub fn new(info: EventInfo, ticket: AckTicket) -> Self {
        CmEvent { info, ticket }
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
        match &self.info.param {
            EventParam::Conn(c) => Some(c),
            _ => None,
        }
    }

    /// The datagram data, if this event carries it (UD or multicast events).
    pub fn ud(&self) -> Option<&UdData> {
        match &self.info.param {
            EventParam::Ud(u) | EventParam::Multicast { ud: u, .. } => Some(u),
            _ => None,
        }
    }

    /// The argument of a USER event.
    pub fn user_arg(&self) -> Option<u64> {
        match self.info.param {
            EventParam::User(arg) => Some(arg),
            _ => None,
        }
    }

    /// Private data as delivered (empty when the event carries none).
    pub fn private_data(&self) -> &[u8] {
        &self.info.private_data
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
