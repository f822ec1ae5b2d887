//! # gearbox-policy — evaluating portable models in the data plane
//!
//! Trained models are files (docs/architecture.md principle 5). This crate evaluates the
//! tree ensembles among them in-process: a few hundred nanoseconds per row for
//! 50 trees, two to three microseconds for 300 trees of depth 7 (docs/models.md):
//!
//! * XGBoost boosters as XGBoost writes them (`Booster.save_model("m.json")`),
//!   objectives `binary:logistic`, `reg:squarederror` and `multi:softprob`
//!   (scalar leaves, or XGBoost's vector-leaf `multi_output_tree`) — the
//!   WiseTrans network monitor (WiseTrans §III-C) is one of these;
//! * scikit-learn forests and trees converted to the same JSON shape by
//!   `python/gearbox/models/sklearn_to_json.py` (objective `gearbox:forest_proba`).
//!
//! and one small dense network: a scikit-learn `MLPClassifier` with a logistic
//! output, exported by `python/gearbox/models/mlp_to_json.py` in our own JSON
//! format (`"format": "gearbox-mlp"`, [`mlp`]) — the 128-64 MLP that WiseTrans
//! §IV-E2 compares with XGBoost as the network monitor — and Floo's actor (Floo
//! §3.3, Appendix D: 200 Leaky ReLU units, a softmax over the controllers,
//! objective `multi:softprob`; [`Model::predict_class`] gives the greedy
//! choice). It is hand-written (a few dense layers in `f64`) rather than run by
//! tract, which would need an ONNX export step (`skl2onnx`, not among our
//! dependencies).
//!
//! Every model comes with a sidecar, `m.meta.json` ([`ModelMeta`]): feature
//! names and order, optional standardisation, objective, class labels, model
//! version and the sha256 of the training data. [`Model::load`] reads both,
//! whichever kind the model is, and checks that they agree; [`Model::row`]
//! builds the input by feature name.
//!
//! Why not tract or the `gbdt` crate (docs/architecture.md "Choices made"): tract
//! scans tree leaves linearly (milliseconds per row for these models) and
//! rejects XGBoost's binary exports; `gbdt` reads neither XGBoost's own JSON nor
//! per-class base scores. The format is XGBoost's, so no conversion step sits
//! between training and serving, and the shipped test vectors check agreement
//! with the Python libraries value for value.
//!
//! Nothing here panics on bad input: files give [`ModelError`]s naming the file
//! and the field, evaluation gives [`EvalError`]s, and [`ModelOrFallback`] turns
//! either into one logged warning and `None`, so the gear uses its documented
//! static choice.
//!
//! ```no_run
//! use gearbox_policy::ModelOrFallback;
//!
//! let monitor = ModelOrFallback::load("transport", "models/wisetrans_tcp.json");
//! let mut p = [0.0f32];
//! let quic = match monitor.model() {
//!     Some(model) => {
//!         let row = model.row([("retran_rate", 0.02), ("rtt_avg_ms", 85.0)]);
//!         monitor.predict(&row, &mut p).is_some_and(|p| p[0] > 0.5)
//!     }
//!     None => false, // static default: TCP
//! };
//! # let _ = quic;
//! ```
//!
//! Formats, objectives and measured speed: docs/models.md.

pub mod ensemble;
pub mod error;
pub mod meta;
pub mod mlp;
pub mod model;
pub mod synthetic;
pub mod xgboost_json;

pub use ensemble::TreeEnsemble;
pub use error::{EvalError, FormatError, ModelError};
pub use meta::{sha256_file, FeatureSpec, ModelMeta, TrainingData, META_FORMAT_VERSION};
pub use mlp::{Activation, Mlp, Output, ParsedMlp, MLP_FORMAT};
pub use model::{FeatureRow, Model, ModelOrFallback};
pub use xgboost_json::{Objective, ParsedModel, FOREST_PROBA};
