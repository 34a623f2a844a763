//! The fabric's topology: hosts, their RDMA devices, the addresses those own, and the on-link
//! addresses that answer ARP but run no CM. Fixed when the fabric is built, but for devices
//! coming and going (faults).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cmtwin::{PortSpace, Transport};

/// Index of a host in the fabric (4 bytes: every id, endpoint and verbs object names one).
pub(crate) type HostKey = u32;
/// Index of a device in the fabric.
pub(crate) type DevKey = u32;

/// The fabric's hosts or devices, indexed by their `u32` keys.
pub(crate) struct Keyed<T>(Vec<T>);

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Keyed(Vec::new())
    }
}

impl<T> Keyed<T> {
    /// The key the next [`Keyed::push`] gives.
    pub(crate) fn next_key(&self) -> u32 {
        u32::try_from(self.0.len()).expect("a fabric holds fewer than 2^32 hosts and devices")
    }

    /// Adds `item` and returns its key.
    pub(crate) fn push(&mut self, item: T) -> u32 {
        let key = self.next_key();
        self.0.push(item);
        key
    }

    /// Every item, in key order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// The key of the first item that satisfies `pred`.
    pub(crate) fn position(&self, pred: impl FnMut(&T) -> bool) -> Option<u32> {
        self.0.iter().position(pred).map(|i| i as u32)
    }

    /// Every item with its key, in key order.
    pub(crate) fn keyed(&self) -> impl Iterator<Item = (u32, &T)> {
        (0u32..).zip(self.0.iter())
    }
}

impl<T> std::ops::Index<u32> for Keyed<T> {
    type Output = T;

    fn index(&self, key: u32) -> &T {
        &self.0[key as usize]
    }
}

impl<T> std::ops::IndexMut<u32> for Keyed<T> {
    fn index_mut(&mut self, key: u32) -> &mut T {
        &mut self.0[key as usize]
    }
}

/// A simulated host.
pub(crate) struct Host {
    pub name: String,
    pub devices: Vec<DevKey>,
    /// The last ephemeral port handed out per port space.
    pub last_ephemeral: BTreeMap<PortSpace, u16>,
}

/// A simulated RDMA device with its IP addresses.
pub(crate) struct Device {
    pub host: HostKey,
    pub name: String,
    pub transport: Transport,
    pub ips: Vec<IpAddr>,
    pub present: bool,
    /// QP numbers, in the order the device gave them out since it last came up (the first
    /// [`QpnAllocator::REMEMBERED`]).
    pub qpns: QpnAllocator,
}

/// A device's QP numbers. Drawn from the seed; after a power cycle the device gives out the
/// numbers of its previous life again, in the same order, before drawing new ones, as a
/// hardware allocator restarting from its base does (what makes a rebooted host's first
/// connection look like one its peers still hold: a stale connection). Only a life's first
/// [`QpnAllocator::REMEMBERED`] numbers are given again, so that a device making QPs for
/// ever (a long fuzz campaign) holds a bounded list.
#[derive(Clone, Debug, Default)]
pub(crate) struct QpnAllocator {
    /// The first numbers given out since the device came up.
    pub given: Vec<u32>,
    /// The previous life's numbers still to give out again.
    pub again: std::collections::VecDeque<u32>,
}

impl QpnAllocator {
    /// How many of a life's first numbers the next life gives out again.
    pub(crate) const REMEMBERED: usize = 4096;

    /// The next number: a previous life's, or `draw()`.
    pub(crate) fn next(&mut self, draw: impl FnOnce() -> u32) -> u32 {
        let qpn = self.again.pop_front().unwrap_or_else(draw);
        if self.given.len() < Self::REMEMBERED {
            self.given.push(qpn);
        }
        qpn
    }

    /// The device went down: its numbers will be given out again.
    pub(crate) fn restart(&mut self) {
        let given = std::mem::take(&mut self.given);
        self.again = given.into();
    }
}

/// Every host and device of a fabric.
#[derive(Default)]
pub(crate) struct Topology {
    pub hosts: Keyed<Host>,
    pub devices: Keyed<Device>,
    /// On-link addresses that answer ARP but run no CM.
    pub silent_ips: BTreeSet<IpAddr>,
}

impl Topology {
    /// The device of `host` that owns `ip`.
    pub(crate) fn device_with_ip(&self, host: HostKey, ip: IpAddr) -> Option<DevKey> {
        self.hosts[host]
            .devices
            .iter()
            .copied()
            .find(|d| self.devices[*d].present && self.devices[*d].ips.contains(&ip))
    }

    /// The device of `host` whose netdev has `ip`, present or removed (a removed device's
    /// netdev keeps its addresses).
    pub(crate) fn netdev_with_ip(&self, host: HostKey, ip: IpAddr) -> Option<DevKey> {
        self.hosts[host]
            .devices
            .iter()
            .copied()
            .find(|d| self.devices[*d].ips.contains(&ip))
    }

    /// Whether a removed device of `host` had `ip` (its netdev keeps the address).
    pub(crate) fn removed_device_with_ip(&self, host: HostKey, ip: IpAddr) -> bool {
        self.hosts[host]
            .devices
            .iter()
            .any(|d| !self.devices[*d].present && self.devices[*d].ips.contains(&ip))
    }

    /// The host anywhere on the fabric whose device has or had `ip`, present or removed: a
    /// QP addressed to it is still addressed (the wire finds nobody there while the device
    /// is gone).
    pub(crate) fn host_of_ip(&self, ip: IpAddr) -> Option<HostKey> {
        self.devices
            .iter()
            .find(|d| d.ips.contains(&ip))
            .map(|d| d.host)
    }

    /// The (host, device) anywhere on the fabric that owns `ip`.
    pub(crate) fn owner_of_ip(&self, ip: IpAddr) -> Option<(HostKey, DevKey)> {
        self.devices
            .keyed()
            .find(|(_, d)| d.present && d.ips.contains(&ip))
            .map(|(k, d)| (d.host, k))
    }

    /// The (host, device) of the present InfiniBand device whose port has LID `lid` (see
    /// [`ib_lid`]), the first one in the fabric's order if two addresses share it.
    pub(crate) fn owner_of_lid(&self, lid: u16) -> Option<(HostKey, DevKey)> {
        self.devices
            .keyed()
            .find(|(_, d)| {
                d.present
                    && d.transport == Transport::InfiniBand
                    && d.ips.iter().any(|&ip| ib_lid(ip) == lid)
            })
            .map(|(k, d)| (d.host, k))
    }

    /// The first present device of `host`.
    pub(crate) fn first_device(&self, host: HostKey) -> Option<DevKey> {
        self.hosts[host]
            .devices
            .iter()
            .copied()
            .find(|d| self.devices[*d].present)
    }
}

/// The LID of the InfiniBand port that holds address `ip`: the simulated subnet manager
/// numbers ports 1 + the address's last byte (never 0, below the multicast LIDs). A group's
/// address gets one the same way, as the CM's address handles carry it.
pub(crate) fn ib_lid(ip: IpAddr) -> u16 {
    let last = match ip {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(v6) => v6.octets()[15],
    };
    1 + u16::from(last)
}

#[cfg(test)]
mod tests {
    use super::QpnAllocator;

    /// A power cycle gives the previous life's first numbers again, in order, then new ones;
    /// a life making more QPs than are remembered holds a bounded list.
    #[test]
    fn a_restarted_device_repeats_its_first_numbers_and_remembers_a_bounded_list() {
        let mut qpns = QpnAllocator::default();
        let mut next_draw = 100u32;
        let mut draw = || {
            next_draw += 1;
            next_draw
        };
        let first: Vec<u32> = (0..QpnAllocator::REMEMBERED + 10)
            .map(|_| qpns.next(&mut draw))
            .collect();
        assert_eq!(qpns.given.len(), QpnAllocator::REMEMBERED, "bounded");
        qpns.restart();
        let again: Vec<u32> = (0..QpnAllocator::REMEMBERED)
            .map(|_| qpns.next(&mut draw))
            .collect();
        assert_eq!(again, first[..QpnAllocator::REMEMBERED]);
        let fresh = qpns.next(&mut draw);
        assert_eq!(
            fresh,
            101 + QpnAllocator::REMEMBERED as u32 + 10,
            "then new draws"
        );
    }
}
