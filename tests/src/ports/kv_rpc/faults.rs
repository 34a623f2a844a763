//! Fault plans for the RPC drawn from a seed: loss and delay of data packets (random loss on
//! the whole fabric, and targeted drops and delays at chosen moments), loss and delay of CM
//! messages, and the removal of the server's or the client's device, restored later.

use std::time::Duration;

use cmtwin_sim::{FaultAction, FaultPlan, MessageChance, MessageKind, SimConfig, Trigger};

use super::SeedDraws;

/// The CM messages whose loss and delay a plan may draw.
const CM_KINDS: [MessageKind; 6] = [
    MessageKind::Req,
    MessageKind::Rep,
    MessageKind::Rtu,
    MessageKind::Rej,
    MessageKind::Dreq,
    MessageKind::Drep,
];

/// A device removal and its restoration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// The host whose device goes (`server` or `client`).
    pub host: &'static str,
    /// When it goes.
    pub at: Duration,
    /// How long it stays away.
    pub away: Duration,
}

/// The faults of one seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// The probability that any packet (CM message or data packet) is lost.
    pub loss: f64,
    /// Whether CM messages have chances of loss and delay.
    pub cm: bool,
    /// Targeted drops of data packets (how many times).
    pub data_drops: u32,
    /// Targeted delays of data packets (how many times).
    pub data_delays: u32,
    /// The device removal, if any.
    pub removal: Option<Removal>,
    /// The plan carrying all but the random loss.
    pub plan: FaultPlan,
}

impl Faults {
    /// The faults of `seed`, at moments inside `window` (virtual time since the start).
    pub fn draw(seed: u64, window: (Duration, Duration)) -> Faults {
        let mut d = SeedDraws::new(seed ^ 0x6661_756c_7473);
        let span = window.1.saturating_sub(window.0).as_millis().max(1) as u64;
        let moment = |d: &mut SeedDraws| window.0 + Duration::from_millis(d.below(span));
        let mut plan = FaultPlan::new();
        let loss = if d.chance(40) {
            (2 + d.below(28)) as f64 / 1000.0
        } else {
            0.0
        };
        let cm = d.chance(40);
        if cm {
            for kind in CM_KINDS {
                let mut c = MessageChance::new(kind);
                c.drop = d.below(30) as f64 / 100.0;
                c.delay = d.below(30) as f64 / 100.0;
                c.delay_max_ms = 1 + d.below(400);
                plan = plan.chance(c);
            }
        }
        let data_drops = d.below(4) as u32;
        for _ in 0..data_drops {
            let count = 1 + d.below(6) as u32;
            let at = Trigger::at(moment(&mut d));
            plan = plan.scheduled(at, FaultAction::DropDataPackets { count });
        }
        let data_delays = d.below(4) as u32;
        for _ in 0..data_delays {
            let count = 1 + d.below(4) as u32;
            let delay_ms = 1 + d.below(500);
            let at = Trigger::at(moment(&mut d));
            plan = plan.scheduled(at, FaultAction::DelayDataPackets { count, delay_ms });
        }
        let removal = d.chance(60).then(|| Removal {
            host: if d.chance(50) { "server" } else { "client" },
            at: moment(&mut d),
            away: Duration::from_millis(20 + d.below(1980)),
        });
        if let Some(r) = &removal {
            let host = r.host.to_string();
            plan = plan
                .scheduled(
                    Trigger::at(r.at),
                    FaultAction::RemoveDevice { host: host.clone() },
                )
                .scheduled(
                    Trigger::at(r.at + r.away),
                    FaultAction::RestoreDevice { host },
                );
        }
        Faults {
            loss,
            cm,
            data_drops,
            data_delays,
            removal,
            plan,
        }
    }

    /// The fabric's configuration with the random loss.
    pub fn config(&self) -> SimConfig {
        SimConfig {
            loss_probability: self.loss,
            ..SimConfig::default()
        }
    }
}
