//! What a ported run ran into: a CM call's error, an event on a freed record, or an event
//! whose record is taken for one of another type.

use std::fmt;

use cmtwin::{CmError, EventKind};

/// What the run ran into: a CM call's error, the use after free, or the type confusion.
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
    /// An event's handler took the record its id's context names for a record of another
    /// type (in C, a cast of the context pointer to the wrong struct).
    ContextOfAnotherType {
        /// The event.
        kind: EventKind,
        /// The context.
        context: u64,
        /// What the record is.
        is: &'static str,
        /// What the handler took it for.
        taken_for: &'static str,
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
            Caught::ContextOfAnotherType {
                kind,
                context,
                is,
                taken_for,
            } => write!(
                f,
                "{kind:?} delivered for context {context}, a {is} taken for a {taken_for}"
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
