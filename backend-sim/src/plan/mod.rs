//! Fault plans: a declarative, serializable list of faults that a fabric applies as it runs
//! (`FabricBuilder::plan`, `Fabric::apply_plan`). A plan is plain data with a JSON form, so the
//! plan of a failing run can be kept next to the test that replays it.
//!
//! A plan composes two sorts of fault:
//!
//! * [`Fault::Scheduled`]: an [`FaultAction`] carried out once, when its [`Trigger`] fires: at
//!   a virtual time, on the n-th CM message of a kind, or when the n-th event of a kind is
//!   queued on a host.
//! * [`Fault::Chance`]: for every CM message of a kind, a chance of being lost, delayed or
//!   duplicated ([`MessageChance`]).
//!
//! What the wire allows: links are FIFO, so a delayed message holds back the messages sent
//! after it on the same link (between the same two hosts) and no fault reorders a link; a
//! duplicate is delivered right behind its original. Messages between different host pairs are
//! independent.
//!
//! Randomness: each (effect, message kind) pair draws from its own ChaCha stream derived from
//! the fabric's seed, apart from the streams of the fabric itself, so adding a fault never
//! shifts the draws of another, and a fabric without a plan draws exactly as before.
//!
//! Every fault taking effect leaves a `fault` (or, for a loss, `loss`) record in the trace
//! that starts with `fault plan`.

mod apply;
mod armed;
mod names;
mod swarm;

use std::net::IpAddr;
use std::time::Duration;

use cmtwin::EventKind;
use serde::{Deserialize, Serialize};

use crate::cm::messages::MessageKind;

pub(crate) use armed::ArmedPlan;
pub use swarm::SwarmSpace;

/// A list of faults to apply to a fabric; the empty plan changes nothing.
///
/// ```
/// use cmtwin_sim::FaultPlan;
///
/// let plan = FaultPlan::from_json(r#"{"faults": [
///     {"type": "scheduled", "when": {"on": "message", "kind": "REP", "nth": 1},
///      "action": {"do": "drop_messages", "kind": "REP", "count": 1}},
///     {"type": "chance", "kind": "DREQ", "drop": 0.5}
/// ]}"#).unwrap();
/// assert_eq!(plan.faults.len(), 2);
/// assert_eq!(FaultPlan::from_json(&plan.to_json()).unwrap(), plan);
/// assert!(FaultPlan::from_json("{\"faults\": [{\"type\": \"chance\", \"kind\": \"REQ\", \"drop\": 2}]}")
///     .unwrap_err()
///     .to_string()
///     .contains("between 0 and 1"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// The faults, in the order they are armed (also the order of same-instant effects).
    #[serde(default)]
    pub faults: Vec<Fault>,
}

/// One fault of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// `action` is carried out once, when `when` fires.
    Scheduled {
        /// What makes the fault happen.
        when: Trigger,
        /// What happens.
        action: FaultAction,
    },
    /// Random loss, delay and duplication of the CM messages of one kind.
    Chance(MessageChance),
}

/// What fires a scheduled fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// At virtual time `at_ms` milliseconds after the fabric was built (at once if the plan is
    /// applied later than that).
    Time {
        /// Milliseconds of virtual time.
        at_ms: u64,
    },
    /// When the `nth` CM message of `kind` is sent (counting from 1, over the whole fabric).
    /// A wire action ([`FaultAction::DropMessages`], [`FaultAction::DelayMessages`]) then
    /// applies to that very message; any other action happens right after it is sent.
    Message {
        /// The message kind counted.
        #[serde(with = "names::message_kind")]
        kind: MessageKind,
        /// Which one (1 = the first).
        nth: u32,
    },
    /// Right after the `nth` event of `event` is queued on `host` (same virtual time). An
    /// active id with a QP gets no ESTABLISHED from the kernel: the kernel queues
    /// CONNECT_RESPONSE, and librdmacm makes ESTABLISHED (or CONNECT_ERROR) of it inside
    /// `rdma_get_cm_event`; that ESTABLISHED counts when the application fetches it (the
    /// CONNECT_RESPONSE as it is queued).
    Event {
        /// The host whose channels are watched.
        host: String,
        /// The event kind, as its librdmacm name with or without `RDMA_CM_EVENT_`.
        #[serde(with = "names::event_kind")]
        event: EventKind,
        /// Which one (1 = the first).
        #[serde(default = "one")]
        nth: u32,
    },
}

fn one() -> u32 {
    1
}

/// What a scheduled fault does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultAction {
    /// Removes the (first) RDMA device of `host` with its port ([`crate::Fabric::remove_device`]):
    /// DEVICE_REMOVAL on every id attached to it, nothing more on the wire.
    RemoveDevice {
        /// The host.
        host: String,
    },
    /// Unregisters the (first) RDMA device of `host` while its port works
    /// ([`crate::Fabric::unregister_device`]): DEVICE_REMOVAL on every id attached to it, and
    /// the peers get what destroying those ids sends.
    UnregisterDevice {
        /// The host.
        host: String,
    },
    /// Brings the removed device of `host` back.
    RestoreDevice {
        /// The host.
        host: String,
    },
    /// `host` loses power ([`crate::Fabric::power_off`]): its RDMA state vanishes silently.
    PowerOff {
        /// The host.
        host: String,
    },
    /// `host` is back up after a power-off ([`crate::Fabric::power_on`]).
    PowerOn {
        /// The host.
        host: String,
    },
    /// The top-level simulated process named `process` crashes, with every thread it spawned:
    /// the kernel closes its channel files (its ids destroyed, peers told with DREQ or REJ),
    /// and its threads stop. No effect when no running process has that name.
    CrashProcess {
        /// The process's name (as given to `Fabric::spawn`).
        process: String,
    },
    /// ADDR_CHANGE for every id on the (first) device of `host`.
    AddressChange {
        /// The host.
        host: String,
    },
    /// The neighbour `ip` changed its MAC: UNREACHABLE for RoCE ids routed there.
    NeighbourChange {
        /// The neighbour's address.
        ip: IpAddr,
    },
    /// Multicast group `group` is lost: MULTICAST_ERROR for its members.
    MulticastLoss {
        /// The group's address.
        group: IpAddr,
    },
    /// The next `count` CM messages of `kind` are lost.
    DropMessages {
        /// The message kind.
        #[serde(with = "names::message_kind")]
        kind: MessageKind,
        /// How many.
        count: u32,
    },
    /// The next `count` CM messages of `kind` arrive `delay_ms` later than usual (holding back
    /// what follows them on their link).
    DelayMessages {
        /// The message kind.
        #[serde(with = "names::message_kind")]
        kind: MessageKind,
        /// How many.
        count: u32,
        /// The extra delay in milliseconds of virtual time.
        delay_ms: u64,
    },
    /// Delay the next `count` messages of `kind` by `delay_ms` without holding back the later
    /// messages of their link, which overtake them ([`crate::Fabric::reorder_next`]). Invalid
    /// for messages that ride TCP (iWARP).
    ReorderMessages {
        /// The message kind (an IB CM message).
        #[serde(with = "names::message_kind")]
        kind: MessageKind,
        /// How many.
        count: u32,
        /// The extra delay in milliseconds of virtual time.
        delay_ms: u64,
    },
    /// The next `count` data packets put on the wire anywhere (requests, acknowledgements and
    /// responses alike) are lost: the RC transport retransmits or, out of retries, fails. On
    /// iWARP TCP retransmits, also after the connection's close: see
    /// [`crate::Fabric::drop_data_packets`].
    DropDataPackets {
        /// How many.
        count: u32,
    },
    /// The next `count` data packets arrive `delay_ms` later than usual (holding back what
    /// follows them on their link).
    DelayDataPackets {
        /// How many.
        count: u32,
        /// The extra delay in milliseconds of virtual time.
        delay_ms: u64,
    },
    /// The CM of `host` rejects the next `count` connection requests (REQ, SIDR REQ) that reach
    /// it, as a listener's consumer reject would: REJ with reason 28 (consumer defined), or a
    /// SIDR REP with status REJECT. The listener never sees them.
    RejectRequests {
        /// The rejecting host.
        host: String,
        /// How many requests.
        count: u32,
    },
    /// The next `count` SA path queries of `host` fail (InfiniBand): with no path, or by
    /// timing out when `timeout` is true.
    FailPathQueries {
        /// The host.
        host: String,
        /// How many queries.
        count: u32,
        /// Whether the SA never answers (ETIMEDOUT) rather than answering "no path" (EINVAL).
        #[serde(default)]
        timeout: bool,
    },
}

/// Chances of loss, delay and duplication for every CM message of `kind`. Drawn per message in
/// that order: a lost message is neither delayed nor duplicated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageChance {
    /// The message kind.
    #[serde(with = "names::message_kind")]
    pub kind: MessageKind,
    /// Probability that a message is lost.
    #[serde(default)]
    pub drop: f64,
    /// Probability that a message is delayed, by a uniform draw in `0..=delay_max_ms`.
    #[serde(default)]
    pub delay: f64,
    /// The longest extra delay, in milliseconds.
    #[serde(default)]
    pub delay_max_ms: u64,
    /// Probability that a message is delivered twice.
    #[serde(default)]
    pub duplicate: f64,
    /// Probability that a message is held back by a uniform draw in `1..=delay_max_ms` (at
    /// least 1 ms) while the later messages of its link overtake it, as CM datagrams can be;
    /// never for messages that ride TCP (iWARP).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reorder: f64,
}

fn is_zero(p: &f64) -> bool {
    *p == 0.0
}

impl MessageChance {
    /// No chance of anything for `kind`; set the fields that matter.
    pub fn new(kind: MessageKind) -> Self {
        MessageChance {
            kind,
            drop: 0.0,
            delay: 0.0,
            delay_max_ms: 0,
            duplicate: 0.0,
            reorder: 0.0,
        }
    }
}

/// A plan that cannot be read or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The text is not a fault plan in JSON (with line and column).
    #[error("not a fault plan: {0}")]
    Parse(String),
    /// A fault of the plan has a value it cannot use.
    #[error("fault {index} of the plan: {reason}")]
    Invalid {
        /// The fault's index in [`FaultPlan::faults`].
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl FaultPlan {
    /// The empty plan.
    pub fn new() -> Self {
        FaultPlan::default()
    }

    /// Adds `action` when `when` fires.
    pub fn scheduled(mut self, when: Trigger, action: FaultAction) -> Self {
        self.faults.push(Fault::Scheduled { when, action });
        self
    }

    /// Adds chances of loss, delay and duplication for a message kind.
    pub fn chance(mut self, chance: MessageChance) -> Self {
        self.faults.push(Fault::Chance(chance));
        self
    }

    /// Whether the plan has no fault.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// The same plan without fault `index` (for reducing a failing plan).
    pub fn without(&self, index: usize) -> FaultPlan {
        let mut faults = self.faults.clone();
        if index < faults.len() {
            faults.remove(index);
        }
        FaultPlan { faults }
    }

    /// Reads a plan from JSON text, checking every value. Never panics, whatever the text.
    pub fn from_json(text: &str) -> Result<FaultPlan, PlanError> {
        let plan: FaultPlan =
            serde_json::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// Reads a plan from bytes (UTF-8 JSON). Never panics, whatever the bytes.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<FaultPlan, PlanError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| PlanError::Parse(format!("not UTF-8 text: {e}")))?;
        FaultPlan::from_json(text)
    }

    /// The plan as one line of JSON (what [`FaultPlan::from_json`] reads back).
    pub fn to_json(&self) -> String {
        // Infallible: the plan holds only strings, numbers and addresses.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"faults\":[]}"))
    }

    /// The plan as indented JSON, for a file kept next to a test.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| self.to_json())
    }

    /// Checks the values a fabric cannot use: probabilities outside 0..=1, a zero `nth`.
    pub fn validate(&self) -> Result<(), PlanError> {
        for (index, fault) in self.faults.iter().enumerate() {
            let invalid = |reason: String| PlanError::Invalid { index, reason };
            match fault {
                Fault::Chance(c) => {
                    for (name, p) in [
                        ("drop", c.drop),
                        ("delay", c.delay),
                        ("duplicate", c.duplicate),
                        ("reorder", c.reorder),
                    ] {
                        if !(0.0..=1.0).contains(&p) {
                            return Err(invalid(format!(
                                "probability {name} = {p} is not between 0 and 1"
                            )));
                        }
                    }
                    if c.reorder > 0.0 && c.kind.rides_tcp() {
                        return Err(invalid(format!(
                            "{} rides TCP (iWARP), which never reorders",
                            c.kind.name()
                        )));
                    }
                }
                Fault::Scheduled { when, action } => {
                    if let Trigger::Message { nth: 0, .. } | Trigger::Event { nth: 0, .. } = when {
                        return Err(invalid("nth counts from 1; 0 never fires".into()));
                    }
                    if let FaultAction::ReorderMessages { kind, .. } = action {
                        if kind.rides_tcp() {
                            return Err(invalid(format!(
                                "{} rides TCP (iWARP), which never reorders",
                                kind.name()
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Trigger {
    /// At `at` of virtual time (millisecond resolution: sub-millisecond parts are dropped).
    pub fn at(at: Duration) -> Trigger {
        Trigger::Time {
            at_ms: u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl std::fmt::Display for FaultAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultAction::RemoveDevice { host } => write!(f, "remove the device of {host}"),
            FaultAction::UnregisterDevice { host } => {
                write!(f, "unregister the device of {host}")
            }
            FaultAction::RestoreDevice { host } => write!(f, "restore the device of {host}"),
            FaultAction::PowerOff { host } => write!(f, "{host} loses power"),
            FaultAction::CrashProcess { process } => write!(f, "process {process} crashes"),
            FaultAction::PowerOn { host } => write!(f, "{host} powers back on"),
            FaultAction::AddressChange { host } => write!(f, "address change on {host}"),
            FaultAction::NeighbourChange { ip } => write!(f, "neighbour {ip} changes"),
            FaultAction::MulticastLoss { group } => write!(f, "multicast group {group} lost"),
            FaultAction::DropMessages { kind, count } => {
                write!(f, "drop the next {count} {}", kind.name())
            }
            FaultAction::DelayMessages {
                kind,
                count,
                delay_ms,
            } => write!(f, "delay the next {count} {} by {delay_ms} ms", kind.name()),
            FaultAction::ReorderMessages {
                kind,
                count,
                delay_ms,
            } => write!(
                f,
                "reorder the next {count} {} (delayed {delay_ms} ms, overtaken)",
                kind.name()
            ),
            FaultAction::DropDataPackets { count } => {
                write!(f, "drop the next {count} data packets")
            }
            FaultAction::DelayDataPackets { count, delay_ms } => {
                write!(f, "delay the next {count} data packets by {delay_ms} ms")
            }
            FaultAction::RejectRequests { host, count } => {
                write!(f, "{host} rejects the next {count} requests")
            }
            FaultAction::FailPathQueries {
                host,
                count,
                timeout,
            } => write!(
                f,
                "the next {count} path queries of {host} fail ({})",
                if *timeout { "timeout" } else { "no path" }
            ),
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Time { at_ms } => write!(f, "at {at_ms} ms"),
            Trigger::Message { kind, nth } => write!(f, "on {} #{nth}", kind.name()),
            Trigger::Event { host, event, nth } => write!(f, "on {event} #{nth} on {host}"),
        }
    }
}
