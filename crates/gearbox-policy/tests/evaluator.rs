//! The compact evaluator gives exactly the reference walk's answers on random
//! models of every shape, and never panics on mangled model files.

use gearbox_policy::synthetic::{synthetic_model_json, synthetic_rows, SplitMix64, SyntheticSpec};
use gearbox_policy::{ParsedModel, TreeEnsemble};
use serde_json::{json, Value};

/// A tree of random shape in XGBoost's JSON form: each node splits with a
/// probability that falls with depth; `leaf_size` values per leaf.
fn random_tree(rng: &mut SplitMix64, features: usize, max_depth: u32, leaf_size: usize) -> Value {
    let (mut left, mut right, mut feature, mut cond, mut dl) = (vec![], vec![], vec![], vec![], vec![]);
    let mut weights: Vec<f32> = vec![];
    // (node id, depth); ids are handed out in the order nodes are created.
    let mut queue = vec![(0usize, 0u32)];
    let mut next = 1usize;
    let mut k = 0;
    left.push(-1i64);
    right.push(-1i64);
    feature.push(0usize);
    cond.push(0f32);
    dl.push(0u8);
    while k < queue.len() {
        let (i, d) = queue[k];
        k += 1;
        let split = d < max_depth && rng.unit() < 0.9 - 0.1 * d as f64;
        if split {
            let (l, r) = (next, next + 1);
            next += 2;
            left[i] = l as i64;
            right[i] = r as i64;
            feature[i] = rng.below(features);
            // Thresholds on a coarse grid so rows often land exactly on them.
            cond[i] = (rng.below(21) as f32 - 10.0) / 10.0;
            dl[i] = u8::from(rng.unit() < 0.5);
            for _ in 0..2 {
                left.push(-1);
                right.push(-1);
                feature.push(0);
                cond.push(0.0);
                dl.push(0);
            }
            queue.push((l, d + 1));
            queue.push((r, d + 1));
        } else {
            cond[i] = (rng.unit() as f32 - 0.5) * 0.2;
        }
    }
    let n = left.len();
    for &l in &left {
        for _ in 0..leaf_size {
            weights.push(if l < 0 { rng.unit() as f32 } else { 0.0 });
        }
    }
    json!({
        "tree_param": {"num_nodes": n.to_string(), "size_leaf_vector": leaf_size.to_string()},
        "left_children": left, "right_children": right, "split_indices": feature,
        "split_conditions": cond, "default_left": dl, "split_type": vec![0; n], "base_weights": weights,
    })
}

fn random_model(seed: u64, objective: &str, classes: usize, trees: usize, features: usize, max_depth: u32) -> Value {
    let mut rng = SplitMix64::new(seed);
    let vector_leaves = objective == "gearbox:forest_proba";
    let leaf_size = if vector_leaves { classes } else { 1 };
    let outputs = if objective == "multi:softprob" || vector_leaves {
        classes
    } else {
        1
    };
    let tree_list: Vec<Value> = (0..trees)
        .map(|_| random_tree(&mut rng, features, max_depth, leaf_size))
        .collect();
    let info: Vec<usize> = (0..trees)
        .map(|t| if vector_leaves { 0 } else { t % outputs })
        .collect();
    let base = if objective == "binary:logistic" {
        "[3E-1]".to_string()
    } else {
        "[2.5E-1]".to_string()
    };
    json!({"learner": {
        "learner_model_param": {"base_score": base, "num_class": (if outputs > 1 { classes } else { 0 }).to_string(),
                                "num_feature": features.to_string(), "num_target": "1"},
        "objective": {"name": objective},
        "gradient_booster": {"name": "gbtree", "model": {"trees": tree_list, "tree_info": info}},
    }})
}

/// Rows on the threshold grid (and between), with some NaN and infinities.
fn rows(seed: u64, n: usize, features: usize) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n * features)
        .map(|_| match rng.below(20) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3..=9 => (rng.below(21) as f32 - 10.0) / 10.0,
            _ => (rng.unit() * 2.4 - 1.2) as f32,
        })
        .collect()
}

fn assert_same_as_reference(doc: &Value, seed: u64, n_rows: usize) {
    let bytes = serde_json::to_vec(doc).unwrap();
    let parsed = ParsedModel::from_slice(&bytes).unwrap();
    let ensemble = TreeEnsemble::from_parsed(&parsed);
    let f = parsed.num_features;
    let mut out = vec![0f32; ensemble.num_outputs()];
    let mut margin = vec![0f32; ensemble.num_outputs()];
    for row in rows(seed, n_rows, f).chunks_exact(f) {
        ensemble.predict(row, &mut out).unwrap();
        ensemble.predict_margin(row, &mut margin).unwrap();
        let want = parsed.predict_naive(row);
        let want_margin = parsed.predict_margin_naive(row);
        // Bit for bit (NaN never occurs: leaves are finite).
        assert_eq!(out, want, "row {row:?}");
        assert_eq!(margin, want_margin, "row {row:?}");
    }
}

#[test]
fn random_binary_models_match_the_reference_walk() {
    for seed in 0..20 {
        let trees = 1 + (seed as usize * 7) % 40;
        assert_same_as_reference(
            &random_model(seed, "binary:logistic", 0, trees, 5, 1 + seed as u32 % 9),
            seed,
            300,
        );
    }
}

#[test]
fn random_regression_and_multiclass_models_match_the_reference_walk() {
    for seed in 0..10 {
        assert_same_as_reference(&random_model(seed, "reg:squarederror", 0, 33, 4, 6), seed, 200);
        assert_same_as_reference(
            &random_model(seed, "multi:softprob", 2 + seed as usize % 4, 30, 6, 5),
            seed,
            200,
        );
        assert_same_as_reference(
            &random_model(seed, "gearbox:forest_proba", 2 + seed as usize % 3, 17, 3, 7),
            seed,
            200,
        );
    }
}

#[test]
fn deep_and_single_leaf_trees_match_the_reference_walk() {
    // Depth 40 (lock-step groups mixing very deep and very shallow trees).
    assert_same_as_reference(&random_model(99, "binary:logistic", 0, 50, 3, 40), 1, 300);
    // Trees that are a single leaf.
    assert_same_as_reference(&random_model(5, "binary:logistic", 0, 20, 2, 0), 2, 50);
}

#[test]
fn wide_rows_use_the_heap_path_and_match() {
    // 17 and 200 features: past the small and the stack-sized expanded rows.
    assert_same_as_reference(&random_model(3, "binary:logistic", 0, 40, 17, 6), 3, 200);
    assert_same_as_reference(&random_model(4, "binary:logistic", 0, 40, 200, 6), 4, 200);
}

#[test]
fn synthetic_benchmark_model_matches_and_batches_agree() {
    let spec = SyntheticSpec {
        trees: 37,
        depth: 5,
        num_features: 9,
        seed: 1,
    };
    let parsed = ParsedModel::from_slice(synthetic_model_json(&spec).as_bytes()).unwrap();
    let ensemble = TreeEnsemble::from_parsed(&parsed);
    assert_eq!(
        (ensemble.num_trees(), ensemble.max_depth(), ensemble.num_nodes()),
        (37, 5, 37 * 63)
    );
    let rows = synthetic_rows(100, 9, 0.1, 2);
    let mut batch = vec![0f32; 100];
    ensemble.predict_batch(&rows, &mut batch).unwrap();
    for (row, got) in rows.chunks_exact(9).zip(&batch) {
        assert_eq!(vec![*got], parsed.predict_naive(row));
    }
}

/// Replace one number somewhere in the trees with a nearby or absurd value,
/// or cut an array short.
fn mangle(doc: &mut Value, rng: &mut SplitMix64) {
    let trees = doc["learner"]["gradient_booster"]["model"]["trees"]
        .as_array_mut()
        .unwrap();
    let t = rng.below(trees.len());
    let fields = [
        "left_children",
        "right_children",
        "split_indices",
        "split_conditions",
        "default_left",
        "base_weights",
    ];
    let field = fields[rng.below(fields.len())];
    let Some(array) = trees[t][field].as_array_mut() else {
        return;
    };
    if array.is_empty() {
        return;
    }
    if rng.below(10) == 0 {
        array.truncate(rng.below(array.len()));
        return;
    }
    let i = rng.below(array.len());
    array[i] = match rng.below(6) {
        0 => json!(-1),
        1 => json!(array.len()),
        2 => json!(rng.below(array.len() + 3) as i64 - 2),
        3 => json!(1e39),
        4 => json!(-3.5),
        _ => json!(u32::MAX),
    };
}

#[test]
fn mangled_models_are_refused_or_evaluated_without_panicking() {
    let mut rng = SplitMix64::new(42);
    let (mut refused, mut accepted) = (0, 0);
    for round in 0..400 {
        let objective = ["binary:logistic", "multi:softprob", "gearbox:forest_proba"][round % 3];
        let mut doc = random_model(round as u64, objective, 3, 6, 4, 4);
        for _ in 0..1 + rng.below(3) {
            mangle(&mut doc, &mut rng);
        }
        match ParsedModel::from_slice(&serde_json::to_vec(&doc).unwrap()) {
            Err(_) => refused += 1,
            Ok(parsed) => {
                accepted += 1;
                let ensemble = TreeEnsemble::from_parsed(&parsed);
                let mut out = vec![0f32; ensemble.num_outputs()];
                for row in rows(round as u64, 20, 4).chunks_exact(4) {
                    ensemble.predict(row, &mut out).unwrap();
                    let want = parsed.predict_naive(row);
                    assert!(out.iter().zip(&want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())));
                }
            }
        }
    }
    assert!(refused > 50 && accepted > 50, "refused {refused}, accepted {accepted}");
}
