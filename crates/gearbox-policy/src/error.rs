//! Typed errors. Loading never panics: every problem with a model or sidecar file
//! comes back as a [`ModelError`] that names the file and what is wrong with it,
//! so a gear can log it and fall back to its static choice
//! ([`crate::ModelOrFallback`]).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// What is wrong with the content of a model or sidecar document, without the
/// file name (see [`ModelError::Format`], which adds it).
#[derive(Debug, Error)]
pub enum FormatError {
    /// Not JSON, or JSON of the wrong shape; serde_json's message carries the
    /// line and column.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A field is present but its value cannot be right.
    #[error("{field}: {reason}")]
    Invalid {
        /// Dotted path of the field, e.g. `learner.gradient_booster.model.trees[3].left_children[7]`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A well-formed feature this evaluator does not implement (categorical
    /// splits, gblinear, an objective it does not know, ...).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl FormatError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FormatError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A model, sidecar or data file that cannot be used.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The file could not be read (missing, permissions, ...).
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its content is not a usable model or sidecar.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: FormatError,
    },
    /// Model and sidecar are each valid but do not belong together.
    #[error("{} does not match {}: {reason}", sidecar.display(), model.display())]
    Mismatch {
        /// The model file.
        model: PathBuf,
        /// The sidecar file.
        sidecar: PathBuf,
        /// What disagrees (objective, feature count, feature names, labels).
        reason: String,
    },
    /// A data file's sha256 is not the one the sidecar records.
    #[error("{}: sha256 is {actual}, sidecar records {expected}", path.display())]
    DigestMismatch {
        /// The data file that was hashed.
        path: PathBuf,
        /// Digest recorded in the sidecar.
        expected: String,
        /// Digest of the file as it is.
        actual: String,
    },
}

impl ModelError {
    /// The file the error is about (the sidecar, for a mismatch).
    pub fn path(&self) -> &Path {
        match self {
            ModelError::Read { path, .. } | ModelError::Format { path, .. } => path,
            ModelError::DigestMismatch { path, .. } => path,
            ModelError::Mismatch { sidecar, .. } => sidecar,
        }
    }

    pub(crate) fn format(path: &Path, source: FormatError) -> Self {
        ModelError::Format {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A call to evaluate a model was given buffers of the wrong size.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EvalError {
    /// The feature row does not have the model's number of features.
    #[error("feature row has {got} values, the model takes {expected}")]
    RowLength {
        /// Features the model takes.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// The output buffer does not have the model's number of outputs.
    #[error("output buffer has {got} slots, the model produces {expected}")]
    OutputLength {
        /// Outputs the model produces.
        expected: usize,
        /// Slots given.
        got: usize,
    },
    /// The feature row was built by a different model (another feature layout).
    #[error("feature row was built for a model with a different feature layout")]
    ForeignRow,
    /// A class was asked of a model that has none (regression).
    #[error("the model is a regression ({objective}), it has no classes")]
    NotAClassifier {
        /// The model's objective.
        objective: &'static str,
    },
}
