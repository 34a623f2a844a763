//! Applying a plan to a fabric: its faults checked against the fabric's hosts and devices,
//! resolved to the world's keys and armed; time triggers go on the timeline.

use std::time::Duration;

use super::armed::{Act, ArmedFault, ArmedPlan, When};
use super::{Fault, FaultAction, FaultPlan, MessageChance, Trigger};
use crate::config::MAX_SIM_DURATION;
use crate::engine::timeline::SimTime;
use crate::error::FabricError;
use crate::fabric::{Fabric, FabricBuilder};
use crate::faults::{PathFailure, Removal};
use crate::trace::{Entry, TraceKind};
use crate::wire::WireFault;
use crate::world::{Action, DevKey, HostKey, World};

impl FabricBuilder {
    /// Applies `plan` to the fabric when it is built (several plans add up). `build` fails
    /// with [`FabricError::InvalidPlan`] or [`FabricError::UnknownHost`] if the plan does not
    /// fit the fabric.
    pub fn plan(mut self, plan: FaultPlan) -> Self {
        self.plans.push(plan);
        self
    }
}

impl Fabric {
    /// Arms `plan` from now on (several plans add up): its faults happen as the fabric runs,
    /// each recorded in the trace. Refused, changing nothing, when a value is unusable
    /// ([`FabricError::InvalidPlan`]), a host is unknown or has no device, or from another
    /// thread during [`Fabric::run`].
    pub fn apply_plan(&self, plan: &FaultPlan) -> Result<(), FabricError> {
        plan.validate()?;
        let mut w = self.lock_for("apply_plan")?;
        let resolved = plan
            .faults
            .iter()
            .map(|f| resolve(&w, f))
            .collect::<Result<Vec<_>, _>>()?;
        let seed = self.seed;
        w.plan.get_or_insert_with(|| Box::new(ArmedPlan::new(seed)));
        for (fault, resolved) in plan.faults.iter().zip(resolved) {
            arm(&mut w, fault, resolved);
        }
        let armed = w.plan.as_mut().expect("armed above");
        armed.applied.faults.extend(plan.faults.iter().cloned());
        Ok(())
    }

    /// Every fault plan applied so far, as one plan (empty without any).
    pub fn applied_plan(&self) -> FaultPlan {
        let w = self.lock();
        w.plan
            .as_ref()
            .map_or_else(FaultPlan::new, |p| p.applied.clone())
    }
}

/// A scheduled fault resolved to the world's keys (`None` for a chance).
type Resolved = Option<(When, Act)>;

fn host_key(w: &World, name: &str) -> Result<HostKey, FabricError> {
    w.topo
        .hosts
        .position(|h| h.name == name)
        .ok_or_else(|| FabricError::UnknownHost(name.to_string()))
}

fn device_of(w: &World, name: &str) -> Result<DevKey, FabricError> {
    let h = host_key(w, name)?;
    w.topo.hosts[h]
        .devices
        .first()
        .copied()
        .ok_or_else(|| FabricError::NoDevice(name.to_string()))
}

fn resolve(w: &World, fault: &Fault) -> Result<Resolved, FabricError> {
    let Fault::Scheduled { when, action } = fault else {
        return Ok(None);
    };
    let when = match when {
        Trigger::Time { .. } => When::Time,
        Trigger::Message { kind, nth } => When::Message {
            kind: *kind,
            nth: *nth,
        },
        Trigger::Event { host, event, nth } => When::Event {
            host: host_key(w, host)?,
            event: *event,
            nth: *nth,
            seen: 0,
        },
    };
    let act = match action {
        FaultAction::RemoveDevice { host } => {
            Act::RemoveDevice(device_of(w, host)?, Removal::PortGone)
        }
        FaultAction::UnregisterDevice { host } => {
            Act::RemoveDevice(device_of(w, host)?, Removal::PortWorks)
        }
        FaultAction::RestoreDevice { host } => Act::RestoreDevice(device_of(w, host)?),
        FaultAction::PowerOff { host } => Act::PowerOff(host_key(w, host)?),
        FaultAction::CrashProcess { process } => Act::CrashProcess(process.clone()),
        FaultAction::PowerOn { host } => Act::PowerOn(host_key(w, host)?),
        FaultAction::AddressChange { host } => Act::AddressChange(device_of(w, host)?),
        FaultAction::NeighbourChange { ip } => Act::NeighbourChange(*ip),
        FaultAction::MulticastLoss { group } => Act::MulticastLoss(*group),
        FaultAction::DropMessages { kind, count } => Act::Wire(WireFault {
            kind: *kind,
            count: *count,
            delay: None,
            overtaken: false,
        }),
        FaultAction::DelayMessages {
            kind,
            count,
            delay_ms,
        } => Act::Wire(WireFault {
            kind: *kind,
            count: *count,
            delay: Some(Duration::from_millis(*delay_ms).min(MAX_SIM_DURATION)),
            overtaken: false,
        }),
        FaultAction::ReorderMessages {
            kind,
            count,
            delay_ms,
        } => Act::Wire(WireFault {
            kind: *kind,
            count: *count,
            delay: Some(Duration::from_millis(*delay_ms).min(MAX_SIM_DURATION)),
            overtaken: true,
        }),
        FaultAction::DropDataPackets { count } => Act::Data(crate::verbs::DataFault {
            count: *count,
            delay: None,
        }),
        FaultAction::DelayDataPackets { count, delay_ms } => Act::Data(crate::verbs::DataFault {
            count: *count,
            delay: Some(Duration::from_millis(*delay_ms).min(MAX_SIM_DURATION)),
        }),
        FaultAction::RejectRequests { host, count } => Act::Reject {
            host: host_key(w, host)?,
            count: *count,
        },
        FaultAction::FailPathQueries {
            host,
            count,
            timeout,
        } => Act::FailPaths {
            host: host_key(w, host)?,
            count: *count,
            how: if *timeout {
                PathFailure::Timeout
            } else {
                PathFailure::NoPath
            },
        },
    };
    Ok(Some((when, act)))
}

/// What the trace says of a chance.
fn chance_text(c: &MessageChance) -> String {
    format!(
        "every {}: lost with p = {}, delayed up to {} ms with p = {}, duplicated with p = {}",
        c.kind.name(),
        c.drop,
        c.delay_max_ms,
        c.delay,
        c.duplicate
    )
}

/// Arms one resolved fault and records it.
fn arm(w: &mut World, fault: &Fault, resolved: Resolved) {
    let plan = w.plan.as_mut().expect("a plan was made");
    let number = plan.next_number;
    plan.next_number += 1;
    let text = match (fault, resolved) {
        (Fault::Scheduled { when, action }, Some((armed_when, act))) => {
            let text = format!("{when}: {action}");
            let index = plan.scheduled.len();
            plan.scheduled.push(ArmedFault {
                number,
                when: armed_when,
                act,
                text: text.clone(),
                fired: false,
            });
            if let Trigger::Time { at_ms } = when {
                let at = SimTime(0)
                    .after(Duration::from_millis(*at_ms).min(MAX_SIM_DURATION))
                    .max(w.now);
                w.timeline.schedule(at, Action::PlanFault(index));
            }
            text
        }
        (Fault::Chance(c), _) => {
            plan.chances.push(c.clone());
            chance_text(c)
        }
        // `resolve` gives every scheduled fault its keys.
        (Fault::Scheduled { when, action }, None) => format!("{when}: {action} (not armed)"),
    };
    if w.trace.is_on() {
        let entry = Entry::Text(format!("fault plan #{number} armed: {text}"));
        w.record(None, TraceKind::Fault, entry);
    }
}
