//! `rdma_get_devices`, `ibv_query_device`, `ibv_query_port` and an id's `verbs`/`port_num` on
//! the simulated hosts: each device answers its transport's profile (`device_profile.rs`).

use cmtwin::{
    Call, CmError, DeviceAttr, DeviceInfo, Errno, IdDevice, IdHandle, NodeType, PortAttr, Result,
    Transport, TransportType,
};

use super::device_profile::{device_attr, node_guid, port_attr};
use crate::world::{DevKey, HostKey, World};

impl World {
    /// What identifies device `dev` (`ibv_get_device_name`, `ibv_get_device_guid`, ...).
    fn device_info(&self, dev: DevKey) -> DeviceInfo {
        let d = &self.topo.devices[dev];
        let (node_type, transport_type) = match d.transport {
            Transport::Iwarp => (NodeType::Rnic, TransportType::Iwarp),
            Transport::Roce | Transport::InfiniBand => (NodeType::Ca, TransportType::Ib),
        };
        DeviceInfo {
            name: d.name.clone(),
            node_type,
            transport_type,
            node_guid: node_guid(d.transport, d.host, dev),
        }
    }

    /// `rdma_get_devices`: the host's present devices in the topology's order; ENODEV for
    /// none (librdmacm's `ucma_init`).
    pub(crate) fn devices(&self, host: HostKey) -> Result<Vec<DeviceInfo>> {
        let list: Vec<DeviceInfo> = self.topo.hosts[host]
            .devices
            .iter()
            .filter(|d| self.topo.devices[**d].present)
            .map(|d| self.device_info(*d))
            .collect();
        if list.is_empty() {
            return Err(CmError::new(
                Call::GetDevices,
                Errno::ENODEV,
                "the host has no RDMA device",
            ));
        }
        Ok(list)
    }

    /// `id->verbs->device` and `id->port_num` (every simulated device has one port).
    pub(crate) fn id_device_info(&self, host: HostKey, id: IdHandle) -> Result<Option<IdDevice>> {
        let key = self.id_key(host, Call::IdDevice, id)?;
        Ok(self.id(key).librdmacm_device().map(|dev| IdDevice {
            device: self.device_info(dev),
            port_num: 1,
        }))
    }

    /// The present device of `host` named `name`: ENODEV naming `call` if there is none.
    fn named_device(&self, host: HostKey, call: Call, name: &str) -> Result<DevKey> {
        let found = self.topo.hosts[host].devices.iter().copied().find(|d| {
            let d = &self.topo.devices[*d];
            d.present && d.name == name
        });
        found.ok_or_else(|| {
            CmError::new(
                call,
                Errno::ENODEV,
                format!("no device {name:?} on the host"),
            )
        })
    }

    /// `ibv_query_device` on the device named `name`.
    pub(crate) fn query_device(&self, host: HostKey, name: &str) -> Result<DeviceAttr> {
        let dev = self.named_device(host, Call::QueryDevice, name)?;
        let d = &self.topo.devices[dev];
        let guid = node_guid(d.transport, d.host, dev);
        Ok(device_attr(d.transport, guid, self.cfg.ca_ack_delay))
    }

    /// `ibv_query_port` on port `port` of the device named `name`: EINVAL for any port but 1
    /// (`ib_query_port`'s `rdma_is_port_valid`).
    pub(crate) fn query_port(&self, host: HostKey, name: &str, port: u8) -> Result<PortAttr> {
        let dev = self.named_device(host, Call::QueryPort, name)?;
        if port != 1 {
            return Err(CmError::new(
                Call::QueryPort,
                Errno::EINVAL,
                format!("device {name:?} has no port {port} (its one port is 1)"),
            ));
        }
        let d = &self.topo.devices[dev];
        let lid = d.ips.first().map_or(0, |ip| crate::topology::ib_lid(*ip));
        Ok(port_attr(d.transport, self.cfg.kernel, lid))
    }
}
