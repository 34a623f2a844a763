//! Waiting for an event of an expected kind: fetch, check, acknowledge.

use std::fmt;

use crate::{ChannelHandle, CmBackend, CmError, EventInfo, EventKind, Wait};

/// Why [`expect_event`] did not return the event it waited for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpectError {
    /// Fetching or acknowledging failed (EAGAIN, ETIMEDOUT, EBADF, ...).
    Cm(CmError),
    /// An event of another kind came instead; it was acknowledged.
    Unexpected {
        /// The kind waited for.
        expected: EventKind,
        /// What came instead.
        got: EventInfo,
    },
}

impl fmt::Display for ExpectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectError::Cm(e) => fmt::Display::fmt(e, f),
            ExpectError::Unexpected { expected, got } => write!(
                f,
                "expected {expected}, got {} with status {} on {}",
                got.kind, got.status, got.id
            ),
        }
    }
}

impl std::error::Error for ExpectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExpectError::Cm(e) => Some(e),
            ExpectError::Unexpected { .. } => None,
        }
    }
}

impl From<CmError> for ExpectError {
    fn from(e: CmError) -> Self {
        ExpectError::Cm(e)
    }
}

impl ExpectError {
    /// The event that came instead, if that is what went wrong.
    pub fn unexpected(&self) -> Option<&EventInfo> {
        match self {
            ExpectError::Unexpected { got, .. } => Some(got),
            ExpectError::Cm(_) => None,
        }
    }
}

/// Fetches the next event of `channel` (waiting as `wait` says), acknowledges it, and returns
/// what it said if it is of kind `expected` (whatever its status: REJECTED and UNREACHABLE
/// carry their reason there); an event of any other kind is an [`ExpectError::Unexpected`]
/// naming what came instead.
///
/// ```
/// use cmtwin::{expect_event, CmBackend, ChannelHandle, EventKind, ExpectError, Wait};
///
/// fn wait_established<B: CmBackend>(cm: &B, ch: ChannelHandle) -> Result<(), ExpectError> {
///     let info = expect_event(cm, ch, EventKind::Established, Wait::Block)?;
///     println!("connected: {:?}", info.param);
///     Ok(())
/// }
/// ```
pub fn expect_event<B: CmBackend + ?Sized>(
    cm: &B,
    channel: ChannelHandle,
    expected: EventKind,
    wait: Wait,
) -> Result<EventInfo, ExpectError> {
    let event = cm.get_cm_event(channel, wait)?;
    let info = event.info().clone();
    cm.ack_cm_event(event)?;
    if info.kind == expected {
        Ok(info)
    } else {
        Err(ExpectError::Unexpected {
            expected,
            got: info,
        })
    }
}
