//! The reconnecting key-value RPC (`cmtwin_tests::ports::kv_rpc`) under faults, on the
//! simulator: 1000 seeds, each with the fault plan its seed draws (random loss of every packet,
//! targeted drops and delays of data packets, loss and delay of CM messages, the server's or
//! the client's device removed and restored mid-run). Every run must end with every request
//! answered as the reference model answers it and executed exactly once, within a bounded
//! virtual time. What the faults did is counted from the traces and printed; enough seeds
//! must have seen each fault, and reconnected, for the run to show anything.

use std::collections::BTreeMap;
use std::time::Duration;

use cmtwin_tests::ports::kv_rpc::faults::Faults;
use cmtwin_tests::ports::kv_rpc::messages::{apply, Message, Op};
use cmtwin_tests::ports::kv_rpc::simulated::{self, RpcRun};

const SEEDS: u64 = 1000;
/// Requests per seed (a BYE follows them).
const REQUESTS: u64 = 24;
/// The longest virtual time a seed may take to have every request answered.
const BOUND: Duration = Duration::from_secs(60);

/// What happened in the seeds, counted per seed (a seed counts once per line).
#[derive(Default)]
struct Tally {
    seeds: BTreeMap<&'static str, u64>,
    connections: u64,
    most_connections: u32,
    slowest: Duration,
    breaks: BTreeMap<String, u64>,
    closes: BTreeMap<String, u64>,
}

impl Tally {
    fn saw(&mut self, what: &'static str, yes: bool) {
        *self.seeds.entry(what).or_default() += u64::from(yes);
    }

    fn share(&self, what: &str) -> f64 {
        self.seeds.get(what).copied().unwrap_or(0) as f64 / SEEDS as f64
    }
}

/// Lines of `trace` saying what the faults did.
fn count(trace: &str, pred: impl Fn(&str) -> bool) -> usize {
    trace.lines().filter(|l| pred(l)).count()
}

/// Checks one run exactly, and counts what it saw.
fn check(seed: u64, run: &RpcRun, faults: &Faults, tally: &mut Tally) {
    let ctx = || format!("seed {seed} ({})", faults.plan.to_json());
    assert_eq!(run.outcome, Ok(()), "{}", ctx());
    let client = run.client.as_ref().expect("the client reported");
    let server = run.server.as_ref().expect("the server reported");
    // Every answer is the model's, in order; every request ran exactly once.
    let mut model = BTreeMap::new();
    assert_eq!(run.requests.len() as u64, REQUESTS + 1);
    let expected: Vec<Message> = (run.requests.iter())
        .map(|r| Message {
            value: apply(&mut model, r.op, r.key, r.value),
            ..*r
        })
        .collect();
    assert_eq!(client.answered, expected, "{}", ctx());
    let once: BTreeMap<(u64, u64), u32> = (run.requests.iter())
        .map(|r| ((run.client_id, r.request), 1))
        .collect();
    assert_eq!(server.executions, once, "{}", ctx());
    assert_eq!(server.store, model, "{}", ctx());
    assert_eq!(run.requests.last().map(|r| r.op), Some(Op::Bye));
    assert!(
        client.finished_at <= BOUND,
        "{}: finished at {:?}",
        ctx(),
        client.finished_at
    );
    // A request answered from the cache was sent again; a connection was made per attempt
    // at most.
    assert!(server.replays <= client.resent, "{}", ctx());
    assert!(client.connections <= client.attempts, "{}", ctx());
    assert!(server.connections >= client.connections, "{}", ctx());
    let t = &run.trace;
    let data_loss = |l: &str| l.contains(" loss data qp");
    tally.saw(
        "lost a data packet at random",
        count(t, |l| data_loss(l) && !l.ends_with("(targeted)")) > 0,
    );
    tally.saw(
        "lost a targeted data packet",
        count(t, |l| data_loss(l) && l.ends_with("(targeted)")) > 0,
    );
    tally.saw(
        "delayed data packets",
        count(t, |l| l.contains("fires:") && l.contains("data packets by")) > 0,
    );
    tally.saw(
        "lost a CM message",
        count(t, |l| l.contains(" loss ") && !data_loss(l)) > 0,
    );
    tally.saw(
        "delayed a CM message",
        count(t, |l| l.contains("fault plan delays")) > 0,
    );
    for host in ["server", "client"] {
        let removed = count(t, |l| {
            l.contains(&format!(" {host} ")) && l.contains("fault device") && l.ends_with("removed")
        });
        let what = match host {
            "server" => "removed the server's device",
            _ => "removed the client's device",
        };
        tally.saw(what, removed > 0);
    }
    tally.saw("reconnected", client.connections > 1);
    tally.saw(
        "failed a connect attempt",
        client.attempts > client.connections,
    );
    tally.saw("sent a request again", client.resent > 0);
    tally.saw("answered from the cache", server.replays > 0);
    tally.saw("listened again", server.relistens > 0);
    tally.connections += u64::from(client.connections);
    tally.most_connections = tally.most_connections.max(client.connections);
    tally.slowest = tally.slowest.max(client.finished_at);
    for (why, n) in &client.breaks {
        *tally.breaks.entry(why.clone()).or_default() += u64::from(*n);
    }
    for (why, n) in &server.closes {
        *tally.closes.entry(why.clone()).or_default() += u64::from(*n);
    }
}

#[test]
fn every_answered_request_is_executed_exactly_once_under_faults() {
    let mut tally = Tally::default();
    for seed in 0..SEEDS {
        let faults = Faults::draw(seed, simulated::window(REQUESTS));
        let run = simulated::run(seed, REQUESTS, Some(&faults))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        check(seed, &run, &faults, &mut tally);
    }
    println!("{SEEDS} seeds of {REQUESTS} requests and a BYE, share of seeds that:");
    for (what, n) in &tally.seeds {
        println!("  {:5.1}% {what}", 100.0 * *n as f64 / SEEDS as f64);
    }
    println!(
        "connections per seed: {:.2} on average, {} at most; slowest seed answered everything \
         after {:?} of virtual time",
        tally.connections as f64 / SEEDS as f64,
        tally.most_connections,
        tally.slowest
    );
    println!("why the client's attempts and connections ended (over all seeds):");
    for (why, n) in &tally.breaks {
        println!("  {n:6} {why}");
    }
    println!("why the server closed connections (over all seeds):");
    for (why, n) in &tally.closes {
        println!("  {n:6} {why}");
    }
    // The faults bit: enough seeds saw each of them, and reconnected.
    for what in [
        "lost a data packet at random",
        "lost a targeted data packet",
        "delayed data packets",
        "lost a CM message",
        "delayed a CM message",
        "removed the server's device",
        "removed the client's device",
        "answered from the cache",
        "listened again",
    ] {
        assert!(
            tally.share(what) >= 0.1,
            "only {:.1}% {what}",
            100.0 * tally.share(what)
        );
    }
    assert!(
        tally.share("reconnected") >= 0.3,
        "only {:.1}% reconnected",
        100.0 * tally.share("reconnected")
    );
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let seed = 7;
    let faults = Faults::draw(seed, simulated::window(REQUESTS));
    let first = simulated::run(seed, REQUESTS, Some(&faults)).expect("a valid plan");
    let second = simulated::run(seed, REQUESTS, Some(&faults)).expect("a valid plan");
    assert_eq!(first.outcome, Ok(()));
    assert!(first.client.as_ref().is_some_and(|c| c.attempts > 1));
    assert!(first.trace.len() > 10_000);
    assert!(
        first.trace == second.trace,
        "seed {seed} replayed another trace"
    );
    assert_eq!((first.end, &first.client), (second.end, &second.client));
}

#[test]
fn a_run_without_faults_uses_one_connection() {
    let run = simulated::run(3, REQUESTS, None).expect("a fabric");
    assert_eq!(run.outcome, Ok(()));
    let client = run.client.expect("the client reported");
    let server = run.server.expect("the server reported");
    assert_eq!(
        (client.attempts, client.connections, client.resent),
        (1, 1, 0)
    );
    assert_eq!(
        (server.connections, server.replays, server.relistens),
        (1, 0, 0)
    );
    assert!(client.breaks.is_empty(), "{:?}", client.breaks);
    // The server, idle since it listened, looks at its CM channel every 128 ms by then: it
    // accepts at 255 ms (the first exchange follows at once), and 24 more exchanges of a few
    // microseconds each follow, 10 ms apart.
    assert_eq!(client.finished_at, Duration::from_nanos(495_406_732));
}

#[test]
fn a_server_whose_device_never_comes_back_makes_both_sides_give_up_with_an_error() {
    use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
    let gone = FaultPlan::new().scheduled(
        Trigger::at(Duration::from_millis(300)),
        FaultAction::RemoveDevice {
            host: "server".into(),
        },
    );
    let faults = Faults {
        loss: 0.0,
        cm: false,
        data_drops: 0,
        data_delays: 0,
        removal: None,
        plan: gone,
    };
    let run = simulated::run(3, REQUESTS, Some(&faults)).expect("a valid plan");
    let outcome = run.outcome.expect_err("nobody can finish");
    let lines: Vec<&str> = outcome.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "process server failed: application error: cannot listen on 10.0.0.1:7472 within \
             60s: rdma_bind_addr: ENODEV (19): 10.0.0.1 belongs to a removed RDMA device",
            "process client failed: application error: gave up after 30 attempts in a row \
             without an answer (request 6 of 25): event RDMA_CM_EVENT_ADDR_ERROR",
        ]
    );
    assert!(run.client.is_none() && run.server.is_none());
    // The server tried to listen again for 60 s from 300 ms on (every 50 ms). The client had
    // 5 answers; its connection then failed (transport retries exceeded: the first send and
    // its 6 retransmissions, 67.108864 ms apart), and 29 attempts more ended in ADDR_ERROR,
    // each after the 2 s resolve timeout (no neighbour answers for 10.0.0.1), with backoffs of
    // 20 ms doubling to 1 s between them: 30 failures in a row.
    assert_eq!(run.end, Duration::from_nanos(83_034_870_984));
    let t = &run.trace;
    let retry_exceeded = count(t, |l| {
        l.contains(" client ") && l.contains("Send transport retry counter exceeded")
    });
    assert_eq!(retry_exceeded, 1);
    assert_eq!(
        count(t, |l| l.contains("deliver RDMA_CM_EVENT_ADDR_ERROR")),
        29
    );
}
