//! The fabric the engine report measures: one server host and `CLIENT_HOSTS` client hosts on one
//! RoCE subnet, tracing off. Spreading the clients keeps each host's ephemeral port range
//! (28 232 ports) far from full at 100k connections in flight, so that port search stays a
//! small part of the cost at every size; the turmoil comparison uses the same layout.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cmtwin::Transport;
use cmtwin_sim::{Fabric, SimConfig};

/// Number of client hosts.
pub const CLIENT_HOSTS: usize = 16;

/// The port the server listens on.
pub const SERVER_PORT: u16 = 7471;

/// The server's address.
pub fn server_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
}

/// The listening address of the server.
pub fn server_addr() -> SocketAddr {
    SocketAddr::new(server_ip(), SERVER_PORT)
}

/// The name of client host `k`.
pub fn client_name(k: usize) -> String {
    format!("client{k}")
}

/// The address of client host `k` (10.0.0.2 onwards).
pub fn client_ip(k: usize) -> IpAddr {
    let last = u8::try_from(k + 2).expect("fewer than 254 client hosts");
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// A fabric with the server and the client hosts, default timing, tracing off.
pub fn bench_fabric(seed: u64) -> Fabric {
    let mut builder = Fabric::builder(seed)
        .config(SimConfig {
            trace: false,
            ..SimConfig::default()
        })
        .host("server", Transport::Roce, &[server_ip()]);
    for k in 0..CLIENT_HOSTS {
        builder = builder.host(&client_name(k), Transport::Roce, &[client_ip(k)]);
    }
    builder.build().expect("the bench's configuration is valid")
}
