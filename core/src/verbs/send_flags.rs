//! `enum ibv_send_flags`: the `flags` argument of librdmacm's send-side helpers
//! (`rdma_post_send`, `rdma_post_ud_send`, `rdma_post_read`, `rdma_post_write`).

use std::fmt;
use std::ops::BitOr;

/// The flags of a send-queue work request (`ibv_send_wr.send_flags`), as librdmacm's
/// `rdma_verbs.h` helpers take them and pass them on unchanged: [`SendFlags::NONE`] is C's
/// `0`. The four flags libibverbs defines for every device; the bits keep C's values
/// ([`bits`](SendFlags::bits)), and no other bit can be set.
///
/// * [`SIGNALED`](SendFlags::SIGNALED): the request's successful completion is reported.
///   Without it, on a QP created with `sq_sig_all` false, a request that succeeds reports
///   nothing (it only frees its slot once a later signaled request completes); one that
///   fails is reported all the same. On a QP with `sq_sig_all` every request is reported.
/// * [`SOLICITED`](SendFlags::SOLICITED): the peer's receive completion is solicited (a CQ
///   armed with `req_notify_cq(cq, true)` fires for it).
/// * [`INLINE`](SendFlags::INLINE): the bytes are copied when the request is posted (the
///   region's key is not used); at most the QP's granted `max_inline_data`
///   (`query_qp_cap`), and never for an RDMA read (EINVAL from the post).
/// * [`FENCE`](SendFlags::FENCE): the request is not started before the requests posted
///   before it on the QP are done (see [`crate::verbs::SendWr::fence`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendFlags(u32);

impl SendFlags {
    /// C's `0`: unsignaled (unless the QP signals every send), not inline, not solicited.
    pub const NONE: SendFlags = SendFlags(0);
    /// `IBV_SEND_FENCE` (1).
    pub const FENCE: SendFlags = SendFlags(1);
    /// `IBV_SEND_SIGNALED` (2).
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// `IBV_SEND_SOLICITED` (4).
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// `IBV_SEND_INLINE` (8).
    pub const INLINE: SendFlags = SendFlags(8);

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits as C has them (`ibv_send_wr.send_flags`).
    pub const fn bits(self) -> u32 {
        self.0
    }
}

impl BitOr for SendFlags {
    type Output = SendFlags;

    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for SendFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (SendFlags::FENCE, "FENCE"),
            (SendFlags::SIGNALED, "SIGNALED"),
            (SendFlags::SOLICITED, "SOLICITED"),
            (SendFlags::INLINE, "INLINE"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name)
            .collect();
        match set.is_empty() {
            true => write!(f, "SendFlags(NONE)"),
            false => write!(f, "SendFlags({})", set.join(" | ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SendFlags;

    #[test]
    fn bits_are_libibverbs_values() {
        let all = SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED;
        assert_eq!((all | SendFlags::INLINE).bits(), 0xf);
        assert!(all.contains(SendFlags::SIGNALED | SendFlags::FENCE));
        assert!(!all.contains(SendFlags::INLINE));
        assert_eq!(format!("{:?}", SendFlags::NONE), "SendFlags(NONE)");
        assert_eq!(
            format!("{:?}", SendFlags::SIGNALED | SendFlags::INLINE),
            "SendFlags(SIGNALED | INLINE)"
        );
    }
}
