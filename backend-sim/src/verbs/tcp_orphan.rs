//! The TCP socket a siw connection leaves behind when it is dropped with bytes unacknowledged.
//!
//! siw closes a connection (`rdma_disconnect`'s move to CLOSING, a move to ERROR, a QP or id
//! destroyed) with `siw_qp_cm_drop`, which releases its kernel socket (`sock_release`) without
//! `SO_LINGER` and without an abort: `tcp_close` resets the connection only when received
//! bytes were left unread, which siw never leaves (it reads the socket as data arrives), and
//! otherwise queues a FIN behind the bytes still in the socket. The orphaned socket keeps
//! retransmitting them on its timer until they are acknowledged, a reset ends it, or TCP gives
//! up (`tcp_write_err`, no word to the peer). The peer's TCP delivers in order: a FIN that
//! arrives while bytes before it are missing waits in its out-of-order queue until they come,
//! so the peer's siw QP takes them (a receive completes) before it sees the close.
//! (Linux 6.1 and 6.12: drivers/infiniband/sw/siw/siw_cm.c `siw_qp_cm_drop`,
//! `siw_destroy_cep_sock`; net/ipv4/tcp.c `__tcp_close`; tcp_input.c `tcp_data_queue`.)
//!
//! The model: a [`TcpOrphan`] keyed by the closed QP's (host, number) holds the requests its
//! QP had handed to TCP and not seen acknowledged ([`super::rc::RcQp::tcp_backlog`]), with the
//! QP's TCP timer as it stood; acknowledgements from the peer QP reach it wherever the QP went
//! (closed, destroyed). The FIN travels as before; only when it reaches a peer QP still in RTS
//! that has not taken the orphan's last request is it held there, and handed to the peer's CM
//! once the peer QP took the missing bytes (or refused them, or left RTS). A request of the
//! orphan reaching a peer QP that is closed meets a reset (a released socket answers data with
//! one), which ends the orphan. Without a loss nothing changes: the bytes are on the wire ahead
//! of the FIN, on the same FIFO link.

use std::cmp::Ordering;

use cmtwin::verbs::QpState;

use super::packet::{psn_cmp, Body, Packet};
use super::rc::TcpBacklog;
use super::tcp_timer::TcpTimeout;
use super::{ObjKey, Qp, VerbsAction};
use crate::cm::messages::Body as CmBody;
use crate::engine::timeline::{SimTime, TimerKey};
use crate::world::{Action, DevKey, EpKey, HostKey, World};

/// The socket of a dropped siw connection that still holds unacknowledged bytes.
/// What an orphaned socket takes over from a QP (see [`World::siw_orphan_stream`]).
struct OrphanParts {
    /// The QP's (host, number): the socket's key.
    key: (HostKey, u32),
    dev: DevKey,
    /// When the QP's TCP timer was due (not before now).
    due: SimTime,
    peer: (HostKey, u32),
    backlog: TcpBacklog,
}

pub(crate) struct TcpOrphan {
    /// The device the socket's host sends on (gone: the socket is gone).
    dev: DevKey,
    /// The peer QP (host, number) the bytes are for.
    peer: (HostKey, u32),
    /// The bytes, the path's timing and the timer's standing.
    backlog: TcpBacklog,
    /// The retransmission timer's entry on the timeline.
    timer: Option<TimerKey>,
    /// The peer's CM endpoint whose FIN from endpoint `.1` waits for the missing bytes.
    held_fin: Option<(EpKey, EpKey)>,
}

impl TcpOrphan {
    /// Whether a responder expecting `epsn` still misses the last of the bytes.
    fn missing_at(&self, epsn: u32) -> bool {
        (self.backlog.unacked.back()).is_some_and(|p| psn_cmp(p.psn, epsn) != Ordering::Less)
    }

    /// Drops the requests acknowledged by a response to `psn`; whether any was.
    fn acknowledge(&mut self, psn: u32) -> bool {
        let before = self.backlog.unacked.len();
        while (self.backlog.unacked.front())
            .is_some_and(|p| psn_cmp(p.psn, psn) != Ordering::Greater)
        {
            self.backlog.unacked.pop_front();
        }
        self.backlog.unacked.len() < before
    }

    /// What the timer's firing sends again, and when it fires next (`None`: TCP gave up).
    fn fire(&mut self) -> Option<(Vec<Packet>, Option<std::time::Duration>)> {
        let (what, next) = self.backlog.timer.fire(self.backlog.path);
        let resend = match what {
            TcpTimeout::Probe => self.backlog.unacked.back().cloned().into_iter().collect(),
            TcpTimeout::Retransmit => self.backlog.unacked.iter().cloned().collect(),
            TcpTimeout::GiveUp => return None,
        };
        Some((resend, next))
    }
}

impl World {
    /// siw drops the connection of RTS QP `q` from this side: what TCP holds unacknowledged
    /// stays with an orphaned socket that keeps retransmitting it.
    pub(crate) fn siw_orphan_stream(&mut self, q: ObjKey) {
        if let Some(parts) = self.verbs.qps.get(&q).and_then(|qp| self.orphan_parts(qp)) {
            self.orphan_stream(parts);
        }
    }

    /// [`World::siw_orphan_stream`] of a QP already taken out of the table.
    pub(crate) fn siw_orphan_stream_of(&mut self, qp: &Qp) {
        if let Some(parts) = self.orphan_parts(qp) {
            self.orphan_stream(parts);
        }
    }

    /// What an orphaned socket takes over from QP `qp`, if it holds unacknowledged bytes of a
    /// connection whose device is present.
    fn orphan_parts(&self, qp: &Qp) -> Option<OrphanParts> {
        let (Some(peer), Some(backlog)) = (qp.peer, qp.machine.tcp_backlog()) else {
            return None;
        };
        if !self.topo.devices[qp.dev].present {
            return None;
        }
        Some(OrphanParts {
            key: (qp.host, qp.qpn),
            dev: qp.dev,
            due: qp.timer_due.max(self.now),
            peer,
            backlog,
        })
    }

    /// Hands what `parts` holds to an orphaned socket, replacing any of the same QP number.
    fn orphan_stream(&mut self, parts: OrphanParts) {
        let OrphanParts {
            key,
            dev,
            due,
            peer,
            backlog,
        } = parts;
        self.end_orphan(key);
        let action = Action::Verbs(VerbsAction::OrphanTimer { stream: key });
        let timer = Some(self.timeline.schedule(due, action));
        let orphan = TcpOrphan {
            dev,
            peer,
            backlog,
            timer,
            held_fin: None,
        };
        self.verbs.orphans.insert(key, orphan);
    }

    /// The orphaned socket `key` is gone (acknowledged, reset, given up): a FIN it held back
    /// is never delivered.
    fn end_orphan(&mut self, key: (HostKey, u32)) {
        if let Some(t) = self.verbs.orphans.remove(&key).and_then(|o| o.timer) {
            self.timeline.cancel(t);
        }
    }

    /// Host `host` lost power: its orphaned sockets are gone with it (its QP numbers will be
    /// given out again).
    pub(crate) fn drop_orphans_of_host(&mut self, host: HostKey) {
        let keys: Vec<_> = (self.verbs.orphans.keys())
            .filter(|k| k.0 == host)
            .copied()
            .collect();
        for key in keys {
            self.end_orphan(key);
        }
    }

    /// The retransmission timer of orphaned socket `key` fired.
    pub(crate) fn orphan_timer(&mut self, key: (HostKey, u32)) {
        let Some(o) = self.verbs.orphans.get_mut(&key) else {
            return;
        };
        o.timer = None;
        let present = self.topo.devices[o.dev].present;
        let Some((resend, next)) = o.fire().filter(|_| present) else {
            // TCP gave up (tcp_write_err): the socket closes without a word to the peer.
            self.end_orphan(key);
            return;
        };
        if let Some(after) = next {
            let action = Action::Verbs(VerbsAction::OrphanTimer { stream: key });
            let t = self.timeline.schedule(self.now.after(after), action);
            self.verbs.orphans.get_mut(&key).expect("checked").timer = Some(t);
        }
        let peer = self.verbs.orphans[&key].peer;
        for packet in resend {
            if let Some(at) = self.wire_arrival(key, peer, &packet) {
                let action = VerbsAction::Deliver {
                    from: key,
                    to: peer,
                    packet,
                };
                self.timeline.schedule(at, Action::Verbs(action));
            }
        }
    }

    /// A response from QP `from` reached `to` (whatever became of the QP there): an orphaned
    /// socket there takes it as TCP's acknowledgement, or its reset.
    pub(crate) fn orphan_on_response(
        &mut self,
        from: (HostKey, u32),
        to: (HostKey, u32),
        pkt: &Packet,
    ) {
        let Some(o) = self.verbs.orphans.get_mut(&to).filter(|o| o.peer == from) else {
            return;
        };
        if pkt.body == Body::TcpReset || !self.topo.devices[o.dev].present {
            self.end_orphan(to);
            return;
        }
        if !o.acknowledge(pkt.psn) {
            return;
        }
        if let Some(t) = o.timer.take() {
            self.timeline.cancel(t);
        }
        if o.backlog.unacked.is_empty() {
            self.release_held_fin(to);
            self.end_orphan(to);
            return;
        }
        let after = o.backlog.timer.arm(o.backlog.path, o.backlog.unacked.len());
        let action = Action::Verbs(VerbsAction::OrphanTimer { stream: to });
        let t = self.timeline.schedule(self.now.after(after), action);
        self.verbs.orphans.get_mut(&to).expect("checked").timer = Some(t);
    }

    /// A request of orphaned socket `from` reached QP `to` (which took it or not): a FIN it
    /// held back goes to the peer's CM once nothing before it is missing; a closed siw QP
    /// answers with a reset.
    pub(crate) fn orphan_request_arrived(&mut self, from: (HostKey, u32), to: (HostKey, u32)) {
        if self.verbs.orphans.get(&from).is_none_or(|o| o.peer != to) {
            return;
        }
        self.release_held_fin(from);
        let closed = (self.verbs.qp_by_num.get(&to))
            .map(|q| &self.verbs.qps[q])
            .is_some_and(|qp| qp.machine.is_siw() && qp.machine.state() != QpState::Rts);
        if closed {
            self.answer_with_tcp_reset(to, from);
        }
    }

    /// Whether the FIN from endpoint `from` reaching endpoint `ep` must wait for bytes of an
    /// orphaned socket that the peer QP has not taken yet; if so it is held by that socket.
    pub(crate) fn fin_held_for_missing_bytes(
        &mut self,
        ep: EpKey,
        from: EpKey,
        body: &CmBody,
    ) -> bool {
        if !matches!(body, CmBody::Fin) || self.verbs.orphans.is_empty() {
            return false;
        }
        let Some(q) = (self.cm.eps.get(&ep))
            .and_then(|e| e.owner)
            .and_then(|id| self.cm_qp(id))
        else {
            return false;
        };
        let qp = &self.verbs.qps[&q];
        let me = (qp.host, qp.qpn);
        let Some(epsn) = qp.machine.expected_psn() else {
            return false;
        };
        if qp.machine.state() != QpState::Rts {
            return false;
        }
        let waiting = (self.verbs.orphans.iter_mut())
            .find(|(_, o)| o.peer == me && o.held_fin.is_none() && o.missing_at(epsn));
        match waiting {
            Some((_, o)) => {
                o.held_fin = Some((ep, from));
                true
            }
            None => false,
        }
    }

    /// Hands the FIN orphaned socket `key` held back to the peer's CM once the peer QP took
    /// the last of its bytes, refused them, left RTS or is gone.
    fn release_held_fin(&mut self, key: (HostKey, u32)) {
        let Some(o) = self.verbs.orphans.get(&key) else {
            return;
        };
        let Some((ep, from)) = o.held_fin else {
            return;
        };
        let peer = (self.verbs.qp_by_num.get(&o.peer)).map(|q| &self.verbs.qps[q].machine);
        let still_missing = peer.is_some_and(|m| {
            m.state() == QpState::Rts && m.expected_psn().is_some_and(|e| o.missing_at(e))
        });
        if still_missing {
            return;
        }
        self.verbs.orphans.get_mut(&key).expect("checked").held_fin = None;
        if self.cm.eps.contains_key(&ep) {
            self.drive(ep, |e, out| e.on_message(from, CmBody::Fin, out));
        }
    }
}
