//! Which real bed the suite runs on (its RDMA driver and its kernel) and its simulated twin:
//! the simulator's bed of the same transport, with the kernel profile that follows that
//! kernel. CI's real beds are rxe and siw on Debian's Linux 6.1 and 6.12
//! (`scripts/verbs-tests-in-vm`); `tests/sim_conformance.rs` runs every twin, under the
//! trial-name prefix [`BedId::twin_prefix`] gives.

use cmtwin::Transport;
use cmtwin_sim::{KernelProfile, SimConfig};

/// A real bed: the driver of its RDMA device, the transport, the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BedId {
    /// The RDMA driver: `rxe`, `siw`, or (on other devices, e.g. hardware) the transport's name.
    pub driver: String,
    /// The transport of the bed's devices.
    pub transport: Transport,
    /// The kernel release (`uname -r`), e.g. `6.12.117+deb12-amd64`.
    pub kernel_release: String,
}

impl BedId {
    /// The bed this process runs on: the driver in `CMTWIN_RDMA_DRIVER` (`scripts/vm-run` sets
    /// it), else the transport's name; the kernel release of the running kernel.
    pub fn current(transport: Transport) -> Self {
        let driver = std::env::var("CMTWIN_RDMA_DRIVER")
            .ok()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| transport_name(transport).to_string());
        let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_string())
            .unwrap_or_else(|e| format!("unknown ({e})"));
        BedId {
            driver,
            transport,
            kernel_release,
        }
    }

    /// The kernel's (major, minor) version, read from the start of its release.
    pub fn kernel_series(&self) -> Option<(u32, u32)> {
        let mut parts = self
            .kernel_release
            .split(|c: char| !c.is_ascii_digit())
            .map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => Some((major, minor)),
            _ => None,
        }
    }

    /// The bed's name: driver and kernel series, e.g. `siw-6.12`.
    pub fn name(&self) -> String {
        match self.kernel_series() {
            Some((major, minor)) => format!("{}-{major}.{minor}", self.driver),
            None => format!("{}-{}", self.driver, self.kernel_release),
        }
    }

    /// The simulator's kernel profile that follows this bed's kernel: Linux 6.1 and 6.12 are
    /// measured profiles, 6.18 and later follow the mainline profile; other kernels have none.
    pub fn kernel_profile(&self) -> Option<KernelProfile> {
        match self.kernel_series()? {
            (6, 1) => Some(KernelProfile::Linux61),
            (6, 12) => Some(KernelProfile::Linux612),
            (major, minor) if (major, minor) >= (6, 18) => Some(KernelProfile::Mainline),
            _ => None,
        }
    }

    /// The configuration of the twin's fabric, if the kernel has a profile.
    pub fn twin_config(&self) -> Option<SimConfig> {
        self.kernel_profile().map(SimConfig::for_kernel)
    }

    /// The prefix of the twin's trials in `tests/sim_conformance.rs`, if the kernel has a
    /// profile: e.g. `""` (RoCE, Linux 6.1), `"iwarp::"`, `"roce_linux612::"`.
    pub fn twin_prefix(&self) -> Option<String> {
        self.kernel_profile()
            .map(|profile| twin_prefix(self.transport, profile))
    }

    /// What the bed is and what it is compared with, for the test run's first line.
    pub fn describe(&self) -> String {
        let twin = match (self.kernel_profile(), self.twin_prefix()) {
            (Some(profile), Some(prefix)) => format!(
                "simulated twin: {} fabric, {profile:?} profile (sim_conformance trials {})",
                transport_name(self.transport),
                if prefix.is_empty() {
                    "without prefix".to_string()
                } else {
                    format!("{prefix}*")
                }
            ),
            _ => "no simulated twin: the simulator has no profile for this kernel".into(),
        };
        format!(
            "bed {} ({} on Linux {}); {twin}",
            self.name(),
            self.driver,
            self.kernel_release
        )
    }
}

/// The prefix `tests/sim_conformance.rs` gives the trials of its `transport` bed with the
/// `profile` kernel profile.
pub fn twin_prefix(transport: Transport, profile: KernelProfile) -> String {
    let kernel = match profile {
        KernelProfile::Linux61 => "",
        KernelProfile::Linux612 => "linux612",
        KernelProfile::Mainline => "mainline",
        _ => "unknown",
    };
    match (transport, kernel) {
        (Transport::Roce, "") => String::new(),
        (_, "") => format!("{}::", transport_name(transport)),
        _ => format!("{}_{kernel}::", transport_name(transport)),
    }
}

/// The transport's name in trial prefixes: `roce`, `infiniband`, `iwarp`.
pub fn transport_name(transport: Transport) -> &'static str {
    match transport {
        Transport::Roce => "roce",
        Transport::InfiniBand => "infiniband",
        Transport::Iwarp => "iwarp",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bed(driver: &str, transport: Transport, release: &str) -> BedId {
        BedId {
            driver: driver.into(),
            transport,
            kernel_release: release.into(),
        }
    }

    #[test]
    fn ci_beds_have_their_names_profiles_and_twins() {
        let cases = [
            ("rxe", Transport::Roce, "6.1.0-57-amd64", "rxe-6.1", ""),
            (
                "siw",
                Transport::Iwarp,
                "6.1.0-57-amd64",
                "siw-6.1",
                "iwarp::",
            ),
            (
                "rxe",
                Transport::Roce,
                "6.12.117+deb12-amd64",
                "rxe-6.12",
                "roce_linux612::",
            ),
            (
                "siw",
                Transport::Iwarp,
                "6.12.117+deb12-amd64",
                "siw-6.12",
                "iwarp_linux612::",
            ),
        ];
        for (driver, transport, release, name, prefix) in cases {
            let b = bed(driver, transport, release);
            assert_eq!(b.name(), name);
            assert_eq!(b.twin_prefix().as_deref(), Some(prefix), "{name}");
        }
        assert_eq!(
            bed("rxe", Transport::Roce, "6.12.117+deb12-amd64").twin_config(),
            Some(SimConfig::linux612())
        );
    }

    #[test]
    fn kernels_without_a_profile_have_no_twin() {
        let b = bed("mlx5", Transport::Roce, "6.6.30-generic");
        assert_eq!(b.name(), "mlx5-6.6");
        assert_eq!(b.kernel_profile(), None);
        assert!(
            b.describe().contains("no simulated twin"),
            "{}",
            b.describe()
        );
        assert_eq!(
            bed("rxe", Transport::Roce, "6.18.2").kernel_profile(),
            Some(KernelProfile::Mainline)
        );
        assert_eq!(bed("rxe", Transport::Roce, "weird").kernel_series(), None);
    }
}
