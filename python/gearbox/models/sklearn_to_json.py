"""Convert a scikit-learn tree classifier into XGBoost's JSON model shape.

gearbox evaluates tree ensembles from one file format, XGBoost's own JSON
(`Booster.save_model("m.json")`), so forests are converted into that shape
rather than given a second format (docs/models.md says why: one evaluator, checked
against the Python libraries on shipped vectors). Two things differ from an XGBoost
booster and are spelled out in the file:

* `learner.objective.name` is `"gearbox:forest_proba"`: the output is the MEAN
  over trees of each tree's class-probability vector (scikit-learn's
  `predict_proba`), not a sum of margins through a sigmoid/softmax.
* Every tree carries a probability vector per node: `tree_param.size_leaf_vector`
  = number of classes and `base_weights` holds `num_nodes * num_classes` values,
  node-major (the layout XGBoost uses for its own vector-leaf trees).

Split semantics are rewritten to XGBoost's: scikit-learn goes left when
`float32(x) <= threshold` (a float64), XGBoost and gearbox when `x < t` with a
float32 `t`. The converter picks the float32 `t` that makes the two agree for
every float32 `x`. Missing values follow `tree_.missing_go_to_left` (recorded as
`default_left`); scikit-learn older than 1.3 has no such array and rejects NaN,
so the converted trees then send NaN right.

Usage:
    python -m gearbox.models.sklearn_to_json model.pkl out.json --features a,b,c
(the pickle must come from a source you trust: unpickling runs code).
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

OBJECTIVE = "gearbox:forest_proba"


def _f32_text(x: float) -> float:
    """A float whose repr is the shortest text that reads back as the same float32."""
    return float(str(np.float32(x)))


def strict_less_threshold(t: float) -> float:
    """float32 `u` with: for every float32 x, `x <= t` (float64 t) iff `x < u`.

    scikit-learn >= 1.3 writes t = +inf for a split that sends every present
    value left and missing values right. JSON has no infinity, so that becomes
    the largest float32; only x = 3.4028235e38 itself would then go the other
    way (scikit-learn refuses such inputs anyway).
    """
    if t == np.inf:
        return float(np.finfo(np.float32).max)
    t32 = np.float32(t)
    if float(t32) > t:  # rounded up: step back to the largest float32 <= t
        t32 = np.nextafter(t32, np.float32(-np.inf))
    return float(np.nextafter(t32, np.float32(np.inf)))


def _tree_to_json(tree: Any, tree_id: int, num_feature: int, num_classes: int) -> dict:
    t = tree.tree_
    if t.n_outputs != 1:
        raise ValueError("multi-output trees are not supported")
    n = t.node_count
    left = [int(c) for c in t.children_left]
    right = [int(c) for c in t.children_right]
    missing_left = getattr(t, "missing_go_to_left", None)
    split_indices, split_conditions, default_left = [], [], []
    for i in range(n):
        if left[i] == -1:
            split_indices.append(0)
            split_conditions.append(0.0)
            default_left.append(0)
        else:
            split_indices.append(int(t.feature[i]))
            split_conditions.append(strict_less_threshold(float(t.threshold[i])))
            default_left.append(int(missing_left[i]) if missing_left is not None else 0)
    # Same normalisation as DecisionTreeClassifier.predict_proba (zero sums kept).
    values = np.asarray(t.value[:, 0, :num_classes], dtype=np.float64)
    sums = values.sum(axis=1, keepdims=True)
    sums[sums == 0.0] = 1.0
    proba = values / sums
    return {
        "id": tree_id,
        "tree_param": {
            "num_nodes": str(n),
            "num_feature": str(num_feature),
            "num_deleted": "0",
            "size_leaf_vector": str(num_classes),
        },
        "left_children": left,
        "right_children": right,
        "split_indices": split_indices,
        "split_conditions": split_conditions,
        "default_left": default_left,
        "split_type": [0] * n,
        "base_weights": [_f32_text(v) for v in proba.reshape(-1)],
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
    }


def forest_to_json(model: Any, feature_names: list[str] | None = None) -> dict:
    """XGBoost-shaped JSON document for a fitted classifier.

    Accepts RandomForestClassifier, ExtraTreesClassifier (anything with
    `estimators_` of decision trees) or a single DecisionTreeClassifier.
    """
    import sklearn

    trees = list(getattr(model, "estimators_", [model]))
    if not trees or not hasattr(trees[0], "tree_"):
        raise ValueError(f"{type(model).__name__} is not a fitted tree classifier")
    if getattr(model, "n_outputs_", 1) != 1:
        raise ValueError("multi-output classifiers are not supported")
    num_feature = int(model.n_features_in_)
    num_classes = int(model.n_classes_)
    if feature_names is None and hasattr(model, "feature_names_in_"):
        feature_names = [str(n) for n in model.feature_names_in_]
    if feature_names is not None and len(feature_names) != num_feature:
        raise ValueError(f"{len(feature_names)} feature names for {num_feature} features")
    n = len(trees)
    return {
        "learner": {
            "attributes": {},
            "feature_names": list(feature_names or []),
            "feature_types": [],
            "gradient_booster": {
                "name": "gbtree",
                "model": {
                    "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(n)},
                    "iteration_indptr": [0, n],
                    "tree_info": [0] * n,
                    "trees": [_tree_to_json(t, i, num_feature, num_classes) for i, t in enumerate(trees)],
                },
            },
            "learner_model_param": {
                "base_score": "[0E0]",
                "boost_from_average": "0",
                "num_class": str(num_classes),
                "num_feature": str(num_feature),
                "num_target": "1",
            },
            "objective": {"name": OBJECTIVE},
        },
        "gearbox": {
            "converted_from": f"{type(model).__module__}.{type(model).__name__}",
            "sklearn_version": sklearn.__version__,
            "classes": [str(c) for c in model.classes_],
        },
    }


def save_forest(model: Any, path: str | Path, feature_names: list[str] | None = None) -> None:
    Path(path).write_text(json.dumps(forest_to_json(model, feature_names), separators=(",", ":"), allow_nan=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pickle", type=Path, help="pickled fitted classifier (trusted source only)")
    ap.add_argument("out", type=Path, help="output model JSON")
    ap.add_argument("--features", help="comma-separated feature names in column order")
    args = ap.parse_args()
    with open(args.pickle, "rb") as f:
        model = pickle.load(f)  # noqa: S301 - documented: trusted input only
    names = args.features.split(",") if args.features else None
    save_forest(model, args.out, names)


if __name__ == "__main__":
    main()
