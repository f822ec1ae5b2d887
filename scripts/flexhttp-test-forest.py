"""Writes crates/gearbox-gears/tests/data/flexhttp/: a global classifier exported the agent's way
(k-means labels, a depth-4 forest of 20 trees, forest.export) from a synthetic pool where H3 wins on
long lossy paths, and `cases.json`: rows with scikit-learn's P(h3) for each, which the Rust gear must
reproduce (crates/gearbox-gears/src/http_version.rs tests), and `nearest.json`: the label of the
nearest labelled centre of each row by `Labelling.nearest`, which the client's Rust labelling must
reproduce (crates/gearbox-gears/src/http_version_local.rs tests).

    .venv/bin/python scripts/flexhttp-test-forest.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gearbox.flexhttp.features import FEATURES
from gearbox.flexhttp.forest import export, fit_forest
from gearbox.flexhttp.labels import Labelling, label

OUT = Path(__file__).resolve().parents[1] / "crates/gearbox-gears/tests/data/flexhttp"


def main() -> None:
    rng = np.random.default_rng(11)
    n = 800
    rtt = np.exp(rng.uniform(np.log(30), np.log(500), n))
    loss = np.exp(rng.uniform(np.log(1e-4), np.log(0.03), n))
    cap = np.exp(rng.uniform(np.log(0.5), np.log(25), n))
    files = rng.integers(5, 120, n)
    size = rng.uniform(2e5, 3e6, n)
    page = np.stack([files, size, files // 10, size * 0.05, files // 5, size * 0.2, files // 2, size * 0.6], axis=1)
    x = np.column_stack([rtt, loss, cap, page]).astype(float)
    si_h2 = (500 + rtt * 4 * (1 + 60 * loss)) * rng.lognormal(0, 0.1, n)
    si_h3 = (800 + rtt * 4 * (1 + 15 * loss)) * rng.lognormal(0, 0.1, n)
    xs = np.concatenate([x, x])
    versions = ["h2"] * n + ["h3"] * n
    lab = label(xs, versions, np.concatenate([si_h2, si_h3]), k=32, seed=0)
    OUT.mkdir(parents=True, exist_ok=True)
    export(OUT, xs, lab, seed=0, note="test vectors: scripts/flexhttp-test-forest.py", n_trees=20)
    (OUT / "train.csv").unlink()  # the sidecar's digest stays; the rows are not needed by the tests
    labels = lab.entry_labels()
    keep = np.array([v is not None for v in labels])
    y = np.array([int(v == "h3") for v in labels if v is not None])
    model = fit_forest(xs[keep], y, seed=0, n_trees=20)
    probe = np.column_stack([
        np.exp(rng.uniform(np.log(30), np.log(500), 64)),
        np.exp(rng.uniform(np.log(1e-4), np.log(0.03), 64)),
        np.exp(rng.uniform(np.log(0.5), np.log(25), 64)),
        page[:64],
    ])
    cases = {
        "features": list(FEATURES),
        "rows": probe.tolist(),
        "p_h3": model.predict_proba(probe)[:, 1].tolist(),
    }
    (OUT / "cases.json").write_text(json.dumps(cases) + "\n")
    nearest()


def nearest() -> None:
    """`nearest.json` from the written `clusters.json` and `cases.json` (runs alone too: `--nearest`)."""
    c = json.loads((OUT / "clusters.json").read_text())
    rows = np.array(json.loads((OUT / "cases.json").read_text())["rows"])
    lab = Labelling(
        c["k"], np.array(c["mean"]), np.array(c["std"]), np.array(c["centres"]), c["labels"], [], np.array([])
    )
    (OUT / "nearest.json").write_text(json.dumps({"rows": rows.tolist(), "labels": lab.nearest(rows)}) + "\n")


if __name__ == "__main__":
    import sys

    nearest() if sys.argv[1:] == ["--nearest"] else main()
