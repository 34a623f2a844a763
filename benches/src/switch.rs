//! Process switches: two simulated processes of one host ping-pong USER events (write on the
//! other's id, block in `get_cm_event` on one's own channel), while `blocked` other processes
//! wait on channels that get no event until the ping-pong is over. Every hand-over of the baton
//! between the two is one switch; the cost is the process CPU time per switch, measured inside
//! the ping process after a warm-up.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmtwin::{ChannelHandle, CmBackend, CmError, EventKind, IdHandle, PortSpace, Transport, Wait};
use cmtwin_sim::{Fabric, SimBackend, SimConfig};

use crate::cpu::CpuStopwatch;

/// Round trips run before the clocks start.
const WARMUP_ROUND_TRIPS: u64 = 100;

/// The outcome of one ping-pong run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchRun {
    /// Switches measured (two per round trip).
    pub switches: u64,
    /// Process CPU time they took.
    pub cpu: Duration,
    /// Wall time they took (for reference: the machine is shared).
    pub wall: Duration,
}

/// What the ping process hands back: its clocks, or what went wrong.
type Outcome = Arc<Mutex<Option<Result<(Duration, Duration), String>>>>;

/// A channel with one id on it.
#[derive(Clone, Copy)]
struct Mailbox {
    channel: ChannelHandle,
    id: IdHandle,
}

fn mailbox(cm: &SimBackend) -> Result<Mailbox, CmError> {
    let channel = cm.create_event_channel()?;
    let id = cm.create_id(Some(channel), 0, PortSpace::TCP)?;
    Ok(Mailbox { channel, id })
}

/// Takes the next event of `channel` (blocking) and returns its USER argument.
fn take_user(cm: &SimBackend, channel: ChannelHandle) -> Result<Option<u64>, CmError> {
    let event = cm.get_cm_event(channel, Wait::Block)?;
    let arg = (event.kind() == EventKind::User)
        .then(|| event.user_arg())
        .flatten();
    cm.ack_cm_event(event)?;
    Ok(arg)
}

/// Runs `round_trips` measured round trips (after a warm-up) with `blocked` idle processes.
pub fn process_switch(blocked: usize, round_trips: u64) -> Result<SwitchRun, String> {
    let fabric = Fabric::builder(7)
        .config(SimConfig {
            trace: false,
            ..SimConfig::default()
        })
        .host(
            "host",
            Transport::Roce,
            &["10.0.0.1".parse().expect("literal")],
        )
        .build()
        .map_err(|e| e.to_string())?;
    let cm = fabric.backend("host");
    let err = |e: CmError| e.to_string();
    let (ping, pong) = (mailbox(&cm).map_err(err)?, mailbox(&cm).map_err(err)?);
    let idle: Vec<Mailbox> = (0..blocked)
        .map(|_| mailbox(&cm))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    for (i, m) in idle.iter().enumerate() {
        let channel = m.channel;
        fabric.spawn("host", &format!("blocked{i}"), move |cm| {
            take_user(&cm, channel).map(drop)
        });
    }
    let total = WARMUP_ROUND_TRIPS + round_trips;
    let outcome: Outcome = Arc::default();
    let slot = Arc::clone(&outcome);
    let idle_ids: Vec<IdHandle> = idle.iter().map(|m| m.id).collect();
    fabric.spawn("host", "ping", move |cm| {
        let result = ping_loop(&cm, ping.channel, pong.id, total);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        for id in idle_ids {
            cm.write_cm_event(id, EventKind::User, 0, 0)?;
        }
        Ok(())
    });
    fabric.spawn("host", "pong", move |cm| {
        for _ in 0..total {
            let arg = take_user(&cm, pong.channel)?.unwrap_or(u64::MAX);
            cm.write_cm_event(ping.id, EventKind::User, 0, arg)?;
        }
        Ok(())
    });
    fabric.run().map_err(|e| e.to_string())?;
    let taken = outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
    let (cpu, wall) = taken.ok_or("the ping process reported nothing")??;
    Ok(SwitchRun {
        switches: 2 * round_trips,
        cpu,
        wall,
    })
}

/// The ping side: sends `i`, expects `i` back, `total` times; times all but the warm-up.
fn ping_loop(
    cm: &SimBackend,
    mine: ChannelHandle,
    theirs: IdHandle,
    total: u64,
) -> Result<(Duration, Duration), String> {
    let mut clocks = (CpuStopwatch::start(), Instant::now());
    for i in 0..total {
        if i == WARMUP_ROUND_TRIPS {
            clocks = (CpuStopwatch::start(), Instant::now());
        }
        cm.write_cm_event(theirs, EventKind::User, 0, i)
            .map_err(|e| e.to_string())?;
        let back = take_user(cm, mine).map_err(|e| e.to_string())?;
        if back != Some(i) {
            return Err(format!("round trip {i}: pong answered {back:?}"));
        }
    }
    Ok((clocks.0.elapsed(), clocks.1.elapsed()))
}
