//! The real backend as a test bed: librdmacm on this machine's RDMA device (Soft-RoCE in the
//! CI VM), server and client on the same address, each with its own `VerbsBackend`.

use std::net::IpAddr;

use cmtwin::Transport;
use cmtwin_verbs::VerbsBackend;

use crate::bed::unique_port;
use crate::TestBed;

/// Real librdmacm: two independent backends (so that handles of one are foreign to the other)
/// on one RDMA-capable address; connections go through the device's loopback (§14.3).
///
/// Environment:
/// * `CMTWIN_RDMA_ADDR` (required): the IP address of the RDMA interface (the VM sets it).
/// * `CMTWIN_RDMA_TRANSPORT` (optional): `roce` (default), `ib` or `iwarp`.
/// * `CMTWIN_UNROUTABLE_ADDR` (optional): an address with no route; inside the VM
///   (`CMTWIN_IN_VM=1`, no NIC, no default route) 10.9.9.9 is used.
pub struct VerbsBed {
    server: VerbsBackend,
    client: VerbsBackend,
    ip: IpAddr,
    transport: Transport,
    unroutable: Option<IpAddr>,
}

impl VerbsBed {
    /// The environment variable naming the RDMA interface's address.
    pub const ADDR_ENV: &'static str = "CMTWIN_RDMA_ADDR";

    /// A bed on the address in `CMTWIN_RDMA_ADDR`.
    ///
    /// # Panics
    /// If the variable is missing or not an IP address (the tests need RDMA: run them inside
    /// the Soft-RoCE VM, `scripts/verbs-tests-in-vm`).
    pub fn from_env() -> Self {
        let ip = std::env::var(Self::ADDR_ENV)
            .unwrap_or_else(|_| {
                panic!(
                    "{} is not set: run these tests inside the Soft-RoCE VM \
                     (scripts/verbs-tests-in-vm) or point it at an RDMA interface's address",
                    Self::ADDR_ENV
                )
            })
            .parse()
            .unwrap_or_else(|e| panic!("{} is not an IP address: {e}", Self::ADDR_ENV));
        let transport = match std::env::var("CMTWIN_RDMA_TRANSPORT").as_deref() {
            Ok("ib") => Transport::InfiniBand,
            Ok("iwarp") => Transport::Iwarp,
            _ => Transport::Roce,
        };
        let unroutable = match std::env::var("CMTWIN_UNROUTABLE_ADDR") {
            Ok(addr) => Some(
                addr.parse()
                    .expect("CMTWIN_UNROUTABLE_ADDR is an IP address"),
            ),
            Err(_) if std::env::var("CMTWIN_IN_VM").as_deref() == Ok("1") => {
                Some(IpAddr::from([10, 9, 9, 9]))
            }
            Err(_) => None,
        };
        VerbsBed::new(ip, transport, unroutable)
    }

    /// A bed on `ip` (both sides), with devices of `transport` and, if known, an address with
    /// no route.
    pub fn new(ip: IpAddr, transport: Transport, unroutable: Option<IpAddr>) -> Self {
        VerbsBed {
            server: VerbsBackend::new(),
            client: VerbsBackend::new(),
            ip,
            transport,
            unroutable,
        }
    }
}

impl TestBed for VerbsBed {
    type Backend = VerbsBackend;
    fn server(&self) -> &VerbsBackend {
        &self.server
    }
    fn client(&self) -> &VerbsBackend {
        &self.client
    }
    fn server_ip(&self) -> IpAddr {
        self.ip
    }
    fn client_ip(&self) -> IpAddr {
        self.ip
    }
    fn transport(&self) -> Transport {
        self.transport
    }
    /// Process-wide unique: every bed of the process shares the kernel's port space.
    fn fresh_port(&self) -> u16 {
        unique_port()
    }
    fn is_simulated(&self) -> bool {
        false
    }
    /// `VerbsBackend` delivers USER events itself where librdmacm lacks
    /// `rdma_write_cm_event` (rdma-core < v60, as in the VM).
    fn has_write_cm_event(&self) -> bool {
        true
    }
    fn unroutable_ip(&self) -> Option<IpAddr> {
        self.unroutable
    }
}
