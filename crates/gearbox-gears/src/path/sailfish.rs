//! SAILfish: the learned stream-to-path scheduler (SAILfish §4.2).
//!
//! State (§4.2.1.1): per path, the bandwidth estimate, the smoothed RTT and its recent
//! history, the lost, retransmitted and sent packets of the epoch (one page load), plus
//! what the client knows that the thesis's server-side agent read from MPQUIC (the
//! window, the response bytes and streams outstanding on the path), and the stream's own
//! size and priority. [`features`] turns them into the policy's input, the one
//! normalisation for training (the simulator's `gearbox/PathScheduling-v0` reads it
//! through the Python module) and for serving (this gear).
//!
//! Action (§4.2.1.2): the path. The policy is the A2C actor (`gearbox learn sailfish`),
//! a dense network with a softmax over the paths (`policy.json` + sidecar, evaluated by
//! `gearbox-policy`), used greedily. SAILfish §5.1.2's 1-D convolution over each path's
//! RTT history (`--network conv`) reaches this gear as dense layers too: the exporter
//! writes the convolution as the equivalent dense layer (`gearbox.sailfish.a2c`).
//!
//! Safe by default (docs/architecture.md principle 6): a model whose features are not
//! [`feature_names`] for the client's number of paths (a policy trained for two paths
//! on a three-path client) is refused at load, and the caller falls back to MinRTT
//! with a warning ([`SailfishGear::load_or_minrtt`]); a decision for a path that is
//! down (the client hands only the live paths) goes to MinRTT for that stream and says
//! so.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gearbox_gear_api::{Decision, PathGear, PathRequest, PathState, SRTT_HISTORY};
use gearbox_policy::{Model, ModelError};

use super::MinRtt;

/// The model file inside a SAILfish model directory (its sidecar is `policy.meta.json`).
pub const POLICY_FILE: &str = "policy.json";

/// Names of one path's features, in order ([`features`]).
pub const PATH_FEATURE_NAMES: [&str; 9 + SRTT_HISTORY] = [
    "has_srtt",
    "log2_delivery_rate_mbps",
    "srtt_100ms",
    "min_rtt_100ms",
    "srtt_hist0_100ms",
    "srtt_hist1_100ms",
    "srtt_hist2_100ms",
    "srtt_hist3_100ms",
    "srtt_hist4_100ms",
    "srtt_hist5_100ms",
    "srtt_hist6_100ms",
    "srtt_hist7_100ms",
    "log2_cwnd_packets",
    "log1p_lost_packets",
    "log1p_sent_packets",
    "log1p_outstanding_kb",
    "streams_in_flight",
];

/// Names of the stream's features, after every path's.
pub const STREAM_FEATURE_NAMES: [&str; 2] = ["log1p_size_kb", "urgency_7"];

/// The observation's names for a client with `paths` paths: `p<i>_<name>` for each path
/// in order, then the stream's.
pub fn feature_names(paths: usize) -> Vec<String> {
    (0..paths)
        .flat_map(|i| PATH_FEATURE_NAMES.iter().map(move |n| format!("p{i}_{n}")))
        .chain(STREAM_FEATURE_NAMES.iter().map(|n| n.to_string()))
        .collect()
}

/// RTTs in units of 100 ms (SAILfish's paths have RTTs of 0-100 ms), 0 when unknown.
fn rtt(ms: Option<f64>) -> f32 {
    ms.filter(|v| v.is_finite()).map_or(0.0, |v| (v / 100.0) as f32)
}

/// The policy's input (module docs): for each path in order, whether it has an RTT sample
/// yet, log2(1 + delivery rate in Mbit/s), sRTT and min RTT, the last [`SRTT_HISTORY`]
/// sRTTs oldest first (padded at the front with the oldest, 0 with none), log2(1 + cwnd
/// in 1200-byte packets), log(1 + lost) and log(1 + sent packets) of the epoch, log(1 +
/// outstanding response kB) and the streams in flight; then log(1 + the stream's expected
/// kB, 0 when unknown) and its urgency / 7. Every value is finite and >= 0.
pub fn features(request: &PathRequest, paths: &[PathState]) -> Vec<f32> {
    let mut out = Vec::with_capacity(paths.len() * PATH_FEATURE_NAMES.len() + STREAM_FEATURE_NAMES.len());
    for p in paths {
        out.push(if p.srtt_ms.is_some() { 1.0 } else { 0.0 });
        let mbps = p.delivery_rate_bps.unwrap_or(0) as f64 / 1e6;
        out.push((1.0 + mbps).log2() as f32);
        out.push(rtt(p.srtt_ms));
        out.push(rtt(p.min_rtt_ms));
        let history = &p.srtt_history_ms[p.srtt_history_ms.len().saturating_sub(SRTT_HISTORY)..];
        let pad = history.first().copied();
        for _ in history.len()..SRTT_HISTORY {
            out.push(rtt(pad));
        }
        out.extend(history.iter().map(|&v| rtt(Some(v))));
        out.push((1.0 + p.cwnd_bytes.unwrap_or(0) as f64 / 1200.0).log2() as f32);
        out.push((p.lost_packets as f64).ln_1p() as f32);
        out.push((p.sent_packets as f64).ln_1p() as f32);
        out.push((p.bytes_in_flight as f64 / 1000.0).ln_1p() as f32);
        out.push(p.streams_in_flight as f32);
    }
    out.push((request.expected_bytes.unwrap_or(0) as f64 / 1000.0).ln_1p() as f32);
    out.push(f32::from(request.urgency) / 7.0);
    out
}

/// Why a SAILfish model cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SailfishModelError {
    /// The model or its sidecar could not be read.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The model's features are not this client's (another number of paths, or another
    /// feature set).
    #[error("{path}: the model's features do not match a {paths}-path client's: {detail}")]
    Features {
        /// The model file.
        path: PathBuf,
        /// The client's paths.
        paths: usize,
        /// The first difference.
        detail: String,
    },
    /// The model does not output one probability per path.
    #[error("{path}: the model has {outputs} outputs for a {paths}-path client")]
    Outputs {
        /// The model file.
        path: PathBuf,
        /// Its outputs.
        outputs: usize,
        /// The client's paths.
        paths: usize,
    },
}

/// The learned scheduler (module docs).
pub struct SailfishGear {
    model: Model,
    paths: usize,
    out: Vec<f32>,
    row: Vec<f64>,
}

impl std::fmt::Debug for SailfishGear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SailfishGear")
            .field("model", &self.model.path())
            .field("paths", &self.paths)
            .finish()
    }
}

impl SailfishGear {
    /// The gear of the model in `dir` for a client with `paths` paths.
    pub fn load(dir: impl AsRef<Path>, paths: usize) -> Result<SailfishGear, SailfishModelError> {
        let path = dir.as_ref().join(POLICY_FILE);
        let model = Model::load(&path)?;
        let want = feature_names(paths);
        let names: Vec<&str> = model.feature_names().collect();
        if names.len() != want.len() || names.iter().zip(&want).any(|(a, b)| a != b) {
            let detail = match names
                .iter()
                .zip(&want)
                .enumerate()
                .find(|(_, (a, b))| **a != b.as_str())
            {
                Some((i, (got, w))) => format!("feature {i} is {got:?}, expected {w:?}"),
                None => format!("{} features, expected {}", names.len(), want.len()),
            };
            return Err(SailfishModelError::Features { path, paths, detail });
        }
        if model.num_outputs() != paths {
            return Err(SailfishModelError::Outputs {
                path,
                outputs: model.num_outputs(),
                paths,
            });
        }
        Ok(SailfishGear {
            model,
            paths,
            out: vec![0.0; paths],
            row: Vec::new(),
        })
    }

    /// The SAILfish gear, or MinRTT with a warning when the model cannot be used (the
    /// reason is returned too, for the caller's records).
    pub fn load_or_minrtt(dir: impl AsRef<Path>, paths: usize) -> (Box<dyn PathGear>, Option<String>) {
        match SailfishGear::load(dir, paths) {
            Ok(g) => (Box::new(g), None),
            Err(e) => {
                tracing::warn!(error = %e, "sailfish: the policy cannot be used; scheduling by MinRTT");
                (Box::new(MinRtt), Some(e.to_string()))
            }
        }
    }

    /// The model file in use.
    pub fn model_path(&self) -> &Path {
        self.model.path()
    }

    /// The policy's probability of each path for `request` (in path order).
    pub fn probabilities(&mut self, request: &PathRequest, paths: &[PathState]) -> Result<&[f32], String> {
        self.row.clear();
        self.row.extend(features(request, paths).iter().map(|&v| f64::from(v)));
        let row = self.model.row_from_values(&self.row).map_err(|e| e.to_string())?;
        self.model.predict(&row, &mut self.out).map_err(|e| e.to_string())?;
        Ok(&self.out)
    }
}

impl PathGear for SailfishGear {
    fn choose(&mut self, request: &PathRequest, paths: &[PathState], now: Instant) -> Decision<usize> {
        if paths.len() != self.paths {
            // A path is down: the policy was trained on all of them.
            let d = MinRtt.choose(request, paths, now);
            return Decision::new(
                d.choice,
                format!("sailfish:{} of {} paths up, {}", paths.len(), self.paths, d.reason),
            );
        }
        match self.probabilities(request, paths) {
            Ok(probs) => {
                let (best, p) = probs
                    .iter()
                    .enumerate()
                    .fold((0, f32::MIN), |acc, (i, &p)| if p > acc.1 { (i, p) } else { acc });
                Decision::new(best, format!("sailfish:path{}(p={p:.2})", paths[best].index))
            }
            Err(e) => {
                let d = MinRtt.choose(request, paths, now);
                Decision::new(d.choice, format!("sailfish:policy failed ({e}), {}", d.reason))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{path, request};
    use super::*;

    #[test]
    fn features_have_the_documented_layout_and_are_finite() {
        let mut a = path(0, 20.0, 120_000, 7.0);
        a.srtt_history_ms = vec![30.0, 20.0];
        a.lost_packets = 3;
        a.bytes_in_flight = 50_000;
        a.streams_in_flight = 2;
        let b = PathState {
            index: 1,
            ..PathState::default()
        };
        let f = features(&request(99_000), &[a, b]);
        assert_eq!(f.len(), feature_names(2).len());
        let n = PATH_FEATURE_NAMES.len();
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 3.0).abs() < 1e-6, "log2(1 + 7)");
        assert!((f[2] - 0.2).abs() < 1e-6);
        // History padded at the front with the oldest sample.
        assert_eq!(&f[4..12], &[0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.2]);
        assert!((f[12] - (101f32).log2()).abs() < 1e-5);
        assert_eq!(f[n - 1], 2.0);
        // A path with nothing known is all zeros.
        assert!(f[n..2 * n].iter().all(|&v| v == 0.0));
        assert!((f[2 * n] - 100f32.ln()).abs() < 1e-5);
        assert!((f[2 * n + 1] - 3.0 / 7.0).abs() < 1e-6);
        assert!(f.iter().all(|v| v.is_finite() && *v >= 0.0));
    }

    #[test]
    fn names_number_each_path() {
        let names = feature_names(2);
        assert_eq!(names[0], "p0_has_srtt");
        assert_eq!(names[PATH_FEATURE_NAMES.len()], "p1_has_srtt");
        assert_eq!(names.last().unwrap(), "urgency_7");
    }
}
