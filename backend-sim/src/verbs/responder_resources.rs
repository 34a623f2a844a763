//! A responder's read and atomic resources: the RDMA reads and atomics its QP executed,
//! kept so that a duplicate of one (the requester resending after a lost response) is
//! answered again without being executed again.
//!
//! rxe keeps them in a ring of `max_dest_rd_atomic` places (rounded up to a power of two;
//! `rxe_prepare_res` takes the next place for every read or atomic it executes, dropping
//! what the place held), empties the ring when the QP is reset (`rxe_qp_reset`:
//! `cleanup_rd_atomic_resources`) and makes a new one whenever `IBV_QP_MAX_DEST_RD_ATOMIC`
//! is modified (`rxe_qp_from_attr`). A duplicate read or atomic whose PSN no place holds is
//! dropped without an answer (`duplicate_request`: class D), and so is a duplicate read
//! asking for other bytes or another rkey than the read kept; the requester's retries run
//! out. Linux 6.1 and 6.12 alike, read from the source. An InfiniBand HCA keeps its
//! responder resources the same way by the specification; siw never sees a duplicate (TCP
//! delivers once).

use std::collections::VecDeque;

/// One executed request, as kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// An RDMA READ of `len` bytes at `addr` under `rkey`: a duplicate is read again from
    /// the region (its bytes as they are then, as rxe replays it).
    Read {
        /// Its PSN.
        psn: u32,
        /// The address it read.
        addr: u64,
        /// How many bytes.
        len: u32,
        /// The key it read under.
        rkey: u32,
    },
    /// An atomic: a duplicate is answered with the value before it executed.
    Atomic {
        /// Its PSN.
        psn: u32,
        /// The value before.
        orig: u64,
    },
}

impl Kept {
    /// The PSN of the request kept.
    fn psn(&self) -> u32 {
        match *self {
            Kept::Read { psn, .. } | Kept::Atomic { psn, .. } => psn,
        }
    }

    /// Whether a duplicate READ of `len` bytes at `addr` under `rkey` may be answered from
    /// this: a read kept under the same key whose bytes hold the ones asked for.
    pub(crate) fn answers_read(&self, addr: u64, len: u32, rkey: u32) -> bool {
        match *self {
            Kept::Read {
                addr: a,
                len: l,
                rkey: k,
                ..
            } => {
                k == rkey
                    && addr >= a
                    && addr
                        .checked_add(u64::from(len))
                        .is_some_and(|end| end <= a.saturating_add(u64::from(l)))
            }
            Kept::Atomic { .. } => false,
        }
    }
}

/// A QP's kept requests, oldest first, at most as many as its places.
#[derive(Debug, Default)]
pub(crate) struct KeptRequests(VecDeque<Kept>);

impl KeptRequests {
    /// Keeps `kept` in a ring of `places`, dropping the oldest when it is full (nothing is
    /// kept with no place).
    pub(crate) fn keep(&mut self, places: u8, kept: Kept) {
        if places == 0 {
            return;
        }
        while self.0.len() >= usize::from(places) {
            self.0.pop_front();
        }
        self.0.push_back(kept);
    }

    /// The request kept for `psn`, if any.
    pub(crate) fn find(&self, psn: u32) -> Option<Kept> {
        self.0.iter().rev().find(|k| k.psn() == psn).copied()
    }
}

/// The places a QP's `max_dest_rd_atomic` gives it: rounded up to a power of two, as rxe
/// does, 0 staying 0 (rxe rounds the initiator depth, `max_rd_atomic`, the same way).
pub(crate) fn places(max_dest_rd_atomic: u8) -> u8 {
    match max_dest_rd_atomic {
        0 => 0,
        d => d.checked_next_power_of_two().unwrap_or(u8::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic(psn: u32) -> Kept {
        Kept::Atomic { psn, orig: 0 }
    }

    #[test]
    fn the_ring_drops_its_oldest_when_full() {
        let mut kept = KeptRequests::default();
        for psn in 0..3 {
            kept.keep(2, atomic(psn));
        }
        assert_eq!(
            (kept.find(0), kept.find(1), kept.find(2)),
            (None, Some(atomic(1)), Some(atomic(2)))
        );
        kept.keep(0, atomic(9));
        assert_eq!(kept.find(9), None, "no place, nothing kept");
    }

    #[test]
    fn a_duplicate_read_is_answered_within_the_bytes_and_key_kept() {
        let read = Kept::Read {
            psn: 4,
            addr: 0x1000,
            len: 64,
            rkey: 7,
        };
        assert!(read.answers_read(0x1000, 64, 7));
        assert!(read.answers_read(0x1010, 16, 7));
        assert!(!read.answers_read(0x1000, 65, 7));
        assert!(!read.answers_read(0x0fff, 8, 7));
        assert!(!read.answers_read(0x1000, 64, 8));
        assert!(!atomic(4).answers_read(0x1000, 8, 7));
    }

    #[test]
    fn places_round_up_to_a_power_of_two() {
        assert_eq!(
            [0, 1, 3, 4, 5, 128, 200].map(places),
            [0, 1, 4, 4, 8, 128, 255]
        );
    }
}
