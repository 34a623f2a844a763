//! Device checks that both backends must pass, given a backend and an id bound to the
//! device's address (`backend-verbs/tests/devices.rs` on the beds, `tests/sim_devices.rs` on
//! every simulated transport).

use std::net::SocketAddr;
use std::time::Duration;

use cmtwin::verbs::DataPath;
use cmtwin::{
    Call, ChannelHandle, CmBackend, Errno, EventKind, IdDevice, IdHandle, PortSpace, QpInitAttr,
    QpType,
};

use crate::steps::{expect_event_for, ok};

/// A new id of `channel` resolving `dst` has no device (`id->verbs` NULL) from
/// `rdma_resolve_addr` until its ADDR_RESOLVED is fetched (librdmacm's `ucma_get_device`
/// attaches it as it processes the event), then the device of the route; returns the id
/// and that device.
pub fn a_resolving_id_has_its_device_at_addr_resolved<B: CmBackend>(
    cm: &B,
    channel: ChannelHandle,
    dst: SocketAddr,
) -> (IdHandle, IdDevice) {
    let id = ok(cm.create_id(Some(channel), 0, PortSpace::TCP), "create_id");
    let timeout = Duration::from_secs(2);
    ok(cm.resolve_addr(id, None, dst, timeout), "resolve_addr");
    let before = ok(cm.id_device(id), "id_device");
    assert_eq!(before, None, "before ADDR_RESOLVED");
    expect_event_for(cm, channel, EventKind::AddrResolved, id, 0);
    let device = ok(cm.id_device(id), "id_device").expect("a device at ADDR_RESOLVED");
    (id, device)
}

/// The maxima `ibv_query_device` reports for the device named `name` are those it enforces
/// on `id` (bound to it, without QP): a CQ of `max_cqe` entries and a QP of `max_sge`
/// receive entries and the deepest queue `rdma_create_qp` can make CQs for (librdmacm's
/// `ucma_create_cqs` makes them one entry a request) are made; one more of either is
/// EINVAL. Leaves `id` without QP.
pub fn reported_maxima_are_enforced<B: DataPath>(dp: &B, id: IdHandle, name: &str) {
    let attr = ok(dp.query_device(name), "ibv_query_device");
    let e = dp
        .create_cq(id, attr.max_cqe + 1, None)
        .expect_err("above max_cqe");
    assert_eq!((e.call, e.errno), (Call::CreateCq, Errno::EINVAL), "{e}");
    let cq = ok(dp.create_cq(id, attr.max_cqe, None), "a CQ of max_cqe");
    ok(dp.destroy_cq(cq), "destroy_cq");
    let mut qp = QpInitAttr::new(QpType::Rc);
    qp.cap.max_recv_sge = attr.max_sge + 1;
    let e = dp.create_qp(id, &qp).expect_err("above max_sge");
    assert_eq!((e.call, e.errno), (Call::CreateQp, Errno::EINVAL), "{e}");
    qp.cap.max_recv_sge = attr.max_sge;
    qp.cap.max_send_wr = attr.max_qp_wr.min(attr.max_cqe) + 1;
    let e = dp
        .create_qp(id, &qp)
        .expect_err("above max_qp_wr or max_cqe");
    assert_eq!((e.call, e.errno), (Call::CreateQp, Errno::EINVAL), "{e}");
    qp.cap.max_send_wr -= 1;
    ok(
        dp.create_qp(id, &qp),
        "a QP at max_sge and the deepest queue",
    );
    ok(dp.destroy_qp(id), "destroy_qp");
}
