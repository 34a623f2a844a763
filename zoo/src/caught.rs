//! What a ported run ran into: a CM call's error, or an event on a freed record.

use std::fmt;

use cmtwin::{CmError, EventKind};

/// What the run ran into: a CM call's error, or the use after free.
#[derive(Debug)]
pub enum Caught {
    /// A CM call failed.
    Cm(CmError),
    /// An event arrived for an id whose context names a record already freed.
    EventOnFreedRecord {
        /// The event.
        kind: EventKind,
        /// The freed record's context.
        context: u64,
    },
}

impl fmt::Display for Caught {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caught::Cm(e) => write!(f, "{e}"),
            Caught::EventOnFreedRecord { kind, context } => write!(
                f,
                "{kind:?} delivered for context {context}, whose record was freed"
            ),
        }
    }
}

impl std::error::Error for Caught {}

impl From<CmError> for Caught {
    fn from(e: CmError) -> Self {
        Caught::Cm(e)
    }
}
