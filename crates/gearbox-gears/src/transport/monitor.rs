//! The Network Monitor (WiseTrans §III-C, §IV-B1): two XGBoost models, one per current
//! protocol, scoring the current protocol's window.
//!
//! Files, in the model directory: `tcp.json` + `tcp.meta.json` (used while requests go
//! over TCP) and `quic.json` + `quic.meta.json` (while they go over QUIC). Each is an
//! XGBoost `binary:logistic` booster with its sidecar naming the features in model order;
//! §IV-B1 uses Table I's top 7 for TCP and top 5 for QUIC
//! ([`super::TCP_FEATURES`], [`super::QUIC_FEATURES`]), but any subset of
//! [`super::FEATURE_NAMES`] is accepted.
//!
//! **Output and label convention.** The score is the model's probability of class 1,
//! and class 1 means *switch*: given the features of protocol P's window (P = the model's
//! protocol), the other protocol completed the same workload faster in the same window.
//! The training pipeline must label exactly so (docs/wisetrans.md, "Label"):
//! label 1 iff Σ RCT of the other protocol's run < Σ RCT of P's run over the same
//! requests issued in the window, label 0 otherwise. If a sidecar gives
//! `class_labels`, they must be `["stay", "switch"]`.
//!
//! **The `mlp` mode** (§IV-E2, footnote 4: the 128-64 MLP that Table II compares with
//! XGBoost) loads `mlp-tcp.json` and `mlp-quic.json` instead ([`MLP_PREFIX`],
//! [`NetworkMonitor::load_prefixed`]): `gearbox-mlp` networks exported by the training
//! pipeline on the same features. gearbox-policy's [`Model`] evaluates either kind and a
//! network reports `binary:logistic` (one output, P(class 1)), so nothing below knows
//! which kind it holds; every rule here applies to both.
//!
//! A missing or unusable model (unreadable, malformed, not `binary:logistic`, a feature
//! the extractor does not produce, wrong class labels) makes the whole monitor
//! unavailable: it is logged once, and the gear falls back to TCP. Rejected alternative:
//! running with one of the two models, which would make the gear's behaviour depend on
//! which protocol it happens to be on.

use std::path::Path;

use gearbox_policy::{FeatureRow, Model, ModelError, ModelOrFallback, Objective};

use super::features::{Features, FEATURE_NAMES};
use super::Transport;

/// Class labels a sidecar may give, in output order.
pub const CLASS_LABELS: [&str; 2] = ["stay", "switch"];

/// File-name prefix of the `mlp` mode's models: `mlp-tcp.json`, `mlp-quic.json`.
pub const MLP_PREFIX: &str = "mlp-";

/// One protocol's model, its input row (reused) and the extractor feature behind each
/// model column.
#[derive(Debug)]
struct Scorer {
    model: ModelOrFallback,
    row: FeatureRow,
    /// For each model column, the feature name (model order).
    columns: Vec<&'static str>,
}

impl Scorer {
    fn new(gear: &str, path: &Path, loaded: Result<Model, ModelError>) -> Result<Self, String> {
        let checked = loaded
            .map_err(|e| e.to_string())
            .and_then(|m| check(&m).map(|cols| (m, cols)));
        match checked {
            Ok((model, columns)) => {
                let row = model.empty_row();
                Ok(Scorer {
                    model: ModelOrFallback::from_result(gear, path, Ok(model)),
                    row,
                    columns,
                })
            }
            Err(reason) => {
                tracing::warn!(gear, path = %path.display(), error = %reason,
                    "network monitor model unavailable; choosing TCP");
                Err(format!("{}: {reason}", path.display()))
            }
        }
    }

    fn score(&mut self, f: &Features) -> Option<f64> {
        let model = self.model.model()?;
        for name in &self.columns {
            model.set(&mut self.row, name, f.get(name).unwrap_or(f64::NAN));
        }
        let mut out = [0f32; 1];
        let p = self.model.predict(&self.row, &mut out)?;
        p.first().map(|&v| f64::from(v)).filter(|v| v.is_finite())
    }
}

/// Refuses a model the monitor cannot use; returns its columns as extractor names.
fn check(m: &Model) -> Result<Vec<&'static str>, String> {
    if m.objective() != Objective::BinaryLogistic {
        return Err(format!(
            "objective {} (the monitor needs binary:logistic, P(switch))",
            m.objective().name()
        ));
    }
    let labels = m.class_labels();
    if !labels.is_empty() && labels.iter().map(String::as_str).ne(CLASS_LABELS) {
        return Err(format!("class_labels {labels:?}; the monitor needs {CLASS_LABELS:?}"));
    }
    m.feature_names()
        .map(|name| {
            FEATURE_NAMES
                .iter()
                .copied()
                .find(|f| *f == name)
                .ok_or_else(|| format!("feature {name:?} is not one the extractor produces ({FEATURE_NAMES:?})"))
        })
        .collect()
}

/// The two models, or why there are none.
#[derive(Debug)]
pub struct NetworkMonitor {
    models: Result<(Scorer, Scorer), String>,
}

impl NetworkMonitor {
    /// Loads `dir/tcp.json` and `dir/quic.json` with their sidecars. Never fails: see
    /// [`NetworkMonitor::unavailable`].
    pub fn load(dir: Option<&Path>) -> Self {
        Self::load_prefixed(dir, "")
    }

    /// Loads `dir/<prefix>tcp.json` and `dir/<prefix>quic.json` with their sidecars
    /// (`prefix` [`MLP_PREFIX`]: the `mlp` mode's networks). Never fails.
    pub fn load_prefixed(dir: Option<&Path>, prefix: &str) -> Self {
        let Some(dir) = dir else {
            tracing::warn!(gear = "transport", "no model directory given; WiseTrans chooses TCP");
            return NetworkMonitor {
                models: Err("no model directory".into()),
            };
        };
        let (tcp, quic) = (
            dir.join(format!("{prefix}tcp.json")),
            dir.join(format!("{prefix}quic.json")),
        );
        Self::from_models((&tcp, Model::load(&tcp)), (&quic, Model::load(&quic)))
    }

    /// From load results (paths only name the files in logs and reasons).
    pub fn from_models(tcp: (&Path, Result<Model, ModelError>), quic: (&Path, Result<Model, ModelError>)) -> Self {
        let tcp = Scorer::new("transport/tcp", tcp.0, tcp.1);
        let quic = Scorer::new("transport/quic", quic.0, quic.1);
        let models = match (tcp, quic) {
            (Ok(t), Ok(q)) => Ok((t, q)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        NetworkMonitor { models }
    }

    /// Why the monitor cannot score (None: it can).
    pub fn unavailable(&self) -> Option<&str> {
        self.models.as_ref().err().map(String::as_str)
    }

    /// The probability that the other protocol would be faster, from the features of the
    /// `current` protocol's window (None: no model, or the model refused the row).
    pub fn score(&mut self, current: Transport, features: &Features) -> Option<f64> {
        let (tcp, quic) = self.models.as_mut().ok()?;
        match current {
            Transport::Tcp => tcp.score(features),
            Transport::Quic => quic.score(features),
        }
    }
}

/// Hand-built models for tests: a stump per protocol on one feature.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    /// A one-split `binary:logistic` booster over `features`: `feature < threshold` gives
    /// margin `left`, otherwise `right` (NaN goes left).
    pub(crate) fn stump_json(features: usize, split_feature: usize, threshold: f32, left: f32, right: f32) -> String {
        serde_json::json!({
            "learner": {
                "attributes": {},
                "feature_names": [],
                "feature_types": [],
                "gradient_booster": {
                    "name": "gbtree",
                    "model": {
                        "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": "1"},
                        "tree_info": [0],
                        "trees": [{
                            "id": 0,
                            "tree_param": {"num_nodes": "3", "num_feature": features.to_string(), "size_leaf_vector": "1"},
                            "left_children": [1, -1, -1],
                            "right_children": [2, -1, -1],
                            "split_indices": [split_feature, 0, 0],
                            "split_conditions": [threshold, left, right],
                            "default_left": [1, 0, 0],
                            "split_type": [0, 0, 0],
                            "base_weights": [0.0, left, right],
                        }],
                    }
                },
                "learner_model_param": {
                    "base_score": "5E-1", "num_class": "0",
                    "num_feature": features.to_string(), "num_target": "1",
                },
                "objective": {"name": "binary:logistic"},
            },
            "version": [2, 1, 0],
        })
        .to_string()
    }

    pub(crate) fn sidecar_json(features: &[&str]) -> String {
        serde_json::json!({
            "format_version": 1,
            "model_version": "test-stump",
            "objective": "binary:logistic",
            "features": features.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
            "class_labels": ["stay", "switch"],
            "training_data": {"sha256": "0".repeat(64)},
        })
        .to_string()
    }

    /// A `gearbox-mlp` network over `features` whose log-odds is
    /// `bias + slope * relu(retran_rate)` (one hidden unit reading `retran_rate`).
    pub(crate) fn mlp_json(features: &[&str], bias: f64, slope: f64) -> String {
        let weights: Vec<Vec<f64>> = features
            .iter()
            .map(|f| vec![if *f == "retran_rate" { 1.0 } else { 0.0 }])
            .collect();
        serde_json::json!({
            "format": "gearbox-mlp",
            "format_version": 1,
            "activation": "relu",
            "output": "logistic",
            "feature_names": features,
            "impute": vec![0.0; features.len()],
            "layers": [
                {"weights": weights, "bias": [0.0]},
                {"weights": [[slope]], "bias": [bias]},
            ],
        })
        .to_string()
    }

    /// Writes `mlp-tcp.json` and `mlp-quic.json` networks ([`mlp_json`]) and sidecars.
    pub(crate) fn write_mlps(dir: &Path, bias: f64, slope: f64) {
        for (name, features) in [
            ("tcp", &super::super::TCP_FEATURES[..]),
            ("quic", &super::super::QUIC_FEATURES[..]),
        ] {
            let path = dir.join(format!("{}{name}.json", super::MLP_PREFIX));
            std::fs::write(&path, mlp_json(features, bias, slope)).expect("write model");
            std::fs::write(gearbox_policy::ModelMeta::path_for(&path), sidecar_json(features)).expect("write sidecar");
        }
    }

    /// Writes `tcp.json` and `quic.json` stumps splitting on `retran_rate` at
    /// `threshold`: below it the margin is `low`, above it `high`.
    pub(crate) fn write_stumps(dir: &Path, threshold: f32, low: f32, high: f32) {
        for (name, features) in [
            ("tcp", &super::super::TCP_FEATURES[..]),
            ("quic", &super::super::QUIC_FEATURES[..]),
        ] {
            let split = features.iter().position(|f| *f == "retran_rate").unwrap_or(0);
            std::fs::write(
                dir.join(format!("{name}.json")),
                stump_json(features.len(), split, threshold, low, high),
            )
            .expect("write model");
            std::fs::write(dir.join(format!("{name}.meta.json")), sidecar_json(features)).expect("write sidecar");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(retran_rate: f64) -> Features {
        Features {
            retran_rate,
            rtt_avg_ms: 50.0,
            resp_rec_goodput_mbps: 10.0,
            ttfb_avg_ms: 80.0,
            ttfb_ms: 80.0,
            ttfb_rate: 1.0,
            req_cmpl_goodput_mbps: 5.0,
            ttfb_rtt_ratio: 1.6,
            cost_rtt_ratio: 2.0,
            fail_rate: 0.0,
            loss_streak: 0.0,
            requests: 5,
            ok_requests: 5,
        }
    }

    #[test]
    fn the_model_of_the_current_protocol_scores_its_window() {
        let dir = tempfile::tempdir().expect("tmp");
        testing::write_stumps(dir.path(), 0.05, -2.0, 2.0);
        let mut m = NetworkMonitor::load(Some(dir.path()));
        assert_eq!(m.unavailable(), None);
        let low = m.score(Transport::Tcp, &features(0.01)).expect("score");
        let high = m.score(Transport::Quic, &features(0.2)).expect("score");
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        assert!((low - sigmoid(-2.0)).abs() < 1e-6, "{low}");
        assert!((high - sigmoid(2.0)).abs() < 1e-6, "{high}");
        // Missing features go the default (left) way rather than failing.
        let none = m.score(Transport::Tcp, &features(f64::NAN)).expect("score");
        assert!((none - sigmoid(-2.0)).abs() < 1e-6);
    }

    #[test]
    fn the_mlp_prefix_loads_the_networks_and_scores_with_them() {
        let dir = tempfile::tempdir().expect("tmp");
        testing::write_stumps(dir.path(), 0.05, -2.0, 2.0);
        testing::write_mlps(dir.path(), -1.0, 20.0);
        let mut m = NetworkMonitor::load_prefixed(Some(dir.path()), MLP_PREFIX);
        assert_eq!(m.unavailable(), None);
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let p = m.score(Transport::Tcp, &features(0.1)).expect("score");
        assert!((p - sigmoid(-1.0 + 20.0 * 0.1)).abs() < 1e-6, "{p}");
        // A missing input takes the network's median (0 here), not a tree's default branch.
        let none = m.score(Transport::Quic, &features(f64::NAN)).expect("score");
        assert!((none - sigmoid(-1.0)).abs() < 1e-6, "{none}");
        // Without the networks the mode is unavailable even though tcp.json is there.
        std::fs::remove_file(dir.path().join("mlp-quic.json")).expect("rm");
        let m = NetworkMonitor::load_prefixed(Some(dir.path()), MLP_PREFIX);
        assert!(
            m.unavailable().is_some_and(|e| e.contains("mlp-quic.json")),
            "{:?}",
            m.unavailable()
        );
    }

    #[test]
    fn the_shipped_mlp_models_load_and_give_probabilities() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/wisetrans");
        let mut m = NetworkMonitor::load_prefixed(Some(&dir), MLP_PREFIX);
        assert_eq!(m.unavailable(), None);
        for t in [Transport::Tcp, Transport::Quic] {
            for loss in [0.0, 0.05, f64::NAN] {
                let p = m.score(t, &features(loss)).expect("score");
                assert!((0.0..=1.0).contains(&p), "{t:?} {loss}: {p}");
            }
        }
    }

    #[test]
    fn missing_broken_or_mislabelled_models_make_the_monitor_unavailable() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut m = NetworkMonitor::load(Some(dir.path()));
        assert!(m.unavailable().is_some_and(|e| e.contains("tcp.json")));
        assert_eq!(m.score(Transport::Tcp, &features(0.0)), None);

        testing::write_stumps(dir.path(), 0.05, -2.0, 2.0);
        std::fs::write(dir.path().join("quic.json"), "{ not json").expect("write");
        let m = NetworkMonitor::load(Some(dir.path()));
        assert!(
            m.unavailable().is_some_and(|e| e.contains("quic.json")),
            "{:?}",
            m.unavailable()
        );

        testing::write_stumps(dir.path(), 0.05, -2.0, 2.0);
        let meta = testing::sidecar_json(&super::super::TCP_FEATURES).replace("\"stay\", \"switch\"", "\"x\", \"y\"");
        let meta = meta.replace("[\"stay\",\"switch\"]", "[\"quic\",\"tcp\"]");
        std::fs::write(dir.path().join("tcp.meta.json"), meta).expect("write");
        let m = NetworkMonitor::load(Some(dir.path()));
        assert!(
            m.unavailable().is_some_and(|e| e.contains("class_labels")),
            "{:?}",
            m.unavailable()
        );

        assert!(NetworkMonitor::load(None).unavailable().is_some());
    }
}
