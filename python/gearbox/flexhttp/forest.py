"""The global classifier (FlexHTTP §3.3.2, §4): a random forest of depth 4 over the labelled pool,
exported as a policy folder the control plane's registry versions and the Rust data plane evaluates.

§4 keeps scikit-learn's defaults except the depth ("the tree depth is set to 4"): 100 trees, Gini,
bootstrap. The export is the project's one format for tree ensembles, XGBoost's JSON model shape with
objective `gearbox:forest_proba` (python/gearbox/models/sklearn_to_json.py; `gearbox-policy` evaluates
it), with its sidecar (feature names in `features.FEATURES` order, class labels h2, h3) and, in the same
folder, the training rows (`train.csv`, whose sha256 the sidecar records) and the k-means centres with
their labels (`clusters.json`), which clients use to label their local entries (§3.5.1).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from gearbox.flexhttp.features import FEATURES, VERSIONS
from gearbox.flexhttp.labels import Labelling

MAX_DEPTH = 4
N_TREES = 100


class TrainError(ValueError):
    """The pool cannot give a classifier (too few entries, one class only); says why."""


def fit_forest(x: np.ndarray, y: np.ndarray, seed: int = 0, n_trees: int = N_TREES):  # noqa: ANN201
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=n_trees, max_depth=MAX_DEPTH, random_state=seed, n_jobs=1).fit(x, y)


def training_csv(x: np.ndarray, y: np.ndarray) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*FEATURES, "label"])
    for row, label in zip(x, y, strict=True):
        w.writerow([repr(float(v)) for v in row] + [VERSIONS[int(label)]])
    return buf.getvalue().encode()


def export(
    out: Path, x: np.ndarray, labelling: Labelling, seed: int = 0, note: str = "", n_trees: int = N_TREES
) -> dict:
    """Trains on the entries whose cluster has a label and writes `out/forest.json`, its sidecar,
    `train.csv` and `clusters.json`. Returns a summary (rows, k, training accuracy, model version)."""
    import sklearn

    from gearbox.models.sidecar import Feature, Sidecar, write_sidecar
    from gearbox.models.sklearn_to_json import save_forest

    labels = labelling.entry_labels()
    keep = np.array([lab is not None for lab in labels])
    if keep.sum() < 2:
        raise TrainError(f"{int(keep.sum())} labelled entries: a classifier needs at least 2")
    xs = np.asarray(x, dtype=float)[keep]
    y = np.array([VERSIONS.index(lab) for lab in labels if lab is not None])
    if len(set(y.tolist())) < 2:
        raise TrainError(f"every labelled cluster says {VERSIONS[int(y[0])]}: nothing to classify yet")
    model = fit_forest(xs, y, seed, n_trees)
    out.mkdir(parents=True, exist_ok=True)
    data = training_csv(xs, y)
    (out / "train.csv").write_bytes(data)
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    save_forest(model, out / "forest.json", list(FEATURES))
    version = f"flexhttp-forest-{digest[:12]}"
    write_sidecar(
        out / "forest.json",
        Sidecar(
            model_version=version,
            objective="gearbox:forest_proba",
            features=[Feature(n) for n in FEATURES],
            training_data_sha256=digest,
            training_data_file="train.csv",
            training_rows=len(y),
            class_labels=list(VERSIONS),
            trainer=f"python/gearbox/flexhttp/forest.py (scikit-learn {sklearn.__version__} RandomForestClassifier, "
            f"{n_trees} trees, max_depth {MAX_DEPTH}, k-means labels k={labelling.k}{'; ' + note if note else ''})",
        ),
    )
    (out / "clusters.json").write_text(json.dumps(labelling.as_json(), indent=1) + "\n")
    return {
        "model_version": version,
        "rows": int(len(y)),
        "unlabelled": int((~keep).sum()),
        "k": labelling.k,
        "h3_share": float(y.mean()),
        "train_accuracy": float((model.predict(xs) == y).mean()),
    }
