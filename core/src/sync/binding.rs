//! Which scheduler a primitive is used under: the operating system's, or one runtime's.

use std::panic::Location;
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Call, CmError, Errno, Result};
use crate::runtime::{self, Describe, Runtime};

/// How an operation of a primitive is carried out.
pub(crate) enum Sched {
    /// By std's primitives (an ordinary thread).
    Os,
    /// Through the runtime of the calling thread.
    Sim(Arc<dyn Runtime>),
}

/// A primitive's key, its label for reports, and the runtime it was last used under.
pub(crate) struct Binding {
    key: u64,
    label: Arc<str>,
    bound: Mutex<Option<Weak<dyn Runtime>>>,
}

impl Binding {
    /// A binding for a primitive of `kind` created at the caller's caller's location (the
    /// label deadlock reports use).
    #[track_caller]
    pub(crate) fn new(kind: &str) -> Self {
        let at = Location::caller();
        Binding::labelled(format!("{kind} created at {}:{}", at.file(), at.line()))
    }

    /// A binding for a primitive labelled `label`.
    pub(crate) fn labelled(label: String) -> Self {
        Binding {
            key: runtime::new_key(),
            label: label.into(),
            bound: Mutex::new(None),
        }
    }

    /// The key the primitive's waiters block on.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// The primitive's label, e.g. `mutex created at src/lib.rs:10`.
    pub(crate) fn label(&self) -> Arc<str> {
        Arc::clone(&self.label)
    }

    /// Says how the caller carries out `call`: through its runtime, or std's primitives.
    /// Fails with EPERM when another runtime that is still running uses the primitive.
    pub(crate) fn sched(&self, call: Call) -> Result<Sched> {
        let mine = runtime::current();
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        let other = bound.as_ref().and_then(Weak::upgrade);
        if let Some(other) = other.filter(|o| o.running()) {
            let same = mine
                .as_ref()
                .is_some_and(|m| m.identity() == other.identity());
            if !same {
                let who = match mine {
                    Some(_) => "a process of another simulated fabric",
                    None => "an ordinary thread",
                };
                return Err(CmError::new(
                    call,
                    Errno::EPERM,
                    format!(
                        "the {} is in use by the processes of a running simulated fabric, and \
                         {who} may not use it until that run ends",
                        self.label
                    ),
                ));
            }
        }
        Ok(match mine {
            Some(rt) => {
                *bound = Some(Arc::downgrade(&rt));
                Sched::Sim(rt)
            }
            None => Sched::Os,
        })
    }

    /// The runtime the primitive is used under if the caller runs under it (for operations
    /// that cannot fail, such as a release in a destructor).
    pub(crate) fn runtime_of_caller(&self) -> Option<Arc<dyn Runtime>> {
        let mine = runtime::current()?;
        let bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        let theirs = bound.as_ref().and_then(Weak::upgrade)?;
        (theirs.identity() == mine.identity()).then_some(mine)
    }

    /// A description of a wait in `call` on this primitive, with `more` appended when a
    /// deadlock report is made.
    pub(crate) fn describe(
        &self,
        call: Call,
        more: impl Fn() -> String + Send + Sync + 'static,
    ) -> Describe {
        let label = self.label();
        Arc::new(move || format!("{} of the {label}{}", call.name(), more()))
    }
}
