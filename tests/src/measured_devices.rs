//! What the beds' devices answer to `ibv_query_device` and `ibv_query_port` (port 1): rxe
//! (RoCE) and siw (iWARP) on Debian's Linux 6.1 and 6.12, measured in the CI VM
//! (`scripts/verbs-tests-in-vm`, test target `devices` of cmtwin-verbs, which asserts them;
//! the simulator's twins give the same, `tests/sim_devices.rs`). The kernels' sources are
//! `drivers/infiniband/sw/rxe/rxe_param.h` and `sw/siw/siw.h`.
//!
//! Where 6.1 and 6.12 differ: rxe's port `max_msg_sz` (8 MiB on 6.1, 2 GiB on 6.12) and
//! siw's port `max_mtu` (1024 on 6.1, 256 on 6.12); nothing else.
//!
//! The GUIDs are left 0 here: the kernel derives them from the netdev's MAC address (an
//! EUI-64, `ff:fe` in its middle), so they belong to the VM's interface, not to the driver;
//! [`is_eui64_from_mac`] checks their shape. `active_mtu` (1024) follows the netdev's MTU
//! (dummy0's 1500).

use cmtwin::{AtomicCap, DeviceAttr, LinkLayer, Mtu, PortAttr, PortState, Transport};
use cmtwin_sim::KernelProfile;

/// The device and port-1 attributes a bed of `transport` on `profile`'s kernel answers, GUIDs
/// 0; `None` for InfiniBand (no bed) and for kernels no bed runs.
pub fn measured(transport: Transport, profile: KernelProfile) -> Option<(DeviceAttr, PortAttr)> {
    let linux61 = match profile {
        KernelProfile::Linux61 => true,
        KernelProfile::Linux612 => false,
        _ => return None,
    };
    match transport {
        Transport::Roce => Some((rxe_device(), rxe_port(linux61))),
        Transport::Iwarp => Some((siw_device(), siw_port(linux61))),
        Transport::InfiniBand => None,
    }
}

/// Whether `guid` is an EUI-64 made from a MAC address (`ff:fe` as its bytes 3 and 4), as
/// rxe and siw make their node GUIDs.
pub fn is_eui64_from_mac(guid: u64) -> bool {
    (guid >> 24) & 0xffff == 0xfffe
}

fn rxe_device() -> DeviceAttr {
    DeviceAttr {
        fw_ver: "0.0.0".into(),
        node_guid: 0,
        sys_image_guid: 0,
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        vendor_id: 0xff_ffff,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 1_048_560,
        max_qp_wr: 1_048_576,
        device_cap_flags: 0x0122_3c76,
        max_sge: 32,
        max_sge_rd: 32,
        max_cq: 1_048_576,
        max_cqe: 32_767,
        max_mr: 524_287,
        max_pd: 1_048_576,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_res_rd_atom: 258_048,
        atomic_cap: AtomicCap::Hca,
        max_srq: 917_503,
        max_srq_wr: 1_048_576,
        max_srq_sge: 27,
        max_ah: 32_767,
        max_mcast_grp: 8192,
        max_mcast_qp_attach: 56,
        max_total_mcast_qp_attach: 458_752,
        max_pkeys: 64,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

fn rxe_port(linux61: bool) -> PortAttr {
    PortAttr {
        state: PortState::Active,
        max_mtu: Mtu::Mtu4096,
        active_mtu: Mtu::Mtu1024,
        gid_tbl_len: 1024,
        port_cap_flags: 0x1_0000,
        max_msg_sz: if linux61 { 0x80_0000 } else { 0x8000_0000 },
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        pkey_tbl_len: 1,
        active_width: 1,
        active_speed: 1,
        phys_state: 5,
        link_layer: LinkLayer::Ethernet,
    }
}

fn siw_device() -> DeviceAttr {
    DeviceAttr {
        fw_ver: "0.0.0".into(),
        node_guid: 0,
        sys_image_guid: 0,
        max_mr_size: u64::MAX,
        page_size_cap: 4096,
        vendor_id: 0x62_6d74,
        vendor_part_id: 1,
        hw_ver: 0,
        max_qp: 102_400,
        max_qp_wr: 32_768,
        device_cap_flags: 0x20_0000,
        max_sge: 6,
        max_sge_rd: 1,
        max_cq: 102_400,
        max_cqe: 3_276_800,
        max_mr: 1_024_000,
        max_pd: 102_400,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_res_rd_atom: 13_107_200,
        atomic_cap: AtomicCap::None,
        max_srq: 102_400,
        max_srq_wr: 327_680,
        max_srq_sge: 6,
        max_ah: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_pkeys: 0,
        local_ca_ack_delay: 0,
        phys_port_cnt: 1,
    }
}

fn siw_port(linux61: bool) -> PortAttr {
    PortAttr {
        state: PortState::Active,
        max_mtu: if linux61 { Mtu::Mtu1024 } else { Mtu::Mtu256 },
        active_mtu: Mtu::Mtu1024,
        gid_tbl_len: 1,
        port_cap_flags: 0x9_0000,
        max_msg_sz: u32::MAX,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 0,
        pkey_tbl_len: 0,
        active_width: 1,
        active_speed: 1,
        phys_state: 5,
        link_layer: LinkLayer::Ethernet,
    }
}
