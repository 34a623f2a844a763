//! Device checks that both backends must pass, given a backend and an id bound to the
//! device's address (`backend-verbs/tests/devices.rs` on the beds, `tests/sim_devices.rs` on
//! every simulated transport).

use cmtwin::verbs::DataPath;
use cmtwin::{Call, Errno, IdHandle, QpInitAttr, QpType};

use crate::steps::ok;

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
