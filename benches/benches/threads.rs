//! Threads inside simulated hosts, per CPU-second (process CPU time, every thread), printed as
//! a report:
//!
//! * a scheduling decision: eight runnable processes each do `Semaphore::try_acquire` (a yield
//!   point) in a loop under PCT, where every yield point is a decision among the runnable
//!   processes (no switch: the running process keeps the highest priority); the same loops
//!   under round-robin without preemption, where a yield point decides nothing, are the
//!   baseline; the difference per operation is the decision;
//! * a process switch: two processes ping-pong through two `cmtwin::sync::Semaphore`s (each
//!   acquire blocks, each release wakes the other: one switch per hand-over), side by side with
//!   the same code on two OS threads (the primitives are std's there) in the same run;
//! * a task switch: two tasks of one `cmtwin::task::Executor` hand a token back and forth.
//!
//! `cargo bench -p cmtwin-benches --bench threads` (`CMTWIN_BENCH_OPS` sets the loop length).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cmtwin::sync::Semaphore;
use cmtwin::task::Executor;
use cmtwin::{thread, CmError, Transport};
use cmtwin_benches::cpu::measure;
use cmtwin_sim::{Fabric, SchedConfig, SchedPolicy, SimConfig};

fn fabric(schedule: SchedConfig) -> Fabric {
    Fabric::builder(1)
        .config(SimConfig {
            trace: false,
            schedule,
            ..SimConfig::default()
        })
        .host(
            "a",
            Transport::Roce,
            &["10.0.0.1".parse().expect("literal")],
        )
        .build()
        .expect("a valid configuration")
}

/// CPU time of `procs` processes each doing `ops` yield points under `schedule`.
fn yield_points(schedule: SchedConfig, procs: usize, ops: u64) -> Duration {
    let f = fabric(schedule);
    let sem = Arc::new(Semaphore::new(0));
    for p in 0..procs {
        let sem = Arc::clone(&sem);
        f.spawn("a", &format!("p{p}"), move |_cm| {
            for _ in 0..ops {
                sem.try_acquire()?;
            }
            Ok(())
        });
    }
    let (r, cpu) = measure(|| f.run());
    r.expect("the loops end");
    cpu
}

/// Two threads hand a token back and forth `rounds` times through two semaphores (two
/// switches per round).
fn ping_pong(rounds: u64) -> Result<(), CmError> {
    let (ping, pong) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (a, b) = (Arc::clone(&ping), Arc::clone(&pong));
    let other = thread::spawn("pong", move || -> Result<(), CmError> {
        for _ in 0..rounds {
            a.acquire()?;
            b.release()?;
        }
        Ok(())
    })?;
    for _ in 0..rounds {
        ping.release()?;
        pong.acquire()?;
    }
    other.join()?
}

/// CPU time of `rounds` ping-pong rounds between two simulated processes.
fn sim_ping_pong(rounds: u64) -> Duration {
    let f = fabric(SchedConfig::default());
    f.spawn("a", "ping", move |_cm| ping_pong(rounds));
    let (r, cpu) = measure(|| f.run());
    r.expect("the ping-pong ends");
    cpu
}

/// A future that waits until the shared token is `mine`, then passes it on.
struct Turn {
    token: Rc<Cell<u8>>,
    mine: u8,
}

impl Future for Turn {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.get() == self.mine {
            self.token.set(1 - self.mine);
            cx.waker().wake_by_ref();
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// CPU time of `rounds` hand-overs between two tasks of one executor, in a simulated process.
fn task_ping_pong(rounds: u64) -> Duration {
    let f = fabric(SchedConfig::default());
    f.spawn("a", "tasks", move |cm| {
        let token = Rc::new(Cell::new(0u8));
        let mut ex = Executor::new(&cm);
        for mine in 0..2u8 {
            let token = Rc::clone(&token);
            ex.spawn(async move {
                for _ in 0..rounds {
                    Turn {
                        token: Rc::clone(&token),
                        mine,
                    }
                    .await;
                }
            });
        }
        ex.run()
    });
    let (r, cpu) = measure(|| f.run());
    r.expect("the tasks end");
    cpu
}

fn per_op_ns(cpu: Duration, ops: u64) -> f64 {
    cpu.as_secs_f64() * 1e9 / ops as f64
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let ops: u64 = std::env::var("CMTWIN_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let procs = 8;
    let pct = SchedConfig {
        policy: SchedPolicy::Pct { depth: 1, steps: 1 },
        ..SchedConfig::default()
    };
    let total = ops * procs as u64;
    let decided = yield_points(pct, procs, ops);
    let baseline = yield_points(SchedConfig::round_robin(), procs, ops);
    let decision = per_op_ns(decided.saturating_sub(baseline), total);
    println!(
        "scheduling decision among {procs} runnable processes: {decision:.0} ns \
         (yield point with a decision {:.0} ns, without {:.0} ns; {total} each)",
        per_op_ns(decided, total),
        per_op_ns(baseline, total)
    );

    let rounds = ops / 10;
    let switches = rounds * 2;
    let sim = sim_ping_pong(rounds);
    let (r, os) = measure(|| ping_pong(rounds));
    r.expect("the OS threads' ping-pong ends");
    let (sim_ns, os_ns) = (per_op_ns(sim, switches), per_op_ns(os, switches));
    println!(
        "process switch (semaphore ping-pong, {switches} switches): simulator {sim_ns:.0} ns, \
         OS threads with std primitives {os_ns:.0} ns in the same run: ratio {:.2}",
        sim_ns / os_ns
    );

    let tasks = task_ping_pong(rounds);
    println!(
        "task switch (two tasks of one executor, {switches} hand-overs): {:.0} ns, {:.1}x \
         cheaper than a simulated process switch",
        per_op_ns(tasks, switches),
        sim_ns / per_op_ns(tasks, switches)
    );
}
