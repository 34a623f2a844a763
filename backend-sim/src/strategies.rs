//! proptest strategies (feature `proptest`) for a user's property tests over the simulator:
//! seeds, transports, schedules and fault plans drawn from a [`SwarmSpace`], which proptest
//! shrinks when a property fails (a plan shrinks by dropping faults and simplifying each).
//!
//! ```
//! use proptest::prelude::*;
//! use cmtwin_sim::scenarios::connect_teardown;
//! use cmtwin_sim::strategies::{fault_plan, seed};
//! use cmtwin_sim::sweep::RunContext;
//! use cmtwin_sim::SwarmSpace;
//!
//! proptest!(ProptestConfig::with_cases(8), |(seed in seed(),
//!                                            plan in fault_plan(&SwarmSpace::new(&["client", "server"]), 4))| {
//!     let outcome = connect_teardown(&RunContext::new(seed, plan), cmtwin::Transport::Roce);
//!     prop_assert!(outcome.is_ok(), "{:?}", outcome.err().map(|e| e.to_string()));
//! });
//! ```

use std::time::Duration;

use cmtwin::{EventKind, Transport};
use proptest::prelude::*;

use crate::plan::{Fault, FaultAction, FaultPlan, MessageChance, SwarmSpace, Trigger};
use crate::schedule::{SchedConfig, SchedPolicy};
use crate::MessageKind;

/// Any seed (shrinks towards 0).
pub fn seed() -> impl Strategy<Value = u64> {
    any::<u64>()
}

/// One of the three transports.
pub fn transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        Just(Transport::Roce),
        Just(Transport::InfiniBand),
        Just(Transport::Iwarp)
    ]
}

/// A schedule: random, PCT (depth 1 to 3) or round-robin choice, a preemption probability and
/// a wake-up latency up to 1 ms (shrinks towards round-robin without either).
pub fn schedule() -> impl Strategy<Value = SchedConfig> {
    let policy = prop_oneof![
        Just(SchedPolicy::RoundRobin),
        Just(SchedPolicy::Random),
        (1u32..=3, 1u64..=500).prop_map(|(depth, steps)| SchedPolicy::Pct { depth, steps }),
    ];
    (policy, 0u32..=100, 0u64..=1000).prop_map(|(policy, preempt, wake_us)| SchedConfig {
        policy,
        preempt: f64::from(preempt) / 100.0,
        wake_latency: Duration::from_micros(wake_us),
    })
}

/// A trigger within `space`: a time before its horizon, the n-th message of one of its kinds,
/// or the n-th event of a connection's life on one of its hosts.
pub fn trigger(space: &SwarmSpace) -> BoxedStrategy<Trigger> {
    let horizon_ms = u64::try_from(space.horizon.as_millis()).unwrap_or(u64::MAX);
    let time = (0..=horizon_ms).prop_map(|at_ms| Trigger::Time { at_ms });
    let mut options = vec![time.boxed()];
    if !space.messages.is_empty() {
        let kinds = space.messages.clone();
        options.push(
            (proptest::sample::select(kinds), 1u32..=4)
                .prop_map(|(kind, nth)| Trigger::Message { kind, nth })
                .boxed(),
        );
    }
    if !space.hosts.is_empty() {
        let events = vec![
            EventKind::AddrResolved,
            EventKind::RouteResolved,
            EventKind::ConnectRequest,
            EventKind::Established,
            EventKind::Disconnected,
            EventKind::TimewaitExit,
        ];
        options.push(
            (
                proptest::sample::select(space.hosts.clone()),
                proptest::sample::select(events),
                1u32..=2,
            )
                .prop_map(|(host, event, nth)| Trigger::Event { host, event, nth })
                .boxed(),
        );
    }
    proptest::strategy::Union::new(options).boxed()
}

/// An action within `space`: on its hosts (device removed, address change, rejects, a power
/// cycle's half; device unregistered where `space` allows it), on its addresses and groups, on
/// its message kinds (lost, delayed, reordered where the network can), or on the next data
/// packets (lost or delayed, where `space` allows it).
pub fn fault_action(space: &SwarmSpace) -> BoxedStrategy<FaultAction> {
    let mut options: Vec<BoxedStrategy<FaultAction>> = Vec::new();
    if !space.hosts.is_empty() {
        let host = proptest::sample::select(space.hosts.clone());
        options.push(
            (host.clone(), 0..4u8)
                .prop_map(|(host, which)| match which {
                    0 => FaultAction::RemoveDevice { host },
                    1 => FaultAction::AddressChange { host },
                    2 => FaultAction::RestoreDevice { host },
                    _ => FaultAction::RejectRequests { host, count: 1 },
                })
                .boxed(),
        );
        if space.unregisters {
            options.push(
                host.prop_map(|host| FaultAction::UnregisterDevice { host })
                    .boxed(),
            );
        }
    }
    if !space.addresses.is_empty() {
        options.push(
            proptest::sample::select(space.addresses.clone())
                .prop_map(|ip| FaultAction::NeighbourChange { ip })
                .boxed(),
        );
    }
    if !space.groups.is_empty() {
        options.push(
            proptest::sample::select(space.groups.clone())
                .prop_map(|group| FaultAction::MulticastLoss { group })
                .boxed(),
        );
    }
    if !space.messages.is_empty() {
        let kinds = space.messages.clone();
        options.push(
            (
                proptest::sample::select(kinds),
                1u32..=3,
                0u64..=2000,
                0..3u8,
            )
                .prop_map(|(kind, count, delay_ms, which)| match which {
                    0 => FaultAction::DropMessages { kind, count },
                    1 => FaultAction::DelayMessages {
                        kind,
                        count,
                        delay_ms,
                    },
                    _ if kind.rides_tcp() => FaultAction::DropMessages { kind, count },
                    _ => FaultAction::ReorderMessages {
                        kind,
                        count,
                        delay_ms,
                    },
                })
                .boxed(),
        );
    }
    if space.data_packets {
        options.push(
            (1u32..=3, 0u64..=2000, proptest::bool::ANY)
                .prop_map(|(count, delay_ms, lose)| match lose {
                    true => FaultAction::DropDataPackets { count },
                    false => FaultAction::DelayDataPackets { count, delay_ms },
                })
                .boxed(),
        );
    }
    if options.is_empty() {
        return Just(FaultAction::DropMessages {
            kind: MessageKind::Req,
            count: 0,
        })
        .boxed();
    }
    proptest::strategy::Union::new(options).boxed()
}

/// Random loss, delay, duplication and reordering of one of `space`'s message kinds.
pub fn message_chance(space: &SwarmSpace) -> BoxedStrategy<MessageChance> {
    let kinds = if space.messages.is_empty() {
        vec![MessageKind::Req]
    } else {
        space.messages.clone()
    };
    let p = || (0u32..=50).prop_map(|n| f64::from(n) / 100.0);
    (
        proptest::sample::select(kinds),
        p(),
        p(),
        0u64..=1000,
        p(),
        p(),
    )
        .prop_map(
            |(kind, drop, delay, delay_max_ms, duplicate, reorder)| MessageChance {
                kind,
                drop,
                delay,
                delay_max_ms,
                duplicate,
                reorder: if kind.rides_tcp() { 0.0 } else { reorder },
            },
        )
        .boxed()
}

/// A plan of up to `max_faults` faults within `space`, scheduled or by chance; shrinks by
/// dropping faults and simplifying the rest. Every plan it makes is valid.
pub fn fault_plan(space: &SwarmSpace, max_faults: usize) -> BoxedStrategy<FaultPlan> {
    let scheduled = (trigger(space), fault_action(space))
        .prop_map(|(when, action)| Fault::Scheduled { when, action });
    let fault = prop_oneof![3 => scheduled, 1 => message_chance(space).prop_map(Fault::Chance)];
    proptest::collection::vec(fault, 0..=max_faults)
        .prop_map(|faults| FaultPlan { faults })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    #[test]
    fn every_plan_drawn_is_valid_and_survives_json() {
        let space = SwarmSpace::new(&["client", "server"])
            .addresses(&["10.0.0.1".parse().expect("literal")])
            .groups(&["239.1.2.3".parse().expect("literal")]);
        let mut runner = TestRunner::deterministic();
        let plans = fault_plan(&space, 6);
        for _ in 0..500 {
            let plan = plans.new_tree(&mut runner).expect("a plan").current();
            plan.validate().expect("valid");
            let json = plan.to_json();
            assert_eq!(FaultPlan::from_json(&json).expect("parses"), plan);
        }
        let schedules = schedule();
        for _ in 0..200 {
            let s = schedules
                .new_tree(&mut runner)
                .expect("a schedule")
                .current();
            s.validate().expect("valid");
        }
    }

    #[test]
    fn plans_with_data_packet_faults_are_valid_and_survive_json() {
        let space = SwarmSpace::new(&["client", "server"]).data_packets(true);
        let mut runner = TestRunner::deterministic();
        let plans = fault_plan(&space, 6);
        let mut with_data = 0;
        for _ in 0..300 {
            let plan = plans.new_tree(&mut runner).expect("a plan").current();
            plan.validate().expect("valid");
            let json = plan.to_json();
            assert_eq!(FaultPlan::from_json(&json).expect("parses"), plan);
            with_data += usize::from(json.contains("data_packets"));
        }
        assert!(
            with_data > 30,
            "only {with_data} of 300 plans touch data packets"
        );
    }
}
