//! Faults the fabric can inject (CM-SEMANTICS.md §8, §5.1, §14.2): device removal, address
//! change, loss of a multicast group, neighbour change, failing SA path queries. Produces
//! DEVICE_REMOVAL, ADDR_CHANGE, MULTICAST_ERROR and spontaneous UNREACHABLE; the path query
//! failures become ROUTE_ERROR in `calls/address.rs`.

use std::net::IpAddr;

use cmtwin::{EventKind, EventParam, Transport, UdData};

use crate::store::OptKey;
use crate::trace::TraceKind;
use crate::world::{CmState, DevKey, HostKey, World};

/// How an InfiniBand SA path query fails (CM-SEMANTICS.md §14.2): the route resolution ends
/// in ROUTE_ERROR with the status the SA client reports (`cma_query_handler`), and the id is
/// back in ADDR_RESOLVED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathFailure {
    /// The SA answers with an error status, e.g. no path to the destination: ROUTE_ERROR
    /// -EINVAL after the SA round trip.
    NoPath,
    /// The SA never answers: ROUTE_ERROR -ETIMEDOUT when the query's timeout expires.
    Timeout,
}

/// How a device goes away (CM-SEMANTICS §8.1 step 4: the kernel's teardown of each id may
/// speak on the wire "if the port still works").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// The port went first (a hot-unplug, the netdev unregistered under rxe): nothing more is
    /// sent, the peers time out.
    PortGone,
    /// The kernel unregisters a working device (`rdma link delete`, a driver unbind): ucma's
    /// teardown (`ucma_close_id`) destroys each kernel id while the port still sends, so the
    /// peers get what `rdma_destroy_id` sends (DREQ, REJ), then the port goes.
    PortWorks,
}

impl World {
    /// Unregisters device `dev` (§8.1): every id attached to it gets DEVICE_REMOVAL (unaccepted
    /// children get none), pending work is cancelled, and ucma releases the id at once, so
    /// further calls fail with ENXIO (`check_not_removed`). Wildcard listeners, and ids still
    /// resolving an address without a bound device, get nothing: they are on no device. What
    /// the peers hear depends on `how`.
    pub(crate) fn remove_device(&mut self, dev: DevKey, how: Removal) {
        let host = self.topo.devices[dev].host;
        if how == Removal::PortGone {
            self.topo.devices[dev].present = false;
        }
        self.verbs_device_removed(dev);
        self.record_text(Some(host), TraceKind::Fault, |w| match how {
            Removal::PortGone => format!("device {} removed", w.topo.devices[dev].name),
            Removal::PortWorks => format!("device {} unregistered", w.topo.devices[dev].name),
        });
        let attached: Vec<_> = self
            .kernel
            .ids
            .iter()
            .filter(|(_, i)| i.device == Some(dev))
            .map(|(k, _)| *k)
            .collect();
        for key in attached {
            let (state, ep, owned) = {
                let id = self.id(key);
                (id.state, id.ep.get(), id.owned)
            };
            if state == CmState::DeviceRemoval {
                continue;
            }
            match (ep, how) {
                // The port is gone: nothing more is sent or answered; the peers time out.
                (Some(ep), Removal::PortGone) => self.drive(ep, |e, out| e.device_removed(out)),
                // ucma's teardown destroys the kernel id as rdma_destroy_id would (cm.c
                // `cm_destroy_id`): a DREQ to an established peer, a REJ to a pending one.
                (Some(ep), Removal::PortWorks) => {
                    self.id_mut(key).ep = OptKey::NONE;
                    self.destroy_endpoint(ep);
                }
                (None, _) => {}
            }
            let ep = self.id(key).ep.get();
            let request_unfetched = !owned && self.id(key).request_queued_on.get().is_some();
            if request_unfetched {
                // librdmacm's processing of the request will fail: the child and its
                // CONNECT_REQUEST disappear silently (§8.4).
                if let Some(ep) = ep {
                    self.cm
                        .eps
                        .get_mut(&ep)
                        .expect("endpoint of a live id")
                        .owner = None;
                    self.cm.epoch += 1;
                    self.drive(ep, |e, out| e.abandon(out));
                }
                self.id_mut(key).ep = OptKey::NONE;
                self.remove_id(key);
                continue;
            }
            // A fetched but unaccepted child gets no event (it has no uid), but is released.
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
        }
        self.topo.devices[dev].present = false;
    }

    /// Host `host` loses power: its devices go away without a word (no DEVICE_REMOVAL, no
    /// message to any peer), and everything its kernel held (ids, endpoints, channels, events)
    /// is gone; a process of the host finds its handles dead. Its devices will give out their
    /// QP numbers again from the start when it comes back ([`World::power_on`]).
    pub(crate) fn power_off(&mut self, host: HostKey) {
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("{} powered off", w.topo.hosts[host].name)
        });
        for &dev in &self.topo.hosts[host].devices.clone() {
            self.topo.devices[dev].present = false;
            self.topo.devices[dev].qpns.restart();
        }
        self.drop_orphans_of_host(host);
        let ids: Vec<_> = (self.kernel.ids.keys_sorted().into_iter())
            .filter(|k| self.id(*k).host == host)
            .collect();
        for key in ids {
            if let Some(ep) = self.id_mut(key).ep.take() {
                self.forget_endpoint(ep);
            }
            self.remove_id(key);
        }
        let eps: Vec<_> = (self.cm.eps.keys_sorted().into_iter())
            .filter(|ep| self.cm.eps[ep].host == host)
            .collect();
        for ep in eps {
            self.forget_endpoint(ep);
        }
        let channels: Vec<_> = (self.kernel.channels.keys_sorted().into_iter())
            .filter(|c| self.kernel.channels[c].host == host)
            .collect();
        for chan in channels {
            self.kernel.channels.remove(&chan);
            self.sched.channel_changed(chan);
        }
    }

    /// The top-level process named `name` crashes (it and every thread it spawned): as on any
    /// process exit, the kernel closes its channel files, destroying each of its ids as
    /// `rdma_destroy_id` does (peers get a DREQ or a REJ), and the process's threads unwind as
    /// soon as they would run again. Nothing happens when no running process has that name.
    pub(crate) fn crash_process(&mut self, name: &str) {
        let group = self
            .sched
            .running()
            .then(|| self.sched.top_level(name))
            .flatten();
        self.record_text(None, TraceKind::Fault, |_| match group {
            Some(_) => format!("process {name} crashes"),
            None => format!("no running process {name} to crash"),
        });
        let Some(group) = group else {
            return;
        };
        self.close_files_of(group);
        self.close_verbs_of(group);
        self.sched.crash_group(group);
    }

    /// Closes every channel file process group `group` owns (its exit or crash): the kernel's
    /// `ucma_close` destroys each id of the file as `rdma_destroy_id` does.
    pub(crate) fn close_files_of(&mut self, group: usize) {
        let files: Vec<_> = (self.kernel.channels.keys_sorted().into_iter())
            .filter(|c| self.kernel.channels[c].owner == Some(group))
            .collect();
        for chan in files {
            if self.kernel.channels.contains_key(&chan) {
                self.close_channel_file(chan);
            }
        }
    }

    /// Host `host` is back up: its devices are present again, with nothing on them.
    pub(crate) fn power_on(&mut self, host: HostKey) {
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("{} powered on", w.topo.hosts[host].name)
        });
        for &dev in &self.topo.hosts[host].devices.clone() {
            self.topo.devices[dev].present = true;
        }
    }

    /// Brings a removed device back (as `rdma link add` does).
    pub(crate) fn restore_device(&mut self, dev: DevKey) {
        self.topo.devices[dev].present = true;
        let host = self.topo.devices[dev].host;
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("device {} added", w.topo.devices[dev].name)
        });
    }

    /// The bound netdev's address changed (bonding fail-over): ADDR_CHANGE to attached ids.
    pub(crate) fn address_change(&mut self, dev: DevKey) {
        let host = self.topo.devices[dev].host;
        self.record_text(Some(host), TraceKind::Fault, |w| {
            format!("address change on {}", w.topo.devices[dev].name)
        });
        let attached: Vec<_> = self
            .kernel
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
    /// On InfiniBand the subnet manager has dropped their memberships: the group's datagrams
    /// no longer reach them until they join again (CM-SEMANTICS §13.3: "rejoin").
    pub(crate) fn multicast_lost(&mut self, group: IpAddr) {
        self.record_text(None, TraceKind::Fault, |_| {
            format!("multicast group {group} lost")
        });
        let members: Vec<(u64, u64, u64)> = self
            .kernel
            .ids
            .iter()
            .flat_map(|(k, i)| {
                i.multicast()
                    .iter()
                    .filter(|(_, m)| m.addr.ip() == group)
                    .map(move |(mc, m)| (*k, *mc, m.context))
            })
            .collect();
        for (key, mc, context) in members {
            let on_ib = self
                .id(key)
                .device
                .is_some_and(|d| self.topo.devices[d].transport == cmtwin::Transport::InfiniBand);
            if let Some(m) = self.id_mut(key).multicast_mut().get_mut(&mc) {
                m.lost |= on_ib;
            }
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
                Some(mc),
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
            .kernel
            .ids
            .iter()
            .filter(|(_, i)| {
                i.peer.is_some_and(|p| p.ip() == ip)
                    && matches!(
                        i.state,
                        CmState::RouteResolved | CmState::Connect | CmState::Disconnect
                    )
                    && i.device
                        .is_some_and(|d| self.topo.devices[d].transport == Transport::Roce)
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

    /// The next `count` SA path queries of `host`'s InfiniBand ids fail as `how` says.
    pub(crate) fn fail_path_queries(&mut self, host: HostKey, count: u32, how: PathFailure) {
        self.record_text(Some(host), TraceKind::Fault, |_| {
            format!("the next {count} path queries fail ({how:?})")
        });
        self.kernel.path_faults.push((host, count, how));
    }

    /// Takes one pending path query failure of `host`, if any.
    pub(crate) fn take_path_fault(&mut self, host: HostKey) -> Option<PathFailure> {
        let i = self
            .kernel
            .path_faults
            .iter()
            .position(|(h, n, _)| *h == host && *n > 0)?;
        let how = self.kernel.path_faults[i].2;
        self.kernel.path_faults[i].1 -= 1;
        if self.kernel.path_faults[i].1 == 0 {
            self.kernel.path_faults.remove(i);
        }
        Some(how)
    }
}
