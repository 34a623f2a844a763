//! A call of a synchronous id (created without a channel) returns only once its event came,
//! with that event's errno (librdmacm's `ucma_complete`). The trace shows both moments: the
//! command the call wrote (`-> 0`: the kernel took it) and, when the event came, what the call
//! returned, so that a refused `rdma_connect` does not read as a success.

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::{CmBackend, Errno, PortSpace, QpInitAttr, QpType, Transport};
use cmtwin_sim::{Fabric, SimConfig};

#[test]
fn a_refused_synchronous_connect_is_traced_with_its_errno_when_it_returns() {
    let exact = SimConfig {
        wire_jitter: Duration::ZERO,
        ..SimConfig::default()
    };
    let fabric = Fabric::builder(1)
        .config(exact)
        .host("server", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .host("client", Transport::Roce, &["10.0.0.2".parse().unwrap()])
        .build()
        .unwrap();
    let nobody: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    fabric.spawn("client", "client", move |cm| {
        let id = cm.create_id(None, 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, nobody, Duration::from_secs(2))?;
        cm.resolve_route(id, Duration::from_secs(2))?;
        cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
        let refused = cm.connect(id, None).expect_err("nobody listens");
        assert_eq!(refused.errno, Errno::ECONNREFUSED);
        cm.destroy_qp(id)?;
        cm.destroy_id(id)
    });
    fabric.run().unwrap();
    let trace = fabric.trace_text();
    let calls: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains(" call rdma_"))
        .map(str::trim)
        .collect();
    // The address resolves in 10 µs; the REJ (no listener: reason 8) comes back 10 µs after
    // the REQ.
    let expected = [
        "0.000000000 client   call rdma_create_id(None, 0, RDMA_PS_TCP) -> id1",
        "0.000000000 client   call rdma_resolve_addr(id1, None, 10.0.0.1:7000, 2s) -> 0",
        "0.000010000 client   call rdma_resolve_addr(id1) returns 0 with \
         RDMA_CM_EVENT_ADDR_RESOLVED status 0",
        "0.000010000 client   call rdma_resolve_route(id1, 2s) -> 0",
        "0.000010000 client   call rdma_resolve_route(id1) returns 0 with \
         RDMA_CM_EVENT_ROUTE_RESOLVED status 0",
    ];
    assert_eq!(calls[..5], expected, "{trace}");
    assert_eq!(
        calls[6], "0.000010000 client   call rdma_connect(id1) -> 0",
        "{trace}"
    );
    assert_eq!(
        calls[7],
        "0.000020000 client   call rdma_connect(id1) returns ECONNREFUSED (111) with \
         RDMA_CM_EVENT_REJECTED status 8",
        "{trace}"
    );
}
