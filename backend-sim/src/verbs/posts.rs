//! Posts: `ibv_post_send` and `ibv_post_recv` as the device takes them: the checks that
//! refuse a request (EINVAL, ENOMEM), the bytes gathered at post time (a bad key or range
//! becomes a LOC_PROT_ERR completion), a UD send's destination (its address handle and the
//! port's MTU), and the busy counts that keep a region registered
//! while requests name it.

use std::sync::Arc;

use cmtwin::verbs::{AccessFlags, Payload, RecvWr, SendOp, SendWr, Sge, UdDest, WcStatus};
use cmtwin::{Call, CmError, Errno, QpHandle, Result};

use super::packet::AtomicOp;
use super::rc::{PostError, RecvEntry, SendEntry, SendKind, Sges};
use super::ud::{UdSendEntry, UdTarget};
use super::{Mr, ObjKey};
use crate::world::{DevKey, HostKey, World};

/// The largest UD payload: the simulated port's active MTU.
pub(crate) const UD_MTU: u32 = super::device_profile::ACTIVE_MTU_BYTES;

/// The largest message (`max_msg_sz`, InfiniBand's 2^31 bytes): rxe refuses a send-queue
/// request longer than it, and a receive of it or more, with EINVAL at post time.
pub(crate) const MAX_MSG_SZ: u64 = 1 << 31;

/// The key a posted entry keeps when its key named no region at post time: no region ever
/// has it (keys start at 0x1000), so the entry fails as a bad key would.
pub(crate) const NO_KEY: u32 = 0;

/// The bytes `sges` span together (no overflow: up to 32 entries of 4 GiB).
fn total_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

impl World {
    // ----- posts -------------------------------------------------------------------------

    /// `ibv_post_send`.
    pub(crate) fn post_send(&mut self, host: HostKey, h: QpHandle, wr: &SendWr<'_>) -> Result<()> {
        let call = Call::PostSend;
        let q = self.qp_key(host, call, h)?;
        let qp = &self.verbs.qps[&q];
        let (dev, pd, cap) = (qp.dev, qp.pd, qp.machine.cap());
        match (qp.machine.is_ud(), wr.ud) {
            (true, Some(dest)) => return self.post_ud_send(host, q, wr, dest),
            (true, None) => {
                let why = "a send on a UD QP needs a destination (wr.ud)";
                return Err(CmError::new(call, Errno::EINVAL, why));
            }
            (false, Some(_)) => {
                let why = "a UD destination (wr.ud) on a connected QP";
                return Err(CmError::new(call, Errno::EINVAL, why));
            }
            (false, None) => {}
        }
        if wr.op.is_atomic() && qp.machine.is_siw() {
            // libsiw maps neither atomic opcode to one of siw's and refuses the request
            // before it reaches the ring (siw's query_device reports atomic_cap NONE).
            let why = format!("{:?}: siw has no atomic operations", wr.op);
            return Err(CmError::new(call, Errno::EINVAL, why));
        }
        let mut entry = self.send_entry(wr, dev, pd, &cap)?;
        entry.signaled = wr.signaled;
        entry.solicited = wr.solicited;
        entry.fence = wr.fence;
        entry.sges = self.hold_entries(dev, &entry.sges);
        match self.drive_qp(q, |m, _, out| m.post_send(entry, out)) {
            Ok(()) => Ok(()),
            Err((e, entry)) => {
                // A request refused but kept in the queue keeps its regions busy.
                for s in entry.iter().flat_map(|entry| entry.sges.iter()) {
                    self.release_entry(dev, s);
                }
                Err(post_error(call, e, cap.max_send_wr))
            }
        }
    }

    /// `ibv_post_send` of `wr` to `dest` on UD QP `q`.
    fn post_ud_send(
        &mut self,
        host: HostKey,
        q: ObjKey,
        wr: &SendWr<'_>,
        dest: UdDest,
    ) -> Result<()> {
        let call = Call::PostSend;
        let qp = &self.verbs.qps[&q];
        let (dev, pd, cap) = (qp.dev, qp.pd, qp.machine.cap());
        let refuse = |why: String| Err(CmError::new(call, Errno::EINVAL, why));
        let imm = match wr.op {
            SendOp::Send => None,
            SendOp::SendWithImm(imm) => Some(imm),
            op => return refuse(format!("{op:?} on a UD QP (only sends are)")),
        };
        let ah = &self.verbs.ahs[&self.ah_key(host, call, dest.ah)?];
        if ah.pd != pd {
            return refuse(format!("{} is of another PD than the QP", dest.ah));
        }
        let target = UdTarget {
            dgid: ah.attr.grh.dgid,
            global: ah.attr.is_global,
            dlid: ah.attr.dlid,
            remote_qpn: dest.remote_qpn,
            remote_qkey: dest.remote_qkey,
        };
        let sent = self.send_entry(wr, dev, pd, &cap)?;
        let len: u64 = match wr.payload {
            Payload::Inline(bytes) => bytes.len() as u64,
            Payload::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
        };
        if len > u64::from(UD_MTU) {
            return refuse(format!("{len} bytes exceed the port's MTU {UD_MTU}"));
        }
        let sges = self.hold_entries(dev, &sent.sges);
        let entry = UdSendEntry {
            wr_id: wr.wr_id,
            target,
            data: sent.data,
            imm,
            sges,
            signaled: wr.signaled,
            solicited: wr.solicited,
            fault: sent.fault,
        };
        match self.drive_qp(q, |m, _, out| m.post_ud_send(entry, out)) {
            Ok(()) => Ok(()),
            Err((e, entry)) => {
                // As for a connected QP: a request kept though refused keeps its regions.
                for s in entry.iter().flat_map(|entry| entry.sges.iter()) {
                    self.release_entry(dev, s);
                }
                Err(post_error(call, e, cap.max_send_wr))
            }
        }
    }

    /// The machine's request for `wr` on a QP of `dev`, `pd` and capacities `cap`: its bytes
    /// gathered (a read's target checked; an atomic's only when its response lands), a bad
    /// key or range noted as its LOC_PROT_ERR;
    /// EINVAL for what the QP cannot take at all.
    fn send_entry(
        &self,
        wr: &SendWr<'_>,
        dev: DevKey,
        pd: ObjKey,
        cap: &cmtwin::QpCap,
    ) -> Result<SendEntry> {
        let refuse = |why: String| Err(CmError::new(Call::PostSend, Errno::EINVAL, why));
        let kind = send_kind(wr);
        let read = matches!(kind, SendKind::Read { .. });
        let sges = match wr.payload {
            Payload::Inline(_) if read => return refuse("an RDMA read cannot be inline".into()),
            Payload::Inline(_) if kind.awaits_response() => {
                return refuse("an atomic cannot be inline".into())
            }
            Payload::Inline(bytes) if bytes.len() > cap.max_inline_data as usize => {
                let max = cap.max_inline_data;
                return refuse(format!(
                    "{} inline bytes exceed max_inline_data {max}",
                    bytes.len()
                ));
            }
            Payload::Inline(bytes) => {
                let no_entries = Sges::Many(Vec::new());
                return Ok(SendEntry::new(wr.wr_id, kind, Arc::from(bytes), no_entries));
            }
            Payload::Sges(sges) if sges.len() > cap.max_send_sge as usize => {
                let max = cap.max_send_sge;
                return refuse(format!("{} entries exceed max_send_sge {max}", sges.len()));
            }
            Payload::Sges(sges) if total_len(sges) > MAX_MSG_SZ => {
                let len = total_len(sges);
                return refuse(format!(
                    "{len} bytes exceed the largest message, {MAX_MSG_SZ}"
                ));
            }
            Payload::Sges(sges) => sges,
        };
        if let SendKind::Atomic { addr, .. } = kind {
            check_atomic(addr, total_len(sges))?;
        }
        let (kind, data, fault) = match kind {
            // rxe's requester does not touch an atomic's entries: its completer writes the
            // value before into them once the response is in, so a bad entry is found only
            // then (LOC_PROT_ERR, after the peer executed it: `RcQp::atomic_response`).
            SendKind::Atomic { .. } => (kind, Vec::new(), false),
            SendKind::Read { addr, rkey, .. } => {
                let len = total_len(sges) as u32;
                let ok = self.sges_valid(dev, pd, sges, AccessFlags::LOCAL_WRITE);
                (SendKind::Read { addr, rkey, len }, Vec::new(), !ok)
            }
            kind => match self.gather(dev, pd, sges) {
                Some(data) => (kind, data, false),
                None => (kind, Vec::new(), true),
            },
        };
        let mut entry = SendEntry::new(wr.wr_id, kind, Arc::from(data), Sges::from(sges));
        entry.fault = fault.then_some(WcStatus::LOC_PROT_ERR);
        Ok(entry)
    }

    /// EINVAL for a receive of no entries on a device that takes none (iWARP: see
    /// [`super::device_profile::takes_empty_receive`]).
    pub(crate) fn check_receive_has_entries(
        &self,
        call: Call,
        dev: DevKey,
        wr: &RecvWr<'_>,
    ) -> Result<()> {
        let transport = self.topo.devices[dev].transport;
        if wr.sg_list.is_empty() && !super::device_profile::takes_empty_receive(transport) {
            let why = "a receive of no entries (siw takes 1 to 6)";
            return Err(CmError::new(call, Errno::EINVAL, why));
        }
        Ok(())
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(&mut self, host: HostKey, h: QpHandle, wr: &RecvWr<'_>) -> Result<()> {
        let call = Call::PostRecv;
        let q = self.qp_key(host, call, h)?;
        let qp = &self.verbs.qps[&q];
        let (dev, cap) = (qp.dev, qp.machine.cap());
        if self.verbs.srq_of_qp.contains_key(&q) {
            let why = "the QP takes its receives from an SRQ (ibv_post_srq_recv)";
            return Err(CmError::new(call, Errno::EINVAL, why));
        }
        let len = total_len(wr.sg_list);
        if len >= MAX_MSG_SZ {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!("a receive of {len} bytes: messages are shorter than {MAX_MSG_SZ}"),
            ));
        }
        self.check_receive_has_entries(call, dev, wr)?;
        if wr.sg_list.len() > cap.max_recv_sge as usize {
            return Err(CmError::new(
                call,
                Errno::EINVAL,
                format!(
                    "{} entries exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    cap.max_recv_sge
                ),
            ));
        }
        let entry = RecvEntry {
            wr_id: wr.wr_id,
            sges: self.hold_entries(dev, wr.sg_list),
        };
        match self.drive_qp(q, |m, _, out| m.post_recv(entry, out)) {
            Ok(()) => Ok(()),
            Err((e, entry)) => {
                for s in entry.sges.iter() {
                    self.release_entry(dev, s);
                }
                Err(post_error(call, e, cap.max_recv_wr))
            }
        }
    }

    /// The bytes of `sgl`, in order, for an inline post on `h`: each entry inside a region of
    /// the QP's device that its key names (any PD, no access needed: the CPU copies them).
    pub(crate) fn inline_bytes(&self, host: HostKey, h: QpHandle, sgl: &[Sge]) -> Result<Vec<u8>> {
        let call = Call::PostSend;
        let dev = self.verbs.qps[&self.qp_key(host, call, h)?].dev;
        let mut data = Vec::new();
        for (n, s) in sgl.iter().enumerate() {
            let mr = self
                .verbs
                .mr_by_key
                .get(&(dev, s.lkey))
                .and_then(|k| self.verbs.mrs.get(k));
            let bytes = mr.and_then(|mr| {
                let off = usize::try_from(s.addr.checked_sub(mr.addr)?).ok()?;
                mr.buf.get(off..off.checked_add(s.length as usize)?)
            });
            let Some(bytes) = bytes else {
                let why =
                    format!("inline entry {n} ({s:?}) is not inside the region its key names");
                return Err(CmError::new(call, Errno::EINVAL, why));
            };
            data.extend_from_slice(bytes);
        }
        Ok(data)
    }

    /// Whether every entry lies in a region of `pd` on `dev` granting `access`.
    /// An entry of no bytes names no memory and is not looked up, whatever its key (rxe's
    /// `copy_data` and siw's `siw_check_sgl_tx` skip it; measured on rxe-6.1 and rxe-6.12).
    fn sges_valid(&self, dev: DevKey, pd: ObjKey, sges: &[Sge], access: AccessFlags) -> bool {
        sges.iter()
            .all(|s| s.length == 0 || self.region_of(dev, pd, s, access).is_some())
    }

    /// The region holding entry `s` and its offset there.
    fn region_of(
        &self,
        dev: DevKey,
        pd: ObjKey,
        s: &Sge,
        access: AccessFlags,
    ) -> Option<(&Mr, usize)> {
        let mr = self
            .verbs
            .mrs
            .get(self.verbs.mr_by_key.get(&(dev, s.lkey))?)?;
        let off = s.addr.checked_sub(mr.addr)?;
        let fits = off
            .checked_add(u64::from(s.length))
            .is_some_and(|e| e <= mr.buf.len() as u64);
        (mr.pd == pd && fits && mr.access.contains(access)).then_some((mr, off as usize))
    }

    /// The bytes of `sges`, in order; `None` if one is not in a region of `pd` (checked
    /// before anything is allocated: the lengths are the caller's).
    fn gather(&self, dev: DevKey, pd: ObjKey, sges: &[Sge]) -> Option<Vec<u8>> {
        if !self.sges_valid(dev, pd, sges, AccessFlags::NONE) {
            return None;
        }
        let mut data = Vec::with_capacity(total_len(sges) as usize);
        for s in sges.iter().filter(|s| s.length > 0) {
            let (mr, off) = self.region_of(dev, pd, s, AccessFlags::NONE)?;
            data.extend_from_slice(&mr.buf[off..off + s.length as usize]);
        }
        Some(data)
    }

    /// Counts `sges` against the regions their keys name (dereg is refused meanwhile), and
    /// gives them back as the request keeps them: an entry whose key names no region gets
    /// [`NO_KEY`], so that a region registered later under that key is neither released
    /// by the request's completion (it was never held) nor written by it.
    pub(crate) fn hold_entries(&mut self, dev: DevKey, sges: &[Sge]) -> Sges {
        let mut kept = Sges::from(sges);
        let entries: &mut [Sge] = match &mut kept {
            Sges::One(s) => std::slice::from_mut(s),
            Sges::Many(v) => v,
        };
        for s in entries {
            match self
                .verbs
                .mr_by_key
                .get(&(dev, s.lkey))
                .and_then(|k| self.verbs.mrs.get_mut(k))
            {
                Some(mr) => mr.busy += 1,
                None => s.lkey = NO_KEY,
            }
        }
        kept
    }

    /// Releases what [`World::hold_entries`] counted for `s`.
    pub(crate) fn release_entry(&mut self, dev: DevKey, s: &Sge) {
        if let Some(mr) = self
            .verbs
            .mr_by_key
            .get(&(dev, s.lkey))
            .and_then(|k| self.verbs.mrs.get_mut(k))
        {
            mr.busy -= 1;
        }
    }
}

/// The machine's kind of request for `wr` (a read's length is filled in from its entries).
fn send_kind(wr: &SendWr<'_>) -> SendKind {
    match wr.op {
        SendOp::Send => SendKind::Send { imm: None },
        SendOp::SendWithImm(imm) => SendKind::Send { imm: Some(imm) },
        SendOp::RdmaWrite { remote_addr, rkey } => SendKind::Write {
            addr: remote_addr,
            rkey,
            imm: None,
        },
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => SendKind::Write {
            addr: remote_addr,
            rkey,
            imm: Some(imm),
        },
        SendOp::RdmaRead { remote_addr, rkey } => SendKind::Read {
            addr: remote_addr,
            rkey,
            len: 0,
        },
        SendOp::AtomicCmpAndSwp {
            remote_addr,
            rkey,
            compare_add,
            swap,
        } => SendKind::Atomic {
            addr: remote_addr,
            rkey,
            op: AtomicOp::CmpSwap {
                compare: compare_add,
                swap,
            },
        },
        SendOp::AtomicFetchAndAdd {
            remote_addr,
            rkey,
            compare_add,
        } => SendKind::Atomic {
            addr: remote_addr,
            rkey,
            op: AtomicOp::FetchAdd { add: compare_add },
        },
    }
}

/// librxe's post-time checks of an atomic at `remote_addr` into entries of `len` bytes
/// together: EINVAL below 8 bytes or for an address not 8-byte aligned (its
/// `validate_send_wr`; longer entries are taken, the value before landing in their first 8
/// bytes).
fn check_atomic(remote_addr: u64, len: u64) -> Result<()> {
    let why = if len < 8 {
        format!("an atomic's entries hold {len} bytes, fewer than its 8")
    } else if remote_addr % 8 != 0 {
        format!("an atomic's remote_addr {remote_addr:#x} is not 8-byte aligned")
    } else {
        return Ok(());
    };
    Err(CmError::new(Call::PostSend, Errno::EINVAL, why))
}

/// The errno of a refused post.
fn post_error(call: Call, e: PostError, depth: u32) -> CmError {
    match e {
        PostError::Reset => CmError::new(call, Errno::EINVAL, "the QP is in RESET"),
        PostError::Full => CmError::new(
            call,
            Errno::ENOMEM,
            format!("the queue holds its {depth} requests"),
        ),
        PostError::NotReady { state, siw: false } => CmError::new(
            call,
            Errno::EINVAL,
            format!(
                "the QP is in {state:?}, not yet RTS (the request stays in the send queue \
                 and goes with the next post that succeeds, as on rxe)"
            ),
        ),
        PostError::NotReady { state, siw: true } => CmError::new(
            call,
            Errno::ENOTCONN,
            format!(
                "the QP is in {state:?}, not yet RTS (siw keeps the request in its ring and \
                 sends nothing more from it until ERROR flushes it)"
            ),
        ),
    }
}
