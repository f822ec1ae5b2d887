//! The strawman of WiseTrans §IV-E1: a linear decision boundary over the network
//! conditions ⟨RTT, BtlBw, LossRate⟩, fitted offline, looked up online.
//!
//! `z = intercept + rtt_ms·RTT + btlbw_mbps·BtlBw + loss_rate·LossRate`; QUIC when
//! `z > 0`, else TCP. The reason's score is `σ(z)`, the probability of "QUIC is better"
//! under a logistic fit (which is how the training pipeline is expected to fit the
//! boundary). Online measurements, from the Feature Extractor's window of the protocol
//! in use for the origin: RTT = `rtt_avg_ms`, BtlBw = `resp_rec_goodput_mbps` (the
//! client sees goodput, not the bottleneck; §IV-E1 itself notes these are observation
//! variables), LossRate = `retran_rate`. Any of them missing: the protocol in use stays.
//! No hysteresis, on purpose: the paper's strawman switches 2–3× more than WiseTrans.
//!
//! Coefficients come from `strawman.json` in the model directory
//! ([`StrawmanCoefficients`], unknown fields refused). Without the file the documented
//! defaults apply; a broken file is logged once and the defaults apply. The defaults
//! encode Fig. 1's shape (QUIC wins on slow, lossy, long paths): intercept −1,
//! +0.005 per ms of RTT, −0.1 per Mbit/s, +50 per unit of loss rate; e.g. 50 ms, 10 Mbit/s
//! and no loss gives TCP (z = −1.75), 5% loss on the same path gives QUIC (z = +0.75).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use gearbox_gear_api::{ClientRecord, Decision, TransportChoice, TransportGear};
use serde::{Deserialize, Serialize};

use super::features::FeatureExtractor;
use super::{origin_key, Reason, Transport, TransportConfig};

/// The boundary's coefficients (`strawman.json`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrawmanCoefficients {
    /// Constant term.
    pub intercept: f64,
    /// Per millisecond of average RTT.
    pub rtt_ms: f64,
    /// Per Mbit/s of bandwidth (response receive goodput).
    pub btlbw_mbps: f64,
    /// Per unit of loss (retransmission) rate.
    pub loss_rate: f64,
}

impl Default for StrawmanCoefficients {
    fn default() -> Self {
        StrawmanCoefficients {
            intercept: -1.0,
            rtt_ms: 0.005,
            btlbw_mbps: -0.1,
            loss_rate: 50.0,
        }
    }
}

impl StrawmanCoefficients {
    /// `z` for the given conditions (QUIC when positive).
    pub fn margin(&self, rtt_ms: f64, btlbw_mbps: f64, loss_rate: f64) -> f64 {
        self.intercept + self.rtt_ms * rtt_ms + self.btlbw_mbps * btlbw_mbps + self.loss_rate * loss_rate
    }

    fn finite(&self) -> bool {
        [self.intercept, self.rtt_ms, self.btlbw_mbps, self.loss_rate]
            .iter()
            .all(|v| v.is_finite())
    }
}

/// The strawman gear.
#[derive(Debug)]
pub struct Strawman {
    coef: StrawmanCoefficients,
    /// `file` or `default`.
    source: &'static str,
    cfg: TransportConfig,
    origins: HashMap<String, (FeatureExtractor, Transport)>,
}

impl Strawman {
    /// With `model_dir/strawman.json`, or the defaults.
    pub fn load(model_dir: Option<&Path>, cfg: TransportConfig) -> Self {
        let Some(path) = model_dir.map(|d| d.join("strawman.json")) else {
            return Strawman::new(StrawmanCoefficients::default(), "default", cfg);
        };
        let parsed = std::fs::read(&path)
            .map_err(|e| (e.kind() == std::io::ErrorKind::NotFound, e.to_string()))
            .and_then(|bytes| {
                serde_json::from_slice::<StrawmanCoefficients>(&bytes).map_err(|e| (false, e.to_string()))
            })
            .and_then(|c| {
                if c.finite() {
                    Ok(c)
                } else {
                    Err((false, "a coefficient is not a finite number".to_string()))
                }
            });
        match parsed {
            Ok(c) => Strawman::new(c, "file", cfg),
            Err((missing, error)) => {
                if !missing {
                    tracing::warn!(gear = "transport/strawman", path = %path.display(), %error,
                        "strawman coefficients unusable; using the defaults");
                }
                Strawman::new(StrawmanCoefficients::default(), "default", cfg)
            }
        }
    }

    /// With these coefficients (`source` goes into reasons: `file` or `default`).
    pub fn new(coef: StrawmanCoefficients, source: &'static str, cfg: TransportConfig) -> Self {
        Strawman {
            coef,
            source,
            cfg,
            origins: HashMap::new(),
        }
    }

    fn entry(&mut self, origin: &str) -> &mut (FeatureExtractor, Transport) {
        if !self.origins.contains_key(origin) && self.origins.len() >= self.cfg.max_origins.max(1) {
            self.origins.clear();
        }
        let (window, cap) = (Duration::from_millis(self.cfg.window_ms), self.cfg.window_max_requests);
        self.origins
            .entry(origin.to_string())
            .or_insert_with(|| (FeatureExtractor::new(window, cap), Transport::Tcp))
    }
}

impl TransportGear for Strawman {
    fn choose(&mut self, origin: &str, now: Instant) -> Decision<TransportChoice> {
        let coef = self.coef;
        let source = self.source;
        let (fx, current) = self.entry(origin);
        let f = fx.features(*current, now);
        let (rtt, bw, loss) = (f.rtt_avg_ms, f.resp_rec_goodput_mbps, f.retran_rate);
        let (score, why) = if rtt.is_finite() && bw.is_finite() && loss.is_finite() {
            let z = coef.margin(rtt, bw, loss);
            *current = if z > 0.0 { Transport::Quic } else { Transport::Tcp };
            (Some(1.0 / (1.0 + (-z).exp())), "boundary")
        } else {
            (None, "no-data")
        };
        let reason = Reason {
            mode: "strawman",
            phase: "exploit",
            score,
            choice: TransportChoice::from(*current),
            why,
            extra: &[("coef", source)],
        };
        Decision::new(TransportChoice::from(*current), reason.render())
    }

    fn observe(&mut self, record: &ClientRecord, now: Instant) {
        let origin = origin_key(&record.url);
        self.entry(&origin).0.observe(record, now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::features::tests::{record, with_counters};
    use super::*;
    use gearbox_gear_api::Protocol;

    #[test]
    fn the_default_boundary_picks_tcp_on_clean_fast_paths_and_quic_on_lossy_slow_ones() {
        let c = StrawmanCoefficients::default();
        assert!(c.margin(50.0, 10.0, 0.0) < 0.0);
        assert!((c.margin(50.0, 10.0, 0.0) + 1.75).abs() < 1e-12);
        assert!(c.margin(50.0, 10.0, 0.05) > 0.0);
        assert!(c.margin(300.0, 1.0, 0.0) > 0.0, "long thin paths go QUIC too");
        assert!(
            c.margin(20.0, 100.0, 0.05) < 0.0,
            "fat paths stay TCP despite some loss"
        );
    }

    #[test]
    fn the_strawman_follows_its_boundary_from_measured_conditions() {
        let mut g = Strawman::new(StrawmanCoefficients::default(), "default", TransportConfig::default());
        let t0 = Instant::now();
        let Decision {
            choice: p, reason: why, ..
        } = g.choose("127.0.0.1:4433", t0);
        assert_eq!(p, TransportChoice::Tcp);
        assert_eq!(
            why,
            "strawman;phase=exploit;score=-;choice=tcp;why=no-data;coef=default"
        );
        // 10% loss, 50 ms RTT, 100 kB received in 80 ms (10 Mbit/s): z = -1 + .25 - 1 + 5 > 0.
        let r = with_counters(record(Protocol::H2, 100.0, 20.0, 100_000, 1), 50.0, 100, 10);
        g.observe(&r, t0);
        let Decision {
            choice: p, reason: why, ..
        } = g.choose("127.0.0.1:4433", t0);
        assert_eq!(p, TransportChoice::Quic, "{why}");
        assert!(why.contains("why=boundary"), "{why}");
    }

    #[test]
    fn coefficients_come_from_the_file_and_a_broken_file_means_defaults() {
        let dir = tempfile::tempdir().expect("tmp");
        let g = Strawman::load(Some(dir.path()), TransportConfig::default());
        assert_eq!((g.coef, g.source), (StrawmanCoefficients::default(), "default"));
        std::fs::write(
            dir.path().join("strawman.json"),
            r#"{"intercept": 1.0, "rtt_ms": 0.0, "btlbw_mbps": 0.0, "loss_rate": 0.0}"#,
        )
        .expect("write");
        let g = Strawman::load(Some(dir.path()), TransportConfig::default());
        assert_eq!((g.coef.intercept, g.source), (1.0, "file"));
        std::fs::write(dir.path().join("strawman.json"), r#"{"intercept": 1.0, "bogus": 2}"#).expect("write");
        let g = Strawman::load(Some(dir.path()), TransportConfig::default());
        assert_eq!(g.source, "default");
    }
}
