//! The `Fabric`: a simulated world built from a seed, with hosts, devices and addresses, that
//! hands out one `SimBackend` per host, runs simulated processes, injects faults, lets an event
//! loop drive its timeline and keeps the trace.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{CmError, Transport};

use crate::backend::SimBackend;
use crate::cm::messages::MessageKind;
use crate::config::{SimConfig, MAX_SIM_DURATION};
use crate::engine::timeline::SimTime;
use crate::error::FabricError;
use crate::faults::Removal;
use crate::handoff::WorldGuard;
use crate::process::{current_process, Shared};
use crate::schedule::SchedConfig;
use crate::trace::TraceRecord;
use crate::wire::WireFault;
use crate::world::{DevKey, Device, Host, World};

/// Numbers fabrics, so that a handle of one fabric is never taken for another's.
static NEXT_FABRIC: AtomicU32 = AtomicU32::new(1);

/// The body of a simulated process.
pub(crate) type ProcBody = Box<dyn FnOnce(SimBackend) -> Result<(), CmError> + Send>;

/// A process waiting for `Fabric::run`.
pub(crate) struct PendingProc {
    pub name: String,
    /// The host's key, or why the process cannot start.
    pub host: Result<crate::topology::HostKey, FabricError>,
    pub body: ProcBody,
}

/// A device as described to the builder: name, transport, addresses.
type DeviceSpec = (String, Transport, Vec<IpAddr>);

/// Describes a fabric before it is built.
#[must_use = "a FabricBuilder describes a fabric; call build() to make it"]
pub struct FabricBuilder {
    seed: u64,
    config: SimConfig,
    hosts: Vec<(String, Vec<DeviceSpec>)>,
    silent: Vec<IpAddr>,
    /// Fault plans to apply once built (`plan/apply.rs`).
    pub(crate) plans: Vec<crate::plan::FaultPlan>,
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

    /// Replaces the configuration's schedule (how processes are scheduled).
    pub fn schedule(mut self, schedule: SchedConfig) -> Self {
        self.config.schedule = schedule;
        self
    }

    /// Builds the fabric. Fails on a configuration the CM cannot carry (see
    /// [`SimConfig::validate`]); durations longer than virtual time can express saturate.
    pub fn build(self) -> Result<Fabric, FabricError> {
        self.config.validate()?;
        // Fabric numbers wrap within the bits a handle has for them (skipping 0), so a handle
        // names its fabric among the last 16 million built in this process.
        let fabric_no = loop {
            let n = NEXT_FABRIC.fetch_add(1, Ordering::Relaxed) & crate::world::FABRIC_NO_MASK;
            if n != 0 {
                break n;
            }
        };
        let mut world = World::new(fabric_no, self.seed, self.config.saturated());
        world.topo.silent_ips.extend(self.silent);
        for (name, devs) in self.hosts {
            let host = world.topo.hosts.next_key();
            let mut keys = Vec::new();
            for (dname, transport, ips) in devs {
                keys.push(world.topo.devices.push(Device {
                    host,
                    name: dname,
                    transport,
                    ips,
                    present: true,
                    qpns: Default::default(),
                }));
            }
            world.trace.name_host(host, &name);
            world.topo.hosts.push(Host {
                name,
                devices: keys,
                last_ephemeral: Default::default(),
            });
        }
        let fabric = Fabric {
            shared: Arc::new(Shared::new(world)),
            seed: self.seed,
            pending: Mutex::new(Vec::new()),
        };
        for plan in &self.plans {
            fabric.apply_plan(plan)?;
        }
        Ok(fabric)
    }
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
///     .build()
///     .unwrap();
/// let server = fabric.backend("server");
/// let channel = server.create_event_channel().unwrap();
/// let id = server.create_id(Some(channel), 0, PortSpace::TCP).unwrap();
/// server.bind_addr(id, "10.0.0.1:7471".parse().unwrap()).unwrap();
/// server.listen(id, 8).unwrap();
/// assert!(fabric.trace_text().contains("rdma_listen"));
/// ```
///
/// # Threads
///
/// Outside [`Fabric::run`], the thread calling into the fabric drives it: a blocking call
/// (`Wait::Block`, a timeout, `sleep`, a synchronous id) runs the timeline inline until it is
/// satisfied, and fails with EDEADLK when the timeline empties first; calls of other OS
/// threads are not waited for. Several threads may share the fabric then, but the trace follows
/// the order in which the OS lets them in: drive one fabric from one thread for a reproducible
/// trace. While `run` is in progress, only the fabric's own processes may call into it (see
/// [`Fabric::run`]).
pub struct Fabric {
    pub(crate) shared: Arc<Shared>,
    pub(crate) seed: u64,
    pub(crate) pending: Mutex<Vec<PendingProc>>,
}

/// What an ordinary thread (not one of the fabric's processes) may not do during `run`.
const RULE_PROCESSES_ONLY: &str =
    "while Fabric::run is in progress only the fabric's own processes may call into it";
/// What nobody may do during `run`.
const RULE_RUN_DRIVES: &str =
    "Fabric::run drives the timeline while it is in progress (a process sleeps or waits instead)";

impl Fabric {
    /// Starts describing a fabric whose randomness all derives from `seed`.
    pub fn builder(seed: u64) -> FabricBuilder {
        FabricBuilder {
            seed,
            config: SimConfig::default(),
            hosts: Vec::new(),
            silent: Vec::new(),
            plans: Vec::new(),
        }
    }

    pub(crate) fn lock(&self) -> WorldGuard<'_> {
        self.shared.lock()
    }

    /// Locks the world for `call`, which only the fabric's processes may make during `run`.
    pub(crate) fn lock_for(&self, call: &'static str) -> Result<WorldGuard<'_>, FabricError> {
        let w = self.lock();
        if w.sched.running() && current_process(w.fabric_no).is_none() {
            return Err(FabricError::Running {
                call,
                rule: RULE_PROCESSES_ONLY,
            });
        }
        Ok(w)
    }

    /// Locks the world to drive its timeline, which nobody may do during `run`.
    fn lock_to_drive(&self, call: &'static str) -> Result<WorldGuard<'_>, FabricError> {
        let w = self.lock();
        if w.sched.running() {
            return Err(FabricError::Running {
                call,
                rule: RULE_RUN_DRIVES,
            });
        }
        Ok(w)
    }

    fn host_key(&self, name: &str) -> Result<crate::topology::HostKey, FabricError> {
        self.lock()
            .topo
            .hosts
            .position(|h| h.name == name)
            .ok_or_else(|| FabricError::UnknownHost(name.to_string()))
    }

    /// The seed the fabric was built from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The backend of host `name`. It shares the fabric's world: dropping the `Fabric` ends
    /// nothing, and the backend (and its handles) stay usable while it lives.
    ///
    /// # Panics
    /// If the fabric has no such host (a mistake in the test's setup, not a CM error).
    pub fn backend(&self, name: &str) -> SimBackend {
        let host = self.host_key(name).unwrap_or_else(|e| panic!("{e}"));
        SimBackend {
            shared: Arc::clone(&self.shared),
            host,
        }
    }

    /// Virtual time since the fabric was built.
    pub fn now(&self) -> Duration {
        self.lock().now.as_duration()
    }

    // ----- driving the timeline from an event loop ---------------------------------------

    /// Runs the next pending action of the timeline (advancing virtual time to it); `Ok(false)`
    /// when nothing is pending. Refused while [`Fabric::run`] is in progress.
    pub fn step(&self) -> Result<bool, FabricError> {
        Ok(self.lock_to_drive("step")?.step())
    }

    /// The virtual time of the next pending action, if any.
    pub fn next_event_time(&self) -> Option<Duration> {
        self.lock().timeline.peek_time().map(SimTime::as_duration)
    }

    /// Runs every action due at or before `t`, then sets the clock to `t`. Refused when `t` is
    /// before the current virtual time, and while [`Fabric::run`] is in progress.
    pub fn run_until(&self, t: Duration) -> Result<(), FabricError> {
        let mut w = self.lock_to_drive("run_until")?;
        let now = w.now.as_duration();
        if t < now {
            return Err(FabricError::TimeInThePast { now, requested: t });
        }
        let end = SimTime(0).after(t);
        while w.timeline.peek_time().is_some_and(|at| at <= end) {
            w.step();
        }
        w.now = end.max(w.now);
        Ok(())
    }

    /// Runs the timeline until nothing is pending, or nothing but RC sends that retry for ever
    /// after RNR NAKs (`rnr_retry` 7) at responders without a receive: until a receive is
    /// posted they repeat without changing anything. Refused while [`Fabric::run`] is in
    /// progress. It advances the fabric only: processes given to [`Fabric::spawn`] wait for
    /// [`Fabric::run`], which is what starts them.
    pub fn run_until_idle(&self) -> Result<(), FabricError> {
        let mut w = self.lock_to_drive("run_until_idle")?;
        while w.step_unless_stuck() {}
        Ok(())
    }

    /// Runs the timeline for `d` of virtual time (saturating at the end of virtual time).
    /// Refused while [`Fabric::run`] is in progress.
    pub fn run_for(&self, d: Duration) -> Result<(), FabricError> {
        let end = self.lock_to_drive("run_for")?.now.after(d);
        self.run_until(end.as_duration())
    }

    // ----- trace -------------------------------------------------------------------------

    /// Every trace record so far. During [`Fabric::run`] a process of the run reads the
    /// trace as far as its turn (the same for the same seed); any other thread reads it as
    /// far as the run got when it looked, which depends on the OS's thread scheduling: read
    /// it after `run` returns.
    pub fn trace(&self) -> Vec<TraceRecord> {
        self.lock().trace.records()
    }

    /// The trace as text, one record a line; byte-identical for the same seed and calls
    /// (read during [`Fabric::run`] as [`Fabric::trace`] says).
    pub fn trace_text(&self) -> String {
        self.lock().trace.to_text()
    }

    // ----- faults --------------------------------------------------------------------------

    /// The (first) device of host `host`, with the world locked for fault `call`.
    fn device_of(
        &self,
        call: &'static str,
        host: &str,
    ) -> Result<(WorldGuard<'_>, DevKey), FabricError> {
        let w = self.lock_for(call)?;
        let h = w
            .topo
            .hosts
            .position(|h| h.name == host)
            .ok_or_else(|| FabricError::UnknownHost(host.to_string()))?;
        let d = *w.topo.hosts[h]
            .devices
            .first()
            .ok_or_else(|| FabricError::NoDevice(host.to_string()))?;
        Ok((w, d))
    }

    /// Removes the (first) RDMA device of `host` together with its port, as a hot-unplug or
    /// the loss of the netdev under rxe do: DEVICE_REMOVAL for every id on it, and its QPs
    /// enter ERROR. Nothing more leaves the port: the peers of those ids hear of it only when
    /// their own traffic fails (a send's retries run out) or their application gives up. For
    /// the kernel's orderly unregistration (`rdma link delete`), see
    /// [`unregister_device`](Self::unregister_device).
    pub fn remove_device(&self, host: &str) -> Result<(), FabricError> {
        let (mut w, d) = self.device_of("remove_device", host)?;
        w.remove_device(d, Removal::PortGone);
        Ok(())
    }

    /// Unregisters the (first) RDMA device of `host` while its port still works, as
    /// `rdma link delete` or a driver unbind do: the ids on it get DEVICE_REMOVAL as with
    /// [`remove_device`](Self::remove_device), and ucma's teardown then destroys each kernel
    /// id as `rdma_destroy_id` would while the port still sends (CM-SEMANTICS §8.1 step 4;
    /// ucma.c `ucma_close_id`, cm.c `cm_destroy_id`): an established peer gets a DREQ (its
    /// DISCONNECTED), a connecting one a REJ (REJECTED 28), an iWARP peer the close. Then the
    /// port is gone. Inferred from the kernel source: the beds' two sides share one device,
    /// so no bed has measured what a peer hears.
    pub fn unregister_device(&self, host: &str) -> Result<(), FabricError> {
        let (mut w, d) = self.device_of("unregister_device", host)?;
        w.remove_device(d, Removal::PortWorks);
        Ok(())
    }

    /// Adds the removed device of `host` back.
    pub fn restore_device(&self, host: &str) -> Result<(), FabricError> {
        let (mut w, d) = self.device_of("restore_device", host)?;
        w.restore_device(d);
        Ok(())
    }

    /// ADDR_CHANGE for every id on the (first) device of `host`.
    pub fn address_change(&self, host: &str) -> Result<(), FabricError> {
        let (mut w, d) = self.device_of("address_change", host)?;
        w.address_change(d);
        Ok(())
    }

    /// MULTICAST_ERROR (-ENETRESET) for every member of `group` (none: nothing happens). On
    /// InfiniBand the subnet manager has dropped the memberships: the group's datagrams reach
    /// the old members no more until they join again. On RoCE the kernel itself never raises
    /// this event after a join (no SA holds the membership): there the fault only tests that
    /// an application survives it, and delivery goes on.
    pub fn multicast_lost(&self, group: IpAddr) -> Result<(), FabricError> {
        self.lock_for("multicast_lost")?.multicast_lost(group);
        Ok(())
    }

    /// UNREACHABLE (-ETIMEDOUT) for RoCE ids routed to `ip`, as after a neighbour MAC change.
    pub fn neighbour_change(&self, ip: IpAddr) -> Result<(), FabricError> {
        self.lock_for("neighbour_change")?.neighbour_change(ip);
        Ok(())
    }

    /// Makes the next `count` SA path queries of `host` fail as `how` says: on InfiniBand,
    /// `resolve_route` then ends in ROUTE_ERROR and the id is back in ADDR_RESOLVED (RoCE and
    /// iWARP routes need no SA query and are unaffected).
    pub fn fail_path_queries(
        &self,
        host: &str,
        count: u32,
        how: crate::PathFailure,
    ) -> Result<(), FabricError> {
        let h = self.host_key(host)?;
        self.lock_for("fail_path_queries")?
            .fail_path_queries(h, count, how);
        Ok(())
    }

    /// Host `host` loses power: its devices vanish without a word (no DEVICE_REMOVAL, no
    /// message to any peer), everything its kernel held (ids, connections, channels, queued
    /// events) is gone, and its peers keep their side of its connections until something
    /// tells them. A process of the host finds its handles dead (EBADF, ENOENT). The host's
    /// devices give out their QP numbers again from the start once it is back
    /// ([`Fabric::power_on`]): its first connections reuse the numbers of its last life.
    pub fn power_off(&self, host: &str) -> Result<(), FabricError> {
        let h = self.host_key(host)?;
        self.lock_for("power_off")?.power_off(h);
        Ok(())
    }

    /// Host `host` is back up after [`Fabric::power_off`]: its devices are present, empty.
    pub fn power_on(&self, host: &str) -> Result<(), FabricError> {
        let h = self.host_key(host)?;
        self.lock_for("power_on")?.power_on(h);
        Ok(())
    }

    /// Loses the next `count` CM messages of `kind` sent anywhere on the fabric.
    pub fn drop_next(&self, kind: MessageKind, count: u32) -> Result<(), FabricError> {
        self.lock_for("drop_next")?.net.faults.push(WireFault {
            kind,
            count,
            delay: None,
            overtaken: false,
        });
        Ok(())
    }

    /// Delays the next `count` CM messages of `kind` by `delay` beyond the usual latency; a
    /// delay past the end of virtual time (≈ 584 years) saturates there: never delivered.
    /// Links are FIFO: every later message of the same link waits behind a delayed one (see
    /// [`Fabric::reorder_next`] for a message that later ones overtake).
    pub fn delay_next(
        &self,
        kind: MessageKind,
        count: u32,
        delay: Duration,
    ) -> Result<(), FabricError> {
        self.lock_for("delay_next")?.net.faults.push(WireFault {
            kind,
            count,
            delay: Some(delay.min(MAX_SIM_DURATION)),
            overtaken: false,
        });
        Ok(())
    }

    /// Reorders: delays the next `count` CM messages of `kind` by `delay` beyond the usual
    /// latency without holding back the messages sent after them on the same link, which
    /// overtake them (CM MADs are datagrams; a real network may deliver them out of order).
    /// Refused for messages that ride TCP (iWARP's MPA messages, FIN, RST), which a real
    /// network never reorders.
    pub fn reorder_next(
        &self,
        kind: MessageKind,
        count: u32,
        delay: Duration,
    ) -> Result<(), FabricError> {
        if kind.rides_tcp() {
            return Err(FabricError::InOrderOnly(kind));
        }
        self.lock_for("reorder_next")?.net.faults.push(WireFault {
            kind,
            count,
            delay: Some(delay.min(MAX_SIM_DURATION)),
            overtaken: true,
        });
        Ok(())
    }

    // ----- processes -----------------------------------------------------------------------

    /// Registers a process running `body` on host `host`; `run` starts it. A process on a host
    /// the fabric does not have is not started: `run` reports it as failed. When the process
    /// and every thread it spawned have returned, it has exited: its channel files are
    /// closed, destroying the ids still on them as `rdma_destroy_id` does (the kernel's
    /// `ucma_close`), and the verbs objects it made and left (PDs, regions, CQs, completion
    /// channels, external QPs, address handles) are freed as its device files' close frees
    /// them (an object another process still uses stays), so handles it leaves behind are
    /// stale after `run`. A process registered while a `run` is in progress (from any thread,
    /// one of the run's processes included) waits for the next `run`; a process starts
    /// threads of its own at once with `cmtwin::thread::spawn`.
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

    /// The command line that replays this run with the same seed (and the applied fault
    /// plans, if any): `CMTWIN_SEED` (and `CMTWIN_PLAN`) before `cargo test`. Those variables
    /// reach a run only through the test: [`seeded_test!`](crate::seeded_test),
    /// [`replay::run_seeded`](crate::replay::run_seeded) and [`Sweep`](crate::sweep::Sweep)
    /// read them, as does a test that builds with
    /// `Fabric::builder(replay::seed_from_env()?.unwrap_or(7))`. A fabric built from a seed of
    /// the test's own (`Fabric::builder(7)`, a loop over seeds) ignores them: rerun the test
    /// with the seed the line names.
    pub fn replay_line(&self) -> String {
        let plan = self.applied_plan();
        crate::replay::replay_line("cargo test", self.seed, &plan)
    }
}
