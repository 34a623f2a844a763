//! The scheduler of simulated processes and the robustness of the `Fabric` API: wakeups that
//! cost the same whatever the number of blocked processes, polls that let virtual time
//! advance, misuse of `run` and of threads refused with errors, migration under a waiting
//! process, panics with odd payloads, inputs that used to overflow, and the single-threaded
//! driving API.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, QpInitAttr,
    QpType, Transport, Wait,
};
use cmtwin_sim::{Fabric, FabricError, MessageKind, SimConfig, SimError};

const A_IP: &str = "10.0.0.1";
const B_IP: &str = "10.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

fn two_hosts_with(config: SimConfig) -> Fabric {
    Fabric::builder(1)
        .config(config)
        .host("a", Transport::Roce, &[ip(A_IP)])
        .host("b", Transport::Roce, &[ip(B_IP)])
        .build()
        .expect("a valid configuration")
}

fn two_hosts() -> Fabric {
    two_hosts_with(SimConfig::default())
}

/// A handle one process publishes for another.
type Slot<T> = Arc<Mutex<Option<T>>>;

fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(None))
}

fn take<T: Copy>(s: &Slot<T>) -> T {
    s.lock()
        .unwrap()
        .expect("published by a process that ran first")
}

// ----- 1. per-process wakeups --------------------------------------------------------------

/// A ping-pong of `rounds` USER events between two processes while `sleepers` other processes
/// are blocked in a long sleep: every round answers the right number, no sleeper runs before
/// its deadline, and the whole exchange takes no virtual time. (What a switch costs is measured
/// by the `sim_switch` benchmark, not here.)
fn ping_pong_beside_sleepers(sleepers: usize, rounds: u64) {
    let fabric = two_hosts();
    let ping_id: Slot<(ChannelHandle, IdHandle)> = slot();
    let pong_id: Slot<(ChannelHandle, IdHandle)> = slot();
    let done_at: Slot<Duration> = slot();
    let (p1, p2, d) = (ping_id.clone(), pong_id.clone(), done_at.clone());
    fabric.spawn("a", "ping", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        *p1.lock().unwrap() = Some((ch, cm.create_id(Some(ch), 0, PortSpace::UDP)?));
        cm.sleep(Duration::from_nanos(1))?; // everyone else blocks first
        let (_, pong) = take(&p2);
        for r in 0..rounds {
            cm.write_cm_event(pong, EventKind::User, 0, r)?;
            let reply = cm.get_cm_event(ch, Wait::Block)?;
            assert_eq!(reply.user_arg(), Some(r), "pong answers round {r}");
            cm.ack_cm_event(reply)?;
        }
        *d.lock().unwrap() = Some(cm.now());
        Ok(())
    });
    let (p1, p2) = (ping_id.clone(), pong_id.clone());
    fabric.spawn("a", "pong", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        *p2.lock().unwrap() = Some((ch, cm.create_id(Some(ch), 0, PortSpace::UDP)?));
        for _ in 0..rounds {
            let ev = cm.get_cm_event(ch, Wait::Block)?;
            let r = ev.user_arg().expect("a USER event");
            cm.ack_cm_event(ev)?;
            cm.write_cm_event(take(&p1).1, EventKind::User, 0, r)?;
        }
        Ok(())
    });
    for n in 0..sleepers {
        fabric.spawn("b", &format!("sleeper{n}"), |cm| {
            assert_eq!(cm.now(), Duration::ZERO);
            cm.sleep(Duration::from_secs(3600))?;
            assert_eq!(cm.now(), Duration::from_secs(3600), "woken at its deadline");
            Ok(())
        });
    }
    fabric.run().expect("every process ends");
    assert_eq!(
        take(&done_at),
        Duration::from_nanos(1),
        "the ping-pong takes no virtual time"
    );
    assert_eq!(
        fabric.now(),
        Duration::from_secs(3600),
        "the sleepers end at 3600 s"
    );
}

/// Passing the baton wakes only the process that gets it: a ping-pong beside 1 or 100 blocked
/// processes runs the same (the old scheduler woke every blocked process at each switch).
#[test]
fn a_ping_pong_runs_beside_1_or_100_blocked_processes() {
    ping_pong_beside_sleepers(1, 500);
    ping_pong_beside_sleepers(100, 500);
}

// ----- 2. polls yield -------------------------------------------------------------------------

/// A process busy-polling with NonBlocking for a USER event that another process writes after
/// a 5 ms sleep: each unproductive poll yields (the writer runs, then the timeline reaches the
/// writer's wake-up), so the loop ends at exactly 5 ms after two EAGAINs.
#[test]
fn a_nonblocking_busy_poll_lets_the_writer_run() {
    let fabric = two_hosts();
    let target: Slot<IdHandle> = slot();
    let polls: Slot<(u32, Duration, Option<u64>)> = slot();
    let (t, p) = (target.clone(), polls.clone());
    fabric.spawn("a", "poller", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        *t.lock().unwrap() = Some(cm.create_id(Some(ch), 0, PortSpace::UDP)?);
        let mut eagain = 0;
        let event = loop {
            match cm.get_cm_event(ch, Wait::NonBlocking) {
                Ok(event) => break event,
                Err(e) if e.errno == Errno::EAGAIN && eagain < 1000 => eagain += 1,
                Err(e) => return Err(e),
            }
        };
        *p.lock().unwrap() = Some((eagain, cm.now(), event.user_arg()));
        cm.ack_cm_event(event)
    });
    let t = target.clone();
    fabric.spawn("a", "writer", move |cm| -> Result<(), CmError> {
        cm.sleep(Duration::from_millis(5))?;
        cm.write_cm_event(take(&t), EventKind::User, 0, 42)
    });
    fabric.run().expect("both processes end");
    assert_eq!(take(&polls), (2, Duration::from_millis(5), Some(42)));
}

/// A process polling with a zero timeout for ADDR_RESOLVED (produced by the timeline, an ARP
/// round trip of 2 × 5 µs after the call): its first poll advances the timeline to it.
#[test]
fn a_zero_timeout_poll_advances_virtual_time() {
    let fabric = two_hosts();
    let seen: Slot<(u32, Duration, EventKind)> = slot();
    let s = seen.clone();
    fabric.spawn("a", "poller", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
        let dst = SocketAddr::new(ip(B_IP), 7000);
        cm.resolve_addr(id, None, dst, Duration::from_secs(1))?;
        let mut timeouts = 0;
        let event = loop {
            match cm.get_cm_event(ch, Wait::Timeout(Duration::ZERO)) {
                Ok(event) => break event,
                Err(e) if e.errno == Errno::ETIMEDOUT && timeouts < 1000 => timeouts += 1,
                Err(e) => return Err(e),
            }
        };
        *s.lock().unwrap() = Some((timeouts, cm.now(), event.kind()));
        cm.ack_cm_event(event)
    });
    fabric.run().expect("the poller ends");
    assert_eq!(
        take(&seen),
        (0, Duration::from_micros(10), EventKind::AddrResolved)
    );
}

/// Two processes that both busy-poll with NonBlocking, each for an event the timeline brings
/// (ADDR_RESOLVED after the ARP round trip of 2 × 5 µs): when every process that can run has
/// polled in vain, virtual time moves on, so neither hands the baton round for ever at time
/// 0. Each gets its event at exactly 10 µs (before, the polls alternated without end until
/// the loop's bound failed them).
#[test]
fn processes_that_all_poll_let_virtual_time_advance() {
    let fabric = two_hosts();
    let seen: [Slot<(u32, Duration, EventKind)>; 2] = [slot(), slot()];
    for (name, dst, s) in [("p1", B_IP, seen[0].clone()), ("p2", A_IP, seen[1].clone())] {
        let host = if name == "p1" { "a" } else { "b" };
        fabric.spawn(host, name, move |cm| -> Result<(), CmError> {
            let ch = cm.create_event_channel()?;
            let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
            let dst = SocketAddr::new(ip(dst), 7000);
            cm.resolve_addr(id, None, dst, Duration::from_secs(1))?;
            let mut eagain = 0;
            let event = loop {
                match cm.get_cm_event(ch, Wait::NonBlocking) {
                    Ok(event) => break event,
                    Err(e) if e.errno == Errno::EAGAIN && eagain < 10_000 => eagain += 1,
                    Err(e) => return Err(e),
                }
            };
            *s.lock().unwrap() = Some((eagain, cm.now(), event.kind()));
            cm.ack_cm_event(event)?;
            cm.destroy_id(id)?;
            cm.destroy_event_channel(ch)
        });
    }
    fabric.run().expect("both pollers end");
    // p1's first poll yields to p2, whose calls may be what p1 looks for: p1's poll no longer
    // stands. p2 polls in vain, p1 looks again in vain (one EAGAIN); with both polls standing
    // the timeline runs (p1's ADDR_RESOLVED at 10 µs), p2 looks in vain again (its own event is
    // the next action), p1's second look inside its call finds its event, and p2's next poll
    // lets the timeline run its event: two EAGAINs.
    let got: Vec<_> = seen.iter().map(take).collect();
    let at = Duration::from_micros(10);
    assert_eq!(
        got,
        [
            (1, at, EventKind::AddrResolved),
            (2, at, EventKind::AddrResolved)
        ]
    );
}

/// A vain poll of one channel while another channel of the process already holds an event
/// does not move virtual time to the timeline's next action: the process would look there
/// microseconds later. Here ADDR_RESOLVED is queued on the first channel at 10 µs; at 1 ms the
/// process polls the second channel (whose id resolves an address nobody has: its ADDR_ERROR
/// comes only at 2 s) and then the first, and gets the event at 1 ms (before, the vain poll
/// ran the timeline up to the ADDR_ERROR and the event was fetched at 2 s).
#[test]
fn a_vain_poll_does_not_skip_time_past_input_waiting_elsewhere() {
    let fabric = two_hosts();
    let seen: Slot<(Duration, EventKind, Duration)> = slot();
    let s = seen.clone();
    fabric.spawn("a", "poller", move |cm| -> Result<(), CmError> {
        let (ch1, ch2) = (cm.create_event_channel()?, cm.create_event_channel()?);
        let id1 = cm.create_id(Some(ch1), 0, PortSpace::TCP)?;
        let id2 = cm.create_id(Some(ch2), 0, PortSpace::TCP)?;
        let timeout = Duration::from_secs(2);
        cm.resolve_addr(id1, None, SocketAddr::new(ip(B_IP), 7000), timeout)?;
        cm.resolve_addr(id2, None, SocketAddr::new(ip("10.0.0.99"), 7000), timeout)?;
        cm.sleep(Duration::from_millis(1))?;
        let errno = cm
            .get_cm_event(ch2, Wait::NonBlocking)
            .map(|_| ())
            .unwrap_err()
            .errno;
        assert_eq!(errno, Errno::EAGAIN);
        let event = cm.get_cm_event(ch1, Wait::NonBlocking)?;
        let got = (cm.now(), event.kind());
        cm.ack_cm_event(event)?;
        let late = cm.get_cm_event(ch2, Wait::Block)?;
        assert_eq!(late.kind(), EventKind::AddrError);
        *s.lock().unwrap() = Some((got.0, got.1, cm.now()));
        cm.ack_cm_event(late)?;
        for id in [id1, id2] {
            cm.destroy_id(id)?;
        }
        cm.destroy_event_channel(ch1)?;
        cm.destroy_event_channel(ch2)
    });
    fabric.run().expect("the poller ends");
    assert_eq!(
        take(&seen),
        (
            Duration::from_millis(1),
            EventKind::AddrResolved,
            Duration::from_secs(2)
        )
    );
}

/// Two processes that poll for ever for events nothing will produce (no call of theirs is in
/// flight and the timeline is empty): the run is livelocked, and once each has polled in vain
/// 10 000 times in a row with nothing changed, the poll fails with EDEADLK naming the
/// livelock, where on hardware both would spin for ever (before, the run never returned).
#[test]
fn processes_polling_for_ever_for_nothing_get_edeadlk() {
    let fabric = two_hosts();
    let seen: [Slot<(u32, Errno, Duration)>; 2] = [slot(), slot()];
    for (host, s) in [("a", seen[0].clone()), ("b", seen[1].clone())] {
        fabric.spawn(host, host, move |cm| -> Result<(), CmError> {
            let ch = cm.create_event_channel()?;
            let mut polls = 0;
            let err = loop {
                match cm.get_cm_event(ch, Wait::NonBlocking) {
                    Err(e) if e.errno == Errno::EAGAIN && polls < 1_000_000 => polls += 1,
                    Err(e) => break e,
                    Ok(event) => panic!("no event can come, got {event:?}"),
                }
            };
            assert!(err.to_string().contains("livelock"), "{err}");
            *s.lock().unwrap() = Some((polls, err.errno, cm.now()));
            cm.destroy_event_channel(ch)
        });
    }
    fabric
        .run()
        .expect("both pollers learn of the livelock and end");
    // Each poll yields to the other: a's 10 001st poll finds both at 10 000 and fails. Then
    // a destroys its channel, a change, so b's run of vain polls starts again: b, alone now,
    // fails at its next 10 000th.
    assert_eq!(take(&seen[0]), (10_000, Errno::EDEADLK, Duration::ZERO));
    assert_eq!(take(&seen[1]), (19_999, Errno::EDEADLK, Duration::ZERO));
}

/// A process spinning on `cmtwin::thread::yield_now` for a flag that nothing will set cannot be
/// told by an error: its run fails with the livelock report instead of spinning for ever.
#[test]
fn a_spin_on_yield_now_for_nothing_fails_the_run() {
    let fabric = two_hosts();
    fabric.spawn("a", "spinner", move |_cm| -> Result<(), CmError> {
        loop {
            cmtwin::thread::yield_now();
        }
    });
    let err = fabric.run().expect_err("the spinner is ended");
    let SimError::Failed { failures, .. } = &err else {
        panic!("not a failed run: {err}");
    };
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("process spinner failed: livelock: every process that can run"),
        "{}",
        failures[0]
    );
}

/// A thread spinning on `yield_now` for a flag that its process's event thread sets (cmtime's
/// main loop) sees it as soon as the event thread has run, even while a process on the other
/// host spins too and a far timer (a 5 s sleep) is on the timeline: ADDR_RESOLVED comes at
/// 10 µs, so the flag is seen at 10 µs whatever the seed. Before, in 7 seeds of 20 the event
/// thread was passed over until the next action of the timeline, the sleep's end at 5 s.
#[test]
fn a_yield_spin_sees_a_flag_its_event_thread_sets_without_waiting_for_the_timeline() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for seed in 0..20 {
        let fabric = Fabric::builder(seed)
            .host("a", Transport::Roce, &[ip(A_IP)])
            .host("b", Transport::Roce, &[ip(B_IP)])
            .build()
            .expect("a valid configuration");
        fabric.spawn("b", "sleeper", |cm| cm.sleep(Duration::from_secs(5)));
        let done = Arc::new(AtomicBool::new(false));
        let other_done = done.clone();
        fabric.spawn("b", "other spinner", move |_cm| -> Result<(), CmError> {
            while !other_done.load(Ordering::SeqCst) {
                cmtwin::thread::yield_now();
            }
            Ok(())
        });
        let seen: Slot<Duration> = slot();
        let s = seen.clone();
        fabric.spawn("a", "main", move |cm| -> Result<(), CmError> {
            let ch = cm.create_event_channel()?;
            let flag = Arc::new(AtomicBool::new(false));
            let (events_cm, set) = (cm.clone(), flag.clone());
            let events = cmtwin::thread::spawn("events", move || -> Result<(), CmError> {
                let event = events_cm.get_cm_event(ch, Wait::Block)?;
                events_cm.ack_cm_event(event)?;
                set.store(true, Ordering::SeqCst);
                Ok(())
            })?;
            let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
            let start = cm.now();
            let dst = SocketAddr::new(ip(B_IP), 7471);
            cm.resolve_addr(id, None, dst, Duration::from_secs(2))?;
            while !flag.load(Ordering::SeqCst) {
                cmtwin::thread::yield_now();
            }
            *s.lock().unwrap() = Some(cm.now() - start);
            done.store(true, Ordering::SeqCst);
            events.join()??;
            cm.destroy_id(id)?;
            cm.destroy_event_channel(ch)
        });
        fabric.run().expect("every process ends");
        assert_eq!(take(&seen), Duration::from_micros(10), "seed {seed}");
    }
}

/// Polls in vain are no livelock while another process makes calls that change things, even
/// with nothing in the timeline: a poller waits beside a process that creates and destroys
/// 30 000 ids (three times the livelock threshold's polls), then gets the event the other
/// finally causes.
#[test]
fn polls_beside_a_process_making_calls_are_no_livelock() {
    let fabric = two_hosts();
    let seen: Slot<(u32, EventKind)> = slot();
    let s = seen.clone();
    let (tx, rx) = mpsc::channel::<ChannelHandle>();
    fabric.spawn("a", "poller", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        tx.send(ch).expect("the worker waits for the channel");
        let mut polls = 0;
        let event = loop {
            match cm.get_cm_event(ch, Wait::NonBlocking) {
                Ok(event) => break event,
                Err(e) if e.errno == Errno::EAGAIN => polls += 1,
                Err(e) => return Err(e),
            }
        };
        *s.lock().unwrap() = Some((polls, event.kind()));
        let id = event.id();
        cm.ack_cm_event(event)?;
        cm.destroy_id(id)?;
        cm.destroy_event_channel(ch)
    });
    fabric.spawn("a", "worker", move |cm| -> Result<(), CmError> {
        let ch = rx.recv().expect("the poller sends its channel first");
        for _ in 0..30_000 {
            let id = cm.create_id(None, 0, PortSpace::TCP)?;
            cm.destroy_id(id)?;
            cm.sleep(Duration::ZERO)?;
        }
        let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
        cm.resolve_addr(
            id,
            None,
            SocketAddr::new(ip(B_IP), 7000),
            Duration::from_secs(1),
        )?;
        Ok(())
    });
    fabric.run().expect("the poller gets its event");
    let (polls, kind) = take(&seen);
    assert_eq!(kind, EventKind::AddrResolved);
    // One vain poll per turn of the worker (30 000 zero sleeps), and one more while the ARP
    // round trip of the worker's resolve runs.
    assert_eq!(polls, 30_001);
}

// ----- 3. and 4. misuse of run and of threads -------------------------------------------------

/// `Fabric::run` from inside one of the fabric's processes is refused with an error naming
/// the process (it used to panic on an index).
#[test]
fn run_from_inside_a_process_is_refused() {
    let fabric = Arc::new(two_hosts());
    let inner = Arc::clone(&fabric);
    let outcome: Arc<Mutex<Option<String>>> = slot();
    let o = outcome.clone();
    fabric.spawn("a", "nested", move |cm| -> Result<(), CmError> {
        let err = inner.run().expect_err("a process cannot run its fabric");
        assert!(matches!(
            &err,
            SimError::Refused(FabricError::RunFromProcess { process }) if process == "nested"
        ));
        *o.lock().unwrap() = Some(err.to_string());
        cm.sleep(Duration::from_millis(1))
    });
    fabric.run().expect("the process ends");
    assert_eq!(
        outcome.lock().unwrap().as_deref(),
        Some(
            "simulation not run: Fabric::run called from inside simulated process \"nested\": \
             a process cannot run the fabric it belongs to"
        )
    );
    assert_eq!(fabric.now(), Duration::from_millis(1));
}

/// While `run` is in progress, another thread's `run`, backend calls, fault injection and
/// driving are refused with errors naming the rule; afterwards the thread may drive again.
#[test]
fn other_threads_are_refused_while_run_is_in_progress() {
    let fabric = Arc::new(two_hosts());
    let (ask, asked) = mpsc::channel::<()>();
    let (answer, answers) = mpsc::channel::<Vec<String>>();
    let outsider = {
        let fabric = Arc::clone(&fabric);
        std::thread::spawn(move || {
            asked.recv().expect("the process asks");
            let mut seen = Vec::new();
            seen.push(fabric.run().expect_err("already running").to_string());
            let err = fabric
                .backend("a")
                .create_event_channel()
                .expect_err("not a process");
            seen.push(format!("{:?} {}", err.errno, err.detail));
            seen.push(
                fabric
                    .remove_device("a")
                    .expect_err("not a process")
                    .to_string(),
            );
            seen.push(fabric.step().expect_err("run drives").to_string());
            answer.send(seen).expect("the process listens");
        })
    };
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    fabric.spawn("a", "asker", move |cm| -> Result<(), CmError> {
        cm.sleep(Duration::from_millis(2))?;
        ask.send(()).expect("the outsider listens");
        *r.lock().unwrap() = answers.recv().expect("the outsider answers");
        cm.sleep(Duration::from_millis(1))
    });
    fabric.run().expect("the process ends");
    outsider.join().expect("the outsider ends");
    let results = results.lock().unwrap().clone();
    assert_eq!(
        results,
        vec![
            "simulation not run: Fabric::run is already in progress on another thread".to_string(),
            "EPERM (1) while Fabric::run is in progress only the fabric's own processes may call \
             into it, and this thread is not one of them"
                .to_string(),
            "Fabric::remove_device refused while Fabric::run is in progress: while Fabric::run \
             is in progress only the fabric's own processes may call into it"
                .to_string(),
            "Fabric::step refused while Fabric::run is in progress: Fabric::run drives the \
             timeline while it is in progress (a process sleeps or waits instead)"
                .to_string(),
        ]
    );
    // The refused calls changed nothing: the device is still there, nothing was traced.
    assert_eq!(fabric.now(), Duration::from_millis(3));
    assert!(!fabric.trace_text().contains("removed"));
    assert!(!fabric.trace_text().contains("rdma_create_event_channel"));
    assert_eq!(fabric.step(), Ok(false), "after the run anyone may drive");
}

/// Outside `run`, a blocking call runs the timeline inline; when the timeline empties it fails
/// with EDEADLK at once, whatever other threads might still do, and says so.
#[test]
fn outside_run_a_blocked_call_with_an_empty_timeline_is_edeadlk() {
    let fabric = two_hosts();
    let cm = fabric.backend("a");
    let ch = cm.create_event_channel().expect("a channel");
    let id = cm
        .create_id(Some(ch), 0, PortSpace::UDP)
        .expect("an id on it");
    let waiter = {
        let cm = cm.clone();
        std::thread::spawn(move || cm.get_cm_event(ch, Wait::Block).map(|_| ()))
    };
    let err = waiter
        .join()
        .expect("the waiter returns")
        .expect_err("nothing in the timeline can produce an event");
    assert_eq!((err.call, err.errno), (Call::GetCmEvent, Errno::EDEADLK));
    assert_eq!(
        err.detail,
        format!(
            "deadlock: blocked in rdma_get_cm_event on {ch} and nothing left in the timeline can \
             produce it (outside Fabric::run a blocking call runs the timeline inline and does \
             not wait for other threads)"
        )
    );
    // The event another thread writes afterwards is there for the next call.
    cm.write_cm_event(id, EventKind::User, 0, 7)
        .expect("a USER event");
    let ev = cm.get_cm_event(ch, Wait::Block).expect("the USER event");
    assert_eq!(ev.user_arg(), Some(7));
    cm.ack_cm_event(ev).expect("ack");
}

// ----- 5. migrating a synchronous id under a waiting process -----------------------------------

/// `rdma_migrate_id` of a synchronous listener while another process is blocked in
/// `rdma_get_request` on it: the migration succeeds (as in librdmacm, which destroys the
/// id's private channel), and the blocked call fails with EBADF instead of waiting forever on
/// the destroyed channel (it used to panic). The listener's requests then reach the new
/// channel.
#[test]
fn migrating_a_synchronous_id_fails_the_waiting_call_with_ebadf() {
    let fabric = two_hosts();
    let listener: Slot<IdHandle> = slot();
    let waited: Arc<Mutex<Option<CmError>>> = slot_err();
    let l = listener.clone();
    let w = waited.clone();
    fabric.spawn("a", "server", move |cm| -> Result<(), CmError> {
        let id = cm.create_id(None, 0, PortSpace::TCP)?;
        cm.bind_addr(id, SocketAddr::new(ip(A_IP), 7000))?;
        cm.listen(id, 4)?;
        *l.lock().unwrap() = Some(id);
        let err = cm.get_request(id).expect_err("the id moves away");
        *w.lock().unwrap() = Some(err);
        Ok(())
    });
    let l = listener.clone();
    let migrated: Slot<Duration> = slot();
    let m = migrated.clone();
    fabric.spawn("a", "migrator", move |cm| -> Result<(), CmError> {
        let ch = cm.create_event_channel()?;
        let id = take(&l);
        cm.migrate_id(id, Some(ch))?;
        *m.lock().unwrap() = Some(cm.now());
        // Alive until the server saw the move: the migrator's exit closes its channel file,
        // destroying the listener now on it.
        cm.sleep(Duration::from_millis(1))
    });
    fabric.run().expect("both processes end");
    let err = waited
        .lock()
        .unwrap()
        .clone()
        .expect("the server's call failed");
    assert_eq!((err.call, err.errno), (Call::GetRequest, Errno::EBADF));
    assert_eq!(
        err.detail,
        "rdma_migrate_id moved the synchronous id to another channel while this call waited \
         for its event"
    );
    assert_eq!(take(&migrated), Duration::ZERO);
}

fn slot_err() -> Arc<Mutex<Option<CmError>>> {
    Arc::new(Mutex::new(None))
}

/// Destroying a synchronous id while another process waits in a call on it wakes that process
/// with ENOENT.
#[test]
fn destroying_a_synchronous_id_fails_the_waiting_call_with_enoent() {
    let fabric = two_hosts();
    let listener: Slot<IdHandle> = slot();
    let waited = slot_err();
    let (l, w) = (listener.clone(), waited.clone());
    fabric.spawn("a", "server", move |cm| -> Result<(), CmError> {
        let id = cm.create_id(None, 0, PortSpace::TCP)?;
        cm.bind_addr(id, SocketAddr::new(ip(A_IP), 7000))?;
        cm.listen(id, 4)?;
        *l.lock().unwrap() = Some(id);
        *w.lock().unwrap() = Some(cm.get_request(id).expect_err("the id goes away"));
        Ok(())
    });
    let l = listener.clone();
    fabric.spawn("a", "destroyer", move |cm| cm.destroy_id(take(&l)));
    fabric.run().expect("both processes end");
    let err = waited.lock().unwrap().clone().expect("the call failed");
    assert_eq!(
        (err.call, err.errno, err.detail.as_str()),
        (
            Call::GetRequest,
            Errno::ENOENT,
            "the id was destroyed while waiting"
        )
    );
}

// ----- 6. panics ----------------------------------------------------------------------------

/// A process panicking with a payload that is neither `String` nor `&str` is reported as such
/// (it used to be reported with an empty message), next to the usual string panics.
#[test]
fn panics_are_reported_whatever_their_payload() {
    let fabric = two_hosts();
    fabric.spawn("a", "odd", |_cm| std::panic::panic_any(42u32));
    fabric.spawn("b", "plain", |_cm| panic!("plain {}", 7));
    let err = fabric.run().expect_err("both panic");
    let SimError::Failed { failures, .. } = err else {
        panic!("the processes ran: {err}");
    };
    assert_eq!(
        failures,
        vec![
            "process odd panicked with a payload that is not a string (std::panic::panic_any \
             with a value of another type than String or &str); its content cannot be shown"
                .to_string(),
            "process plain panicked: plain 7".to_string(),
        ]
    );
}

/// A failed run's `Debug` form, which `fabric.run().unwrap()` prints, is its message: the
/// replay line as it can be pasted and one line per failed process (it was the derived form,
/// `Failed { failures: [..], replay: ".." }`, quotes and newlines escaped).
#[test]
fn a_failed_runs_debug_form_is_its_readable_message() {
    let fabric = two_hosts();
    fabric.spawn("a", "first", |_cm| panic!("first"));
    fabric.spawn("b", "second", |_cm| panic!("second"));
    let err = fabric.run().expect_err("both panic");
    assert_eq!(
        format!("{err:?}"),
        format!(
            "simulation failed (replay: {}):\nprocess first panicked: first\n\
             process second panicked: second",
            fabric.replay_line()
        )
    );
    assert_eq!(format!("{err:?}"), err.to_string());
}

// ----- 7. inputs that used to overflow -----------------------------------------------------------

/// A REQ delayed by `Duration::MAX` is delayed to the end of virtual time (it used to panic
/// on a duration overflow): the client's retransmissions follow it on the FIFO link, so the
/// connect ends in UNREACHABLE after 16 × Treq (6144 ms) = 98.304 s (with timers that expire
/// exactly, not on the kernel's timer wheel).
#[test]
fn a_maximal_delay_saturates() {
    let fabric = two_hosts_with(SimConfig {
        kernel_hz: None,
        ..SimConfig::default()
    });
    let server = fabric.backend("a");
    let client = fabric.backend("b");
    let dst = SocketAddr::new(ip(A_IP), 7000);
    let lch = server.create_event_channel().expect("channel");
    let listener = server.create_id(Some(lch), 0, PortSpace::TCP).expect("id");
    server.bind_addr(listener, dst).expect("bind");
    server.listen(listener, 4).expect("listen");
    let ch = client.create_event_channel().expect("channel");
    let id = client.create_id(Some(ch), 0, PortSpace::TCP).expect("id");
    client
        .resolve_addr(id, None, dst, Duration::from_secs(1))
        .expect("resolve_addr");
    expect(&client, ch, EventKind::AddrResolved);
    client
        .resolve_route(id, Duration::from_secs(1))
        .expect("resolve_route");
    expect(&client, ch, EventKind::RouteResolved);
    client
        .create_qp(id, &QpInitAttr::new(QpType::Rc))
        .expect("QP");
    fabric
        .delay_next(MessageKind::Req, 1, Duration::MAX)
        .expect("not during a run");
    client.connect(id, None).expect("connect");
    let sent = fabric.now();
    let ev = client.get_cm_event(ch, Wait::Block).expect("an event");
    assert_eq!((ev.kind(), ev.status()), (EventKind::Unreachable, -110));
    assert_eq!(fabric.now() - sent, Duration::from_millis(98_304));
    client.ack_cm_event(ev).expect("ack");
}

fn expect(cm: &impl CmBackend, ch: ChannelHandle, kind: EventKind) {
    let ev = cm.get_cm_event(ch, Wait::Block).expect("an event");
    assert_eq!(ev.kind(), kind);
    cm.ack_cm_event(ev).expect("ack");
}

/// A wire latency of `Duration::MAX` saturates at the end of virtual time (it used to panic):
/// address resolution (an ARP round trip) completes at exactly u64::MAX ns.
#[test]
fn a_maximal_wire_latency_saturates() {
    let fabric = two_hosts_with(SimConfig {
        wire_latency: Duration::MAX,
        wire_jitter: Duration::MAX,
        ..SimConfig::default()
    });
    let cm = fabric.backend("b");
    let ch = cm.create_event_channel().expect("channel");
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).expect("id");
    cm.resolve_addr(id, None, SocketAddr::new(ip(A_IP), 7000), Duration::MAX)
        .expect("resolve_addr");
    expect(&cm, ch, EventKind::AddrResolved);
    assert_eq!(fabric.now(), Duration::from_nanos(u64::MAX));
}

fn refused(config: SimConfig) -> String {
    match Fabric::builder(1)
        .config(config)
        .host("a", Transport::Roce, &[ip(A_IP)])
        .build()
    {
        Ok(_) => panic!("the configuration must be refused"),
        Err(e) => e.to_string(),
    }
}

/// Configuration values the CM cannot carry are refused when the fabric is built (a packet
/// life time of 255 used to overflow, `max_cm_retries = u32::MAX` used to retry forever); the
/// largest values it can carry are accepted.
#[test]
fn configurations_the_cm_cannot_carry_are_refused() {
    let d = SimConfig::default;
    for hz in [0, 1001, u32::MAX] {
        assert_eq!(
            refused(SimConfig {
                kernel_hz: Some(hz),
                ..d()
            }),
            format!(
                "invalid configuration: kernel_hz = {hz}: between 1 and 1000 (Linux builds \
                 with HZ 100, 250, 300 or 1000)"
            )
        );
    }
    assert_eq!(
        refused(SimConfig {
            packet_life_time: 255,
            ..d()
        }),
        "invalid configuration: packet_life_time = 255: at most 63 (a 6-bit field of the IB \
         path record)"
    );
    assert_eq!(
        refused(SimConfig {
            packet_life_time: 64,
            ..d()
        }),
        "invalid configuration: packet_life_time = 64: at most 63 (a 6-bit field of the IB \
         path record)"
    );
    assert_eq!(
        refused(SimConfig {
            max_cm_retries: u32::MAX,
            ..d()
        }),
        "invalid configuration: max_cm_retries = 4294967295: at most 15 (a 4-bit field of the \
         REQ; the rdma_cm uses 15)"
    );
    assert_eq!(
        refused(SimConfig {
            max_cm_retries: 16,
            ..d()
        }),
        "invalid configuration: max_cm_retries = 16: at most 15 (a 4-bit field of the REQ; the \
         rdma_cm uses 15)"
    );
    assert_eq!(
        refused(SimConfig {
            ca_ack_delay: 32,
            ..d()
        }),
        "invalid configuration: ca_ack_delay = 32: at most 31 (a 5-bit device attribute)"
    );
    assert_eq!(
        refused(SimConfig {
            loss_probability: 1.5,
            ..d()
        }),
        "invalid configuration: loss_probability = 1.5: a probability between 0 and 1"
    );
    assert_eq!(
        refused(SimConfig {
            loss_probability: f64::NAN,
            ..d()
        }),
        "invalid configuration: loss_probability = NaN: a probability between 0 and 1"
    );
    let limits = SimConfig {
        packet_life_time: 63,
        max_cm_retries: 15,
        ca_ack_delay: 31,
        loss_probability: 1.0,
        ..d()
    };
    assert_eq!(limits.validate(), Ok(()));
    assert_eq!(
        limits.timewait(),
        Duration::from_millis(1 << 23),
        "ACK timeout 31: cm_ms(31) = 2^23 ms"
    );
}

/// Fault calls naming an unknown host or a host without devices fail with an error (they used
/// to panic); so does a process spawned on an unknown host, when the fabric runs.
#[test]
fn faults_and_processes_on_unknown_hosts_are_errors() {
    let fabric = Fabric::builder(1)
        .host("a", Transport::Roce, &[ip(A_IP)])
        .host_with_devices("bare", &[])
        .build()
        .expect("a valid configuration");
    let unknown = Err(FabricError::UnknownHost("nowhere".into()));
    let bare = Err(FabricError::NoDevice("bare".into()));
    assert_eq!(fabric.remove_device("nowhere"), unknown);
    assert_eq!(fabric.restore_device("nowhere"), unknown);
    assert_eq!(fabric.address_change("nowhere"), unknown);
    assert_eq!(fabric.remove_device("bare"), bare);
    assert_eq!(fabric.restore_device("bare"), bare);
    assert_eq!(fabric.address_change("bare"), bare);
    assert_eq!(
        fabric.remove_device("bare").unwrap_err().to_string(),
        "host \"bare\" has no RDMA device"
    );
    assert_eq!(fabric.neighbour_change(ip("10.9.9.9")), Ok(()));
    assert_eq!(fabric.multicast_lost(ip("239.0.0.1")), Ok(()));
    fabric.spawn("nowhere", "ghost", |_cm| Ok(()));
    fabric.spawn("a", "real", |cm| cm.sleep(Duration::from_millis(1)));
    let err = fabric.run().expect_err("the ghost cannot start");
    let SimError::Failed { failures, .. } = err else {
        panic!("the run happened: {err}");
    };
    assert_eq!(
        failures,
        vec!["process ghost not started: the fabric has no host named \"nowhere\"".to_string()]
    );
    assert_eq!(fabric.now(), Duration::from_millis(1), "the real one ran");
    assert!(
        !fabric.trace_text().contains("removed"),
        "nothing was injected"
    );
}

// ----- 8. the single-threaded driving API ------------------------------------------------------

/// `next_event_time`, `step` and `run_until` drive the timeline one action at a time with
/// exact virtual times; `run_until` refuses to go back and `run_for(Duration::MAX)` saturates.
#[test]
fn step_next_event_time_and_run_until() {
    let fabric = two_hosts();
    assert_eq!(fabric.next_event_time(), None);
    assert_eq!(fabric.step(), Ok(false));
    let cm = fabric.backend("b");
    let ch = cm.create_event_channel().expect("channel");
    let id = cm.create_id(Some(ch), 0, PortSpace::TCP).expect("id");
    cm.resolve_addr(
        id,
        None,
        SocketAddr::new(ip(A_IP), 7000),
        Duration::from_secs(1),
    )
    .expect("resolve_addr");
    // ARP round trip: 2 × 5 µs.
    assert_eq!(fabric.next_event_time(), Some(Duration::from_micros(10)));
    assert!(matches!(
        cm.get_cm_event(ch, Wait::NonBlocking),
        Err(e) if e.errno == Errno::EAGAIN
    ));
    assert_eq!(fabric.step(), Ok(true));
    assert_eq!(fabric.now(), Duration::from_micros(10));
    let ev = cm
        .get_cm_event(ch, Wait::NonBlocking)
        .expect("the step queued ADDR_RESOLVED");
    assert_eq!(ev.kind(), EventKind::AddrResolved);
    cm.ack_cm_event(ev).expect("ack");
    cm.resolve_route(id, Duration::from_secs(1))
        .expect("resolve_route");
    let route_at = fabric.next_event_time().expect("route resolution pending");
    fabric
        .run_until(Duration::from_millis(5))
        .expect("forward in time");
    assert_eq!(fabric.now(), Duration::from_millis(5));
    assert!(route_at <= Duration::from_millis(5));
    expect(&cm, ch, EventKind::RouteResolved);
    assert_eq!(
        fabric.run_until(Duration::from_millis(4)),
        Err(FabricError::TimeInThePast {
            now: Duration::from_millis(5),
            requested: Duration::from_millis(4),
        })
    );
    assert_eq!(fabric.run_until(Duration::from_millis(5)), Ok(()));
    assert_eq!(fabric.run_for(Duration::MAX), Ok(()));
    assert_eq!(fabric.now(), Duration::from_nanos(u64::MAX));
}
