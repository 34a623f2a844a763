//! What the examples of the ports share on their command line: where their sides run, and
//! how a peer's address is written.

use std::net::{IpAddr, SocketAddr};

/// Where an example's sides run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Both sides on a simulated fabric of this seed.
    Simulated(u64),
    /// Both sides on librdmacm, the server at this address.
    Both(SocketAddr),
    /// The server only, on librdmacm, at this address.
    Server(SocketAddr),
    /// The client only, on librdmacm, to a server at this address.
    Client(SocketAddr),
}

impl Mode {
    /// The mode before any argument: both sides on librdmacm at `CMTWIN_RDMA_ADDR` (with
    /// `default_port` unless it names one) when it is set, else the simulator with seed 1.
    pub fn from_env(default_port: u16) -> Result<Mode, String> {
        match std::env::var("CMTWIN_RDMA_ADDR") {
            Ok(ip) => Ok(Mode::Both(parse_addr(&ip, default_port)?)),
            Err(_) => Ok(Mode::Simulated(1)),
        }
    }
}

/// The exit status of an example that cannot run on the RDMA device it was given: the VM
/// runs report it as ignored, with the reason the example printed, never as passed (automake's
/// convention for a test that was not run).
pub const NOT_RUN: i32 = 77;

/// Why an example of UD or multicast cannot run on the real device: iWARP (its transport as
/// `CMTWIN_RDMA_TRANSPORT` names it, which `scripts/vm-run` sets) has no UD QPs and no
/// multicast. `None` elsewhere.
pub fn ud_unavailable() -> Option<&'static str> {
    let iwarp = std::env::var("CMTWIN_RDMA_TRANSPORT").is_ok_and(|t| t == "iwarp");
    iwarp.then_some("iWARP has no UD QPs and no multicast, which this example needs")
}

/// Ends an example that needs UD, with [`NOT_RUN`] and the reason, when the real device has
/// none (see [`ud_unavailable`]).
pub fn exit_unless_ud_available() {
    if let Some(why) = ud_unavailable() {
        println!("not run: {why}");
        std::process::exit(NOT_RUN);
    }
}

/// `ip:port`, or an IP alone with `default_port`.
pub fn parse_addr(s: &str, default_port: u16) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, default_port))
        })
        .map_err(|_| format!("{s:?} is no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_takes_the_default_port_unless_it_names_one() {
        assert_eq!(
            parse_addr("10.0.0.1", 7174),
            Ok("10.0.0.1:7174".parse().unwrap())
        );
        assert_eq!(
            parse_addr("10.0.0.1:9", 7174),
            Ok("10.0.0.1:9".parse().unwrap())
        );
        assert_eq!(
            parse_addr("nowhere", 7174),
            Err("\"nowhere\" is no address".to_string())
        );
    }
}
