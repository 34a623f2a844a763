//! Mutex, condition variable, semaphore and channel for threads that must run both on a
//! simulated fabric and on the real backend: in a simulated process each operation is a
//! scheduling point of the fabric's seeded scheduler, a thread that must wait lets the others
//! run (a std primitive would stall the whole simulation), and a deadlock is reported (every
//! thread involved gets EDEADLK naming what it waits for and who holds it) instead of hanging;
//! in an ordinary thread they are std's.
//!
//! Every blocking operation returns a [`crate::Result`]: EDEADLK when the simulator proves
//! that nothing can ever wake the caller, EPERM when an ordinary thread uses a primitive
//! while a running fabric's processes use it (or the processes of two fabrics share it).
//! A panic while a [`MutexGuard`] is held does not poison the mutex.
//!
//! ```
//! use std::sync::Arc;
//! use cmtwin::sync::Mutex;
//!
//! let hits = Arc::new(Mutex::new(0));
//! let worker = {
//!     let hits = Arc::clone(&hits);
//!     cmtwin::thread::spawn("worker", move || -> cmtwin::Result<()> {
//!         *hits.lock()? += 1;
//!         Ok(())
//!     })?
//! };
//! worker.join()??;
//! assert_eq!(*hits.lock()?, 1);
//! # Ok::<(), cmtwin::CmError>(())
//! ```

mod binding;
mod channel;
mod condvar;
mod mutex;
mod semaphore;

pub use channel::{channel, Receiver, Sender};
pub use condvar::Condvar;
pub use mutex::{Mutex, MutexGuard};
pub use semaphore::Semaphore;

pub(crate) use binding::{Binding, Sched};
