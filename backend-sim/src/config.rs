//! Knobs of a simulated fabric: timing of the CM, latency and loss of the wire, kernel profile.

use std::time::Duration;

use crate::engine::timeline::ms;
use crate::error::FabricError;
use crate::schedule::SchedConfig;

/// The largest packet life time exponent: the IB path record's field is 6 bits.
pub const MAX_PACKET_LIFE_TIME: u8 = 63;
/// The largest `local_ca_ack_delay`: the device attribute is 5 bits.
pub const MAX_CA_ACK_DELAY: u8 = 31;
/// The largest number of CM retries: the REQ's field is 4 bits, and the kernel's rdma_cm uses
/// at most 15 (CM-SEMANTICS.md §5.2).
pub const MAX_CM_RETRIES: u32 = 15;
/// The longest duration virtual time can express (u64 nanoseconds, ≈ 584 years); longer
/// configured durations saturate to it.
pub const MAX_SIM_DURATION: Duration = Duration::from_nanos(u64::MAX);
/// The highest kernel tick rate `SimConfig::kernel_hz` accepts (Linux's highest HZ).
pub const MAX_KERNEL_HZ: u32 = 1000;

/// Which kernel's behaviour to follow where kernels differ (CM-SEMANTICS.md §19).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelProfile {
    /// Linux 6.1 with rdma-core 44, as measured on Soft-RoCE and Soft-iWARP (the project's CI
    /// VM).
    #[default]
    Linux61,
    /// Linux 6.12 (Debian's 6.12.117) with rdma-core 44, as measured on Soft-RoCE and
    /// Soft-iWARP: as Linux 6.1 except that RoCE paths get a packet life time of 16 instead of
    /// 18 (cma.c's `CMA_IBOE_PACKET_LIFETIME`), so the timewait and the REQ's retransmissions
    /// are shorter ([`SimConfig::linux612`]).
    Linux612,
    /// Mainline (6.18+): SA-mode `rdma_resolve_addrinfo` and `rdma_write_cm_event`.
    Mainline,
}

/// The fabric's configuration. `Default` models a quiet RoCE fabric of Linux 6.1 hosts with
/// rxe devices, as measured in CM-SEMANTICS.md §19.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Kernel behaviour profile.
    pub kernel: KernelProfile,
    /// Fixed one-way latency of a CM message.
    pub wire_latency: Duration,
    /// Extra uniformly drawn latency, from 0 up to this.
    pub wire_jitter: Duration,
    /// Whether the RDMA netdevs are NOARP (as a dummy interface is): any on-link address then
    /// resolves at once, as on the CI VM (§19).
    pub noarp: bool,
    /// Probability that any CM message is lost.
    pub loss_probability: f64,
    /// Packet life time exponent of paths (RoCE: 16).
    pub packet_life_time: u8,
    /// The devices' `local_ca_ack_delay` (rxe: 15, mlx5: 16).
    pub ca_ack_delay: u8,
    /// If set, the timewait length instead of the formula of §7.2 (the CI VM measured ≈ 2.2 s).
    pub timewait_override: Option<Duration>,
    /// Retries of REQ, REP, DREQ and SIDR REQ (15).
    pub max_cm_retries: u32,
    /// How long `rdma_disconnect` on an id with a QP spends moving the QP to ERROR before the
    /// CM sends anything. On the CI VM a peer's back-to-back `rdma_disconnect` always found the
    /// first DREQ already received (§19: both sides get TIMEWAIT_EXIT without a second call):
    /// the call outlasts a CM message's delivery, so this exceeds `wire_latency + wire_jitter`
    /// by default. Zero makes back-to-back disconnects cross (§5.2 S11).
    pub disconnect_qp_time: Duration,
    /// The hosts' kernel tick rate (`CONFIG_HZ`; the CI VM's Debian 6.1 kernel: 250). The CM's
    /// timers (MAD response timeouts, timewait, siw's MPA timeout) are delayed works on the
    /// kernel's timer wheel and expire late by up to one wheel granule (see
    /// [`kernel_timer_delay`]). `None`: timers expire exactly.
    pub kernel_hz: Option<u32>,
    /// Latency of an IB SA query (route, multicast join) on InfiniBand fabrics.
    pub sa_latency: Duration,
    /// Whether to keep the trace (on by default; off keeps memory flat in very long runs).
    pub trace: bool,
    /// How the fabric schedules its processes (seeded choice, preemption, wake-up latency).
    pub schedule: SchedConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            kernel: KernelProfile::Linux61,
            wire_latency: Duration::from_micros(5),
            wire_jitter: Duration::from_micros(5),
            noarp: false,
            loss_probability: 0.0,
            // Linux 6.1 gives RoCE paths a packet life time of 18: with rxe's ACK delay of 15
            // and the 250 Hz timer wheel (`kernel_hz`) that is the measured 2.2-2.3 s
            // timewait, 6.2-6.4 s REQ retransmissions and the 102.1-102.3 s until UNREACHABLE
            // of CM-SEMANTICS.md §19.
            packet_life_time: 18,
            ca_ack_delay: 15,
            timewait_override: None,
            max_cm_retries: 15,
            disconnect_qp_time: Duration::from_micros(20),
            kernel_hz: Some(250),
            sa_latency: Duration::from_micros(200),
            trace: true,
            schedule: SchedConfig::default(),
        }
    }
}

/// `cm_ms(t)`: the kernel's approximation of 4.096 µs · 2^t, in milliseconds, at least 1.
pub fn cm_ms(t: u8) -> u64 {
    1u64 << t.saturating_sub(8).min(40)
}

/// The local ACK timeout exponent from a device's ACK delay and the path's PLT (§7.2).
pub fn ack_timeout(ca_ack_delay: u8, plt: u8) -> u8 {
    let mut a = plt + 1;
    if a >= ca_ack_delay {
        a += u8::from(ca_ack_delay >= a - 1);
    } else {
        a = ca_ack_delay + u8::from(a >= ca_ack_delay - 1);
    }
    a.min(31)
}

/// The active side's REQ (and DREQ) retransmit interval `Treq` on a path with packet life time
/// `plt` (§15.2): 2 · cm_ms(PLT) + 4096 ms; RoCE's PLT of 16 gives 4608 ms.
pub fn req_timeout(plt: u8) -> Duration {
    ms(4096 + 2 * cm_ms(plt))
}

/// The wait after an MRA on a path with packet life time `plt`: 65 536 ms + cm_ms(PLT + 1).
pub fn mra_timeout(plt: u8) -> Duration {
    ms(cm_ms(24) + cm_ms(plt + 1))
}

/// The jiffies count at boot (`INITIAL_JIFFIES`: five minutes before the 32-bit wrap); the
/// fabric's time 0 is the hosts' boot.
fn initial_jiffies(hz: u64) -> u64 {
    (1u64 << 32) - 300 * hz
}

/// How long a kernel timer armed at `now` for `after` really takes on a kernel ticking `hz`
/// times a second (kernel/time/timer.c, Linux ≥ 5.x): `msecs_to_jiffies` rounds the delay up to
/// whole ticks; the timer wheel files a timer `delta` ticks ahead in level `n` (the first whose
/// range holds it: 63, 504, 4032, … ticks) with a granule of 8^n ticks, and fires it at the
/// first granule boundary strictly after its expiry (`calc_index` rounds up so that it never
/// fires early). A CM wait of 6144 ms at 250 Hz (1536 ticks, granule 64 ticks = 256 ms) thus
/// lasts 6148-6400 ms, and exactly 6400 ms when armed on a granule boundary, as a
/// retransmission is (it is sent when the previous wait fires).
pub fn kernel_timer_delay(now: Duration, after: Duration, hz: u32) -> Duration {
    const LVL_CLK_SHIFT: u32 = 3;
    const LVL_SIZE: u64 = 64;
    // Beyond a day the wheel's rounding (at most 1/8 of the delay) no longer matters to
    // anything the CM does; it also keeps the arithmetic below far from overflowing.
    if after > Duration::from_secs(86_400) || now > MAX_SIM_DURATION / 2 {
        return after;
    }
    let hz = u64::from(hz.clamp(1, MAX_KERNEL_HZ));
    let tick_ns = 1_000_000_000 / hz;
    let base = initial_jiffies(hz);
    let now_ns = now.as_nanos() as u64;
    let jiffies = base + now_ns / tick_ns;
    let delta = (after.as_nanos() as u64).div_ceil(tick_ns);
    let level = (1..8u32)
        .find(|n| delta < (LVL_SIZE - 1) << ((n - 1) * LVL_CLK_SHIFT))
        .map_or(7, |n| n - 1);
    let shift = level * LVL_CLK_SHIFT;
    let fires = (((jiffies + delta) >> shift) + 1) << shift;
    let fire_ns = (fires - base) * tick_ns;
    Duration::from_nanos(fire_ns.saturating_sub(now_ns))
}

impl SimConfig {
    /// A quiet RoCE fabric of mainline kernels (packet life time 16, rxe's ACK delay 15:
    /// 512 ms timewait, 4608 ms REQ retransmissions).
    pub fn mainline() -> Self {
        SimConfig {
            kernel: KernelProfile::Mainline,
            packet_life_time: 16,
            ..SimConfig::default()
        }
    }

    /// A quiet RoCE fabric of Linux 6.12 hosts with rxe devices: the Linux 6.1 fabric with the
    /// packet life time of 16 that 6.12's cma.c gives RoCE paths (512 ms timewait, 4608 ms REQ
    /// retransmissions, each on the 250 Hz timer wheel of Debian's 6.12 kernel).
    pub fn linux612() -> Self {
        SimConfig {
            kernel: KernelProfile::Linux612,
            packet_life_time: 16,
            ..SimConfig::default()
        }
    }

    /// The quiet fabric of `kernel`'s profile: [`SimConfig::default`] (Linux 6.1),
    /// [`SimConfig::linux612`] or [`SimConfig::mainline`].
    pub fn for_kernel(kernel: KernelProfile) -> Self {
        match kernel {
            KernelProfile::Linux61 => SimConfig::default(),
            KernelProfile::Linux612 => SimConfig::linux612(),
            KernelProfile::Mainline => SimConfig::mainline(),
        }
    }

    /// Refuses the values the CM cannot carry: a packet life time above 63 (6 bits), an ACK
    /// delay above 31 (5 bits), more than 15 CM retries (4 bits), a loss probability outside
    /// 0..=1, a kernel tick rate outside 1..=1000 Hz.
    pub fn validate(&self) -> Result<(), FabricError> {
        let refuse = FabricError::refuse_config;
        if self.packet_life_time > MAX_PACKET_LIFE_TIME {
            return refuse(
                "packet_life_time",
                self.packet_life_time.to_string(),
                "at most 63 (a 6-bit field of the IB path record)",
            );
        }
        if self.ca_ack_delay > MAX_CA_ACK_DELAY {
            return refuse(
                "ca_ack_delay",
                self.ca_ack_delay.to_string(),
                "at most 31 (a 5-bit device attribute)",
            );
        }
        if self.max_cm_retries > MAX_CM_RETRIES {
            return refuse(
                "max_cm_retries",
                self.max_cm_retries.to_string(),
                "at most 15 (a 4-bit field of the REQ; the rdma_cm uses 15)",
            );
        }
        if !(0.0..=1.0).contains(&self.loss_probability) {
            return refuse(
                "loss_probability",
                self.loss_probability.to_string(),
                "a probability between 0 and 1",
            );
        }
        if let Some(hz) = self
            .kernel_hz
            .filter(|hz| !(1..=MAX_KERNEL_HZ).contains(hz))
        {
            return refuse(
                "kernel_hz",
                hz.to_string(),
                "between 1 and 1000 (Linux builds with HZ 100, 250, 300 or 1000)",
            );
        }
        self.schedule.validate()
    }

    /// This configuration with every duration saturated to what virtual time can express.
    pub(crate) fn saturated(self) -> Self {
        let sat = |d: Duration| d.min(MAX_SIM_DURATION);
        SimConfig {
            wire_latency: sat(self.wire_latency),
            wire_jitter: sat(self.wire_jitter),
            sa_latency: sat(self.sa_latency),
            timewait_override: self.timewait_override.map(sat),
            disconnect_qp_time: sat(self.disconnect_qp_time),
            ..self
        }
    }

    /// `Treq` of this fabric's paths (see [`req_timeout`]).
    pub fn req_timeout(&self) -> Duration {
        req_timeout(self.packet_life_time)
    }

    /// The passive side's REP (and DREQ) retransmit interval (4096 ms).
    pub fn rep_timeout(&self) -> Duration {
        crate::cm::endpoint::rep_timeout()
    }

    /// The SIDR REQ retransmit interval (4096 ms).
    pub fn sidr_timeout(&self) -> Duration {
        crate::cm::endpoint::sidr_timeout()
    }

    /// How long a connection stays in timewait (§7.2).
    pub fn timewait(&self) -> Duration {
        self.timewait_override
            .unwrap_or_else(|| ms(cm_ms(ack_timeout(self.ca_ack_delay, self.packet_life_time))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_timers_expire_at_the_next_wheel_granule() {
        // At boot (jiffies ≡ 8 mod 64) a 6144 ms wait is 1536 ticks in level 2 (granule 64
        // ticks of 4 ms): it ends at the next multiple of 64 ticks after tick 1544, tick 1600,
        // i.e. 6400 ms - 8 ticks = 6368 ms.
        let at_boot = kernel_timer_delay(Duration::ZERO, ms(6144), 250);
        assert_eq!(at_boot, ms(6368));
        // Armed on a granule boundary (when the previous wait fired) it lasts 6400 ms.
        let on_boundary = kernel_timer_delay(at_boot, ms(6144), 250);
        assert_eq!(on_boundary, ms(6400));
        // Mid-tick: 1.5 ms into a tick, the same boundary is 1.5 ms nearer.
        let mid = kernel_timer_delay(at_boot + Duration::from_micros(1500), ms(6144), 250);
        assert_eq!(mid, ms(6400) - Duration::from_micros(1500));
        // A 2048 ms timewait (512 ticks, level 2) at boot: next boundary after tick 520 = 576.
        assert_eq!(kernel_timer_delay(Duration::ZERO, ms(2048), 250), ms(2272));
        // Level 0 (under 63 ticks) still fires one tick after the expiry.
        assert_eq!(kernel_timer_delay(Duration::ZERO, ms(100), 250), ms(104));
        // Level 3 (4032 ticks and more, granule 512 ticks): 65 536 ms = 16 384 ticks; at boot
        // jiffies ≡ 264 (mod 512), so it fires 248 ticks after its expiry.
        let long = kernel_timer_delay(Duration::ZERO, ms(65_536), 250);
        assert_eq!(long, ms((16_384 + 248) * 4));
    }

    #[test]
    fn timewait_table_of_section_7_2() {
        // Rows of the table in CM-SEMANTICS.md §7.2.
        let cases = [
            (16, 15, 512),
            (16, 16, 1024),
            (0, 0, 1),
            (0, 15, 128),
            (14, 16, 512),
            (20, 8, 8192),
        ];
        for (plt, delay, want) in cases {
            assert_eq!(
                cm_ms(ack_timeout(delay, plt)),
                want,
                "plt {plt} delay {delay}"
            );
        }
    }

    #[test]
    fn mainline_roce_req_timeout_is_4608_ms() {
        assert_eq!(SimConfig::mainline().req_timeout(), ms(4608));
    }

    #[test]
    fn linux612_profile_has_the_shorter_roce_timers() {
        let c = SimConfig::linux612();
        assert_eq!(c.kernel, KernelProfile::Linux612);
        assert_eq!(c.timewait(), ms(512));
        assert_eq!(c.req_timeout(), ms(4608));
        assert_eq!(SimConfig::for_kernel(KernelProfile::Linux612), c);
        assert_eq!(
            SimConfig::for_kernel(KernelProfile::Linux61),
            SimConfig::default()
        );
    }

    #[test]
    fn linux61_profile_matches_the_measurements_of_section_19() {
        let c = SimConfig::default();
        assert_eq!(c.timewait(), ms(2048), "≈ 2.2 s timewait measured");
        assert_eq!(
            c.req_timeout(),
            ms(6144),
            "≈ 6.3 s REQ retransmission measured"
        );
        assert_eq!(
            c.req_timeout() * (c.max_cm_retries + 1),
            ms(98_304),
            "≈ 100 s to UNREACHABLE"
        );
    }
}
