"""Floo's actor as a `gearbox-mlp` file (gearbox.floo.export, docs/models.md "Dense networks").

The chain to the Rust evaluator without building it: `predict_json` (the file's rule in
NumPy) reproduces the flax actor on a fresh export and on the shipped test vector, and
`cargo test -p gearbox-policy --test vectors` checks Rust against the same shipped vector.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from gearbox.floo.export import VECTOR_SET, actor_to_json, export_actor, predict_json  # noqa: E402
from gearbox.floo.ppo import Actor, action_probabilities, actor_logits  # noqa: E402
from gearbox.models.sidecar import sha256_file  # noqa: E402

VECTORS = Path(__file__).resolve().parents[2] / "crates/gearbox-policy/tests/vectors"
NAMES = [f"metric_{i}" for i in range(16)]
CCAS = ["cubic", "bbr", "copa", "westwood"]


def actor_params(seed: int = 0, n_in: int = 16, n_out: int = 4) -> dict:
    """A flax actor of Floo's shape, its biases and output layer made non-trivial (a fresh
    one has zero biases and logits of ~0.01)."""
    params = Actor(n_out, 200, 0.01).init(jax.random.PRNGKey(seed), np.zeros((1, n_in), np.float32))["params"]
    params = jax.tree_util.tree_map(np.asarray, params)
    rng = np.random.default_rng(seed)
    params["hidden"]["bias"] = rng.normal(scale=0.5, size=200).astype(np.float32)
    params["logits"]["kernel"] = params["logits"]["kernel"] * 100.0
    # Centred over typical inputs, so that each controller is the greedy choice somewhere.
    typical = rng.uniform(-1, 4, size=(500, n_in))
    params["logits"]["bias"] = (rng.normal(size=n_out) - actor_logits(params, typical).mean(axis=0)).astype(np.float32)
    return params


def test_exported_actor_reproduces_the_flax_actor(tmp_path: Path) -> None:
    params = actor_params()
    info = {"steps": 1234, "seed": 0, "scenarios": ["wifi", "cellular"]}
    path = export_actor(params, NAMES, tmp_path / "floo", CCAS, info)
    assert path == tmp_path / "floo/policy.json"
    doc = json.loads(path.read_text())
    meta = json.loads((tmp_path / "floo/policy.meta.json").read_text())
    assert doc["activation"] == "leaky_relu" and doc["negative_slope"] == 0.01
    assert doc["output"] == "softmax" and doc["num_class"] == 4
    assert doc["feature_names"] == NAMES and doc["impute"] == [0.0] * 16
    assert [len(layer["weights"]) for layer in doc["layers"]] == [16, 200]
    assert [len(layer["bias"]) for layer in doc["layers"]] == [200, 4]
    assert doc["info"]["steps"] == 1234 and doc["info"]["classes"] == CCAS
    # The weights are the float32 values exactly.
    assert np.array_equal(np.asarray(doc["layers"][0]["weights"], np.float32), params["hidden"]["kernel"])
    assert meta["objective"] == "multi:softprob" and meta["class_labels"] == CCAS
    assert meta["features"] == [{"name": n} for n in NAMES]  # no standardisation
    canonical = json.dumps(info, sort_keys=True, separators=(",", ":"))
    assert meta["training_data"]["sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert meta["model_version"] == "floo-" + meta["training_data"]["sha256"][:12]

    x = np.random.default_rng(1).uniform(-1, 4, size=(300, 16)).astype(np.float32)
    probabilities, logits = predict_json(doc, x)
    flax_logits = np.asarray(Actor(4, 200, 0.01).apply({"params": params}, x))
    np.testing.assert_allclose(logits, flax_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits, actor_logits(params, x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(probabilities, action_probabilities(params, x), rtol=1e-12, atol=1e-12)
    assert len(set(np.argmax(logits, axis=1))) > 1, "the test actor should not always pick one controller"
    # Missing inputs take 0, the env's value for a metric it cannot compute.
    missing = x[:5].copy()
    missing[:, 3] = np.nan
    filled = x[:5].copy()
    filled[:, 3] = 0.0
    np.testing.assert_array_equal(predict_json(doc, missing)[1], predict_json(doc, filled)[1])


def test_the_sidecar_records_a_training_description_file(tmp_path: Path) -> None:
    description = tmp_path / "scenarios.txt"
    description.write_text("wifi-stationary\ncellular-mobile\n")
    export_actor(actor_params(), NAMES, tmp_path, CCAS, {}, training_data=description, model_version="floo-7")
    meta = json.loads((tmp_path / "policy.meta.json").read_text())
    assert meta["training_data"] == {"sha256": sha256_file(description), "file": "scenarios.txt"}
    assert meta["model_version"] == "floo-7"
    assert meta["trainer"].startswith("python/gearbox/floo/export.py (jax ")


def test_actor_parameters_that_do_not_fit_are_refused() -> None:
    params = actor_params()
    with pytest.raises(ValueError, match="15 feature names for an actor with 16 inputs"):
        actor_to_json(params, NAMES[:15], CCAS)
    with pytest.raises(ValueError, match="3 class names for an actor with 4 actions"):
        actor_to_json(params, NAMES, CCAS[:3])
    with pytest.raises(ValueError, match="unique"):
        actor_to_json(params, NAMES[:15] + ["metric_0"], CCAS)
    with pytest.raises(ValueError, match="no 'logits' layer"):
        actor_to_json({"hidden": params["hidden"]}, NAMES, CCAS)
    bad = {**params, "logits": {**params["logits"], "bias": params["logits"]["bias"].copy()}}
    bad["logits"]["bias"][2] = np.nan
    with pytest.raises(ValueError, match="logits.bias has non-finite values"):
        actor_to_json(bad, NAMES, CCAS)
    short = {**params, "logits": {"kernel": params["logits"]["kernel"][:199], "bias": params["logits"]["bias"]}}
    with pytest.raises(ValueError, match="logits takes 199 inputs, hidden has 200 units"):
        actor_to_json(short, NAMES, CCAS)
    # flax's own wrapping is accepted.
    assert actor_to_json({"params": params}, NAMES, CCAS)["num_class"] == 4


def test_the_shipped_test_vector_follows_the_files_rule() -> None:
    doc = json.loads((VECTORS / f"{VECTOR_SET}.json").read_text())
    cases = json.loads((VECTORS / f"{VECTOR_SET}.cases.json").read_text())
    rows = np.array([[np.nan if v is None else v for v in row] for row in cases["rows"]], dtype=np.float32)
    assert rows.shape == (200, 16) and np.isnan(rows).any() and (rows < 0).any()
    probabilities, logits = predict_json(doc, rows)
    np.testing.assert_allclose(logits, cases["output_margin"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(probabilities, cases["predict"], atol=1e-6)
    assert len(set(cases["class"])) == 4, "every controller is chosen by some row"
