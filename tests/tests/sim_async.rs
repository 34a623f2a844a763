//! Async protocol code on the simulator: `cmtwin::task`'s executor waits through the fabric in
//! virtual time (exact instants), a seed fixes the whole run (traces compared byte for byte),
//! many connections share one process as tasks, and misuse fails with the call and errno.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use cmtwin::task::{block_on, CmAsync, Executor};
use cmtwin::{
    Call, CmBackend, CmError, ConnParam, Errno, EventKind, PortSpace, QpInitAttr, QpType, Transport,
};
use cmtwin_sim::Fabric;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

fn two_hosts(seed: u64) -> Fabric {
    Fabric::builder(seed)
        .host("server", Transport::Roce, &[ip("10.0.0.1")])
        .host("client", Transport::Roce, &[ip("10.0.0.2")])
        .build()
        .expect("a valid configuration")
}

const ADDR: &str = "10.0.0.1:7000";

/// A server task per connection (the listener's requests moved to channels of their own) and
/// a client task per connection, each side one executor in one process. Returns the trace.
fn many_connections(seed: u64, connections: u64) -> String {
    let fabric = two_hosts(seed);
    let addr: SocketAddr = ADDR.parse().expect("literal");
    fabric.spawn("server", "server", move |cm| {
        let channel = cm.create_event_channel()?;
        let listener = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
        cm.bind_addr(listener, addr)?;
        cm.listen(listener, 64)?;
        let failed: Rc<RefCell<Option<CmError>>> = Rc::default();
        let mut ex = Executor::new(&cm);
        let spawner = ex.spawner();
        let (cm2, fail) = (cm.clone(), Rc::clone(&failed));
        ex.spawn(async move {
            let served = async {
                for _ in 0..connections {
                    let req = cm2.expect(channel, EventKind::ConnectRequest).await?;
                    let own = cm2.create_event_channel()?;
                    cm2.migrate_id(req.id, Some(own))?;
                    let (cm, fail) = (cm2.clone(), Rc::clone(&fail));
                    spawner.spawn(async move {
                        let r = async {
                            cm.create_qp(req.id, &QpInitAttr::new(QpType::Rc))?;
                            cm.accept(req.id, Some(&ConnParam::default()))?;
                            cm.expect(own, EventKind::Established).await?;
                            cm.expect(own, EventKind::Disconnected).await?;
                            cm.disconnect(req.id)?;
                            cm.destroy_qp(req.id)?;
                            cm.destroy_id(req.id)
                        }
                        .await;
                        if let Err(e) = r {
                            *fail.borrow_mut() = Some(e);
                        }
                    });
                }
                Ok::<(), CmError>(())
            }
            .await;
            if let Err(e) = served {
                *fail.borrow_mut() = Some(e);
            }
        });
        ex.run()?;
        if let Some(e) = failed.take() {
            return Err(e);
        }
        cm.destroy_id(listener)
    });
    fabric.spawn("client", "client", move |cm| {
        cm.sleep(Duration::from_millis(1))?;
        let failed: Rc<RefCell<Option<CmError>>> = Rc::default();
        let mut ex = Executor::new(&cm);
        for n in 0..connections {
            let (cm, fail) = (&cm, Rc::clone(&failed));
            ex.spawn(async move {
                let r = async {
                    let ch = cm.create_event_channel()?;
                    let id = cm.create_id(Some(ch), n, PortSpace::TCP)?;
                    cm.resolve_addr(id, None, addr, Duration::from_secs(2))?;
                    cm.expect(ch, EventKind::AddrResolved).await?;
                    cm.resolve_route(id, Duration::from_secs(2))?;
                    cm.expect(ch, EventKind::RouteResolved).await?;
                    cm.create_qp(id, &QpInitAttr::new(QpType::Rc))?;
                    cm.connect(id, Some(&ConnParam::default()))?;
                    cm.expect(ch, EventKind::Established).await?;
                    cm.sleep_for(Duration::from_micros(100 * n)).await?;
                    cm.disconnect(id)?;
                    cm.expect(ch, EventKind::Disconnected).await?;
                    Ok::<(), CmError>(())
                }
                .await;
                if let Err(e) = r {
                    *fail.borrow_mut() = Some(e);
                }
            });
        }
        ex.run()?;
        match failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    });
    fabric.run().expect("every connection opens and closes");
    fabric.trace_text()
}

#[test]
fn fifty_connections_as_tasks_of_two_processes_and_a_seed_fixes_the_trace() {
    let first = many_connections(11, 50);
    assert_eq!(first, many_connections(11, 50), "same seed, same trace");
    assert_eq!(
        first.matches("deliver RDMA_CM_EVENT_ESTABLISHED").count(),
        100
    );
    assert_eq!(
        first.matches("deliver RDMA_CM_EVENT_DISCONNECTED").count(),
        100
    );
    assert_ne!(first, many_connections(12, 50), "another seed, another run");
}

/// Sleeps end at exact instants of virtual time; the earliest of several bounds the wait.
#[test]
fn sleeps_end_at_exact_virtual_instants() {
    let fabric = two_hosts(1);
    let woke = Arc::new(Mutex::new(Vec::new()));
    let out = Arc::clone(&woke);
    fabric.spawn("client", "sleeper", move |cm| {
        let mut ex = Executor::new(&cm);
        for ms in [5u64, 2, 9] {
            let (cm, out) = (&cm, Arc::clone(&out));
            ex.spawn(async move {
                cm.sleep_for(Duration::from_millis(ms))
                    .await
                    .expect("sleeps");
                out.lock().expect("not poisoned").push((ms, cm.now()));
            });
        }
        ex.run()
    });
    fabric.run().expect("the sleeper returns");
    let got = woke.lock().expect("not poisoned").clone();
    assert_eq!(got, [2u64, 5, 9].map(|ms| (ms, Duration::from_millis(ms))));
}

/// A future of another library, completed by a sibling task through its waker, wakes the
/// executor without any channel or sleep.
#[test]
fn a_waker_of_another_future_wakes_the_executor() {
    struct Flag(Rc<Cell<bool>>, Rc<RefCell<Option<Waker>>>);
    impl Future for Flag {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0.get() {
                Poll::Ready(())
            } else {
                *self.1.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
    let fabric = two_hosts(1);
    fabric.spawn("client", "p", |cm| {
        let (set, waker) = (Rc::new(Cell::new(false)), Rc::new(RefCell::new(None)));
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut ex = Executor::new(&cm);
        let (s, w, o) = (Rc::clone(&set), Rc::clone(&waker), Rc::clone(&order));
        ex.spawn(async move {
            Flag(s, w).await;
            o.borrow_mut().push("awaited");
        });
        let (s, w, o) = (Rc::clone(&set), Rc::clone(&waker), Rc::clone(&order));
        ex.spawn(async move {
            o.borrow_mut().push("setting");
            s.set(true);
            if let Some(w) = w.borrow_mut().take() {
                w.wake();
            }
        });
        ex.run()?;
        assert_eq!(*order.borrow(), ["setting", "awaited"]);
        Ok(())
    });
    fabric.run().expect("both tasks finish");
}

/// Yields once: wakes its own task and is pending, as async runtimes' `yield_now` does.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A task that spins (looks at a flag, yields, looks again) while another sleeps 1 ms and
/// then sets the flag: the spin lets virtual time move to the sleep's end, as a spinning CPU
/// lets real time pass, and both end at exactly 1 ms; inside `Fabric::run` and outside.
/// (Before, the executor never waited while a task woke itself, so virtual time stood still
/// and the run never ended; found by an outside user's async port.)
#[test]
fn a_task_spinning_beside_a_sleep_lets_virtual_time_reach_it() {
    fn spin_and_sleep<B: CmBackend>(cm: &B) -> Result<(Duration, u64), CmError> {
        let flag = Rc::new(Cell::new(false));
        let spins = Rc::new(Cell::new(0u64));
        let mut ex = Executor::new(cm);
        let (seen, count) = (Rc::clone(&flag), Rc::clone(&spins));
        ex.spawn(async move {
            while !seen.get() {
                count.set(count.get() + 1);
                YieldOnce(false).await;
            }
        });
        let set = Rc::clone(&flag);
        ex.spawn(async move {
            cm.sleep_for(Duration::from_millis(1))
                .await
                .expect("a sleep");
            set.set(true);
        });
        ex.run()?;
        Ok((cm.now(), spins.get()))
    }
    let outside = two_hosts(1);
    let (at, spins) = spin_and_sleep(&outside.backend("client")).expect("both tasks end");
    assert_eq!(at, Duration::from_millis(1), "outside Fabric::run");
    assert!(spins >= 1, "the spinner looked at least once");
    let inside = two_hosts(1);
    let seen = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&seen);
    inside.spawn("client", "p", move |cm| {
        *slot.lock().unwrap() = Some(spin_and_sleep(&cm)?.0);
        Ok(())
    });
    inside.run().expect("both tasks end");
    assert_eq!(
        *seen.lock().unwrap(),
        Some(Duration::from_millis(1)),
        "inside"
    );
}

/// A task waiting for an event nothing will produce: the executor's wait is reported as a
/// deadlock (EDEADLK naming the channel) instead of hanging.
#[test]
fn a_wait_nothing_can_end_is_a_deadlock() {
    let fabric = two_hosts(1);
    fabric.spawn("client", "p", |cm| {
        let ch = cm.create_event_channel()?;
        let r = block_on(&cm, async { cm.event(ch).await.map(|_| ()) });
        let e = r.expect_err("nothing can come");
        assert_eq!((e.call, e.errno), (Call::Poll, Errno::EDEADLK));
        assert!(e.detail.contains("blocked in poll on ch"), "{e}");
        Ok(())
    });
    fabric
        .run()
        .expect("the process saw the deadlock and returned");
}

/// A task that destroys the channel another task awaits, then waits on: the awaiting task's
/// future fails with EBADF at that instant, the destroying task goes on to its end.
#[test]
fn a_channel_destroyed_under_an_awaiting_task_fails_that_task_only() {
    let fabric = two_hosts(1);
    let cm = fabric.backend("client");
    let ch = cm.create_event_channel().expect("a channel");
    let seen: RefCell<Vec<(&str, Option<Errno>, Duration)>> = RefCell::default();
    let mut executor = Executor::new(&cm);
    executor.spawn(async {
        let r = cm.event(ch).await.map(drop);
        seen.borrow_mut()
            .push(("waiter", r.err().map(|e| e.errno), cm.now()));
    });
    executor.spawn(async {
        cm.sleep_for(Duration::from_millis(1))
            .await
            .expect("a sleep");
        let r = cm.destroy_event_channel(ch);
        seen.borrow_mut()
            .push(("closer", r.err().map(|e| e.errno), cm.now()));
        cm.sleep_for(Duration::from_millis(1))
            .await
            .expect("a sleep");
        seen.borrow_mut().push(("closer done", None, cm.now()));
    });
    executor.run().expect("the run ends when both tasks have");
    let ms = Duration::from_millis;
    assert_eq!(
        seen.into_inner(),
        [
            ("closer", None, ms(1)),
            ("waiter", Some(Errno::EBADF), ms(1)),
            ("closer done", None, ms(2)),
        ]
    );
}

/// One executor waiting through the client's backend, with a task awaiting a channel of the
/// server's: the server's futures see a live channel, the client's backend knows none, and
/// the run fails with EBADF naming it at once, where it used to poll for ever with virtual
/// time standing still. A task of its own backend beside it has run until then.
#[test]
fn a_task_awaiting_another_hosts_channel_fails_the_run_instead_of_spinning() {
    let fabric = two_hosts(1);
    let client = fabric.backend("client");
    let server = fabric.backend("server");
    let foreign = server.create_event_channel().expect("a channel");
    let own = client.create_event_channel().expect("a channel");
    let progress: RefCell<Vec<Duration>> = RefCell::default();
    let mut executor = Executor::new(&client);
    executor.spawn(async {
        let _ = server.event(foreign).await;
        unreachable!("no event comes on the server's channel");
    });
    executor.spawn(async {
        let _ = client.event(own).await;
        unreachable!("no event comes on the client's channel");
    });
    executor.spawn(async {
        client
            .sleep_for(Duration::from_millis(2))
            .await
            .expect("a sleep");
        progress.borrow_mut().push(client.now());
    });
    let e = executor.run().expect_err("the executor cannot wait on ch1");
    assert_eq!((e.call, e.errno), (Call::Poll, Errno::EBADF));
    assert!(
        e.detail.starts_with(&format!(
            "a task awaits a channel the executor's backend does not know ({foreign} is not an \
             open event channel of this host)"
        )),
        "{e}"
    );
    assert_eq!(client.now(), Duration::ZERO);
    assert!(progress.into_inner().is_empty());
}

/// The helpers outside the executor, and an executor inside another, fail with EINVAL.
#[test]
fn misuse_fails_with_einval() {
    let fabric = two_hosts(1);
    let cm = fabric.backend("client");
    let ch = cm.create_event_channel().expect("a channel");
    let poll_once = |f: &mut (dyn Future<Output = cmtwin::Result<()>> + Unpin)| {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        Pin::new(f).poll(&mut cx)
    };
    let mut outside = Box::pin(async { cm.event(ch).await.map(|_| ()) });
    match poll_once(&mut outside) {
        Poll::Ready(Err(e)) => assert_eq!((e.call, e.errno), (Call::GetCmEvent, Errno::EINVAL)),
        other => panic!("{other:?}"),
    }
    let nested = block_on(&cm, async { block_on(&cm, async {}) }).expect("the outer runs");
    let e = nested.expect_err("the inner is refused");
    assert_eq!(e.errno, Errno::EINVAL);
}
