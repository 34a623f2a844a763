//! What a simulated device is: `rdma_get_devices`, `ibv_query_device`, `ibv_query_port` and
//! an id's device and port, on each transport and kernel profile, exactly; and the maxima the
//! answer reports are the ones the simulated device enforces.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::verbs::DataPath;
use cmtwin::{
    AtomicCap, Call, CmBackend, DeviceAttr, DeviceInfo, Errno, LinkLayer, Mtu, NodeType, PortAttr,
    PortSpace, PortState, Transport, TransportType,
};
use cmtwin_sim::{Fabric, KernelProfile, SimConfig};
use cmtwin_tests::devices::{
    a_resolving_id_has_its_device_at_addr_resolved, reported_maxima_are_enforced,
};
use cmtwin_tests::measured_devices::{is_eui64_from_mac, measured};
use cmtwin_tests::steps::ok;

const SEED: u64 = 0xde71ce;
const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B1: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const B2: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2));

/// Host `a` with one device (`<transport>0`, key 0), host `b` with two (`first`, key 1, and
/// `second`, key 2), on `kernel`'s profile.
fn fabric(transport: Transport, kernel: KernelProfile) -> Fabric {
    Fabric::builder(SEED)
        .config(SimConfig::for_kernel(kernel))
        .host("a", transport, &[A])
        .host_with_devices(
            "b",
            &[("first", transport, &[B1]), ("second", transport, &[B2])],
        )
        .build()
        .expect("fabric")
}

/// The name `FabricBuilder::host` gives a host's one device.
fn first_name(transport: Transport) -> &'static str {
    match transport {
        Transport::InfiniBand => "ib0",
        Transport::Roce => "roce0",
        Transport::Iwarp => "iw0",
    }
}

/// RoCE and iWARP devices answer what rxe and siw answered on the bed of the same kernel,
/// but for the GUIDs (the topology's, not a netdev's) and the active MTU (4096 on every
/// simulated port, 1024 on the beds' dummy0 of MTU 1500).
#[test]
fn roce_and_iwarp_devices_answer_what_the_beds_measured() {
    let profiles = [
        (KernelProfile::Linux61, KernelProfile::Linux61),
        (KernelProfile::Linux612, KernelProfile::Linux612),
        (KernelProfile::Mainline, KernelProfile::Linux612),
    ];
    for transport in [Transport::Roce, Transport::Iwarp] {
        for (kernel, measured_on) in profiles {
            let f = fabric(transport, kernel);
            let a = f.backend("a");
            let name = first_name(transport);
            let (mut want_dev, mut want_port) = measured(transport, measured_on).unwrap();
            want_dev.node_guid = 0x0000_00ff_fe00_0000;
            want_dev.sys_image_guid = want_dev.node_guid;
            want_port.active_mtu = Mtu::Mtu4096;
            let what = format!("{transport:?} {kernel:?}");
            assert_eq!(ok(a.query_device(name), "query_device"), want_dev, "{what}");
            assert_eq!(ok(a.query_port(name, 1), "query_port"), want_port, "{what}");
        }
    }
}

/// The two kernels differ where the beds did: rxe's `max_msg_sz`, siw's `max_mtu`.
#[test]
fn linux_6_1_and_6_12_differ_in_rxe_max_msg_sz_and_siw_max_mtu() {
    let port = |t, k| {
        ok(
            fabric(t, k).backend("a").query_port(first_name(t), 1),
            "port",
        )
    };
    let (old, new) = (KernelProfile::Linux61, KernelProfile::Linux612);
    let (r61, r612) = (port(Transport::Roce, old), port(Transport::Roce, new));
    assert_eq!((r61.max_msg_sz, r612.max_msg_sz), (8 << 20, 2 << 30));
    let (s61, s612) = (port(Transport::Iwarp, old), port(Transport::Iwarp, new));
    assert_eq!((s61.max_mtu, s612.max_mtu), (Mtu::Mtu1024, Mtu::Mtu256));
}

/// InfiniBand devices answer the ConnectX-like profile (no bed measures one), on a port whose
/// LID is the simulated subnet manager's (1 + the address's last byte).
#[test]
fn infiniband_devices_answer_the_connectx_like_profile() {
    let f = fabric(Transport::InfiniBand, KernelProfile::Linux61);
    let a = f.backend("a");
    let guid = 0x0002_c903_0000_0000;
    let want = DeviceAttr {
        fw_ver: "20.31.1014".into(),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_ffff_ffff_f000,
        vendor_id: 0x02c9,
        vendor_part_id: 4123,
        hw_ver: 0,
        max_qp: 262_144,
        max_qp_wr: 32_768,
        device_cap_flags: 0xed72_1c36,
        max_sge: 30,
        max_sge_rd: 30,
        max_cq: 16_777_216,
        max_cqe: 4_194_303,
        max_mr: 16_777_216,
        max_pd: 16_777_216,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_res_rd_atom: 4_194_304,
        atomic_cap: AtomicCap::Hca,
        max_srq: 8_388_608,
        max_srq_wr: 32_767,
        max_srq_sge: 31,
        max_ah: 2_147_483_647,
        max_mcast_grp: 2_097_152,
        max_mcast_qp_attach: 240,
        max_total_mcast_qp_attach: 503_316_480,
        max_pkeys: 128,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    };
    assert_eq!(ok(a.query_device("ib0"), "query_device"), want);
    let port = PortAttr {
        state: PortState::Active,
        max_mtu: Mtu::Mtu4096,
        active_mtu: Mtu::Mtu4096,
        gid_tbl_len: 128,
        port_cap_flags: 0x2659_e848,
        max_msg_sz: 1 << 30,
        lid: 2,
        sm_lid: 1,
        lmc: 0,
        max_vl_num: 4,
        pkey_tbl_len: 128,
        active_width: 2,
        active_speed: 64,
        phys_state: 5,
        link_layer: LinkLayer::InfiniBand,
    };
    assert_eq!(ok(a.query_port("ib0", 1), "query_port"), port);
}

/// `rdma_get_devices` lists a host's devices in the topology's order, GUIDs from the topology
/// (the same on every run), shaped as rxe's and siw's (an EUI-64 of a MAC) on RoCE and
/// iWARP; a removed device is no longer listed nor queried (ENODEV).
#[test]
fn devices_are_listed_in_topology_order_with_deterministic_guids() {
    let cases = [
        (Transport::Roce, NodeType::Ca, TransportType::Ib),
        (Transport::Iwarp, NodeType::Rnic, TransportType::Iwarp),
        (Transport::InfiniBand, NodeType::Ca, TransportType::Ib),
    ];
    for (transport, node_type, transport_type) in cases {
        let f = fabric(transport, KernelProfile::Linux61);
        let b = f.backend("b");
        let info = |name: &str, node_guid| DeviceInfo {
            name: name.into(),
            node_type,
            transport_type,
            node_guid,
        };
        let (g1, g2) = match transport {
            Transport::InfiniBand => (0x0002_c903_0001_0001, 0x0002_c903_0001_0002),
            _ => (0x0000_00ff_fe01_0001, 0x0000_00ff_fe01_0002),
        };
        let want = vec![info("first", g1), info("second", g2)];
        assert_eq!(ok(b.devices(), "devices"), want, "{transport:?}");
        let shaped = transport != Transport::InfiniBand;
        assert_eq!(is_eui64_from_mac(g1), shaped, "{transport:?}");
        let attr = ok(b.query_device("second"), "query_device");
        assert_eq!((attr.node_guid, attr.sys_image_guid), (g2, g2));
        let link = ok(b.query_port("second", 1), "query_port").link_layer;
        let want_link = match transport {
            Transport::InfiniBand => LinkLayer::InfiniBand,
            _ => LinkLayer::Ethernet,
        };
        assert_eq!(link, want_link, "{transport:?}");
        f.remove_device("b").expect("remove the first device");
        assert_eq!(ok(b.devices(), "devices"), vec![info("second", g2)]);
        let e = b.query_device("first").expect_err("removed");
        assert_eq!((e.call, e.errno), (Call::QueryDevice, Errno::ENODEV), "{e}");
    }
}

/// A port other than 1 is EINVAL, as `ib_query_port` answers (measured on rxe and siw); an
/// unknown device is ENODEV, also for another host's device.
#[test]
fn a_bad_port_is_einval_and_an_unknown_device_enodev() {
    for transport in [Transport::Roce, Transport::Iwarp, Transport::InfiniBand] {
        let f = fabric(transport, KernelProfile::Linux612);
        let a = f.backend("a");
        for port in [0, 2, 255] {
            let e = a
                .query_port(first_name(transport), port)
                .expect_err("bad port");
            assert_eq!((e.call, e.errno), (Call::QueryPort, Errno::EINVAL), "{e}");
        }
        for name in ["first", "nodev9"] {
            let e = a.query_port(name, 1).expect_err("not a's device");
            assert_eq!((e.call, e.errno), (Call::QueryPort, Errno::ENODEV), "{e}");
            let e = a.query_device(name).expect_err("not a's device");
            assert_eq!((e.call, e.errno), (Call::QueryDevice, Errno::ENODEV), "{e}");
        }
    }
}

/// `id->verbs` and `id->port_num`: none for a new id and after a wildcard bind; the device
/// and port 1 after a bind to its address; none from `rdma_resolve_addr` until ADDR_RESOLVED
/// is fetched (librdmacm's `ucma_get_device`), then the device; a destroyed id and another
/// host's id are ENOENT, as for every call.
#[test]
fn an_id_has_its_device_once_bound_to_it_or_its_address_resolved() {
    let f = fabric(Transport::Roce, KernelProfile::Linux61);
    let (a, b) = (f.backend("a"), f.backend("b"));
    let ch = ok(b.create_event_channel(), "channel");
    let new_id = || ok(b.create_id(Some(ch), 0, PortSpace::TCP), "create_id");
    let fresh = new_id();
    assert_eq!(ok(b.id_device(fresh), "id_device"), None, "a new id");
    let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 7481);
    ok(b.bind_addr(fresh, any), "wildcard bind");
    assert_eq!(ok(b.id_device(fresh), "id_device"), None, "a wildcard bind");
    let bound = new_id();
    ok(b.bind_addr(bound, SocketAddr::new(B2, 7482)), "bind");
    let dev = ok(b.id_device(bound), "id_device").expect("bound to second's address");
    assert_eq!((dev.device.name.as_str(), dev.port_num), ("second", 1));
    assert_eq!(dev.device.node_guid, 0x0000_00ff_fe01_0002);
    let dst = SocketAddr::new(A, 7483);
    let (resolving, dev) = a_resolving_id_has_its_device_at_addr_resolved(&b, ch, dst);
    assert_eq!((dev.device.name.as_str(), dev.port_num), ("first", 1));
    for id in [fresh, bound, resolving] {
        ok(b.destroy_id(id), "destroy_id");
    }
    for (backend, what) in [(&b, "destroyed"), (&a, "another host's")] {
        let e = backend.id_device(bound).expect_err(what);
        assert_eq!(
            (e.call, e.errno),
            (Call::IdDevice, Errno::ENOENT),
            "{what}: {e}"
        );
    }
    ok(b.destroy_event_channel(ch), "destroy channel");
}

/// The maxima `query_device` reports are those the device enforces: a QP at `max_sge`
/// entries and a CQ at `max_cqe` entries are made, one more of either is EINVAL.
#[test]
fn the_reported_maxima_are_the_enforced_ones() {
    for transport in [Transport::Roce, Transport::Iwarp, Transport::InfiniBand] {
        let f = fabric(transport, KernelProfile::Linux61);
        let a = f.backend("a");
        let id = ok(a.create_id(None, 0, PortSpace::TCP), "create_id");
        ok(a.bind_addr(id, SocketAddr::new(A, 7491)), "bind");
        reported_maxima_are_enforced(&a, id, first_name(transport));
        ok(a.destroy_id(id), "destroy_id");
    }
}
