//! Data packets between QPs: a path parallel to the CM's messages (`wire.rs`), with the same
//! latency and jitter drawn from their own random streams, the fabric's random loss
//! probability, targeted losses and delays, and their own FIFO links, so that a CM message
//! held back does not hold data back (they travel on different QPs). A removed device sends
//! and receives nothing; a packet for a QP that does not exist, is not connected to the
//! sender, or is not ready to receive is dropped, as hardware drops it.

use std::fmt;

use crate::engine::timeline::SimTime;
use crate::rng::Stream;
use crate::trace::TraceKind;
use crate::world::{Action, HostKey, World};

use super::packet::Body;
use super::{ObjKey, Packet, VerbsAction};

impl World {
    /// Puts `pkt` on the wire from QP `q` to its peer.
    pub(crate) fn send_data(&mut self, q: ObjKey, pkt: Packet) {
        let qp = &self.verbs.qps[&q];
        let (host, dev) = (qp.host, qp.dev);
        let (Some(to), qpn) = (qp.peer, qp.qpn) else {
            return;
        };
        if !self.topo.devices[dev].present {
            return;
        }
        let from = (host, qpn);
        let Some(at) = self.wire_arrival(from, to, &pkt) else {
            return;
        };
        let action = VerbsAction::Deliver {
            from,
            to,
            packet: pkt,
        };
        self.timeline.schedule(at, Action::Verbs(action));
    }

    /// The fate of one data packet (`shown` in the trace) from QP `from` to QP `to`: lost to
    /// a targeted fault or the random loss (`None`), or the time it arrives (latency, jitter,
    /// a targeted delay, after what the link already carries).
    pub(crate) fn wire_arrival(
        &mut self,
        from: (HostKey, u32),
        to: (HostKey, u32),
        shown: &dyn fmt::Display,
    ) -> Option<SimTime> {
        let host = from.0;
        let mut extra = std::time::Duration::ZERO;
        if let Some(f) = self.verbs.faults.front_mut() {
            f.count -= 1;
            let delay = f.delay;
            if f.count == 0 {
                self.verbs.faults.pop_front();
            }
            match delay {
                None => {
                    self.trace_packet(host, TraceKind::Loss, from, to, shown, "targeted");
                    return None;
                }
                Some(d) => extra = d,
            }
        }
        if self.rng.chance(Stream::DataLoss, self.cfg.loss_probability) {
            self.trace_packet(host, TraceKind::Loss, from, to, shown, "");
            return None;
        }
        let jitter = self.rng.range(
            Stream::DataLatency,
            0,
            self.cfg.wire_jitter.as_nanos() as u64,
        );
        let delay = self.cfg.wire_latency + std::time::Duration::from_nanos(jitter) + extra;
        let last = self.verbs.link_clock.entry((host, to.0)).or_default();
        let at = self.now.after(delay).max(*last);
        *last = at;
        self.trace_packet(host, TraceKind::Send, from, to, shown, "");
        Some(at)
    }

    /// A data packet arrives at QP `to`.
    pub(crate) fn deliver_data(&mut self, from: (HostKey, u32), to: (HostKey, u32), pkt: Packet) {
        let target = self
            .verbs
            .qp_by_num
            .get(&to)
            .map(|q| (*q, &self.verbs.qps[q]));
        let why = match target {
            None => "no such QP",
            Some((_, qp)) if !self.topo.devices[qp.dev].present => "device removed",
            Some((_, qp)) if qp.peer != Some(from) => "not connected to the sender",
            Some(_) => "",
        };
        // What an orphaned siw socket at either end makes of it (`tcp_orphan.rs`), once the
        // QP there had it.
        let (request, response) = match self.verbs.orphans.is_empty() {
            true => (false, None),
            false => (
                pkt.is_request(),
                Some(pkt.clone()).filter(|p| !p.is_request()),
            ),
        };
        match target.filter(|_| why.is_empty()) {
            Some((q, _)) => {
                self.trace_packet(to.0, TraceKind::Recv, from, to, &pkt, "");
                self.drive_qp(q, |m, mem, out| m.on_packet(pkt, mem, out));
            }
            None => {
                self.trace_packet(to.0, TraceKind::Drop, from, to, &pkt, why);
                if why != "device removed" {
                    self.reset_stale_tcp_segment(from, to, &pkt);
                }
            }
        }
        if let Some(response) = response {
            self.orphan_on_response(from, to, &response);
        } else if request {
            self.orphan_request_arrived(from, to);
        }
    }

    /// siw: a request from QP `from` reached a host whose device is up but has no connection
    /// for it (`to` gone, or another connection's since the host came back from a power-off):
    /// the host's TCP has no socket for the segment and answers with a reset, which ends the
    /// sender's connection ([`Body::TcpReset`]). An InfiniBand or RoCE packet is dropped
    /// without an answer.
    fn reset_stale_tcp_segment(&mut self, from: (HostKey, u32), to: (HostKey, u32), pkt: &Packet) {
        let sender_is_siw = (self.verbs.qp_by_num.get(&from))
            .is_some_and(|q| self.verbs.qps[q].machine.is_siw())
            || self.verbs.orphans.contains_key(&from);
        let host_is_up =
            (self.topo.hosts[to.0].devices.iter()).any(|&d| self.topo.devices[d].present);
        if sender_is_siw && host_is_up && pkt.is_request() {
            self.answer_with_tcp_reset(to, from);
        }
    }

    /// The TCP of host `at.0` answers a segment that QP `sender` sent to QP `at` with a
    /// reset.
    pub(crate) fn answer_with_tcp_reset(&mut self, at: (HostKey, u32), sender: (HostKey, u32)) {
        let reset = Packet {
            psn: 0,
            body: Body::TcpReset,
        };
        if let Some(at_time) = self.wire_arrival(at, sender, &reset) {
            let action = VerbsAction::Deliver {
                from: at,
                to: sender,
                packet: reset,
            };
            self.timeline.schedule(at_time, Action::Verbs(action));
        }
    }

    /// Traces a data packet from QP `from` to QP `to` (only when tracing is on).
    pub(crate) fn trace_packet(
        &mut self,
        host: HostKey,
        kind: TraceKind,
        from: (HostKey, u32),
        to: (HostKey, u32),
        pkt: &dyn fmt::Display,
        note: &str,
    ) {
        if self.trace.is_on() {
            self.record_text(Some(host), kind, |_| {
                let note = if note.is_empty() {
                    String::new()
                } else {
                    format!(" ({note})")
                };
                format!("data qp {:#x} -> qp {:#x}: {pkt}{note}", from.1, to.1)
            });
        }
    }
}
