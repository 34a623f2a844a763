//! The helpers users otherwise write themselves: waiting for an event of an expected kind,
//! the id's settable context, and a dispatch loop that routes events by that context (as
//! rdma-core's `cmatose` does with `id->context`).

use cmtwin::{
    expect_event, Call, CmBackend, CmError, Dispatcher, Errno, EventKind, ExpectError, Flow,
    IdHandle, PortSpace, QpType, Wait,
};

use crate::steps::{
    add_qp, client_endpoint, expect_errno, expect_event_for, expect_no_event, listen_on, ok,
    resolved_client, teardown, teardown_client, Endpoint, RESOLVE_TIMEOUT, WAIT,
};
use crate::TestBed;

/// `expect_event` returns the awaited event, acknowledged; any other kind is an error naming
/// what came instead (kind, status, id), and that event is acknowledged too.
pub fn expect_event_names_what_came_instead<T: TestBed>(bed: &T) {
    let cm = bed.client();
    let ep = client_endpoint(bed, PortSpace::TCP);
    ok(
        cm.write_cm_event(ep.id, EventKind::User, -5, 77),
        "write_cm_event",
    );
    let err = expect_event(cm, ep.channel, EventKind::AddrResolved, Wait::Timeout(WAIT))
        .expect_err("a USER event is not ADDR_RESOLVED");
    let got = err.unexpected().expect("an unexpected event").clone();
    assert_eq!(
        (got.kind, got.status, got.id),
        (EventKind::User, -5, ep.id),
        "what came instead"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "expected RDMA_CM_EVENT_ADDR_RESOLVED, got RDMA_CM_EVENT_USER with status -5 on {}",
            ep.id
        )
    );
    ok(
        cm.resolve_addr(ep.id, None, bed.server_addr(), RESOLVE_TIMEOUT),
        "resolve_addr",
    );
    let info = expect_event(cm, ep.channel, EventKind::AddrResolved, Wait::Timeout(WAIT))
        .expect("ADDR_RESOLVED");
    assert_eq!((info.id, info.status), (ep.id, 0), "the awaited event");
    match expect_event(cm, ep.channel, EventKind::RouteResolved, Wait::NonBlocking) {
        Err(ExpectError::Cm(e)) => {
            assert_eq!((e.call, e.errno), (Call::GetCmEvent, Errno::EAGAIN), "{e}")
        }
        other => panic!("an empty channel gives the fetch's error, not {other:?}"),
    }
    // Both events were acknowledged: the id goes at once.
    teardown_client(bed, &ep);
}

/// `id->context` is settable: `context` returns the new value, and a request's new id gets
/// the context its listener has when librdmacm processes the request (at fetch), not the one
/// it had when the request arrived.
pub fn set_context_is_what_requests_inherit<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let client = resolved_client(bed, PortSpace::TCP, listener.addr);
    ok(client_cm.set_context(client.id, 41), "set_context");
    assert_eq!(ok(client_cm.context(client.id), "context"), 41);
    add_qp(client_cm, client.id, QpType::Rc);
    ok(client_cm.connect(client.id, None), "connect");
    let ready = ok(
        server_cm.poll_channels(&[listener.channel], Wait::Timeout(WAIT)),
        "the request is queued",
    );
    assert_eq!(ready, vec![listener.channel]);
    ok(
        server_cm.set_context(listener.id, 0x5151),
        "re-label the listener",
    );
    let req = crate::steps::expect_request(server_cm, &listener);
    assert_eq!(
        ok(server_cm.context(req.id), "the request id's context"),
        0x5151,
        "inherited at fetch"
    );
    expect_errno(
        server_cm.set_context(IdHandle::from_raw(u64::MAX), 1),
        Call::SetContext,
        Errno::ENOENT,
    );
    ok(server_cm.reject(req.id, &[]), "reject");
    expect_event_for(
        client_cm,
        client.channel,
        EventKind::Rejected,
        client.id,
        crate::steps::refusal_status(bed.transport()),
    );
    teardown(server_cm, &[req.id, listener.id], listener.channel);
    teardown(client_cm, &[client.id], client.channel);
}

/// One server-side connection, as the dispatch loop keeps it.
#[derive(Debug)]
struct Conn {
    /// The connection's id (the request's new id).
    id: IdHandle,
    /// Whether its ESTABLISHED arrived.
    established: bool,
}

/// The server's dispatch loop routes each event to the connection whose context its id
/// carries: requests (carrying the listener's context) make new connections, which take a
/// context of their own; ESTABLISHED and DISCONNECTED find their connection by it.
pub fn dispatcher_routes_events_by_context<T: TestBed>(bed: &T) {
    let (server_cm, client_cm) = (bed.server(), bed.client());
    let listener = listen_on(bed, PortSpace::TCP, 8);
    let clients: Vec<Endpoint> = (0..2)
        .map(|_| resolved_client(bed, PortSpace::TCP, listener.addr))
        .collect();
    for c in &clients {
        add_qp(client_cm, c.id, QpType::Rc);
        ok(client_cm.connect(c.id, None), "connect");
    }
    let listener_ctx = ok(server_cm.context(listener.id), "listener context");
    let mut conns: Dispatcher<Conn> = Dispatcher::new();
    let chans = [listener.channel];
    // Accept both requests, then see both connections established. On IB and RoCE the
    // server's ESTABLISHED waits for the client's RTU, which librdmacm sends when the client
    // fetches its CONNECT_RESPONSE; on iWARP the passive side is established as soon as its MPA
    // reply leaves, so a connection's ESTABLISHED can come before the other's request.
    let serve = |conns: &mut Dispatcher<Conn>, r: cmtwin::Routed<'_>| -> Result<Flow, CmError> {
        match r.event.kind() {
            EventKind::ConnectRequest => {
                assert_eq!(
                    r.context, listener_ctx,
                    "requests carry the listener's context"
                );
                let id = r.event.id();
                let ctx = conns.add(Conn {
                    id,
                    established: false,
                });
                server_cm.set_context(id, ctx)?;
                server_cm.create_qp(id, &cmtwin::QpInitAttr::new(QpType::Rc))?;
                server_cm.accept(id, None)?;
            }
            EventKind::Established => {
                let conn = conns.get_mut(r.context).expect("a known connection");
                assert_eq!(conn.id, r.event.id(), "routed to its own connection");
                assert!(!conn.established, "one ESTABLISHED per connection");
                conn.established = true;
            }
            other => panic!("unexpected {other} while connecting"),
        }
        Ok(if conns.len() == 2 {
            Flow::Stop
        } else {
            Flow::Continue
        })
    };
    ok(
        conns.run(server_cm, &chans, Wait::Timeout(WAIT), serve),
        "accept both",
    );
    for c in &clients {
        expect_event_for(client_cm, c.channel, EventKind::Established, c.id, 0);
    }
    while !conns.iter().all(|(_, c)| c.established) {
        ok(
            conns.run(server_cm, &chans, Wait::Timeout(WAIT), |conns, r| {
                serve(conns, r)?;
                let done = conns.iter().all(|(_, c)| c.established);
                Ok(if done { Flow::Stop } else { Flow::Continue })
            }),
            "both established",
        );
    }
    for c in &clients {
        ok(client_cm.disconnect(c.id), "client disconnect");
    }
    let closing = |conns: &mut Dispatcher<Conn>, r: cmtwin::Routed<'_>| -> Result<Flow, CmError> {
        assert_eq!(r.event.kind(), EventKind::Disconnected, "DISCONNECTED");
        let conn = conns.remove(r.context).expect("a known connection");
        assert_eq!(conn.id, r.event.id(), "routed to its own connection");
        server_cm.disconnect(r.event.id())?;
        Ok(if conns.is_empty() {
            Flow::Stop
        } else {
            Flow::Continue
        })
    };
    let mut server_ids: Vec<IdHandle> = conns.iter().map(|(_, c)| c.id).collect();
    ok(
        conns.run(server_cm, &chans, Wait::Timeout(WAIT), closing),
        "both closed",
    );
    expect_no_event(server_cm, listener.channel);
    for c in &clients {
        expect_event_for(client_cm, c.channel, EventKind::Disconnected, c.id, 0);
        teardown_client(bed, c);
    }
    server_ids.push(listener.id);
    teardown(server_cm, &server_ids, listener.channel);
}
