//! Awaiting a channel's events on a tokio runtime (feature `tokio`): the channel's two fds
//! (librdmacm's, and the one of events the backend injects) registered with tokio's reactor
//! through `AsyncFd`, so that an `async` task waits for CM events without a thread of its own.

use std::future::poll_fn;
use std::os::fd::OwnedFd;
use std::task::Poll;

use cmtwin::{Call, ChannelHandle, CmBackend, CmError, CmEvent, Errno, Result};
use tokio::io::unix::AsyncFd;

use crate::{ffi, VerbsBackend};

/// A channel of a [`VerbsBackend`] whose events a tokio task awaits.
///
/// It holds duplicates of the channel's fds, so it stays sound whatever happens to the
/// channel; once the channel is destroyed, [`AsyncChannel::event`] fails with EBADF.
pub struct AsyncChannel {
    backend: VerbsBackend,
    channel: ChannelHandle,
    cm: AsyncFd<OwnedFd>,
    injected: AsyncFd<OwnedFd>,
}

impl AsyncChannel {
    /// Registers `channel` of `backend` with the current tokio runtime's reactor. Fails with
    /// EBADF for a channel that is not live in `backend`, EINVAL outside a tokio runtime, and
    /// with the errno of the registration otherwise.
    pub fn new(backend: &VerbsBackend, channel: ChannelHandle) -> Result<Self> {
        let call = Call::GetCmEvent;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                "AsyncChannel::new needs a tokio runtime (call it from inside one)",
            ));
        }
        let obj = backend.channel_obj(call, channel)?;
        let dup = |fd| {
            ffi::dup_fd(fd).map_err(|e| CmError::new(call, Errno(e), "duplicating a channel fd"))
        };
        let (cm_fd, injected_fd) = (dup(obj.raw.fd())?, dup(obj.wake.fd())?);
        drop(obj);
        let register = |fd| {
            ffi::register_with_tokio(fd).map_err(|e| {
                let errno = Errno(e.raw_os_error().unwrap_or(libc::EIO));
                CmError::new(call, errno, format!("registering with tokio: {e}"))
            })
        };
        Ok(AsyncChannel {
            backend: backend.clone(),
            channel,
            cm: register(cm_fd)?,
            injected: register(injected_fd)?,
        })
    }

    /// The channel's next event (`rdma_get_cm_event` awaited). EBADF once the channel is
    /// destroyed; the errors of `rdma_get_cm_event` otherwise.
    pub async fn event(&self) -> Result<CmEvent> {
        loop {
            if let Some((_, event)) = self.backend.try_get_cm_event(&[self.channel])? {
                return Ok(event);
            }
            // Wait for either fd; its readiness is cleared only after a look found nothing,
            // so an event that arrives meanwhile is not missed.
            let mut guard = poll_fn(|cx| {
                if let Poll::Ready(r) = self.cm.poll_read_ready(cx) {
                    return Poll::Ready(r);
                }
                self.injected.poll_read_ready(cx)
            })
            .await
            .map_err(|e| {
                let errno = Errno(e.raw_os_error().unwrap_or(libc::EIO));
                CmError::new(Call::GetCmEvent, errno, format!("waiting with tokio: {e}"))
            })?;
            if let Some((_, event)) = self.backend.try_get_cm_event(&[self.channel])? {
                return Ok(event);
            }
            guard.clear_ready();
        }
    }

    /// The channel this waits on.
    pub fn channel(&self) -> ChannelHandle {
        self.channel
    }
}
