//! What an RDMA device is and what it can do: the identity `rdma_get_devices` and
//! `ibv_get_device_name`/`ibv_get_device_guid` give ([`DeviceInfo`]), the attributes of
//! `ibv_query_device` ([`DeviceAttr`]) and of `ibv_query_port` ([`PortAttr`]), and the device and
//! port an id is attached to (`id->verbs`, `id->port_num`: [`IdDevice`]).
//!
//! A device is named by its name (`ibv_get_device_name`, e.g. `rxe0`), which is how a program
//! that has no id yet picks one from `rdma_get_devices`, and which stays valid across the
//! handles of every backend: [`crate::CmBackend::devices`] lists them,
//! [`crate::CmBackend::id_device`] says which one an id uses, and
//! [`crate::verbs::DataPath::query_device`] and [`crate::verbs::DataPath::query_port`] take the
//! name. A name that no longer names a device of the host (the device was removed) is ENODEV.
//!
//! A program sizing its queues from the device, as SPDK and perftest do:
//!
//! ```
//! use cmtwin::verbs::DataPath;
//! use cmtwin::{IdHandle, QpCap, Result};
//!
//! /// Capacities for a QP of `id`'s device: `want` requests a queue, as many as the device
//! /// takes, and every scatter/gather entry it allows on receives, at most 4.
//! fn sized_cap<B: DataPath>(dp: &B, id: IdHandle, want: u32) -> Result<QpCap> {
//!     let device = dp
//!         .id_device(id)?
//!         .ok_or_else(|| cmtwin::CmError::application("bind or resolve the id first"))?;
//!     let attr = dp.query_device(&device.device.name)?;
//!     let depth = want.min(attr.max_qp_wr);
//!     Ok(QpCap {
//!         max_send_wr: depth,
//!         max_recv_wr: depth,
//!         max_send_sge: 1,
//!         max_recv_sge: attr.max_sge.min(4),
//!         max_inline_data: 0,
//!     })
//! }
//! ```

/// The kind of node a device is (`ibv_node_type`, `device->node_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeType {
    /// `IBV_NODE_CA` (1): an InfiniBand or RoCE channel adapter (rxe, mlx5).
    Ca,
    /// `IBV_NODE_SWITCH` (2).
    Switch,
    /// `IBV_NODE_ROUTER` (3).
    Router,
    /// `IBV_NODE_RNIC` (4): an iWARP NIC (siw).
    Rnic,
    /// Any other value libibverbs gives (usNIC, unspecified, ...).
    Other(i32),
}

impl NodeType {
    /// The `ibv_node_type` value `raw`.
    pub fn from_raw(raw: i32) -> NodeType {
        match raw {
            1 => NodeType::Ca,
            2 => NodeType::Switch,
            3 => NodeType::Router,
            4 => NodeType::Rnic,
            n => NodeType::Other(n),
        }
    }
}

/// The verbs transport of a device (`ibv_transport_type`, `device->transport_type`): RoCE
/// devices are `Ib`, as in libibverbs; the port's [`LinkLayer`] tells RoCE from InfiniBand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportType {
    /// `IBV_TRANSPORT_IB` (0): InfiniBand and RoCE.
    Ib,
    /// `IBV_TRANSPORT_IWARP` (1).
    Iwarp,
    /// Any other value (usNIC, unspecified, ...).
    Other(i32),
}

impl TransportType {
    /// The `ibv_transport_type` value `raw`.
    pub fn from_raw(raw: i32) -> TransportType {
        match raw {
            0 => TransportType::Ib,
            1 => TransportType::Iwarp,
            n => TransportType::Other(n),
        }
    }
}

/// What identifies a device: one entry of `rdma_get_devices`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceInfo {
    /// `ibv_get_device_name` (`rxe0`, `siw0`, `mlx5_0`): the name the query calls take.
    pub name: String,
    /// `device->node_type`.
    pub node_type: NodeType,
    /// `device->transport_type`.
    pub transport_type: TransportType,
    /// `ibv_get_device_guid`, in host order (C gives it big-endian): the node GUID, the same
    /// as [`DeviceAttr::node_guid`].
    pub node_guid: u64,
}

/// The device and port an id is attached to: `id->verbs->device` and `id->port_num`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdDevice {
    /// The device.
    pub device: DeviceInfo,
    /// The port of the device (`id->port_num`, 1 on a one-port device).
    pub port_num: u8,
}

/// The atomic operations a device supports (`ibv_atomic_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE` (0): no atomics (siw).
    None,
    /// `IBV_ATOMIC_HCA` (1): atomic with respect to this device's other atomics (rxe).
    Hca,
    /// `IBV_ATOMIC_GLOB` (2): atomic with respect to the CPU too.
    Glob,
    /// Any other value.
    Other(u32),
}

impl AtomicCap {
    /// The `ibv_atomic_cap` value `raw`.
    pub fn from_raw(raw: u32) -> AtomicCap {
        match raw {
            0 => AtomicCap::None,
            1 => AtomicCap::Hca,
            2 => AtomicCap::Glob,
            n => AtomicCap::Other(n),
        }
    }
}

/// `struct ibv_device_attr`, the fields programs read (`ibv_query_device`). Counts are
/// those of the C struct (`int` fields that are never negative as `u32`); GUIDs in host
/// order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each field is the `ibv_device_attr` field of the same name
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    /// The most requests a QP's queue may be asked for.
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    /// The most scatter/gather entries of a request.
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    /// The most entries a CQ may be asked for.
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    /// The most RDMA reads and atomics a QP answers at once (the bound of
    /// `responder_resources`).
    pub max_qp_rd_atom: u32,
    /// The most RDMA reads and atomics a QP has outstanding (the bound of `initiator_depth`).
    pub max_qp_init_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub atomic_cap: AtomicCap,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_ah: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// A port's logical state (`ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// `IBV_PORT_NOP` (0).
    Nop,
    /// `IBV_PORT_DOWN` (1).
    Down,
    /// `IBV_PORT_INIT` (2).
    Init,
    /// `IBV_PORT_ARMED` (3).
    Armed,
    /// `IBV_PORT_ACTIVE` (4).
    Active,
    /// `IBV_PORT_ACTIVE_DEFER` (5).
    ActiveDefer,
    /// Any other value.
    Other(u32),
}

impl PortState {
    /// The `ibv_port_state` value `raw`.
    pub fn from_raw(raw: u32) -> PortState {
        match raw {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            n => PortState::Other(n),
        }
    }
}

/// An MTU of the verbs (`ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// `IBV_MTU_256` (1).
    Mtu256,
    /// `IBV_MTU_512` (2).
    Mtu512,
    /// `IBV_MTU_1024` (3).
    Mtu1024,
    /// `IBV_MTU_2048` (4).
    Mtu2048,
    /// `IBV_MTU_4096` (5).
    Mtu4096,
    /// Any other value.
    Other(u32),
}

impl Mtu {
    /// The `ibv_mtu` value `raw`.
    pub fn from_raw(raw: u32) -> Mtu {
        match raw {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            n => Mtu::Other(n),
        }
    }

    /// The MTU in bytes (`None` for an unknown value).
    pub fn bytes(self) -> Option<u32> {
        match self {
            Mtu::Mtu256 => Some(256),
            Mtu::Mtu512 => Some(512),
            Mtu::Mtu1024 => Some(1024),
            Mtu::Mtu2048 => Some(2048),
            Mtu::Mtu4096 => Some(4096),
            Mtu::Other(_) => None,
        }
    }
}

/// The link layer of a port (`IBV_LINK_LAYER_*`): what QEMU's RDMA migration checks to tell
/// InfiniBand from RoCE and iWARP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_UNSPECIFIED` (0): older kernels' answer, meaning InfiniBand.
    Unspecified,
    /// `IBV_LINK_LAYER_INFINIBAND` (1).
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (2): RoCE and iWARP.
    Ethernet,
    /// Any other value.
    Other(u8),
}

impl LinkLayer {
    /// The `IBV_LINK_LAYER_*` value `raw`.
    pub fn from_raw(raw: u8) -> LinkLayer {
        match raw {
            0 => LinkLayer::Unspecified,
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            n => LinkLayer::Other(n),
        }
    }
}

/// `struct ibv_port_attr`, the fields programs read (`ibv_query_port`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each field is the `ibv_port_attr` field of the same name
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: Mtu,
    /// The MTU the port runs at: the largest a UD datagram's payload may be.
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub pkey_tbl_len: u16,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: LinkLayer,
}
