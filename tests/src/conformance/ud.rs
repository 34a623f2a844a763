//! UD (RDMA_PS_UDP) "connections": SIDR request and reply (CM-SEMANTICS §13.2, §5.2 S13,
//! §6, §2.8).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{
    Call, CmBackend, ConnParam, Errno, EventKind, EventParam, PortSpace, PrivateDataOp, QpType,
    SidrStatus, Transport, RDMA_UDP_QKEY,
};

use super::private_data::{delivered, limit};
use crate::steps::{
    add_qp, assert_padded, expect_errno, expect_event_for, expect_no_event, expect_quiet,
    expect_request, listen_on, ok, pattern, resolved_client, teardown, Endpoint, Listener,
};
use crate::TestBed;

/// A UDP listener and a UD client with QP whose SIDR request with `data` is pending at the
/// server; returns the request's child id and its private data.
fn ud_request<T: TestBed>(bed: &T, data: &[u8]) -> (Listener, Endpoint, cmtwin::EventInfo) {
    let listener = listen_on(bed, PortSpace::UDP, 8);
    let client = resolved_client(bed, PortSpace::UDP, listener.addr);
    add_qp(bed.client(), client.id, QpType::Ud);
    ok(
        bed.client()
            .connect(client.id, Some(&ConnParam::with_private_data(data))),
        "UD connect",
    );
    let req = expect_request(bed.server(), &listener);
    (listener, client, req)
}

fn cleanup<T: TestBed>(bed: &T, listener: &Listener, client: &Endpoint, child: cmtwin::IdHandle) {
    teardown(bed.client(), &[client.id], client.channel);
    teardown(bed.server(), &[child, listener.id], listener.channel);
}

/// §13.2, §5.2 S13, §6.2: UD connect → CONNECT_REQUEST with ud data (zero address info, 180
/// bytes of private data); accept → ESTABLISHED on the active side only, with the server's
/// QPN, the default qkey, a global address handle on RoCE, and 136 bytes of private data.
pub fn ud_connect_is_established_with_ud_data<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let hello = b"ud hello";
    let (listener, client, req) = ud_request(bed, hello);
    let EventParam::Ud(req_ud) = req.param else {
        panic!("UD CONNECT_REQUEST must carry ud data, got {:?}", req.param);
    };
    assert_eq!(
        req.port_space,
        PortSpace::UDP,
        "the request's id is in UDP space"
    );
    assert_eq!(req_ud.qp_num, 0, "passive ud data carries no QPN (§13.2)");
    assert_eq!(req_ud.qkey, 0, "passive ud data carries no qkey (§13.2)");
    assert_padded(
        &req.private_data,
        hello,
        delivered(bed, PrivateDataOp::ConnectUd, hello.len()),
        "UD CONNECT_REQUEST",
    );
    let server_qp = add_qp(server_cm, req.id, QpType::Ud);
    let reply = b"ud welcome";
    ok(
        server_cm.accept(req.id, Some(&ConnParam::with_private_data(reply))),
        "UD accept",
    );
    let est = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    let EventParam::Ud(ud) = est.param else {
        panic!("UD ESTABLISHED must carry ud data, got {:?}", est.param);
    };
    assert_eq!(
        est.port_space,
        PortSpace::UDP,
        "ESTABLISHED of a UDP-space id"
    );
    assert_eq!(ud.qp_num, server_qp, "ESTABLISHED: the server's QPN");
    assert_eq!(ud.qkey, RDMA_UDP_QKEY, "ESTABLISHED: the default qkey");
    if bed.transport() == Transport::Roce {
        assert!(
            ud.ah_attr.is_global,
            "RoCE address handles always use the GRH (§13.2)"
        );
    }
    assert_padded(
        &est.private_data,
        reply,
        delivered(bed, PrivateDataOp::AcceptUd, reply.len()),
        "UD ESTABLISHED",
    );
    // The passive side gets nothing further; nothing to disconnect, no timewait (§13.2).
    expect_quiet(server_cm, listener.channel, Duration::from_millis(500));
    expect_no_event(client_cm, client.channel);
    cleanup(bed, &listener, &client, req.id);
}

/// §5.2 S13, §2.8: a rejected UD request → UNREACHABLE with SIDR status 2 (never REJECTED),
/// carrying 136 bytes of private data.
pub fn ud_reject_is_unreachable_2<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = ud_request(bed, b"");
    ok(server_cm.reject(req.id, b"nope"), "UD reject");
    let un = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Unreachable,
        client.id,
        SidrStatus::REJECT,
    );
    assert!(
        matches!(un.param, EventParam::Ud(_)),
        "UD UNREACHABLE carries ud data"
    );
    assert_padded(&un.private_data, b"nope", 136, "UD UNREACHABLE (§6.2)");
    cleanup(bed, &listener, &client, req.id);
}

/// §5.2 S13, §14.2: a UD connect to a port nobody listens on → UNREACHABLE with SIDR status 1.
pub fn ud_no_listener_is_unreachable_1<T: TestBed>(bed: &T) {
    let client_cm = bed.client();
    let nobody = SocketAddr::new(bed.server_ip(), bed.fresh_port());
    let client = resolved_client(bed, PortSpace::UDP, nobody);
    add_qp(client_cm, client.id, QpType::Ud);
    ok(client_cm.connect(client.id, None), "UD connect");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Unreachable,
        client.id,
        SidrStatus::UNSUPPORTED,
    );
    teardown(client_cm, &[client.id], client.channel);
}

/// §6.1: UD private-data maximums: connect 180 (181 is EINVAL), accept 136 (137 is EINVAL),
/// reject 136 (137 is EINVAL); data at the maximum arrives intact.
pub fn ud_private_data_limits<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let connect_max = limit(bed, PrivateDataOp::ConnectUd);
    let accept_max = limit(bed, PrivateDataOp::AcceptUd);
    let reject_max = limit(bed, PrivateDataOp::RejectUd);

    let listener = listen_on(bed, PortSpace::UDP, 8);
    let client = resolved_client(bed, PortSpace::UDP, listener.addr);
    add_qp(client_cm, client.id, QpType::Ud);
    expect_errno(
        client_cm.connect(
            client.id,
            Some(&ConnParam::with_private_data(&pattern(connect_max + 1, 1))),
        ),
        Call::Connect,
        Errno::EINVAL,
    );
    let data = pattern(connect_max, 2);
    ok(
        client_cm.connect(client.id, Some(&ConnParam::with_private_data(&data))),
        "UD connect at the maximum",
    );
    let req = expect_request(server_cm, &listener);
    assert_eq!(req.private_data, data, "180 bytes delivered intact");
    add_qp(server_cm, req.id, QpType::Ud);
    expect_errno(
        server_cm.reject(req.id, &pattern(reject_max + 1, 3)),
        Call::Reject,
        Errno::EINVAL,
    );
    expect_errno(
        server_cm.accept(
            req.id,
            Some(&ConnParam::with_private_data(&pattern(accept_max + 1, 4))),
        ),
        Call::Accept,
        Errno::EINVAL,
    );
    cleanup(bed, &listener, &client, req.id);

    let (listener, client, req) = ud_request(bed, b"");
    add_qp(server_cm, req.id, QpType::Ud);
    let reply = pattern(accept_max, 5);
    ok(
        server_cm.accept(req.id, Some(&ConnParam::with_private_data(&reply))),
        "UD accept at the maximum",
    );
    let est = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    assert_eq!(est.private_data, reply, "136 bytes delivered intact");
    cleanup(bed, &listener, &client, req.id);
}

/// §13.2: a UDP-space id resolves its address on every transport and gets a UD QP where the
/// device has UD QPs (IB, RoCE); an iWARP device has only connected QPs, and its driver refuses
/// a UD QP with EOPNOTSUPP (measured on siw, Linux 6.1 and 6.12: ADDR_RESOLVED, then
/// `create_qp` EOPNOTSUPP).
pub fn udp_id_gets_a_ud_qp_where_the_device_has_them<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = crate::steps::client_endpoint(bed, PortSpace::UDP);
    ok(
        cm.resolve_addr(
            ep.id,
            None,
            bed.server_addr(),
            crate::steps::RESOLVE_TIMEOUT,
        ),
        "resolve_addr of a UDP id",
    );
    expect_event_for(cm, ep.channel, EventKind::AddrResolved, ep.id, 0);
    let qp = cm.create_qp(ep.id, &cmtwin::QpInitAttr::new(QpType::Ud));
    if bed.transport() == Transport::Iwarp {
        expect_errno(qp, Call::CreateQp, Errno::EOPNOTSUPP);
    } else {
        ok(qp, "UD QP");
    }
    expect_no_event(cm, ep.channel);
    teardown(cm, &[ep.id], ep.channel);
}
