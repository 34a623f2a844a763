//! Event statuses, classified: the same `i32` means different things for different events.

use crate::{Errno, EventKind, EventParam};

/// IB CM reject reasons (`enum ib_cm_rej_reason`) that the Linux CM produces.
pub struct IbRejReason;

impl IbRejReason {
    /// 4: the active side destroyed an id whose REQ was outstanding.
    pub const TIMEOUT: i32 = 4;
    /// 8: nothing listens on that service id on that device.
    pub const INVALID_SERVICE_ID: i32 = 8;
    /// 10: stale connection.
    pub const STALE_CONN: i32 = 10;
    /// 28: `rdma_reject`, or any kernel refusal after a listener was found.
    pub const CONSUMER_DEFINED: i32 = 28;
    /// 35: `rdma_reject_ece`.
    pub const VENDOR_OPTION_NOT_SUPPORTED: i32 = 35;
}

/// SIDR REP statuses (`enum ib_cm_sidr_status`), reported as UNREACHABLE on UD ids.
pub struct SidrStatus;

impl SidrStatus {
    /// 1: no listener for the service id.
    pub const UNSUPPORTED: i32 = 1;
    /// 2: rejected (by the application or the kernel).
    pub const REJECT: i32 = 2;
}

/// What an event's raw status means, chosen by its kind and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventStatus {
    /// Status 0.
    Success,
    /// A negative kernel errno (e.g. -ETIMEDOUT on UNREACHABLE).
    Errno(Errno),
    /// An IB CM reject reason on REJECTED.
    IbRejReason(i32),
    /// A positive SIDR REP status on a UD UNREACHABLE.
    SidrStatus(i32),
    /// A status made up by librdmacm itself (-1, or a positive errno).
    Library(i32),
    /// The status written with `write_cm_event`.
    User(i32),
}

impl EventStatus {
    /// Classifies `status` of an event of `kind` with parameters `param`.
    pub fn classify(kind: EventKind, status: i32, param: &EventParam) -> EventStatus {
        match (kind, status) {
            (EventKind::User, s) => EventStatus::User(s),
            (_, 0) => EventStatus::Success,
            (_, -1) => EventStatus::Library(-1),
            (EventKind::Rejected, s) if s > 0 => EventStatus::IbRejReason(s),
            (EventKind::Unreachable, s) if s > 0 && matches!(param, EventParam::Ud(_)) => {
                EventStatus::SidrStatus(s)
            }
            (_, s) if s < 0 => EventStatus::Errno(Errno(-s)),
            (_, s) => EventStatus::Library(s),
        }
    }
}
