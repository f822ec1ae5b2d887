"""Export a scikit-learn MLP classifier as a `gearbox-mlp` model file plus sidecar.

The Rust evaluator (`crates/gearbox-policy/src/mlp.rs`) reads a small JSON format
of our own rather than ONNX: scikit-learn writes no ONNX without `skl2onnx`, which
is not among our dependencies, and two dense layers need no runtime. Schema:
docs/models.md, "Dense networks". From a fitted pipeline

    SimpleImputer -> StandardScaler (optional) -> MLPClassifier (two classes)

the export writes

* `m.json`: `format`, `format_version`, `activation` (hidden layers), `output`
  ("logistic": one unit, P(class 1)), `feature_names`, `impute` (the imputer's
  `statistics_`, raw units: what a missing input becomes before standardising),
  `layers[l].weights` (`coefs_[l]` as it is: one row per input, one column per
  unit) and `layers[l].bias` (`intercepts_[l]`), and an informational `info`;
* `m.meta.json`: the usual sidecar, objective "binary:logistic", with the
  scaler's `mean_`/`scale_` as each feature's `mean`/`std` (the same place a tree
  model keeps its standardisation, so the Rust `Model::set` treats both alike).

Floats are written with Python's shortest round-trip repr, so the file holds
exactly the float64 weights scikit-learn computes with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from gearbox.models.sidecar import Feature, Sidecar, write_sidecar

FORMAT = "gearbox-mlp"
FORMAT_VERSION = 1
OBJECTIVE = "binary:logistic"


def _parts(model: Any) -> tuple[Any, Any | None, Any]:
    """(imputer, scaler or None, classifier) of a pipeline, checked."""
    from sklearn.impute import SimpleImputer
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    steps = [s for _, s in model.steps] if isinstance(model, Pipeline) else [model]
    if not steps or not isinstance(steps[-1], MLPClassifier):
        raise ValueError("the last step must be a fitted MLPClassifier")
    if not isinstance(steps[0], SimpleImputer):
        raise ValueError("the first step must be a SimpleImputer: the evaluator replaces NaN by its statistics_")
    middle = steps[1:-1]
    if len(middle) > 1 or (middle and not isinstance(middle[0], StandardScaler)):
        raise ValueError(f"only SimpleImputer -> [StandardScaler] -> MLPClassifier is exported, got {steps}")
    imputer, clf = steps[0], steps[-1]
    if imputer.add_indicator:
        raise ValueError("SimpleImputer(add_indicator=True) is not exported")
    if clf.out_activation_ != "logistic" or clf.n_outputs_ != 1 or len(clf.classes_) != 2:
        raise ValueError(f"a two-class classifier with a logistic output is needed, got {clf.out_activation_}")
    return imputer, (middle[0] if middle else None), clf


def mlp_to_json(model: Any, names: list[str]) -> tuple[dict, list[Feature]]:
    """The model document and the sidecar's features (with standardisation)."""
    import sklearn

    imputer, scaler, clf = _parts(model)
    medians = np.asarray(imputer.statistics_, dtype=np.float64)
    if len(names) != len(medians):
        raise ValueError(f"{len(names)} feature names for a model with {len(medians)} inputs")
    empty = [n for n, v in zip(names, medians, strict=True) if not np.isfinite(v)]
    if empty:
        raise ValueError(f"no training values to impute from for {empty}")
    if clf.coefs_[0].shape[0] != len(names):
        raise ValueError(f"the network takes {clf.coefs_[0].shape[0]} inputs, {len(names)} names given")
    features = [Feature(n) for n in names]
    if scaler is not None:
        n = len(names)
        mean = scaler.mean_ if scaler.with_mean else np.zeros(n)
        scale = scaler.scale_ if scaler.with_std else np.ones(n)
        features = [Feature(name, float(m), float(s)) for name, m, s in zip(names, mean, scale, strict=True)]
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "activation": clf.activation,
        "output": "logistic",
        "feature_names": list(names),
        "impute": [float(v) for v in medians],
        "layers": [
            {"weights": np.asarray(w, dtype=np.float64).tolist(), "bias": np.asarray(b, dtype=np.float64).tolist()}
            for w, b in zip(clf.coefs_, clf.intercepts_, strict=True)
        ],
        "info": {
            "trainer": f"scikit-learn {sklearn.__version__} MLPClassifier",
            "hidden_layer_sizes": [int(w.shape[1]) for w in clf.coefs_[:-1]],
            "n_iter": int(clf.n_iter_),
            "classes": [c.item() if hasattr(c, "item") else c for c in clf.classes_],
        },
    }
    return doc, features


def save_mlp(
    model: Any,
    path: str | Path,
    names: list[str],
    *,
    model_version: str,
    training_data_sha256: str,
    training_data_file: str | None = None,
    training_rows: int | None = None,
    class_labels: list[str] | None = None,
    trainer: str | None = None,
) -> Path:
    """Write `path` and its sidecar; returns the model path."""
    doc, features = mlp_to_json(model, names)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")
    write_sidecar(
        path,
        Sidecar(
            model_version=model_version,
            objective=OBJECTIVE,
            features=features,
            training_data_sha256=training_data_sha256,
            training_data_file=training_data_file,
            training_rows=training_rows,
            class_labels=list(class_labels or []),
            trainer=trainer,
        ),
    )
    return path


def predict_json(doc: dict, features: list[Feature], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(class 1), margin) for raw rows, by the rule docs/models.md gives, in plain
    NumPy: NaN -> impute, standardise, dense layers, logistic. A reference for tests."""
    x = np.array(x, dtype=np.float64)
    x = np.where(np.isnan(x), np.asarray(doc["impute"]), x)
    for i, f in enumerate(features):
        if f.mean is not None and f.std is not None:
            x[:, i] = (x[:, i] - f.mean) / f.std
    act = {
        "relu": lambda v: np.maximum(v, 0.0),
        "tanh": np.tanh,
        "logistic": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "identity": lambda v: v,
    }[doc["activation"]]
    layers = doc["layers"]
    for i, layer in enumerate(layers):
        x = x @ np.asarray(layer["weights"]) + np.asarray(layer["bias"])
        if i < len(layers) - 1:
            x = act(x)
    margin = x[:, 0]
    return 1.0 / (1.0 + np.exp(-margin)), margin
