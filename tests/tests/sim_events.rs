//! Events acknowledged by their drop and waits on several channels, on the simulator: exact
//! virtual times, the trace's order, and every way a drop can happen (in a process, on a
//! foreign thread during a run, on another thread outside a run, after the fabric is gone).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmtwin::{
    Call, ChannelHandle, CmBackend, CmError, Errno, EventKind, IdHandle, PortSpace, Transport, Wait,
};
use cmtwin_sim::{Fabric, SimBackend};

fn fabric(seed: u64) -> Fabric {
    let ip: IpAddr = "10.0.0.1".parse().expect("literal address");
    Fabric::builder(seed)
        .host("a", Transport::Roce, &[ip])
        .build()
        .expect("a valid configuration")
}

/// A channel with one id on it, and a USER event of that id fetched (not acknowledged).
fn fetched_user_event(cm: &SimBackend) -> (ChannelHandle, IdHandle, cmtwin::CmEvent) {
    let ch = cm.create_event_channel().expect("channel");
    let id = cm.create_id(Some(ch), 0, PortSpace::UDP).expect("id");
    cm.write_cm_event(id, EventKind::User, 0, 7).expect("write");
    let event = cm
        .get_cm_event(ch, Wait::NonBlocking)
        .expect("the USER event");
    (ch, id, event)
}

/// The trace lines of the run (time, host, kind, text), without the leading spaces.
fn lines(f: &Fabric) -> Vec<String> {
    f.trace_text()
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

/// In a process, the drop acknowledges at that point of the program, at that virtual time,
/// traced between the calls around it; the same seed gives the same trace.
#[test]
fn a_drop_in_a_process_acks_in_program_order() {
    let run = || {
        let f = fabric(5);
        f.spawn("a", "p", |cm| -> Result<(), CmError> {
            cm.sleep(Duration::from_millis(3))?;
            let (ch, id, event) = fetched_user_event(&cm);
            assert_eq!(cm.destroy_id(id).unwrap_err().errno, Errno::EBUSY);
            drop(event);
            cm.destroy_id(id)?;
            cm.destroy_event_channel(ch)
        });
        f.run().expect("the process succeeds");
        lines(&f)
    };
    let trace = run();
    let tail: Vec<&str> = trace[trace.len() - 4..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "0.003000000 a        call rdma_destroy_id(id2) -> EBUSY (16)",
            "0.003000000 a        ack RDMA_CM_EVENT_USER on id2 ticket 1 (dropped)",
            "0.003000000 a        call rdma_destroy_id(id2) -> 0",
            "0.003000000 a        call rdma_destroy_event_channel(ch1) -> 0",
        ]
    );
    assert_eq!(trace, run(), "same seed, same trace");
}

/// During a run, a drop on a thread that is not one of the fabric's processes leaves the
/// event outstanding (and untraced): the trace must not depend on the OS's scheduling.
#[test]
fn a_drop_on_a_foreign_thread_during_a_run_leaves_the_event_outstanding() {
    let f = fabric(6);
    f.spawn("a", "p", |cm| -> Result<(), CmError> {
        let (_ch, id, event) = fetched_user_event(&cm);
        std::thread::spawn(move || drop(event))
            .join()
            .expect("the helper thread");
        let e = cm.destroy_id(id).unwrap_err();
        assert_eq!((e.call, e.errno), (Call::DestroyId, Errno::EBUSY), "{e}");
        assert!(e.detail.contains("USER"), "names the event: {e}");
        Ok(())
    });
    f.run().expect("the process succeeds");
    assert!(
        !f.trace_text().contains("(dropped)"),
        "nothing acked at the drop"
    );
}

/// Outside a run, any thread's drop acknowledges (a thread driving the fabric inline).
#[test]
fn a_drop_on_another_thread_outside_a_run_acks() {
    let f = fabric(7);
    let cm = f.backend("a");
    let (ch, id, event) = fetched_user_event(&cm);
    std::thread::spawn(move || drop(event))
        .join()
        .expect("the helper thread");
    cm.destroy_id(id).expect("the drop acknowledged the event");
    cm.destroy_event_channel(ch).expect("channel");
    assert!(f
        .trace_text()
        .contains("ack RDMA_CM_EVENT_USER on id2 ticket 1 (dropped)"));
}

/// An event outlives its fabric: while a backend of the fabric lives, the drop still
/// acknowledges; once nothing of the fabric is left it does nothing.
#[test]
fn an_event_outliving_its_fabric_is_harmless() {
    let f = fabric(8);
    let cm = f.backend("a");
    let (ch, id, event) = fetched_user_event(&cm);
    let (_, _, orphan) = fetched_user_event(&cm);
    drop(f);
    drop(event);
    cm.destroy_id(id)
        .expect("acknowledged through the backend still alive");
    cm.destroy_event_channel(ch).expect("channel");
    drop(cm);
    assert_eq!(
        orphan.kind(),
        EventKind::User,
        "the event is still readable"
    );
    drop(orphan);
}

/// An explicit ack refused for a foreign event releases nothing of its own fabric's, and the
/// event's drop then acknowledges it in its own fabric.
#[test]
fn an_event_acked_on_the_wrong_fabric_is_released_by_its_drop() {
    let (fa, fb) = (fabric(9), fabric(9));
    let (a, b) = (fa.backend("a"), fb.backend("a"));
    let (ch, id, event) = fetched_user_event(&a);
    let e = b.ack_cm_event(event).unwrap_err();
    assert_eq!((e.call, e.errno), (Call::AckCmEvent, Errno::EINVAL), "{e}");
    a.destroy_id(id)
        .expect("released by the drop after the refused ack");
    a.destroy_event_channel(ch).expect("channel");
}

/// A process waiting on two channels wakes when either gets an event, at that virtual time,
/// and learns which; a readiness poll with a timeout returns an empty list at its deadline.
#[test]
fn waiting_on_two_channels_wakes_at_the_exact_time() {
    let f = fabric(10);
    let shared: Arc<Mutex<Option<(ChannelHandle, IdHandle, ChannelHandle)>>> = Arc::default();
    let (w, s) = (shared.clone(), shared.clone());
    f.spawn("a", "waiter", move |cm| -> Result<(), CmError> {
        let (a, b) = (cm.create_event_channel()?, cm.create_event_channel()?);
        let id_b = cm.create_id(Some(b), 0, PortSpace::UDP)?;
        *w.lock().unwrap() = Some((a, id_b, b));
        let none = cm.poll_channels(&[a, b], Wait::Timeout(Duration::from_millis(3)))?;
        assert_eq!((none, cm.now()), (vec![], Duration::from_millis(3)));
        let (from, event) = cm.get_cm_event_any(&[a, b], Wait::Block)?;
        assert_eq!(
            (from, event.id(), cm.now()),
            (b, id_b, Duration::from_millis(5))
        );
        cm.ack_cm_event(event)?;
        cm.destroy_id(id_b)?;
        cm.destroy_event_channel(a)?;
        cm.destroy_event_channel(b)
    });
    f.spawn("a", "writer", move |cm| -> Result<(), CmError> {
        cm.sleep(Duration::from_millis(5))?;
        let (_, id_b, _) = s.lock().unwrap().expect("the waiter ran first");
        cm.write_cm_event(id_b, EventKind::User, 0, 1)
    });
    f.run().expect("both processes succeed");
    let trace = f.trace_text();
    assert!(
        trace.contains("call poll([ch1, ch2], Timeout(3ms)) -> []"),
        "{trace}"
    );
}

/// A channel destroyed under a process that waits on it with another is EBADF for the
/// waiter, at the time of the destroy; with nothing left to wake it, a wait on several
/// channels is a deadlock naming them all.
#[test]
fn a_multi_channel_wait_learns_of_a_destroyed_channel_and_of_a_deadlock() {
    let f = fabric(11);
    let chans: Arc<Mutex<Option<(ChannelHandle, ChannelHandle)>>> = Arc::default();
    let (w, d) = (chans.clone(), chans.clone());
    f.spawn("a", "waiter", move |cm| -> Result<(), CmError> {
        let (a, b) = (cm.create_event_channel()?, cm.create_event_channel()?);
        *w.lock().unwrap() = Some((a, b));
        let e = cm.get_cm_event_any(&[a, b], Wait::Block).unwrap_err();
        assert_eq!(
            (e.errno, cm.now()),
            (Errno::EBADF, Duration::from_millis(2)),
            "{e}"
        );
        let e = cm.poll_channels(&[b], Wait::Block).unwrap_err();
        assert_eq!((e.call, e.errno), (Call::Poll, Errno::EDEADLK), "{e}");
        assert!(e.detail.contains(&format!("blocked in poll on {b}")), "{e}");
        cm.destroy_event_channel(b)
    });
    f.spawn("a", "destroyer", move |cm| -> Result<(), CmError> {
        cm.sleep(Duration::from_millis(2))?;
        let (a, _) = d.lock().unwrap().expect("the waiter ran first");
        cm.destroy_event_channel(a)
    });
    f.run().expect("both processes succeed");
}
