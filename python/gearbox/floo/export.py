"""Export Floo's trained actor as a `gearbox-mlp` model file plus sidecar, for the edge.

The selector (Floo §3.3) runs in the data plane, so the actor that `gearbox.floo.ppo`
trained becomes a file that `gearbox-policy` evaluates in Rust (docs/models.md, "Dense
networks"): `policy.json` holds the network, `policy.meta.json` the sidecar.

* `policy.json`: `"activation": "leaky_relu"` with its `negative_slope`, `"output":
  "softmax"` with `num_class` = the number of controllers, `feature_names`, `impute` and
  the two layers; flax's `Dense` kernel is `(inputs, units)`, the format's orientation,
  so the arrays are written as they are. An actor of another shape can be given as its
  dense layers (SAILfish's convolutional actor: `gearbox.sailfish.a2c.dense_layers`).
  Floats are written with Python's shortest round-trip repr of the float32 weights, so
  the file holds exactly the trained values.
* `impute` is 0 for every input: the environment's own rule for a metric it cannot
  compute (`gearbox.sim.envs.observe` writes 0 for a missing or non-finite value), so a
  feature missing at the edge (NaN) is read as the policy saw it in training.
* `policy.meta.json`: objective `multi:softprob` (one probability per controller, the
  objective a multi-class XGBoost model has), class labels = the controllers in action
  order, features in observation order **without** `mean`/`std`: the observation is
  already normalised by the feature code (Floo §3.3: normalised metrics), so the sidecar
  standardises nothing. The training-data digest is the sha256 of a file that describes
  what the policy was trained on (the caller's), or, without one, of the canonical JSON of
  `info`.

`python -m gearbox.floo.export --test-vector` writes the shipped test vector
`crates/gearbox-policy/tests/vectors/i_floo_actor.*` from a flax actor of Floo's shape
(16 -> 200 -> 4) with random weights, and JAX's own outputs for 200 rows, which
`cargo test -p gearbox-policy --test vectors` compares with the Rust forward pass.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gearbox.models.sidecar import Feature, Sidecar, sha256_file, write_sidecar

FORMAT = "gearbox-mlp"
FORMAT_VERSION = 1
OBJECTIVE = "multi:softprob"
VECTOR_SET = "i_floo_actor"


def _checked(label: str, value: Any) -> np.ndarray:
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.floating):
        raise ValueError(f"actor parameters: {label} is {value.dtype}, not floating point")
    if not np.all(np.isfinite(value)):
        raise ValueError(f"actor parameters: {label} has non-finite values")
    return value


def _layers(params: Mapping[str, Any] | Sequence[tuple[Any, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The dense layers `(kernel (inputs, units), bias (units,))`, input first, of an
    actor's parameters, checked: `{"hidden": {"kernel", "bias"}, "logits": {"kernel",
    "bias"}}` (as `gearbox.floo.ppo` keeps them, or wrapped in flax's `{"params": ...}`),
    or already a sequence of `(kernel, bias)` pairs (a network of another shape written as
    dense layers, e.g. SAILfish's convolutional actor, `gearbox.sailfish.a2c.dense_layers`)."""
    if isinstance(params, Mapping):
        if "params" in params and "hidden" not in params:
            params = params["params"]
        pairs = []
        for layer in ("hidden", "logits"):
            if layer not in params:
                raise ValueError(f"actor parameters have no {layer!r} layer (have {sorted(params)})")
            for name in ("kernel", "bias"):
                if name not in params[layer]:
                    raise ValueError(f"actor parameters: {layer} has no {name!r}")
            pairs.append((layer, params[layer]["kernel"], params[layer]["bias"]))
    else:
        pairs = [(f"layer {i}", k, b) for i, (k, b) in enumerate(params)]
        if len(pairs) < 2:
            raise ValueError(f"an actor needs at least 2 dense layers (hidden and logits), got {len(pairs)}")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for i, (label, kernel, bias) in enumerate(pairs):
        w, b = _checked(f"{label}.kernel", kernel), _checked(f"{label}.bias", bias)
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise ValueError(f"actor parameters: {label} is not a dense layer: kernel {w.shape} + bias {b.shape}")
        if out and w.shape[0] != out[-1][0].shape[1]:
            raise ValueError(
                f"actor parameters: {label} takes {w.shape[0]} inputs, "
                f"{pairs[i - 1][0]} has {out[-1][0].shape[1]} units"
            )
        out.append((w, b))
    return out


def _floats(a: np.ndarray) -> list:
    """Nested lists of Python floats: exact for float32 and float64 values."""
    return np.asarray(a, dtype=np.float64).tolist()


def actor_to_json(
    params: Mapping[str, Any] | Sequence[tuple[Any, Any]],
    feature_names: Sequence[str],
    class_names: Sequence[str],
    info: Mapping[str, Any] | None = None,
    *,
    negative_slope: float = 0.01,
) -> dict:
    """The `gearbox-mlp` document of an actor (module docstring)."""
    layers = _layers(params)
    n_in, n_out = layers[0][0].shape[0], layers[-1][0].shape[1]
    names, classes = list(feature_names), list(class_names)
    if len(names) != n_in:
        raise ValueError(f"{len(names)} feature names for an actor with {n_in} inputs")
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f"feature names must be unique and non-empty: {names}")
    if len(classes) != n_out:
        raise ValueError(f"{len(classes)} class names for an actor with {n_out} actions")
    if len(classes) < 2 or len(set(classes)) != len(classes):
        raise ValueError(f"class names must be at least 2 and unique: {classes}")
    if not math.isfinite(negative_slope):
        raise ValueError(f"negative_slope must be finite, got {negative_slope}")
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "activation": "leaky_relu",
        "negative_slope": float(negative_slope),
        "output": "softmax",
        "num_class": len(classes),
        "feature_names": names,
        "impute": [0.0] * len(names),
        "layers": [{"weights": _floats(w), "bias": _floats(b)} for w, b in layers],
        "info": {"classes": classes, **dict(info or {})},
    }


def export_actor(
    params: Mapping[str, Any] | Sequence[tuple[Any, Any]],
    feature_names: Sequence[str],
    out_dir: str | Path,
    class_names: Sequence[str],
    info: Mapping[str, Any] | None = None,
    *,
    negative_slope: float = 0.01,
    model_version: str | None = None,
    training_data: str | Path | None = None,
    training_rows: int | None = None,
    name: str = "policy",
) -> Path:
    """Write `<out_dir>/<name>.json` (the actor, `gearbox-mlp`) and `<name>.meta.json` (its
    sidecar); returns the model path. `info` (JSON-serialisable: steps, seed, scenarios,
    library versions...) goes into the model file's `info`. `training_data`: a file that
    describes what the policy was trained on (e.g. the scenario list), whose sha256 the
    sidecar records; without it, the sha256 of `info`'s canonical JSON. `model_version`
    defaults to `floo-<first 12 digits of that digest>`."""
    doc = actor_to_json(params, feature_names, class_names, info, negative_slope=negative_slope)
    if training_data is not None:
        digest, data_file = sha256_file(training_data), Path(training_data).name
    else:
        canonical = json.dumps(dict(info or {}), sort_keys=True, separators=(",", ":"), allow_nan=False)
        digest, data_file = hashlib.sha256(canonical.encode()).hexdigest(), None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")
    write_sidecar(
        path,
        Sidecar(
            model_version=model_version or f"floo-{digest[:12]}",
            objective=OBJECTIVE,
            features=[Feature(n) for n in doc["feature_names"]],
            training_data_sha256=digest,
            training_data_file=data_file,
            training_rows=training_rows,
            class_labels=list(class_names),
            trainer=f"python/gearbox/floo/export.py ({_versions()})",
        ),
    )
    return path


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in ("jax", "flax", "optax"):
        try:
            out.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out) or "no jax"


def predict_json(doc: Mapping[str, Any], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, logits) of raw rows by the rule docs/models.md gives for this file
    (NaN -> impute, dense layers, Leaky ReLU, softmax), in plain NumPy float64: a
    reference for tests."""
    x = np.array(x, dtype=np.float64, ndmin=2)
    x = np.where(np.isnan(x), np.asarray(doc["impute"], np.float64), x)
    slope = doc["negative_slope"]
    layers = doc["layers"]
    for i, layer in enumerate(layers):
        x = x @ np.asarray(layer["weights"], np.float64) + np.asarray(layer["bias"], np.float64)
        if i < len(layers) - 1:
            x = np.where(x >= 0.0, x, slope * x)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), x


# ---------------------------------------------------------------------------------------
# The shipped test vector


def _f32_text(v: float) -> float | None:
    """A float32 value as the float its shortest decimal denotes (None for NaN)."""
    return None if math.isnan(v) else float(str(np.float32(v)))


def write_test_vector(out_dir: Path, seed: int = 20261201, rows: int = 200) -> list[Path]:
    """An actor of Floo's shape (16 observation features -> 200 Leaky ReLU units -> 4
    controllers) with random weights large enough that the logits spread over several
    units (a freshly initialised actor's are ~0.01, which would hide a wrong orientation
    or slope), exported, and JAX's own float32 forward pass on `rows` rows: values in
    [-1, 4] (the env's observations lie in [0, 10]; negatives exercise the inputs' sign),
    some exactly 0, ~10% missing (NaN, which the file's `impute` makes 0; JAX is given 0)."""
    import jax
    import jax.numpy as jnp

    from gearbox.floo.ppo import Actor, actor_logits
    from gearbox.sim.envs import ACTIONS, OBS_NAMES

    rng = np.random.default_rng(seed)
    n_in, hidden, n_out = len(OBS_NAMES), 200, len(ACTIONS)
    params = {
        "hidden": {
            "kernel": (rng.normal(size=(n_in, hidden)) / math.sqrt(n_in)).astype(np.float32),
            "bias": rng.normal(scale=0.5, size=hidden).astype(np.float32),
        },
        "logits": {
            "kernel": (rng.normal(size=(hidden, n_out)) * 2.0 / math.sqrt(hidden)).astype(np.float32),
            "bias": rng.normal(scale=0.5, size=n_out).astype(np.float32),
        },
    }
    x = rng.uniform(-1.0, 4.0, size=(rows, n_in)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = 0.0
    x[rng.random(x.shape) < 0.1] = np.nan
    x[0, :] = np.nan  # every input missing
    # Centre each logit over these rows, so that every controller is the greedy choice of
    # some rows (inputs of one sign otherwise push all rows towards one or two classes).
    mean_logits = actor_logits(params, np.nan_to_num(x, nan=0.0)).mean(axis=0)
    params["logits"]["bias"] = (params["logits"]["bias"] - mean_logits).astype(np.float32)
    actor = Actor(n_out, hidden, 0.01)
    logits = actor.apply(
        {"params": jax.tree_util.tree_map(jnp.asarray, params)}, jnp.asarray(np.nan_to_num(x, nan=0.0))
    )
    logits = np.asarray(logits, dtype=np.float32)
    probabilities = np.asarray(jax.nn.softmax(jnp.asarray(logits)), dtype=np.float32)

    info = {"purpose": "test vector: random weights, not a trained policy", "seed": seed, "jax": jax.__version__}
    model = export_actor(
        params,
        OBS_NAMES,
        out_dir,
        ACTIONS,
        info,
        model_version=f"test-vectors-{VECTOR_SET}-1",
        name=VECTOR_SET,
    )
    return write_vector_cases(out_dir, VECTOR_SET, list(OBS_NAMES), x, logits, probabilities, model)


def write_vector_cases(
    out_dir: Path,
    set_name: str,
    features: list[str],
    x: np.ndarray,
    logits: np.ndarray,
    probabilities: np.ndarray,
    model: Path,
) -> list[Path]:
    """The cases of an exported actor's test vector (`SET.cases.json`: the rows as float32
    decimals, NaN as null, and JAX's outputs on them), which `gearbox-policy`'s vector tests
    replay in Rust; returns the set's three files (model, meta, cases)."""
    cases = {
        "set": set_name,
        "features": features,
        "rows": [[_f32_text(v) for v in row] for row in x.tolist()],
        "predict": probabilities.tolist(),
        "output_margin": logits.tolist(),
        "class": np.argmax(logits, axis=1).tolist(),
    }
    cases_path = Path(out_dir) / f"{set_name}.cases.json"
    cases_path.write_text(json.dumps(cases, separators=(",", ":")) + "\n")
    return [model, model.with_name(f"{set_name}.meta.json"), cases_path]


def vector_main(argv: list[str] | None, description: str, set_name: str, write: Callable[[Path], list[Path]]) -> None:
    """The command that rewrites a shipped test vector: `--test-vector [--out-dir DIR]`."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--test-vector", action="store_true", help=f"write {set_name}.* (random actor, JAX outputs)")
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=Path(__file__).resolve().parents[3] / "crates/gearbox-policy/tests/vectors",
    )
    args = ap.parse_args(argv)
    if not args.test_vector:
        ap.error("nothing to do: give --test-vector")
    for path in write(args.out_dir):
        print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    vector_main(argv, "Floo actor export: write the shipped test vector", VECTOR_SET, write_test_vector)


if __name__ == "__main__":
    main()
