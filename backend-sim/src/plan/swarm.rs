//! Swarm plans: a seed draws which fault kinds are active and how likely or how often each
//! is, so that a sweep over seeds explores many different hostile worlds rather than one mix
//! of every fault at once.

use std::net::IpAddr;
use std::time::Duration;

use cmtwin::EventKind;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{FaultAction, FaultPlan, MessageChance, Trigger};
use crate::cm::messages::MessageKind;

/// The ChaCha stream swarm plans are drawn from (apart from every stream of a fabric).
const SWARM_STREAM: u64 = 1 << 33;
/// The probabilities a drawn chance takes.
const LEVELS: [f64; 4] = [0.01, 0.05, 0.2, 0.5];
/// The events after which swarm faults strike.
const EVENTS: [EventKind; 6] = [
    EventKind::AddrResolved,
    EventKind::RouteResolved,
    EventKind::ConnectRequest,
    EventKind::Established,
    EventKind::Disconnected,
    EventKind::TimewaitExit,
];
/// The longest extra delays a drawn delay chance takes, in milliseconds.
const DELAYS_MS: [u64; 5] = [1, 10, 100, 1000, 5000];

/// What a swarm plan may name: the fabric's hosts, addresses and multicast groups, the message
/// kinds worth disturbing, and the span of virtual time in which timed faults fall.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwarmSpace {
    /// Host names (device faults, rejects, event triggers).
    pub hosts: Vec<String>,
    /// Addresses whose neighbour may change.
    pub addresses: Vec<IpAddr>,
    /// Multicast groups that may be lost.
    pub groups: Vec<IpAddr>,
    /// The message kinds that may be lost, delayed or duplicated.
    pub messages: Vec<MessageKind>,
    /// Timed faults fall in `0..horizon` of virtual time.
    pub horizon: Duration,
    /// Whether SA path queries of the hosts may fail (InfiniBand: ROUTE_ERROR). Off by
    /// default; when off, plans are drawn exactly as before the option existed.
    pub path_queries: bool,
    /// Whether message chances may reorder (hold a CM message back while later ones of its
    /// link overtake it; never what rides TCP). Off by default; when off, plans are drawn
    /// exactly as before the option existed.
    pub reorders: bool,
    /// Whether plans may unregister a host's device (the driver unloaded or `rdma link
    /// delete`: its ids destroyed while the port still works, so peers hear DREQ or REJ,
    /// [`FaultAction::UnregisterDevice`]) and restore it. Off by default; when off, plans are
    /// drawn exactly as before the option existed.
    pub unregisters: bool,
    /// Whether plans may lose or delay data packets (RC requests, acknowledgements and
    /// responses, datagrams: [`FaultAction::DropDataPackets`],
    /// [`FaultAction::DelayDataPackets`]), armed at a host's ESTABLISHED or at a drawn time.
    /// Off by default; when off, plans are drawn exactly as before the option existed.
    pub data_packets: bool,
}

impl SwarmSpace {
    /// A space over `hosts`, disturbing the messages of RC connections (REQ, MRA, REP, RTU,
    /// REJ, DREQ, DREP), timed faults within the first 10 s.
    pub fn new(hosts: &[&str]) -> Self {
        SwarmSpace {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            addresses: Vec::new(),
            groups: Vec::new(),
            messages: vec![
                MessageKind::Req,
                MessageKind::Mra,
                MessageKind::Rep,
                MessageKind::Rtu,
                MessageKind::Rej,
                MessageKind::Dreq,
                MessageKind::Drep,
            ],
            horizon: Duration::from_secs(10),
            path_queries: false,
            reorders: false,
            unregisters: false,
            data_packets: false,
        }
    }

    /// Addresses whose neighbour may change.
    pub fn addresses(mut self, addresses: &[IpAddr]) -> Self {
        self.addresses = addresses.to_vec();
        self
    }

    /// Multicast groups that may be lost.
    pub fn groups(mut self, groups: &[IpAddr]) -> Self {
        self.groups = groups.to_vec();
        self
    }

    /// The message kinds that may be disturbed.
    pub fn messages(mut self, kinds: &[MessageKind]) -> Self {
        self.messages = kinds.to_vec();
        self
    }

    /// The span of virtual time in which timed faults fall.
    pub fn horizon(mut self, horizon: Duration) -> Self {
        self.horizon = horizon;
        self
    }

    /// Lets plans make the hosts' SA path queries fail (for InfiniBand fabrics).
    pub fn path_queries(mut self, on: bool) -> Self {
        self.path_queries = on;
        self
    }

    /// Lets plans reorder CM messages (see [`SwarmSpace::reorders`]).
    pub fn reorders(mut self, on: bool) -> Self {
        self.reorders = on;
        self
    }

    /// Lets plans unregister a host's device (see [`SwarmSpace::unregisters`]).
    pub fn unregisters(mut self, on: bool) -> Self {
        self.unregisters = on;
        self
    }

    /// Lets plans lose or delay data packets (see [`SwarmSpace::data_packets`]).
    pub fn data_packets(mut self, on: bool) -> Self {
        self.data_packets = on;
        self
    }
}

/// Draws from one seed's swarm stream.
struct Draw(ChaCha8Rng);

impl Draw {
    fn coin(&mut self, p: f64) -> bool {
        self.0.gen_bool(p)
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> Option<T> {
        from.choose(&mut self.0).cloned()
    }

    fn level(&mut self) -> f64 {
        LEVELS[self.0.gen_range(0..LEVELS.len())]
    }

    /// A fault that changes the world under a host: its device removed, its address or a
    /// neighbour changed.
    fn world_action(&mut self, space: &SwarmSpace) -> FaultAction {
        let host = self.pick(&space.hosts).unwrap_or_default();
        match self.0.gen_range(0..3) {
            0 => FaultAction::RemoveDevice { host },
            1 => FaultAction::AddressChange { host },
            _ => match self.pick(&space.addresses) {
                Some(ip) => FaultAction::NeighbourChange { ip },
                None => FaultAction::AddressChange { host },
            },
        }
    }

    /// A loss or delay of the next one to three data packets, armed as a host's connection is
    /// established (its first data) or at a time within the horizon.
    fn data_fault(&mut self, space: &SwarmSpace) -> (Trigger, FaultAction) {
        let host = self.pick(&space.hosts).filter(|_| self.coin(0.6));
        let when = match host {
            Some(host) => Trigger::Event {
                host,
                event: EventKind::Established,
                nth: if self.coin(0.8) { 1 } else { 2 },
            },
            None => self.time(space.horizon),
        };
        let count = self.0.gen_range(1..=3);
        let action = if self.coin(0.6) {
            FaultAction::DropDataPackets { count }
        } else {
            let delay_ms = DELAYS_MS[self.0.gen_range(0..DELAYS_MS.len())];
            FaultAction::DelayDataPackets { count, delay_ms }
        };
        (when, action)
    }

    fn time(&mut self, horizon: Duration) -> Trigger {
        let ms = u64::try_from(horizon.as_millis()).unwrap_or(u64::MAX);
        Trigger::Time {
            at_ms: self.0.gen_range(0..=ms),
        }
    }
}

impl FaultPlan {
    /// The swarm plan of `seed` over `space`: each fault kind is active or not, and an active
    /// one gets its probability, host, time or count, all drawn from `seed`. The same seed and
    /// space always give the same plan; print it with [`FaultPlan::to_json`].
    pub fn swarm(seed: u64, space: &SwarmSpace) -> FaultPlan {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(SWARM_STREAM);
        let mut d = Draw(rng);
        let mut plan = FaultPlan::new();
        for kind in &space.messages {
            if !d.coin(0.4) {
                continue;
            }
            let mut c = MessageChance::new(*kind);
            if d.coin(0.5) {
                c.drop = d.level();
            }
            if d.coin(0.4) {
                c.delay = d.level();
                c.delay_max_ms = DELAYS_MS[d.0.gen_range(0..DELAYS_MS.len())];
            }
            if d.coin(0.3) {
                c.duplicate = d.level();
            }
            if space.reorders && !kind.rides_tcp() && d.coin(0.3) {
                c.reorder = d.level();
                c.delay_max_ms = c.delay_max_ms.max(DELAYS_MS[d.0.gen_range(0..3)]);
            }
            if c.drop + c.delay + c.duplicate + c.reorder > 0.0 {
                plan = plan.chance(c);
            }
        }
        let h = space.horizon;
        if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.2)) {
            let when = d.time(h);
            let restore = d.coin(0.5).then(|| d.time(h));
            plan = plan.scheduled(when, FaultAction::RemoveDevice { host: host.clone() });
            if let Some(when) = restore {
                plan = plan.scheduled(when, FaultAction::RestoreDevice { host });
            }
        }
        if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.2)) {
            plan = plan.scheduled(d.time(h), FaultAction::AddressChange { host });
        }
        if let Some(ip) = d.pick(&space.addresses).filter(|_| d.coin(0.2)) {
            plan = plan.scheduled(d.time(h), FaultAction::NeighbourChange { ip });
        }
        if let Some(group) = d.pick(&space.groups).filter(|_| d.coin(0.2)) {
            plan = plan.scheduled(d.time(h), FaultAction::MulticastLoss { group });
        }
        if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.2)) {
            let count = d.0.gen_range(1..=3);
            let action = FaultAction::RejectRequests { host, count };
            plan = plan.scheduled(Trigger::Time { at_ms: 0 }, action);
        }
        if let Some(kind) = d.pick(&space.messages).filter(|_| d.coin(0.3)) {
            let when = Trigger::Message {
                kind,
                nth: d.0.gen_range(1..=3),
            };
            let count = d.0.gen_range(1..=2);
            plan = plan.scheduled(when, FaultAction::DropMessages { kind, count });
        }
        // Faults at the moments that matter: right after an event of the connection's
        // life, or as one of its messages is sent.
        if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.35)) {
            let when = Trigger::Event {
                host,
                event: d.pick(&EVENTS).unwrap_or(EventKind::Established),
                nth: if d.coin(0.8) { 1 } else { 2 },
            };
            plan = plan.scheduled(when, d.world_action(space));
        }
        let has_hosts = !space.hosts.is_empty();
        if let Some(kind) = d.pick(&space.messages).filter(|_| has_hosts && d.coin(0.2)) {
            let when = Trigger::Message {
                kind,
                nth: d.0.gen_range(1..=2),
            };
            plan = plan.scheduled(when, d.world_action(space));
        }
        // Drawn last, and only when asked for, so that the other faults' draws are unchanged.
        if space.path_queries {
            if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.3)) {
                let count = d.0.gen_range(1..=3);
                let timeout = d.coin(0.5);
                let action = FaultAction::FailPathQueries {
                    host,
                    count,
                    timeout,
                };
                plan = plan.scheduled(Trigger::Time { at_ms: 0 }, action);
            }
        }
        if space.unregisters {
            if let Some(host) = d.pick(&space.hosts).filter(|_| d.coin(0.3)) {
                let when = d.time(h);
                let restore = d.coin(0.5).then(|| d.time(h));
                let action = FaultAction::UnregisterDevice { host: host.clone() };
                plan = plan.scheduled(when, action);
                if let Some(when) = restore {
                    plan = plan.scheduled(when, FaultAction::RestoreDevice { host });
                }
            }
        }
        if space.data_packets && d.coin(0.5) {
            let (when, action) = d.data_fault(space);
            plan = plan.scheduled(when, action);
        }
        plan
    }
}
