//! The engine: virtual time and the cancellable timeline, the trace. It knows nothing of the
//! CM: the world schedules its own actions on it and records its own entries in it.

pub(crate) mod timeline;
pub(crate) mod trace;
