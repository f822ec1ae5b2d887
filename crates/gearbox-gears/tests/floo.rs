//! The Floo gear over real policy files: the shipped policy, and the refusals of a model
//! that does not fit the Monitor (Floo issue, "Bad input").

use std::path::{Path, PathBuf};
use std::time::Instant;

use gearbox_gear_api::{Cca, CcaPeriodGear, ConnectionStats, Transport};
use gearbox_gears::floo::{FlooGear, FlooModelError, ACTIONS, FEATURE_NAMES};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stats(cca: Cca) -> ConnectionStats {
    ConnectionStats {
        conn_id: 1,
        transport: Transport::Quic,
        cca,
        period_ms: 12_000.0,
        max_delivery_rate_bps: Some(12_000_000),
        min_rtt_ms: Some(60.0),
        srtt_ms: Some(90.0),
        rtt_var_ms2: Some(100.0),
        loss_rate: Some(0.02),
        cwnd_bytes: 120_000,
        pacing_rate_bps: Some(10_000_000),
        goodput_bps: Some(3_000_000.0),
        unsent_bytes: 0,
        response_wait_ms: Some(1.0),
        response_wait_gradient_ms_per_s: None,
        bytes_sent: 4_000_000,
    }
}

/// A softmax policy of the right shape whose biases make class `best` win whatever the
/// input, with `labels` as its classes.
fn write_policy(dir: &Path, labels: [&str; 4], best: usize) {
    let hidden = vec![vec![0.0f64; 2]; FEATURE_NAMES.len()];
    let out: Vec<Vec<f64>> = vec![vec![0.0; 4]; 2];
    let mut bias = vec![0.0f64; 4];
    bias[best] = 5.0;
    let model = serde_json::json!({
        "format": "gearbox-mlp",
        "format_version": 1,
        "activation": "leaky_relu",
        "negative_slope": 0.01,
        "output": "softmax",
        "num_class": 4,
        "feature_names": FEATURE_NAMES,
        "impute": vec![0.0; FEATURE_NAMES.len()],
        "layers": [
            {"weights": hidden, "bias": [0.0, 0.0]},
            {"weights": out, "bias": bias},
        ],
    });
    let meta = serde_json::json!({
        "format_version": 1,
        "model_version": "test",
        "objective": "multi:softprob",
        "features": FEATURE_NAMES.iter().map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>(),
        "class_labels": labels,
        "training_data": {"sha256": "0".repeat(64)},
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("policy.json"), model.to_string()).unwrap();
    std::fs::write(dir.join("policy.meta.json"), meta.to_string()).unwrap();
}

#[test]
fn the_shipped_policy_loads_and_chooses_one_of_the_four_for_any_state() {
    let mut gear = FlooGear::load(repo().join("models/floo")).expect("models/floo loads");
    for cca in ACTIONS {
        let d = gear.choose(&stats(cca), Instant::now());
        assert!(ACTIONS.contains(&d.choice), "{d:?}");
        assert!(d.reason.starts_with("floo: "), "{d:?}");
    }
    // A period with no samples at all (an idle connection) still decides, on defaults.
    let mut idle = stats(Cca::Cubic);
    idle.max_delivery_rate_bps = None;
    idle.min_rtt_ms = None;
    idle.srtt_ms = None;
    idle.rtt_var_ms2 = None;
    idle.loss_rate = None;
    idle.goodput_bps = None;
    idle.response_wait_ms = None;
    let d = gear.choose(&idle, Instant::now());
    assert!(
        ACTIONS.contains(&d.choice) && d.reason.contains("8 metrics missing"),
        "{d:?}"
    );
}

#[test]
fn the_choice_follows_the_policy_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    write_policy(dir.path(), ["cubic", "bbr", "copa", "westwood"], 1);
    let mut gear = FlooGear::load(dir.path()).unwrap();
    let d = gear.choose(&stats(Cca::Cubic), Instant::now());
    assert_eq!(d.choice, Cca::Bbr);
    assert!(d.reason.contains("cubic -> bbr"), "{d:?}");
    let d = gear.choose(&stats(Cca::Bbr), Instant::now());
    assert_eq!(d.choice, Cca::Bbr);
    assert!(d.reason.contains("keep bbr"), "{d:?}");
}

#[test]
fn a_controller_this_build_lacks_keeps_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    write_policy(dir.path(), ["cubic", "bbr", "copa", "vegas"], 3);
    let mut gear = FlooGear::load(dir.path()).unwrap();
    let d = gear.choose(&stats(Cca::Copa), Instant::now());
    assert_eq!(d.choice, Cca::Copa);
    assert!(
        d.reason.contains("\"vegas\"") && d.reason.contains("keep copa"),
        "{d:?}"
    );
}

#[test]
fn a_model_trained_on_other_features_is_refused_naming_the_first_difference() {
    let dir = tempfile::tempdir().unwrap();
    let vectors = repo().join("crates/gearbox-policy/tests/vectors");
    std::fs::copy(vectors.join("i_floo_actor.json"), dir.path().join("policy.json")).unwrap();
    std::fs::copy(
        vectors.join("i_floo_actor.meta.json"),
        dir.path().join("policy.meta.json"),
    )
    .unwrap();
    let err = FlooGear::load(dir.path()).unwrap_err();
    assert!(matches!(err, FlooModelError::Features { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("feature 0") && msg.contains("max_delivery_rate_100mbps") && msg.contains(FEATURE_NAMES[0]),
        "{msg}"
    );
}

#[test]
fn a_missing_model_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = FlooGear::load(dir.path().join("nowhere")).unwrap_err();
    assert!(err.to_string().contains("policy.json"), "{err}");
}
