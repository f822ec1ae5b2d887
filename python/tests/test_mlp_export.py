"""MLP export for the Rust evaluator (`gearbox-mlp`, docs/models.md "Dense networks").

The chain that ties the Rust evaluator to scikit-learn without building the extension:
`predict_json` (the format's rule in NumPy) reproduces `predict_proba` on a freshly
exported pipeline and on the shipped test vector, and `cargo test -p gearbox-policy
--test vectors` checks the Rust evaluator against the same shipped vector.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from gearbox.models.mlp_to_json import FORMAT, mlp_to_json, predict_json, save_mlp  # noqa: E402
from gearbox.models.sidecar import Feature  # noqa: E402

VECTORS = Path(__file__).resolve().parents[2] / "crates/gearbox-policy/tests/vectors"


def pipeline(hidden: tuple[int, ...] = (8, 4), seed: int = 0) -> object:
    return make_pipeline(
        SimpleImputer(strategy="median"),
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=hidden, max_iter=300, random_state=seed),
    )


def data(n: int = 400, k: int = 4, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k)) * [1.0, 50.0, 0.01, 3.0][:k] + [0.0, 80.0, 0.02, 1.0][:k]
    y = ((x[:, 0] + (x[:, 1] - 80.0) / 50.0) > 0.3).astype(int)
    x[rng.random(x.shape) < 0.1] = np.nan
    return x, y


def features_of(meta: dict) -> list[Feature]:
    return [Feature(f["name"], f.get("mean"), f.get("std")) for f in meta["features"]]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_exported_mlp_reproduces_predict_proba_with_missing_values(tmp_path: Path) -> None:
    x, y = data()
    model = pipeline().fit(x, y)
    path = save_mlp(model, tmp_path / "m.json", ["a", "b", "c", "d"], model_version="t", training_data_sha256="0" * 64)
    doc = json.loads(path.read_text())
    meta = json.loads((tmp_path / "m.meta.json").read_text())
    assert doc["format"] == FORMAT and doc["output"] == "logistic" and doc["activation"] == "relu"
    assert [len(layer["weights"]) for layer in doc["layers"]] == [4, 8, 4]
    assert [len(layer["bias"]) for layer in doc["layers"]] == [8, 4, 1]
    assert meta["objective"] == "binary:logistic"
    # The scaler's statistics sit in the sidecar; the medians, raw, in the model file.
    np.testing.assert_array_equal([f["mean"] for f in meta["features"]], model[1].mean_)
    np.testing.assert_array_equal([f["std"] for f in meta["features"]], model[1].scale_)
    np.testing.assert_array_equal(doc["impute"], model[0].statistics_)
    rows = np.vstack([x[:100], np.full((1, 4), np.nan)])
    proba, _ = predict_json(doc, features_of(meta), rows)
    np.testing.assert_allclose(proba, model.predict_proba(rows)[:, 1], rtol=1e-12, atol=1e-15)


def test_shipped_vector_follows_the_documented_rule() -> None:
    """h_mlp_binary: what Rust is checked against is what this format's rule gives."""
    doc = json.loads((VECTORS / "h_mlp_binary.json").read_text())
    meta = json.loads((VECTORS / "h_mlp_binary.meta.json").read_text())
    cases = json.loads((VECTORS / "h_mlp_binary.cases.json").read_text())
    rows = np.array([[np.nan if v is None else v for v in r] for r in cases["rows"]], dtype=np.float64)
    assert np.isnan(rows).any()
    proba, margin = predict_json(doc, features_of(meta), rows)
    np.testing.assert_allclose(proba, np.ravel(cases["predict"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(margin, np.ravel(cases["output_margin"]), rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.filterwarnings("ignore:Skipping features without any observed values")
def test_export_refuses_what_the_evaluator_cannot_run() -> None:
    x, y = data()
    with pytest.raises(ValueError, match="2 feature names for a model with 4 inputs"):
        mlp_to_json(pipeline().fit(x, y), ["a", "b"])
    three = pipeline().fit(x, np.arange(len(y)) % 3)
    with pytest.raises(ValueError, match="two-class"):
        mlp_to_json(three, ["a", "b", "c", "d"])
    bare = MLPClassifier(hidden_layer_sizes=(4,), max_iter=50, random_state=0).fit(np.nan_to_num(x), y)
    with pytest.raises(ValueError, match="SimpleImputer"):
        mlp_to_json(bare, ["a", "b", "c", "d"])
    empty = x.copy()
    empty[:, 2] = np.nan
    kept = make_pipeline(
        SimpleImputer(strategy="median", keep_empty_features=True),
        MLPClassifier(hidden_layer_sizes=(4,), max_iter=50, random_state=0),
    ).fit(empty, y)
    doc, features = mlp_to_json(kept, ["a", "b", "c", "d"])  # keep_empty_features imputes 0
    assert doc["impute"][2] == 0.0 and all(f.mean is None for f in features)
    dropped = pipeline().fit(empty, y)
    with pytest.raises(ValueError, match=r"no training values to impute from for \['c'\]"):
        mlp_to_json(dropped, ["a", "b", "c", "d"])
