//! The real backend as a test bed: librdmacm on this machine's RDMA device (Soft-RoCE in the
//! CI VM), server and client on the same address, each with its own `VerbsBackend`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cmtwin::Transport;
use cmtwin_verbs::VerbsBackend;

use crate::bed::{unique_port, CmTimer, HookResult};
use crate::bed_id::BedId;
use crate::capability::Need;
use crate::device_link::SoftRdmaLink;
use crate::{SimBed, TestBed};

/// Real librdmacm: two independent backends (so that handles of one are foreign to the other)
/// on one RDMA-capable address; connections go through the device's loopback (§14.3).
///
/// Environment:
/// * `CMTWIN_RDMA_ADDR` (required): the IP address of the RDMA interface (the VM sets it).
/// * `CMTWIN_RDMA_TRANSPORT` (optional): `roce` (default), `ib` or `iwarp`.
/// * `CMTWIN_RDMA_DRIVER` (optional): the device's driver, `rxe` or `siw` in the VM; with the
///   running kernel it names the bed ([`BedId`]) and picks its simulated twin.
/// * `CMTWIN_UNROUTABLE_ADDR` (optional): an address with no route; inside the VM
///   (`CMTWIN_IN_VM=1`, no NIC, no default route) 10.9.9.9 is used.
/// * `CMTWIN_SILENT_ADDR` (optional): an address that resolves but where no CM answers;
///   inside the VM 192.168.77.77 (dummy0 is NOARP: every address of its subnet resolves, and
///   what is sent to one the VM does not own vanishes).
///
/// Inside the VM (`CMTWIN_IN_VM=1`, run as root) the bed can also remove the device:
/// [`SoftRdmaLink`] deletes rxe0 or siw0 and adds it back on dummy0.
pub struct VerbsBed {
    server: VerbsBackend,
    client: VerbsBackend,
    ip: IpAddr,
    transport: Transport,
    unroutable: Option<IpAddr>,
    silent: Option<IpAddr>,
    link: Option<SoftRdmaLink>,
    id: BedId,
    started: Instant,
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
        let in_vm = std::env::var("CMTWIN_IN_VM").as_deref() == Ok("1");
        let silent = match std::env::var("CMTWIN_SILENT_ADDR") {
            Ok(addr) => Some(addr.parse().expect("CMTWIN_SILENT_ADDR is an IP address")),
            Err(_) if in_vm => Some(IpAddr::from([192, 168, 77, 77])),
            Err(_) => None,
        };
        let mut bed = VerbsBed::new(ip, transport, unroutable);
        bed.silent = silent;
        bed.id = BedId::current(transport);
        if in_vm {
            bed.link = Some(SoftRdmaLink::in_vm());
        }
        bed
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
            silent: None,
            link: None,
            id: BedId::current(transport),
            started: Instant::now(),
        }
    }

    /// Which bed this is (driver, kernel) and so which simulated bed is its twin.
    pub fn id(&self) -> &BedId {
        &self.id
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
    fn now(&self) -> Duration {
        self.started.elapsed()
    }
    /// The twin's timer, from the boot of its fabric (the timer wheel's phase at a real start
    /// is unknown; the window covers it).
    fn twin_timer(&self, timer: CmTimer) -> Option<Duration> {
        let twin = SimBed::with_config(0, self.transport, self.id.twin_config()?);
        twin.cm_timer_end(timer, Duration::ZERO)
    }
    fn sides_share_a_device(&self) -> bool {
        true
    }
    fn silent_ip(&self) -> Option<IpAddr> {
        self.silent
    }
    fn lacks(&self, need: Need) -> Option<String> {
        if let Some(why) = need.missing_on(self.transport) {
            return Some(why.to_string());
        }
        let why = match need {
            Need::UnroutableAddress if self.unroutable.is_none() => {
                "no address without a route is known (set CMTWIN_UNROUTABLE_ADDR)"
            }
            Need::SilentPeer if self.silent.is_none() => {
                "no silent peer address is known (set CMTWIN_SILENT_ADDR)"
            }
            Need::NoNeighbour => {
                "every on-link address resolves here: the VM's RDMA device runs on a dummy (NOARP) \
                 netdev (§19), so no ARP can go unanswered"
            }
            Need::DeviceRemoval if self.link.is_none() => {
                "removing the device needs the throwaway VM (CMTWIN_IN_VM=1, root): it \
                 deletes the RDMA link"
            }
            Need::AddressChange => {
                "ADDR_CHANGE comes only from a bonding fail-over (§5.1); the VM's device runs on a \
                 dummy netdev with no bond"
            }
            Need::PathQueryFault if self.transport != Transport::InfiniBand => {
                "RoCE builds its path without an SA query, so no path query can fail (§4.5)"
            }
            Need::PathQueryFault => "no hook can make a real subnet administrator fail",
            Need::MulticastLoss => {
                "no hook can take a multicast group away on a real port (RoCE joins need no \
                 SA; an SM event is needed on IB)"
            }
            Need::SaAddrinfo => {
                "SA-mode rdma_resolve_addrinfo needs Linux >= 6.18 and an InfiniBand SA (§10.3)"
            }
            Need::CmMessageLoss => "no hook can lose a chosen CM MAD on a real wire",
            _ => return None,
        };
        Some(why.to_string())
    }
    fn remove_device(&self) -> HookResult {
        match &self.link {
            Some(link) => link.remove(),
            None => Err("no RDMA link to remove outside the VM".into()),
        }
    }
    fn restore_device(&self) -> HookResult {
        match &self.link {
            Some(link) => link.restore(),
            None => Err("no RDMA link to restore outside the VM".into()),
        }
    }
}
