"""Train small tree ensembles (and one small MLP) with a fixed seed and write the
test vectors that `crates/gearbox-policy/tests/vectors.rs` checks value for value.

For each set the script writes, under `crates/gearbox-policy/tests/vectors/`:
  <set>.json        the model (XGBoost `save_model` output, or a converted forest)
  <set>.meta.json   its sidecar (features, normalisation, digest, labels)
  <set>.cases.json  input rows (raw feature values, null = missing) and the
                    Python library's outputs for them

Sets (WiseTrans network monitor, WiseTrans §III-C, §IV-B1: XGBoost with
max depth 7 and min child weight 1):
  a_xgb_binary      binary:logistic, 50 trees, depth 7, min_child_weight 1
  b_xgb_missing     binary:logistic on data with ~15% missing values
  c_xgb_multiclass  multi:softprob, 3 classes
  d_xgb_regression  reg:squarederror on standardised features (sidecar mean/std)
  e_rf_forest       RandomForestClassifier, 20 trees, 3 classes, some NaN inputs
  f_dt_binary       DecisionTreeClassifier, binary
  g_xgb_vector_leaf multi:softprob with multi_strategy="multi_output_tree"
                    (one tree per round whose leaves hold all class values)
  h_mlp_binary      gearbox-mlp: SimpleImputer(median) -> StandardScaler ->
                    MLPClassifier(16, 8), ReLU, logistic output (the §IV-E2
                    comparison network, shrunk), ~15% missing values; outputs
                    are predict_proba[:, 1] and the output unit's log-odds

The data are synthetic (no datasets can be downloaded here): WiseTrans'
Table I features with a label "QUIC finished sooner than TCP" drawn from a
hand-made rule plus noise. The rule only has to give the trees something to
split on; it is not a claim about real networks. Training sets are written as
CSV to --data-dir (not committed); their sha256 goes into the sidecars.

Sets a-g draw from one random stream in order, so they are always trained
together; h_mlp_binary has its own stream. `--only SET` still trains everything
but writes only that set's three files.

Run:  PYTHONPATH=python .venv/bin/python -m gearbox.models.make_test_vectors [--only h_mlp_binary]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sklearn
import xgboost as xgb
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.impute import SimpleImputer
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

from gearbox.models.mlp_to_json import save_mlp
from gearbox.models.sidecar import Feature, Sidecar, sha256_file, write_sidecar
from gearbox.models.sklearn_to_json import save_forest


@dataclass
class Config:
    seed: int = 20240601
    n_train: int = 600  # small on purpose: keeps depth-7 trees (and the repo) small
    n_cases: int = 200
    n_threshold_probes: int = 40  # of n_cases: rows with a feature exactly on a split
    # WiseTrans §IV-B1: "maximum depth of 7 and minimum child weight of 1"
    xgb_max_depth: int = 7
    xgb_min_child_weight: float = 1.0
    xgb_trees: int = 50
    xgb_multiclass_trees: int = 20  # per class
    xgb_eta: float = 0.3
    missing_fraction: float = 0.15
    rf_trees: int = 20
    rf_max_depth: int = 6
    dt_max_depth: int = 6
    mlp_hidden: tuple[int, int] = (16, 8)  # §IV-E2 uses (128, 64); small keeps the file small
    mlp_max_iter: int = 400
    out_dir: Path = Path("crates/gearbox-policy/tests/vectors")


# WiseTrans Table I, with units in the names.
WISETRANS_FEATURES = [
    "retran_rate",
    "rtt_avg_ms",
    "resp_rec_goodput_mbps",
    "ttfb_avg_ms",
    "ttfb_ms",
    "ttfb_rate",
    "req_cmpl_goodput_mbps",
]


def wisetrans_like(rng: np.random.Generator, n: int) -> np.ndarray:
    """Columns of WISETRANS_FEATURES, float32."""
    retran = rng.beta(0.6, 20.0, n)
    rtt = rng.lognormal(np.log(60.0), 0.6, n)
    goodput = rng.lognormal(np.log(8.0), 0.9, n)
    ttfb_avg = rtt * rng.uniform(1.5, 3.0, n)
    ttfb = ttfb_avg * rng.lognormal(0.0, 0.35, n)
    ttfb_rate = ttfb / ttfb_avg
    cmpl = goodput * rng.uniform(0.3, 0.95, n)
    return np.stack([retran, rtt, goodput, ttfb_avg, ttfb, ttfb_rate, cmpl], axis=1).astype(np.float32)


def quic_wins(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Label: QUIC wins under loss and long RTT, unless goodput is already high."""
    score = 30.0 * x[:, 0] + 0.01 * x[:, 1] - 0.08 * x[:, 2] + 0.6 * (x[:, 5] - 1.0) + rng.normal(0.0, 0.5, len(x))
    return (score > 0.4).astype(np.int64)


def write_csv(path: Path, names: list[str], x: np.ndarray, y: np.ndarray) -> str:
    with open(path, "w") as f:
        f.write(",".join(names + ["label"]) + "\n")
        for row, label in zip(x, y, strict=True):
            cells = ["" if np.isnan(v) else repr(float(v)) for v in row]
            f.write(",".join(cells + [repr(float(label))]) + "\n")
    return sha256_file(path)


def f32_text(v: float) -> float | None:
    """Shortest text that reads back as the same float32 (None for NaN)."""
    v32 = np.float32(v)
    return None if np.isnan(v32) else float(str(v32))


def rows_json(x: np.ndarray) -> list[list[float | None]]:
    return [[f32_text(v) for v in row] for row in x]


def threshold_probes(rng: np.random.Generator, base: np.ndarray, splits: list[tuple[int, float]], n: int) -> np.ndarray:
    """Rows that sit exactly on (or one float32 step below) a split value, to pin
    down `<` against `<=` and the float32 rounding of thresholds."""
    out = base[rng.integers(0, len(base), n)].copy()
    for i in range(n):
        feature, value = splits[rng.integers(0, len(splits))]
        v = np.float32(value)
        out[i, feature] = v if i % 2 == 0 else np.nextafter(v, np.float32(-np.inf))
    return out


def xgb_splits(booster: xgb.Booster) -> list[tuple[int, float]]:
    model = json.loads(booster.save_raw("json"))
    splits = []
    for tree in model["learner"]["gradient_booster"]["model"]["trees"]:
        for i, left in enumerate(tree["left_children"]):
            if left != -1:
                splits.append((tree["split_indices"][i], tree["split_conditions"][i]))
    return splits


def sklearn_splits(model) -> list[tuple[int, float]]:
    """Largest float32 <= threshold: the last value that still goes left."""
    splits = []
    for est in getattr(model, "estimators_", [model]):
        t = est.tree_
        for i in range(t.node_count):
            # +inf thresholds split "missing" from "present" (sklearn >= 1.3)
            if t.children_left[i] != -1 and np.isfinite(t.threshold[i]):
                v = np.float32(t.threshold[i])
                if float(v) > t.threshold[i]:
                    v = np.nextafter(v, np.float32(-np.inf))
                # even rows take v (goes left), odd rows v's predecessor; add one
                # step up so the even rows land just right of the split instead
                splits.append((int(t.feature[i]), float(np.nextafter(v, np.float32(np.inf)))))
    return splits


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")


def cases_doc(name: str, features: list[str], x_raw: np.ndarray, outputs: dict[str, np.ndarray]) -> dict:
    doc: dict = {"set": name, "features": features, "rows": rows_json(x_raw)}
    for key, arr in outputs.items():
        arr = np.asarray(arr)
        arr = arr.reshape(len(x_raw), -1)
        if arr.dtype == np.float32:
            doc[key] = [[f32_text(v) for v in row] for row in arr]
        else:
            doc[key] = [[float(v) for v in row] for row in arr]
    return doc


def train_xgb(cfg: Config, params: dict, x: np.ndarray, y: np.ndarray, names: list[str], rounds: int) -> xgb.Booster:
    base = {
        "max_depth": cfg.xgb_max_depth,
        "min_child_weight": cfg.xgb_min_child_weight,
        "eta": cfg.xgb_eta,
        "seed": cfg.seed,
        "tree_method": "hist",
        "nthread": 1,
    }
    return xgb.train({**base, **params}, xgb.DMatrix(x, label=y, feature_names=names), num_boost_round=rounds)


def xgb_set(
    cfg: Config,
    rng: np.random.Generator,
    data_dir: Path,
    name: str,
    params: dict,
    x: np.ndarray,
    y: np.ndarray,
    x_cases: np.ndarray,
    names: list[str],
    rounds: int,
    labels: list[str],
    norm: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """Train, then write model, sidecar and cases. With `norm`, the model sees
    (x - mean) / std computed in float64 (as the Rust FeatureRow does)."""

    def model_space(raw: np.ndarray) -> np.ndarray:
        if norm is None:
            return raw
        return ((raw.astype(np.float64) - norm[0]) / norm[1]).astype(np.float32)

    digest = write_csv(data_dir / f"{name}.train.csv", names, x, y)
    booster = train_xgb(cfg, params, model_space(x), y, names, rounds)
    probes = threshold_probes(rng, x_cases, xgb_splits(booster), cfg.n_threshold_probes)
    if norm is not None:  # probes are in model space; map back to raw inputs
        probes = (probes.astype(np.float64) * norm[1] + norm[0]).astype(np.float32)
    rows = np.concatenate([x_cases[: cfg.n_cases - cfg.n_threshold_probes], probes])
    dm = xgb.DMatrix(model_space(rows), feature_names=names)
    model_path = cfg.out_dir / f"{name}.json"
    booster.save_model(str(model_path))
    objective = params["objective"]
    write_sidecar(
        model_path,
        Sidecar(
            model_version=f"test-vectors-{name}-1",
            objective=objective,
            features=[
                Feature(n, None if norm is None else float(norm[0][i]), None if norm is None else float(norm[1][i]))
                for i, n in enumerate(names)
            ],
            class_labels=labels,
            training_data_sha256=digest,
            training_data_file=f"{name}.train.csv",
            training_rows=len(x),
            trainer=f"python/gearbox/models/make_test_vectors.py (xgboost {xgb.__version__})",
        ),
    )
    outputs = {
        "output_margin": booster.predict(dm, output_margin=True),
        "predict": booster.predict(dm),
    }
    write_json(cfg.out_dir / f"{name}.cases.json", cases_doc(name, names, rows, outputs))


def sklearn_set(
    cfg: Config,
    rng: np.random.Generator,
    data_dir: Path,
    name: str,
    model,
    x: np.ndarray,
    y: np.ndarray,
    x_cases: np.ndarray,
    names: list[str],
    labels: list[str],
) -> None:
    digest = write_csv(data_dir / f"{name}.train.csv", names, x, y)
    model.fit(x, y)
    probes = threshold_probes(rng, x_cases, sklearn_splits(model), cfg.n_threshold_probes)
    rows = np.concatenate([x_cases[: cfg.n_cases - cfg.n_threshold_probes], probes])
    model_path = cfg.out_dir / f"{name}.json"
    save_forest(model, model_path, names)
    write_sidecar(
        model_path,
        Sidecar(
            model_version=f"test-vectors-{name}-1",
            objective="gearbox:forest_proba",
            features=[Feature(n) for n in names],
            class_labels=labels,
            training_data_sha256=digest,
            training_data_file=f"{name}.train.csv",
            training_rows=len(x),
            trainer=f"python/gearbox/models/make_test_vectors.py (scikit-learn {sklearn.__version__})",
        ),
    )
    outputs = {"predict_proba": model.predict_proba(rows)}
    write_json(cfg.out_dir / f"{name}.cases.json", cases_doc(name, names, rows, outputs))


def mlp_set(cfg: Config, data_dir: Path, name: str, names: list[str], labels: list[str]) -> None:
    """The Table II network's pipeline, small, on data with missing values. Expected
    outputs come from scikit-learn itself: `predict_proba[:, 1]`, and the output
    unit before the logistic function from the same forward pass with
    `out_activation_` set to "identity" (the pipeline has no margin method)."""
    rng = np.random.default_rng([cfg.seed, 8])  # its own stream: a-g are unaffected
    n = cfg.n_train + cfg.n_cases
    x = wisetrans_like(rng, n)
    y = quic_wins(rng, x)
    x = with_missing(rng, x, cfg.missing_fraction)
    x_train, y_train, rows = x[: cfg.n_train], y[: cfg.n_train], x[cfg.n_train :]
    rows[:3] = np.nan  # every input missing: all medians
    rows[3, :] = rows[4, :] * 50.0  # far outside the training range
    digest = write_csv(data_dir / f"{name}.train.csv", names, x_train, y_train)
    model = make_pipeline(
        SimpleImputer(strategy="median"),
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=cfg.mlp_hidden, max_iter=cfg.mlp_max_iter, random_state=cfg.seed),
    )
    # float64, as the training pipeline feeds it: given float32, scikit-learn would
    # train and predict in float32.
    with warnings.catch_warnings():  # not converged at max_iter: irrelevant to a test vector
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x_train.astype(np.float64), y_train)
    model_path = cfg.out_dir / f"{name}.json"
    save_mlp(
        model,
        model_path,
        names,
        model_version=f"test-vectors-{name}-1",
        training_data_sha256=digest,
        training_data_file=f"{name}.train.csv",
        training_rows=len(x_train),
        class_labels=labels,
        trainer=f"python/gearbox/models/make_test_vectors.py (scikit-learn {sklearn.__version__})",
    )
    logits = copy.deepcopy(model)
    logits[-1].out_activation_ = "identity"
    outputs = {
        "predict": model.predict_proba(rows.astype(np.float64))[:, 1],
        "output_margin": logits.predict_proba(rows.astype(np.float64))[:, 1],
    }
    write_json(cfg.out_dir / f"{name}.cases.json", cases_doc(name, names, rows, outputs))


def with_missing(rng: np.random.Generator, x: np.ndarray, fraction: float) -> np.ndarray:
    x = x.copy()
    x[rng.random(x.shape) < fraction] = np.nan
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Config.out_dir)
    ap.add_argument("--data-dir", type=Path, default=None, help="where training CSVs go (default: a temp dir)")
    ap.add_argument("--only", default=None, help="write only this set's files (e.g. h_mlp_binary)")
    args = ap.parse_args()
    cfg = Config(out_dir=args.out_dir)
    if args.only:
        cfg.out_dir = Path(tempfile.mkdtemp(prefix="gearbox-vectors-all-"))
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gearbox-vectors-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    names = WISETRANS_FEATURES
    n = cfg.n_train + cfg.n_cases
    binary = ["tcp", "quic"]

    # (a) WiseTrans network monitor shape.
    x = wisetrans_like(rng, n)
    y = quic_wins(rng, x)
    xgb_set(
        cfg,
        rng,
        data_dir,
        "a_xgb_binary",
        {"objective": "binary:logistic"},
        x[: cfg.n_train],
        y[: cfg.n_train],
        x[cfg.n_train :],
        names,
        cfg.xgb_trees,
        binary,
    )

    # (b) Missing values in training and in the cases (NaN -> default_left).
    x = wisetrans_like(rng, n)
    y = quic_wins(rng, x)
    x = with_missing(rng, x, cfg.missing_fraction)
    xgb_set(
        cfg,
        rng,
        data_dir,
        "b_xgb_missing",
        {"objective": "binary:logistic"},
        x[: cfg.n_train],
        y[: cfg.n_train],
        x[cfg.n_train :],
        names,
        cfg.xgb_trees,
        binary,
    )

    # (c) Three classes: which of three congestion controllers finished first.
    x = wisetrans_like(rng, n)
    cls = np.where(x[:, 0] > 0.04, 2, np.where(x[:, 1] > 70.0, 1, 0))
    flip = rng.random(n) < 0.1
    cls[flip] = rng.integers(0, 3, flip.sum())
    xgb_set(
        cfg,
        rng,
        data_dir,
        "c_xgb_multiclass",
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 5},
        x[: cfg.n_train],
        cls[: cfg.n_train],
        x[cfg.n_train :],
        names,
        cfg.xgb_multiclass_trees,
        ["cubic", "bbr", "copa"],
    )

    # (d) Regression of the completion time, on standardised features.
    x = wisetrans_like(rng, n)
    rct_ms = 2.0 * x[:, 4] + 800.0 / x[:, 6] * (1.0 + 20.0 * x[:, 0]) + rng.normal(0.0, 10.0, n)
    mean = x[: cfg.n_train].astype(np.float64).mean(axis=0)
    std = x[: cfg.n_train].astype(np.float64).std(axis=0)
    xgb_set(
        cfg,
        rng,
        data_dir,
        "d_xgb_regression",
        {"objective": "reg:squarederror", "max_depth": 5},
        x[: cfg.n_train],
        rct_ms[: cfg.n_train],
        x[cfg.n_train :],
        names,
        cfg.xgb_trees,
        [],
        norm=(mean, std),
    )

    # (e) Random forest, 3 classes, trained and queried with missing values.
    x = with_missing(rng, wisetrans_like(rng, n), 0.05)
    z = np.nan_to_num(x)
    cls = np.where(z[:, 0] > 0.04, 2, np.where(z[:, 1] > 70.0, 1, 0))
    rf = RandomForestClassifier(n_estimators=cfg.rf_trees, max_depth=cfg.rf_max_depth, random_state=cfg.seed)
    sklearn_set(
        cfg,
        rng,
        data_dir,
        "e_rf_forest",
        rf,
        x[: cfg.n_train],
        cls[: cfg.n_train],
        x[cfg.n_train :],
        names,
        ["cubic", "bbr", "copa"],
    )

    # (f) A single decision tree, binary.
    x = wisetrans_like(rng, n)
    y = quic_wins(rng, x)
    dt = DecisionTreeClassifier(max_depth=cfg.dt_max_depth, random_state=cfg.seed)
    sklearn_set(
        cfg, rng, data_dir, "f_dt_binary", dt, x[: cfg.n_train], y[: cfg.n_train], x[cfg.n_train :], names, binary
    )

    # (g) XGBoost's vector-leaf trees (experimental in XGBoost): leaves in base_weights.
    x = with_missing(rng, wisetrans_like(rng, n), 0.05)
    z = np.nan_to_num(x)
    cls = np.where(z[:, 0] > 0.04, 2, np.where(z[:, 1] > 70.0, 1, 0))
    xgb_set(
        cfg,
        rng,
        data_dir,
        "g_xgb_vector_leaf",
        {"objective": "multi:softprob", "num_class": 3, "max_depth": 4, "multi_strategy": "multi_output_tree"},
        x[: cfg.n_train],
        cls[: cfg.n_train],
        x[cfg.n_train :],
        names,
        10,
        ["cubic", "bbr", "copa"],
    )

    # (h) The §IV-E2 comparison network, small.
    mlp_set(cfg, data_dir, "h_mlp_binary", names, binary)

    if args.only:
        files = sorted(cfg.out_dir.glob(f"{args.only}.*json"))
        if not files:
            raise SystemExit(f"no set named {args.only!r}")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(f, args.out_dir / f.name)
        print(f"wrote {', '.join(str(args.out_dir / f.name) for f in files)}")
        return
    total = sum(p.stat().st_size for p in cfg.out_dir.iterdir())
    print(f"wrote {cfg.out_dir} ({total / 1024:.0f} KiB); training CSVs in {data_dir}")


if __name__ == "__main__":
    main()
