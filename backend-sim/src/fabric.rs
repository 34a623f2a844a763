//! The `Fabric`: a simulated world built from a seed, with hosts, devices and addresses, that
//! hands out one `SimBackend` per host, runs simulated processes, injects faults and keeps the
//! trace.

use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use cmtwin::{CmError, Transport};

use crate::backend::SimBackend;
use crate::cm::messages::MessageKind;
use crate::config::SimConfig;
use crate::process::{enter_process, Proc, ProcState, Shared};
use crate::trace::TraceRecord;
use crate::wire::WireFault;
use crate::world::{Device, Host, World};

/// Numbers fabrics, so that a handle of one fabric is never taken for another's.
static NEXT_FABRIC: AtomicU32 = AtomicU32::new(1);

/// The body of a simulated process.
type ProcBody = Box<dyn FnOnce(SimBackend) -> Result<(), CmError> + Send>;

/// A process waiting for `Fabric::run`.
struct PendingProc {
    name: String,
    host: usize,
    body: ProcBody,
}

/// A device as described to the builder: name, transport, addresses.
type DeviceSpec = (String, Transport, Vec<IpAddr>);

/// Describes a fabric before it is built.
pub struct FabricBuilder {
    seed: u64,
    config: SimConfig,
    hosts: Vec<(String, Vec<DeviceSpec>)>,
    silent: Vec<IpAddr>,
}

impl FabricBuilder {
    /// Adds a host named `name` with one device of `transport` owning `ips`.
    pub fn host(self, name: &str, transport: Transport, ips: &[IpAddr]) -> Self {
        let dev = format!(
            "{}0",
            match transport {
                Transport::InfiniBand => "ib",
                Transport::Roce => "roce",
                Transport::Iwarp => "iw",
            }
        );
        self.host_with_devices(name, &[(&dev, transport, ips)])
    }

    /// Adds a host with several devices: (device name, transport, addresses).
    pub fn host_with_devices(
        mut self,
        name: &str,
        devices: &[(&str, Transport, &[IpAddr])],
    ) -> Self {
        let devs = devices
            .iter()
            .map(|(n, t, ips)| (n.to_string(), *t, ips.to_vec()))
            .collect();
        self.hosts.push((name.to_string(), devs));
        self
    }

    /// Adds an on-link address whose neighbour answers ARP but which runs no RDMA CM (a plain
    /// NIC, a host whose CM is down): address resolution succeeds, CM messages vanish, so
    /// connections end in UNREACHABLE after the retries (CM-SEMANTICS.md §5.2 S6).
    pub fn silent_address(mut self, ip: IpAddr) -> Self {
        self.silent.push(ip);
        self
    }

    /// Replaces the configuration.
    pub fn config(mut self, config: SimConfig) -> Self {
        self.config = config;
        self
    }

    /// Builds the fabric.
    pub fn build(self) -> Fabric {
        // Fabric numbers wrap within the bits a handle has for them (skipping 0), so a handle
        // names its fabric among the last 16 million built in this process.
        let fabric_no = loop {
            let n = NEXT_FABRIC.fetch_add(1, Ordering::Relaxed) & crate::world::FABRIC_NO_MASK;
            if n != 0 {
                break n;
            }
        };
        let mut world = World::new(fabric_no, self.seed, self.config);
        world.silent_ips.extend(self.silent);
        for (name, devs) in self.hosts {
            let host = world.hosts.len();
            let mut keys = Vec::new();
            for (dname, transport, ips) in devs {
                keys.push(world.devices.len());
                world.devices.push(Device {
                    host,
                    name: dname,
                    transport,
                    ips,
                    present: true,
                });
            }
            world.trace.name_host(host, &name);
            world.hosts.push(Host {
                name,
                devices: keys,
                last_ephemeral: Default::default(),
            });
        }
        Fabric {
            shared: Arc::new(Shared {
                world: Mutex::new(world),
                cv: Condvar::new(),
            }),
            seed: self.seed,
            pending: Mutex::new(Vec::new()),
        }
    }
}

/// A failed simulation run: which processes failed and how, and the line that replays it.
#[derive(Debug, thiserror::Error)]
#[error("simulation failed (replay: {replay}):\n{}", failures.join("\n"))]
pub struct SimError {
    /// One line per failed process.
    pub failures: Vec<String>,
    /// The command line that replays the run.
    pub replay: String,
}

/// A simulated RDMA fabric.
///
/// ```
/// use cmtwin::{CmBackend, PortSpace, Transport};
/// use cmtwin_sim::Fabric;
///
/// let fabric = Fabric::builder(7)
///     .host("server", Transport::Roce, &["10.0.0.1".parse().unwrap()])
///     .host("client", Transport::Roce, &["10.0.0.2".parse().unwrap()])
///     .build();
/// let server = fabric.backend("server");
/// let channel = server.create_event_channel().unwrap();
/// let id = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
/// server.bind_addr(id, "10.0.0.1:7471".parse().unwrap()).unwrap();
/// server.listen(id, 8).unwrap();
/// assert!(fabric.trace_text().contains("rdma_listen"));
/// ```
pub struct Fabric {
    shared: Arc<Shared>,
    seed: u64,
    pending: Mutex<Vec<PendingProc>>,
}

impl Fabric {
    /// Starts describing a fabric whose randomness all derives from `seed`.
    pub fn builder(seed: u64) -> FabricBuilder {
        FabricBuilder {
            seed,
            config: SimConfig::default(),
            hosts: Vec::new(),
            silent: Vec::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        self.shared.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn host_key(&self, name: &str) -> usize {
        self.lock()
            .hosts
            .iter()
            .position(|h| h.name == name)
            .unwrap_or_else(|| panic!("the fabric has no host named {name:?}"))
    }

    /// The seed the fabric was built from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The backend of host `name`.
    ///
    /// # Panics
    /// If the fabric has no such host (a mistake in the test's setup, not a CM error).
    pub fn backend(&self, name: &str) -> SimBackend {
        SimBackend {
            shared: Arc::clone(&self.shared),
            host: self.host_key(name),
        }
    }

    /// Virtual time since the fabric was built.
    pub fn now(&self) -> Duration {
        self.lock().now.as_duration()
    }

    /// Runs the timeline until nothing is pending.
    pub fn run_until_idle(&self) {
        let mut w = self.lock();
        while w.step() {}
    }

    /// Runs the timeline for `d` of virtual time.
    pub fn run_for(&self, d: Duration) {
        let mut w = self.lock();
        let end = w.now.after(d);
        while w.timeline.peek_time().is_some_and(|t| t <= end) {
            w.step();
        }
        w.now = end.max(w.now);
    }

    /// Every trace record so far.
    pub fn trace(&self) -> Vec<TraceRecord> {
        self.lock().trace.records()
    }

    /// The trace as text, one record a line; byte-identical for the same seed and calls.
    pub fn trace_text(&self) -> String {
        self.lock().trace.to_text()
    }

    fn device_of(&self, host: &str) -> usize {
        let h = self.host_key(host);
        self.lock().hosts[h].devices[0]
    }

    /// Removes the (first) RDMA device of `host`: DEVICE_REMOVAL for every id on it.
    pub fn remove_device(&self, host: &str) {
        let d = self.device_of(host);
        self.lock().remove_device(d);
    }

    /// Adds the removed device of `host` back.
    pub fn restore_device(&self, host: &str) {
        let d = self.device_of(host);
        self.lock().restore_device(d);
    }

    /// ADDR_CHANGE for every id on the (first) device of `host`.
    pub fn address_change(&self, host: &str) {
        let d = self.device_of(host);
        self.lock().address_change(d);
    }

    /// MULTICAST_ERROR (-ENETRESET) for every member of `group`.
    pub fn multicast_lost(&self, group: IpAddr) {
        self.lock().multicast_lost(group);
    }

    /// UNREACHABLE (-ETIMEDOUT) for RoCE ids routed to `ip`, as after a neighbour MAC change.
    pub fn neighbour_change(&self, ip: IpAddr) {
        self.lock().neighbour_change(ip);
    }

    /// Makes the next `count` SA path queries of `host` fail as `how` says: on InfiniBand,
    /// `resolve_route` then ends in ROUTE_ERROR and the id is back in ADDR_RESOLVED (RoCE and
    /// iWARP routes need no SA query and are unaffected).
    pub fn fail_path_queries(&self, host: &str, count: u32, how: crate::PathFailure) {
        let h = self.host_key(host);
        self.lock().fail_path_queries(h, count, how);
    }

    /// Loses the next `count` CM messages of `kind` sent anywhere on the fabric.
    pub fn drop_next(&self, kind: MessageKind, count: u32) {
        self.lock().wire_faults.push(WireFault {
            kind,
            count,
            delay: None,
        });
    }

    /// Delays the next `count` CM messages of `kind` by `delay` beyond the usual latency.
    pub fn delay_next(&self, kind: MessageKind, count: u32, delay: Duration) {
        self.lock().wire_faults.push(WireFault {
            kind,
            count,
            delay: Some(delay),
        });
    }

    /// Registers a process running `body` on host `host`; `run` starts it.
    pub fn spawn(
        &self,
        host: &str,
        name: &str,
        body: impl FnOnce(SimBackend) -> Result<(), CmError> + Send + 'static,
    ) {
        let host = self.host_key(host);
        let proc = PendingProc {
            name: name.to_string(),
            host,
            body: Box::new(body),
        };
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(proc);
    }

    /// Runs every spawned process to completion, one at a time, in virtual time. Fails naming
    /// each process that returned an error, panicked or deadlocked, with the replay line.
    pub fn run(&self) -> Result<(), SimError> {
        let procs: Vec<PendingProc> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let fabric_no = {
            let mut w = self.lock();
            w.sched.procs = procs
                .iter()
                .map(|p| Proc {
                    name: p.name.clone(),
                    state: ProcState::Runnable,
                })
                .collect();
            w.sched.current = None;
            w.pass_baton();
            w.fabric_no
        };
        let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = procs
                .into_iter()
                .enumerate()
                .map(|(index, p)| {
                    let shared = Arc::clone(&self.shared);
                    scope.spawn(move || {
                        enter_process(fabric_no, index);
                        {
                            let mut w = shared.world.lock().unwrap_or_else(|e| e.into_inner());
                            while w.sched.current != Some(index) {
                                w = shared.cv.wait(w).unwrap_or_else(|e| e.into_inner());
                            }
                        }
                        let backend = SimBackend {
                            shared: Arc::clone(&shared),
                            host: p.host,
                        };
                        let outcome = match catch_unwind(AssertUnwindSafe(|| (p.body)(backend))) {
                            Ok(Ok(())) => Ok(()),
                            Ok(Err(e)) => Err(format!("process {} failed: {e}", p.name)),
                            Err(panic) => {
                                let msg = panic
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                                    .unwrap_or_default();
                                Err(format!("process {} panicked: {msg}", p.name))
                            }
                        };
                        let mut w = shared.world.lock().unwrap_or_else(|e| e.into_inner());
                        w.sched.procs[index].state = ProcState::Done;
                        w.pass_baton();
                        shared.cv.notify_all();
                        outcome
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("process thread died".into()))
                })
                .collect()
        });
        self.lock().sched.procs.clear();
        let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SimError {
                failures,
                replay: self.replay_line(),
            })
        }
    }

    /// The command line that replays this run with the same seed.
    pub fn replay_line(&self) -> String {
        format!("CMTWIN_SEED={} cargo test", self.seed)
    }
}
