//! Test beds: two endpoints, a server and a client, on some backend.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use cmtwin::{CmBackend, Errno, Transport};
use cmtwin_sim::{
    kernel_timer_delay, Fabric, KernelProfile, MessageKind, PathFailure, SimBackend, SimConfig,
};

use crate::capability::Need;

/// A CM timer whose end a scenario checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmTimer {
    /// Timewait, from the DISCONNECTED that started it to TIMEWAIT_EXIT (§7.2).
    Timewait,
    /// From `connect` to UNREACHABLE when the peer never answers: on IB and RoCE the REQ's
    /// first transmission and every retry waiting for a REP (§15.2); on iWARP the MPA
    /// request's wait for its reply (siw: 10 s).
    ConnectRetries,
}

/// A fault hook's failure: what went wrong, for the scenario's panic message.
pub type HookResult = std::result::Result<(), String>;

/// Where a conformance test runs: a server and a client backend that can reach each other.
pub trait TestBed {
    /// The backend under test.
    type Backend: CmBackend;
    /// The backend the passive side uses.
    fn server(&self) -> &Self::Backend;
    /// The backend the active side uses.
    fn client(&self) -> &Self::Backend;
    /// The server's RDMA-capable IP address.
    fn server_ip(&self) -> IpAddr;
    /// The client's RDMA-capable IP address.
    fn client_ip(&self) -> IpAddr;
    /// The transport of the devices.
    fn transport(&self) -> Transport;
    /// A port nothing else on this bed uses (on a real machine: no other test of the process).
    fn fresh_port(&self) -> u16;
    /// Whether the bed is the simulator (for the few checks that only it can make, such as
    /// virtual-time bounds).
    fn is_simulated(&self) -> bool;

    /// Whether `write_cm_event` can queue USER events here (librdmacm ≥ v60 on Linux ≥ 6.18).
    /// Where it cannot, the call fails with EINVAL (CM-SEMANTICS §10.1: a kernel without the
    /// command answers EINVAL), and the USER-event scenarios check exactly that instead.
    fn has_write_cm_event(&self) -> bool {
        true
    }

    /// The errno of binding (or resolving from) an address configured on no interface of the
    /// host, where the bed knows it: EADDRNOTAVAIL on the CI VM's Linux 6.1 and 6.12 (§4.3;
    /// §19's ENODEV is what an address on a netdev without RDMA device gets, as after a device
    /// removal); `None` where either may come.
    fn unconfigured_address_errno(&self) -> Option<Errno> {
        None
    }

    /// An IPv4 address the client has no route to (`resolve_addr` then fails synchronously
    /// with ENETUNREACH, §14.2 and §19), if the bed knows one.
    fn unroutable_ip(&self) -> Option<IpAddr> {
        None
    }

    /// The server's address with a fresh port.
    fn server_addr(&self) -> SocketAddr {
        SocketAddr::new(self.server_ip(), self.fresh_port())
    }

    /// The time on the bed's clock: virtual time on the simulator (exact), the wall clock
    /// since the bed was made on a real machine (for windows only).
    fn now(&self) -> Duration;

    /// When the CM's `timer`, started at `started` (on [`now`](Self::now)'s clock), ends, if
    /// the bed knows it exactly (the simulator); a real bed gives `None` and the scenario
    /// checks a window around the measurement instead.
    fn cm_timer_end(&self, timer: CmTimer, started: Duration) -> Option<Duration> {
        let _ = (timer, started);
        None
    }

    /// How long the CM's `timer` lasts on this bed's simulated twin, on a real bed whose kernel
    /// the simulator has a profile for ([`crate::bed_id::BedId::twin_config`]): a real
    /// measurement is then checked against a window around it ([`twin_window`]) instead of
    /// the scenario's own window.
    fn twin_timer(&self, timer: CmTimer) -> Option<Duration> {
        let _ = timer;
        None
    }

    /// Why this bed cannot give a scenario what it `need`s, or `None` if it can. The default
    /// knows what the transport decides and what the bed's addresses say; beds with fault
    /// hooks override it for those.
    fn lacks(&self, need: Need) -> Option<String> {
        if let Some(why) = need.missing_on(self.transport()) {
            return Some(why.to_string());
        }
        match need {
            Need::WriteCmEvent if !self.has_write_cm_event() => {
                Some("write_cm_event cannot queue USER events here (§10.1)".into())
            }
            Need::UnroutableAddress if self.unroutable_ip().is_none() => {
                Some("the bed knows no address without a route".into())
            }
            Need::SilentPeer if self.silent_ip().is_none() => {
                Some("the bed knows no address that resolves where no CM answers".into())
            }
            Need::NoNeighbour if self.no_neighbour_ip().is_none() => {
                Some("the bed knows no on-link address whose ARP goes unanswered".into())
            }
            Need::DeviceRemoval
            | Need::AddressChange
            | Need::PathQueryFault
            | Need::MulticastLoss
            | Need::CmMessageLoss
            | Need::SaAddrinfo => Some(format!("the bed has no hook for {need}")),
            _ => None,
        }
    }

    /// A third host, beside the server and the client, whose ids connect to the same server
    /// (several connections at once between different pairs), where the bed has one: the
    /// simulator's three-host bed ([`SimBed::with_third_host`]); a real bed has two
    /// addresses on one device, so no.
    fn third(&self) -> Option<&Self::Backend> {
        None
    }

    /// The third host's address, with [`third`](Self::third).
    fn third_ip(&self) -> Option<IpAddr> {
        None
    }

    /// Whether the server's and the client's ids use one and the same device (then a fault
    /// on "the client's device" reaches the server's ids too).
    fn sides_share_a_device(&self) -> bool {
        false
    }

    /// An address that resolves (its neighbour is known or not needed) but where no RDMA CM
    /// answers: REQs to it go unanswered (§5.2 S6, §19).
    fn silent_ip(&self) -> Option<IpAddr> {
        None
    }

    /// An on-link address whose neighbour never answers ARP (§14.2: ADDR_ERROR -ETIMEDOUT).
    fn no_neighbour_ip(&self) -> Option<IpAddr> {
        None
    }

    /// Removes the client's RDMA device (§8.1) as `rdma link delete` does (the kernel
    /// unregisters a working device). Only where `lacks(Need::DeviceRemoval)` is
    /// `None`; the scenario destroys its ids, then calls [`restore_device`](Self::restore_device).
    fn remove_device(&self) -> HookResult {
        Err("no device-removal hook".into())
    }

    /// Brings back the device [`remove_device`](Self::remove_device) removed, once every id
    /// that used it is destroyed.
    fn restore_device(&self) -> HookResult {
        Err("no device-removal hook".into())
    }

    /// An address change (bonding fail-over, §5.1 ADDR_CHANGE) on the server's device.
    fn change_address(&self) -> HookResult {
        Err("no address-change hook".into())
    }

    /// Makes the client's next path query fail: with the SA's "no path" answer if `no_path`,
    /// else by the SA staying silent (§14.2, ROUTE_ERROR).
    fn fail_path_queries(&self, no_path: bool) -> HookResult {
        let _ = no_path;
        Err("no path-query hook".into())
    }

    /// Loses multicast `group` for its members (§13.3, MULTICAST_ERROR).
    fn lose_multicast_group(&self, group: IpAddr) -> HookResult {
        let _ = group;
        Err("no multicast hook".into())
    }

    /// Loses the next `count` CM messages of `kind` sent on the bed's wire (either direction);
    /// the IB CM retransmits them after its timeout (§15.2). Only where
    /// `lacks(Need::CmMessageLoss)` is `None`.
    fn lose_cm_messages(&self, kind: MessageKind, count: u32) -> HookResult {
        let _ = (kind, count);
        Err("no CM message loss hook".into())
    }
}

/// The window a real bed's measurement of a timer is checked against when its twin lasts
/// `expected`: from 10% less to 10% plus half a second more (the real CM adds MAD processing
/// and scheduling to the kernel timers the simulator runs: §19 measured 2.2-2.3 s for the
/// 6.1 profile's 2.05-2.3 s timewait).
pub fn twin_window(expected: Duration) -> std::ops::RangeInclusive<Duration> {
    expected.mul_f64(0.9)..=expected.mul_f64(1.1) + Duration::from_millis(500)
}

/// Hands out ports from 20000 up, below Linux's default ephemeral range (32768–60999), so they
/// never collide with auto-bound ports; unique within the process.
static NEXT_PORT: AtomicU16 = AtomicU16::new(20_000);

/// A port unique within this test process.
pub fn unique_port() -> u16 {
    NEXT_PORT.fetch_add(1, Ordering::Relaxed)
}

/// The simulator: a fabric with two hosts, `server` (10.0.0.1) and `client` (10.0.0.2), each
/// with one device of the chosen transport. 10.0.0.77 answers ARP but runs no CM (connections
/// end in UNREACHABLE after the retries); every other 10.0.0.x is on-link but answers nothing
/// (address resolution ends in ADDR_ERROR); 10.9.9.9 has no route.
pub struct SimBed {
    /// The fabric, for fault injection and the trace.
    pub fabric: Fabric,
    server: SimBackend,
    client: SimBackend,
    third: Option<SimBackend>,
    transport: Transport,
    config: SimConfig,
    /// Ports only need to be unique within one fabric; a per-bed counter keeps the trace of a
    /// seed identical from run to run.
    next_port: AtomicU16,
}

impl SimBed {
    /// The server's address on the simulated fabric.
    pub const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    /// The client's address on the simulated fabric.
    pub const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    /// The third host's address ([`SimBed::with_third_host`]).
    pub const THIRD_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

    /// An address on the hosts' subnet that resolves (its neighbour answers ARP) but runs no
    /// RDMA CM: CM messages to it vanish (CM-SEMANTICS §5.2 S6).
    pub const SILENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 77));
    /// An address on the hosts' subnet where nobody answers ARP (§14.2: ADDR_ERROR).
    pub const NO_NEIGHBOUR_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99));
    /// An address with no route from either host.
    pub const UNROUTABLE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9));

    /// How long an iWARP connect waits for the MPA reply before UNREACHABLE (siw's
    /// MPA_TIMEOUT, as the simulator models it).
    pub const MPA_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

    /// A RoCE fabric from `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_transport(seed, Transport::Roce)
    }

    /// A fabric of `transport` devices from `seed`.
    pub fn with_transport(seed: u64, transport: Transport) -> Self {
        Self::with_config(seed, transport, SimConfig::default())
    }

    /// A fabric of `transport` devices from `seed` with a non-default configuration (timing,
    /// loss, kernel profile).
    pub fn with_config(seed: u64, transport: Transport, config: SimConfig) -> Self {
        Self::build(seed, transport, config, false)
    }

    /// A fabric of `transport` devices from `seed` whose wire has no jitter, so that times
    /// are exact sums of latencies.
    pub fn jitterless(seed: u64, transport: Transport) -> Self {
        let config = SimConfig {
            wire_jitter: std::time::Duration::ZERO,
            ..SimConfig::default()
        };
        Self::with_config(seed, transport, config)
    }

    /// As [`with_config`](Self::with_config), with a third host `third` (10.0.0.3) whose ids
    /// connect to the server too ([`TestBed::third`]).
    pub fn with_third_host(seed: u64, transport: Transport, config: SimConfig) -> Self {
        Self::build(seed, transport, config, true)
    }

    fn build(seed: u64, transport: Transport, config: SimConfig, third: bool) -> Self {
        let mut builder = Fabric::builder(seed)
            .config(config.clone())
            .silent_address(Self::SILENT_IP)
            .host("server", transport, &[Self::SERVER_IP])
            .host("client", transport, &[Self::CLIENT_IP]);
        if third {
            builder = builder.host("third", transport, &[Self::THIRD_IP]);
        }
        let fabric = builder.build().expect("a valid configuration");
        let server = fabric.backend("server");
        let client = fabric.backend("client");
        let third = third.then(|| fabric.backend("third"));
        SimBed {
            fabric,
            server,
            client,
            third,
            transport,
            config,
            next_port: AtomicU16::new(20_000),
        }
    }
}

impl TestBed for SimBed {
    type Backend = SimBackend;
    fn server(&self) -> &SimBackend {
        &self.server
    }
    fn client(&self) -> &SimBackend {
        &self.client
    }
    fn server_ip(&self) -> IpAddr {
        Self::SERVER_IP
    }
    fn client_ip(&self) -> IpAddr {
        Self::CLIENT_IP
    }
    fn third(&self) -> Option<&SimBackend> {
        self.third.as_ref()
    }
    fn third_ip(&self) -> Option<IpAddr> {
        self.third.as_ref().map(|_| Self::THIRD_IP)
    }
    fn transport(&self) -> Transport {
        self.transport
    }
    fn fresh_port(&self) -> u16 {
        self.next_port.fetch_add(1, Ordering::Relaxed)
    }
    fn is_simulated(&self) -> bool {
        true
    }
    fn unroutable_ip(&self) -> Option<IpAddr> {
        Some(Self::UNROUTABLE_IP)
    }
    fn now(&self) -> Duration {
        self.fabric.now()
    }
    /// The timers as the fabric runs them: on the kernel's timer wheel if `kernel_hz` is set
    /// (each retry re-armed when the previous wait fires), else exactly.
    fn cm_timer_end(&self, timer: CmTimer, started: Duration) -> Option<Duration> {
        let wait = |at: Duration, delay: Duration| match self.config.kernel_hz {
            Some(hz) => kernel_timer_delay(at, delay, hz),
            None => delay,
        };
        Some(match timer {
            CmTimer::Timewait => started + wait(started, self.config.timewait()),
            CmTimer::ConnectRetries if self.transport == Transport::Iwarp => {
                started + wait(started, Self::MPA_REPLY_TIMEOUT)
            }
            CmTimer::ConnectRetries => {
                let mut t = started;
                for _ in 0..=self.config.max_cm_retries {
                    t += wait(t, self.config.req_timeout());
                }
                t
            }
        })
    }
    fn lacks(&self, need: Need) -> Option<String> {
        if let Some(why) = need.missing_on(self.transport) {
            return Some(why.to_string());
        }
        match need {
            Need::PathQueryFault if self.transport != Transport::InfiniBand => Some(
                "only InfiniBand resolves routes with an SA path query (§4.5); RoCE builds \
                 the path itself"
                    .into(),
            ),
            Need::SaAddrinfo if self.transport != Transport::InfiniBand => {
                Some("SA-mode rdma_resolve_addrinfo needs an InfiniBand port (§10.3)".into())
            }
            Need::SaAddrinfo if self.config.kernel != KernelProfile::Mainline => Some(
                "SA-mode rdma_resolve_addrinfo needs Linux >= 6.18; this bed runs the Linux \
                 6.1 profile (§10.3)"
                    .into(),
            ),
            _ => None,
        }
    }
    fn silent_ip(&self) -> Option<IpAddr> {
        Some(Self::SILENT_IP)
    }
    fn unconfigured_address_errno(&self) -> Option<Errno> {
        // rdma_translate_ip finds no netdev with the address (measured on Linux 6.1 and 6.12).
        Some(Errno::EADDRNOTAVAIL)
    }
    fn no_neighbour_ip(&self) -> Option<IpAddr> {
        Some(Self::NO_NEIGHBOUR_IP)
    }
    fn remove_device(&self) -> HookResult {
        self.fabric
            .unregister_device("client")
            .map_err(|e| e.to_string())
    }
    fn restore_device(&self) -> HookResult {
        self.fabric
            .restore_device("client")
            .map_err(|e| e.to_string())
    }
    fn change_address(&self) -> HookResult {
        self.fabric
            .address_change("server")
            .map_err(|e| e.to_string())
    }
    fn fail_path_queries(&self, no_path: bool) -> HookResult {
        let how = if no_path {
            PathFailure::NoPath
        } else {
            PathFailure::Timeout
        };
        self.fabric
            .fail_path_queries("client", 1, how)
            .map_err(|e| e.to_string())
    }
    fn lose_multicast_group(&self, group: IpAddr) -> HookResult {
        self.fabric.multicast_lost(group).map_err(|e| e.to_string())
    }
    fn lose_cm_messages(&self, kind: MessageKind, count: u32) -> HookResult {
        self.fabric
            .drop_next(kind, count)
            .map_err(|e| e.to_string())
    }
}
