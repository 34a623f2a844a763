//! Handing the baton from one process's OS thread to another's.
//!
//! A waiting process first polls a flag of its own for a short while, with the world unlocked,
//! and only then sleeps on its condition variable. A hand-over to a thread that still polls
//! costs no system call and no wake-up of another CPU (which costs 5-15 µs on a virtual
//! machine); the giver signals the condition variable only when the receiver sleeps. Which
//! process holds the baton is decided under the world's lock, as before: the flag only tells a
//! polling thread when to look.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, MutexGuard};
use std::time::{Duration, Instant};

use crate::process::Shared;
use crate::world::World;

/// How long a process waiting for the baton polls for it before it sleeps.
const POLL_FOR: Duration = Duration::from_micros(25);

/// Polls between two looks at the clock (and yields of the CPU).
const POLLS_PER_ROUND: u32 = 64;

/// The world, locked: what every call holds while it reads or changes the world. It knows
/// its lock, so that a process waiting for the baton can let the world go and take it back.
pub(crate) struct WorldGuard<'a> {
    shared: &'a Shared,
    guard: MutexGuard<'a, World>,
}

impl<'a> WorldGuard<'a> {
    /// `guard`, a lock of `shared`'s world.
    pub(crate) fn new(shared: &'a Shared, guard: MutexGuard<'a, World>) -> Self {
        WorldGuard { shared, guard }
    }

    /// Sleeps on `cv` until it is signalled (or wakes spuriously), the world unlocked
    /// meanwhile.
    fn sleep_on(self, cv: &Condvar) -> Self {
        let WorldGuard { shared, guard } = self;
        let guard = cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        WorldGuard { shared, guard }
    }

    /// Unlocks the world, polls `wake`'s flag for a while, and locks the world again.
    fn poll(self, wake: &Wake) -> Self {
        let shared = self.shared;
        drop(self);
        wake.poll_flag();
        shared.lock()
    }
}

impl Deref for WorldGuard<'_> {
    type Target = World;

    fn deref(&self) -> &World {
        &self.guard
    }
}

impl DerefMut for WorldGuard<'_> {
    fn deref_mut(&mut self) -> &mut World {
        &mut self.guard
    }
}

/// Where one process's thread waits for the baton.
#[derive(Default)]
pub(crate) struct Wake {
    /// Set when the baton is handed to the process; cleared by the process when it looks.
    handed: AtomicBool,
    /// Whether the thread sleeps on `cv` (read and written under the world's lock only, so
    /// an atomic only because the struct is shared).
    sleeping: AtomicBool,
    cv: Condvar,
}

impl Wake {
    /// The baton was just handed to this process (called under the world's lock).
    pub(crate) fn hand(&self) {
        self.handed.store(true, Ordering::Release);
        if self.sleeping.load(Ordering::Relaxed) {
            self.cv.notify_one();
        }
    }

    /// Polls the flag until it is set or [`POLL_FOR`] has passed; clears it. Between rounds
    /// of polls it yields its CPU, so that on a CPU it shares with the thread that holds the
    /// baton (a busy machine, or a single CPU) that thread runs instead of waiting for the
    /// poll to end.
    fn poll_flag(&self) {
        let start = Instant::now();
        loop {
            for _ in 0..POLLS_PER_ROUND {
                if self.handed.swap(false, Ordering::Acquire) {
                    return;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= POLL_FOR {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Waits until `holds(world)`: polls first, then sleeps. Returns with the world locked.
    pub(crate) fn wait<'a>(
        &self,
        mut w: WorldGuard<'a>,
        holds: impl Fn(&World) -> bool,
    ) -> WorldGuard<'a> {
        if holds(&w) {
            return w;
        }
        w = w.poll(self);
        if holds(&w) {
            return w;
        }
        self.sleeping.store(true, Ordering::Relaxed);
        while !holds(&w) {
            w = w.sleep_on(&self.cv);
        }
        self.sleeping.store(false, Ordering::Relaxed);
        self.handed.store(false, Ordering::Relaxed);
        w
    }
}
