//! Loading models and sidecars: every problem is a typed error naming the file
//! and the field, never a panic; a gear without a model falls back once, loudly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gearbox_policy::{
    sha256_file, EvalError, FormatError, Model, ModelError, ModelMeta, ModelOrFallback, Objective, ParsedModel,
    TreeEnsemble,
};
use serde_json::{json, Value};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gearbox-policy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec(v).unwrap()).unwrap();
}

/// Copy a shipped model and its sidecar into `dir`, editing each on the way.
fn copy_set(dir: &Path, set: &str, edit_model: impl FnOnce(&mut Value), edit_meta: impl FnOnce(&mut Value)) -> PathBuf {
    let mut model = read_json(&vectors_dir().join(format!("{set}.json")));
    let mut meta = read_json(&vectors_dir().join(format!("{set}.meta.json")));
    edit_model(&mut model);
    edit_meta(&mut meta);
    let path = dir.join("m.json");
    write_json(&path, &model);
    write_json(&dir.join("m.meta.json"), &meta);
    path
}

/// A named edit of a JSON document and the text the error must contain.
type Case = (&'static str, Box<dyn Fn(&mut Value)>, &'static str);

fn tree0(model: &mut Value) -> &mut Value {
    &mut model["learner"]["gradient_booster"]["model"]["trees"][0]
}

fn format_error(result: Result<Model, ModelError>) -> (PathBuf, FormatError) {
    match result {
        Err(ModelError::Format { path, source }) => (path, source),
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn a_missing_model_file_is_a_read_error_naming_the_file() {
    let dir = scratch("missing-model");
    let err = Model::load(dir.join("nope.json")).unwrap_err();
    assert!(matches!(err, ModelError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.json"), "{err}");
}

#[test]
fn a_missing_sidecar_is_a_read_error_naming_the_sidecar() {
    let dir = scratch("missing-sidecar");
    std::fs::copy(vectors_dir().join("a_xgb_binary.json"), dir.join("m.json")).unwrap();
    let err = Model::load(dir.join("m.json")).unwrap_err();
    assert!(matches!(err, ModelError::Read { .. }), "{err:?}");
    assert_eq!(err.path(), dir.join("m.meta.json"));
}

#[test]
fn a_truncated_model_names_file_line_and_column() {
    let dir = scratch("truncated");
    let bytes = std::fs::read(vectors_dir().join("a_xgb_binary.json")).unwrap();
    std::fs::write(dir.join("m.json"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::copy(vectors_dir().join("a_xgb_binary.meta.json"), dir.join("m.meta.json")).unwrap();
    let err = Model::load(dir.join("m.json")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("m.json") && text.contains("line 1 column"), "{text}");
}

#[test]
fn binary_ubjson_models_are_refused_with_advice() {
    let err = ParsedModel::from_slice(b"\x7b\x4c\x00").unwrap_err();
    assert!(matches!(err, FormatError::Json(_)), "{err:?}");
    let err = ParsedModel::from_slice(&[0x5b, 0x24, 0x55]).unwrap_err();
    assert!(err.to_string().contains("UBJSON"), "{err}");
}

#[test]
fn categorical_splits_are_refused_naming_tree_and_node() {
    let dir = scratch("categorical");
    let path = copy_set(&dir, "a_xgb_binary", |m| tree0(m)["split_type"][0] = json!(1), |_| {});
    let (_, err) = format_error(Model::load(path));
    assert!(matches!(err, FormatError::Unsupported(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("categorical split at learner.gradient_booster.model.trees[0] node 0"),
        "{err}"
    );
}

#[test]
fn categorical_feature_types_are_refused() {
    let dir = scratch("categorical-type");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |m| m["learner"]["feature_types"] = json!(["q", "c", "q", "q", "q", "q", "q"]),
        |_| {},
    );
    let (_, err) = format_error(Model::load(path));
    assert!(err.to_string().contains("categorical feature \"rtt_avg_ms\""), "{err}");
}

#[test]
fn unknown_objectives_and_boosters_are_unsupported() {
    let dir = scratch("objective");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |m| m["learner"]["objective"]["name"] = json!("rank:pairwise"),
        |_| {},
    );
    let (_, err) = format_error(Model::load(path));
    assert!(err.to_string().contains("objective \"rank:pairwise\""), "{err}");

    let dir = scratch("booster");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |m| m["learner"]["gradient_booster"]["name"] = json!("gblinear"),
        |_| {},
    );
    let (_, err) = format_error(Model::load(path));
    assert!(err.to_string().contains("booster \"gblinear\""), "{err}");
}

#[test]
fn broken_tree_structure_is_invalid_naming_the_array() {
    let cases: [Case; 5] = [
        (
            "child-range",
            Box::new(|m| tree0(m)["left_children"][0] = json!(100_000)),
            "left_children[0]",
        ),
        (
            "cycle",
            Box::new(|m| tree0(m)["right_children"][0] = json!(1)),
            "reached twice",
        ),
        (
            "feature",
            Box::new(|m| tree0(m)["split_indices"][0] = json!(7)),
            "split_indices[0]: feature 7 of 7",
        ),
        (
            "length",
            Box::new(|m| tree0(m)["default_left"] = json!([0, 1])),
            "default_left: 2 entries",
        ),
        (
            "neg-inf",
            Box::new(|m| tree0(m)["split_conditions"][0] = json!(-1e39)),
            "threshold is -inf",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = scratch(name);
        let path = copy_set(&dir, "a_xgb_binary", edit, |_| {});
        let (file, err) = format_error(Model::load(path));
        assert!(file.ends_with("m.json"));
        assert!(err.to_string().contains(want), "{name}: {err}");
        assert!(err.to_string().contains("trees[0]"), "{name}: {err}");
    }
}

#[test]
fn sidecar_must_agree_with_the_model() {
    let dir = scratch("mismatch-objective");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |_| {},
        |m| m["objective"] = json!("reg:squarederror"),
    );
    let err = Model::load(path).unwrap_err();
    assert!(matches!(err, ModelError::Mismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("objective"), "{err}");

    let dir = scratch("mismatch-names");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |_| {},
        |m| m["features"][1]["name"] = json!("rtt_ms"),
    );
    let err = Model::load(path).unwrap_err();
    assert!(
        err.to_string()
            .contains("feature 1: sidecar says \"rtt_ms\", model file says \"rtt_avg_ms\""),
        "{err}"
    );

    let dir = scratch("mismatch-labels");
    let path = copy_set(
        &dir,
        "a_xgb_binary",
        |_| {},
        |m| m["class_labels"] = json!(["tcp", "quic", "race"]),
    );
    let err = Model::load(path).unwrap_err();
    assert!(
        err.to_string().contains("3 class labels for a model with 2 classes"),
        "{err}"
    );
}

#[test]
fn sidecar_fields_are_checked() {
    let cases: [Case; 5] = [
        (
            "unknown",
            Box::new(|m| m["normalization"] = json!({})),
            "unknown field `normalization`",
        ),
        (
            "std",
            Box::new(|m| m["features"][0] = json!({"name": "retran_rate", "mean": 1.0, "std": 0.0})),
            "std",
        ),
        (
            "half",
            Box::new(|m| m["features"][0] = json!({"name": "retran_rate", "mean": 1.0})),
            "both mean and std",
        ),
        (
            "digest",
            Box::new(|m| m["training_data"]["sha256"] = json!("abc")),
            "training_data.sha256",
        ),
        (
            "version",
            Box::new(|m| m["format_version"] = json!(2)),
            "format_version 2",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = scratch(&format!("sidecar-{name}"));
        let path = copy_set(&dir, "a_xgb_binary", |_| {}, edit);
        let (file, err) = format_error(Model::load(path));
        assert!(file.ends_with("m.meta.json"), "{name}: {file:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
}

#[test]
fn base_score_is_read_in_every_spelling_xgboost_used() {
    let base = read_json(&vectors_dir().join("a_xgb_binary.json"));
    let row = [0.01f32, 80.0, 5.0, 150.0, 160.0, 1.1, 3.0];
    let mut want = None;
    for spelling in [json!("[5E-1]"), json!("5E-1"), json!(0.5), json!("[0.5]")] {
        let mut doc = base.clone();
        doc["learner"]["learner_model_param"]["base_score"] = spelling.clone();
        let ensemble = TreeEnsemble::from_json_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
        let mut margin = [0f32];
        ensemble.predict_margin(&row, &mut margin).unwrap();
        assert_eq!(*want.get_or_insert(margin[0]), margin[0], "{spelling}");
    }
    // For binary:logistic the base score is a probability: 0.5 is a margin of 0.
    let mut doc = base.clone();
    doc["learner"]["learner_model_param"]["base_score"] = json!("[5E-1]");
    let parsed = ParsedModel::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
    assert_eq!(parsed.objective, Objective::BinaryLogistic);
    assert_eq!(parsed.base_margin, [0.0]);
}

#[test]
fn old_boolean_default_left_arrays_are_read() {
    let mut doc = read_json(&vectors_dir().join("b_xgb_missing.json"));
    let ints = ParsedModel::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
    for tree in doc["learner"]["gradient_booster"]["model"]["trees"]
        .as_array_mut()
        .unwrap()
    {
        let bools: Vec<bool> = tree["default_left"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64() == Some(1))
            .collect();
        tree["default_left"] = json!(bools);
    }
    let bools = ParsedModel::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
    let row = [f32::NAN; 7];
    assert_eq!(ints.predict_naive(&row), bools.predict_naive(&row));
}

#[test]
fn rows_of_the_wrong_shape_are_refused() {
    let model = Model::load(vectors_dir().join("a_xgb_binary.json")).unwrap();
    let other = Model::load(vectors_dir().join("d_xgb_regression.json")).unwrap();
    let mut out = [0f32];
    let foreign = other.empty_row();
    assert_eq!(model.predict(&foreign, &mut out), Err(EvalError::ForeignRow));
    let row = model.empty_row();
    assert_eq!(
        model.predict(&row, &mut [0f32; 2]),
        Err(EvalError::OutputLength { expected: 1, got: 2 })
    );
    assert_eq!(
        model.ensemble().expect("a tree model").predict(&[0.0; 3], &mut out),
        Err(EvalError::RowLength { expected: 7, got: 3 })
    );
    assert!(matches!(
        model.row_from_values(&[1.0]),
        Err(EvalError::RowLength { expected: 7, got: 1 })
    ));
}

#[test]
fn rows_are_built_by_name_with_missing_names_as_nan_and_unknown_names_ignored() {
    let model = Model::load(vectors_dir().join("d_xgb_regression.json")).unwrap();
    let row = model.row([("ttfb_ms", 200.0), ("not_a_feature", 1.0)]);
    let i = model.feature_index("ttfb_ms").unwrap();
    let spec = &model.meta().features[i];
    let (mean, std) = (spec.mean.unwrap(), spec.std.unwrap());
    for (j, v) in row.values().iter().enumerate() {
        if j == i {
            assert_eq!(*v, ((200.0 - mean) / std) as f32, "standardised as the sidecar says");
        } else {
            assert!(v.is_nan(), "feature {j} was not given");
        }
    }
    let mut by_set = model.empty_row();
    assert!(model.set(&mut by_set, "ttfb_ms", 200.0));
    assert!(!model.set(&mut by_set, "nope", 1.0));
    let bits = |r: &gearbox_policy::FeatureRow| r.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&by_set), bits(&row));
    let map: std::collections::HashMap<String, f64> = [("ttfb_ms".to_string(), 200.0)].into();
    assert_eq!(bits(&model.row(&map)), bits(&row));
}

/// Collects everything tracing writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[test]
fn a_gear_without_its_model_warns_once_and_uses_its_static_default() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let dir = scratch("fallback");
    tracing::subscriber::with_default(subscriber, || {
        let gear = ModelOrFallback::load("transport", dir.join("wisetrans.json"));
        assert!(gear.model().is_none());
        assert!(matches!(gear.error(), Some(ModelError::Read { .. })));
        let row = Model::load(vectors_dir().join("a_xgb_binary.json"))
            .unwrap()
            .empty_row();
        for _ in 0..5 {
            assert!(gear.predict(&row, &mut [0f32]).is_none());
        }
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("model unavailable; using the static default").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("WARN") && text.contains("transport") && text.contains("wisetrans.json"),
        "{text}"
    );
}

#[test]
fn a_loaded_gear_predicts_and_warns_once_on_a_bad_row() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let gear = ModelOrFallback::load("transport", vectors_dir().join("a_xgb_binary.json"));
        let model = gear.model().expect("shipped model loads");
        let row = model.row([("retran_rate", 0.08), ("rtt_avg_ms", 150.0)]);
        let mut p = [0f32];
        let p = gear.predict(&row, &mut p).expect("prediction").to_vec();
        assert!(p[0] > 0.0 && p[0] < 1.0);
        let foreign = Model::load(vectors_dir().join("d_xgb_regression.json"))
            .unwrap()
            .empty_row();
        for _ in 0..3 {
            assert!(gear.predict(&foreign, &mut [0f32]).is_none());
        }
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("model evaluation refused").count(), 1, "{text}");
}

#[test]
fn training_data_digest_is_sha256_of_the_file() {
    let dir = scratch("digest");
    let data = dir.join("train.csv");
    std::fs::write(&data, "abc").unwrap();
    assert_eq!(
        sha256_file(&data).unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let mut meta = ModelMeta::load(vectors_dir().join("a_xgb_binary.meta.json")).unwrap();
    meta.training_data.sha256 = sha256_file(&data).unwrap();
    meta.verify_training_data(&data).unwrap();
    std::fs::write(&data, "abd").unwrap();
    let err = meta.verify_training_data(&data).unwrap_err();
    assert!(matches!(err, ModelError::DigestMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("train.csv"), "{err}");
}

#[test]
fn sidecar_path_replaces_the_json_extension() {
    assert_eq!(
        ModelMeta::path_for("/m/wisetrans.json"),
        Path::new("/m/wisetrans.meta.json")
    );
    assert_eq!(ModelMeta::path_for("model"), Path::new("model.meta.json"));
}

/// A named edit of the shipped dense network and the text its error must contain.
type MlpCase = (&'static str, fn(&mut Value), &'static str);

#[test]
fn malformed_mlp_files_are_refused_naming_file_and_field() {
    let cases: [MlpCase; 11] = [
        (
            "layer-chain",
            |m| m["layers"][1]["weights"].as_array_mut().unwrap().truncate(15),
            "layers[1].weights: 15 rows, but layers[0] has 16 inputs",
        ),
        (
            "row-length",
            |m| m["layers"][0]["weights"][2].as_array_mut().unwrap().push(json!(0.5)),
            "layers[0].weights[2]: 17 values, but layers[0].bias has 16 units",
        ),
        (
            "impute-length",
            |m| {
                m["impute"].as_array_mut().unwrap().truncate(6);
                m.as_object_mut().unwrap().remove("feature_names");
            },
            "layers[0].weights: 7 rows, but impute gives 6 inputs",
        ),
        (
            "two-outputs",
            |m| {
                for row in m["layers"][2]["weights"].as_array_mut().unwrap() {
                    row.as_array_mut().unwrap().push(json!(1.0));
                }
                m["layers"][2]["bias"].as_array_mut().unwrap().push(json!(0.0));
            },
            "layers[2].bias: the logistic output is one unit, found 2",
        ),
        ("no-layers", |m| m["layers"] = json!([]), "layers: no layers"),
        (
            "empty-bias",
            |m| {
                m["layers"][0]["bias"] = json!([]);
                m["layers"][0]["weights"] = json!(vec![json!([]); 7]);
            },
            "layers[0].bias: no units",
        ),
        (
            "activation",
            |m| m["activation"] = json!("softplus"),
            "activation \"softplus\"",
        ),
        ("output", |m| m["output"] = json!("softplus"), "output \"softplus\""),
        ("version", |m| m["format_version"] = json!(2), "format_version 2"),
        (
            "format",
            |m| m["format"] = json!("gearbox-cnn"),
            "format \"gearbox-cnn\"",
        ),
        (
            "names",
            |m| m["feature_names"].as_array_mut().unwrap().pop().map(drop).unwrap(),
            "feature_names: 6 names for 7 inputs",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = scratch(&format!("mlp-{name}"));
        let path = copy_set(&dir, "h_mlp_binary", edit, |_| {});
        let (file, err) = format_error(Model::load(path));
        assert!(file.ends_with("m.json"), "{name}: {file:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
}

#[test]
fn non_finite_or_misspelt_mlp_fields_are_refused_with_line_and_column() {
    let text = std::fs::read_to_string(vectors_dir().join("h_mlp_binary.json")).unwrap();
    let meta = vectors_dir().join("h_mlp_binary.meta.json");
    // JSON has no NaN or infinity: an overflowing number is where one could hide.
    let overflow = text.replacen("\"bias\":[", "\"bias\":[1e999,", 1);
    let misspelt = text.replacen("\"impute\"", "\"imputed\"", 1);
    for (name, doc) in [("overflow", overflow), ("misspelt", misspelt)] {
        let dir = scratch(&format!("mlp-{name}"));
        std::fs::write(dir.join("m.json"), doc).unwrap();
        std::fs::copy(&meta, dir.join("m.meta.json")).unwrap();
        let (_, err) = format_error(Model::load(dir.join("m.json")));
        assert!(matches!(err, FormatError::Json(_)), "{name}: {err:?}");
        assert!(err.to_string().contains("line 1 column"), "{name}: {err}");
    }
}

#[test]
fn mlp_sidecar_must_agree_with_the_network() {
    let cases: [(&str, Case); 3] = [
        (
            "mlp-objective",
            (
                "objective",
                Box::new(|m| m["objective"] = json!("gearbox:mlp")),
                "objective",
            ),
        ),
        (
            "mlp-count",
            (
                "count",
                Box::new(|m| {
                    m["features"].as_array_mut().unwrap().pop();
                }),
                "sidecar lists 6 features, model takes 7",
            ),
        ),
        (
            "mlp-names",
            (
                "names",
                Box::new(|m| m["features"][0]["name"] = json!("loss")),
                "feature 0: sidecar says \"loss\"",
            ),
        ),
    ];
    for (dir_name, (name, edit, want)) in cases {
        let dir = scratch(dir_name);
        let path = copy_set(&dir, "h_mlp_binary", |_| {}, edit);
        let err = Model::load(path).unwrap_err();
        assert!(matches!(err, ModelError::Mismatch { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
}

#[test]
fn mangled_mlp_files_are_refused_or_evaluated_never_a_panic() {
    let original = read_json(&vectors_dir().join("h_mlp_binary.json"));
    let meta = ModelMeta::load(vectors_dir().join("h_mlp_binary.meta.json")).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut refused = 0;
    for _ in 0..300 {
        let mut doc = original.clone();
        let layer = next(3);
        let target = match next(4) {
            0 => &mut doc["impute"],
            1 => &mut doc["layers"][layer]["bias"],
            2 => &mut doc["layers"][layer]["weights"],
            _ => {
                let rows = doc["layers"][layer]["weights"].as_array().unwrap().len();
                &mut doc["layers"][layer]["weights"][next(rows)]
            }
        };
        let items = target.as_array_mut().unwrap();
        match next(4) {
            0 => {
                items.pop();
            }
            1 => items.push(json!(1.0)),
            2 => items.clear(),
            _ => {
                let i = next(items.len().max(1));
                if let Some(v) = items.get_mut(i) {
                    *v = json!("x");
                }
            }
        }
        match gearbox_policy::ParsedMlp::from_slice(&serde_json::to_vec(&doc).unwrap()) {
            Err(_) => refused += 1,
            Ok(parsed) => {
                // Still consistent (e.g. a layer's rows and the next layer grew together).
                let Ok(model) = Model::from_mlp_parts("m.json", "m.meta.json", &parsed, meta.clone()) else {
                    refused += 1;
                    continue;
                };
                let mut out = [0f32];
                model.predict(&model.empty_row(), &mut out).unwrap();
                assert!(out[0].is_finite());
            }
        }
    }
    assert!(refused > 250, "{refused} of 300 mangled files refused");
}

#[test]
fn a_tree_model_with_a_format_field_is_refused_not_guessed() {
    let dir = scratch("format-field");
    let path = copy_set(&dir, "a_xgb_binary", |m| m["format"] = json!("xgboost"), |_| {});
    let (_, err) = format_error(Model::load(path));
    assert!(matches!(err, FormatError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("format \"xgboost\""), "{err}");
}

#[test]
fn malformed_softmax_networks_are_refused_naming_the_field() {
    let cases: [MlpCase; 6] = [
        (
            "num-class-width",
            |m| m["num_class"] = json!(5),
            "layers[1].bias: the softmax output has num_class = 5 units, found 4",
        ),
        (
            "num-class-missing",
            |m| {
                m.as_object_mut().unwrap().remove("num_class");
            },
            "num_class: missing",
        ),
        (
            "num-class-one",
            |m| m["num_class"] = json!(1),
            "num_class: softmax needs at least 2 classes, got 1",
        ),
        (
            "slope-missing",
            |m| {
                m.as_object_mut().unwrap().remove("negative_slope");
            },
            "negative_slope: missing",
        ),
        (
            "slope-on-tanh",
            |m| m["activation"] = json!("tanh"),
            "negative_slope: given, but activation \"tanh\"",
        ),
        (
            "logistic-with-classes",
            |m| m["output"] = json!("logistic"),
            "num_class: 4 given, but the logistic output is one unit",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = scratch(&format!("softmax-{name}"));
        let path = copy_set(&dir, "i_floo_actor", edit, |_| {});
        let (file, err) = format_error(Model::load(path));
        assert!(file.ends_with("m.json"), "{name}: {file:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
    // A wrong-typed slope or class count is a JSON shape error with its position.
    for (name, edit) in [
        (
            "slope-text",
            (|m: &mut Value| m["negative_slope"] = json!("0.01")) as fn(&mut Value),
        ),
        ("num-class-negative", |m| m["num_class"] = json!(-4)),
    ] {
        let dir = scratch(&format!("softmax-{name}"));
        let (_, err) = format_error(Model::load(copy_set(&dir, "i_floo_actor", edit, |_| {})));
        assert!(matches!(err, FormatError::Json(_)), "{name}: {err:?}");
    }
}

#[test]
fn softmax_network_sidecar_must_agree_on_objective_and_classes() {
    let cases: [(&str, Case); 2] = [
        (
            "softmax-objective",
            (
                "objective",
                Box::new(|m| m["objective"] = json!("binary:logistic")),
                "objective: sidecar says \"binary:logistic\", model is \"multi:softprob\"",
            ),
        ),
        (
            "softmax-labels",
            (
                "labels",
                Box::new(|m| {
                    m["class_labels"].as_array_mut().unwrap().pop();
                }),
                "3 class labels for a model with 4 classes",
            ),
        ),
    ];
    for (dir_name, (name, edit, want)) in cases {
        let dir = scratch(dir_name);
        let path = copy_set(&dir, "i_floo_actor", |_| {}, edit);
        let err = Model::load(path).unwrap_err();
        assert!(matches!(err, ModelError::Mismatch { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(want), "{name}: {err}");
    }
}

#[test]
fn predict_class_is_the_most_likely_class_of_any_classifier_and_refused_for_regression() {
    // Trees, 3 classes: the argmax of the probabilities.
    let model = Model::load(vectors_dir().join("c_xgb_multiclass.json")).unwrap();
    let mut p = [0f32; 3];
    let mut seen = [false; 3];
    for i in 0..50 {
        let row = model
            .row_from_values(&vec![f64::from(i) * 0.7 - 5.0; model.meta().features.len()])
            .unwrap();
        model.predict(&row, &mut p).unwrap();
        let class = model.predict_class(&row).unwrap();
        assert!(p.iter().all(|&v| v <= p[class]), "{p:?} {class}");
        seen[class] = true;
    }
    assert!(seen.iter().filter(|&&s| s).count() >= 2, "{seen:?}");
    // Binary: 1 exactly when P(class 1) > 0.5.
    let binary = Model::load(vectors_dir().join("h_mlp_binary.json")).unwrap();
    let mut p = [0f32];
    for v in [0.0, 20.0, 200.0] {
        let row = binary.row([("rtt_avg_ms", v), ("retran_rate", v / 1000.0)]);
        binary.predict(&row, &mut p).unwrap();
        assert_eq!(binary.predict_class(&row).unwrap(), usize::from(p[0] > 0.5));
    }
    let regression = Model::load(vectors_dir().join("d_xgb_regression.json")).unwrap();
    assert_eq!(
        regression.predict_class(&regression.empty_row()),
        Err(EvalError::NotAClassifier {
            objective: "reg:squarederror"
        })
    );
    let floo = Model::load(vectors_dir().join("i_floo_actor.json")).unwrap();
    assert_eq!(floo.predict_class(&model.empty_row()), Err(EvalError::ForeignRow));
}
