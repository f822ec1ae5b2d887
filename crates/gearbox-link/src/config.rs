//! Link configuration: serde structs (TOML in scenario files), validated.
//!
//! Units live in field names. Validation happens before anything runs and an
//! error names the offending field (e.g. `schedule[1].rate_bps`), because a
//! scenario that silently runs a different link than written is worse than one
//! that refuses to start (docs/architecture.md principle 6).
//!
//! Example (one direction of a path):
//! ```toml
//! rate_bps = 20_000_000
//! delay_ms = 10.0
//! jitter_ms = 2.0
//! base_rtt_ms = 20.0
//! [queue]
//! discipline = "drop_tail"
//! limit_bdp = 1.0
//! [loss]
//! model = "bernoulli"
//! loss_rate = 0.01
//! [policer]
//! action = "rate_limit"
//! protocol = "udp"
//! rate_bps = 5_000_000
//! burst_bytes = 30_000
//! [[schedule]]
//! at_ms = 20_000.0
//! rate_bps = 10_000_000
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::loss::{GilbertElliott, LossConfig};
use crate::policer::PolicerConfig;
use crate::trace::Trace;

/// A configuration value that cannot be used, with the field it is in.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Path of the field, e.g. `queue.limit_packets` or `schedule[2].delay_ms`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Queue discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Discipline {
    /// Refuse arrivals that do not fit.
    #[default]
    DropTail,
    /// Evict the oldest packets to make room.
    DropHead,
    /// CoDel (RFC 8289) with tail drop at the limit.
    Codel,
}

fn default_codel_target_ms() -> f64 {
    5.0
}
fn default_codel_interval_ms() -> f64 {
    100.0
}

/// The bottleneck queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Discipline; default drop-tail.
    #[serde(default)]
    pub discipline: Discipline,
    /// Limit in packets (> 0). May be combined with a byte or BDP limit.
    #[serde(default)]
    pub limit_packets: Option<u64>,
    /// Limit in bytes (> 0). Exclusive with `limit_bdp`.
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// Limit as a multiple of the bandwidth-delay product (> 0), from the mean
    /// rate and `base_rtt_ms`; Floo (Table 4) samples 0.3-1.5. The
    /// derived byte limit is never below one 1500-byte packet and follows rate
    /// changes.
    #[serde(default)]
    pub limit_bdp: Option<f64>,
    /// CoDel TARGET in ms (RFC 8289 §4.4: 5 ms).
    #[serde(default = "default_codel_target_ms")]
    pub codel_target_ms: f64,
    /// CoDel INTERVAL in ms (RFC 8289 §4.3: 100 ms).
    #[serde(default = "default_codel_interval_ms")]
    pub codel_interval_ms: f64,
}

impl Default for QueueConfig {
    /// Unbounded drop-tail, mahimahi's default.
    fn default() -> Self {
        QueueConfig {
            discipline: Discipline::DropTail,
            limit_packets: None,
            limit_bytes: None,
            limit_bdp: None,
            codel_target_ms: default_codel_target_ms(),
            codel_interval_ms: default_codel_interval_ms(),
        }
    }
}

/// One direction of a path. Exactly one of `rate_bps`, `trace_file`, `trace`
/// gives the rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Constant bottleneck rate, bits per second (> 0).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// Mahimahi trace file giving the rate (read by [`crate::Link::new`]).
    #[serde(default)]
    pub trace_file: Option<PathBuf>,
    /// An in-memory trace (programmatic use: simulator, tests, generators).
    #[serde(skip)]
    pub trace: Option<Arc<Trace>>,
    /// Fixed one-way delay in ms (> 0); absent = no delay.
    #[serde(default)]
    pub delay_ms: Option<f64>,
    /// Jitter half-width in ms (>= 0): delay varies uniformly in ±jitter.
    #[serde(default)]
    pub jitter_ms: Option<f64>,
    /// Let jitter reorder packets (default false: order is kept).
    #[serde(default)]
    pub allow_reorder: bool,
    /// Base RTT of the path in ms (> 0), used only for `queue.limit_bdp`.
    #[serde(default)]
    pub base_rtt_ms: Option<f64>,
    /// Bottleneck queue.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Random loss.
    #[serde(default)]
    pub loss: LossConfig,
    /// Protocol policer (WiseTrans §II-B).
    #[serde(default)]
    pub policer: PolicerConfig,
    /// Parameter changes at given times (TCP WISE §V Figs. 7-9), applied
    /// in time order as `now` passes them (sorted, stable, at construction).
    #[serde(default)]
    pub schedule: Vec<ScheduledChange>,
    /// Start with the packet-event log enabled.
    #[serde(default)]
    pub log_events: bool,
}

/// A change of some parameters at `at_ms`; absent fields keep their value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ScheduledChange {
    /// When, in ms since the link's epoch (>= 0).
    pub at_ms: f64,
    /// New constant rate, bits per second (> 0).
    #[serde(default)]
    pub rate_bps: Option<u64>,
    /// New trace (starts at its time 0 at `at_ms`).
    #[serde(default)]
    pub trace_file: Option<PathBuf>,
    /// New in-memory trace.
    #[serde(skip)]
    pub trace: Option<Arc<Trace>>,
    /// New one-way delay, ms (> 0).
    #[serde(default)]
    pub delay_ms: Option<f64>,
    /// New jitter, ms (>= 0).
    #[serde(default)]
    pub jitter_ms: Option<f64>,
    /// New base RTT for the BDP limit, ms (> 0).
    #[serde(default)]
    pub base_rtt_ms: Option<f64>,
    /// New loss model.
    #[serde(default)]
    pub loss: Option<LossConfig>,
    /// New policer (`{ action = "none" }` removes it).
    #[serde(default)]
    pub policer: Option<PolicerConfig>,
}

fn positive_ms(field: &str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(err(
            field,
            format!("must be a positive number of milliseconds, got {v}"),
        ))
    }
}

fn non_negative(field: &str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(err(field, format!("must be finite and >= 0, got {v}")))
    }
}

fn probability(field: &str, v: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(err(field, format!("must be a probability in [0, 1], got {v}")))
    }
}

fn positive_u64(field: &str, v: u64) -> Result<(), ConfigError> {
    if v > 0 {
        Ok(())
    } else {
        Err(err(field, "must be > 0"))
    }
}

fn validate_rate(
    prefix: &str,
    rate_bps: Option<u64>,
    file: bool,
    mem: bool,
    required: bool,
) -> Result<(), ConfigError> {
    let given = usize::from(rate_bps.is_some()) + usize::from(file) + usize::from(mem);
    if given > 1 {
        return Err(err(
            &format!("{prefix}rate_bps"),
            "give only one of rate_bps, trace_file, trace",
        ));
    }
    if given == 0 && required {
        return Err(err(
            &format!("{prefix}rate_bps"),
            "the link needs a rate: give rate_bps or trace_file",
        ));
    }
    if let Some(r) = rate_bps {
        positive_u64(&format!("{prefix}rate_bps"), r)?;
    }
    Ok(())
}

/// Validates a loss model; `prefix` is the field path of the `loss` table.
pub fn validate_loss(prefix: &str, loss: &LossConfig) -> Result<(), ConfigError> {
    match *loss {
        LossConfig::None => Ok(()),
        LossConfig::Bernoulli { loss_rate } => probability(&format!("{prefix}.loss_rate"), loss_rate),
        LossConfig::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_good,
            loss_in_bad,
        } => {
            probability(&format!("{prefix}.p_good_to_bad"), p_good_to_bad)?;
            probability(&format!("{prefix}.p_bad_to_good"), p_bad_to_good)?;
            probability(&format!("{prefix}.loss_in_good"), loss_in_good)?;
            probability(&format!("{prefix}.loss_in_bad"), loss_in_bad)
        }
        LossConfig::GilbertElliottMean {
            mean_loss_rate,
            mean_burst_packets,
        } => {
            if !(mean_loss_rate > 0.0 && mean_loss_rate < 1.0) {
                return Err(err(
                    &format!("{prefix}.mean_loss_rate"),
                    format!("must be in (0, 1), got {mean_loss_rate}"),
                ));
            }
            if !(mean_burst_packets.is_finite() && mean_burst_packets >= 1.0) {
                return Err(err(
                    &format!("{prefix}.mean_burst_packets"),
                    format!("must be >= 1 packet, got {mean_burst_packets}"),
                ));
            }
            if GilbertElliott::from_mean_loss_and_burst(mean_loss_rate, mean_burst_packets).is_none() {
                return Err(err(
                    &format!("{prefix}.mean_burst_packets"),
                    "no Gilbert-Elliott chain has this mean loss with bursts this short (p_good_to_bad would exceed 1)",
                ));
            }
            Ok(())
        }
    }
}

/// Validates a policer; `prefix` is the field path of the `policer` table.
pub fn validate_policer(prefix: &str, p: &PolicerConfig) -> Result<(), ConfigError> {
    match *p {
        PolicerConfig::None | PolicerConfig::Block { .. } => Ok(()),
        PolicerConfig::Drop { drop_rate, .. } => probability(&format!("{prefix}.drop_rate"), drop_rate),
        PolicerConfig::RateLimit {
            rate_bps, burst_bytes, ..
        } => {
            positive_u64(&format!("{prefix}.rate_bps"), rate_bps)?;
            positive_u64(&format!("{prefix}.burst_bytes"), burst_bytes)
        }
    }
}

impl LinkConfig {
    /// A link of constant `rate_bps` with default everything else (unbounded
    /// drop-tail queue, no delay, no loss, no policer).
    pub fn constant(rate_bps: u64) -> Self {
        LinkConfig {
            rate_bps: Some(rate_bps),
            ..Default::default()
        }
    }

    /// A link driven by an in-memory trace.
    pub fn with_trace(trace: Trace) -> Self {
        LinkConfig {
            trace: Some(Arc::new(trace)),
            ..Default::default()
        }
    }

    /// Checks every field; the first problem found is returned, naming its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_rate("", self.rate_bps, self.trace_file.is_some(), self.trace.is_some(), true)?;
        if let Some(d) = self.delay_ms {
            positive_ms("delay_ms", d)?;
        }
        if let Some(j) = self.jitter_ms {
            non_negative("jitter_ms", j)?;
        }
        if let Some(r) = self.base_rtt_ms {
            positive_ms("base_rtt_ms", r)?;
        }
        let q = &self.queue;
        if let Some(n) = q.limit_packets {
            positive_u64("queue.limit_packets", n)?;
        }
        if let Some(n) = q.limit_bytes {
            positive_u64("queue.limit_bytes", n)?;
        }
        if let Some(b) = q.limit_bdp {
            if q.limit_bytes.is_some() {
                return Err(err("queue.limit_bdp", "give only one of limit_bytes and limit_bdp"));
            }
            if !(b.is_finite() && b > 0.0) {
                return Err(err(
                    "queue.limit_bdp",
                    format!("must be a positive multiple of BDP, got {b}"),
                ));
            }
            if self.base_rtt_ms.is_none() {
                return Err(err(
                    "base_rtt_ms",
                    "queue.limit_bdp needs base_rtt_ms to compute the BDP",
                ));
            }
        }
        positive_ms("queue.codel_target_ms", q.codel_target_ms)?;
        positive_ms("queue.codel_interval_ms", q.codel_interval_ms)?;
        validate_loss("loss", &self.loss)?;
        validate_policer("policer", &self.policer)?;
        for (i, c) in self.schedule.iter().enumerate() {
            let p = format!("schedule[{i}].");
            non_negative(&format!("{p}at_ms"), c.at_ms)?;
            validate_rate(&p, c.rate_bps, c.trace_file.is_some(), c.trace.is_some(), false)?;
            if let Some(d) = c.delay_ms {
                positive_ms(&format!("{p}delay_ms"), d)?;
            }
            if let Some(j) = c.jitter_ms {
                non_negative(&format!("{p}jitter_ms"), j)?;
            }
            if let Some(r) = c.base_rtt_ms {
                positive_ms(&format!("{p}base_rtt_ms"), r)?;
            }
            if let Some(l) = &c.loss {
                validate_loss(&format!("{p}loss"), l)?;
            }
            if let Some(pol) = &c.policer {
                validate_policer(&format!("{p}policer"), pol)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_config_parses_and_validates() {
        let text = r#"
            rate_bps = 20_000_000
            delay_ms = 10.0
            jitter_ms = 2.0
            base_rtt_ms = 20.0
            [queue]
            discipline = "codel"
            limit_bdp = 1.0
            [loss]
            model = "gilbert_elliott_mean"
            mean_loss_rate = 0.01
            mean_burst_packets = 3.0
            [policer]
            action = "rate_limit"
            protocol = "udp"
            rate_bps = 5_000_000
            burst_bytes = 30_000
            [[schedule]]
            at_ms = 20_000.0
            rate_bps = 10_000_000
            [[schedule]]
            at_ms = 40_000.0
            loss = { model = "bernoulli", loss_rate = 0.1 }
            policer = { action = "none" }
        "#;
        let c: LinkConfig = toml::from_str(text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.queue.codel_target_ms, 5.0);
        assert_eq!(c.schedule.len(), 2);
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(toml::from_str::<LinkConfig>("rate_bps = 1\nrate_mbps = 3").is_err());
        assert!(toml::from_str::<LinkConfig>("rate_bps = 1\n[queue]\nlimit = 3").is_err());
        assert!(toml::from_str::<LinkConfig>("rate_bps = 1\n[loss]\nmodel = \"bernoulli\"\nloss = 0.1").is_err());
        assert!(
            toml::from_str::<LinkConfig>("rate_bps = 1\n[policer]\naction = \"block\"\nprotocol = \"udp\"\nx = 1")
                .is_err()
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        let field_of = |c: LinkConfig| c.validate().unwrap_err().field;
        assert_eq!(field_of(LinkConfig::constant(0)), "rate_bps");
        assert_eq!(field_of(LinkConfig::default()), "rate_bps");
        assert_eq!(
            field_of(LinkConfig {
                delay_ms: Some(0.0),
                ..LinkConfig::constant(1)
            }),
            "delay_ms"
        );
        assert_eq!(
            field_of(LinkConfig {
                delay_ms: Some(-3.0),
                ..LinkConfig::constant(1)
            }),
            "delay_ms"
        );
        assert_eq!(
            field_of(LinkConfig {
                jitter_ms: Some(f64::NAN),
                ..LinkConfig::constant(1)
            }),
            "jitter_ms"
        );
        let mut c = LinkConfig::constant(1);
        c.queue.limit_packets = Some(0);
        assert_eq!(field_of(c), "queue.limit_packets");
        let mut c = LinkConfig::constant(1);
        c.queue.limit_bdp = Some(1.0);
        assert_eq!(field_of(c), "base_rtt_ms");
        let mut c = LinkConfig::constant(1);
        c.loss = LossConfig::Bernoulli { loss_rate: 1.5 };
        assert_eq!(field_of(c), "loss.loss_rate");
        let mut c = LinkConfig::constant(1);
        c.schedule.push(ScheduledChange {
            at_ms: 5.0,
            rate_bps: Some(0),
            ..Default::default()
        });
        assert_eq!(field_of(c), "schedule[0].rate_bps");
        let e = toml::from_str::<LinkConfig>("rate_bps = -5").unwrap_err();
        assert!(e.to_string().contains("rate_bps"), "{e}");
    }
}
