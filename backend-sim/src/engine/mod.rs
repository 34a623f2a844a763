//! The engine: virtual time and the cancellable timeline. It knows nothing of the CM: the
//! world schedules its own actions on it.

mod chunked;
mod near;
pub(crate) mod timeline;
