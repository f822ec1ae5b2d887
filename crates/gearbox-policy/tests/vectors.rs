//! Agreement with the Python libraries on shipped test vectors.
//!
//! `python/gearbox/models/make_test_vectors.py` trained each model with a fixed
//! seed and recorded XGBoost's / scikit-learn's own predictions for 200 rows
//! (40 of them sitting exactly on, or one float32 step below, a split value).
//! Rows are fed by feature name through the sidecar, as a gear would.

use std::path::{Path, PathBuf};

use gearbox_policy::{Model, Objective};
use serde_json::Value;

/// Probabilities must agree to this absolute difference.
const PROBA_TOL: f32 = 1e-5;
/// Margins and regression values: this much relative to max(1, |expected|).
///
/// The same two bounds hold the dense network (`h_mlp_binary`) to scikit-learn:
/// its arithmetic is `f64` like scikit-learn's, so what differs is the feature
/// row's rounding to `f32` after standardising (2^-24 relative, ~6e-8) carried
/// through two layers (a log-odds error of order |w| x 6e-8, ~1e-7 here), then
/// the `f32` output (another 6e-8). 1e-5 leaves two orders of magnitude for BLAS
/// summation order and `exp`, and still fails a wrong median, scale or weight
/// orientation by far.
const MARGIN_REL_TOL: f32 = 1e-5;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

struct Cases {
    features: Vec<String>,
    rows: Vec<Vec<Option<f64>>>,
    outputs: Value,
}

fn read_cases(set: &str) -> Cases {
    let path = vectors_dir().join(format!("{set}.cases.json"));
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).expect("cases file")).expect("cases JSON");
    let features = doc["features"]
        .as_array()
        .expect("features")
        .iter()
        .map(|v| v.as_str().unwrap().into())
        .collect();
    let rows = doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        // Inputs are float32 data: read them as the float32 the text denotes.
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32 as f64))
                .collect()
        })
        .collect();
    Cases {
        features,
        rows,
        outputs: doc,
    }
}

fn expected(cases: &Cases, key: &str) -> Vec<Vec<f32>> {
    cases.outputs[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in cases"))
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// Largest difference over all rows and outputs, and where it is.
#[derive(Debug, Default)]
struct Worst {
    abs: f32,
    rel: f32,
    row: usize,
}

/// One case row as `model`'s feature row: missing values are simply not given, and the
/// row marks them NaN.
fn case_row(model: &Model, cases: &Cases, row: &[Option<f64>]) -> gearbox_policy::FeatureRow {
    model.row(
        cases
            .features
            .iter()
            .zip(row)
            .filter_map(|(name, v)| v.map(|v| (name.as_str(), v))),
    )
}

fn compare(model: &Model, cases: &Cases, key: &str, margin: bool) -> Worst {
    let want = expected(cases, key);
    assert_eq!(want.len(), cases.rows.len());
    let mut out = vec![0f32; model.num_outputs()];
    let mut worst = Worst::default();
    for (i, (row, want)) in cases.rows.iter().zip(&want).enumerate() {
        let features = case_row(model, cases, row);
        if margin {
            model.predict_margin(&features, &mut out).unwrap();
        } else {
            model.predict(&features, &mut out).unwrap();
        }
        assert_eq!(out.len(), want.len(), "row {i}: output count");
        for (got, want) in out.iter().zip(want) {
            let abs = (got - want).abs();
            let rel = abs / want.abs().max(1.0);
            if abs > worst.abs {
                worst = Worst { abs, rel, row: i };
            }
            worst.rel = worst.rel.max(rel);
        }
    }
    worst
}

fn check_set(set: &str, objective: &str, keys: &[(&str, bool)]) {
    let model = Model::load(vectors_dir().join(format!("{set}.json"))).expect("model loads");
    assert_eq!(model.objective().name(), objective);
    let cases = read_cases(set);
    assert_eq!(cases.rows.len(), 200);
    assert_eq!(model.feature_names().collect::<Vec<_>>(), cases.features);
    for &(key, margin) in keys {
        let worst = compare(&model, &cases, key, margin);
        println!(
            "{set} {key}: max abs diff {:.3e} (row {}), max rel diff {:.3e}",
            worst.abs, worst.row, worst.rel
        );
        let probabilities = !margin && model.objective() != Objective::SquaredError;
        if probabilities {
            assert!(worst.abs <= PROBA_TOL, "{set} {key}: {worst:?}");
        } else {
            assert!(worst.rel <= MARGIN_REL_TOL, "{set} {key}: {worst:?}");
        }
    }
}

#[test]
fn xgboost_binary_logistic_matches_python() {
    check_set(
        "a_xgb_binary",
        "binary:logistic",
        &[("predict", false), ("output_margin", true)],
    );
}

#[test]
fn xgboost_with_missing_values_matches_python() {
    check_set(
        "b_xgb_missing",
        "binary:logistic",
        &[("predict", false), ("output_margin", true)],
    );
}

#[test]
fn xgboost_multiclass_softprob_matches_python() {
    check_set(
        "c_xgb_multiclass",
        "multi:softprob",
        &[("predict", false), ("output_margin", true)],
    );
}

#[test]
fn xgboost_regression_on_standardised_features_matches_python() {
    check_set(
        "d_xgb_regression",
        "reg:squarederror",
        &[("predict", false), ("output_margin", true)],
    );
}

#[test]
fn converted_random_forest_matches_sklearn_predict_proba() {
    check_set("e_rf_forest", "gearbox:forest_proba", &[("predict_proba", false)]);
}

#[test]
fn converted_decision_tree_matches_sklearn_predict_proba() {
    check_set("f_dt_binary", "gearbox:forest_proba", &[("predict_proba", false)]);
}

#[test]
fn xgboost_vector_leaf_trees_match_python() {
    check_set(
        "g_xgb_vector_leaf",
        "multi:softprob",
        &[("predict", false), ("output_margin", true)],
    );
}

#[test]
fn mlp_classifier_matches_sklearn_predict_proba_and_log_odds() {
    check_set(
        "h_mlp_binary",
        "binary:logistic",
        &[("predict", false), ("output_margin", true)],
    );
    let model = Model::load(vectors_dir().join("h_mlp_binary.json")).unwrap();
    assert!(model.ensemble().is_none());
    let mlp = model.mlp().expect("a dense network");
    assert_eq!(mlp.layer_sizes(), [7, 16, 8, 1]);
    assert_eq!(model.class_labels(), ["tcp", "quic"]);
}

#[test]
fn compact_evaluator_equals_reference_walk_on_every_vector() {
    for set in [
        "a_xgb_binary",
        "b_xgb_missing",
        "c_xgb_multiclass",
        "d_xgb_regression",
        "e_rf_forest",
        "f_dt_binary",
        "g_xgb_vector_leaf",
    ] {
        let path = vectors_dir().join(format!("{set}.json"));
        let parsed = gearbox_policy::ParsedModel::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let model = Model::load(&path).unwrap();
        let cases = read_cases(set);
        let mut out = vec![0f32; model.num_outputs()];
        for row in &cases.rows {
            let features = case_row(&model, &cases, row);
            model.predict(&features, &mut out).unwrap();
            assert_eq!(out, parsed.predict_naive(features.values()), "{set}");
        }
    }
}

#[test]
fn sidecars_record_labels_and_training_digest() {
    let model = Model::load(vectors_dir().join("a_xgb_binary.json")).unwrap();
    assert_eq!(model.class_labels(), ["tcp", "quic"]);
    assert_eq!(model.meta().training_data.sha256.len(), 64);
    assert_eq!(model.meta().training_data.rows, Some(600));
    let forest = Model::load(vectors_dir().join("e_rf_forest.json")).unwrap();
    assert_eq!(forest.num_outputs(), 3);
    assert_eq!(forest.class_labels(), ["cubic", "bbr", "copa"]);
}

/// Checks that `model` picks JAX's greedy class on every row of vector set `set` whose two
/// largest logits are not within float32 rounding of each other; returns (rows compared,
/// near-ties skipped).
fn greedy_agrees_with_jax(model: &Model, set: &str) -> (usize, usize) {
    let cases = read_cases(set);
    let classes = cases.outputs["class"].as_array().expect("class");
    let logits = expected(&cases, "output_margin");
    let (mut agreed, mut ties) = (0, 0);
    for ((row, want), z) in cases.rows.iter().zip(classes).zip(&logits) {
        let mut sorted = z.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] < 1e-4 {
            ties += 1;
            continue;
        }
        let features = case_row(model, &cases, row);
        let want = want.as_u64().unwrap() as usize;
        assert_eq!(model.predict_class(&features).unwrap(), want, "{set}: row {row:?}");
        agreed += 1;
    }
    (agreed, ties)
}

#[test]
fn floo_actor_matches_jax_softmax_and_logits() {
    // Floo's actor shape (§3.3, Appendix D): 16 -> 200 Leaky ReLU -> softmax over 4
    // controllers, random weights, expected outputs from JAX's own float32 forward pass.
    check_set(
        "i_floo_actor",
        "multi:softprob",
        &[("predict", false), ("output_margin", true)],
    );
    let model = Model::load(vectors_dir().join("i_floo_actor.json")).unwrap();
    let mlp = model.mlp().expect("a dense network");
    assert_eq!(mlp.layer_sizes(), [16, 200, 4]);
    assert_eq!(
        mlp.activation(),
        gearbox_policy::Activation::LeakyRelu { negative_slope: 0.01 }
    );
    assert_eq!(model.class_labels(), ["cubic", "bbr", "copa", "westwood"]);
    assert_eq!(model.num_outputs(), 4);

    // The greedy controller is JAX's argmax, except where two logits are within
    // float32 rounding of each other.
    let (agreed, ties) = greedy_agrees_with_jax(&model, "i_floo_actor");
    println!("i_floo_actor: greedy class agrees with JAX on {agreed} rows ({ties} near-ties skipped)");
    assert!(agreed >= 190, "{agreed} rows compared");
}

#[test]
fn sailfish_conv_actor_written_as_dense_layers_matches_jax() {
    // SAILfish §5.1.2's actor: a 1-D convolution over each path's 8 RTTs (8 filters of 4
    // taps, shared by the two paths), merged with the other 20 inputs into the hidden
    // layer (32 units here), a softmax over 2 paths; random weights. The file holds it as
    // three dense layers (`gearbox.sailfish.a2c.dense_layers`); the expected outputs are
    // JAX's float32 forward pass of the flax convolution itself.
    check_set(
        "j_sailfish_conv_actor",
        "multi:softprob",
        &[("predict", false), ("output_margin", true)],
    );
    let model = Model::load(vectors_dir().join("j_sailfish_conv_actor.json")).unwrap();
    let mlp = model.mlp().expect("a dense network");
    // 2 paths x 5 positions x 8 filters, and a +x / -x unit pair for each other input.
    assert_eq!(mlp.layer_sizes(), [36, 2 * 5 * 8 + 2 * 20, 32, 2]);
    assert_eq!(model.class_labels(), ["path0", "path1"]);
    let (agreed, _) = greedy_agrees_with_jax(&model, "j_sailfish_conv_actor");
    assert!(agreed >= 190, "{agreed} rows compared");
    let cases = read_cases("j_sailfish_conv_actor");
    let classes = cases.outputs["class"].as_array().expect("class");
    // Both paths are chosen on some rows, so a swapped output cannot pass.
    let ones = classes.iter().filter(|c| c.as_u64() == Some(1)).count();
    assert!(ones > 20 && ones < 180, "{ones} rows choose path1");
}
