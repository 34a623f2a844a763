//! The CM's event taxonomy, with librdmacm's numbers and names.

use std::fmt;

/// The kind of a CM event (`enum rdma_cm_event_type`), numbered as librdmacm numbers them.
///
/// `Unknown` carries a number this crate does not know (a newer librdmacm may deliver one); it is
/// passed through, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    /// 0: `rdma_resolve_addr` completed.
    AddrResolved,
    /// 1: address resolution failed.
    AddrError,
    /// 2: `rdma_resolve_route` completed (or a path was set with the IB_PATH option).
    RouteResolved,
    /// 3: route resolution failed.
    RouteError,
    /// 4: a connection request arrived on a listener; the event's id is the new child id.
    ConnectRequest,
    /// 5: the passive side accepted and the active id has no QP.
    ConnectResponse,
    /// 6: an error occurred while establishing the connection.
    ConnectError,
    /// 7: the remote side is unreachable or did not answer.
    Unreachable,
    /// 8: the remote side rejected the connection (status is the reject reason).
    Rejected,
    /// 9: the connection is established.
    Established,
    /// 10: the connection was disconnected.
    Disconnected,
    /// 11: the RDMA device the id is attached to was removed.
    DeviceRemoval,
    /// 12: a multicast join completed.
    MulticastJoin,
    /// 13: a multicast join failed, or an existing membership was lost.
    MulticastError,
    /// 14: the bound network device's address changed (bonding fail-over).
    AddrChange,
    /// 15: the connection's timewait ended; its QP may be reused.
    TimewaitExit,
    /// 16: `rdma_resolve_addrinfo` completed.
    AddrinfoResolved,
    /// 17: `rdma_resolve_addrinfo` failed.
    AddrinfoError,
    /// 18: an application event written with `rdma_write_cm_event`.
    User,
    /// A number outside 0..=18, passed through unchanged.
    Unknown(i32),
}

impl EventKind {
    /// Every kind a user can see, in numeric order.
    pub const ALL: [EventKind; 19] = [
        EventKind::AddrResolved,
        EventKind::AddrError,
        EventKind::RouteResolved,
        EventKind::RouteError,
        EventKind::ConnectRequest,
        EventKind::ConnectResponse,
        EventKind::ConnectError,
        EventKind::Unreachable,
        EventKind::Rejected,
        EventKind::Established,
        EventKind::Disconnected,
        EventKind::DeviceRemoval,
        EventKind::MulticastJoin,
        EventKind::MulticastError,
        EventKind::AddrChange,
        EventKind::TimewaitExit,
        EventKind::AddrinfoResolved,
        EventKind::AddrinfoError,
        EventKind::User,
    ];

    /// librdmacm's number for this kind.
    pub fn as_raw(self) -> i32 {
        match self {
            EventKind::Unknown(n) => n,
            known => EventKind::ALL
                .iter()
                .position(|k| *k == known)
                .expect("listed") as i32,
        }
    }

    /// The kind with librdmacm's number `raw`; unknown numbers become `Unknown(raw)`.
    pub fn from_raw(raw: i32) -> EventKind {
        usize::try_from(raw)
            .ok()
            .and_then(|i| EventKind::ALL.get(i).copied())
            .unwrap_or(EventKind::Unknown(raw))
    }

    /// The symbolic name, e.g. `"RDMA_CM_EVENT_USER"`; `"UNKNOWN EVENT"` for unknown numbers.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            EventKind::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            EventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            EventKind::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            EventKind::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            EventKind::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            EventKind::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            EventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            EventKind::Rejected => "RDMA_CM_EVENT_REJECTED",
            EventKind::Established => "RDMA_CM_EVENT_ESTABLISHED",
            EventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            EventKind::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            EventKind::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            EventKind::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            EventKind::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            EventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
            EventKind::AddrinfoResolved => "RDMA_CM_EVENT_ADDRINFO_RESOLVED",
            EventKind::AddrinfoError => "RDMA_CM_EVENT_ADDRINFO_ERROR",
            EventKind::User => "RDMA_CM_EVENT_USER",
            EventKind::Unknown(_) => "UNKNOWN EVENT",
        }
    }

    /// Exactly what librdmacm's `rdma_event_str` returns: the name for 0..=17, and
    /// `"UNKNOWN EVENT"` for USER (librdmacm's string table lacks it) and unknown numbers.
    pub fn event_str(self) -> &'static str {
        match self {
            EventKind::User => "UNKNOWN EVENT",
            other => other.name(),
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKind::Unknown(n) => write!(f, "UNKNOWN EVENT ({n})"),
            known => f.write_str(known.name()),
        }
    }
}
