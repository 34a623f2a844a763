//! Test beds: two endpoints, a server and a client, on some backend.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};

use cmtwin::{CmBackend, Transport};
use cmtwin_sim::{Fabric, SimBackend, SimConfig};

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

    /// An IPv4 address the client has no route to (`resolve_addr` then fails synchronously
    /// with ENETUNREACH, §14.2 and §19), if the bed knows one.
    fn unroutable_ip(&self) -> Option<IpAddr> {
        None
    }

    /// The server's address with a fresh port.
    fn server_addr(&self) -> SocketAddr {
        SocketAddr::new(self.server_ip(), self.fresh_port())
    }
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
    transport: Transport,
    /// Ports only need to be unique within one fabric; a per-bed counter keeps the trace of a
    /// seed identical from run to run.
    next_port: AtomicU16,
}

impl SimBed {
    /// The server's address on the simulated fabric.
    pub const SERVER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    /// The client's address on the simulated fabric.
    pub const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    /// An address on the hosts' subnet that resolves (its neighbour answers ARP) but runs no
    /// RDMA CM: CM messages to it vanish (CM-SEMANTICS §5.2 S6).
    pub const SILENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 77));
    /// An address on the hosts' subnet where nobody answers ARP (§14.2: ADDR_ERROR).
    pub const NO_NEIGHBOUR_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99));
    /// An address with no route from either host.
    pub const UNROUTABLE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9));

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
        let fabric = Fabric::builder(seed)
            .config(config)
            .silent_address(Self::SILENT_IP)
            .host("server", transport, &[Self::SERVER_IP])
            .host("client", transport, &[Self::CLIENT_IP])
            .build()
            .expect("a valid configuration");
        let server = fabric.backend("server");
        let client = fabric.backend("client");
        SimBed {
            fabric,
            server,
            client,
            transport,
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
}
