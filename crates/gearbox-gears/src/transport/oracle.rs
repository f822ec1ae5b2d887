//! The live oracle (issue 19; beside §IV-C's Ideal): a gear that is told, per phase of the
//! scenario, which protocol was better there, and follows that schedule.
//!
//! §IV-C's Ideal is computed after the fact: per 10 s window the faster of two independent
//! runs (TCP-only, QUIC-only), each request taking the chosen run's time. Picking the lower
//! of two noisy samples flatters it. The live oracle is a real run instead: the lab
//! (`python/gearbox/lab/oracle.py`) reads the static runs of the same condition and
//! repetition, finds for each phase of the path's schedule the protocol with the lower mean
//! cost, and hands this gear the result as [`TransportConfig::oracle_schedule`]; the
//! gear's requests then meet the network's noise like every other mode's. A gear that
//! matches the oracle has learnt everything the phases' static results can teach.
//!
//! Time: `from_ms` counts from the gear's first `choose`, which the lab lines up with the
//! emulator's clock by the static runs' first send (docs/wisetrans.md, `oracle.rs`).
//! No schedule: TCP, the default transport.

use std::time::Instant;

use gearbox_gear_api::{ClientRecord, Decision, TransportChoice, TransportGear};
use serde::{Deserialize, Serialize};

use super::{Mode, Reason, Transport, TransportConfig};

/// From `from_ms` after the first request on, use `choice` (until the next step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleStep {
    /// Milliseconds after the gear's first request.
    pub from_ms: u64,
    /// `tcp` or `quic`.
    pub choice: Transport,
}

/// Follows [`TransportConfig::oracle_schedule`].
#[derive(Debug, Clone)]
pub struct Oracle {
    schedule: Vec<OracleStep>,
    start: Option<Instant>,
}

impl Oracle {
    /// The gear for `config.oracle_schedule` (steps in time order; `validate` checks it).
    pub fn new(config: &TransportConfig) -> Self {
        Oracle {
            schedule: config.oracle_schedule.clone(),
            start: None,
        }
    }

    /// The step in force `elapsed_ms` after the first request: its index and choice.
    pub fn at(&self, elapsed_ms: u64) -> (Option<usize>, Transport) {
        match self.schedule.iter().rposition(|s| s.from_ms <= elapsed_ms) {
            Some(k) => (Some(k), self.schedule[k].choice),
            None => (None, Transport::Tcp),
        }
    }
}

impl TransportGear for Oracle {
    fn choose(&mut self, _origin: &str, now: Instant) -> Decision<TransportChoice> {
        let start = *self.start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start).as_millis();
        let (step, transport) = self.at(u64::try_from(elapsed).unwrap_or(u64::MAX));
        let choice = TransportChoice::from(transport);
        let step_s = step.map_or_else(|| "-".to_string(), |k| (k + 1).to_string());
        let reason = Reason {
            mode: Mode::Oracle.name(),
            phase: "static",
            score: None,
            choice,
            why: if step.is_some() { "schedule" } else { "no-schedule" },
            extra: &[("step", &step_s)],
        };
        Decision::new(choice, reason.render())
    }

    fn observe(&mut self, _record: &ClientRecord, _now: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn choice_at(gear: &mut Oracle, t0: Instant, ms: u64) -> (TransportChoice, String) {
        let d = gear.choose("10.0.0.1:4433", t0 + Duration::from_millis(ms));
        (d.choice, d.reason.clone())
    }

    #[test]
    fn the_oracle_follows_its_schedule_from_the_first_request() {
        let config = TransportConfig {
            oracle_schedule: vec![
                OracleStep {
                    from_ms: 0,
                    choice: Transport::Quic,
                },
                OracleStep {
                    from_ms: 7_000,
                    choice: Transport::Tcp,
                },
                OracleStep {
                    from_ms: 14_000,
                    choice: Transport::Quic,
                },
            ],
            ..TransportConfig::default()
        };
        let mut gear = Oracle::new(&config);
        let t0 = Instant::now();
        let (c, why) = choice_at(&mut gear, t0, 0);
        assert_eq!(c, TransportChoice::Quic);
        assert_eq!(why, "oracle;phase=static;score=-;choice=quic;why=schedule;step=1");
        assert_eq!(choice_at(&mut gear, t0, 6_999).0, TransportChoice::Quic);
        assert_eq!(choice_at(&mut gear, t0, 7_000).0, TransportChoice::Tcp);
        let (c, why) = choice_at(&mut gear, t0, 20_000);
        assert_eq!(c, TransportChoice::Quic);
        assert!(why.ends_with("step=3"), "{why}");
    }

    #[test]
    fn without_a_schedule_or_before_its_first_step_the_oracle_uses_tcp() {
        let mut gear = Oracle::new(&TransportConfig::default());
        let t0 = Instant::now();
        let (c, why) = choice_at(&mut gear, t0, 0);
        assert_eq!(c, TransportChoice::Tcp);
        assert!(why.contains("why=no-schedule;step=-"), "{why}");
        let config = TransportConfig {
            oracle_schedule: vec![OracleStep {
                from_ms: 5_000,
                choice: Transport::Quic,
            }],
            ..TransportConfig::default()
        };
        let mut gear = Oracle::new(&config);
        assert_eq!(choice_at(&mut gear, t0, 0).0, TransportChoice::Tcp);
        assert_eq!(choice_at(&mut gear, t0, 5_000).0, TransportChoice::Quic);
    }
}
