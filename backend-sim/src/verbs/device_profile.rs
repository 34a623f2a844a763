//! What a simulated device answers to `ibv_query_device` and `ibv_query_port`, per transport
//! and kernel profile, and the maxima the simulator enforces from the same answer (a QP's
//! queues and entries, a CQ's entries, the read/atomic resources of `rdma_connect` and
//! `rdma_accept`), so that what a program reads and what the device takes cannot disagree.
//!
//! * RoCE devices are rxe (`drivers/infiniband/sw/rxe/rxe_param.h`, `rxe_init_device_param`,
//!   `rxe_query_port`) and iWARP devices siw (`sw/siw/siw.h`, `siw_query_device`,
//!   `siw_query_port`), as measured on the CI beds (tests/src/measured_devices.rs). Linux
//!   6.1 and 6.12 differ only in rxe's port `max_msg_sz` (8 MiB, then 2 GiB:
//!   `RXE_PORT_MAX_MSG_SZ`) and siw's port `max_mtu` (1024, then 256); the mainline
//!   profile answers as 6.12.
//! * InfiniBand devices, which no bed measures, answer as a plausible ConnectX-6 (mlx5) on
//!   a 4X HDR port would; the values are an illustration, not a measurement.
//! * Every simulated port runs at an active MTU of 4096 ([`ACTIVE_MTU_BYTES`], the largest
//!   UD payload the simulator takes), as on a netdev of MTU 9000; the beds' dummy0 has 1500,
//!   so there rxe and siw answer 1024. This is the one field where the simulator's answer
//!   differs from its twin's by design.
//! * Node GUIDs come from the topology (see [`node_guid`]); `local_ca_ack_delay` of RoCE and
//!   InfiniBand devices is the fabric's `SimConfig::ca_ack_delay`, which the CM's timeouts
//!   use.

use cmtwin::{AtomicCap, DeviceAttr, LinkLayer, Mtu, PortAttr, PortState, QpType, Transport};

use crate::config::KernelProfile;

/// Whether a device of `transport` makes QPs of `qp_type`: iWARP devices (siw) make RC QPs
/// only (`siw_create_qp` refuses every other type with EOPNOTSUPP), so neither a UC nor a UD
/// QP exists there, on an id or apart from ids.
pub(crate) fn makes_qp_type(transport: Transport, qp_type: QpType) -> bool {
    transport != Transport::Iwarp || qp_type == QpType::Rc
}

/// Whether a device of `transport` takes a receive request of no entries: rxe and HCAs do
/// (a receive for messages of no bytes), libsiw refuses one with EINVAL before the kernel
/// sees it (`push_recv_wqe` takes 1 to `SIW_MAX_SGE` entries, for a QP's receive queue and
/// an SRQ alike; measured on siw-6.1).
pub(crate) fn takes_empty_receive(transport: Transport) -> bool {
    transport != Transport::Iwarp
}

/// The active MTU of every simulated port, in bytes: the largest UD payload.
pub(crate) const ACTIVE_MTU_BYTES: u32 = 4096;

/// `max_qp_rd_atom` and `max_qp_init_rd_atom` of every simulated device: rxe's
/// (`RXE_MAX_QP_RD_ATOM`) and siw's (`SIW_MAX_ORD_QP`), 128 both; the InfiniBand profile keeps
/// it too (a ConnectX answers 16) so that `rdma_connect`'s default resources, which the CM
/// caps at the device's maximum, stay what the InfiniBand fabric has always carried.
pub(crate) const MAX_RD_ATOM: u8 = 128;

/// The maxima a simulated device reports and enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Maxima {
    /// `max_qp_wr`: requests a QP's queue may be asked for.
    pub qp_wr: u32,
    /// `max_sge`: entries of a request.
    pub sge: u32,
    /// `max_cqe`: entries a CQ may be asked for.
    pub cqe: u32,
    /// `max_qp_rd_atom` = `max_qp_init_rd_atom`: the bound of `responder_resources` and
    /// `initiator_depth`.
    pub rd_atom: u8,
    /// `max_srq_wr`: receives an SRQ may be asked for.
    pub srq_wr: u32,
    /// `max_srq_sge`: entries of an SRQ's receive.
    pub srq_sge: u32,
}

/// The maxima of a device of `transport`: rxe's (`RXE_MAX_QP_WR`, `RXE_MAX_SGE`,
/// `RXE_MAX_CQE`, `RXE_MAX_QP_RD_ATOM`, `RXE_MAX_SRQ_WR`, `RXE_MAX_SRQ_SGE`), siw's
/// (`SIW_MAX_QP_WR`, `SIW_MAX_SGE`, `SIW_MAX_CQE`, `SIW_MAX_ORD_QP`, `SIW_MAX_SRQ_WR`,
/// `SIW_MAX_SGE`), or the ConnectX-like profile's.
pub(crate) fn maxima(transport: Transport) -> Maxima {
    match transport {
        Transport::Roce => Maxima {
            qp_wr: 1 << 20,
            sge: 32,
            cqe: (1 << 15) - 1,
            rd_atom: MAX_RD_ATOM,
            srq_wr: 0x10_0000,
            srq_sge: 27,
        },
        Transport::Iwarp => Maxima {
            qp_wr: 32 * 1024,
            sge: 6,
            cqe: 32 * 1024 * 100,
            rd_atom: MAX_RD_ATOM,
            srq_wr: 320 * 1024,
            srq_sge: 6,
        },
        Transport::InfiniBand => Maxima {
            qp_wr: 32 * 1024,
            sge: 30,
            cqe: (1 << 22) - 1,
            rd_atom: MAX_RD_ATOM,
            srq_wr: (1 << 15) - 1,
            srq_sge: 31,
        },
    }
}

/// The node GUID of device `dev` of host `host`: an EUI-64 made from a locally administered
/// MAC address `02:00:HH:HH:DD:DD` (host and device keys), as rxe and siw make theirs from
/// their netdev's MAC; on InfiniBand a GUID under Mellanox's OUI (`00:02:c9`) from the same
/// keys. Deterministic: the same topology gives the same GUIDs.
pub(crate) fn node_guid(transport: Transport, host: u32, dev: u32) -> u64 {
    let [h1, h0] = (host as u16).to_be_bytes();
    let [d1, d0] = (dev as u16).to_be_bytes();
    match transport {
        // The MAC's first byte 02 with its universal/local bit flipped is 00.
        Transport::Roce | Transport::Iwarp => {
            u64::from_be_bytes([0x00, 0x00, h1, 0xff, 0xfe, h0, d1, d0])
        }
        Transport::InfiniBand => u64::from_be_bytes([0x00, 0x02, 0xc9, 0x03, h1, h0, d1, d0]),
    }
}

/// `ibv_query_device` of a device of `transport` with GUID `guid`;
/// `ca_ack_delay` is the fabric's (RoCE and InfiniBand).
pub(crate) fn device_attr(transport: Transport, guid: u64, ca_ack_delay: u8) -> DeviceAttr {
    let m = maxima(transport);
    let base = DeviceAttr {
        fw_ver: "0.0.0".into(),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: 0,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 0,
        max_qp_wr: m.qp_wr,
        device_cap_flags: 0,
        max_sge: m.sge,
        max_sge_rd: m.sge,
        max_cq: 0,
        max_cqe: m.cqe,
        max_mr: 0,
        max_pd: 0,
        max_qp_rd_atom: u32::from(m.rd_atom),
        max_qp_init_rd_atom: u32::from(m.rd_atom),
        max_res_rd_atom: 0,
        atomic_cap: AtomicCap::Hca,
        max_srq: 0,
        max_srq_wr: m.srq_wr,
        max_srq_sge: m.srq_sge,
        max_ah: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_pkeys: 0,
        local_ca_ack_delay: ca_ack_delay,
        phys_port_cnt: 1,
    };
    match transport {
        Transport::Roce => rxe_device(base),
        Transport::Iwarp => siw_device(base),
        Transport::InfiniBand => connectx_device(base),
    }
}

/// rxe's answer (`rxe_init_device_param`).
fn rxe_device(base: DeviceAttr) -> DeviceAttr {
    DeviceAttr {
        page_size_cap: 0xffff_f000,
        vendor_id: 0xff_ffff,
        max_qp: 0x10_0000 - 16,
        device_cap_flags: 0x0122_3c76,
        max_cq: 0x10_0000,
        max_mr: 0x8_0000 - 1,
        max_pd: 0x10_0000,
        max_res_rd_atom: 0x3_f000,
        max_srq: 0x10_0000 - 0x2_0001,
        max_ah: 0x8000 - 1,
        max_mcast_grp: 8192,
        max_mcast_qp_attach: 56,
        max_total_mcast_qp_attach: 0x7_0000,
        max_pkeys: 64,
        ..base
    }
}

/// siw's answer (`siw_query_device`): no atomics, no multicast, no address handles, and
/// `local_ca_ack_delay` 0 (iWARP has no IB CM timers to tune).
fn siw_device(base: DeviceAttr) -> DeviceAttr {
    DeviceAttr {
        page_size_cap: 4096,
        vendor_id: 0x62_6d74,
        vendor_part_id: 1,
        max_qp: 100 * 1024,
        device_cap_flags: 0x20_0000,
        max_sge_rd: 1,
        max_cq: 100 * 1024,
        max_mr: 1000 * 1024,
        max_pd: 100 * 1024,
        max_res_rd_atom: 100 * 1024 * 128,
        atomic_cap: AtomicCap::None,
        max_srq: 100 * 1024,
        local_ca_ack_delay: 0,
        ..base
    }
}

/// The ConnectX-6-like answer of the simulated InfiniBand devices (not measured).
fn connectx_device(base: DeviceAttr) -> DeviceAttr {
    DeviceAttr {
        fw_ver: "20.31.1014".into(),
        page_size_cap: 0xffff_ffff_ffff_f000,
        vendor_id: 0x02c9,
        vendor_part_id: 4123,
        max_qp: 1 << 18,
        device_cap_flags: 0xed72_1c36,
        max_cq: 1 << 24,
        max_mr: 1 << 24,
        max_pd: 1 << 24,
        max_res_rd_atom: 1 << 22,
        max_srq: 1 << 23,
        max_ah: i32::MAX as u32,
        max_mcast_grp: 1 << 21,
        max_mcast_qp_attach: 240,
        max_total_mcast_qp_attach: 240 << 21,
        max_pkeys: 128,
        ..base
    }
}

/// `ibv_query_port` of port 1 of a device of `transport` under `kernel`; `lid` is the
/// InfiniBand port's (the simulated subnet manager's numbering), unused elsewhere.
pub(crate) fn port_attr(transport: Transport, kernel: KernelProfile, lid: u16) -> PortAttr {
    let linux61 = kernel == KernelProfile::Linux61;
    let base = PortAttr {
        state: PortState::Active,
        max_mtu: Mtu::Mtu4096,
        active_mtu: Mtu::Mtu4096, // ACTIVE_MTU_BYTES
        gid_tbl_len: 1,
        port_cap_flags: 0,
        max_msg_sz: 0,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 0,
        pkey_tbl_len: 0,
        active_width: 1,
        active_speed: 1,
        phys_state: 5,
        link_layer: LinkLayer::Ethernet,
    };
    match transport {
        // rxe_query_port: RXE_PORT_* of rxe_param.h.
        Transport::Roce => PortAttr {
            gid_tbl_len: 1024,
            port_cap_flags: 0x1_0000,
            max_msg_sz: if linux61 { 0x80_0000 } else { 0x8000_0000 },
            max_vl_num: 1,
            pkey_tbl_len: 1,
            ..base
        },
        // siw_query_port.
        Transport::Iwarp => PortAttr {
            max_mtu: if linux61 { Mtu::Mtu1024 } else { Mtu::Mtu256 },
            port_cap_flags: 0x9_0000,
            max_msg_sz: u32::MAX,
            ..base
        },
        // A 4X HDR port of a subnet whose manager has LID 1.
        Transport::InfiniBand => PortAttr {
            gid_tbl_len: 128,
            port_cap_flags: 0x2659_e848,
            max_msg_sz: 1 << 30,
            lid,
            sm_lid: 1,
            max_vl_num: 4,
            pkey_tbl_len: 128,
            active_width: 2,
            active_speed: 64,
            link_layer: LinkLayer::InfiniBand,
            ..base
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reported active MTU is the UD payload limit the simulator enforces.
    #[test]
    fn the_reported_active_mtu_is_the_enforced_one() {
        for t in [Transport::Roce, Transport::Iwarp, Transport::InfiniBand] {
            let port = port_attr(t, KernelProfile::Linux61, 1);
            assert_eq!(port.active_mtu.bytes(), Some(ACTIVE_MTU_BYTES), "{t:?}");
        }
    }
}
