//! Knobs of a simulated fabric: timing of the CM, latency and loss of the wire, kernel profile.

use std::time::Duration;

use crate::engine::timeline::ms;
use crate::error::FabricError;

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

/// Which kernel's behaviour to follow where kernels differ (CM-SEMANTICS.md §19).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelProfile {
    /// Linux 6.1 with rdma-core 44, as measured on Soft-RoCE (the project's CI VM): binding an
    /// address configured on no interface is ENODEV.
    #[default]
    Linux61,
    /// Mainline (6.16+): binding an unconfigured address is EADDRNOTAVAIL.
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
    /// Latency of an IB SA query (route, multicast join) on InfiniBand fabrics.
    pub sa_latency: Duration,
    /// Whether to keep the trace (on by default; off keeps memory flat in very long runs).
    pub trace: bool,
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
            // that is the measured 2.2 s timewait, ≈ 6.2 s REQ retransmissions and the
            // ≈ 100 s until UNREACHABLE of CM-SEMANTICS.md §19.
            packet_life_time: 18,
            ca_ack_delay: 15,
            timewait_override: None,
            max_cm_retries: 15,
            sa_latency: Duration::from_micros(200),
            trace: true,
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

    /// Refuses the values the CM cannot carry: a packet life time above 63 (6 bits), an ACK
    /// delay above 31 (5 bits), more than 15 CM retries (4 bits), a loss probability outside
    /// 0..=1.
    pub fn validate(&self) -> Result<(), FabricError> {
        let refuse = |field, value: String, reason| {
            Err(FabricError::InvalidConfig {
                field,
                value,
                reason,
            })
        };
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
        Ok(())
    }

    /// This configuration with every duration saturated to what virtual time can express.
    pub(crate) fn saturated(self) -> Self {
        let sat = |d: Duration| d.min(MAX_SIM_DURATION);
        SimConfig {
            wire_latency: sat(self.wire_latency),
            wire_jitter: sat(self.wire_jitter),
            sa_latency: sat(self.sa_latency),
            timewait_override: self.timewait_override.map(sat),
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
