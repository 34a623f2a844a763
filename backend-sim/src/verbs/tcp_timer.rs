//! TCP's retransmission timer under a siw connection. siw carries RDMAP over a kernel TCP
//! socket, so a lost message is sent again when TCP decides, not after the QP's `timeout`
//! attribute, and a peer that falls silent ends the connection when TCP gives up, not after
//! `retry_count` (Linux's `net/ipv4/tcp_timer.c`, `tcp_output.c`, `tcp_input.c`; the same in
//! 6.1 and 6.12):
//!
//! * The retransmission timeout (RTO) is the smoothed round trip plus its variance, which
//!   is never under `TCP_RTO_MIN` (200 ms), in whole kernel ticks: 204 ms at 250 Hz on a
//!   path whose round trip is under a tick (`ss` shows `rto:204` on siw's sockets in the
//!   VM).
//! * Data sent with nothing outstanding first arms a tail loss probe, after twice the round
//!   trip plus 200 ms when one segment is outstanding (so at the RTO) and plus 2 ms when
//!   several are; the probe sends the last segment again and the RTO is re-armed from then.
//! * Each RTO that fires sends the oldest segment again and doubles the timeout, up to
//!   `TCP_RTO_MAX` (120 s).
//! * At an RTO, once one has already fired, TCP gives up if the oldest unacknowledged
//!   segment was first sent at least `tcp_retries2` (15) model retransmissions ago: 924.6 s
//!   (`tcp_model_timeout`: 200 ms doubled nine times, then six times 120 s). The socket
//!   closes without a reset to the peer (`tcp_write_err`), and siw sees its connection
//!   close.
//!
//! Measured on siw-6.1 (`tc qdisc ... netem loss 100%` on the VM's loopback, which carries
//! both addresses' traffic, around one 8-byte SEND; `ss -ti` on siw's sockets):
//! * with the loss lifted after 2.1 to 4.9 s, the SEND reached the peer with the first
//!   retransmission of the schedule 204, 408, 816, 1632, 3264, 6528 ms after the post that
//!   came after the loss stopped (late by the VM's scheduling: 0.1 to 0.4 s; a connection
//!   whose handshake had measured a slower round trip had an RTO of 252 ms and its schedule);
//!   `ss` counted one retransmission more than the backoff (the loss probe);
//! * with the loss kept, TCP gave up after 16 retransmissions (the probe and 15 RTOs) at
//!   1011.2 s, where this model gives 1001.8 s for that connection's RTO of 316 ms (a slow
//!   handshake in the emulated VM) and the kernel's timer wheel fires each 120 s timer up to
//!   2 s late. The sender got DISCONNECTED (status 0), its receive WR_FLUSH_ERR. The peer
//!   was told nothing until it sent: its SEND completed SUCCESS and it got DISCONNECTED
//!   (status 0) at once, from the reset the first side's kernel answered with (the
//!   simulator's `TcpReset`, one round trip after that SEND).
//!
//! The timer is sans-IO: [`TcpTimer::arm`] and [`TcpTimer::fire`] say how long until it
//! fires next; the QP owns the timer and the world runs it (without the kernel timer
//! wheel's rounding, as for every QP timer).

use std::time::Duration;

/// `TCP_RTO_MIN`.
const RTO_MIN: Duration = Duration::from_millis(200);
/// `TCP_RTO_MAX`.
const RTO_MAX: Duration = Duration::from_secs(120);
/// `TCP_TIMEOUT_MIN_US`: what the loss probe adds to twice the round trip when several
/// segments are outstanding.
const PROBE_MIN: Duration = Duration::from_millis(2);
/// How long after its first transmission TCP gives a segment up: `tcp_model_timeout` for
/// the default `tcp_retries2` of 15 with a base of `TCP_RTO_MIN`, ((2 << 9) - 1) · 200 ms
/// + (15 - 9) · 120 s, whatever the tick rate.
pub(crate) const GIVE_UP_AFTER: Duration = Duration::from_millis(924_600);

/// The retransmission timing of one TCP path (all zero before a connection has one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpPath {
    /// The RTO, in microseconds (at most 120 s).
    rto_us: u32,
    /// The loss probe's timeout with several segments outstanding, in microseconds.
    probe_many_us: u32,
}

impl TcpPath {
    /// The path of a connection whose round trip is `rtt`, on a kernel ticking at `hz`
    /// (`None`: durations are not rounded to ticks).
    pub(crate) fn new(rtt: Duration, hz: Option<u32>) -> Self {
        let rto = round_up_to_tick(RTO_MIN.saturating_add(rtt), hz).min(RTO_MAX);
        let probe_many = round_up_to_tick(rtt.saturating_mul(2).saturating_add(PROBE_MIN), hz);
        TcpPath {
            rto_us: micros(rto),
            probe_many_us: micros(probe_many.min(rto)),
        }
    }

    /// The RTO before any backoff.
    pub(crate) fn rto(&self) -> Duration {
        Duration::from_micros(u64::from(self.rto_us))
    }

    /// The loss probe's timeout with `outstanding` segments unacknowledged: with one, the
    /// RTO (twice the round trip plus 200 ms is never shorter); with several, twice the
    /// round trip plus 2 ms.
    fn probe(&self, outstanding: usize) -> Duration {
        if outstanding > 1 {
            Duration::from_micros(u64::from(self.probe_many_us))
        } else {
            self.rto()
        }
    }

    /// The RTO after `backoffs` retransmissions by the RTO.
    fn backed_off(&self, backoffs: u8) -> Duration {
        let doubled = self.rto().saturating_mul(1u32 << backoffs.min(31));
        doubled.min(RTO_MAX)
    }
}

/// What the timer did when it fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpTimeout {
    /// The tail loss probe: the last segment sent goes again.
    Probe,
    /// An RTO: the oldest unacknowledged segment (and, in this model, every one after it)
    /// goes again.
    Retransmit,
    /// TCP gave the connection up: the socket closes.
    GiveUp,
}

/// Where one connection's retransmission timer stands since its oldest unacknowledged
/// segment was first sent, in one byte (a QP carries it): how many RTOs fired (bits 0-4),
/// whether TCP gave up (bit 5), whether the loss probe was sent (bit 6), whether it was
/// armed with several segments outstanding (bit 7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpTimer(u8);

const BACKOFFS: u8 = 0x1f;
const GAVE_UP: u8 = 0x20;
const PROBED: u8 = 0x40;
const MANY: u8 = 0x80;

impl TcpTimer {
    /// Data goes out with none outstanding before, or an acknowledgement leaves
    /// `outstanding` segments: the timer starts over and first fires after the loss
    /// probe's timeout.
    pub(crate) fn arm(&mut self, path: TcpPath, outstanding: usize) -> Duration {
        self.0 = if outstanding > 1 { MANY } else { 0 };
        path.probe(outstanding)
    }

    /// The timer fired: what TCP does now, and when the timer fires next (`None` once TCP
    /// gave up).
    pub(crate) fn fire(&mut self, path: TcpPath) -> (TcpTimeout, Option<Duration>) {
        if self.0 & PROBED == 0 {
            self.0 |= PROBED;
            return (TcpTimeout::Probe, Some(path.rto()));
        }
        let backoffs = self.backoffs();
        if backoffs > 0 && self.elapsed(path) >= GIVE_UP_AFTER {
            self.0 |= GAVE_UP;
            return (TcpTimeout::GiveUp, None);
        }
        // TCP gives up long before 31 RTOs (16 at most: the first is 200 ms or more).
        let backoffs = (backoffs + 1).min(BACKOFFS);
        self.0 = (self.0 & !BACKOFFS) | backoffs;
        (TcpTimeout::Retransmit, Some(path.backed_off(backoffs)))
    }

    /// Whether TCP gave the connection up (its socket is closed: a message for it meets a
    /// reset).
    pub(crate) fn gave_up(&self) -> bool {
        self.0 & GAVE_UP != 0
    }

    fn backoffs(&self) -> u8 {
        self.0 & BACKOFFS
    }

    /// How long ago the oldest unacknowledged segment was first sent, when the timer fires
    /// now: the probe's timeout, the RTO after it, then each backed-off RTO.
    fn elapsed(&self, path: TcpPath) -> Duration {
        let outstanding = if self.0 & MANY != 0 { 2 } else { 1 };
        let mut t = path.probe(outstanding).saturating_add(path.rto());
        for b in 1..=self.backoffs() {
            t = t.saturating_add(path.backed_off(b));
        }
        t
    }
}

/// `d` rounded up to whole ticks of a kernel ticking at `hz` (`usecs_to_jiffies`).
fn round_up_to_tick(d: Duration, hz: Option<u32>) -> Duration {
    let Some(hz) = hz else {
        return d;
    };
    let tick_ns = 1_000_000_000 / u64::from(hz.clamp(1, crate::config::MAX_KERNEL_HZ));
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(ns.div_ceil(tick_ns).saturating_mul(tick_ns))
}

/// `d` in whole microseconds, saturating (callers keep it under 120 s).
fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The loopback path of the VM's beds: a round trip well under a 4 ms tick.
    fn vm_path() -> TcpPath {
        TcpPath::new(Duration::from_micros(10), Some(250))
    }

    /// Fires the timer until TCP gives up; the time of each firing from the arming, and
    /// what it did.
    fn schedule(path: TcpPath, outstanding: usize) -> Vec<(Duration, TcpTimeout)> {
        let mut timer = TcpTimer::default();
        let mut at = timer.arm(path, outstanding);
        let mut fired = Vec::new();
        loop {
            let (what, next) = timer.fire(path);
            fired.push((at, what));
            match next {
                Some(d) => at += d,
                None => return fired,
            }
        }
    }

    #[test]
    fn the_rto_is_the_minimum_plus_the_round_trip_in_whole_ticks() {
        assert_eq!(vm_path().rto(), 204 * MS);
        let exact = TcpPath::new(Duration::from_micros(10), None);
        assert_eq!(exact.rto(), 200 * MS + Duration::from_micros(10));
        let far = TcpPath::new(Duration::from_secs(300), Some(250));
        assert_eq!(far.rto(), RTO_MAX);
    }

    #[test]
    fn one_lost_segment_is_probed_then_retransmitted_with_backoff_until_tcp_gives_up() {
        let fired = schedule(vm_path(), 1);
        let at: Vec<u64> = fired.iter().map(|(t, _)| t.as_millis() as u64).collect();
        assert_eq!(
            at,
            [
                204, 408, 816, 1_632, 3_264, 6_528, 13_056, 26_112, 52_224, 104_448, 208_896,
                328_896, 448_896, 568_896, 688_896, 808_896, 928_896
            ]
        );
        assert_eq!(fired[0].1, TcpTimeout::Probe);
        assert!(fired[1..16].iter().all(|f| f.1 == TcpTimeout::Retransmit));
        assert_eq!(fired[16].1, TcpTimeout::GiveUp);
        assert!(fired[15].0 < GIVE_UP_AFTER && fired[16].0 >= GIVE_UP_AFTER);
    }

    #[test]
    fn several_outstanding_segments_are_probed_sooner() {
        let fired = schedule(vm_path(), 3);
        let at: Vec<u64> = fired
            .iter()
            .take(4)
            .map(|(t, _)| t.as_millis() as u64)
            .collect();
        // 2 × 10 µs + 2 ms in whole 4 ms ticks, then the RTO from the probe, then doubled.
        assert_eq!(at, [4, 208, 616, 1_432]);
        assert_eq!(fired.last().map(|f| f.1), Some(TcpTimeout::GiveUp));
        assert_eq!(fired.len(), 17);
    }

    #[test]
    fn arming_again_starts_the_schedule_over() {
        let path = vm_path();
        let mut timer = TcpTimer::default();
        timer.arm(path, 1);
        timer.fire(path);
        timer.fire(path);
        assert_eq!(timer.arm(path, 1), 204 * MS);
        assert_eq!(timer.fire(path), (TcpTimeout::Probe, Some(204 * MS)));
    }
}
