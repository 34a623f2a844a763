//! Fault plans: their JSON form, each trigger and action taking effect at an exact virtual
//! time and recorded in the trace, probabilistic faults drawing from streams of their own,
//! swarm plans, and byte-identical replays.

use cmtwin::{EventKind, Transport};
use cmtwin_sim::scenarios::{connect_teardown, space};
use cmtwin_sim::sweep::RunContext;
use cmtwin_sim::{
    Fabric, FabricError, Fault, FaultAction, FaultPlan, MessageChance, MessageKind, PlanError,
    TraceKind, Trigger,
};

/// Runs the bundled connect-teardown scenario on RoCE with `seed` and `plan`; its trace.
fn run(seed: u64, plan: FaultPlan) -> Vec<String> {
    run_on(Transport::Roce, seed, plan)
}

/// Runs the bundled connect-teardown scenario on `transport`; its trace.
fn run_on(transport: Transport, seed: u64, plan: FaultPlan) -> Vec<String> {
    let ctx = RunContext::new(seed, plan);
    connect_teardown(&ctx, transport).expect("the scenario holds");
    ctx.trace()
        .expect("a fabric was built")
        .iter()
        .map(|r| r.to_string())
        .collect()
}

/// The records of `trace` that mention `needle`.
fn with<'a>(trace: &'a [String], needle: &str) -> Vec<&'a str> {
    trace
        .iter()
        .filter(|l| l.contains(needle))
        .map(|l| l.as_str())
        .collect()
}

#[test]
fn a_plan_reads_back_from_its_json() {
    let plan = FaultPlan::new()
        .scheduled(
            Trigger::Time { at_ms: 1500 },
            FaultAction::RemoveDevice {
                host: "server".into(),
            },
        )
        .scheduled(
            Trigger::Event {
                host: "client".into(),
                event: EventKind::Established,
                nth: 2,
            },
            FaultAction::NeighbourChange {
                ip: "10.0.0.1".parse().unwrap(),
            },
        )
        .scheduled(
            Trigger::Message {
                kind: MessageKind::Dreq,
                nth: 1,
            },
            FaultAction::DelayMessages {
                kind: MessageKind::Dreq,
                count: 2,
                delay_ms: 30,
            },
        )
        .chance(MessageChance {
            drop: 0.25,
            ..MessageChance::new(MessageKind::SidrRep)
        });
    let json = plan.to_json();
    assert_eq!(
        json,
        concat!(
            r#"{"faults":[{"type":"scheduled","when":{"on":"time","at_ms":1500},"action":{"do":"remove_device","host":"server"}},"#,
            r#"{"type":"scheduled","when":{"on":"event","host":"client","event":"ESTABLISHED","nth":2},"action":{"do":"neighbour_change","ip":"10.0.0.1"}},"#,
            r#"{"type":"scheduled","when":{"on":"message","kind":"DREQ","nth":1},"action":{"do":"delay_messages","kind":"DREQ","count":2,"delay_ms":30}},"#,
            r#"{"type":"chance","kind":"SIDR_REP","drop":0.25,"delay":0.0,"delay_max_ms":0,"duplicate":0.0}]}"#
        )
    );
    assert_eq!(FaultPlan::from_json(&json), Ok(plan.clone()));
    assert_eq!(FaultPlan::from_json(&plan.to_json_pretty()), Ok(plan));
    // Event names may carry librdmacm's prefix; nth defaults to 1.
    let long = r#"{"faults":[{"type":"scheduled","when":{"on":"event","host":"a","event":"RDMA_CM_EVENT_TIMEWAIT_EXIT"},"action":{"do":"address_change","host":"a"}}]}"#;
    let plan = FaultPlan::from_json(long).unwrap();
    assert_eq!(
        plan.faults[0],
        cmtwin_sim::Fault::Scheduled {
            when: Trigger::Event {
                host: "a".into(),
                event: EventKind::TimewaitExit,
                nth: 1
            },
            action: FaultAction::AddressChange { host: "a".into() }
        }
    );
}

#[test]
fn a_bad_plan_is_a_clear_error() {
    let cases = [
        ("", "not a fault plan: EOF while parsing a value at line 1 column 0"),
        (
            r#"{"faults":[{"type":"chance","kind":"FOO"}]}"#,
            "not a fault plan: unknown CM message kind \"FOO\" (one of REQ, MRA, REP, RTU, REJ, DREQ, DREP, SIDR_REQ, SIDR_REP, MPA_REQ, MPA_REP, MPA_REJ, FIN, RST) at line 1 column 42",
        ),
        (
            r#"{"faults":[{"type":"chance","kind":"REQ","drop":1.5}]}"#,
            "fault 0 of the plan: probability drop = 1.5 is not between 0 and 1",
        ),
        (
            r#"{"faults":[{"type":"scheduled","when":{"on":"message","kind":"REQ","nth":0},"action":{"do":"drop_messages","kind":"REQ","count":1}}]}"#,
            "fault 0 of the plan: nth counts from 1; 0 never fires",
        ),
        (
            r#"{"faults":[],"extra":1}"#,
            "not a fault plan: unknown field `extra`, expected `faults` at line 1 column 20",
        ),
    ];
    for (text, message) in cases {
        let err = FaultPlan::from_json(text).unwrap_err();
        assert_eq!(err.to_string(), message, "for {text:?}");
    }
    assert!(matches!(
        FaultPlan::from_json_bytes(&[0xff, 0xfe]),
        Err(PlanError::Parse(m)) if m.starts_with("not UTF-8 text")
    ));
}

/// Parsing arbitrary bytes, and every single-byte corruption of a valid plan, never panics;
/// whatever parses is valid and reads back from its own JSON.
#[test]
fn parsing_arbitrary_bytes_never_panics() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let valid = FaultPlan::swarm(4, &space()).to_json().into_bytes();
    let mut parsed = 0;
    let mut refused = 0;
    let mut check = |bytes: &[u8]| match FaultPlan::from_json_bytes(bytes) {
        Ok(plan) => {
            assert!(plan.validate().is_ok());
            assert_eq!(FaultPlan::from_json(&plan.to_json()), Ok(plan));
            parsed += 1;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            refused += 1;
        }
    };
    for _ in 0..2000 {
        let len = rng.gen_range(0..64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        check(&bytes);
    }
    for i in 0..valid.len() {
        let mut bytes = valid.clone();
        bytes[i] = rng.gen();
        check(&bytes);
        check(&valid[..i]);
    }
    assert_eq!(parsed + refused, 2000 + 2 * valid.len());
    assert!(
        parsed > 0 && refused > 2000,
        "{parsed} parsed, {refused} refused"
    );
}

#[test]
fn a_plan_that_does_not_fit_the_fabric_is_refused() {
    let build = |plan: FaultPlan| {
        Fabric::builder(1)
            .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
            .plan(plan)
            .build()
            .err()
    };
    let unknown = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 1 },
        FaultAction::AddressChange { host: "b".into() },
    );
    assert_eq!(build(unknown), Some(FabricError::UnknownHost("b".into())));
    let bad = FaultPlan::new().chance(MessageChance {
        duplicate: -0.5,
        ..MessageChance::new(MessageKind::Rtu)
    });
    assert_eq!(
        build(bad.clone()).map(|e| e.to_string()),
        Some(
            "invalid fault plan: fault 0 of the plan: probability duplicate = -0.5 is not \
             between 0 and 1"
                .into()
        )
    );
    // Refused by apply_plan too, changing nothing.
    let fabric = Fabric::builder(1)
        .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .build()
        .unwrap();
    assert!(fabric.apply_plan(&bad).is_err());
    assert!(fabric.trace().is_empty());
}

#[test]
fn a_timed_fault_happens_at_its_time() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 1 },
        FaultAction::RemoveDevice {
            host: "client".into(),
        },
    );
    let trace = run(3, plan);
    assert_eq!(
        with(&trace, "fault"),
        [
            "     0.000000000 fabric   fault fault plan #1 armed: at 1 ms: remove the device of client",
            "     0.001000000 client   fault fault plan #1 fires: at 1 ms: remove the device of client",
            "     0.001000000 client   fault device roce0 removed",
        ]
    );
    assert_eq!(
        with(&trace, "queue RDMA_CM_EVENT_DEVICE_REMOVAL"),
        ["     0.001000000 client   queue RDMA_CM_EVENT_DEVICE_REMOVAL status 0 on id4 (0 bytes)"]
    );
}

/// The orderly unregistration reads from its JSON name and fires as the removal does, named
/// as such in the trace.
#[test]
fn an_unregistration_fires_at_its_time() {
    let json = r#"{"faults":[{"type":"scheduled","when":{"on":"time","at_ms":1},"action":{"do":"unregister_device","host":"client"}}]}"#;
    let plan = FaultPlan::from_json(json).expect("a valid plan");
    assert_eq!(
        plan.faults[0],
        Fault::Scheduled {
            when: Trigger::Time { at_ms: 1 },
            action: FaultAction::UnregisterDevice {
                host: "client".into()
            }
        }
    );
    let trace = run(3, plan);
    assert_eq!(
        with(&trace, "fault"),
        [
            "     0.000000000 fabric   fault fault plan #1 armed: at 1 ms: unregister the device of client",
            "     0.001000000 client   fault fault plan #1 fires: at 1 ms: unregister the device of client",
            "     0.001000000 client   fault device roce0 unregistered",
        ]
    );
    assert_eq!(
        with(&trace, "queue RDMA_CM_EVENT_DEVICE_REMOVAL"),
        ["     0.001000000 client   queue RDMA_CM_EVENT_DEVICE_REMOVAL status 0 on id4 (0 bytes)"]
    );
}

#[test]
fn a_fault_on_the_nth_message_applies_to_that_message() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Message {
            kind: MessageKind::Rep,
            nth: 1,
        },
        FaultAction::DropMessages {
            kind: MessageKind::Rep,
            count: 1,
        },
    );
    let trace = run(3, plan);
    // The first REP is lost; the server's CM retransmits it after its timeout (4.096 s),
    // which the Linux 6.1 profile's 250 Hz timer wheel rounds up to its next 256 ms bucket
    // boundary: 4.32 s.
    assert_eq!(
        with(&trace, " REP ep7"),
        [
            "     0.000016134 server   loss REP ep7 -> ep5 (targeted fault)",
            "     4.320000000 server   send REP ep7 -> ep5",
            "     4.320008559 client   recv REP ep7 -> ep5",
        ]
    );
    assert_eq!(
        with(&trace, "fires"),
        ["     0.000016134 fabric   fault fault plan #1 fires: on REP #1: drop the next 1 REP"]
    );
}

#[test]
fn a_fault_on_an_event_follows_it_at_the_same_time() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Event {
            host: "server".into(),
            event: EventKind::Established,
            nth: 1,
        },
        FaultAction::AddressChange {
            host: "server".into(),
        },
    );
    let trace = run(3, plan);
    assert_eq!(
        with(&trace, "server   queue RDMA_CM_EVENT_ESTABLISHED"),
        ["     0.000033567 server   queue RDMA_CM_EVENT_ESTABLISHED status 0 on id6 (0 bytes)"]
    );
    assert_eq!(
        with(&trace, "queue RDMA_CM_EVENT_ADDR_CHANGE"),
        [
            "     0.000033567 server   queue RDMA_CM_EVENT_ADDR_CHANGE status 0 on id2 (0 bytes)",
            "     0.000033567 server   queue RDMA_CM_EVENT_ADDR_CHANGE status 0 on id6 (0 bytes)",
        ]
    );
    assert_eq!(with(&trace, "fires").len(), 1);
}

/// The active side's ESTABLISHED is made by librdmacm of the kernel's CONNECT_RESPONSE inside
/// `rdma_get_cm_event`: a fault watching for it fires as the application fetches it (it
/// never fired before: the kernel queues no ESTABLISHED there).
#[test]
fn a_fault_on_the_active_sides_established_follows_its_fetch() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Event {
            host: "client".into(),
            event: EventKind::Established,
            nth: 1,
        },
        FaultAction::AddressChange {
            host: "client".into(),
        },
    );
    let trace = run(3, plan);
    assert!(with(&trace, "client   queue RDMA_CM_EVENT_ESTABLISHED").is_empty());
    assert_eq!(
        with(&trace, "client   deliver RDMA_CM_EVENT_ESTABLISHED"),
        ["     0.000024693 client   deliver RDMA_CM_EVENT_ESTABLISHED status 0 on id4 ticket 4"]
    );
    assert_eq!(
        with(&trace, "fires"),
        ["     0.000024693 client   fault fault plan #1 fires: on RDMA_CM_EVENT_ESTABLISHED #1 on client: address change on client"]
    );
    assert_eq!(
        with(&trace, "queue RDMA_CM_EVENT_ADDR_CHANGE"),
        ["     0.000024693 client   queue RDMA_CM_EVENT_ADDR_CHANGE status 0 on id4 (0 bytes)"]
    );
}

#[test]
fn the_peer_rejects_as_planned() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 0 },
        FaultAction::RejectRequests {
            host: "server".into(),
            count: 1,
        },
    );
    let trace = run(3, plan);
    assert_eq!(
        with(&trace, "REJ ep0")
            .into_iter()
            .chain(with(&trace, "REJECTED"))
            .collect::<Vec<_>>(),
        [
            "     0.000016134 server   send REJ ep0 -> ep5 reason 28",
            "     0.000024693 client   recv REJ ep0 -> ep5 reason 28",
            "     0.000024693 client   queue RDMA_CM_EVENT_REJECTED status 28 on id4 (148 bytes)",
            "     0.000024693 client   deliver RDMA_CM_EVENT_REJECTED status 28 on id4 ticket 3",
            "     0.000024693 client   ack RDMA_CM_EVENT_REJECTED on id4 ticket 3",
        ]
    );
    assert_eq!(
        with(&trace, "plan #1 rejects"),
        ["     0.000016134 server   fault fault plan #1 rejects REQ ep5 -> 10.0.0.1"]
    );
    // The listener never saw the request.
    assert!(with(&trace, "CONNECT_REQUEST").is_empty());
}

#[test]
fn chances_of_one_hundred_percent_always_happen() {
    let dup = FaultPlan::new().chance(MessageChance {
        duplicate: 1.0,
        ..MessageChance::new(MessageKind::Req)
    });
    let trace = run(3, dup);
    assert_eq!(with(&trace, "send REQ").len(), 2);
    assert_eq!(with(&trace, "recv REQ").len(), 2);
    assert_eq!(with(&trace, "queue RDMA_CM_EVENT_CONNECT_REQUEST").len(), 1);
    let lost = FaultPlan::new().chance(MessageChance {
        drop: 1.0,
        ..MessageChance::new(MessageKind::Dreq)
    });
    let trace = run(3, lost);
    // Every DREQ (the first and its retries) is lost: no DREQ ever arrives.
    let losses = with(&trace, "loss DREQ");
    assert!(losses.len() > 1, "{losses:?}");
    assert!(losses
        .iter()
        .all(|l| l.ends_with("(fault plan: lost, p = 1)")));
    assert!(with(&trace, "recv DREQ").is_empty());
}

/// The draws of one (effect, message kind) do not move when a fault of another is added.
#[test]
fn adding_a_fault_does_not_shift_the_draws_of_another() {
    let dreq = MessageChance {
        drop: 0.5,
        ..MessageChance::new(MessageKind::Dreq)
    };
    // A REP delay of zero draws from its own streams but changes no timing.
    let rep = MessageChance {
        delay: 1.0,
        delay_max_ms: 0,
        ..MessageChance::new(MessageKind::Rep)
    };
    let dreqs = |t: &[String]| -> Vec<String> {
        with(t, "DREQ ep").into_iter().map(str::to_string).collect()
    };
    let mut seeds_with_a_loss = 0;
    for seed in 0..16 {
        let alone = run(seed, FaultPlan::new().chance(dreq.clone()));
        let both = run(
            seed,
            FaultPlan::new().chance(rep.clone()).chance(dreq.clone()),
        );
        assert_eq!(dreqs(&alone), dreqs(&both), "seed {seed}");
        assert_eq!(with(&both, "delays REP").len(), 1);
        if dreqs(&alone).iter().any(|l| l.contains("loss")) {
            seeds_with_a_loss += 1;
        }
    }
    assert!(
        seeds_with_a_loss >= 4,
        "{seeds_with_a_loss} of 16 seeds lost a DREQ"
    );
}

#[test]
fn the_same_swarm_plan_gives_a_byte_identical_trace() {
    for seed in [5, 17, 40] {
        let plan = FaultPlan::swarm(seed, &space());
        assert!(!plan.is_empty(), "seed {seed} draws some faults");
        let first = run(seed, plan.clone());
        let again = run(seed, FaultPlan::from_json(&plan.to_json()).unwrap());
        assert_eq!(first, again);
        assert!(first.iter().any(|l| l.contains("fault plan #1 armed")));
    }
}

#[test]
fn swarm_plans_vary_with_the_seed_and_repeat_for_it() {
    let plans: Vec<FaultPlan> = (0..200).map(|s| FaultPlan::swarm(s, &space())).collect();
    for (seed, plan) in plans.iter().enumerate() {
        assert_eq!(*plan, FaultPlan::swarm(seed as u64, &space()));
        assert!(plan.validate().is_ok());
    }
    let distinct: std::collections::BTreeSet<String> = plans.iter().map(|p| p.to_json()).collect();
    assert!(distinct.len() > 150, "{} distinct plans", distinct.len());
    // Each fault kind is active in some plans and not in others.
    for needle in [
        "\"drop\":0.",
        "\"duplicate\":0.",
        "remove_device",
        "restore_device",
        "address_change",
        "neighbour_change",
        "reject_requests",
        "drop_messages",
        "\"on\":\"event\"",
    ] {
        let n = plans
            .iter()
            .filter(|p| p.to_json().contains(needle))
            .count();
        assert!(n > 0 && n < 200, "{needle}: in {n} of 200 plans");
    }
}

#[test]
fn device_unregistrations_are_drawn_only_when_asked_for_and_leave_the_rest_unchanged() {
    let with = space().unregisters(true);
    let (mut drawn, mut restored) = (0, 0);
    for seed in 0..200 {
        let plain = FaultPlan::swarm(seed, &space());
        let unregisters = |p: &FaultPlan| {
            p.faults.iter().any(|f| {
                matches!(
                    f,
                    Fault::Scheduled {
                        action: FaultAction::UnregisterDevice { .. },
                        ..
                    }
                )
            })
        };
        assert!(!unregisters(&plain), "seed {seed}: {plain:?}");
        let plan = FaultPlan::swarm(seed, &with);
        // The same faults, then at most an unregistration of one host and its restoration.
        assert_eq!(plan.faults[..plain.faults.len()], plain.faults[..]);
        match &plan.faults[plain.faults.len()..] {
            [] => {}
            [Fault::Scheduled {
                action: FaultAction::UnregisterDevice { host },
                ..
            }, rest @ ..] => {
                assert!(["client", "server"].contains(&host.as_str()), "{host}");
                drawn += 1;
                match rest {
                    [] => {}
                    [Fault::Scheduled {
                        action: FaultAction::RestoreDevice { host: again },
                        ..
                    }] => {
                        assert_eq!(again, host);
                        restored += 1;
                    }
                    more => panic!("seed {seed}: unexpected faults {more:?}"),
                }
            }
            more => panic!("seed {seed}: unexpected faults {more:?}"),
        }
    }
    // Drawn with probability 0.3, restored with 0.5 of those: seeds 0..200 give these counts.
    assert_eq!((drawn, restored), (68, 32), "of 200 plans");
}

#[test]
fn path_query_faults_are_drawn_only_when_asked_for_and_leave_the_rest_unchanged() {
    let with = space().path_queries(true);
    let mut drawn = 0;
    for seed in 0..200 {
        let plain = FaultPlan::swarm(seed, &space());
        assert!(!plain.to_json().contains("fail_path_queries"));
        let plan = FaultPlan::swarm(seed, &with);
        // The same faults, and at most one more: a path query fault at the end.
        assert_eq!(plan.faults[..plain.faults.len()], plain.faults[..]);
        match &plan.faults[plain.faults.len()..] {
            [] => {}
            [Fault::Scheduled {
                when: Trigger::Time { at_ms: 0 },
                action: FaultAction::FailPathQueries { count, .. },
            }] => {
                assert!((1..=3).contains(count));
                drawn += 1;
            }
            more => panic!("seed {seed}: unexpected faults {more:?}"),
        }
    }
    assert!((30..=90).contains(&drawn), "{drawn} of 200 plans");
}

#[test]
fn plan_faults_are_in_the_structured_trace() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 2 },
        FaultAction::MulticastLoss {
            group: "239.0.0.1".parse().unwrap(),
        },
    );
    let fabric = Fabric::builder(1)
        .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .plan(plan)
        .build()
        .unwrap();
    fabric.run_until_idle().unwrap();
    let faults: Vec<(String, String)> = fabric
        .trace()
        .into_iter()
        .filter(|r| r.kind == TraceKind::Fault)
        .map(|r| (r.time.to_string().trim().to_string(), r.text))
        .collect();
    assert_eq!(
        faults,
        [
            (
                "0.000000000".into(),
                "fault plan #1 armed: at 2 ms: multicast group 239.0.0.1 lost".into()
            ),
            (
                "0.002000000".into(),
                "fault plan #1 fires: at 2 ms: multicast group 239.0.0.1 lost".into()
            ),
            (
                "0.002000000".into(),
                "multicast group 239.0.0.1 lost".into()
            ),
        ]
    );
}

#[test]
fn a_delayed_message_arrives_that_much_later() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Message {
            kind: MessageKind::Dreq,
            nth: 1,
        },
        FaultAction::DelayMessages {
            kind: MessageKind::Dreq,
            count: 1,
            delay_ms: 30,
        },
    );
    let trace = run(3, plan);
    // Sent at 44.693 us (the disconnect first spends 20 us moving the QP to ERROR); 30 ms
    // later plus the usual latency (5.648 us for this seed).
    assert_eq!(
        with(&trace, "DREQ ep5"),
        [
            "     0.000044693 client   send DREQ ep5 -> ep7",
            "     0.030050341 server   recv DREQ ep5 -> ep7",
        ]
    );
}

#[test]
fn failing_path_queries_end_in_route_error() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 0 },
        FaultAction::FailPathQueries {
            host: "client".into(),
            count: 1,
            timeout: true,
        },
    );
    let trace = run_on(Transport::InfiniBand, 3, plan);
    assert_eq!(
        with(&trace, "client   queue"),
        [
            "     0.000010000 client   queue RDMA_CM_EVENT_ADDR_RESOLVED status 0 on id4 (0 bytes)",
            "     2.000010000 client   queue RDMA_CM_EVENT_ROUTE_ERROR status -110 on id4 (0 bytes)",
        ]
    );
    assert_eq!(
        with(&trace, "client   fault"),
        [
            "     0.000000000 client   fault fault plan #1 fires: at 0 ms: the next 1 path queries of client fail (timeout)",
            "     0.000000000 client   fault the next 1 path queries fail (Timeout)",
        ]
    );
}

#[test]
fn a_neighbour_change_makes_the_connecting_client_unreachable() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Event {
            host: "client".into(),
            event: EventKind::RouteResolved,
            nth: 1,
        },
        FaultAction::NeighbourChange {
            ip: "10.0.0.1".parse().unwrap(),
        },
    );
    let trace = run(3, plan);
    assert_eq!(
        with(&trace, "UNREACHABLE").first().copied(),
        Some(
            "     0.000010000 client   queue RDMA_CM_EVENT_UNREACHABLE status -110 on id4 (0 bytes)"
        )
    );
    assert_eq!(
        with(&trace, "neighbour"),
        [
            "     0.000000000 fabric   fault fault plan #1 armed: on RDMA_CM_EVENT_ROUTE_RESOLVED #1 on client: neighbour 10.0.0.1 changes",
            "     0.000010000 fabric   fault fault plan #1 fires: on RDMA_CM_EVENT_ROUTE_RESOLVED #1 on client: neighbour 10.0.0.1 changes",
            "     0.000010000 fabric   fault neighbour 10.0.0.1 changed its MAC",
        ]
    );
}

/// A plan acts while simulated processes run the fabric (`Fabric::run`).
#[test]
fn a_plan_acts_during_a_run_of_processes() {
    use cmtwin::CmBackend;
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 5 },
        FaultAction::AddressChange { host: "a".into() },
    );
    let fabric = Fabric::builder(2)
        .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .plan(plan)
        .build()
        .unwrap();
    fabric.spawn("a", "sleeper", |cm| {
        cm.sleep(std::time::Duration::from_millis(10))?;
        assert_eq!(cm.now(), std::time::Duration::from_millis(10));
        Ok(())
    });
    fabric.run().unwrap();
    let fault_times: Vec<String> = fabric
        .trace()
        .into_iter()
        .filter(|r| r.kind == TraceKind::Fault)
        .map(|r| format!("{} {}", r.time.to_string().trim(), r.text))
        .collect();
    assert_eq!(
        fault_times,
        [
            "0.000000000 fault plan #1 armed: at 5 ms: address change on a",
            "0.005000000 fault plan #1 fires: at 5 ms: address change on a",
            "0.005000000 address change on roce0",
        ]
    );
}

/// A failed run's replay line carries the plans applied to the fabric.
#[test]
fn a_failed_run_names_its_plan_in_the_replay_line() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Time { at_ms: 5 },
        FaultAction::AddressChange { host: "a".into() },
    );
    let fabric = Fabric::builder(2)
        .host("a", Transport::Roce, &["10.0.0.1".parse().unwrap()])
        .plan(plan.clone())
        .build()
        .unwrap();
    assert_eq!(fabric.applied_plan(), plan);
    fabric.spawn("a", "fails", |_| {
        Err(cmtwin::CmError::new(
            cmtwin::Call::Connect,
            cmtwin::Errno::EINVAL,
            "on purpose",
        ))
    });
    let err = fabric.run().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "simulation failed (replay: CMTWIN_SEED=2 CMTWIN_PLAN='{}' cargo test):\nprocess fails failed: rdma_connect: EINVAL (22): on purpose",
            plan.to_json()
        )
    );
    let plain = Fabric::builder(2).build().unwrap();
    assert_eq!(plain.replay_line(), "CMTWIN_SEED=2 cargo test");
}

#[test]
fn data_packet_faults_are_drawn_only_when_asked_for_and_leave_the_rest_unchanged() {
    let with = space().data_packets(true);
    let (mut lost, mut delayed, mut at_established) = (0, 0, 0);
    for seed in 0..200 {
        let plain = FaultPlan::swarm(seed, &space());
        assert!(!plain.to_json().contains("data_packets"), "seed {seed}");
        let plan = FaultPlan::swarm(seed, &with);
        plan.validate().expect("valid");
        // The same faults, then at most one loss or delay of the next data packets.
        assert_eq!(plan.faults[..plain.faults.len()], plain.faults[..]);
        match &plan.faults[plain.faults.len()..] {
            [] => {}
            [Fault::Scheduled { when, action }] => {
                match action {
                    FaultAction::DropDataPackets { count } if (1..=3).contains(count) => lost += 1,
                    FaultAction::DelayDataPackets { count, .. } if (1..=3).contains(count) => {
                        delayed += 1
                    }
                    other => panic!("seed {seed}: unexpected {other:?}"),
                }
                if let Trigger::Event { event, .. } = when {
                    assert_eq!(*event, EventKind::Established);
                    at_established += 1;
                }
            }
            more => panic!("seed {seed}: unexpected faults {more:?}"),
        }
    }
    // Drawn with probability 0.5, a loss with 0.6 of those: seeds 0..200 give these counts.
    assert_eq!(
        (lost, delayed, at_established),
        (60, 41, 57),
        "of 200 plans"
    );
}
