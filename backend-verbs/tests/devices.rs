//! What the bed's RDMA device is (`rdma_get_devices`, `ibv_query_device`, `ibv_query_port`,
//! `id->verbs`, `id->port_num`), asserted against the values measured on the CI beds
//! (`cmtwin_tests::measured_devices`, which the simulator's twins also give). They need the
//! bed's device (the VM of `scripts/vm-run`), so they are ignored by default; run them there
//! with `--ignored --test-threads=1`.

use std::net::{IpAddr, SocketAddr};

use cmtwin::verbs::DataPath;
use cmtwin::{Call, CmBackend, Errno, NodeType, PortSpace, Transport, TransportType};
use cmtwin_tests::bed_id::BedId;
use cmtwin_tests::devices::{
    a_resolving_id_has_its_device_at_addr_resolved, reported_maxima_are_enforced,
};
use cmtwin_tests::measured_devices::{is_eui64_from_mac, measured};
use cmtwin_tests::steps::ok;
use cmtwin_verbs::VerbsBackend;

/// Every test here is under `device_info::`, the filter that runs them alone in the VM.
mod device_info {
    use super::*;

    /// The bed's transport, from `CMTWIN_RDMA_TRANSPORT` (`scripts/vm-run` sets it).
    fn transport() -> Transport {
        match std::env::var("CMTWIN_RDMA_TRANSPORT").as_deref() {
            Ok("iwarp") => Transport::Iwarp,
            _ => Transport::Roce,
        }
    }

    /// The bed's device name (`CMTWIN_RDMA_DEVICE`, default rxe0).
    fn device_name() -> String {
        std::env::var("CMTWIN_RDMA_DEVICE").unwrap_or_else(|_| "rxe0".into())
    }

    /// The bed's address (`CMTWIN_RDMA_ADDR`).
    fn bed_ip() -> IpAddr {
        let addr = std::env::var("CMTWIN_RDMA_ADDR").unwrap_or_else(|_| "192.168.77.1".into());
        addr.parse().expect("CMTWIN_RDMA_ADDR is an IP address")
    }

    #[test]
    #[ignore = "needs an RDMA device (run in the VM: scripts/verbs-tests-in-vm)"]
    fn the_device_answers_what_the_bed_measured() {
        let bed = BedId::current(transport());
        let profile = bed.kernel_profile().expect("a bed kernel with a profile");
        let (mut want_dev, want_port) = measured(bed.transport, profile).expect("a measured bed");
        let dp = VerbsBackend::new();
        let devices = ok(dp.devices(), "rdma_get_devices");
        println!("{}: devices {devices:?}", bed.name());
        assert_eq!(devices.len(), 1, "the bed has one device: {devices:?}");
        let info = &devices[0];
        assert_eq!(info.name, device_name());
        let (node, verbs) = match bed.transport {
            Transport::Iwarp => (NodeType::Rnic, TransportType::Iwarp),
            _ => (NodeType::Ca, TransportType::Ib),
        };
        assert_eq!((info.node_type, info.transport_type), (node, verbs));
        let attr = ok(dp.query_device(&info.name), "ibv_query_device");
        let port = ok(dp.query_port(&info.name, 1), "ibv_query_port");
        println!("{}: {attr:?}\n{}: port 1 {port:?}", bed.name(), bed.name());
        // The GUIDs come from the VM's netdev (its MAC), not from the driver: their shape and
        // their agreement are asserted, not their value.
        assert!(is_eui64_from_mac(attr.node_guid), "{:#x}", attr.node_guid);
        assert_eq!(attr.node_guid, info.node_guid, "ibv_get_device_guid");
        assert_eq!(attr.sys_image_guid, attr.node_guid);
        want_dev.node_guid = attr.node_guid;
        want_dev.sys_image_guid = attr.sys_image_guid;
        if bed.transport == Transport::Iwarp {
            // siw numbers its devices from 1 in the order the module made them (siw_main.c's
            // `dev_id`): a bed whose siw0 was deleted and added again by an earlier binary of
            // the same boot (the device-removal scenarios) answers 2, 3, ... (5 measured on
            // siw-6.1 after the conformance run). The measured 1 is the boot's first device.
            assert!(attr.vendor_part_id >= 1, "{attr:?}");
            want_dev.vendor_part_id = attr.vendor_part_id;
        }
        assert_eq!(attr, want_dev);
        assert_eq!(port, want_port);
    }

    #[test]
    #[ignore = "needs an RDMA device (run in the VM: scripts/verbs-tests-in-vm)"]
    fn a_port_the_device_lacks_or_a_device_the_host_lacks_is_refused() {
        let dp = VerbsBackend::new();
        let name = device_name();
        for port in [0, 2, 255] {
            let e = dp.query_port(&name, port).expect_err("not a port");
            assert_eq!((e.call, e.errno), (Call::QueryPort, Errno::EINVAL), "{e}");
        }
        let e = dp.query_port("nodev9", 1).expect_err("no such device");
        assert_eq!((e.call, e.errno), (Call::QueryPort, Errno::ENODEV), "{e}");
        let e = dp.query_device("nodev9").expect_err("no such device");
        assert_eq!((e.call, e.errno), (Call::QueryDevice, Errno::ENODEV), "{e}");
    }

    #[test]
    #[ignore = "needs an RDMA device (run in the VM: scripts/verbs-tests-in-vm)"]
    fn an_id_has_a_device_once_bound_to_one_or_its_address_resolved() {
        let cm = VerbsBackend::new();
        let ch = ok(cm.create_event_channel(), "channel");
        let fresh = ok(cm.create_id(Some(ch), 0, PortSpace::TCP), "create_id");
        assert_eq!(ok(cm.id_device(fresh), "id_device"), None, "a new id");
        let any = SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 7481);
        ok(cm.bind_addr(fresh, any), "wildcard bind");
        assert_eq!(
            ok(cm.id_device(fresh), "id_device"),
            None,
            "a wildcard bind"
        );
        let bound = ok(cm.create_id(Some(ch), 0, PortSpace::TCP), "create_id");
        ok(cm.bind_addr(bound, SocketAddr::new(bed_ip(), 7482)), "bind");
        let dev = ok(cm.id_device(bound), "id_device").expect("bound to the device's address");
        assert_eq!(
            (dev.device.name.as_str(), dev.port_num),
            (&*device_name(), 1)
        );
        let dst = SocketAddr::new(bed_ip(), 7482);
        let (resolving, after) = a_resolving_id_has_its_device_at_addr_resolved(&cm, ch, dst);
        assert_eq!(after, dev, "the same device and port");
        for id in [fresh, bound, resolving] {
            ok(cm.destroy_id(id), "destroy_id");
        }
        let e = cm.id_device(bound).expect_err("destroyed");
        assert_eq!((e.call, e.errno), (Call::IdDevice, Errno::ENOENT), "{e}");
        ok(cm.destroy_event_channel(ch), "destroy channel");
    }

    /// The maxima `ibv_query_device` reports are those the device enforces
    /// (`cmtwin_tests::devices::reported_maxima_are_enforced`).
    #[test]
    #[ignore = "needs an RDMA device (run in the VM: scripts/verbs-tests-in-vm)"]
    fn maxima_reported_are_enforced() {
        let dp = VerbsBackend::new();
        let id = ok(dp.create_id(None, 0, PortSpace::TCP), "create_id");
        ok(dp.bind_addr(id, SocketAddr::new(bed_ip(), 7491)), "bind");
        reported_maxima_are_enforced(&dp, id, &device_name());
        ok(dp.destroy_id(id), "destroy_id");
    }
}
