//! A model file with its sidecar, feature rows built by name, and the fallback
//! wrapper gears hold.
//!
//! A [`Model`] is a tree ensemble or a dense network ([`crate::Mlp`]), chosen by
//! the model file's content (a top-level `"format": "gearbox-mlp"` means a
//! network). Both kinds sit behind one API: the same sidecar, the same
//! [`FeatureRow`]s, [`Model::predict`] and [`Model::objective`]. A network with
//! a logistic output reports [`Objective::BinaryLogistic`], so a gear that
//! needs "P(class 1)" (the WiseTrans monitor) takes either kind without knowing
//! which it has; one with a softmax output reports [`Objective::MultiSoftprob`]
//! like a multi-class booster, and [`Model::predict_class`] gives either's
//! most likely class (Floo's greedy controller choice).
//! Rejected: a separate `MlpModel` type beside [`Model`], which would make every
//! gear that holds a model hold one of two types, and a trait object, which
//! would put dynamic dispatch and a second vocabulary in front of three
//! methods. The kind is an enum inside [`Model`]; [`Model::ensemble`] and
//! [`Model::mlp`] give the evaluator itself.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ensemble::TreeEnsemble;
use crate::error::{EvalError, ModelError};
use crate::meta::ModelMeta;
use crate::mlp::{is_mlp_document, Mlp, ParsedMlp};
use crate::xgboost_json::{Objective, ParsedModel};

/// A model (tree ensemble or dense network) and its sidecar, checked to belong
/// together.
#[derive(Debug, Clone)]
pub struct Model {
    path: PathBuf,
    meta: ModelMeta,
    evaluator: Evaluator,
    index: HashMap<String, usize>,
    /// Per feature: `(mean, std)` to standardise with, if any.
    scale: Vec<Option<(f64, f64)>>,
    /// Identifies the feature layout, so a row built for another model is refused.
    layout: u64,
}

/// Input values for one prediction, in a model's feature order and already
/// standardised. Built by [`Model::row`] or [`Model::empty_row`] + [`Model::set`];
/// unset features are missing (NaN), which the trees route by `default_left`.
/// Reuse one row across requests to avoid allocating.
#[derive(Debug, Clone)]
pub struct FeatureRow {
    values: Vec<f32>,
    layout: u64,
}

/// What evaluates a [`Model`]'s rows.
#[derive(Debug, Clone)]
enum Evaluator {
    Trees(TreeEnsemble),
    Mlp(Mlp),
}

impl FeatureRow {
    /// The values the model sees (model order, standardised, NaN = missing).
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Mark every feature missing again.
    pub fn clear(&mut self) {
        self.values.fill(f32::NAN);
    }
}

impl Model {
    /// Read `path` (XGBoost JSON, a converted forest or a `gearbox-mlp`
    /// network) and its sidecar [`ModelMeta::path_for`]`(path)`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        Self::load_with_sidecar(path, ModelMeta::path_for(path))
    }

    /// Read a model and a sidecar at an explicit path.
    pub fn load_with_sidecar(path: impl AsRef<Path>, sidecar: impl AsRef<Path>) -> Result<Self, ModelError> {
        let (path, sidecar) = (path.as_ref(), sidecar.as_ref());
        let bytes = std::fs::read(path).map_err(|source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if is_mlp_document(&bytes).map_err(|e| ModelError::format(path, e))? {
            let parsed = ParsedMlp::from_slice(&bytes).map_err(|e| ModelError::format(path, e))?;
            let meta = ModelMeta::load(sidecar)?;
            return Self::from_mlp_parts(path, sidecar, &parsed, meta);
        }
        let parsed = ParsedModel::from_slice(&bytes).map_err(|e| ModelError::format(path, e))?;
        let meta = ModelMeta::load(sidecar)?;
        Self::from_parts(path, sidecar, &parsed, meta)
    }

    /// Put together a parsed tree model and its sidecar; `path` and `sidecar`
    /// only name them in errors.
    pub fn from_parts(
        path: impl AsRef<Path>,
        sidecar: impl AsRef<Path>,
        parsed: &ParsedModel,
        meta: ModelMeta,
    ) -> Result<Self, ModelError> {
        let (path, sidecar) = (path.as_ref(), sidecar.as_ref());
        check_agreement(
            path,
            sidecar,
            &meta,
            parsed.objective,
            parsed.num_features,
            &parsed.feature_names,
        )?;
        Ok(Self::assemble(
            path,
            meta,
            Evaluator::Trees(TreeEnsemble::from_parsed(parsed)),
        ))
    }

    /// Put together a parsed dense network and its sidecar (whose `mean`/`std`
    /// standardise the inputs, and the network's medians with them).
    pub fn from_mlp_parts(
        path: impl AsRef<Path>,
        sidecar: impl AsRef<Path>,
        parsed: &ParsedMlp,
        meta: ModelMeta,
    ) -> Result<Self, ModelError> {
        let (path, sidecar) = (path.as_ref(), sidecar.as_ref());
        check_agreement(
            path,
            sidecar,
            &meta,
            parsed.objective(),
            parsed.num_features(),
            parsed.feature_names(),
        )?;
        let mlp = Mlp::new(parsed, &scales(&meta));
        Ok(Self::assemble(path, meta, Evaluator::Mlp(mlp)))
    }

    fn assemble(path: &Path, meta: ModelMeta, evaluator: Evaluator) -> Self {
        let index = meta
            .features
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        let scale = scales(&meta);
        let mut hasher = DefaultHasher::new();
        for f in &meta.features {
            f.name.hash(&mut hasher);
            f.mean.map(f64::to_bits).hash(&mut hasher);
            f.std.map(f64::to_bits).hash(&mut hasher);
        }
        Model {
            path: path.to_path_buf(),
            evaluator,
            meta,
            index,
            scale,
            layout: hasher.finish(),
        }
    }

    /// The model file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sidecar.
    pub fn meta(&self) -> &ModelMeta {
        &self.meta
    }

    /// The flattened trees (takes rows already in model order and scale), if
    /// this is a tree model.
    pub fn ensemble(&self) -> Option<&TreeEnsemble> {
        match &self.evaluator {
            Evaluator::Trees(t) => Some(t),
            Evaluator::Mlp(_) => None,
        }
    }

    /// The dense network (takes rows already in model order and scale), if
    /// this is a `gearbox-mlp` model.
    pub fn mlp(&self) -> Option<&Mlp> {
        match &self.evaluator {
            Evaluator::Mlp(m) => Some(m),
            Evaluator::Trees(_) => None,
        }
    }

    /// The objective (a network's is [`Objective::BinaryLogistic`] or
    /// [`Objective::MultiSoftprob`], by its output).
    pub fn objective(&self) -> Objective {
        match &self.evaluator {
            Evaluator::Trees(t) => t.objective(),
            Evaluator::Mlp(m) => m.objective(),
        }
    }

    /// Values a prediction has.
    pub fn num_outputs(&self) -> usize {
        match &self.evaluator {
            Evaluator::Trees(t) => t.num_outputs(),
            Evaluator::Mlp(m) => m.num_outputs(),
        }
    }

    /// Feature names in model order.
    pub fn feature_names(&self) -> impl Iterator<Item = &str> {
        self.meta.features.iter().map(|f| f.name.as_str())
    }

    /// Class labels in output order (empty if the sidecar gives none).
    pub fn class_labels(&self) -> &[String] {
        &self.meta.class_labels
    }

    /// Position of a feature in model order.
    pub fn feature_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A row with every feature missing.
    pub fn empty_row(&self) -> FeatureRow {
        FeatureRow {
            values: vec![f32::NAN; self.scale.len()],
            layout: self.layout,
        }
    }

    /// Set one feature from its raw value (standardised here if the sidecar
    /// says so, in `f64`, then rounded to `f32` as numpy -> XGBoost does).
    /// Returns false, changing nothing, if the model has no such feature.
    pub fn set(&self, row: &mut FeatureRow, name: &str, value: f64) -> bool {
        match self.index.get(name) {
            Some(&i) if i < row.values.len() => {
                row.values[i] = self.scaled(i, value);
                true
            }
            _ => false,
        }
    }

    /// A row from `(name, raw value)` pairs, e.g. a `HashMap<String, f64>`.
    /// Features not given are missing (NaN); names the model does not use are
    /// ignored, so one record can feed models that use different subsets.
    pub fn row<K, V, I>(&self, values: I) -> FeatureRow
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Borrow<f64>,
    {
        let mut row = self.empty_row();
        for (name, value) in values {
            self.set(&mut row, name.as_ref(), *value.borrow());
        }
        row
    }

    /// A row from raw values already in model order (NaN = missing).
    pub fn row_from_values(&self, raw: &[f64]) -> Result<FeatureRow, EvalError> {
        if raw.len() != self.scale.len() {
            return Err(EvalError::RowLength {
                expected: self.scale.len(),
                got: raw.len(),
            });
        }
        let values = raw.iter().enumerate().map(|(i, &v)| self.scaled(i, v)).collect();
        Ok(FeatureRow {
            values,
            layout: self.layout,
        })
    }

    /// Predict: probabilities for classifiers (one value, P(class 1), for
    /// `binary:logistic`, including logistic networks; one per class otherwise,
    /// including softmax networks), the value for regression.
    /// `out` takes [`num_outputs`](Self::num_outputs) values. Does not allocate.
    pub fn predict(&self, row: &FeatureRow, out: &mut [f32]) -> Result<(), EvalError> {
        self.check_row(row)?;
        match &self.evaluator {
            Evaluator::Trees(t) => t.predict(&row.values, out),
            Evaluator::Mlp(m) => m.predict(&row.values, out),
        }
    }

    /// Margins before the link function (XGBoost's `output_margin=True`; a
    /// network's output units before the logistic function or the softmax).
    pub fn predict_margin(&self, row: &FeatureRow, out: &mut [f32]) -> Result<(), EvalError> {
        self.check_row(row)?;
        match &self.evaluator {
            Evaluator::Trees(t) => t.predict_margin(&row.values, out),
            Evaluator::Mlp(m) => m.predict_margin(&row.values, out),
        }
    }

    /// The most likely class (an index into [`class_labels`](Self::class_labels)):
    /// for a network, the largest output unit compared in `f64` (the greedy
    /// action of Floo's actor, Floo §3.3); for trees, the largest probability
    /// (`binary:logistic`: 1 if P(class 1) > 0.5). The first class wins a tie.
    /// Regression models answer [`EvalError::NotAClassifier`]. Does not
    /// allocate for up to 64 classes.
    pub fn predict_class(&self, row: &FeatureRow) -> Result<usize, EvalError> {
        self.check_row(row)?;
        match &self.evaluator {
            Evaluator::Mlp(m) => m.predict_class(&row.values),
            Evaluator::Trees(t) => {
                let objective = t.objective();
                if !objective.is_classifier() {
                    return Err(EvalError::NotAClassifier {
                        objective: objective.name(),
                    });
                }
                let n = t.num_outputs();
                let mut stack = [0f32; 64];
                let mut heap = Vec::new();
                let out = if n <= stack.len() {
                    &mut stack[..n]
                } else {
                    heap.resize(n, 0.0);
                    &mut heap[..]
                };
                t.predict(&row.values, out)?;
                Ok(match objective {
                    Objective::BinaryLogistic => usize::from(out[0] > 0.5),
                    _ => {
                        let mut best = 0;
                        for (i, &p) in out.iter().enumerate() {
                            if p > out[best] {
                                best = i;
                            }
                        }
                        best
                    }
                })
            }
        }
    }

    fn check_row(&self, row: &FeatureRow) -> Result<(), EvalError> {
        if row.layout != self.layout {
            return Err(EvalError::ForeignRow);
        }
        Ok(())
    }

    fn scaled(&self, i: usize, value: f64) -> f32 {
        match self.scale.get(i).copied().flatten() {
            Some((mean, std)) => ((value - mean) / std) as f32,
            None => value as f32,
        }
    }
}

/// Per feature, the sidecar's `(mean, std)`, if any.
fn scales(meta: &ModelMeta) -> Vec<Option<(f64, f64)>> {
    meta.features.iter().map(|f| f.mean.zip(f.std)).collect()
}

/// Checks that a sidecar describes the model it sits beside.
fn check_agreement(
    path: &Path,
    sidecar: &Path,
    meta: &ModelMeta,
    objective: Objective,
    num_features: usize,
    feature_names: &[String],
) -> Result<(), ModelError> {
    let mismatch = |reason: String| ModelError::Mismatch {
        model: path.to_path_buf(),
        sidecar: sidecar.to_path_buf(),
        reason,
    };
    if meta.objective != objective.name() {
        return Err(mismatch(format!(
            "objective: sidecar says {:?}, model is {:?}",
            meta.objective,
            objective.name()
        )));
    }
    if meta.features.len() != num_features {
        return Err(mismatch(format!(
            "sidecar lists {} features, model takes {num_features}",
            meta.features.len(),
        )));
    }
    for (i, (ours, theirs)) in meta.features.iter().zip(feature_names).enumerate() {
        if &ours.name != theirs {
            return Err(mismatch(format!(
                "feature {i}: sidecar says {:?}, model file says {theirs:?}",
                ours.name
            )));
        }
    }
    if !meta.class_labels.is_empty() {
        let classes = match objective {
            Objective::BinaryLogistic => 2,
            Objective::MultiSoftprob { num_class } | Objective::ForestProba { num_class } => num_class,
            Objective::SquaredError => 0,
        };
        if meta.class_labels.len() != classes {
            return Err(mismatch(format!(
                "{} class labels for a model with {classes} classes",
                meta.class_labels.len()
            )));
        }
    }
    Ok(())
}

/// What a gear holds: a model, or the reason there is none.
///
/// Loading never fails: a missing or broken model is logged once with
/// `tracing::warn!` (naming the gear, the file and the problem) and every
/// later [`predict`](Self::predict) answers `None`, so the gear takes its
/// documented static choice (docs/architecture.md principle 6). A row of the wrong shape is
/// a caller bug; it is also logged once and answered with `None`.
#[derive(Debug)]
pub struct ModelOrFallback {
    gear: String,
    path: PathBuf,
    model: Result<Model, ModelError>,
    warned_eval: AtomicBool,
}

impl ModelOrFallback {
    /// Load `path` and its sidecar for `gear` (a name for the logs).
    pub fn load(gear: impl Into<String>, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        Self::from_result(gear, path, Model::load(path))
    }

    /// Wrap an existing load result (logs the error, if any, once).
    pub fn from_result(gear: impl Into<String>, path: impl AsRef<Path>, model: Result<Model, ModelError>) -> Self {
        let gear = gear.into();
        let path = path.as_ref().to_path_buf();
        if let Err(error) = &model {
            tracing::warn!(gear = %gear, path = %path.display(), %error, "model unavailable; using the static default");
        }
        ModelOrFallback {
            gear,
            path,
            model,
            warned_eval: AtomicBool::new(false),
        }
    }

    /// The model, or `None` if it could not be loaded.
    pub fn model(&self) -> Option<&Model> {
        self.model.as_ref().ok()
    }

    /// Why there is no model, if there is none.
    pub fn error(&self) -> Option<&ModelError> {
        self.model.as_ref().err()
    }

    /// The model path given at load.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A row with every feature missing, or `None` without a model.
    pub fn empty_row(&self) -> Option<FeatureRow> {
        self.model().map(Model::empty_row)
    }

    /// Predict into `out` and return it, or `None` to take the static default.
    pub fn predict<'o>(&self, row: &FeatureRow, out: &'o mut [f32]) -> Option<&'o [f32]> {
        let model = self.model()?;
        match model.predict(row, out) {
            Ok(()) => Some(out),
            Err(error) => {
                if !self.warned_eval.swap(true, Ordering::Relaxed) {
                    tracing::warn!(gear = %self.gear, path = %self.path.display(), %error,
                        "model evaluation refused; using the static default");
                }
                None
            }
        }
    }
}
