//! Reading XGBoost's JSON model format (`Booster.save_model("m.json")`).
//!
//! Only what prediction needs is read; the many other fields XGBoost writes
//! (`loss_changes`, `sum_hessian`, `parents`, training parameters, ...) are
//! ignored. What is read:
//!
//! * `version` — `[major, minor, patch]` of the XGBoost that wrote the file (optional).
//! * `learner.objective.name` — see [`Objective`].
//! * `learner.learner_model_param` — `base_score` (a number, `"5E-1"`, `"[5E-1]"`
//!   or one value per class `"[a,b,c]"`), `num_class`, `num_feature`,
//!   `num_target` (must be 1). Numbers may be written as strings, as XGBoost does.
//! * `learner.feature_names`, `learner.feature_types` (optional; categorical
//!   feature types are refused).
//! * `learner.gradient_booster` — `name` must be `gbtree`; `model.trees[*]` and
//!   `model.tree_info` (the output each tree adds to).
//! * per tree: `left_children`, `right_children` (-1 marks a leaf in
//!   `left_children`), `split_indices`, `split_conditions` (threshold; the leaf
//!   value on a leaf), `default_left` (0/1 or booleans), `split_type` (0 =
//!   numerical; categorical splits are refused), `base_weights` (read only for
//!   vector leaves: `num_nodes * size_leaf_vector` values, node-major) and
//!   `tree_param.size_leaf_vector`.
//!
//! The base margin follows XGBoost's rule: for `binary:logistic` the stored
//! `base_score` is a probability and the margin starts at `logit(base_score)`
//! (computed in `f32` as XGBoost does); for `reg:squarederror` and
//! `multi:softprob` it is used as it is (XGBoost 3.x writes one margin per class
//! for `multi:softprob`; older versions write one value for all classes).
//! Checked against XGBoost 3.2.0 by the shipped test vectors.
//!
//! [`ParsedModel`] is the validated document. It can evaluate a row directly
//! ([`ParsedModel::predict_naive`]) by walking the arrays node by node; that is
//! the reference the compact evaluator ([`crate::TreeEnsemble`]) is tested and
//! benchmarked against.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::FormatError;

/// Objective name of a converted scikit-learn forest (see docs/models.md).
pub const FOREST_PROBA: &str = "gearbox:forest_proba";

/// What the summed tree outputs mean and how they become predictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// `binary:logistic`: one output, `sigmoid(margin)` = P(class 1).
    BinaryLogistic,
    /// `reg:squarederror`: one output, the margin itself.
    SquaredError,
    /// `multi:softprob`: `num_class` outputs, softmax of the per-class margins.
    MultiSoftprob {
        /// Number of classes (> 1).
        num_class: usize,
    },
    /// `gearbox:forest_proba`: a converted scikit-learn forest. `num_class`
    /// outputs, the mean over trees of each tree's class-probability vector
    /// (scikit-learn's `predict_proba`). No base score, no link function.
    ForestProba {
        /// Number of classes (>= 2; both columns are given for two classes).
        num_class: usize,
    },
}

impl Objective {
    /// The name used in the model file and the sidecar.
    pub fn name(&self) -> &'static str {
        match self {
            Objective::BinaryLogistic => "binary:logistic",
            Objective::SquaredError => "reg:squarederror",
            Objective::MultiSoftprob { .. } => "multi:softprob",
            Objective::ForestProba { .. } => FOREST_PROBA,
        }
    }

    /// Number of values a prediction has.
    pub fn num_outputs(&self) -> usize {
        match self {
            Objective::BinaryLogistic | Objective::SquaredError => 1,
            Objective::MultiSoftprob { num_class } | Objective::ForestProba { num_class } => *num_class,
        }
    }

    /// Whether outputs are class probabilities (so class labels apply).
    pub fn is_classifier(&self) -> bool {
        !matches!(self, Objective::SquaredError)
    }

    fn parse(name: &str, num_class: usize) -> Result<Self, FormatError> {
        let field = "learner.learner_model_param.num_class";
        match name {
            "binary:logistic" | "reg:squarederror" if num_class > 1 => Err(FormatError::invalid(
                field,
                format!("{num_class} classes for objective {name}"),
            )),
            "binary:logistic" => Ok(Objective::BinaryLogistic),
            "reg:squarederror" => Ok(Objective::SquaredError),
            "multi:softprob" if num_class < 2 => Err(FormatError::invalid(
                field,
                format!("multi:softprob needs at least 2 classes, got {num_class}"),
            )),
            "multi:softprob" => Ok(Objective::MultiSoftprob { num_class }),
            FOREST_PROBA if num_class < 2 => Err(FormatError::invalid(
                field,
                format!("{FOREST_PROBA} needs at least 2 classes, got {num_class}"),
            )),
            FOREST_PROBA => Ok(Objective::ForestProba { num_class }),
            other => Err(FormatError::Unsupported(format!(
                "objective {other:?} (supported: binary:logistic, reg:squarederror, multi:softprob, {FOREST_PROBA})"
            ))),
        }
    }
}

/// One validated tree, as arrays indexed by node id (0 = root).
#[derive(Debug, Clone)]
pub struct ParsedTree {
    /// Left child per node; -1 on a leaf.
    pub left: Vec<i32>,
    /// Right child per node (meaningless on a leaf).
    pub right: Vec<i32>,
    /// Feature index tested by each split node.
    pub feature: Vec<u32>,
    /// Threshold of each split node: go left when `x < threshold`.
    pub threshold: Vec<f32>,
    /// Where a missing value (NaN) goes at each split node.
    pub default_left: Vec<bool>,
    /// Leaf values, `leaf_size` per node (only leaf entries are meaningful).
    pub leaf_values: Vec<f32>,
    /// For scalar leaves, the output this tree adds to (`tree_info`).
    pub output: u32,
    /// Edges from the root to the deepest reachable leaf.
    pub depth: u32,
    /// Nodes reachable from the root (XGBoost may keep deleted nodes in the arrays).
    pub reachable_nodes: u32,
}

impl ParsedTree {
    /// Node id of the leaf that `row` reaches, walking one node at a time.
    pub fn leaf_naive(&self, row: &[f32]) -> usize {
        let mut node = 0usize;
        while self.left[node] >= 0 {
            let x = row.get(self.feature[node] as usize).copied().unwrap_or(f32::NAN);
            let go_left = if x.is_nan() {
                self.default_left[node]
            } else {
                x < self.threshold[node]
            };
            node = if go_left { self.left[node] } else { self.right[node] } as usize;
        }
        node
    }
}

/// A validated model document: everything prediction needs, nothing else.
#[derive(Debug, Clone)]
pub struct ParsedModel {
    /// The objective.
    pub objective: Objective,
    /// Number of input features (`learner_model_param.num_feature`).
    pub num_features: usize,
    /// Starting margin per output (already through `logit` for `binary:logistic`).
    pub base_margin: Vec<f32>,
    /// Feature names stored in the model file (empty if none were given at training).
    pub feature_names: Vec<String>,
    /// Values per leaf: 1 (scalar trees) or the number of outputs (vector leaves).
    pub leaf_size: usize,
    /// The trees, in the order their outputs are summed.
    pub trees: Vec<ParsedTree>,
    /// `[major, minor, patch]` of the XGBoost that wrote the file, if recorded.
    pub xgboost_version: Option<[u32; 3]>,
}

impl ParsedModel {
    /// Parse and validate a model document.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            let doc: Doc = serde_json::from_slice(bytes)?;
            return doc.validate();
        }
        Err(FormatError::Unsupported(
            "not a JSON object (binary UBJSON models are not read: save the model with a .json name)".into(),
        ))
    }

    /// Number of values a prediction has.
    pub fn num_outputs(&self) -> usize {
        self.objective.num_outputs()
    }

    /// Margins (before the link function) for one row, walking each tree node
    /// by node. The reference evaluation; allocates.
    pub fn predict_margin_naive(&self, row: &[f32]) -> Vec<f32> {
        let mut out = self.base_margin.clone();
        for tree in &self.trees {
            let leaf = tree.leaf_naive(row);
            if self.leaf_size == 1 {
                out[tree.output as usize] += tree.leaf_values[leaf];
            } else {
                let values = &tree.leaf_values[leaf * self.leaf_size..(leaf + 1) * self.leaf_size];
                for (o, v) in out.iter_mut().zip(values) {
                    *o += v;
                }
            }
        }
        if let Objective::ForestProba { .. } = self.objective {
            let n = self.trees.len().max(1) as f32;
            out.iter_mut().for_each(|o| *o /= n);
        }
        out
    }

    /// Predictions (probabilities, or the regression value) for one row. The
    /// reference evaluation; allocates.
    pub fn predict_naive(&self, row: &[f32]) -> Vec<f32> {
        let mut out = self.predict_margin_naive(row);
        crate::ensemble::apply_link(self.objective, &mut out);
        out
    }
}

// ---------------------------------------------------------------------------
// The document as serde sees it.

#[derive(Deserialize)]
struct Doc {
    learner: Learner,
    #[serde(default)]
    version: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct Learner {
    learner_model_param: LearnerModelParam,
    objective: ObjectiveDoc,
    gradient_booster: GradientBooster,
    #[serde(default)]
    feature_names: Vec<String>,
    #[serde(default)]
    feature_types: Vec<String>,
}

#[derive(Deserialize)]
struct LearnerModelParam {
    base_score: Option<NumText>,
    num_class: Option<NumText>,
    num_feature: NumText,
    num_target: Option<NumText>,
}

#[derive(Deserialize)]
struct ObjectiveDoc {
    name: String,
}

#[derive(Deserialize)]
struct GradientBooster {
    name: String,
    model: Option<GbTreeModel>,
}

#[derive(Deserialize)]
struct GbTreeModel {
    trees: Vec<TreeDoc>,
    #[serde(default)]
    tree_info: Vec<i64>,
}

#[derive(Deserialize)]
struct TreeDoc {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    split_conditions: Vec<f32>,
    default_left: Flags,
    #[serde(default)]
    split_type: Vec<i64>,
    #[serde(default)]
    base_weights: Vec<f32>,
    tree_param: Option<TreeParam>,
}

#[derive(Deserialize)]
struct TreeParam {
    num_nodes: Option<NumText>,
    size_leaf_vector: Option<NumText>,
}

/// XGBoost writes most scalar parameters as strings ("0", "5E-1", "[5E-1]").
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum NumText {
    Int(i64),
    Float(f64),
    Text(String),
}

impl NumText {
    fn floats(&self, field: &str) -> Result<Vec<f32>, FormatError> {
        match self {
            NumText::Int(i) => Ok(vec![*i as f32]),
            NumText::Float(f) => Ok(vec![*f as f32]),
            NumText::Text(s) => {
                let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
                inner
                    .split(',')
                    .map(|part| {
                        part.trim()
                            .parse::<f32>()
                            .map_err(|_| FormatError::invalid(field, format!("not a number: {s:?}")))
                    })
                    .collect()
            }
        }
    }

    fn count(&self, field: &str) -> Result<usize, FormatError> {
        let bad = || FormatError::invalid(field, "expected a non-negative integer");
        match self {
            NumText::Int(i) => usize::try_from(*i).map_err(|_| bad()),
            NumText::Float(f) if f.fract() == 0.0 && *f >= 0.0 && *f < 1e15 => Ok(*f as usize),
            NumText::Float(_) => Err(bad()),
            NumText::Text(s) => s.trim().parse::<usize>().map_err(|_| bad()),
        }
    }
}

/// `default_left` is 0/1 in current XGBoost and `true`/`false` in some older files.
struct Flags(Vec<bool>);

impl<'de> Deserialize<'de> for Flags {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FlagsVisitor;
        impl<'de> Visitor<'de> for FlagsVisitor {
            type Value = Flags;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of 0/1 or booleans")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Flags, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(flag) = seq.next_element::<Flag>()? {
                    out.push(flag.0);
                }
                Ok(Flags(out))
            }
        }
        deserializer.deserialize_seq(FlagsVisitor)
    }
}

struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FlagVisitor;
        impl Visitor<'_> for FlagVisitor {
            type Value = Flag;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("0, 1, true or false")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flag, E> {
                match v {
                    0 => Ok(Flag(false)),
                    1 => Ok(Flag(true)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Flag, E> {
                match u64::try_from(v) {
                    Ok(u) => self.visit_u64(u),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
        }
        deserializer.deserialize_any(FlagVisitor)
    }
}

// ---------------------------------------------------------------------------
// Validation.

/// Feature indices must leave the top bit free (the compact layout keeps the
/// default direction there).
const MAX_FEATURES: usize = (1 << 31) - 1;
/// Node ids must fit the compact layout's u32 indices with room to spare.
const MAX_TOTAL_NODES: usize = 1 << 30;

impl Doc {
    fn validate(self) -> Result<ParsedModel, FormatError> {
        let learner = self.learner;
        let param = &learner.learner_model_param;
        let num_features = param.num_feature.count("learner.learner_model_param.num_feature")?;
        if num_features == 0 || num_features > MAX_FEATURES {
            return Err(FormatError::invalid(
                "learner.learner_model_param.num_feature",
                format!("{num_features} features (must be 1 to {MAX_FEATURES})"),
            ));
        }
        let num_class = match &param.num_class {
            Some(n) => n.count("learner.learner_model_param.num_class")?,
            None => 0,
        };
        if let Some(t) = &param.num_target {
            let targets = t.count("learner.learner_model_param.num_target")?;
            if targets > 1 {
                return Err(FormatError::Unsupported(format!(
                    "multi-target model ({targets} targets)"
                )));
            }
        }
        let objective = Objective::parse(&learner.objective.name, num_class)?;
        let num_outputs = objective.num_outputs();

        if let Some((i, t)) = learner
            .feature_types
            .iter()
            .enumerate()
            .find(|(_, t)| t.as_str() == "c")
        {
            return Err(FormatError::Unsupported(format!(
                "categorical feature {:?} (learner.feature_types[{i}] = {t:?})",
                learner.feature_names.get(i).map(String::as_str).unwrap_or("?")
            )));
        }
        if !learner.feature_names.is_empty() && learner.feature_names.len() != num_features {
            return Err(FormatError::invalid(
                "learner.feature_names",
                format!("{} names for {num_features} features", learner.feature_names.len()),
            ));
        }

        let base_margin = base_margin(objective, param.base_score.as_ref())?;

        if learner.gradient_booster.name != "gbtree" {
            return Err(FormatError::Unsupported(format!(
                "booster {:?} (only gbtree is evaluated)",
                learner.gradient_booster.name
            )));
        }
        let model = learner
            .gradient_booster
            .model
            .ok_or_else(|| FormatError::invalid("learner.gradient_booster.model", "missing"))?;
        if model.trees.is_empty() {
            return Err(FormatError::invalid("learner.gradient_booster.model.trees", "no trees"));
        }
        let tree_info = if model.tree_info.is_empty() && num_outputs == 1 {
            vec![0; model.trees.len()]
        } else {
            model.tree_info
        };
        if tree_info.len() != model.trees.len() {
            return Err(FormatError::invalid(
                "learner.gradient_booster.model.tree_info",
                format!("{} entries for {} trees", tree_info.len(), model.trees.len()),
            ));
        }

        let mut trees = Vec::with_capacity(model.trees.len());
        let mut leaf_size = None;
        let mut total_nodes = 0usize;
        for (t, (doc, info)) in model.trees.into_iter().zip(tree_info).enumerate() {
            let field = format!("learner.gradient_booster.model.trees[{t}]");
            let tree = validate_tree(doc, &field, num_features, num_outputs, info, &mut leaf_size)?;
            total_nodes += tree.left.len();
            if total_nodes > MAX_TOTAL_NODES {
                return Err(FormatError::Unsupported(format!(
                    "more than {MAX_TOTAL_NODES} nodes in all"
                )));
            }
            trees.push(tree);
        }
        let leaf_size = leaf_size.unwrap_or(1);
        // Leaf payloads (offsets into the leaf values) must stay below 2^30 so
        // their bits read as a finite float in the compact layout.
        if total_nodes.saturating_mul(leaf_size) > 1 << 30 {
            return Err(FormatError::Unsupported(format!(
                "{total_nodes} nodes with {leaf_size} values per leaf"
            )));
        }
        if matches!(objective, Objective::ForestProba { .. }) && leaf_size != num_outputs {
            return Err(FormatError::invalid(
                "learner.gradient_booster.model.trees[0].tree_param.size_leaf_vector",
                format!("{FOREST_PROBA} needs one probability per class per leaf ({num_outputs}), got {leaf_size}"),
            ));
        }

        let xgboost_version = match self.version.as_deref() {
            Some([a, b, c, ..]) => Some([*a, *b, *c]),
            _ => None,
        };
        Ok(ParsedModel {
            objective,
            num_features,
            base_margin,
            feature_names: learner.feature_names,
            leaf_size,
            trees,
            xgboost_version,
        })
    }
}

fn base_margin(objective: Objective, base_score: Option<&NumText>) -> Result<Vec<f32>, FormatError> {
    let field = "learner.learner_model_param.base_score";
    let n = objective.num_outputs();
    if let Objective::ForestProba { .. } = objective {
        // A forest is a mean of probabilities: there is no base score to add.
        return Ok(vec![0.0; n]);
    }
    let scores = match base_score {
        Some(s) => s.floats(field)?,
        None => return Err(FormatError::invalid(field, "missing")),
    };
    if scores.iter().any(|s| !s.is_finite()) {
        return Err(FormatError::invalid(field, "not finite"));
    }
    let scores = match (scores.len(), n) {
        (1, n) => vec![scores[0]; n],
        (k, n) if k == n => scores,
        (k, n) => return Err(FormatError::invalid(field, format!("{k} values for {n} outputs"))),
    };
    match objective {
        Objective::BinaryLogistic => {
            let p = scores[0];
            if !(p > 0.0 && p < 1.0) {
                return Err(FormatError::invalid(
                    field,
                    format!("{p} is not a probability in (0, 1)"),
                ));
            }
            // XGBoost: ProbToMargin(p) = -log(1/p - 1), in f32.
            Ok(vec![-(1.0f32 / p - 1.0).ln()])
        }
        _ => Ok(scores),
    }
}

fn validate_tree(
    doc: TreeDoc,
    field: &str,
    num_features: usize,
    num_outputs: usize,
    info: i64,
    leaf_size_seen: &mut Option<usize>,
) -> Result<ParsedTree, FormatError> {
    let n = doc.left_children.len();
    if n == 0 {
        return Err(FormatError::invalid(format!("{field}.left_children"), "empty tree"));
    }
    let mut leaf_size = 1;
    if let Some(param) = &doc.tree_param {
        if let Some(num_nodes) = &param.num_nodes {
            let declared = num_nodes.count(&format!("{field}.tree_param.num_nodes"))?;
            if declared != n {
                return Err(FormatError::invalid(
                    format!("{field}.tree_param.num_nodes"),
                    format!("says {declared} nodes, left_children has {n}"),
                ));
            }
        }
        if let Some(size) = &param.size_leaf_vector {
            // XGBoost writes 0 or 1 for scalar leaves.
            leaf_size = size.count(&format!("{field}.tree_param.size_leaf_vector"))?.max(1);
        }
    }
    match *leaf_size_seen {
        None => *leaf_size_seen = Some(leaf_size),
        Some(s) if s != leaf_size => {
            return Err(FormatError::Unsupported(format!(
                "{field}: trees with different leaf sizes ({s} and {leaf_size})"
            )))
        }
        Some(_) => {}
    }
    if leaf_size != 1 && leaf_size != num_outputs {
        return Err(FormatError::invalid(
            format!("{field}.tree_param.size_leaf_vector"),
            format!("{leaf_size} values per leaf for {num_outputs} outputs"),
        ));
    }
    let output = if leaf_size == 1 {
        match u32::try_from(info) {
            Ok(o) if (o as usize) < num_outputs => o,
            _ => {
                return Err(FormatError::invalid(
                    "learner.gradient_booster.model.tree_info",
                    format!("tree {field} adds to output {info}, the model has {num_outputs}"),
                ))
            }
        }
    } else {
        0
    };

    let lengths = [
        ("right_children", doc.right_children.len()),
        ("split_indices", doc.split_indices.len()),
        ("split_conditions", doc.split_conditions.len()),
        ("default_left", doc.default_left.0.len()),
    ];
    for (name, len) in lengths {
        if len != n {
            return Err(FormatError::invalid(
                format!("{field}.{name}"),
                format!("{len} entries for {n} nodes"),
            ));
        }
    }
    if !doc.split_type.is_empty() && doc.split_type.len() != n {
        return Err(FormatError::invalid(
            format!("{field}.split_type"),
            format!("{} entries for {n} nodes", doc.split_type.len()),
        ));
    }
    if leaf_size > 1 && doc.base_weights.len() != n * leaf_size {
        return Err(FormatError::invalid(
            format!("{field}.base_weights"),
            format!(
                "{} values for {n} nodes with {leaf_size} values per leaf",
                doc.base_weights.len()
            ),
        ));
    }

    let mut left = vec![-1i32; n];
    let mut right = vec![-1i32; n];
    let mut feature = vec![0u32; n];
    let mut threshold = vec![0f32; n];
    let mut visited = vec![false; n];
    let mut depth = 0u32;
    let mut reachable = 0u32;
    // Walk from the root so unreachable (deleted) nodes are never examined and a
    // node reached twice (a cycle or a shared child) is caught.
    let mut stack = vec![(0usize, 0u32)];
    while let Some((i, d)) = stack.pop() {
        if std::mem::replace(&mut visited[i], true) {
            return Err(FormatError::invalid(
                format!("{field}.left_children"),
                format!("node {i} is reached twice"),
            ));
        }
        reachable += 1;
        depth = depth.max(d);
        if doc.left_children[i] == -1 {
            if leaf_size == 1 && !doc.split_conditions[i].is_finite() {
                return Err(FormatError::invalid(
                    format!("{field}.split_conditions[{i}]"),
                    "leaf value is not finite",
                ));
            }
            continue;
        }
        if doc.split_type.get(i).is_some_and(|&t| t != 0) {
            return Err(FormatError::Unsupported(format!(
                "categorical split at {field} node {i} (split_type {})",
                doc.split_type[i]
            )));
        }
        let child = |v: i64, name: &str| -> Result<usize, FormatError> {
            match usize::try_from(v) {
                Ok(c) if c > 0 && c < n => Ok(c),
                _ => Err(FormatError::invalid(
                    format!("{field}.{name}[{i}]"),
                    format!("child {v} is not a node 1..{n}"),
                )),
            }
        };
        let l = child(doc.left_children[i], "left_children")?;
        let r = child(doc.right_children[i], "right_children")?;
        let f = match usize::try_from(doc.split_indices[i]) {
            Ok(f) if f < num_features => f,
            _ => {
                return Err(FormatError::invalid(
                    format!("{field}.split_indices[{i}]"),
                    format!("feature {} of {num_features}", doc.split_indices[i]),
                ))
            }
        };
        let t = doc.split_conditions[i];
        // NaN would compare false both ways; -inf would send even "NaN goes
        // left" values right in the compact evaluator. Neither comes from a
        // real model (and -inf as a threshold means "everything goes right").
        if t.is_nan() || t == f32::NEG_INFINITY {
            return Err(FormatError::invalid(
                format!("{field}.split_conditions[{i}]"),
                format!("threshold is {t}"),
            ));
        }
        left[i] = l as i32;
        right[i] = r as i32;
        feature[i] = f as u32;
        threshold[i] = t;
        stack.push((r, d + 1));
        stack.push((l, d + 1));
    }

    let leaf_values = if leaf_size == 1 {
        // A scalar leaf's value lives in split_conditions (XGBoost's LeafValue()).
        (0..n)
            .map(|i| if left[i] < 0 { doc.split_conditions[i] } else { 0.0 })
            .collect()
    } else {
        let mut values = doc.base_weights;
        for (i, chunk) in values.chunks_mut(leaf_size).enumerate() {
            if left[i] >= 0 {
                chunk.fill(0.0);
            } else if visited[i] && chunk.iter().any(|v| !v.is_finite()) {
                return Err(FormatError::invalid(
                    format!("{field}.base_weights"),
                    format!("leaf {i} is not finite"),
                ));
            }
        }
        values
    };
    Ok(ParsedTree {
        left,
        right,
        feature,
        threshold,
        default_left: doc.default_left.0,
        leaf_values,
        output,
        depth,
        reachable_nodes: reachable,
    })
}
