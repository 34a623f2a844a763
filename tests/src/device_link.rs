//! Removing and restoring the VM's software RDMA device (rxe0 or siw0 on dummy0, set up by
//! `scripts/vm-run`) with the `rdma` tool, for the device-removal scenarios on real librdmacm.
//!
//! Neither rxe nor siw can disassociate user contexts: `rdma link delete rxe0` finishes only
//! once this process has let go of the device, i.e. after the scenario destroyed its ids and
//! librdmacm re-read its device list. librdmacm 44 re-reads it (and releases a removed device)
//! only when the list is not empty, so a second device of the same driver (rxe1 or siw1, on
//! dummy1) exists while the first is away.

use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cmtwin_verbs::VerbsBackend;

use crate::bed::HookResult;

/// How long a link deletion may take once the ids are gone.
const DELETE_LIMIT: Duration = Duration::from_secs(30);

/// The VM's software RDMA device (on dummy0), removable and restorable; needs root.
pub struct SoftRdmaLink {
    /// `rxe` or `siw`.
    driver: String,
    /// `rxe0` or `siw0`.
    device: String,
    netdev: &'static str,
    /// The running `rdma link delete` of the device, between remove and restore.
    deleting: Mutex<Option<Child>>,
}

impl SoftRdmaLink {
    /// The device `scripts/vm-run` created on dummy0: its driver and name are in
    /// `CMTWIN_RDMA_DRIVER` and `CMTWIN_RDMA_DEVICE` (rxe0 of rxe when unset).
    pub fn in_vm() -> Self {
        let var = |name, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
        SoftRdmaLink {
            driver: var("CMTWIN_RDMA_DRIVER", "rxe"),
            device: var("CMTWIN_RDMA_DEVICE", "rxe0"),
            netdev: "dummy0",
            deleting: Mutex::new(None),
        }
    }

    /// Adds the spare device, then starts deleting the device (the kernel reports
    /// DEVICE_REMOVAL to its ids at once; the command ends after they are destroyed).
    pub fn remove(&self) -> HookResult {
        let mut deleting = self.deleting.lock().map_err(|_| "poisoned lock")?;
        if deleting.is_some() {
            return Err(format!("{} is already being removed", self.device));
        }
        run("ip", &["link", "add", "dummy1", "type", "dummy"])?;
        run("ip", &["link", "set", "dummy1", "up"])?;
        let spare = self.spare();
        run(
            "rdma",
            &[
                "link",
                "add",
                &spare,
                "type",
                &self.driver,
                "netdev",
                "dummy1",
            ],
        )?;
        let child = Command::new("rdma")
            .args(["link", "delete", &self.device])
            .spawn()
            .map_err(|e| format!("rdma link delete {}: {e}", self.device))?;
        *deleting = Some(child);
        Ok(())
    }

    /// Waits for the deletion to finish (releasing the removed device from librdmacm meanwhile),
    /// adds the device back on its netdev, waits until its port is ACTIVE, and removes the spare.
    pub fn restore(&self) -> HookResult {
        let child = self
            .deleting
            .lock()
            .map_err(|_| "poisoned lock")?
            .take()
            .ok_or_else(|| format!("{} was not removed", self.device))?;
        wait_releasing(child, &format!("rdma link delete {}", self.device))?;
        run(
            "rdma",
            &[
                "link",
                "add",
                &self.device,
                "type",
                &self.driver,
                "netdev",
                self.netdev,
            ],
        )?;
        wait_active(&self.device)?;
        let spare = self.spare();
        let deleting = Command::new("rdma")
            .args(["link", "delete", &spare])
            .spawn()
            .map_err(|e| format!("rdma link delete {spare}: {e}"))?;
        wait_releasing(deleting, &format!("rdma link delete {spare}"))?;
        run("ip", &["link", "delete", "dummy1"])
    }

    /// The spare device that exists while the device is away: `rxe1` or `siw1`.
    fn spare(&self) -> String {
        format!("{}1", self.driver)
    }
}

/// Runs `program args` to completion; an error names the command and its stderr.
fn run(program: &str, args: &[&str]) -> HookResult {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Waits for `child` (a link deletion), asking librdmacm to let go of removed devices while
/// it runs.
fn wait_releasing(mut child: Child, what: &str) -> HookResult {
    let t0 = Instant::now();
    loop {
        VerbsBackend::release_removed_devices();
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{what}: {status}")),
            Ok(None) if t0.elapsed() > DELETE_LIMIT => {
                let _ = child.kill();
                return Err(format!("{what} still runs after {DELETE_LIMIT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

/// Waits until `device`'s port 1 is ACTIVE (at most 10 s).
fn wait_active(device: &str) -> HookResult {
    let port = format!("{device}/1");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let out = Command::new("rdma")
            .args(["link", "show", &port])
            .output()
            .map_err(|e| format!("rdma link show {port}: {e}"))?;
        if String::from_utf8_lossy(&out.stdout).contains("state ACTIVE") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{port} is not ACTIVE 10 s after it was added"))
}
