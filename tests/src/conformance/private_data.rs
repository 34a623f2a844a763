//! Private data: per-operation maximums (EINVAL above, never truncated) and what the receiver
//! sees (zero-padded to the CM message's field) (CM-SEMANTICS §6).

use cmtwin::{
    max_private_data, Call, CmBackend, ConnParam, Errno, EventInfo, EventKind, PortSpace,
    PrivateDataOp, QpType, Transport,
};

use crate::steps::{
    add_qp, assert_padded, assert_reject_data, expect_errno, expect_event_for, expect_no_event,
    expect_request, listen_on, ok, pattern, refusal_status, resolved_client, teardown, Endpoint,
    Listener,
};
use crate::TestBed;

/// The user maximum for `op` on the bed's transport, checked against §6.1's numbers on IB
/// and RoCE. Lengths are `uint8_t` in the API (§6.1), so no transport allows more than 255.
pub(crate) fn limit<T: TestBed>(bed: &T, op: PrivateDataOp) -> usize {
    let max = max_private_data(bed.transport(), op).min(255);
    if bed.transport() != Transport::Iwarp {
        let table = match op {
            PrivateDataOp::Connect => 56,
            PrivateDataOp::ConnectUd => 180,
            PrivateDataOp::Accept => 196,
            PrivateDataOp::AcceptUd | PrivateDataOp::RejectUd => 136,
            PrivateDataOp::Reject => 148,
        };
        assert_eq!(max, table, "§6.1 user maximum for {op:?}");
    }
    max
}

/// The most private data that reaches the peer with `op`: the user maximum on IB and RoCE; on
/// iWARP 251 bytes, although the API takes 255: siw puts MPA v2's 4 bytes of IRD and ORD
/// into the 256 bytes an MPA message may carry, and a request, reply or reject with 252 bytes
/// of user data or more never arrives as sent (measured on siw, Linux 6.1 and 6.12: 251
/// bytes arrive; 252 end in REJECTED -ECONNRESET, CONNECT_ERROR -EINVAL or an EINVAL of the
/// accept, depending on the message). The simulator delivers up to 255 (a listed difference).
pub(crate) fn largest_delivered<T: TestBed>(bed: &T, op: PrivateDataOp) -> usize {
    match bed.transport() {
        Transport::Iwarp => limit(bed, op).min(SIW_LARGEST_DELIVERED),
        _ => limit(bed, op),
    }
}

/// The most user private data siw delivers in an MPA message (see `largest_delivered`).
const SIW_LARGEST_DELIVERED: usize = 251;

/// The length the receiver sees for `sent` bytes sent with `op` (§6.2; iWARP: exact).
pub(crate) fn delivered<T: TestBed>(bed: &T, op: PrivateDataOp, sent: usize) -> usize {
    cmtwin::delivered_private_data_len(bed.transport(), op).unwrap_or(sent)
}

/// A listener, and a client (with QP) whose request carrying `data` is pending at the server.
fn requested<T: TestBed>(bed: &T, data: &[u8]) -> (Listener, Endpoint, EventInfo) {
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(bed.client(), client.id, QpType::Rc);
    ok(
        bed.client()
            .connect(client.id, Some(&ConnParam::with_private_data(data))),
        "connect",
    );
    let req = expect_request(bed.server(), &listener);
    (listener, client, req)
}

fn cleanup<T: TestBed>(bed: &T, listener: &Listener, client: &Endpoint, child: cmtwin::IdHandle) {
    teardown(bed.client(), &[client.id], client.channel);
    teardown(bed.server(), &[child, listener.id], listener.channel);
}

/// §6.1/§6.2: connect with the maximum (56 bytes on IB/RoCE; on iWARP the 251 bytes siw
/// delivers, `largest_delivered`) delivers those bytes exactly.
pub fn connect_data_at_maximum_is_delivered<T: TestBed>(bed: &T) {
    let max = largest_delivered(bed, PrivateDataOp::Connect);
    let data = pattern(max, 7);
    let (listener, client, req) = requested(bed, &data);
    assert_padded(
        &req.private_data,
        &data,
        delivered(bed, PrivateDataOp::Connect, max),
        "CONNECT_REQUEST",
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.2: short connect data arrives zero-padded to 56 bytes on CONNECT_REQUEST.
pub fn connect_data_is_zero_padded<T: TestBed>(bed: &T) {
    let data = b"hello";
    let (listener, client, req) = requested(bed, data);
    assert_padded(
        &req.private_data,
        data,
        delivered(bed, PrivateDataOp::Connect, data.len()),
        "CONNECT_REQUEST",
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.1, §3.4: connect with one byte over the maximum is EINVAL (never truncated), leaves the
/// id ROUTE_RESOLVED and sends nothing; a retry within the limit then connects with the
/// retry's data.
pub fn connect_data_over_maximum_is_einval<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let max = limit(bed, PrivateDataOp::Connect);
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    add_qp(client_cm, client.id, QpType::Rc);
    expect_errno(
        client_cm.connect(
            client.id,
            Some(&ConnParam::with_private_data(&pattern(max + 1, 3))),
        ),
        Call::Connect,
        Errno::EINVAL,
    );
    expect_no_event(server_cm, listener.channel);
    let retry = largest_delivered(bed, PrivateDataOp::Connect);
    let data = pattern(retry, 9);
    ok(
        client_cm.connect(client.id, Some(&ConnParam::with_private_data(&data))),
        "connect retry within the limit",
    );
    let req = expect_request(server_cm, &listener);
    assert_padded(
        &req.private_data,
        &data,
        delivered(bed, PrivateDataOp::Connect, retry),
        "CONNECT_REQUEST after the retry",
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.1/§6.2: accept with the maximum (196 bytes; iWARP 251, `largest_delivered`) reaches
/// the client's ESTABLISHED exactly.
pub fn accept_data_at_maximum_is_delivered<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let max = largest_delivered(bed, PrivateDataOp::Accept);
    let (listener, client, req) = requested(bed, b"");
    add_qp(server_cm, req.id, QpType::Rc);
    let data = pattern(max, 11);
    ok(
        server_cm.accept(req.id, Some(&ConnParam::with_private_data(&data))),
        "accept",
    );
    let est = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    assert_padded(
        &est.private_data,
        &data,
        delivered(bed, PrivateDataOp::Accept, max),
        "client ESTABLISHED",
    );
    expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.2: short accept data arrives zero-padded to 196 bytes on the client's ESTABLISHED.
pub fn accept_data_is_zero_padded<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = requested(bed, b"");
    add_qp(server_cm, req.id, QpType::Rc);
    let data = b"ok";
    ok(
        server_cm.accept(req.id, Some(&ConnParam::with_private_data(data))),
        "accept",
    );
    let est = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    assert_padded(
        &est.private_data,
        data,
        delivered(bed, PrivateDataOp::Accept, data.len()),
        "client ESTABLISHED",
    );
    expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.1, §4.10: accept with one byte over the maximum is EINVAL; the client never sees that
/// data (no ESTABLISHED): once the child is destroyed it sees exactly one refusal (REJECTED
/// 28 with zero data on IB/RoCE), whether the kernel rejected at the failed accept or at the
/// destroy.
pub fn accept_data_over_maximum_is_einval<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let max = limit(bed, PrivateDataOp::Accept);
    let (listener, client, req) = requested(bed, b"");
    add_qp(server_cm, req.id, QpType::Rc);
    expect_errno(
        server_cm.accept(
            req.id,
            Some(&ConnParam::with_private_data(&pattern(max + 1, 5))),
        ),
        Call::Accept,
        Errno::EINVAL,
    );
    ok(server_cm.destroy_id(req.id), "destroy the child");
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    assert!(
        rej.private_data.iter().all(|b| *b == 0),
        "kernel REJ(28) carries no data"
    );
    expect_no_event(client_cm, client.channel);
    teardown(client_cm, &[client.id], client.channel);
    teardown(server_cm, &[listener.id], listener.channel);
}

/// §6.1/§6.2: reject with the maximum (148 bytes) reaches the client's REJECTED exactly; on
/// iWARP the 251 bytes siw delivers (`largest_delivered`) arrive at their length, status
/// -ECONNRESET (siw's MPA reject).
pub fn reject_data_at_maximum_is_delivered<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let max = largest_delivered(bed, PrivateDataOp::Reject);
    let (listener, client, req) = requested(bed, b"");
    let data = pattern(max, 13);
    ok(server_cm.reject(req.id, &data), "reject");
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    assert_eq!(data.len(), max);
    assert_reject_data(bed.transport(), &rej.private_data, &data, "REJECTED");
    cleanup(bed, &listener, &client, req.id);
}

/// §6.1: reject with one byte over the maximum (148; iWARP 255) is EINVAL and sends nothing;
/// a reject within the limit then works.
pub fn reject_data_over_maximum_is_einval<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let max = limit(bed, PrivateDataOp::Reject);
    let (listener, client, req) = requested(bed, b"");
    expect_errno(
        server_cm.reject(req.id, &pattern(max + 1, 17)),
        Call::Reject,
        Errno::EINVAL,
    );
    expect_no_event(client_cm, client.channel);
    ok(
        server_cm.reject(req.id, b"second try"),
        "reject within the limit",
    );
    let rej = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        refusal_status(bed.transport()),
    );
    assert_reject_data(
        bed.transport(),
        &rej.private_data,
        b"second try",
        "REJECTED",
    );
    cleanup(bed, &listener, &client, req.id);
}

/// §6.2 and librdmacm's copy of the parameters (the pointer is set only for a non-zero
/// length): with nothing sent, CONNECT_REQUEST and the active ESTABLISHED still carry the
/// message's zero-filled field on IB and RoCE (nothing on iWARP), while the passive
/// ESTABLISHED and DISCONNECTED carry no private data at all (NULL).
pub fn private_data_is_null_exactly_where_librdmacm_leaves_it<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let (listener, client, req) = requested(bed, &[]);
    let iwarp = bed.transport() == Transport::Iwarp;
    let field = |op| (!iwarp).then(|| vec![0u8; delivered(bed, op, 0)]);
    assert_eq!(
        req.private_data_opt().map(<[u8]>::to_vec),
        field(PrivateDataOp::Connect),
        "CONNECT_REQUEST with nothing sent"
    );
    add_qp(server_cm, req.id, QpType::Rc);
    ok(
        server_cm.accept(req.id, Some(&ConnParam::default())),
        "accept",
    );
    let active = expect_event_for(
        client_cm,
        client.channel,
        EventKind::Established,
        client.id,
        0,
    );
    assert_eq!(
        active.private_data_opt().map(<[u8]>::to_vec),
        field(PrivateDataOp::Accept),
        "active ESTABLISHED with nothing sent"
    );
    let passive = expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Established,
        req.id,
        0,
    );
    assert_eq!(passive.private_data_opt(), None, "passive ESTABLISHED");
    ok(client_cm.disconnect(client.id), "disconnect");
    let gone = expect_event_for(
        server_cm,
        listener.channel,
        EventKind::Disconnected,
        req.id,
        0,
    );
    assert_eq!(gone.private_data_opt(), None, "DISCONNECTED");
    ok(server_cm.disconnect(req.id), "answer");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Disconnected,
        client.id,
        0,
    );
    cleanup(bed, &listener, &client, req.id);
}
