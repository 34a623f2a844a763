//! What a scenario needs that not every bed has: a transport feature (UD, multicast, timewait,
//! the IB CM's REJ reasons...) or a fault the bed must be able to cause (remove a device, a
//! silent peer...). A scenario declares its needs in the suite's list
//! ([`conformance`](crate::conformance)); a bed that lacks one says why
//! ([`TestBed::lacks`](crate::TestBed::lacks)), and the harness reports the scenario as
//! ignored with that reason instead of running it.

use std::fmt;

use cmtwin::Transport;

/// One thing a scenario needs from its bed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Need {
    /// UD QPs and SIDR (UDP/IPoIB ids that connect): IB and RoCE (§13.2).
    Ud,
    /// Multicast joins (§13.3): IB and RoCE.
    Multicast,
    /// Timewait after a disconnect and its TIMEWAIT_EXIT (§7): IB and RoCE.
    Timewait,
    /// The IB CM's connection handshake as librdmacm shows it: an active id without a QP gets
    /// CONNECT_RESPONSE and calls `establish`, may reject the REP, and a failed RTU is
    /// CONNECT_ERROR (§4.7, §4.10, §5.1): IB and RoCE.
    QpLessConnect,
    /// Refusals reported with IB CM REJ reason codes (28 consumer, 8 no listener, 4 stale
    /// request, §2.7) and 148 bytes of REJ private data: IB and RoCE (iWARP reports
    /// -ECONNREFUSED with the exact data).
    IbRejectReasons,
    /// `notify(COMM_EST)` establishing a passive id before the RTU (§9): IB and RoCE.
    CommEst,
    /// `write_cm_event` queues USER events (§10.1).
    WriteCmEvent,
    /// An address the client has no route to ([`TestBed::unroutable_ip`](crate::TestBed::unroutable_ip)).
    UnroutableAddress,
    /// Fault hook: remove the client's RDMA device and restore it
    /// ([`TestBed::remove_device`](crate::TestBed::remove_device)).
    DeviceRemoval,
    /// Fault hook: an address change (bonding fail-over) on the server's device
    /// ([`TestBed::change_address`](crate::TestBed::change_address)).
    AddressChange,
    /// A peer address that resolves but where no CM answers
    /// ([`TestBed::silent_ip`](crate::TestBed::silent_ip)).
    SilentPeer,
    /// An on-link address whose neighbour never answers ARP
    /// ([`TestBed::no_neighbour_ip`](crate::TestBed::no_neighbour_ip)).
    NoNeighbour,
    /// Fault hook: the subnet administrator fails the client's next path queries
    /// ([`TestBed::fail_path_queries`](crate::TestBed::fail_path_queries)).
    PathQueryFault,
    /// Fault hook: a multicast group is lost after the join
    /// ([`TestBed::lose_multicast_group`](crate::TestBed::lose_multicast_group)).
    MulticastLoss,
    /// `rdma_resolve_addrinfo` in SA mode (RAI_SA: Linux ≥ 6.18, an InfiniBand SA, §10.3).
    SaAddrinfo,
    /// Fault hook: lose the next CM messages of a kind on the wire
    /// ([`TestBed::lose_cm_messages`](crate::TestBed::lose_cm_messages)); the IB CM
    /// retransmits them (§15.2): IB and RoCE.
    CmMessageLoss,
}

impl Need {
    /// Why a bed of `transport` cannot have this, if the transport alone decides it.
    pub fn missing_on(self, transport: Transport) -> Option<&'static str> {
        if transport != Transport::Iwarp {
            return None;
        }
        Some(match self {
            Need::Ud => "iWARP has no UD QPs and no SIDR (§13.2)",
            Need::Multicast => "iWARP has no multicast (§13.3: ENOSYS)",
            Need::Timewait => "iWARP has no timewait: a disconnect is a TCP close (§5.3)",
            Need::QpLessConnect => {
                "iWARP has no CONNECT_RESPONSE: its connect needs a QP and the MPA reply \
                 establishes it (§4.7, §5.3)"
            }
            Need::IbRejectReasons => {
                "iWARP reports refusals as -ECONNREFUSED/-ECONNRESET with exact-length MPA \
                 data, not IB REJ reasons (§5.3)"
            }
            Need::CommEst => "notify(COMM_EST) does nothing on iWARP (§9.2)",
            Need::PathQueryFault => "iWARP routes need no SA path query (§4.5)",
            Need::CmMessageLoss => {
                "iWARP's connection messages ride TCP, which retransmits below the CM (§5.3)"
            }
            _ => return None,
        })
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
