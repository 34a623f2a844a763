//! Threads inside simulated hosts: the scheduler's seeded choice point (random, PCT,
//! round-robin), preemption at yield points, wake-up latency, `cmtwin::sync` primitives as
//! scheduling points with deadlock reports that name who holds what, threads spawned while the
//! fabric runs, and the same primitives as std's in ordinary threads.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cmtwin::sync::{channel, Condvar, Mutex, Semaphore};
use cmtwin::{thread, CmBackend, CmError, Errno, Transport};
use cmtwin_sim::{Fabric, SchedConfig, SchedPolicy, SimConfig, SimError};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

fn fabric(seed: u64, schedule: SchedConfig) -> Fabric {
    Fabric::builder(seed)
        .config(SimConfig {
            schedule,
            ..SimConfig::default()
        })
        .host("a", Transport::Roce, &[ip("10.0.0.1")])
        .build()
        .expect("a valid configuration")
}

/// The failures of a run that must fail.
fn failures(r: Result<(), SimError>) -> Vec<String> {
    match r {
        Err(SimError::Failed { failures, .. }) => failures,
        other => panic!("expected failed processes, got {other:?}"),
    }
}

// ----- deadlocks -----------------------------------------------------------------------------

/// Two processes take two mutexes in opposite orders: both are told EDEADLK, each report names
/// the mutex it waits for and the process holding it.
#[test]
fn a_deadlock_on_two_mutexes_names_both_processes_and_what_each_holds() {
    let f = fabric(1, SchedConfig::default());
    let m1 = Arc::new(Mutex::named("m1", 0));
    let m2 = Arc::new(Mutex::named("m2", 0));
    for (name, first, second) in [
        ("alice", Arc::clone(&m1), Arc::clone(&m2)),
        ("bob", Arc::clone(&m2), Arc::clone(&m1)),
    ] {
        f.spawn("a", name, move |cm| {
            let _held = first.lock()?;
            cm.sleep(Duration::from_millis(1))?;
            let _both = second.lock()?;
            Ok(())
        });
    }
    let mut got = failures(f.run());
    got.sort();
    assert_eq!(
        got,
        [
            "process alice failed: Mutex::lock: EDEADLK (35): deadlock: process alice blocked \
             in Mutex::lock of the mutex 'm2', held by process bob and nothing left can wake \
             it; also blocked: process bob in Mutex::lock of the mutex 'm1', held by process \
             alice",
            "process bob failed: Mutex::lock: EDEADLK (35): deadlock: process bob blocked in \
             Mutex::lock of the mutex 'm1', held by process alice and nothing left can wake it; \
             also blocked: process alice in Mutex::lock of the mutex 'm2', held by process bob",
        ]
    );
}

/// A lock-order inversion between a process and a thread it spawned: the process gives up at
/// its EDEADLK (`?`) without joining the thread, so the thread's own report is never read;
/// the process's report names the thread's wait as well, so the whole cycle shows. Both take
/// their first mutex at 0 and want the other's after a 10 µs sleep: the deadlock is at 10 µs.
/// (Found by an outside user's program, whose report named only half of the cycle.)
#[test]
fn a_deadlock_report_names_the_other_waits_of_the_cycle() {
    let f = fabric(3, SchedConfig::default());
    let gave_up_at = Arc::new(std::sync::Mutex::new(None));
    let at = Arc::clone(&gave_up_at);
    f.spawn("a", "main", move |cm| {
        let accounts = Arc::new(Mutex::named("accounts", 0));
        let ledger = Arc::new(Mutex::named("ledger", 0));
        let (a, l, worker_cm) = (Arc::clone(&accounts), Arc::clone(&ledger), cm.clone());
        let _unjoined = thread::spawn("worker", move || -> Result<(), CmError> {
            let _l = l.lock()?;
            worker_cm.sleep(Duration::from_micros(10))?;
            let _a = a.lock()?;
            Ok(())
        })?;
        let _a = accounts.lock()?;
        cm.sleep(Duration::from_micros(10))?;
        let _l = ledger
            .lock()
            .inspect_err(|_| *at.lock().unwrap() = Some(cm.now()))?;
        Ok(())
    });
    assert_eq!(
        failures(f.run()),
        [
            "process main failed: Mutex::lock: EDEADLK (35): deadlock: process main blocked in \
             Mutex::lock of the mutex 'ledger', held by process worker and nothing left can \
             wake it; also blocked: process worker in Mutex::lock of the mutex 'accounts', held \
             by process main"
        ]
    );
    assert_eq!(*gave_up_at.lock().unwrap(), Some(Duration::from_micros(10)));
}

/// A condition variable nobody will notify, a semaphore nobody will post, a join of a thread
/// that waits forever: each is reported with the primitive's label.
#[test]
fn waits_that_nothing_can_end_are_reported_with_the_primitive() {
    let f = fabric(2, SchedConfig::default());
    f.spawn("a", "main", |_cm| {
        let sem = Arc::new(Semaphore::named("jobs", 0));
        let waiter = {
            let sem = Arc::clone(&sem);
            thread::spawn("worker", move || sem.acquire())?
        };
        let lock = Mutex::named("state", false);
        let cv = Condvar::named("ready");
        let guard = lock.lock()?;
        let e = cv.wait(guard).expect_err("nobody notifies");
        assert_eq!(
            (e.errno, e.call),
            (Errno::EDEADLK, cmtwin::Call::CondvarWait)
        );
        assert!(
            e.detail.contains(
                "Condvar::wait of the condition variable 'ready' (with the mutex 'state')"
            ),
            "{e}"
        );
        let worker = waiter
            .join()?
            .expect_err("the worker was told it deadlocked");
        assert!(
            worker
                .detail
                .contains("Semaphore::acquire of the semaphore 'jobs'"),
            "{worker}"
        );
        Ok(())
    });
    f.run().expect("main saw both deadlocks and returned");
}

// ----- primitives at work --------------------------------------------------------------------

/// A CM-thread-and-workers shape: main spawns three workers, hands each job through its own
/// channel, workers answer through a shared channel, count finished jobs on a semaphore and
/// flag the last one under a mutex with a condition variable. Every answer arrives once (main
/// checks); returned: the order in which workers took their jobs, and the trace.
fn workers_run(seed: u64, schedule: SchedConfig) -> (Vec<(u32, u64)>, String) {
    let f = fabric(seed, schedule);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&answers);
    f.spawn("a", "main", move |cm| {
        let (answer_tx, answer_rx) = channel();
        let finished = Arc::new(Semaphore::new(0));
        let last = Arc::new((Mutex::new(0u32), Condvar::new()));
        let mut job_txs = Vec::new();
        let mut handles = Vec::new();
        for w in 0..3u32 {
            let (tx, rx) = channel::<u64>();
            job_txs.push(tx);
            let (answer_tx, finished, last) =
                (answer_tx.clone(), Arc::clone(&finished), Arc::clone(&last));
            let cm = cm.clone();
            let log = Arc::clone(&out);
            handles.push(thread::spawn(&format!("worker{w}"), move || {
                while let Ok(job) = rx.recv() {
                    log.lock()?.push((w, job));
                    cm.sleep(Duration::from_micros(job))?;
                    answer_tx.send((w, job * job))?;
                    finished.release()?;
                }
                let (count, cv) = &*last;
                *count.lock()? += 1;
                cv.notify_all()?;
                Ok::<(), CmError>(())
            })?);
        }
        drop(answer_tx);
        for job in 1..=9u64 {
            job_txs[(job % 3) as usize].send(job)?;
        }
        for _ in 1..=9 {
            finished.acquire()?;
        }
        drop(job_txs);
        let (count, cv) = &*last;
        let mut done = count.lock()?;
        while *done < 3 {
            done = cv.wait(done)?;
        }
        drop(done);
        for h in handles {
            h.join()??;
        }
        let mut answered: Vec<(u32, u64)> = std::iter::from_fn(|| answer_rx.recv().ok()).collect();
        answered.sort();
        let want: Vec<(u32, u64)> = (1..=9u64).map(|j| ((j % 3) as u32, j * j)).collect();
        let mut want = want;
        want.sort();
        if answered != want {
            return Err(CmError::application(format!("answers {answered:?}")));
        }
        Ok(())
    });
    f.run().expect("the workers finish");
    let got = answers.lock().expect("the run is over").clone();
    (got, f.trace_text())
}

#[test]
fn workers_fed_by_channels_take_every_job_once() {
    let (mut got, _) = workers_run(3, SchedConfig::default());
    got.sort();
    let want: Vec<(u32, u64)> = (1..=9u64).map(|j| ((j % 3) as u32, j)).collect();
    let mut want = want;
    want.sort();
    assert_eq!(got, want);
}

/// The same seed gives the same interleaving and the same trace, byte for byte, under every
/// policy; different seeds give different interleavings.
#[test]
fn a_seed_fixes_the_interleaving_and_other_seeds_change_it() {
    let schedules = [
        SchedConfig::default(),
        SchedConfig {
            preempt: 0.5,
            wake_latency: Duration::from_micros(3),
            ..SchedConfig::default()
        },
        SchedConfig {
            policy: SchedPolicy::Pct {
                depth: 3,
                steps: 50,
            },
            ..SchedConfig::default()
        },
    ];
    for schedule in schedules {
        let orders: Vec<Vec<(u32, u64)>> = (0..12)
            .map(|seed| {
                let first = workers_run(seed, schedule);
                assert_eq!(
                    first,
                    workers_run(seed, schedule),
                    "seed {seed} {schedule:?}"
                );
                first.0
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = orders.iter().collect();
        assert!(
            distinct.len() > 1,
            "{schedule:?}: every seed ran the same order"
        );
    }
}

/// Round-robin hands over only when a process blocks, in registration order: three processes
/// that each record their name and yield three times interleave a, b, c, a, b, c, ...
#[test]
fn round_robin_alternates_in_registration_order() {
    let f = fabric(4, SchedConfig::round_robin());
    let log = Arc::new(Mutex::new(String::new()));
    for name in ["a", "b", "c"] {
        let log = Arc::clone(&log);
        f.spawn("a", name, move |_cm| {
            for _ in 0..3 {
                log.lock()?.push_str(name);
                thread::yield_now();
            }
            Ok(())
        });
    }
    f.run().expect("no process fails");
    assert_eq!(*log.lock().expect("run over"), "abcabcabc");
}

/// With preemption certain, a process is preempted at every yield point where another can run:
/// two processes that each take a mutex twice never take it twice in a row.
#[test]
fn certain_preemption_switches_at_every_yield_point() {
    let schedule = SchedConfig {
        policy: SchedPolicy::RoundRobin,
        preempt: 1.0,
        ..SchedConfig::default()
    };
    let f = fabric(5, schedule);
    let log = Arc::new(Mutex::new(String::new()));
    for name in ["x", "y"] {
        let log = Arc::clone(&log);
        f.spawn("a", name, move |_cm| {
            for _ in 0..3 {
                log.lock()?.push_str(name);
            }
            Ok(())
        });
    }
    f.run().expect("no process fails");
    assert_eq!(*log.lock().expect("run over"), "xyxyxy");
}

/// A woken process runs after its seeded wake-up latency: a 1 ms sleep ends between 1 ms and
/// 1 ms + the latency bound, at the same instant for the same seed, at other instants for
/// other seeds; with no latency it ends at exactly 1 ms.
#[test]
fn a_woken_process_runs_after_its_seeded_wake_up_latency() {
    let woke_at = |seed: u64, latency: Duration| {
        let f = fabric(
            seed,
            SchedConfig {
                wake_latency: latency,
                ..SchedConfig::default()
            },
        );
        let at = Arc::new(Mutex::new(Duration::ZERO));
        let out = Arc::clone(&at);
        f.spawn("a", "sleeper", move |cm| {
            cm.sleep(Duration::from_millis(1))?;
            *out.lock()? = cm.now();
            Ok(())
        });
        f.run().expect("the sleeper returns");
        let t = *at.lock().expect("run over");
        t
    };
    assert_eq!(woke_at(1, Duration::ZERO), Duration::from_millis(1));
    let bound = Duration::from_micros(100);
    let times: Vec<Duration> = (0..10).map(|s| woke_at(s, bound)).collect();
    for (seed, t) in times.iter().enumerate() {
        assert!(*t >= Duration::from_millis(1) && *t <= Duration::from_millis(1) + bound);
        assert_eq!(*t, woke_at(seed as u64, bound), "seed {seed}");
    }
    let distinct: std::collections::BTreeSet<_> = times.iter().collect();
    assert!(distinct.len() > 5, "{times:?}");
}

// ----- spawning ------------------------------------------------------------------------------

/// A spawned thread that panics fails the run naming it, and its join says so (ECANCELED).
#[test]
fn a_spawned_thread_that_panics_is_reported_and_its_join_fails() {
    let f = fabric(6, SchedConfig::default());
    f.spawn("a", "parent", |_cm| {
        let child = thread::spawn("child", || -> u32 { panic!("child gave up") })?;
        let e = child.join().expect_err("the child panicked");
        assert_eq!(e.errno, Errno::ECANCELED);
        assert_eq!(e.detail, "thread 'child' panicked: child gave up");
        Ok(())
    });
    assert_eq!(failures(f.run()), ["process child panicked: child gave up"]);
}

/// Threads spawned by spawned threads are joined by the run; values come back through join.
#[test]
fn spawned_threads_may_spawn_and_return_values() {
    let f = fabric(7, SchedConfig::default());
    let total = Arc::new(Mutex::new(0u64));
    let out = Arc::clone(&total);
    f.spawn("a", "root", move |_cm| {
        let mut handles = Vec::new();
        for i in 0..4u64 {
            handles.push(thread::spawn(&format!("mid{i}"), move || {
                let leaf = thread::spawn(&format!("leaf{i}"), move || i * 10)?;
                Ok::<u64, CmError>(i + leaf.join()?)
            })?);
        }
        for h in handles {
            *out.lock()? += h.join()??;
        }
        Ok(())
    });
    f.run().expect("every thread finishes");
    assert_eq!(*total.lock().expect("run over"), 66);
}

/// The application's random numbers follow the seed.
#[test]
fn random_numbers_for_the_application_follow_the_seed() {
    let draw = |seed| {
        let f = fabric(seed, SchedConfig::default());
        let got = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&got);
        f.spawn("a", "p", move |_cm| {
            let mut v = out.lock()?;
            v.extend((0..4).map(|_| thread::random_u64()));
            Ok(())
        });
        f.run().expect("the process returns");
        let v = got.lock().expect("run over").clone();
        v
    };
    assert_eq!(draw(8), draw(8));
    assert_ne!(draw(8), draw(9));
}

// ----- misuse ------------------------------------------------------------------------------

/// While a fabric runs, an ordinary thread may not use a primitive its processes use (EPERM
/// naming the primitive); once the run is over it may.
#[test]
fn an_ordinary_thread_may_not_use_a_running_fabrics_primitive() {
    let f = fabric(9, SchedConfig::default());
    let shared = Arc::new(Mutex::named("shared", 1));
    let inside = Arc::clone(&shared);
    f.spawn("a", "p", move |_cm| {
        *inside.lock()? += 1;
        let outsider = Arc::clone(&inside);
        // An OS thread outside the fabric, joined before the process goes on.
        let refused = std::thread::spawn(move || outsider.lock().map(|g| *g))
            .join()
            .expect("the outsider does not panic");
        let e = refused.expect_err("refused while the run is in progress");
        assert_eq!(e.errno, Errno::EPERM);
        assert!(e.detail.contains("mutex 'shared'"), "{e}");
        Ok(())
    });
    f.run().expect("the process returns");
    assert_eq!(*shared.lock().expect("free after the run"), 2);
}

/// Out-of-range schedules are refused when the fabric is built, naming the field.
#[test]
fn an_invalid_schedule_is_refused_at_build() {
    let e = Fabric::builder(1)
        .schedule(SchedConfig {
            preempt: -0.5,
            ..SchedConfig::default()
        })
        .build()
        .err()
        .expect("refused");
    assert!(e.to_string().contains("schedule.preempt"), "{e}");
}

/// An application's own error prints as such, not as a call's errno.
#[test]
fn an_application_error_is_not_a_calls_errno() {
    let e = CmError::application("the reply did not match the request");
    assert!(e.is_application());
    assert_eq!(
        e.to_string(),
        "application error: the reply did not match the request"
    );
}

// ----- outside any fabric ----------------------------------------------------------------------

/// In ordinary threads, the same code runs on std's threads and primitives.
#[test]
fn outside_a_fabric_the_primitives_are_std() {
    let (tx, rx) = channel();
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let sem = Arc::new(Semaphore::new(0));
    let mut handles = Vec::new();
    for i in 0..4u32 {
        let (tx, pair, sem) = (tx.clone(), Arc::clone(&pair), Arc::clone(&sem));
        handles.push(
            thread::spawn(&format!("os{i}"), move || -> cmtwin::Result<u32> {
                tx.send(i)?;
                let (n, cv) = &*pair;
                *n.lock()? += 1;
                cv.notify_all()?;
                sem.acquire()?;
                Ok(i * 2)
            })
            .expect("an OS thread starts"),
        );
    }
    drop(tx);
    let (n, cv) = &*pair;
    let mut g = n.lock().expect("std mutex");
    while *g < 4 {
        g = cv.wait(g).expect("std condvar");
    }
    drop(g);
    for _ in 0..4 {
        sem.release().expect("std semaphore");
    }
    let mut sum = 0;
    for h in handles {
        sum += h.join().expect("no panic").expect("no error");
    }
    assert_eq!(sum, 12);
    let mut got: Vec<u32> = std::iter::from_fn(|| rx.recv().ok()).collect();
    got.sort();
    assert_eq!(got, [0, 1, 2, 3]);
    let e = rx.recv().expect_err("closed");
    assert_eq!(e.errno, Errno::EPIPE);
}

// ----- a process crash ---------------------------------------------------------------------

/// A client process (and the thread it spawned) crashes 5 ms into the run, connected: the
/// kernel closes its channel, destroying its id as `rdma_destroy_id` would, so the server gets
/// DISCONNECTED (the crashed side's DREQ); the client's threads stop where they were blocked,
/// their destructors run, and the run counts the crash as a fault, not a failure.
fn crash_run(seed: u64) -> (Duration, String, bool) {
    use cmtwin::{ConnParam, EventKind, PortSpace, QpInitAttr, QpType, Wait};
    use cmtwin_sim::{FaultAction, FaultPlan, Trigger};
    let f = Fabric::builder(seed)
        .host("server", Transport::Roce, &[ip("10.0.0.1")])
        .host("client", Transport::Roce, &[ip("10.0.0.2")])
        .plan(FaultPlan::new().scheduled(
            Trigger::Time { at_ms: 5 },
            FaultAction::CrashProcess {
                process: "client".into(),
            },
        ))
        .build()
        .expect("a valid configuration");
    let addr: std::net::SocketAddr = "10.0.0.1:7000".parse().expect("literal");
    let disconnected_at = Arc::new(Mutex::new(Duration::ZERO));
    let out = Arc::clone(&disconnected_at);
    f.spawn("server", "server", move |cm| {
        let ch = cm.create_event_channel()?;
        let l = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
        cm.bind_addr(l, addr)?;
        cm.listen(l, 1)?;
        let req = cmtwin::expect_event(&cm, ch, EventKind::ConnectRequest, Wait::Block)
            .map_err(|e| CmError::application(e.to_string()))?;
        cm.create_qp(req.id, &QpInitAttr::new(QpType::Rc))?;
        cm.accept(req.id, None)?;
        for kind in [EventKind::Established, EventKind::Disconnected] {
            cmtwin::expect_event(&cm, ch, kind, Wait::Block)
                .map_err(|e| CmError::application(e.to_string()))?;
        }
        *out.lock()? = cm.now();
        cm.disconnect(req.id)?;
        cm.destroy_qp(req.id)?;
        cm.destroy_id(req.id)?;
        cm.destroy_id(l)
    });
    let unwound = Arc::new(Mutex::new(false));
    let flag = Arc::clone(&unwound);
    f.spawn("client", "client", move |cm| {
        /// Sets its flag when dropped: the crashed thread's destructors run.
        struct Unwound(Arc<Mutex<bool>>);
        impl Drop for Unwound {
            fn drop(&mut self) {
                if let Ok(mut f) = self.0.lock() {
                    *f = true;
                }
            }
        }
        let _guard = Unwound(flag);
        let helper = thread::spawn("client-helper", || {
            let never = Semaphore::named("never posted", 0);
            never.acquire()
        })?;
        cm.sleep(Duration::from_millis(1))?;
        let ch = cm.create_event_channel()?;
        let id = cm.create_id(Some(ch), 0, PortSpace::TCP)?;
        cm.resolve_addr(id, None, addr, Duration::from_secs(2))?;
        cm.get_cm_event(ch, Wait::Block)
            .and_then(|e| cm.ack_cm_event(e))?;
        cm.resolve_route(id, Duration::from_secs(2))?;
        cm.get_cm_event(ch, Wait::Block)
            .and_then(|e| cm.ack_cm_event(e))?;
        cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
        cm.connect(id, Some(&ConnParam::default()))?;
        cm.get_cm_event(ch, Wait::Block)
            .and_then(|e| cm.ack_cm_event(e))?;
        // Blocks until the crash: nothing else will come.
        let _ = cm.get_cm_event(ch, Wait::Block);
        helper.join()??;
        Err(CmError::application("the crashed client went on"))
    });
    f.run().expect("a crash is a fault, not a failure");
    let at = *disconnected_at.lock().expect("run over");
    let unwound = *unwound.lock().expect("run over");
    (at, f.trace_text(), unwound)
}

#[test]
fn a_crashed_process_is_closed_by_the_kernel_and_its_threads_stop() {
    let (at, trace, unwound) = crash_run(1);
    assert!(unwound, "the crashed thread's destructors ran");
    assert!(
        at > Duration::from_millis(5),
        "DISCONNECTED after the crash: {at:?}"
    );
    let crash = trace
        .find("process client crashes")
        .expect("the crash is traced");
    let dreq = trace[crash..]
        .find("DREQ")
        .expect("the closed id's DREQ follows");
    assert!(dreq > 0);
    assert_eq!(crash_run(1), (at, trace, true), "same seed, same run");
}
