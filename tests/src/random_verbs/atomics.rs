//! RDMA atomics in the random sequences: posting them (with the post-time rules a taken
//! atomic must have kept), their completions' statuses, and the ledger of each target word
//! that checks its fetch and adds were each applied exactly once, in some order, their
//! values before landing in the requesters' entries.

use cmtwin::verbs::{DataPath, Payload, SendOp, Sge, WcStatus, WorkCompletion};

use super::op::Op;
use super::posts::MAX_SGES;
use super::{Home, Model, Role};

/// The statuses rxe completes an RC atomic with: success; a local entry it cannot write the
/// value before into (LOC_PROT_ERR); a refused request (REM_ACCESS_ERR for the region,
/// REM_INV_REQ_ERR for the QP's rights or resources, REM_OP_ERR); no answer
/// (RETRY_EXC_ERR); a flush. Never RNR (a responder does not RNR an atomic), never a length
/// error (8 bytes or more were checked at the post).
const ATOMIC_STATUSES: &[WcStatus] = &[
    WcStatus::SUCCESS,
    WcStatus::LOC_QP_OP_ERR,
    WcStatus::LOC_PROT_ERR,
    WcStatus::WR_FLUSH_ERR,
    WcStatus::REM_INV_REQ_ERR,
    WcStatus::REM_ACCESS_ERR,
    WcStatus::REM_OP_ERR,
    WcStatus::RETRY_EXC_ERR,
];

/// A target word of the ledger: 8 bytes of a region at `offset`, the value they held before
/// the first atomic aimed at them was posted, and what happened to them since.
#[derive(Debug)]
pub(super) struct Word {
    mr: usize,
    offset: usize,
    initial: u64,
    /// Fetch and adds aimed at it and taken (or kept) by a QP.
    posted: u32,
    /// Their successful completions: the value before in the requester's entry (when those
    /// bytes were the request's alone), and the addend.
    done: Vec<(Option<u64>, u64)>,
    /// Something else may have changed it (a compare and swap, a failed or silent fetch and
    /// add, the application), or a value is unknown: the ledger says nothing of it.
    tainted: bool,
}

/// What the model keeps of an atomic request.
#[derive(Clone, Debug)]
pub(super) struct AtomicWr {
    /// Its word in the ledger.
    word: Option<usize>,
    /// A fetch and add's addend (`None`: a compare and swap).
    add: Option<u64>,
    /// The local bytes its value before lands in (its entries' first 8).
    local: Vec<Sge>,
    /// The application wrote over those bytes after the post.
    clobbered: bool,
    /// The requests outstanding when it was posted (which may have written its local bytes
    /// after its value before landed).
    before_post: Vec<u64>,
}

/// The first 8 bytes of `sges`, as entries.
fn first_eight(sges: &[Sge]) -> Vec<Sge> {
    let mut left = 8u32;
    let mut out = Vec::new();
    for s in sges {
        if left == 0 {
            break;
        }
        let n = s.length.min(left);
        if n > 0 {
            out.push(Sge { length: n, ..*s });
        }
        left -= n;
    }
    out
}

impl Model {
    /// Posts the atomic `op` describes, checks that a taken one kept librxe's post-time
    /// rules, and records it for the ledger.
    pub(super) fn post_atomic(&mut self, op: &Op) {
        let Op::PostAtomic {
            qp,
            add,
            sges,
            remote,
            compare,
            value,
            inline,
            ud,
            signaled,
        } = op
        else {
            unreachable!("not an atomic");
        };
        if self.qps.is_empty() {
            return;
        }
        let q = qp.idx % self.qps.len();
        let sges: Vec<Sge> = sges.iter().take(MAX_SGES).map(|s| self.sge(s, q)).collect();
        let (remote_addr, rkey) = match self.atomic_region(remote.mr, q) {
            Some(mr) => (
                mr.addr
                    .wrapping_add(u64::from(remote.offset))
                    .wrapping_sub(4),
                super::posts::key_of(mr.rkey, remote.key),
            ),
            None => self.remote(remote, q),
        };
        let target = self.word_at(rkey, remote_addr);
        let now = target.and_then(|(m, o)| self.read_u64(m, o));
        let sop = match add {
            true => SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                compare_add: *value,
            },
            false => SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare_add: now.filter(|_| compare % 2 == 0).unwrap_or(*compare),
                swap: *value,
            },
        };
        let bytes = [0x5a; 8];
        let payload = match inline {
            true => Payload::Inline(&bytes),
            false => Payload::Sges(&sges),
        };
        let wr_id = self.next_wr + 1;
        let taken = self.post_send(*qp, sop, payload, *ud, |wr| wr.signaled = *signaled);
        let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if taken {
            let rules = (
                remote_addr % 8,
                len >= 8,
                inline,
                self.qps[q].v.ud,
                ud.is_some(),
            );
            assert_eq!(
                rules,
                (0, true, &false, false, false),
                "an atomic was taken though (remote_addr % 8, entries of 8 bytes or more, \
                 inline, on a UD QP, with a UD destination) is {rules:?}"
            );
        }
        if !self.wrs.contains_key(&wr_id) {
            return;
        }
        let word = target.and_then(|t| self.word_for(t, now?));
        if let Some(k) = word {
            match add {
                true => self.words[k].posted += 1,
                false => self.words[k].tainted = true,
            }
        }
        let local = first_eight(&sges);
        for s in &local {
            self.writers.push(super::Writer {
                key: s.lkey,
                start: s.addr,
                end: s.addr + u64::from(s.length),
                role: Role::ValueBefore(wr_id),
                wr: wr_id,
            });
        }
        self.writers.push(super::Writer {
            key: rkey,
            start: remote_addr,
            end: remote_addr.saturating_add(8),
            role: if *add { Role::FetchAdd } else { Role::Other },
            wr: wr_id,
        });
        let a = AtomicWr {
            before_post: self.wrs.keys().copied().filter(|&id| id != wr_id).collect(),
            word,
            add: add.then_some(*value),
            local,
            clobbered: false,
        };
        self.wrs.get_mut(&wr_id).expect("recorded").atomic = Some(a);
    }

    /// Three times in four (`choice % 4 != 0`), the `choice / 4`-th live region of the other
    /// host with REMOTE_ATOMIC, if there is one (else [`Model::remote`]'s choice).
    fn atomic_region(&self, choice: usize, qp: usize) -> Option<cmtwin::verbs::MemoryRegion> {
        let home = self.qps[qp].home;
        let fits = |m: &&super::Entry<super::MrRec>| {
            m.live
                && m.home != home
                && m.home != Home::Foreign
                && m.v
                    .mr
                    .access
                    .contains(cmtwin::verbs::AccessFlags::REMOTE_ATOMIC)
        };
        let n = self.mrs.iter().filter(fits).count();
        if choice % 4 == 0 || n == 0 {
            return None;
        }
        self.mrs
            .iter()
            .filter(fits)
            .nth(choice / 4 % n)
            .map(|m| m.v.mr)
    }

    /// The one live region of the bed whose remote key is `rkey` and which holds 8 aligned
    /// bytes at `addr`: its index and the offset (`None` if none or several).
    fn word_at(&self, rkey: u32, addr: u64) -> Option<(usize, usize)> {
        let mut hits = (0..self.mrs.len()).filter(|&i| {
            let e = &self.mrs[i];
            let mr = &e.v.mr;
            e.live
                && e.home != Home::Foreign
                && mr.rkey == rkey
                && addr % 8 == 0
                && addr >= mr.addr
                && addr - mr.addr + 8 <= mr.length as u64
        });
        let first = hits.next()?;
        if hits.next().is_some() {
            return None;
        }
        Some((first, (addr - self.mrs[first].v.mr.addr) as usize))
    }

    /// The native-endian u64 at `offset` of region `mr`, if it can be read.
    fn read_u64(&self, mr: usize, offset: usize) -> Option<u64> {
        let e = &self.mrs[mr];
        let mut b = [0u8; 8];
        let server = e.home == Home::Server;
        let r = self.cm(server).mr_read(e.v.mr.handle, offset, &mut b);
        r.ok().map(|()| u64::from_ne_bytes(b))
    }

    /// The ledger's word at `(mr, offset)`, made with `initial` if new.
    fn word_for(&mut self, (mr, offset): (usize, usize), initial: u64) -> Option<usize> {
        if let Some(k) = self
            .words
            .iter()
            .position(|w| w.mr == mr && w.offset == offset)
        {
            return Some(k);
        }
        self.words.push(Word {
            mr,
            offset,
            initial,
            posted: 0,
            done: Vec::new(),
            tainted: false,
        });
        Some(self.words.len() - 1)
    }

    /// The application wrote `len` bytes at `offset` of region `mr`: the words there leave
    /// the ledger, and atomics whose value before lands there lose it.
    pub(super) fn app_wrote(&mut self, mr: usize, offset: usize, len: usize) {
        for w in self.words.iter_mut().filter(|w| w.mr == mr) {
            if w.offset < offset + len && offset < w.offset + 8 {
                w.tainted = true;
            }
        }
        let m = self.mrs[mr].v.mr;
        let (start, end) = (m.addr_at(offset), m.addr_at(offset + len));
        for w in self.wrs.values_mut() {
            let Some(a) = &mut w.atomic else { continue };
            let hit = |s: &Sge| s.lkey == m.lkey && s.addr < end && start < s.addr + 8;
            if a.local.iter().any(hit) {
                a.clobbered = true;
            }
        }
    }

    /// An atomic `a` (request `wr_id`) completed with `wc`, or silently (`None`, an
    /// unsignaled one before a later completion): its status is one rxe gives, and a
    /// successful fetch and add enters its word's ledger.
    pub(super) fn atomic_completed(
        &mut self,
        wr_id: u64,
        a: &AtomicWr,
        wc: Option<&WorkCompletion>,
    ) {
        if let Some(wc) = wc {
            assert!(
                ATOMIC_STATUSES.contains(&wc.status),
                "atomic wr {wr_id} completed with {:?}, not a status of an atomic",
                wc.status
            );
        }
        let Some(k) = a.word else { return };
        match (wc.map(|c| c.status), a.add) {
            (Some(WcStatus::SUCCESS), Some(add)) => {
                let before = self.value_before(wr_id, a);
                self.words[k].done.push((before, add));
            }
            _ => self.words[k].tainted = true,
        }
    }

    /// The value before in atomic `a`'s local bytes, if they are live, readable and no
    /// other work or the application could have written them since it landed: every other
    /// request that may write there completed before `a` was posted, and its own entries do
    /// not overlap.
    fn value_before(&self, wr_id: u64, a: &AtomicWr) -> Option<u64> {
        // Entries over the same bytes keep the later part of the value: none is known.
        let overlap = a.local.iter().enumerate().any(|(i, s)| {
            a.local[i + 1..].iter().any(|t| {
                s.lkey == t.lkey
                    && s.addr < t.addr + u64::from(t.length)
                    && t.addr < s.addr + u64::from(s.length)
            })
        });
        if a.clobbered || overlap {
            return None;
        }
        let mut got = Vec::with_capacity(8);
        for s in &a.local {
            let alone = self.writers.iter().all(|w| {
                w.key != s.lkey
                    || w.end <= s.addr
                    || s.addr + u64::from(s.length) <= w.start
                    || w.wr == wr_id
                    || (w.wr < wr_id
                        && !self.wrs.contains_key(&w.wr)
                        && !a.before_post.contains(&w.wr))
            });
            let i = self.mrs.iter().position(|m| {
                m.live
                    && m.home != Home::Foreign
                    && m.v.mr.lkey == s.lkey
                    && s.addr >= m.v.mr.addr
                    && s.addr - m.v.mr.addr + u64::from(s.length) <= m.v.mr.length as u64
            })?;
            if !alone {
                return None;
            }
            let e = &self.mrs[i];
            let mut b = vec![0u8; s.length as usize];
            let off = (s.addr - e.v.mr.addr) as usize;
            let server = e.home == Home::Server;
            self.cm(server).mr_read(e.v.mr.handle, off, &mut b).ok()?;
            got.extend_from_slice(&b);
        }
        let bytes: [u8; 8] = got.try_into().ok()?;
        Some(u64::from_ne_bytes(bytes))
    }

    /// Every word of the ledger whose fetch and adds all completed successfully, that
    /// nothing else targeted and that is still readable holds its initial value plus their
    /// addends; and when every value before is known, they chain: from the initial value,
    /// each is the one before plus an addend, each addend used once (each applied exactly
    /// once, even when a request or its acknowledgement was lost and resent).
    /// Nothing once a QP may have restarted its PSNs (`psns_restarted`).
    pub(super) fn check_words(&self) {
        if self.psns_restarted {
            return;
        }
        for (k, w) in self.words.iter().enumerate() {
            if w.tainted || w.posted as usize != w.done.len() || !self.mrs[w.mr].live {
                continue;
            }
            let m = self.mrs[w.mr].v.mr;
            let (start, end) = (m.addr_at(w.offset), m.addr_at(w.offset + 8));
            let others = self.writers.iter().any(|x| {
                (x.key == m.rkey || x.key == m.lkey)
                    && x.start < end
                    && start < x.end
                    && x.role != Role::FetchAdd
            });
            let Some(now) = self.read_u64(w.mr, w.offset).filter(|_| !others) else {
                continue;
            };
            let sum = w
                .done
                .iter()
                .fold(w.initial, |s, &(_, a)| s.wrapping_add(a));
            assert_eq!(
                now,
                sum,
                "word {k} ({w:?}): {} fetch and adds from {:#x} should leave {sum:#x}",
                w.done.len(),
                w.initial
            );
            let known = w.done.iter().all(|(b, _)| b.is_some());
            if self.verbose {
                eprintln!("    ledger: word {k} holds {now:#x} after {} fetch and adds (values before known: {known})", w.done.len());
            }
            if known {
                chain(k, w);
            }
        }
    }
}

/// The values before of word `w`'s fetch and adds chain from its initial value.
fn chain(k: usize, w: &Word) {
    let mut left: Vec<(u64, u64)> = w
        .done
        .iter()
        .map(|&(b, a)| (b.expect("known"), a))
        .collect();
    let mut at = w.initial;
    while !left.is_empty() {
        let Some(i) = left.iter().position(|&(b, _)| b == at) else {
            panic!(
                "word {k} ({w:?}): after {:#x} no fetch and add saw it as its value before \
                 (left: {left:?})",
                at
            );
        };
        at = at.wrapping_add(left.swap_remove(i).1);
    }
}
