//! A plan armed in a world: its faults resolved to the world's hosts and devices, the counters
//! of its triggers, its random streams, and the hooks through which the wire and the kernel
//! let it act (`plan_message_sent`, `plan_chance`, `plan_intercepts_request`,
//! `plan_event_queued`, and the timeline's `Action::PlanFault`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use cmtwin::{EventKind, IbRejReason, PrivateDataOp, SidrStatus};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::names::MESSAGE_KINDS;
use super::MessageChance;
use crate::cm::messages::{padded, Body, Dest, MessageKind};
use crate::faults::{PathFailure, Removal};
use crate::trace::TraceKind;
use crate::wire::{Message, WireFault};
use crate::world::{Action, DevKey, HostKey, World};

/// The first ChaCha stream number of plans: far above the fabric's own streams (`rng.rs`).
const PLAN_STREAMS: u64 = 1 << 32;

/// What fires an armed fault, resolved to the world's keys.
#[derive(Clone, Debug)]
pub(crate) enum When {
    /// Scheduled on the timeline when armed.
    Time,
    Message {
        kind: MessageKind,
        nth: u32,
    },
    Event {
        host: HostKey,
        event: EventKind,
        nth: u32,
        seen: u32,
    },
}

/// What an armed fault does, resolved to the world's keys.
#[derive(Clone, Debug)]
pub(crate) enum Act {
    RemoveDevice(DevKey, Removal),
    RestoreDevice(DevKey),
    PowerOff(HostKey),
    CrashProcess(String),
    PowerOn(HostKey),
    AddressChange(DevKey),
    NeighbourChange(IpAddr),
    MulticastLoss(IpAddr),
    Wire(WireFault),
    /// Lost or delayed data packets (`verbs/`).
    Data(crate::verbs::DataFault),
    Reject {
        host: HostKey,
        count: u32,
    },
    FailPaths {
        host: HostKey,
        count: u32,
        how: PathFailure,
    },
}

impl Act {
    /// Whether the action only arms state that later messages or queries consult, so it can
    /// take effect at once, even in the middle of sending a message or queuing an event.
    fn is_passive(&self) -> bool {
        matches!(
            self,
            Act::Wire(_) | Act::Data(_) | Act::Reject { .. } | Act::FailPaths { .. }
        )
    }
}

/// One scheduled fault, armed.
#[derive(Clone, Debug)]
pub(crate) struct ArmedFault {
    /// Its number in the armed plan (the trace names it).
    pub number: usize,
    pub when: When,
    pub act: Act,
    /// "trigger: action", for the trace.
    pub text: String,
    pub fired: bool,
}

/// The plans applied to a world.
#[derive(Debug)]
pub(crate) struct ArmedPlan {
    seed: u64,
    pub scheduled: Vec<ArmedFault>,
    pub chances: Vec<MessageChance>,
    /// CM messages sent so far, by kind (index in `MESSAGE_KINDS`).
    sent: [u32; MESSAGE_KINDS.len()],
    /// Requests still to reject: (host, how many left, fault number).
    rejects: Vec<(HostKey, u32, usize)>,
    /// Random streams by (effect, message kind), made on first use.
    streams: BTreeMap<u64, ChaCha8Rng>,
    /// The number the next armed fault gets.
    pub next_number: usize,
    /// Every plan applied, as one plan (for the replay line).
    pub applied: super::FaultPlan,
}

/// The probabilistic effects, each with streams of its own.
#[derive(Clone, Copy)]
enum Effect {
    Drop = 0,
    Delay = 1,
    DelayAmount = 2,
    Duplicate = 3,
    Reorder = 4,
    ReorderAmount = 5,
}

/// What the plan's chances decide for one message.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChanceVerdict {
    pub lost: bool,
    pub extra: Duration,
    pub duplicate: bool,
    /// Later messages of the link may overtake this one (a reordering).
    pub overtaken: bool,
}

fn kind_index(kind: MessageKind) -> usize {
    MESSAGE_KINDS
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is listed")
}

impl ArmedPlan {
    pub(crate) fn new(seed: u64) -> Self {
        ArmedPlan {
            seed,
            scheduled: Vec::new(),
            chances: Vec::new(),
            sent: [0; MESSAGE_KINDS.len()],
            rejects: Vec::new(),
            streams: BTreeMap::new(),
            next_number: 1,
            applied: super::FaultPlan::new(),
        }
    }

    fn stream(&mut self, effect: Effect, kind: MessageKind) -> &mut ChaCha8Rng {
        let number = PLAN_STREAMS + (effect as u64) * 16 + kind_index(kind) as u64;
        let seed = self.seed;
        self.streams.entry(number).or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(number);
            rng
        })
    }

    fn chance(&mut self, effect: Effect, kind: MessageKind, p: f64) -> bool {
        p > 0.0 && self.stream(effect, kind).gen_bool(p.min(1.0))
    }
}

impl World {
    fn armed(&mut self) -> &mut ArmedPlan {
        self.plan.as_mut().expect("a plan is armed")
    }

    /// Carries out armed fault `i` now (or, for an action that changes the world, right after
    /// the current step, at the same virtual time, when `defer_active` is set).
    fn fire(&mut self, i: usize, defer_active: bool) {
        let fault = &mut self.armed().scheduled[i];
        if fault.fired {
            return;
        }
        if defer_active && !fault.act.is_passive() {
            let now = self.now;
            self.timeline.schedule(now, Action::PlanFault(i));
            return;
        }
        fault.fired = true;
        let (number, act) = (fault.number, fault.act.clone());
        let host = match act {
            Act::RemoveDevice(d, _) | Act::RestoreDevice(d) | Act::AddressChange(d) => {
                Some(self.topo.devices[d].host)
            }
            Act::Reject { host, .. }
            | Act::FailPaths { host, .. }
            | Act::PowerOff(host)
            | Act::PowerOn(host) => Some(host),
            _ => None,
        };
        self.record_text(host, TraceKind::Fault, |w| {
            let text = &w.plan.as_ref().expect("armed").scheduled[i].text;
            format!("fault plan #{number} fires: {text}")
        });
        match act {
            Act::RemoveDevice(d, how) => self.remove_device(d, how),
            Act::RestoreDevice(d) => self.restore_device(d),
            Act::PowerOff(h) => self.power_off(h),
            Act::CrashProcess(name) => self.crash_process(&name),
            Act::PowerOn(h) => self.power_on(h),
            Act::AddressChange(d) => self.address_change(d),
            Act::NeighbourChange(ip) => self.neighbour_change(ip),
            Act::MulticastLoss(group) => self.multicast_lost(group),
            Act::Wire(f) => self.net.faults.push(f),
            // A count of 0 arms nothing.
            Act::Data(f) if f.count == 0 => {}
            Act::Data(f) => self.verbs.faults.push_back(f),
            Act::Reject { host, count } => self.armed().rejects.push((host, count, number)),
            Act::FailPaths { host, count, how } => self.fail_path_queries(host, count, how),
        }
    }

    /// The timeline reached armed fault `i` (a time trigger, or a deferred action).
    pub(crate) fn fire_planned(&mut self, i: usize) {
        if self.plan.is_some() {
            self.fire(i, false);
        }
    }

    /// A CM message of `kind` is about to be sent: counts it and fires the faults waiting for
    /// it (before the wire judges the message, so a drop or delay applies to it).
    pub(crate) fn plan_message_sent(&mut self, kind: MessageKind) {
        let plan = self.armed();
        let k = kind_index(kind);
        plan.sent[k] = plan.sent[k].saturating_add(1);
        let count = plan.sent[k];
        let due: Vec<usize> = plan
            .scheduled
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                !f.fired
                    && matches!(f.when, When::Message { kind: wk, nth } if wk == kind && nth == count)
            })
            .map(|(i, _)| i)
            .collect();
        for i in due {
            self.fire(i, true);
        }
    }

    /// Draws the plan's chances for `msg`, sent by `from_host`, and records what they decide.
    pub(crate) fn plan_chance(&mut self, from_host: HostKey, msg: &Message) -> ChanceVerdict {
        let kind = msg.body.kind();
        let mut verdict = ChanceVerdict::default();
        let plan = self.armed();
        let chances: Vec<MessageChance> = plan
            .chances
            .iter()
            .filter(|c| c.kind == kind)
            .cloned()
            .collect();
        for c in chances {
            let plan = self.armed();
            if plan.chance(Effect::Drop, kind, c.drop) {
                let p = c.drop;
                self.record_text(Some(from_host), TraceKind::Loss, |_| {
                    format!("{} (fault plan: lost, p = {p})", msg.head())
                });
                verdict.lost = true;
                return verdict;
            }
            if plan.chance(Effect::Delay, kind, c.delay) {
                let max = Duration::from_millis(c.delay_max_ms).as_nanos() as u64;
                let d =
                    Duration::from_nanos(plan.stream(Effect::DelayAmount, kind).gen_range(0..=max));
                verdict.extra += d;
                self.record_text(Some(from_host), TraceKind::Fault, |_| {
                    format!("fault plan delays {} by {d:?}", msg.head())
                });
            }
            if !kind.rides_tcp() && self.armed().chance(Effect::Reorder, kind, c.reorder) {
                let max = Duration::from_millis(c.delay_max_ms.max(1)).as_nanos() as u64;
                let plan = self.armed();
                let d = Duration::from_nanos(
                    plan.stream(Effect::ReorderAmount, kind).gen_range(1..=max),
                );
                verdict.extra += d;
                verdict.overtaken = true;
                self.record_text(Some(from_host), TraceKind::Fault, |_| {
                    format!("fault plan reorders {} (held {d:?}, overtaken)", msg.head())
                });
            }
            if self.armed().chance(Effect::Duplicate, kind, c.duplicate) {
                verdict.duplicate = true;
                self.record_text(Some(from_host), TraceKind::Fault, |_| {
                    format!("fault plan duplicates {}", msg.head())
                });
            }
        }
        verdict
    }

    /// A request `msg` reached `host` on `dev`: if the plan makes this host reject it, sends
    /// the reject and returns true (the listener never sees the request).
    pub(crate) fn plan_intercepts_request(
        &mut self,
        host: HostKey,
        dev: DevKey,
        msg: &Message,
    ) -> bool {
        let sidr = match msg.body {
            Body::Req(_) => false,
            Body::SidrReq(_) => true,
            _ => return false,
        };
        // A duplicate of a request already held is the held connection's business.
        if self.cm.passive_by_peer.contains_key(&(host, msg.from)) {
            return false;
        }
        let plan = self.armed();
        let Some(slot) = plan.rejects.iter().position(|r| r.0 == host && r.1 > 0) else {
            return false;
        };
        plan.rejects[slot].1 -= 1;
        let number = plan.rejects[slot].2;
        if plan.rejects[slot].1 == 0 {
            plan.rejects.remove(slot);
        }
        self.record_text(Some(host), TraceKind::Fault, |_| {
            format!("fault plan #{number} rejects {}", msg.head())
        });
        let transport = self.topo.devices[dev].transport;
        let body = if sidr {
            let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::RejectUd);
            Body::SidrRep {
                status: SidrStatus::REJECT,
                qpn: 0,
                qkey: 0,
                data: padded(&[], len),
            }
        } else {
            let len = cmtwin::delivered_private_data_len(transport, PrivateDataOp::Reject);
            Body::Rej {
                reason: IbRejReason::CONSUMER_DEFINED,
                data: padded(&[], len),
            }
        };
        self.send(host, 0, Dest::Ep(msg.from), body);
        true
    }

    /// An event of `kind` was queued on `host`: fires the faults waiting for it.
    pub(crate) fn plan_event_queued(&mut self, host: HostKey, kind: EventKind) {
        let mut due = Vec::new();
        for (i, f) in self.armed().scheduled.iter_mut().enumerate() {
            if let When::Event {
                host: h,
                event,
                nth,
                seen,
            } = &mut f.when
            {
                if !f.fired && *h == host && *event == kind {
                    *seen = seen.saturating_add(1);
                    if *seen == *nth {
                        due.push(i);
                    }
                }
            }
        }
        for i in due {
            self.fire(i, true);
        }
    }
}
