//! The event taxonomy against CM-SEMANTICS.md §2.1, private-data limits against §6.1, and status
//! classification against §16.

use cmtwin::{
    delivered_private_data_len, max_private_data, Errno, EventKind, EventParam, EventStatus,
    PortSpace, PrivateDataOp, QpType, Transport, UdData,
};

#[test]
fn kinds_carry_librdmacm_numbers_and_names() {
    for (n, kind) in EventKind::ALL.iter().enumerate() {
        assert_eq!(kind.as_raw(), n as i32);
        assert_eq!(EventKind::from_raw(n as i32), *kind);
        assert!(kind.name().starts_with("RDMA_CM_EVENT_"));
    }
    assert_eq!(EventKind::ALL.len(), 19);
    assert_eq!(EventKind::TimewaitExit.as_raw(), 15);
    assert_eq!(EventKind::User.as_raw(), 18);
    assert_eq!(
        EventKind::AddrResolved.event_str(),
        "RDMA_CM_EVENT_ADDR_RESOLVED"
    );
    assert_eq!(
        EventKind::AddrinfoError.event_str(),
        "RDMA_CM_EVENT_ADDRINFO_ERROR"
    );
    // librdmacm's string table lacks USER (§2.1).
    assert_eq!(EventKind::User.event_str(), "UNKNOWN EVENT");
    assert_eq!(EventKind::User.name(), "RDMA_CM_EVENT_USER");
}

#[test]
fn unknown_numbers_pass_through() {
    for raw in [19, 20, 4242, -1, i32::MIN, i32::MAX] {
        let kind = EventKind::from_raw(raw);
        assert_eq!(kind, EventKind::Unknown(raw));
        assert_eq!(kind.as_raw(), raw);
        assert_eq!(kind.event_str(), "UNKNOWN EVENT");
    }
}

#[test]
fn private_data_limits_of_section_6_1() {
    let ib = [Transport::InfiniBand, Transport::Roce];
    for t in ib {
        assert_eq!(max_private_data(t, PrivateDataOp::Connect), 56);
        assert_eq!(max_private_data(t, PrivateDataOp::ConnectUd), 180);
        assert_eq!(max_private_data(t, PrivateDataOp::Accept), 196);
        assert_eq!(max_private_data(t, PrivateDataOp::AcceptUd), 136);
        assert_eq!(max_private_data(t, PrivateDataOp::Reject), 148);
        assert_eq!(max_private_data(t, PrivateDataOp::RejectUd), 136);
        assert_eq!(
            delivered_private_data_len(t, PrivateDataOp::Connect),
            Some(56)
        );
    }
    // iWARP delivers exactly what was sent; the API's length is a u8.
    assert_eq!(
        max_private_data(Transport::Iwarp, PrivateDataOp::Connect),
        255
    );
    assert_eq!(
        delivered_private_data_len(Transport::Iwarp, PrivateDataOp::Accept),
        None
    );
}

#[test]
fn statuses_are_classified_by_event() {
    let none = EventParam::None;
    let ud = EventParam::Ud(UdData::default());
    assert_eq!(
        EventStatus::classify(EventKind::Established, 0, &none),
        EventStatus::Success
    );
    assert_eq!(
        EventStatus::classify(EventKind::Rejected, 28, &none),
        EventStatus::IbRejReason(28)
    );
    assert_eq!(
        EventStatus::classify(EventKind::Unreachable, 2, &ud),
        EventStatus::SidrStatus(2)
    );
    assert_eq!(
        EventStatus::classify(EventKind::Unreachable, -110, &none),
        EventStatus::Errno(Errno::ETIMEDOUT)
    );
    assert_eq!(
        EventStatus::classify(EventKind::AddrError, -1, &none),
        EventStatus::Library(-1)
    );
    assert_eq!(
        EventStatus::classify(EventKind::User, -1, &none),
        EventStatus::User(-1)
    );
}

#[test]
fn port_spaces_and_their_qp_types() {
    assert!(PortSpace::TCP.is_valid() && PortSpace::IB.is_valid());
    assert!(!PortSpace(0x0107).is_valid());
    assert_eq!(PortSpace::UDP.default_qp_type(), QpType::Ud);
    assert_eq!(PortSpace::IPOIB.default_qp_type(), QpType::Ud);
    assert_eq!(PortSpace::TCP.default_qp_type(), QpType::Rc);
    assert_eq!(format!("{:?}", PortSpace::TCP), "RDMA_PS_TCP");
}

#[test]
fn errnos_print_name_and_number() {
    assert_eq!(Errno::EISCONN.to_string(), "EISCONN (106)");
    assert_eq!(Errno(4242).to_string(), "errno 4242");
}
