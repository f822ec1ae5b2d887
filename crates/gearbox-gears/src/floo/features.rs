//! The Floo Monitor's state vector (Floo §3.2, Table 2; §3.3 "State & Action").
//!
//! The selector never sees raw metrics: Floo §3.3 feeds the policy *normalised* metrics
//! so that a value with a large unit does not dominate and the policy generalises to
//! paths it was not trained on. This module is the one place that normalisation lives:
//! the simulator's gymnasium environment (through `gearbox._native`), the simulator's
//! in-process gear and the edge all call [`observation`], and a trained policy's
//! sidecar lists [`FEATURE_NAMES`] in this order, so a model trained on another
//! normalisation is refused at load (`FlooGear::load`).
//!
//! Each feature is dimensionless or in seconds, scaled to roughly `[0, 3]` on the paths
//! of the lab, and clipped to `[-CLIP, CLIP]`:
//!
//! | # | name | from Table 2 | how |
//! |---|---|---|---|
//! | 0 | `max_delivery_rate_log10_mbps` | Thpt_max | log10(1 + Mbit/s) |
//! | 1 | `min_rtt_s` | RTT_min | seconds |
//! | 2 | `loss_rate` | Loss_rate | lost / sent in the window |
//! | 3 | `queue_over_min_rtt` | RTT_rate | sRTT / minRTT - 1 (the standing queue) |
//! | 4 | `rtt_dev_over_min_rtt` | RTT_var | sqrt(variance) / minRTT |
//! | 5 | `cwnd_over_bdp` | CWND | cwnd / (Thpt_max x minRTT) |
//! | 6 | `pacing_over_max_delivery` | SendRate | pacing rate / Thpt_max |
//! | 7 | `goodput_over_max_delivery` | Good put | goodput / Thpt_max |
//! | 8 | `unsent_s` | Unsent_size | unsent bytes / Thpt_max: seconds of backlog |
//! | 9 | `response_wait_s` | Qws | seconds |
//! | 10 | `response_wait_gradient` | Qws_gradient | seconds per second |
//! | 11 | `bytes_over_capacity` | Bytes_interval | bytes sent / (Thpt_max x period) |
//! | 12-15 | `cca_cubic` ... `cca_westwood` | CCA_name | one-hot over [`ACTIONS`] |
//!
//! **Missing values.** A metric the stack has no sample for in the window (`None`, or a
//! ratio whose denominator is zero, such as every ratio over Thpt_max before the first
//! delivery-rate sample) becomes 0, the value of an idle path; a non-finite input never
//! reaches the policy (Floo issue: "never a switch on NaN"). [`Observation::missing`]
//! counts them so the gear can say so in its reason.

use gearbox_gear_api::{Cca, ConnectionStats};

/// The controllers the selector chooses among, in the policy's output order: the four
/// of Floo §2.1.
pub const ACTIONS: [Cca; 4] = [Cca::Cubic, Cca::Bbr, Cca::Copa, Cca::Westwood];

/// Number of features.
pub const NUM_FEATURES: usize = 16;

/// Feature names, in the order of [`observation`]'s vector (a policy's sidecar lists
/// the same).
pub const FEATURE_NAMES: [&str; NUM_FEATURES] = [
    "max_delivery_rate_log10_mbps",
    "min_rtt_s",
    "loss_rate",
    "queue_over_min_rtt",
    "rtt_dev_over_min_rtt",
    "cwnd_over_bdp",
    "pacing_over_max_delivery",
    "goodput_over_max_delivery",
    "unsent_s",
    "response_wait_s",
    "response_wait_gradient",
    "bytes_over_capacity",
    "cca_cubic",
    "cca_bbr",
    "cca_copa",
    "cca_westwood",
];

/// Every feature is clipped to `[-CLIP, CLIP]`.
pub const CLIP: f32 = 10.0;

/// A normalised state vector and how many of its metrics were missing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// The features, in [`FEATURE_NAMES`] order.
    pub values: [f32; NUM_FEATURES],
    /// Metrics that had no sample and took their default (0).
    pub missing: u32,
}

/// The normalised state of one connection's selection period (module docs).
pub fn observation(stats: &ConnectionStats) -> Observation {
    let mut missing = 0u32;
    let mut take = |v: Option<f64>| match v {
        Some(x) if x.is_finite() => x,
        _ => {
            missing += 1;
            0.0
        }
    };
    let max_rate_bps = take(stats.max_delivery_rate_bps.map(|b| b as f64)).max(0.0);
    let min_rtt_s = take(stats.min_rtt_ms).max(0.0) / 1e3;
    let loss = take(stats.loss_rate);
    let srtt_s = take(stats.srtt_ms) / 1e3;
    let rtt_dev_s = take(stats.rtt_var_ms2).max(0.0).sqrt() / 1e3;
    let pacing_bps = take(stats.pacing_rate_bps.map(|b| b as f64));
    let goodput_bps = take(stats.goodput_bps);
    let wait_s = take(stats.response_wait_ms) / 1e3;
    let wait_gradient = take(stats.response_wait_gradient_ms_per_s) / 1e3;
    let period_s = stats.period_ms / 1e3;
    let rate_bytes = max_rate_bps / 8.0;
    let bdp = rate_bytes * min_rtt_s;
    let ratio = |num: f64, den: f64| if den > 0.0 && num.is_finite() { num / den } else { 0.0 };
    let mut values = [0f32; NUM_FEATURES];
    let head = [
        (1.0 + max_rate_bps / 1e6).log10(),
        min_rtt_s,
        loss,
        if min_rtt_s > 0.0 && srtt_s > 0.0 {
            srtt_s / min_rtt_s - 1.0
        } else {
            0.0
        },
        ratio(rtt_dev_s, min_rtt_s),
        ratio(stats.cwnd_bytes as f64, bdp),
        ratio(pacing_bps, max_rate_bps),
        ratio(goodput_bps, max_rate_bps),
        ratio(stats.unsent_bytes as f64, rate_bytes),
        wait_s,
        wait_gradient,
        ratio(stats.bytes_sent as f64, rate_bytes * period_s),
    ];
    for (v, x) in values.iter_mut().zip(head) {
        *v = if x.is_finite() {
            (x as f32).clamp(-CLIP, CLIP)
        } else {
            0.0
        };
    }
    if let Some(i) = ACTIONS.iter().position(|&a| a == stats.cca) {
        values[head.len() + i] = 1.0;
    }
    Observation { values, missing }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gearbox_gear_api::Transport;

    fn stats() -> ConnectionStats {
        ConnectionStats {
            conn_id: 1,
            transport: Transport::Quic,
            cca: Cca::Bbr,
            period_ms: 12_000.0,
            max_delivery_rate_bps: Some(9_000_000),
            min_rtt_ms: Some(40.0),
            srtt_ms: Some(60.0),
            rtt_var_ms2: Some(25.0),
            loss_rate: Some(0.01),
            cwnd_bytes: 90_000,
            pacing_rate_bps: Some(9_000_000),
            goodput_bps: Some(4_500_000.0),
            unsent_bytes: 1_125_000,
            response_wait_ms: Some(250.0),
            response_wait_gradient_ms_per_s: Some(-20.0),
            bytes_sent: 6_750_000,
        }
    }

    #[test]
    fn each_metric_lands_in_its_named_slot() {
        let o = observation(&stats());
        assert_eq!(o.missing, 0);
        let at = |name: &str| o.values[FEATURE_NAMES.iter().position(|n| *n == name).unwrap()];
        assert!((at("max_delivery_rate_log10_mbps") - 1.0).abs() < 1e-6);
        assert!((at("min_rtt_s") - 0.04).abs() < 1e-6);
        assert!((at("loss_rate") - 0.01).abs() < 1e-6);
        assert!((at("queue_over_min_rtt") - 0.5).abs() < 1e-6);
        assert!((at("rtt_dev_over_min_rtt") - 0.125).abs() < 1e-6);
        // BDP = 1.125 MB/s x 40 ms = 45 kB.
        assert!((at("cwnd_over_bdp") - 2.0).abs() < 1e-6);
        assert!((at("pacing_over_max_delivery") - 1.0).abs() < 1e-6);
        assert!((at("goodput_over_max_delivery") - 0.5).abs() < 1e-6);
        assert!((at("unsent_s") - 1.0).abs() < 1e-6);
        assert!((at("response_wait_s") - 0.25).abs() < 1e-6);
        assert!((at("response_wait_gradient") + 0.02).abs() < 1e-6);
        assert!((at("bytes_over_capacity") - 0.5).abs() < 1e-6);
        assert_eq!(&o.values[12..], &[0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn missing_and_non_finite_metrics_become_zero_and_are_counted() {
        let mut s = stats();
        s.max_delivery_rate_bps = None;
        s.min_rtt_ms = Some(f64::NAN);
        s.rtt_var_ms2 = None;
        s.goodput_bps = Some(f64::INFINITY);
        s.cca = Cca::Vivace;
        let o = observation(&s);
        assert_eq!(o.missing, 4);
        assert!(o.values.iter().all(|v| v.is_finite()));
        // Every ratio over Thpt_max or minRTT falls back to 0 with its denominator.
        for name in ["cwnd_over_bdp", "unsent_s", "bytes_over_capacity", "queue_over_min_rtt"] {
            assert_eq!(
                o.values[FEATURE_NAMES.iter().position(|n| *n == name).unwrap()],
                0.0,
                "{name}"
            );
        }
        // A controller outside the four has no one-hot.
        assert_eq!(&o.values[12..], &[0.0; 4]);
    }

    #[test]
    fn extreme_values_are_clipped() {
        let mut s = stats();
        s.cwnd_bytes = u64::MAX;
        s.response_wait_gradient_ms_per_s = Some(-1e12);
        let o = observation(&s);
        assert_eq!(o.values[5], CLIP);
        assert_eq!(o.values[10], -CLIP);
    }
}
