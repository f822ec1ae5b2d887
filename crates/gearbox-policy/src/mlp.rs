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
//! (`decision_bench`, docs/wisetrans.md "Decision cost"); Floo's 16 -> 200 -> 4
//! actor takes ~1.0 µs per decision (`mlp_bench`, docs/models.md "Speed").
//!
//! **Why by hand and not tract** (docs/architecture.md "Choices made" keeps tract
//! out for trees too): tract reads ONNX or NNEF, and scikit-learn writes
//! neither; the export would need `skl2onnx`, which is not among our
//! dependencies, plus an ONNX runtime graph for two matrix products. Two dense
//! layers are ~100 lines here, and a JSON of `coefs_` needs no conversion
//! library to write or to audit.
//!
//! A second model uses the format: Floo's actor (Floo §3.3 and Appendix D: one
//! hidden layer of 200 units with Leaky ReLU, a softmax over the congestion
//! controllers), exported by `python/gearbox/floo/export.py` from a flax
//! network. For it the format has the `leaky_relu` activation, whose negative
//! slope the file states (`negative_slope`; flax's default is 0.01), and a
//! `softmax` output of `num_class` units.
//!
//! **Objective.** A `logistic` output is one unit, P(class 1): exactly the
//! contract of [`Objective::BinaryLogistic`], which is what [`Mlp::objective`]
//! reports and what the sidecar must say (`"binary:logistic"`). A `softmax`
//! output of K units is [`Objective::MultiSoftprob`] with `num_class` K, XGBoost's
//! name for "one probability per class" (`"multi:softprob"` in the sidecar), so
//! a multi-class network and a multi-class booster are fed and read alike.
//! Rejected: new objective names such as `gearbox:mlp_logistic`, which would
//! make every consumer that asks "is this a binary classifier?" (the WiseTrans
//! monitor) learn a second name for the same thing. Which evaluator a model
//! needs is the model file's business (`format`), not the objective's.
//!
//! Nothing panics on bad input: [`ParsedMlp::from_slice`] refuses wrong
//! lengths, layer sizes that do not chain, an output layer whose width is not
//! the output's (`num_class`), non-finite numbers and unknown fields with a
//! [`FormatError`] naming the field.

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

/// The hidden layers' activation (scikit-learn's `activation` names, plus
/// `leaky_relu`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(0, x)` (scikit-learn's default).
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Logistic,
    /// `x`.
    Identity,
    /// `x` for `x >= 0`, `negative_slope * x` below (flax's `nn.leaky_relu`,
    /// default slope 0.01; Floo Appendix D's hidden layers).
    LeakyRelu {
        /// The factor applied to negative inputs (the file's `negative_slope`).
        negative_slope: f64,
    },
}

impl Activation {
    /// The name used in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Logistic => "logistic",
            Activation::Identity => "identity",
            Activation::LeakyRelu { .. } => "leaky_relu",
        }
    }

    /// The activation named `name`; `negative_slope` is required for
    /// `leaky_relu` and refused for the others (so a slope is never silently
    /// ignored, nor silently defaulted).
    fn parse(name: &str, negative_slope: Option<f64>) -> Result<Self, FormatError> {
        let activation = match name {
            "relu" => Activation::Relu,
            "tanh" => Activation::Tanh,
            "logistic" => Activation::Logistic,
            "identity" => Activation::Identity,
            "leaky_relu" => {
                let Some(negative_slope) = negative_slope else {
                    return Err(FormatError::invalid(
                        "negative_slope",
                        "missing: activation \"leaky_relu\" needs its negative slope (flax's default is 0.01)",
                    ));
                };
                if !negative_slope.is_finite() {
                    return Err(FormatError::invalid("negative_slope", "not a finite number"));
                }
                return Ok(Activation::LeakyRelu { negative_slope });
            }
            other => {
                return Err(FormatError::Unsupported(format!(
                    "activation {other:?} (supported: relu, tanh, logistic, identity, leaky_relu)"
                )))
            }
        };
        match negative_slope {
            Some(_) => Err(FormatError::invalid(
                "negative_slope",
                format!("given, but activation {name:?} has no negative slope (only leaky_relu does)"),
            )),
            None => Ok(activation),
        }
    }

    fn apply(self, values: &mut [f64]) {
        match self {
            Activation::Relu => values.iter_mut().for_each(|v| *v = v.max(0.0)),
            Activation::Tanh => values.iter_mut().for_each(|v| *v = v.tanh()),
            Activation::Logistic => values.iter_mut().for_each(|v| *v = sigmoid(*v)),
            Activation::Identity => {}
            Activation::LeakyRelu { negative_slope } => values
                .iter_mut()
                .for_each(|v| *v = if *v >= 0.0 { *v } else { negative_slope * *v }),
        }
    }
}

/// What the last layer's units mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// One unit, its logistic function P(class 1) ([`Objective::BinaryLogistic`]).
    Logistic,
    /// `num_class` units, their softmax one probability per class
    /// ([`Objective::MultiSoftprob`]).
    Softmax {
        /// Classes (units of the last layer), at least 2.
        num_class: usize,
    },
}

impl Output {
    /// The name used in the file.
    pub fn name(&self) -> &'static str {
        match self {
            Output::Logistic => "logistic",
            Output::Softmax { .. } => "softmax",
        }
    }

    /// Units of the last layer.
    pub fn units(&self) -> usize {
        match self {
            Output::Logistic => 1,
            Output::Softmax { num_class } => *num_class,
        }
    }

    /// The objective this output fulfils.
    pub fn objective(&self) -> Objective {
        match self {
            Output::Logistic => Objective::BinaryLogistic,
            Output::Softmax { num_class } => Objective::MultiSoftprob { num_class: *num_class },
        }
    }

    /// The output named `name`; `num_class` is required for `softmax` and
    /// refused for `logistic`.
    fn parse(name: &str, num_class: Option<u64>) -> Result<Self, FormatError> {
        match (name, num_class) {
            ("logistic", None) => Ok(Output::Logistic),
            ("logistic", Some(n)) => Err(FormatError::invalid(
                "num_class",
                format!("{n} given, but the logistic output is one unit, P(class 1); use \"softmax\" for classes"),
            )),
            ("softmax", None) => Err(FormatError::invalid(
                "num_class",
                "missing: output \"softmax\" needs the number of classes",
            )),
            ("softmax", Some(n)) if n < 2 => Err(FormatError::invalid(
                "num_class",
                format!("softmax needs at least 2 classes, got {n}"),
            )),
            ("softmax", Some(n)) => match usize::try_from(n) {
                Ok(num_class) => Ok(Output::Softmax { num_class }),
                Err(_) => Err(FormatError::invalid("num_class", format!("{n} is too large"))),
            },
            (other, _) => Err(FormatError::Unsupported(format!(
                "output {other:?} (supported: logistic, one unit giving P(class 1); softmax, num_class units)"
            ))),
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
    /// Required with `leaky_relu`, refused otherwise.
    #[serde(default)]
    negative_slope: Option<f64>,
    output: String,
    /// Required with `softmax`, refused otherwise.
    #[serde(default)]
    num_class: Option<u64>,
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
    output: Output,
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

    /// The layers, input first; the last is the output layer.
    pub fn layers(&self) -> &[DenseLayer] {
        &self.layers
    }

    /// What the last layer's units mean.
    pub fn output(&self) -> Output {
        self.output
    }

    /// What the output means: [`Objective::BinaryLogistic`] for a logistic
    /// output, [`Objective::MultiSoftprob`] for a softmax.
    pub fn objective(&self) -> Objective {
        self.output.objective()
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
        let activation = Activation::parse(&self.activation, self.negative_slope)?;
        let output = Output::parse(&self.output, self.num_class)?;
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
            if l == last && outputs != output.units() {
                return Err(FormatError::invalid(
                    format!("layers[{l}].bias"),
                    match output {
                        Output::Logistic => format!("the logistic output is one unit, found {outputs}"),
                        Output::Softmax { num_class } => {
                            format!("the softmax output has num_class = {num_class} units, found {outputs}")
                        }
                    },
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
            output,
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
    output: Output,
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
            output: parsed.output,
            impute,
            layers: parsed.layers.clone(),
            width,
        }
    }

    /// Parse and prepare a document for unstandardised rows.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        Ok(Self::new(&ParsedMlp::from_slice(bytes)?, &[]))
    }

    /// The output's meaning: [`Objective::BinaryLogistic`] (logistic output) or
    /// [`Objective::MultiSoftprob`] (softmax output).
    pub fn objective(&self) -> Objective {
        self.output.objective()
    }

    /// What the last layer's units mean.
    pub fn output(&self) -> Output {
        self.output
    }

    /// Values a row must have.
    pub fn num_features(&self) -> usize {
        self.impute.len()
    }

    /// Values a prediction has: 1 for a logistic output, `num_class` for a
    /// softmax.
    pub fn num_outputs(&self) -> usize {
        self.output.units()
    }

    /// The hidden layers' activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Units per layer, input size first: `[7, 128, 64, 1]` for WiseTrans
    /// §IV-E2's network, `[16, 200, 4]` for Floo's actor.
    pub fn layer_sizes(&self) -> Vec<usize> {
        std::iter::once(self.impute.len())
            .chain(self.layers.iter().map(|l| l.outputs))
            .collect()
    }

    /// The prediction for one row in model order and scale (NaN = missing,
    /// takes the training median): P(class 1) for a logistic output, one
    /// probability per class (summing to 1) for a softmax. `out` has
    /// [`num_outputs`](Self::num_outputs) slots. Does not allocate for layers
    /// up to [`STACK_WIDTH`] wide. A `±inf` input is used as it is and may give
    /// NaN, which callers treat as no prediction.
    pub fn predict(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        self.check_out(out)?;
        let output = self.output;
        self.evaluate(row, |z| match output {
            Output::Logistic => out[0] = sigmoid(z[0]) as f32,
            Output::Softmax { .. } => {
                // Shifted by the largest logit so exp never overflows.
                let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                z.iter_mut().for_each(|v| *v = (*v - top).exp());
                let sum: f64 = z.iter().sum();
                out.iter_mut().zip(z.iter()).for_each(|(o, v)| *o = (v / sum) as f32);
            }
        })
    }

    /// The output units before the logistic function or the softmax: the
    /// log-odds, or one logit per class.
    pub fn predict_margin(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        self.check_out(out)?;
        self.evaluate(row, |z| out.iter_mut().zip(z.iter()).for_each(|(o, v)| *o = *v as f32))
    }

    /// The most likely class for one row: the index of the largest logit of a
    /// softmax (the first one on a tie, like `numpy.argmax`), or `1` if
    /// P(class 1) > 0.5 for a logistic output. Compared in `f64` before any
    /// rounding, so it is the greedy action of the network the file holds.
    /// A row giving NaN logits answers class 0.
    pub fn predict_class(&self, row: &[f32]) -> Result<usize, EvalError> {
        let output = self.output;
        self.evaluate(row, |z| match output {
            Output::Logistic => usize::from(z[0] > 0.0),
            Output::Softmax { .. } => argmax(z),
        })
    }

    fn check_out(&self, out: &[f32]) -> Result<(), EvalError> {
        let expected = self.output.units();
        if out.len() != expected {
            return Err(EvalError::OutputLength {
                expected,
                got: out.len(),
            });
        }
        Ok(())
    }

    /// Run the network on `row` and hand the last layer's values (before the
    /// output function) to `finish`.
    fn evaluate<R>(&self, row: &[f32], finish: impl FnOnce(&mut [f64]) -> R) -> Result<R, EvalError> {
        if row.len() != self.impute.len() {
            return Err(EvalError::RowLength {
                expected: self.impute.len(),
                got: row.len(),
            });
        }
        if self.width <= STACK_WIDTH {
            let mut scratch = [0f64; 2 * STACK_WIDTH];
            Ok(finish(self.forward(row, &mut scratch)))
        } else {
            Ok(WIDE.with(|buffer| match buffer.try_borrow_mut() {
                Ok(mut scratch) => {
                    scratch.resize(2 * self.width, 0.0);
                    finish(self.forward(row, &mut scratch))
                }
                // Only reachable by re-entry, which the forward pass never does.
                Err(_) => finish(self.forward(row, &mut vec![0.0; 2 * self.width])),
            }))
        }
    }

    /// The network on `row`, using `scratch` (at least `2 * width`) for two
    /// alternating activation vectors; returns the last layer's values.
    fn forward<'s>(&self, row: &[f32], scratch: &'s mut [f64]) -> &'s mut [f64] {
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
        &mut a[..width]
    }
}

/// Index of the largest value, the first on a tie; NaN never wins (0 if all are NaN).
fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] || (values[best].is_nan() && !v.is_nan()) {
            best = i;
        }
    }
    best
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
    fn leaky_relu_scales_negative_inputs_by_the_stated_slope() {
        let mut leaky = doc("leaky_relu");
        leaky["negative_slope"] = json!(0.01);
        let mlp = Mlp::from_json_slice(&serde_json::to_vec(&leaky).unwrap()).unwrap();
        assert_eq!(mlp.activation(), Activation::LeakyRelu { negative_slope: 0.01 });
        let f = |v: f64| if v >= 0.0 { v } else { 0.01 * v };
        for x in [[0.5f32, -1.5], [-2.0, 0.25], [3.0, 1.0]] {
            let want = reference(f, [f64::from(x[0]), f64::from(x[1])]);
            let mut out = [0f32];
            mlp.predict_margin(&x, &mut out).unwrap();
            assert!((f64::from(out[0]) - want).abs() < 1e-6, "{x:?}: {} vs {want}", out[0]);
        }
        // Slope 0 is ReLU: the same network gives ReLU's margins.
        leaky["negative_slope"] = json!(0.0);
        let zero = Mlp::from_json_slice(&serde_json::to_vec(&leaky).unwrap()).unwrap();
        let relu = Mlp::from_json_slice(&serde_json::to_vec(&doc("relu")).unwrap()).unwrap();
        let (mut a, mut b) = ([0f32], [0f32]);
        zero.predict_margin(&[-2.0, 0.25], &mut a).unwrap();
        relu.predict_margin(&[-2.0, 0.25], &mut b).unwrap();
        assert_eq!(a, b);
    }

    /// `doc`'s hidden layer with a 3-class softmax on top.
    fn softmax_doc() -> serde_json::Value {
        let mut d = doc("tanh");
        d["output"] = json!("softmax");
        d["num_class"] = json!(3);
        d["layers"][1] = json!({
            "weights": [[1.0, 0.0, -1.0], [0.5, 2.0, 0.0], [-2.0, 1.0, 0.5]],
            "bias": [0.3, -0.1, 0.0],
        });
        d
    }

    #[test]
    fn a_softmax_output_gives_one_probability_per_class_and_the_argmax() {
        let mlp = Mlp::from_json_slice(&serde_json::to_vec(&softmax_doc()).unwrap()).unwrap();
        assert_eq!(mlp.num_outputs(), 3);
        assert_eq!(mlp.objective(), Objective::MultiSoftprob { num_class: 3 });
        assert_eq!(mlp.layer_sizes(), [2, 3, 3]);
        for x in [[0.5f32, -1.5], [-2.0, 0.25], [3.0, 1.0], [0.0, 0.0]] {
            let (x0, x1) = (f64::from(x[0]), f64::from(x[1]));
            let h = [
                (0.1 + x0).tanh(),
                (-0.2 - x0 + 2.0 * x1).tanh(),
                (0.5 * x0 - 0.25 * x1).tanh(),
            ];
            let z = [
                0.3 + h[0] + 0.5 * h[1] - 2.0 * h[2],
                -0.1 + 2.0 * h[1] + h[2],
                -h[0] + 0.5 * h[2],
            ];
            let sum: f64 = z.iter().map(|v| v.exp()).sum();
            let (mut p, mut logits) = ([0f32; 3], [0f32; 3]);
            mlp.predict(&x, &mut p).unwrap();
            mlp.predict_margin(&x, &mut logits).unwrap();
            for k in 0..3 {
                assert!((f64::from(logits[k]) - z[k]).abs() < 1e-6, "{x:?} logit {k}");
                assert!((f64::from(p[k]) - z[k].exp() / sum).abs() < 1e-7, "{x:?} p {k}");
            }
            assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
            let best = (0..3).fold(0, |b, k| if z[k] > z[b] { k } else { b });
            assert_eq!(mlp.predict_class(&x).unwrap(), best, "{x:?}");
        }
        // Huge logits do not overflow exp.
        let mut big = softmax_doc();
        big["layers"][1]["bias"] = json!([1000.0, 999.0, -1000.0]);
        let mlp = Mlp::from_json_slice(&serde_json::to_vec(&big).unwrap()).unwrap();
        let mut p = [0f32; 3];
        mlp.predict(&[0.0, 0.0], &mut p).unwrap();
        assert!(p.iter().all(|v| v.is_finite()) && p[0] > p[1] && p[2] == 0.0, "{p:?}");
        assert_eq!(mlp.predict_class(&[0.0, 0.0]).unwrap(), 0);
        // The output buffer must have num_class slots.
        assert_eq!(
            mlp.predict(&[0.0, 0.0], &mut [0f32; 1]),
            Err(EvalError::OutputLength { expected: 3, got: 1 })
        );
    }

    #[test]
    fn argmax_takes_the_first_of_equals_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[f64::NAN, 2.0, 1.0]), 1);
        assert_eq!(argmax(&[f64::NAN, f64::NAN]), 0);
    }

    #[test]
    fn output_and_activation_fields_are_checked_against_each_other() {
        let refuse = |d: serde_json::Value, want: &str| {
            let err = ParsedMlp::from_slice(&serde_json::to_vec(&d).unwrap()).unwrap_err();
            assert!(err.to_string().contains(want), "{err} lacks {want:?}");
        };
        let mut d = softmax_doc();
        d["num_class"] = json!(4);
        refuse(d, "layers[1].bias: the softmax output has num_class = 4 units, found 3");
        let mut d = softmax_doc();
        d.as_object_mut().unwrap().remove("num_class");
        refuse(d, "num_class: missing");
        let mut d = softmax_doc();
        d["num_class"] = json!(1);
        refuse(d, "num_class: softmax needs at least 2 classes, got 1");
        let mut d = doc("relu");
        d["num_class"] = json!(2);
        refuse(d, "num_class: 2 given, but the logistic output is one unit");
        refuse(doc("leaky_relu"), "negative_slope: missing");
        let mut d = doc("relu");
        d["negative_slope"] = json!(0.01);
        refuse(d, "negative_slope: given, but activation \"relu\"");
        let mut d = doc("tanh");
        d["output"] = json!("identity");
        refuse(d, "output \"identity\"");
        // JSON has no infinity; an overflowing number is refused by the parser.
        let mut d = doc("leaky_relu");
        d["negative_slope"] = json!(0.123);
        let text = serde_json::to_string(&d).unwrap().replace("0.123", "1e999");
        assert!(text.contains("1e999"));
        assert!(ParsedMlp::from_slice(text.as_bytes()).is_err());
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
