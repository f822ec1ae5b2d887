//! Seeded synthetic models and rows, for benchmarks and tests.
//!
//! Generating a model in Rust keeps a 300-tree benchmark model (megabytes of
//! JSON) out of the repository. The trees are complete binary trees of the
//! given depth (the worst case for an evaluator: every leaf at full depth) with
//! random features, thresholds in [-1, 1), random NaN directions and small leaf
//! values, written in XGBoost's JSON shape so they go through the same parser as
//! real models.

use serde_json::{json, Value};

/// Shape of a synthetic model.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticSpec {
    /// Number of trees.
    pub trees: usize,
    /// Depth of every tree (edges from root to leaf).
    pub depth: u32,
    /// Number of input features.
    pub num_features: usize,
    /// Seed of the generator.
    pub seed: u64,
}

/// A small, fast, seeded generator (splitmix64); quality is ample for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// A `binary:logistic` model document in XGBoost's JSON format.
pub fn synthetic_model_json(spec: &SyntheticSpec) -> String {
    let mut rng = SplitMix64::new(spec.seed);
    let num_features = spec.num_features.max(1);
    let trees: Vec<Value> = (0..spec.trees)
        .map(|id| complete_tree(&mut rng, id, spec.depth, num_features))
        .collect();
    let doc = json!({
        "learner": {
            "attributes": {},
            "feature_names": [],
            "feature_types": [],
            "gradient_booster": {
                "name": "gbtree",
                "model": {
                    "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": spec.trees.to_string()},
                    "tree_info": vec![0; spec.trees],
                    "trees": trees,
                }
            },
            "learner_model_param": {
                "base_score": "[5E-1]",
                "num_class": "0",
                "num_feature": num_features.to_string(),
                "num_target": "1",
            },
            "objective": {"name": "binary:logistic"},
        },
        "version": [3, 2, 0],
    });
    doc.to_string()
}

/// Breadth-first numbering: node i has children 2i+1 and 2i+2.
fn complete_tree(rng: &mut SplitMix64, id: usize, depth: u32, num_features: usize) -> Value {
    let n = (1usize << (depth + 1)) - 1;
    let interior = (1usize << depth) - 1;
    let mut left = Vec::with_capacity(n);
    let mut right = Vec::with_capacity(n);
    let mut features = Vec::with_capacity(n);
    let mut conditions = Vec::with_capacity(n);
    let mut default_left = Vec::with_capacity(n);
    for i in 0..n {
        if i < interior {
            left.push((2 * i + 1) as i64);
            right.push((2 * i + 2) as i64);
            features.push(rng.below(num_features));
            conditions.push((rng.unit() * 2.0 - 1.0) as f32);
            default_left.push(u8::from(rng.unit() < 0.5));
        } else {
            left.push(-1);
            right.push(-1);
            features.push(0);
            conditions.push(((rng.unit() * 2.0 - 1.0) * 0.1) as f32);
            default_left.push(0);
        }
    }
    json!({
        "id": id,
        "tree_param": {"num_nodes": n.to_string(), "num_feature": num_features.to_string(), "size_leaf_vector": "1"},
        "left_children": left,
        "right_children": right,
        "split_indices": features,
        "split_conditions": conditions,
        "default_left": default_left,
        "split_type": vec![0; n],
        "base_weights": conditions,
    })
}

/// `n` rows of `num_features` values uniform in [-1.5, 1.5), row-major, with
/// each value missing (NaN) with probability `missing`.
pub fn synthetic_rows(n: usize, num_features: usize, missing: f64, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n * num_features)
        .map(|_| {
            if rng.unit() < missing {
                f32::NAN
            } else {
                (rng.unit() * 3.0 - 1.5) as f32
            }
        })
        .collect()
}
