"""Model export for the Rust evaluator: forests in XGBoost's JSON shape, sidecars."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

from gearbox.models.sidecar import Feature, Sidecar, sha256_file, sidecar_path, write_sidecar  # noqa: E402
from gearbox.models.sklearn_to_json import OBJECTIVE, forest_to_json, strict_less_threshold  # noqa: E402


def test_strict_less_threshold_agrees_with_sklearn_comparison_for_every_float32() -> None:
    rng = np.random.default_rng(0)
    for t in rng.normal(size=200) * 10.0 ** rng.integers(-5, 5, size=200):
        u = np.float32(strict_less_threshold(float(t)))
        t32 = np.float32(t)
        # The float32 values around t: where the two rules could disagree.
        xs = [t32]
        for _ in range(3):
            xs.append(np.nextafter(xs[-1], np.float32(np.inf)))
        x = t32
        for _ in range(3):
            x = np.nextafter(x, np.float32(-np.inf))
            xs.append(x)
        for x in xs:
            assert (float(x) <= t) == (x < u), (t, x, u)


def walk(doc: dict, row: np.ndarray) -> np.ndarray:
    """The evaluation rule gearbox implements, in plain Python."""
    trees = doc["learner"]["gradient_booster"]["model"]["trees"]
    k = int(doc["learner"]["learner_model_param"]["num_class"])
    total = np.zeros(k)
    for tree in trees:
        node = 0
        while tree["left_children"][node] != -1:
            x = np.float32(row[tree["split_indices"][node]])
            if np.isnan(x):
                left = tree["default_left"][node] == 1
            else:
                left = x < np.float32(tree["split_conditions"][node])
            node = tree["left_children"][node] if left else tree["right_children"][node]
        total += np.array(tree["base_weights"][node * k : (node + 1) * k])
    return total / len(trees)


@pytest.mark.parametrize("with_missing", [False, True])
def test_converted_forest_gives_predict_proba(with_missing: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    if with_missing:
        x[rng.random(x.shape) < 0.1] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) > 0).astype(int) + (np.nan_to_num(x[:, 2]) > 1)
    model = RandomForestClassifier(n_estimators=5, max_depth=5, random_state=0).fit(x, y)
    doc = json.loads(json.dumps(forest_to_json(model, ["a", "b", "c", "d"]), allow_nan=False))
    assert doc["learner"]["objective"]["name"] == OBJECTIVE
    assert doc["learner"]["feature_names"] == ["a", "b", "c", "d"]
    want = model.predict_proba(x[:100])
    for row, p in zip(x[:100], want, strict=True):
        np.testing.assert_allclose(walk(doc, row), p, atol=1e-6)


def test_single_tree_and_feature_count_checks() -> None:
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    tree = DecisionTreeClassifier(random_state=0).fit(x, np.arange(10) % 2)
    doc = forest_to_json(tree)
    assert len(doc["learner"]["gradient_booster"]["model"]["trees"]) == 1
    with pytest.raises(ValueError, match="3 feature names for 2 features"):
        forest_to_json(tree, ["a", "b", "c"])


def test_sidecar_is_written_next_to_the_model(tmp_path: Path) -> None:
    data = tmp_path / "train.csv"
    data.write_text("abc")
    assert sha256_file(data) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    model = tmp_path / "wisetrans.json"
    path = write_sidecar(
        model,
        Sidecar(
            model_version="1",
            objective="binary:logistic",
            features=[Feature("rtt_ms", 50.0, 10.0), Feature("loss_rate")],
            class_labels=["tcp", "quic"],
            training_data_sha256=sha256_file(data),
        ),
    )
    assert path == sidecar_path(model) == tmp_path / "wisetrans.meta.json"
    meta = json.loads(path.read_text())
    assert meta["features"] == [{"name": "rtt_ms", "mean": 50.0, "std": 10.0}, {"name": "loss_rate"}]
    assert meta["format_version"] == 1
    with pytest.raises(ValueError, match="both mean and std"):
        Feature("x", mean=1.0).to_json()
