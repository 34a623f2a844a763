//! Errors of the fabric's own API (building, fault injection, driving, running processes), as
//! opposed to the `CmError`s of the simulated CM calls.

use std::time::Duration;

/// A misuse of the [`Fabric`](crate::Fabric) API, refused before it could change the fabric.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// A fault or process names a host the fabric does not have.
    #[error("the fabric has no host named {0:?}")]
    UnknownHost(String),
    /// A device fault names a host that has no RDMA device.
    #[error("host {0:?} has no RDMA device")]
    NoDevice(String),
    /// A configuration value the CM cannot carry.
    #[error("invalid configuration: {field} = {value}: {reason}")]
    InvalidConfig {
        /// The [`SimConfig`](crate::SimConfig) field.
        field: &'static str,
        /// The refused value, as written.
        value: String,
        /// What the value must be, and why.
        reason: &'static str,
    },
    /// `Fabric::run` was called by one of the fabric's own processes.
    #[error(
        "Fabric::run called from inside simulated process {process:?}: a process cannot run \
         the fabric it belongs to"
    )]
    RunFromProcess {
        /// The calling process.
        process: String,
    },
    /// `Fabric::run` was called while another thread's call of it is in progress.
    #[error("Fabric::run is already in progress on another thread")]
    AlreadyRunning,
    /// A call that only the fabric's own processes may make while `Fabric::run` is in
    /// progress (fault injection), or that nobody may make then (driving the timeline), was
    /// made by another thread or at that time.
    #[error("Fabric::{call} refused while Fabric::run is in progress: {rule}")]
    Running {
        /// The refused method.
        call: &'static str,
        /// The rule it broke.
        rule: &'static str,
    },
    /// `reorder_next` of a message that rides TCP (iWARP), which a network never reorders.
    #[error(
        "{0:?} rides a TCP stream (iWARP), which never reorders: only the IB CM's messages \
         can be reordered"
    )]
    InOrderOnly(crate::MessageKind),
    /// A fault plan with a value the fabric cannot use.
    #[error("invalid fault plan: {0}")]
    InvalidPlan(#[from] crate::plan::PlanError),
    /// `Fabric::run_until` was asked to go back in virtual time.
    #[error("Fabric::run_until({requested:?}) is before the current virtual time {now:?}")]
    TimeInThePast {
        /// The current virtual time.
        now: Duration,
        /// The time asked for.
        requested: Duration,
    },
}

/// A failed [`Fabric::run`](crate::Fabric::run).
///
/// Its `Debug` form is its message, as `Display` writes it: the replay line as it can be pasted
/// and one line per failed process, so that `fabric.run().unwrap()` in a test prints them
/// readably rather than as an escaped struct.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The processes ran and some failed.
    #[error("simulation failed (replay: {replay}):\n{}", failures.join("\n"))]
    Failed {
        /// One line per process that returned an error, panicked or deadlocked.
        failures: Vec<String>,
        /// The command line that replays the run
        /// ([`Fabric::replay_line`](crate::Fabric::replay_line): it sets `CMTWIN_SEED`, which
        /// only a test that reads it obeys).
        replay: String,
    },
    /// The run was refused (called from a process, or while another run is in progress); no
    /// process ran and the spawned ones are still pending.
    #[error("simulation not run: {0}")]
    Refused(#[from] FabricError),
}

impl std::fmt::Debug for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl FabricError {
    /// `Err(InvalidConfig)` for `field` set to `value`, with what it must be.
    pub(crate) fn refuse_config(
        field: &'static str,
        value: String,
        reason: &'static str,
    ) -> Result<(), FabricError> {
        Err(FabricError::InvalidConfig {
            field,
            value,
            reason,
        })
    }
}
