//! A small dense network (multi-layer perceptron) in gearbox's own JSON format,
//! `"format": "gearbox-mlp"` (docs/models.md, "Dense networks").
//!
//! Written for one model: the 128-64 MLP that WiseTrans §IV-E2 (footnote 4,
//! Table II) compares with XGBoost as the WiseTrans Network Monitor, exported by
//! `python/gearbox/models/mlp_to_json.py` from a fitted scikit-learn pipeline
//! `SimpleImputer(strategy="median") -> StandardScaler -> MLPClassifier`:
//!
//! * the sidecar ([`crate::ModelMeta`]) carries the scaler's `mean_`/`scale_` as
//!   each feature's `mean`/`std`, exactly as for a tree model, so
//!   [`crate::Model::set`] standardises the same way for both;
//! * this file carries the imputer's medians (`impute`, raw units), the
//!   hidden-layer activation and the layers (`coefs_`, `intercepts_`).
//!
//! A missing input (NaN) takes its training median *before* standardising, as in
//! the pipeline; since rows are standardised when they are filled,
//! [`Mlp::new`] maps each median through the same standardisation once, in
//! `f64`, and evaluation substitutes that.
//!
//! **Arithmetic.** Everything after the `f32` feature row is `f64`, like
//! scikit-learn's forward pass on `float64` input, so the only difference from
//! `predict_proba` is the row's rounding to `f32` (the shipped test vector
//! agrees to about 1e-7). Speed hardly matters: 7 -> 128 -> 64 -> 1 is ~9k
//! multiply-adds once per score update: 2.0 µs p50 for the shipped `mlp-tcp.json`
//! (`decision_bench`, docs/wisetrans.md "Decision cost").
//!
//! **Why by hand and not tract** (docs/architecture.md "Choices made" keeps tract
//! out for trees too): tract reads ONNX or NNEF, and scikit-learn writes
//! neither; the export would need `skl2onnx`, which is not among our
//! dependencies, plus an ONNX runtime graph for two matrix products. Two dense
//! layers are ~100 lines here, and a JSON of `coefs_` needs no conversion
//! library to write or to audit.
//!
//! **Objective.** The output is one logistic unit, P(class 1): exactly the
//! contract of [`Objective::BinaryLogistic`], which is what [`Mlp::objective`]
//! reports and what the sidecar must say (`"binary:logistic"`). Rejected: a new
//! objective name such as `gearbox:mlp_logistic`, which would make every
//! consumer that asks "is this a binary classifier?" (the WiseTrans monitor)
//! learn a second name for the same thing. Which evaluator a model needs is
//! the model file's business (`format`), not the objective's.
//!
//! Nothing panics on bad input: [`ParsedMlp::from_slice`] refuses wrong
//! lengths, layer sizes that do not chain, non-finite numbers and unknown
//! fields with a [`FormatError`] naming the field.

use std::cell::RefCell;

use serde::de::IgnoredAny;
use serde::Deserialize;

use crate::error::{EvalError, FormatError};
use crate::xgboost_json::Objective;

/// The `format` value of a dense-network model file.
pub const MLP_FORMAT: &str = "gearbox-mlp";

/// The `format_version` this crate reads.
pub const MLP_FORMAT_VERSION: u32 = 1;

/// Layers up to this wide are evaluated in stack buffers (2 x 256 `f64`, 4 KiB);
/// wider ones in a reused per-thread buffer.
pub const STACK_WIDTH: usize = 256;

thread_local! {
    /// Scratch for networks wider than [`STACK_WIDTH`]; grows once per thread.
    static WIDE: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// The hidden layers' activation (scikit-learn's `activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(0, x)` (scikit-learn's default).
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Logistic,
    /// `x`.
    Identity,
}

impl Activation {
    /// The name used in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Logistic => "logistic",
            Activation::Identity => "identity",
        }
    }

    fn parse(name: &str) -> Result<Self, FormatError> {
        match name {
            "relu" => Ok(Activation::Relu),
            "tanh" => Ok(Activation::Tanh),
            "logistic" => Ok(Activation::Logistic),
            "identity" => Ok(Activation::Identity),
            other => Err(FormatError::Unsupported(format!(
                "activation {other:?} (supported: relu, tanh, logistic, identity)"
            ))),
        }
    }

    fn apply(self, values: &mut [f64]) {
        match self {
            Activation::Relu => values.iter_mut().for_each(|v| *v = v.max(0.0)),
            Activation::Tanh => values.iter_mut().for_each(|v| *v = v.tanh()),
            Activation::Logistic => values.iter_mut().for_each(|v| *v = sigmoid(*v)),
            Activation::Identity => {}
        }
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The document as written; validated into a [`ParsedMlp`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    format: String,
    format_version: u32,
    activation: String,
    output: String,
    #[serde(default)]
    feature_names: Vec<String>,
    impute: Vec<f64>,
    layers: Vec<LayerDoc>,
    /// Provenance (library versions, training parameters); not read.
    #[serde(default, rename = "info")]
    _info: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerDoc {
    weights: Vec<Vec<f64>>,
    bias: Vec<f64>,
}

/// Just enough of a document to tell a dense network from an XGBoost model.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    format: Option<String>,
}

/// Whether `bytes` is a `gearbox-mlp` document (`Ok(false)`: read it as XGBoost
/// JSON, whose parser gives the messages for non-JSON input). A `format` field
/// naming something else is refused. Costs one tokenising pass over the file,
/// once at load.
pub(crate) fn is_mlp_document(bytes: &[u8]) -> Result<bool, FormatError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Ok(false);
    }
    match serde_json::from_slice::<Probe>(bytes)?.format {
        None => Ok(false),
        Some(f) if f == MLP_FORMAT => Ok(true),
        Some(other) => Err(FormatError::Unsupported(format!(
            "format {other:?} (this build reads {MLP_FORMAT:?} and XGBoost's JSON)"
        ))),
    }
}

/// One dense layer: `out = bias + in · weights`.
#[derive(Debug, Clone)]
pub struct DenseLayer {
    inputs: usize,
    outputs: usize,
    /// `inputs x outputs`, row-major: scikit-learn's `coefs_[l]` orientation,
    /// row `j` holds input `j`'s weight to every unit.
    weights: Vec<f64>,
    bias: Vec<f64>,
}

impl DenseLayer {
    /// Inputs the layer takes.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Units in the layer.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Weight from input `j` to unit `k` (None outside the layer).
    pub fn weight(&self, j: usize, k: usize) -> Option<f64> {
        (j < self.inputs && k < self.outputs).then(|| self.weights[j * self.outputs + k])
    }

    /// The bias of each unit.
    pub fn bias(&self) -> &[f64] {
        &self.bias
    }

    /// `out = bias + input · weights`. `input` has `inputs` values, `out` `outputs`.
    fn forward(&self, input: &[f64], out: &mut [f64]) {
        out.copy_from_slice(&self.bias);
        for (&x, row) in input.iter().zip(self.weights.chunks_exact(self.outputs)) {
            // After a ReLU about half the inputs are 0: skip their rows.
            if x != 0.0 {
                out.iter_mut().zip(row).for_each(|(o, w)| *o += x * w);
            }
        }
    }
}

/// A validated dense-network document. Built only by [`ParsedMlp::from_slice`],
/// so every instance has layers that chain.
#[derive(Debug, Clone)]
pub struct ParsedMlp {
    activation: Activation,
    feature_names: Vec<String>,
    impute: Vec<f64>,
    layers: Vec<DenseLayer>,
}

impl ParsedMlp {
    /// Parse and validate a `gearbox-mlp` document.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        let doc: Doc = serde_json::from_slice(bytes)?;
        doc.validate()
    }

    /// Inputs the network takes (`impute` has one value per input).
    pub fn num_features(&self) -> usize {
        self.impute.len()
    }

    /// The hidden layers' activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Feature names stored in the file (empty if none).
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    /// Per input, the value that replaces a missing one, in raw units.
    pub fn impute(&self) -> &[f64] {
        &self.impute
    }

    /// The layers, input first; the last is the output unit.
    pub fn layers(&self) -> &[DenseLayer] {
        &self.layers
    }

    /// What the output means: always one logistic unit, P(class 1).
    pub fn objective(&self) -> Objective {
        Objective::BinaryLogistic
    }
}

impl Doc {
    fn validate(self) -> Result<ParsedMlp, FormatError> {
        if self.format != MLP_FORMAT {
            return Err(FormatError::Unsupported(format!(
                "format {:?} (expected {MLP_FORMAT:?})",
                self.format
            )));
        }
        if self.format_version != MLP_FORMAT_VERSION {
            return Err(FormatError::Unsupported(format!(
                "format_version {} (this build reads {MLP_FORMAT_VERSION})",
                self.format_version
            )));
        }
        let activation = Activation::parse(&self.activation)?;
        if self.output != "logistic" {
            return Err(FormatError::Unsupported(format!(
                "output {:?} (supported: logistic, one unit giving P(class 1))",
                self.output
            )));
        }
        if self.impute.is_empty() {
            return Err(FormatError::invalid("impute", "no inputs"));
        }
        finite("impute", &self.impute)?;
        if !self.feature_names.is_empty() && self.feature_names.len() != self.impute.len() {
            return Err(FormatError::invalid(
                "feature_names",
                format!(
                    "{} names for {} inputs (impute)",
                    self.feature_names.len(),
                    self.impute.len()
                ),
            ));
        }
        if self.layers.is_empty() {
            return Err(FormatError::invalid("layers", "no layers"));
        }
        let last = self.layers.len() - 1;
        let mut inputs = self.impute.len();
        let mut layers = Vec::with_capacity(self.layers.len());
        for (l, layer) in self.layers.into_iter().enumerate() {
            let outputs = layer.bias.len();
            if outputs == 0 {
                return Err(FormatError::invalid(format!("layers[{l}].bias"), "no units"));
            }
            if layer.weights.len() != inputs {
                let from = if l == 0 {
                    "impute gives".to_string()
                } else {
                    format!("layers[{}] has", l - 1)
                };
                return Err(FormatError::invalid(
                    format!("layers[{l}].weights"),
                    format!("{} rows, but {from} {inputs} inputs", layer.weights.len()),
                ));
            }
            finite(&format!("layers[{l}].bias"), &layer.bias)?;
            let mut weights = Vec::with_capacity(inputs * outputs);
            for (j, row) in layer.weights.iter().enumerate() {
                let field = format!("layers[{l}].weights[{j}]");
                if row.len() != outputs {
                    return Err(FormatError::invalid(
                        field,
                        format!("{} values, but layers[{l}].bias has {outputs} units", row.len()),
                    ));
                }
                finite(&field, row)?;
                weights.extend_from_slice(row);
            }
            if l == last && outputs != 1 {
                return Err(FormatError::invalid(
                    format!("layers[{l}].bias"),
                    format!("the logistic output is one unit, found {outputs}"),
                ));
            }
            layers.push(DenseLayer {
                inputs,
                outputs,
                weights,
                bias: layer.bias,
            });
            inputs = outputs;
        }
        Ok(ParsedMlp {
            activation,
            feature_names: self.feature_names,
            impute: self.impute,
            layers,
        })
    }
}

fn finite(field: &str, values: &[f64]) -> Result<(), FormatError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(FormatError::invalid(format!("{field}[{i}]"), "not a finite number")),
        None => Ok(()),
    }
}

/// A dense network ready to evaluate rows in model order and scale.
#[derive(Debug, Clone)]
pub struct Mlp {
    activation: Activation,
    /// Per input, the model-space value (standardised training median) for NaN.
    impute: Vec<f64>,
    layers: Vec<DenseLayer>,
    /// The widest of the inputs and every layer: scratch size.
    width: usize,
}

impl Mlp {
    /// Prepare `parsed` for rows standardised with `scale` (per input `(mean,
    /// std)` or none, as the sidecar gives; missing entries mean none): each
    /// median becomes `(median - mean) / std`.
    pub fn new(parsed: &ParsedMlp, scale: &[Option<(f64, f64)>]) -> Self {
        let impute = parsed
            .impute
            .iter()
            .enumerate()
            .map(|(i, &median)| match scale.get(i).copied().flatten() {
                Some((mean, std)) => (median - mean) / std,
                None => median,
            })
            .collect();
        let width = parsed
            .layers
            .iter()
            .map(|l| l.outputs)
            .fold(parsed.impute.len(), usize::max);
        Mlp {
            activation: parsed.activation,
            impute,
            layers: parsed.layers.clone(),
            width,
        }
    }

    /// Parse and prepare a document for unstandardised rows.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        Ok(Self::new(&ParsedMlp::from_slice(bytes)?, &[]))
    }

    /// The output's meaning: [`Objective::BinaryLogistic`].
    pub fn objective(&self) -> Objective {
        Objective::BinaryLogistic
    }

    /// Values a row must have.
    pub fn num_features(&self) -> usize {
        self.impute.len()
    }

    /// Values a prediction has (1).
    pub fn num_outputs(&self) -> usize {
        1
    }

    /// The hidden layers' activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Units per layer, input size first: `[7, 128, 64, 1]` for §IV-E2's network.
    pub fn layer_sizes(&self) -> Vec<usize> {
        std::iter::once(self.impute.len())
            .chain(self.layers.iter().map(|l| l.outputs))
            .collect()
    }

    /// P(class 1) for one row in model order and scale (NaN = missing, takes
    /// the training median). `out` has one slot. Does not allocate for layers
    /// up to [`STACK_WIDTH`] wide. A `±inf` input is used as it is and may give
    /// NaN, which callers treat as no prediction.
    pub fn predict(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        let margin = self.margin(row, out)?;
        out[0] = sigmoid(margin) as f32;
        Ok(())
    }

    /// The output unit before the logistic function (the log-odds).
    pub fn predict_margin(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        let margin = self.margin(row, out)?;
        out[0] = margin as f32;
        Ok(())
    }

    fn margin(&self, row: &[f32], out: &[f32]) -> Result<f64, EvalError> {
        if row.len() != self.impute.len() {
            return Err(EvalError::RowLength {
                expected: self.impute.len(),
                got: row.len(),
            });
        }
        if out.len() != 1 {
            return Err(EvalError::OutputLength {
                expected: 1,
                got: out.len(),
            });
        }
        if self.width <= STACK_WIDTH {
            let mut scratch = [0f64; 2 * STACK_WIDTH];
            Ok(self.forward(row, &mut scratch))
        } else {
            Ok(WIDE.with(|buffer| match buffer.try_borrow_mut() {
                Ok(mut scratch) => {
                    scratch.resize(2 * self.width, 0.0);
                    self.forward(row, &mut scratch)
                }
                // Only reachable by re-entry, which the forward pass never does.
                Err(_) => self.forward(row, &mut vec![0.0; 2 * self.width]),
            }))
        }
    }

    /// The network on `row`, using `scratch` (at least `2 * width`) for two
    /// alternating activation vectors.
    fn forward(&self, row: &[f32], scratch: &mut [f64]) -> f64 {
        let (mut a, mut b) = scratch.split_at_mut(scratch.len() / 2);
        for ((slot, &x), &median) in a.iter_mut().zip(row).zip(&self.impute) {
            *slot = if x.is_nan() { median } else { f64::from(x) };
        }
        let mut width = row.len();
        let last = self.layers.len() - 1;
        for (l, layer) in self.layers.iter().enumerate() {
            let out = &mut b[..layer.outputs];
            layer.forward(&a[..width], out);
            if l != last {
                self.activation.apply(out);
            }
            width = layer.outputs;
            std::mem::swap(&mut a, &mut b);
        }
        a[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(activation: &str) -> serde_json::Value {
        json!({
            "format": MLP_FORMAT,
            "format_version": 1,
            "activation": activation,
            "output": "logistic",
            "impute": [1.0, 10.0],
            "layers": [
                {"weights": [[1.0, -1.0, 0.5], [0.0, 2.0, -0.25]], "bias": [0.1, -0.2, 0.0]},
                {"weights": [[1.0], [0.5], [-2.0]], "bias": [0.3]},
            ],
        })
    }

    fn reference(activation: fn(f64) -> f64, x: [f64; 2]) -> f64 {
        let h = [
            activation(0.1 + x[0]),
            activation(-0.2 - x[0] + 2.0 * x[1]),
            activation(0.5 * x[0] - 0.25 * x[1]),
        ];
        0.3 + h[0] + 0.5 * h[1] - 2.0 * h[2]
    }

    #[test]
    fn each_activation_computes_the_two_layer_formula() {
        type Function = fn(f64) -> f64;
        let cases: [(&str, Function); 4] = [
            ("relu", |v| v.max(0.0)),
            ("tanh", f64::tanh),
            ("logistic", sigmoid),
            ("identity", |v| v),
        ];
        for (name, f) in cases {
            let mlp = Mlp::from_json_slice(&serde_json::to_vec(&doc(name)).unwrap()).unwrap();
            assert_eq!(mlp.layer_sizes(), [2, 3, 1]);
            for x in [[0.5f32, -1.5], [-2.0, 0.25], [3.0, 1.0]] {
                let want = reference(f, [f64::from(x[0]), f64::from(x[1])]);
                let mut out = [0f32];
                mlp.predict_margin(&x, &mut out).unwrap();
                assert!(
                    (f64::from(out[0]) - want).abs() < 1e-6,
                    "{name} {x:?}: {} vs {want}",
                    out[0]
                );
                mlp.predict(&x, &mut out).unwrap();
                assert!((f64::from(out[0]) - sigmoid(want)).abs() < 1e-7, "{name} {x:?}");
            }
        }
    }

    #[test]
    fn a_missing_input_takes_the_standardised_median() {
        let parsed = ParsedMlp::from_slice(&serde_json::to_vec(&doc("relu")).unwrap()).unwrap();
        // Input 1 is standardised with mean 4, std 2: its median 10 becomes 3.
        let mlp = Mlp::new(&parsed, &[None, Some((4.0, 2.0))]);
        let (mut missing, mut given) = ([0f32], [0f32]);
        mlp.predict(&[0.5, f32::NAN], &mut missing).unwrap();
        mlp.predict(&[0.5, 3.0], &mut given).unwrap();
        assert_eq!(missing, given);
    }

    #[test]
    fn wide_layers_use_the_per_thread_buffer_and_agree() {
        let units = STACK_WIDTH + 10;
        let wide = json!({
            "format": MLP_FORMAT, "format_version": 1, "activation": "relu", "output": "logistic",
            "impute": [0.0],
            "layers": [
                {"weights": [vec![0.01; units]], "bias": vec![0.0; units]},
                {"weights": vec![vec![1.0]; units], "bias": [0.0]},
            ],
        });
        let mlp = Mlp::from_json_slice(&serde_json::to_vec(&wide).unwrap()).unwrap();
        let mut out = [0f32];
        mlp.predict_margin(&[2.0], &mut out).unwrap();
        assert!((out[0] - 0.02 * units as f32).abs() < 1e-4, "{}", out[0]);
    }
}
