//! Faults the fabric can inject (CM-SEMANTICS.md §8, §5.1): device removal, address change,
//! loss of a multicast group, neighbour change. Produces DEVICE_REMOVAL, ADDR_CHANGE,
//! MULTICAST_ERROR and spontaneous UNREACHABLE.

use std::net::{IpAddr, SocketAddr};

use cmtwin::{EventKind, EventParam, Transport, UdData};

use crate::trace::TraceKind;
use crate::world::{Action, CmState, DevKey, World};

impl World {
    /// Unregisters device `dev` (§8.1): every id attached to it gets DEVICE_REMOVAL (unaccepted
    /// children silently disappear), pending work is cancelled, and a little later the
    /// background teardown makes further calls fail with ENXIO. Wildcard listeners get nothing.
    pub(crate) fn remove_device(&mut self, dev: DevKey) {
        let host = self.devices[dev].host;
        self.devices[dev].present = false;
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("device {} removed", w.devices[dev].name)
        });
        let attached: Vec<_> = self
            .ids
            .iter()
            .filter(|(_, i)| i.device == Some(dev))
            .map(|(k, _)| *k)
            .collect();
        for key in attached {
            let (state, ep, owned) = {
                let id = self.id(key);
                (id.state, id.ep, id.owned)
            };
            if state == CmState::DeviceRemoval {
                continue;
            }
            if let Some(ep) = ep {
                // The port is gone: nothing more is sent or answered; the peers time out.
                self.drive(ep, |e, out| e.device_removed(out));
            }
            let request_unfetched = !owned && self.id(key).request_queued_on.is_some();
            if request_unfetched {
                // librdmacm's processing of the request will fail: the child and its
                // CONNECT_REQUEST disappear silently, with no protocol side effects (§8.4).
                if let Some(ep) = ep {
                    self.eps.get_mut(&ep).expect("endpoint of a live id").owner = None;
                    self.drive(ep, |e, out| e.abandon(out));
                }
                self.id_mut(key).ep = None;
                self.remove_id(key);
                continue;
            }
            // A fetched but unaccepted child gets no event (it has no uid), but is torn down.
            let id = self.id_mut(key);
            id.state = CmState::DeviceRemoval;
            id.op_gen += 1;
            self.queue_event(
                key,
                EventKind::DeviceRemoval,
                0,
                EventParam::None,
                Vec::new(),
            );
            let delay = self.cfg.removal_teardown;
            self.after(delay, Action::Teardown { id: key });
        }
    }

    /// Brings a removed device back (as `rdma link add` does).
    pub(crate) fn restore_device(&mut self, dev: DevKey) {
        self.devices[dev].present = true;
        let host = self.devices[dev].host;
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("device {} added", w.devices[dev].name)
        });
    }

    /// The bound netdev's address changed (bonding fail-over): ADDR_CHANGE to attached ids.
    pub(crate) fn address_change(&mut self, dev: DevKey) {
        let host = self.devices[dev].host;
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("address change on {}", w.devices[dev].name)
        });
        let attached: Vec<_> = self
            .ids
            .iter()
            .filter(|(_, i)| i.device == Some(dev) && i.state != CmState::DeviceRemoval)
            .map(|(k, _)| *k)
            .collect();
        for key in attached {
            self.queue_event(key, EventKind::AddrChange, 0, EventParam::None, Vec::new());
        }
    }

    /// A multicast group is lost (port error, SM change): MULTICAST_ERROR -ENETRESET to members.
    pub(crate) fn multicast_lost(&mut self, group: IpAddr) {
        self.record_text(None, TraceKind::Fault, |_| {
            format!("multicast group {group} lost")
        });
        let members: Vec<(u64, SocketAddr, u64)> = self
            .ids
            .iter()
            .flat_map(|(k, i)| {
                i.multicast
                    .iter()
                    .filter(|(a, _)| a.ip() == group)
                    .map(move |(a, c)| (*k, *a, *c))
            })
            .collect();
        for (key, addr, context) in members {
            let param = EventParam::Multicast {
                ud: UdData::default(),
                context,
            };
            self.queue_event_full(
                key,
                key,
                None,
                EventKind::MulticastError,
                -102,
                param,
                Vec::new(),
                Some(addr),
            );
        }
    }

    /// The neighbour entry of `ip` changed MAC: RoCE ids whose route leads there get
    /// UNREACHABLE -ETIMEDOUT, whatever their state (§5.1 notes).
    pub(crate) fn neighbour_change(&mut self, ip: IpAddr) {
        self.record_text(None, TraceKind::Fault, |_| {
            format!("neighbour {ip} changed its MAC")
        });
        let affected: Vec<_> = self
            .ids
            .iter()
            .filter(|(_, i)| {
                i.peer.is_some_and(|p| p.ip() == ip)
                    && matches!(
                        i.state,
                        CmState::RouteResolved | CmState::Connect | CmState::Disconnect
                    )
                    && i.device
                        .is_some_and(|d| self.devices[d].transport == Transport::Roce)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in affected {
            self.queue_event(
                key,
                EventKind::Unreachable,
                -110,
                EventParam::None,
                Vec::new(),
            );
        }
    }
}
