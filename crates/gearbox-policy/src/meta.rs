//! The JSON sidecar that travels with every model file (docs/architecture.md principle 5).
//!
//! `m.json` is the model as the training library wrote it; `m.meta.json` says
//! how to feed it: feature names in column order, optional per-feature
//! standardisation, the objective, class labels, the model's version and the
//! sha256 of the file it was trained on. Unknown fields are refused so a typo
//! cannot silently drop a normalisation; `format_version` lets the schema grow.
//! Written by `python/gearbox/models/sidecar.py`; schema in docs/models.md.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{FormatError, ModelError};

/// The sidecar schema version this crate reads.
pub const META_FORMAT_VERSION: u32 = 1;

/// Contents of `<model>.meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelMeta {
    /// Schema version; must be [`META_FORMAT_VERSION`].
    pub format_version: u32,
    /// Free-form version of this model (shown in logs and telemetry reasons).
    pub model_version: String,
    /// Objective name; must equal the model file's `learner.objective.name`.
    pub objective: String,
    /// Input columns in model order.
    pub features: Vec<FeatureSpec>,
    /// Name of each output class, in output order (classifiers only; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub class_labels: Vec<String>,
    /// The data the model was trained on.
    pub training_data: TrainingData,
    /// What produced the model (script and library version); informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<String>,
}

/// One input column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// Column name, as used by [`crate::Model::set`].
    pub name: String,
    /// Subtracted before the model sees the value (with `std`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Divides `value - mean`; > 0 (with `mean`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<f64>,
}

/// Where the training data came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingData {
    /// sha256 of the training data file, 64 lowercase hex digits.
    pub sha256: String,
    /// The file's name (informational; the digest is what identifies it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Rows trained on (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

impl ModelMeta {
    /// Parse and check a sidecar document on its own (agreement with the model
    /// is checked by [`crate::Model::load`]).
    pub fn from_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        let meta: ModelMeta = serde_json::from_slice(bytes)?;
        meta.validate()?;
        Ok(meta)
    }

    /// Read a sidecar file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_slice(&bytes).map_err(|e| ModelError::format(path, e))
    }

    /// The sidecar path for a model path: `m.json` -> `m.meta.json`
    /// (any other name gets `.meta.json` appended).
    pub fn path_for(model_path: impl AsRef<Path>) -> PathBuf {
        let model_path = model_path.as_ref();
        let name = model_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.strip_suffix(".json").unwrap_or(&name);
        model_path.with_file_name(format!("{stem}.meta.json"))
    }

    /// Check that `path` is the training data this model records (by sha256).
    pub fn verify_training_data(&self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        let path = path.as_ref();
        let actual = sha256_file(path)?;
        if actual == self.training_data.sha256 {
            Ok(())
        } else {
            Err(ModelError::DigestMismatch {
                path: path.to_path_buf(),
                expected: self.training_data.sha256.clone(),
                actual,
            })
        }
    }

    fn validate(&self) -> Result<(), FormatError> {
        if self.format_version != META_FORMAT_VERSION {
            return Err(FormatError::Unsupported(format!(
                "format_version {} (this build reads {META_FORMAT_VERSION})",
                self.format_version
            )));
        }
        if self.model_version.trim().is_empty() {
            return Err(FormatError::invalid("model_version", "empty"));
        }
        if self.features.is_empty() {
            return Err(FormatError::invalid("features", "no features"));
        }
        let mut seen = HashSet::new();
        for (i, f) in self.features.iter().enumerate() {
            let field = |name: &str| format!("features[{i}].{name}");
            if f.name.is_empty() {
                return Err(FormatError::invalid(field("name"), "empty"));
            }
            if !seen.insert(f.name.as_str()) {
                return Err(FormatError::invalid(
                    field("name"),
                    format!("{:?} appears twice", f.name),
                ));
            }
            match (f.mean, f.std) {
                (None, None) => {}
                (Some(mean), Some(std)) => {
                    if !mean.is_finite() {
                        return Err(FormatError::invalid(field("mean"), "not finite"));
                    }
                    if !(std.is_finite() && std > 0.0) {
                        return Err(FormatError::invalid(
                            field("std"),
                            format!("{std} is not a positive number"),
                        ));
                    }
                }
                _ => return Err(FormatError::invalid(field("std"), "give both mean and std, or neither")),
            }
        }
        let digest = &self.training_data.sha256;
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(FormatError::invalid(
                "training_data.sha256",
                "not 64 lowercase hex digits",
            ));
        }
        let mut labels = HashSet::new();
        for (i, label) in self.class_labels.iter().enumerate() {
            if !labels.insert(label.as_str()) {
                return Err(FormatError::invalid(
                    format!("class_labels[{i}]"),
                    format!("{label:?} appears twice"),
                ));
            }
        }
        Ok(())
    }
}

/// Hex sha256 of a file's bytes (the sidecar's training-data digest).
pub fn sha256_file(path: impl AsRef<Path>) -> Result<String, ModelError> {
    let path = path.as_ref();
    let read_err = |source| ModelError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(read_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
