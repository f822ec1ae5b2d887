"""`gearbox lab flexhttp dataset|train|evaluate`: FlexHTTP's data and classifiers (§2, §3.3.2, §4).

    gearbox lab flexhttp dataset --out DIR [--conditions N | --configs paper] [--pages P] [--pages-seed S]
                                 [--reps R] [--jobs J] [--seed S]                   # needs root
    gearbox lab flexhttp train --dataset DIR [--out DIR] [--folds 10]
    gearbox lab flexhttp evaluate --model DIR --dataset DIR [--si SI.jsonl ...]      # §4's comparison
    gearbox lab flexhttp chromium --dataset DIR --out DIR [--http h2 --http h3 --http chromium] [--reps 3]
                                                              # Speed Index of its pages in Chromium (root)
    gearbox lab flexhttp probe --out DIR [--configs paper]    # the agent's estimates on emulated paths (root)
    gearbox lab flexhttp loop --dataset DIR [--eval-dataset DIR] --out DIR   # a dataset through a real agent
    gearbox lab flexhttp demo --out DIR [--pages 2] [--reps 2]   # the whole loop on two emulated paths (root)

**dataset.** Network conditions are drawn from Table 1's grid (capacity 0.5-25 Mbit/s, RTT 30-500 ms,
loss 0.01-3 %, seven levels each, 343 cells) by the space-filling WSP algorithm (gearbox.lab.sampling)
over the three level indices, so a small sample still spreads over the whole grid; `--configs paper` takes
§4's five configurations instead. Pages come from the page kit (`gearbox pages gen`, Table 1's page
set). For each condition one `gearbox emu` run serves the pages from our edge and our client's page
loader (RFC 9218 priorities, dependency order, a new connection per load) loads every page over HTTP/2
and HTTP/3 `reps` times, alternating which version goes first. The page set is the kit's first `pages`
pages of at most `max_page_bytes` (3 MB by default: the lab time of one 11 MB page at 0.5 Mbit/s is
minutes per load; the docs say what this leaves out). One JSON line per load in
`DIR/loads.jsonl`: the condition, the page, the version, the page load time (PLT) and the load event's
time (what delays a browser's `load` event: every object but the data scripts fetch). The page load time is
the fast proxy for Speed Index the issue asks for; Chromium's SI (`gearbox pages measure`) measures the
same conditions and pages when wanted. `--jobs J` runs J conditions at once, each in its own namespaces.

**train.** Ground truth per (condition, page): the version with the smaller median PLT. Features: the
condition's three network values and the page's eight Table 1 features (features.FEATURES). Classifiers
(§4): a decision tree (scikit-learn defaults), a random forest of depth 4 (100 trees, the seed's choice)
and XGBoost (its defaults), each scored by 10-fold cross-validation grouped by condition (a condition's
pages are never in training and test at once; rows are not shuffled apart). Also reported: how often
the agent's k-means labels (labels.py) agree with the ground truth for several k, and the CV accuracy of
the forest trained on those labels, the way the agent trains. The exported model (`OUT/model`) is the
agent's: a depth-4 forest on k-means labels of every load (forest.export).

**evaluate.** On a dataset measured at other conditions or pages, each (condition, page) gets the model's
choice, and its median PLT is compared with H2-only, H3-only and the per-page oracle.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gearbox.flexhttp.features import FEATURES, NETWORK_FEATURES, PAGE_FEATURES, VERSIONS
from gearbox.pages.chromium import VERSIONS as BROWSER_VERSIONS
from gearbox.pages.chromium import Condition

#: Table 1's experiment settings.
TABLE1 = {
    "rate_mbps": (0.5, 1, 3, 5, 7, 10, 25),
    "rtt_ms": (30, 50, 80, 120, 200, 300, 500),
    "loss_rate": (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.03),
}
#: §4's five configurations (RTT ms, loss, capacity Mbit/s).
PAPER_CONFIGS = ((30, 0.0001, 10), (80, 0.0005, 7), (120, 0.005, 5), (230, 0.01, 3), (300, 0.03, 1))
PORT = 4433
TRANSPORT = {"h2": "tcp", "h3": "quic"}
#: Our loader's time of a page load that labels and comparisons use (`--metric`): `plt`, every object
#: complete (`page_load_ms`); `load-event`, every object that delays a browser's load event, so not
#: the data the page's scripts fetch (`load_event_ms`, the time Chromium reports as loaded).
METRICS = {"plt": "page_load_ms", "load-event": "load_event_ms"}
#: How a report names each metric.
METRIC_NAMES = {"plt": "page load time (our loader)", "load-event": "load event (our loader)"}


class FlexLabError(RuntimeError):
    """A dataset, model or argument that cannot be used; says which and why."""


def sample_conditions(n: int, seed: int) -> list[Condition]:
    """`n` distinct cells of Table 1's grid, spread by WSP over the level indices."""
    from gearbox.lab.sampling import wsp

    if not 1 <= n <= 343:
        raise FlexLabError(f"--conditions must be between 1 and 343 (Table 1's grid), got {n}")
    levels = [TABLE1["rtt_ms"], TABLE1["loss_rate"], TABLE1["rate_mbps"]]
    for extra in range(0, 400):
        pts = wsp(n + extra, 3, seed)
        cells: list[tuple[int, int, int]] = []
        for p in pts:
            cell = tuple(min(6, int(v * 7)) for v in p)
            if cell not in cells:
                cells.append(cell)
        if len(cells) >= n:
            break
    return [Condition(levels[0][a], levels[1][b], levels[2][c]) for a, b, c in cells[:n]]


def condition_id(c: Condition) -> str:
    return f"rtt{c.rtt_ms:g}-loss{c.loss_rate * 100:g}-rate{c.rate_mbps:g}"


# --- dataset --------------------------------------------------------------------------------------


def _gearbox_bin() -> Path:
    from gearbox.lab.environment import check_emulator, find_gearbox

    check_emulator()
    return find_gearbox()


def dataset(
    out: Path,
    conditions: list[Condition],
    pages: int,
    pages_seed: int,
    reps: int,
    jobs: int,
    seed: int,
    request_timeout_s: float,
    max_page_bytes: float = 3e6,
    gearbox: Path | None = None,
) -> Path:
    from gearbox.pages.generate import generate

    gearbox = gearbox or _gearbox_bin()
    out.mkdir(parents=True, exist_ok=True)
    sites = out / "sites"
    if not (sites / "pages.json").is_file():
        generate(sites, 3 * pages, pages_seed)
    manifest = json.loads((sites / "pages.json").read_text())
    names = [p["name"] for p in manifest["pages"] if p["features"]["all_bytes"] <= max_page_bytes][:pages]
    if len(names) < pages:
        raise FlexLabError(
            f"{sites}: {len(names)} pages of at most {max_page_bytes:g} bytes, {pages} asked for "
            "(remove it to generate again, or raise --max-page-bytes)"
        )
    (out / "conditions.json").write_text(json.dumps([asdict(c) for c in conditions], indent=1) + "\n")
    cert, key = out / "cert.pem", out / "key.pem"
    if not cert.is_file():
        subprocess.run(
            [str(gearbox), "cert", "--name", "10.0.0.1,localhost", "--cert", str(cert), "--key", str(key)],
            check=True,
            capture_output=True,
        )
    runs = out / "runs"
    runs.mkdir(exist_ok=True)
    todo = [c for c in conditions if not (runs / f"{condition_id(c)}.done").exists()]
    est = sum(_estimate_s(c, manifest, names) for c in todo) * len(names) * reps * 2
    print(
        f"flexhttp dataset: {len(conditions)} conditions ({len(conditions) - len(todo)} done), {len(names)} pages, "
        f"{reps} reps x h2, h3: {len(todo) * len(names) * reps * 2} loads, at least {est / 60 / jobs:.0f} min "
        f"with --jobs {jobs}",
        flush=True,
    )
    started = time.monotonic()

    def one(c: Condition) -> str:
        cid = condition_id(c)
        work = runs / cid
        work.mkdir(exist_ok=True)
        (work / "emu.toml").write_text(c.emu_toml())
        rows = work / "loads.jsonl"
        rows.unlink(missing_ok=True)
        spec = {
            "condition": asdict(c) | {"id": cid},
            "cert": str(cert.resolve()),
            "sites": str(sites.resolve()),
            "pages": names,
            "reps": reps,
            "out": str(rows.resolve()),
            "request_timeout_s": request_timeout_s,
        }
        (work / "spec.json").write_text(json.dumps(spec, indent=1))
        server = f"exec {gearbox} edge --listen 10.0.0.1:{PORT} --cert {cert.resolve()} --key {key.resolve()} " + (
            f"--static-dir {sites.resolve()}"
        )
        client = (
            f"exec {shlex.quote(sys.executable)} -m gearbox.flexhttp.lab client {shlex.quote(str(work / 'spec.json'))}"
        )
        cmd = [str(gearbox), "emu", "--config", str(work / "emu.toml"), "--seed", str(seed)]
        cmd += ["--ready-ports", f"{PORT}/tcp,{PORT}/udp", "--ready-timeout-s", "30"]
        cmd += ["--server", server, "--client", client]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        with open(work / "emu.log", "wb") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            return f"{cid}: gearbox emu exited with {code} (see {work / 'emu.log'})"
        (runs / f"{cid}.done").write_text("")
        done = sum(1 for c in conditions if (runs / f"{condition_id(c)}.done").exists())
        print(f"  {cid} done ({done}/{len(conditions)}, {time.monotonic() - started:.0f} s)", flush=True)
        return ""

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        failures = [m for m in pool.map(one, todo) if m]
    with open(out / "loads.jsonl", "w") as f:
        for c in conditions:
            p = runs / condition_id(c) / "loads.jsonl"
            if p.is_file():
                f.write(p.read_text())
    for m in failures:
        print(f"  failed: {m}", file=sys.stderr)
    print(f"flexhttp dataset: {out / 'loads.jsonl'} ({time.monotonic() - started:.0f} s)")
    if failures:
        raise FlexLabError(f"{len(failures)} of {len(todo)} conditions failed; run again to retry only them")
    return out / "loads.jsonl"


def _estimate_s(c: Condition, manifest: dict, names: list[str]) -> float:
    """A load's rough time: its bytes at the path's rate plus a few round trips of dependency depth."""
    feats = {p["name"]: p["features"] for p in manifest["pages"]}
    return sum(feats[n]["all_bytes"] * 8 / (c.rate_mbps * 1e6) + 6 * c.rtt_ms / 1000 for n in names) / len(names)


def client_main(spec_path: Path) -> int:
    """The client side of one condition (runs inside the emulator's client namespace)."""
    import gearbox

    spec = json.loads(spec_path.read_text())
    origin = f"https://{os.environ.get('GEARBOX_SERVER_ADDR', '10.0.0.1')}:{PORT}"
    sites = Path(spec["sites"])
    graphs = {n: json.loads((sites / f"{n}.page.json").read_text()) for n in spec["pages"]}
    errors = 0
    with (
        open(spec["out"], "a") as out,
        gearbox.Client(ca=spec["cert"], connect_timeout_s=10, request_timeout_s=spec["request_timeout_s"]) as client,
    ):
        for rep in range(spec["reps"]):
            for i, name in enumerate(spec["pages"]):
                order = VERSIONS if (rep + i) % 2 == 0 else tuple(reversed(VERSIONS))
                for version in order:
                    row = {"condition": spec["condition"], "page": name, "http_version": version, "rep": rep}
                    try:
                        load = client.load_page(
                            origin, graphs[name], transport=TRANSPORT[version], fresh_connection=True
                        )
                        row |= {
                            "page_load_ms": load["page_load_ms"],
                            "load_event_ms": load["load_event_ms"],
                            "protocol": load["protocol"],
                            "objects": len(load["objects"]),
                            "bytes": sum(o["record"]["bytes"] for o in load["objects"]),
                        }
                    except Exception as e:  # noqa: BLE001 - recorded; the run goes on
                        errors += 1
                        row["error"] = f"{type(e).__name__}: {e}"
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    return 0


# --- reading a dataset ----------------------------------------------------------------------------


def read_dataset(
    path: Path, si_paths: list[Path] | None = None, metric: str = "plt"
) -> tuple[list[dict], dict[str, dict]]:
    """(loads without error, page features by page name) of a dataset folder. With `si_paths`, the
    loads are instead Chromium's h2 and h3 loads of those Speed Index files, their SI standing where
    our loader's page load time stands (`page_load_ms`), so that training learns SI's winner. With
    `metric` "load-event", our loader's load-event time (METRICS) stands there instead."""
    if si_paths:
        _, pages = read_dataset(path)
        si_rows, _ = read_si(si_paths)
        rows = []
        for r in si_rows:
            if r["http_version"] not in VERSIONS:
                continue
            if r["page"] not in pages:
                raise FlexLabError(f"page {r['page']} of the Speed Index rows is not in {path / 'sites'}")
            rows.append(r | {"condition": si_condition(r), "page_load_ms": float(r["speed_index_ms"])})
        return rows, pages
    if metric not in METRICS:
        raise FlexLabError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    field = METRICS[metric]
    rows, _ = _load_rows(
        path / "loads.jsonl",
        field,
        "make it with `gearbox lab flexhttp dataset`"
        + ("; datasets made before the load event was recorded have PLT only" if field != "page_load_ms" else ""),
    )
    if field != "page_load_ms":
        rows = [r | {"page_load_ms": float(r[field])} for r in rows]
    manifest = json.loads((path / "sites" / "pages.json").read_text())
    return rows, {p["name"]: p["features"] for p in manifest["pages"]}


def _load_rows(path: Path, value: str, hint: str) -> tuple[list[dict], int]:
    """(loads with `value`, failed loads) of a JSON-lines file of page loads; a line that is not JSON or
    lacks a field is an error naming the file, line and field."""
    if not path.is_file():
        raise FlexLabError(f"{path}: no such file ({hint})")
    rows, failed = [], 0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise FlexLabError(f"{path}:{i}: not JSON: {e}") from e
        for key in ("condition", "page", "http_version"):
            if key not in r:
                raise FlexLabError(f"{path}:{i}: {key}: missing")
        if "error" in r:
            failed += 1
            continue
        if value not in r:
            raise FlexLabError(f"{path}:{i}: {value}: missing")
        rows.append(r)
    return rows, failed


def si_condition(row: dict) -> dict:
    """A Speed Index row's condition as a dataset's loads carry it, with its id."""
    c = row["condition"]
    cond = {"rtt_ms": c["rtt_ms"], "loss_rate": c["loss_rate"], "rate_mbps": c["rate_mbps"]}
    return cond | {"id": condition_id(Condition(c["rtt_ms"], c["loss_rate"], c["rate_mbps"]))}


def features_of(cond: dict, page: dict) -> list[float]:
    net = {"rtt_ms": cond["rtt_ms"], "loss_rate": cond["loss_rate"], "capacity_mbps": cond["rate_mbps"]}
    return [float(net[n]) for n in NETWORK_FEATURES] + [float(page[n]) for n in PAGE_FEATURES]


def groups(rows: list[dict], pages: dict[str, dict]) -> list[dict]:
    """Per (condition, page) with both versions measured: features, median PLT of each, the winner."""
    by: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cond_of: dict[str, dict] = {}
    for r in rows:
        by[(r["condition"]["id"], r["page"])][r["http_version"]].append(r["page_load_ms"])
        cond_of[r["condition"]["id"]] = r["condition"]
    out = []
    for (cid, page), v in sorted(by.items()):
        if not v.get("h2") or not v.get("h3"):
            continue
        h2, h3 = statistics.median(v["h2"]), statistics.median(v["h3"])
        out.append(
            {
                "condition": cid,
                "cond": cond_of[cid],
                "page": page,
                "x": features_of(cond_of[cid], pages[page]),
                "h2_ms": h2,
                "h3_ms": h3,
                "label": int(h3 < h2),
            }
        )
    return out


# --- train ----------------------------------------------------------------------------------------


def classifiers(seed: int) -> dict:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier
    from xgboost import XGBClassifier

    from gearbox.flexhttp.forest import MAX_DEPTH, N_TREES

    return {
        "decision tree": DecisionTreeClassifier(random_state=seed),
        f"random forest (depth {MAX_DEPTH})": RandomForestClassifier(
            n_estimators=N_TREES, max_depth=MAX_DEPTH, random_state=seed, n_jobs=1
        ),
        "xgboost": XGBClassifier(random_state=seed, n_jobs=1, verbosity=0),
    }


def grouped_cv(model_fn, x: np.ndarray, y: np.ndarray, cond: np.ndarray, folds: int, fit_y=None) -> list[float]:  # noqa: ANN001
    """Accuracy per fold of GroupKFold by condition; `fit_y` (default y) is what the model learns from,
    `y` what it is scored against."""
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold

    fit_y = y if fit_y is None else fit_y
    accs = []
    for tr, te in GroupKFold(n_splits=folds).split(x, y, cond):
        if len(set(fit_y[tr].tolist())) < 2:  # one class in training: a constant predictor
            pred = np.full(len(te), fit_y[tr][0])
        else:
            pred = clone(model_fn).fit(x[tr], fit_y[tr]).predict(x[te])
        accs.append(float((pred == y[te]).mean()))
    return accs


def train(
    dataset_dir: Path,
    out: Path,
    folds: int,
    seed: int,
    ks: list[int],
    si_paths: list[Path] | None = None,
    metric: str = "plt",
) -> dict:
    """Classifiers by grouped CV, k-means labels, the exported forest; by our loader's page load time,
    or with `si_paths` by Chromium's Speed Index of the same pages and conditions."""
    from gearbox.flexhttp.forest import TrainError, export, fit_forest
    from gearbox.flexhttp.labels import choose_k, label

    rows, pages = read_dataset(dataset_dir, si_paths, metric)
    g = groups(rows, pages)
    if not g:
        raise FlexLabError(f"{dataset_dir}: no (condition, page) measured over both versions")
    x = np.array([r["x"] for r in g])
    y = np.array([r["label"] for r in g])
    cond = np.array([r["condition"] for r in g])
    n_cond = len(set(cond.tolist()))
    folds = min(folds, n_cond)
    if folds < 2:
        raise FlexLabError(f"{dataset_dir}: {n_cond} condition(s); grouped cross-validation needs at least 2")
    report: dict = {
        "dataset": str(dataset_dir),
        "metric": "speed index (chromium)" if si_paths else METRIC_NAMES[metric],
        "loads": len(rows),
        "groups": len(g),
        "conditions": n_cond,
        "pages": len({r["page"] for r in g}),
        "h3_wins": float(y.mean()),
        "folds": folds,
        "classifiers": {},
    }
    for name, model in classifiers(seed).items():
        accs = grouped_cv(model, x, y, cond, folds)
        report["classifiers"][name] = {"accuracy": float(np.mean(accs)), "std": float(np.std(accs)), "folds": accs}
    report["classifiers"]["always the majority version"] = {
        "accuracy": float(max(y.mean(), 1 - y.mean())),
        "std": 0.0,
        "folds": [],
    }
    # The agent's way: k-means labels over every load, then the forest.
    lx = np.array([features_of(r["condition"], pages[r["page"]]) for r in rows])
    lv = [r["http_version"] for r in rows]
    lsi = np.array([r["page_load_ms"] for r in rows])
    key = {(r["condition"], r["page"]): i for i, r in enumerate(g)}
    truth_of_load = np.array(
        [
            g[key[(r["condition"]["id"], r["page"])]]["label"] if (r["condition"]["id"], r["page"]) in key else -1
            for r in rows
        ]
    )
    have = truth_of_load >= 0
    kmeans = {}
    auto_k = choose_k(len(rows))
    for k in sorted({auto_k, *[k for k in ks if 2 <= k < len(rows)]}):
        lab = label(lx, lv, lsi, k=k, seed=seed)
        ent = np.array([-1 if v is None else VERSIONS.index(v) for v in lab.entry_labels()])
        agree = float((ent[have] == truth_of_load[have]).mean())
        # Group label from k-means: the label most of the group's loads got.
        gl = np.zeros(len(g), dtype=int)
        votes: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            j = key.get((r["condition"]["id"], r["page"]))
            if j is not None and ent[i] >= 0:
                votes[j].append(int(ent[i]))
        for j in range(len(g)):
            gl[j] = round(statistics.mean(votes[j])) if votes[j] else 0
        forest = classifiers(seed)[f"random forest (depth {4})"]
        accs = grouped_cv(forest, x, y, cond, folds, fit_y=gl)
        # FlexHTTP's own measure (§3.3.2, §4: "10-fold cross-validation" of a forest whose ground truth
        # is the k-means labels): learnt from and scored against the same labels, here grouped by condition.
        self_accs = grouped_cv(forest, x, gl, cond, folds)
        kmeans[str(k)] = {
            "auto": k == auto_k,
            "label_agreement": agree,
            "forest_on_kmeans_labels_accuracy": float(np.mean(accs)),
            "forest_against_kmeans_labels_accuracy": float(np.mean(self_accs)),
            # What always answering the labels' majority version would score by that measure.
            "kmeans_labels_majority": float(max(gl.mean(), 1 - gl.mean())),
        }
    report["kmeans"] = kmeans
    # The exported model: as the agent trains it.
    out.mkdir(parents=True, exist_ok=True)
    lab = label(lx, lv, lsi, k=auto_k, seed=seed)
    try:
        summary = export(out / "model", lx, lab, seed, note=f"lab dataset {dataset_dir.name}, {len(rows)} loads")
        report["model"] = summary | {"dir": str(out / "model")}
    except TrainError as e:
        report["model"] = {"error": str(e)}
    # And the same forest on the ground truth, for evaluate's comparison.
    gt = fit_forest(x, y, seed) if len(set(y.tolist())) == 2 else None
    if gt is not None:
        from gearbox.models.sklearn_to_json import save_forest

        save_forest(gt, out / "forest-ground-truth.json", list(FEATURES))
    report["r_si"] = heatmaps(g)
    (out / "train.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def heatmaps(g: list[dict]) -> dict:
    """Fig. 1 (median R = PLT_h2 / PLT_h3 over RTT x loss) and Fig. 2 (over files x page bytes), from the data."""
    fig1: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fig2: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in g:
        ratio = r["h2_ms"] / r["h3_ms"]
        fig1[f"{r['cond']['rtt_ms']:g}"][f"{r['cond']['loss_rate'] * 100:g}"].append(ratio)
        files = r["x"][len(NETWORK_FEATURES)]
        size = r["x"][len(NETWORK_FEATURES) + 1]
        fb = "<10" if files < 10 else "10-30" if files < 30 else "30-60" if files < 60 else ">=60"
        sb = "<0.25MB" if size < 2.5e5 else "0.25-1MB" if size < 1e6 else ">=1MB"
        fig2[fb][sb].append(ratio)

    def med(d: dict) -> dict:
        return {a: {b: [statistics.median(v), len(v)] for b, v in sorted(row.items())} for a, row in d.items()}

    return {"rtt_x_loss": med(fig1), "files_x_bytes": med(fig2)}


# --- evaluate -------------------------------------------------------------------------------------


def forest_predict(model: Path, x: np.ndarray) -> np.ndarray:
    """P(h3) of each row by an exported forest (a folder's forest.json, or the file itself), walking
    its trees in the format gearbox-policy reads."""
    path = model / "forest.json" if model.is_dir() else model
    if not path.is_file():
        raise FlexLabError(f"{path}: no such file (a model folder from train or the agent, or its forest.json)")
    doc = json.loads(path.read_text())
    trees = doc["learner"]["gradient_booster"]["model"]["trees"]
    out = np.zeros(len(x))
    for t in trees:
        left, right = t["left_children"], t["right_children"]
        idx, cond, dl = t["split_indices"], t["split_conditions"], t["default_left"]
        w = t["base_weights"]
        ncls = int(t["tree_param"]["size_leaf_vector"])
        for i, row in enumerate(x):
            n = 0
            while left[n] != -1:
                v = row[idx[n]]
                go_left = bool(dl[n]) if math.isnan(v) else np.float32(v) < np.float32(cond[n])
                n = left[n] if go_left else right[n]
            out[i] += w[n * ncls + 1]
    return out / len(trees)


def evaluate(model_dir: Path, dataset_dir: Path, metric: str = "plt") -> dict:
    rows, pages = read_dataset(dataset_dir, metric=metric)
    g = groups(rows, pages)
    if not g:
        raise FlexLabError(f"{dataset_dir}: no (condition, page) measured over both versions")
    x = np.array([r["x"] for r in g])
    p = forest_predict(model_dir, x)
    choice = p >= 0.5
    per_cond: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r, c in zip(g, choice, strict=True):
        d = per_cond[r["condition"]]
        d["h2-only"].append(r["h2_ms"])
        d["h3-only"].append(r["h3_ms"])
        d["flexhttp"].append(r["h3_ms"] if c else r["h2_ms"])
        d["oracle"].append(min(r["h2_ms"], r["h3_ms"]))
        d["right"].append(float(bool(c) == bool(r["label"])))
    policies = ("h2-only", "h3-only", "flexhttp", "oracle")
    allv = {k: [v for d in per_cond.values() for v in d[k]] for k in policies}
    report = {
        "dataset": str(dataset_dir),
        "model": str(model_dir),
        "groups": len(g),
        "accuracy": float(np.mean([v for d in per_cond.values() for v in d["right"]])),
        "overall": {k: {"mean_ms": statistics.fmean(v), "median_ms": statistics.median(v)} for k, v in allv.items()},
        "per_condition": {
            cid: {k: statistics.median(d[k]) for k in policies} | {"accuracy": statistics.fmean(d["right"])}
            for cid, d in per_cond.items()
        },
    }
    return report


# --- Speed Index in Chromium ----------------------------------------------------------------------


def dataset_pages(dataset_dir: Path) -> list[str]:
    """The pages a dataset loaded, in order."""
    rows, _ = read_dataset(dataset_dir)
    return sorted({r["page"] for r in rows})


def chromium(
    dataset_dir: Path,
    out: Path,
    versions: list[str],
    reps: int,
    seed: int,
    visits: int = 2,
    gearbox: Path | None = None,
    max_conditions: int | None = None,
    max_pages: int | None = None,
) -> Path:
    """Speed Index of a dataset's pages in its conditions, measured in Chromium (`gearbox pages
    measure`'s path and speedline meter), one condition at a time: Chromium's rendering needs the
    CPU, so conditions are not run side by side. Appends to OUT/si.jsonl; a condition already there
    (OUT/COND.done) is skipped, so a stopped run continues. `max_conditions` takes that many of the
    dataset's conditions, evenly spread over its list; `max_pages` its first pages."""
    from gearbox.pages.chromium import measure_over_emu

    gearbox = gearbox or _gearbox_bin()
    conds_path = dataset_dir / "conditions.json"
    if not conds_path.is_file():
        raise FlexLabError(f"{conds_path}: no such file (make the dataset with `gearbox lab flexhttp dataset`)")
    conditions = [Condition(**c) for c in json.loads(conds_path.read_text())]
    if max_conditions is not None and max_conditions < len(conditions):
        n = len(conditions)
        conditions = [conditions[i * n // max_conditions] for i in range(max_conditions)]
    pages = dataset_pages(dataset_dir)[:max_pages]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for i, c in enumerate(conditions, 1):
        cid = condition_id(c)
        if (out / f"{cid}.done").exists():
            continue
        code = measure_over_emu(
            gearbox,
            dataset_dir / "sites",
            pages,
            c,
            versions,
            reps,
            out / "si.jsonl",
            out / cid,
            seed,
            meter="speedline",
            visits=visits,
        )
        if code != 0:
            raise FlexLabError(f"{cid}: Chromium's loads failed (gearbox emu exit {code}; rows in {out / 'si.jsonl'})")
        (out / f"{cid}.done").write_text("")
        print(f"  {cid} done ({i}/{len(conditions)}, {time.monotonic() - started:.0f} s)", flush=True)
    return out / "si.jsonl"


def read_si(paths: list[Path]) -> tuple[list[dict], int]:
    """(measured loads, failed loads) of `gearbox pages measure` / `chromium` output files."""
    rows, failed = [], 0
    for path in paths:
        ok, bad = _load_rows(path, "speed_index_ms", "Speed Index rows from `gearbox lab flexhttp chromium`")
        rows += ok
        failed += bad
    return rows, failed


#: What each policy of the SI table loads: a forced version, the model's choice, the better one, or
#: Chromium's own (its first visit to the origin, and a later one after Alt-Svc).
SI_POLICIES = ("h2-only", "h3-only", "flexhttp", "oracle", "chromium-first", "chromium-later")


def si_noise_floor(pairs: list[dict[str, list[float]]]) -> dict | None:
    """How much of the per-pair oracle's gain a browser's run-to-run noise gives alone, from the pairs
    with two loads of each version (the first two, in file order). `same_version_gain`: per version,
    how far the mean of one load lies above the mean of an "oracle" that takes the faster of two loads
    of that same version; `between_versions_gain`: the same for H3-only against the faster of one H2
    and one H3 load (the oracle as `evaluate_si` builds it, from one load instead of the median);
    `winner_agreement`: the share of pairs whose faster version is the same in both loads. Where the
    first is as large as the second, the oracle's lead over the static versions is noise (the
    WiseTrans evaluation reports its noise floor the same way, docs/wisetrans.md). None without such
    pairs."""
    both = [(v["h2"][:2], v["h3"][:2]) for v in pairs if len(v.get("h2", [])) >= 2 and len(v.get("h3", [])) >= 2]
    if not both:
        return None

    def gain(one: list[float], other: list[float]) -> float:
        return statistics.fmean(one) / statistics.fmean(min(a, b) for a, b in zip(one, other, strict=True)) - 1

    same = {}
    for i, version in enumerate(("h2", "h3")):
        first, second = [p[i][0] for p in both], [p[i][1] for p in both]
        same[version] = (gain(first, second) + gain(second, first)) / 2
    between = statistics.fmean(gain([p[1][k] for p in both], [p[0][k] for p in both]) for k in (0, 1))
    agree = statistics.fmean(float((p[1][0] < p[0][0]) == (p[1][1] < p[0][1])) for p in both)
    return {"pairs": len(both), "same_version_gain": same, "between_versions_gain": between, "winner_agreement": agree}


def evaluate_si(model_dir: Path, dataset_dir: Path, si_paths: list[Path], metric: str = "plt") -> dict:
    """FlexHTTP §4's comparison by Speed Index in Chromium: per (condition, page) the median SI of each
    version; the model decides from the page's and the path's features as in `evaluate`. Also how
    often our loader's ordering (the dataset's median PLT, or load event by `metric`) agrees with
    Chromium's SI ordering."""
    si_rows, failed = read_si(si_paths)
    _, pages = read_dataset(dataset_dir)
    by: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cond_of: dict[str, dict] = {}
    for r in si_rows:
        cond = si_condition(r)
        cid = cond["id"]
        cond_of[cid] = cond
        v = r["http_version"]
        if v == "chromium":
            v = "chromium-first" if r.get("visit", 0) == 0 else "chromium-later"
        if r["page"] not in pages:
            raise FlexLabError(f"page {r['page']} of the Speed Index rows is not in {dataset_dir / 'sites'}")
        by[(cid, r["page"])][v].append(float(r["speed_index_ms"]))
    loader = {(g["condition"], g["page"]): g for g in groups(*read_dataset(dataset_dir, metric=metric))}
    pairs = [(k, v) for k, v in sorted(by.items()) if v.get("h2") and v.get("h3")]
    if not pairs:
        raise FlexLabError("no (condition, page) with Speed Index over both h2 and h3")
    x = np.array([features_of(cond_of[cid], pages[page]) for (cid, page), _ in pairs])
    choice = forest_predict(model_dir, x) >= 0.5
    per_cond: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    agree: list[float] = []
    chromium_pairs = 0
    for ((cid, page), v), c in zip(pairs, choice, strict=True):
        h2, h3 = statistics.median(v["h2"]), statistics.median(v["h3"])
        d = per_cond[cid]
        d["h2-only"].append(h2)
        d["h3-only"].append(h3)
        d["flexhttp"].append(h3 if c else h2)
        d["oracle"].append(min(h2, h3))
        d["right"].append(float(bool(c) == (h3 < h2)))
        if v.get("chromium-first") and v.get("chromium-later"):
            chromium_pairs += 1
            d["chromium-first"].append(statistics.median(v["chromium-first"]))
            d["chromium-later"].append(statistics.median(v["chromium-later"]))
        if (cid, page) in loader:
            agree.append(float(bool(loader[(cid, page)]["label"]) == (h3 < h2)))
    # Chromium's own choice is compared only where it was measured for every pair.
    policies = [p for p in SI_POLICIES if chromium_pairs == len(pairs) or not p.startswith("chromium")]
    allv = {k: [v for d in per_cond.values() for v in d[k]] for k in policies}
    return {
        "dataset": str(dataset_dir),
        "model": str(model_dir),
        "si": [str(p) for p in si_paths],
        "loads": len(si_rows),
        "failed_loads": failed,
        "groups": len(pairs),
        "chromium_groups": chromium_pairs,
        "h3_faster_share": float(np.mean([statistics.median(v["h3"]) < statistics.median(v["h2"]) for _, v in pairs])),
        "accuracy": float(np.mean([v for d in per_cond.values() for v in d["right"]])),
        "loader_agreement": float(np.mean(agree)) if agree else None,
        "loader_pairs": len(agree),
        "loader_metric": metric,
        "noise_floor": si_noise_floor([v for _, v in pairs]),
        "overall": {k: {"mean_ms": statistics.fmean(v), "median_ms": statistics.median(v)} for k, v in allv.items()},
        "per_condition": {
            cid: {k: statistics.median(d[k]) for k in policies} | {"accuracy": statistics.fmean(d["right"])}
            for cid, d in per_cond.items()
        },
    }


# --- the agent against the emulator and the loop ------------------------------------------------

AGENT_PORT, PROBE_PORT = 8443, 4460


def _agent_dir(work: Path, host: str, port: int, probe_host: str) -> tuple[Path, dict[str, str]]:
    """An agent's folder: certificate, config and one token per role (client, learner)."""
    from gearbox import _native
    from gearbox.control.store import open_store
    from gearbox.control.tokens import hash_token, new_token

    work.mkdir(parents=True, exist_ok=True)
    _native.make_cert([host, "localhost"], str(work / "cert.pem"), str(work / "key.pem"))
    (work / "agent.toml").write_text(
        f'[server]\nlisten = "{host}:{port}"\ncert = "cert.pem"\nkey = "key.pem"\nstore = "store"\n'
        f'max_body_bytes = 67108864\n[agent]\nprobe_listen = "{probe_host}:{PROBE_PORT}"\n'
    )
    tokens = {}
    store = open_store("store", work)
    try:
        for role in ("client", "learner"):
            tokens[role] = new_token()
            store.add_token(hash_token(tokens[role]), f"lab-{role}", role)
    finally:
        store.close()
    (work / "tokens.json").write_text(json.dumps(tokens))
    return work, tokens


def probe_conditions(out: Path, conditions: list[Condition], reps: int, seed: int) -> list[dict]:
    """Runs the agent in the emulator's server namespace and measures against it `reps` times from the
    client namespace, per condition; the agent's estimates beside the configured path."""
    gearbox = _gearbox_bin()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for c in conditions:
        cid = condition_id(c)
        work, tokens = _agent_dir(out / cid, "10.0.0.1", AGENT_PORT, "10.0.0.1")
        (work / "emu.toml").write_text(c.emu_toml())
        py = shlex.quote(sys.executable)
        server = f"cd {shlex.quote(str(work))} && exec {py} -m gearbox.flexhttp serve --config agent.toml"
        client = (
            f"for i in $(seq {reps}); do {py} -m gearbox.flexhttp measure --url https://10.0.0.1:{AGENT_PORT} "
            f"--token {tokens['client']} --cafile {shlex.quote(str(work / 'cert.pem'))} "
            f"> {shlex.quote(str(work))}/measure-$i.json || exit 1; done"
        )
        cmd = [str(gearbox), "emu", "--config", str(work / "emu.toml"), "--seed", str(seed)]
        cmd += ["--ready-ports", f"{AGENT_PORT}/tcp", "--ready-timeout-s", "60", "--server", server, "--client", client]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        with open(work / "emu.log", "wb") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        ms = [
            json.loads((work / f"measure-{i}.json").read_text())["latest"]
            for i in range(1, reps + 1)
            if (work / f"measure-{i}.json").is_file() and (work / f"measure-{i}.json").stat().st_size
        ]
        row = {"condition": asdict(c) | {"id": cid}, "exit": code, "measurements": ms}
        if ms:
            row["median"] = {k: statistics.median(m[k] for m in ms) for k in ("rtt_ms", "loss_rate", "capacity_mbps")}
        results.append(row)
        print(json.dumps({"condition": cid, "exit": code, **row.get("median", {})}), flush=True)
    (out / "probe.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def loop(dataset_dir: Path, eval_dir: Path | None, out: Path, k: int | None) -> dict:
    """The agent's side of the loop on one machine: a real `gearbox agent serve` on loopback; the
    dataset's loads go up as trace entries (a client token, spooled uploads), the agent labels its
    pool and trains the global forest, a client downloads the active version, and (with `eval_dir`)
    that forest is evaluated on other conditions and pages."""
    from gearbox.flexhttp.client import AgentClient
    from gearbox.flexhttp.pool import entry_of

    rows, pages = read_dataset(dataset_dir)
    import socket

    from gearbox.control.client import wait_for

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    work, tokens = _agent_dir(out / "agent", "127.0.0.1", port, "127.0.0.1")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "gearbox.flexhttp", "serve", "--config", "agent.toml"],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"https://127.0.0.1:{port}"
    try:
        import httpx

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", verify=str(work / "cert.pem"), timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        wait_for(up, 60)
        if proc.poll() is not None:
            raise FlexLabError(f"gearbox agent serve exited with {proc.returncode}: {(work / 'serve.log').read_text()}")
        t0 = time.time() * 1000
        entries = [
            entry_of(features_of(r["condition"], pages[r["page"]]), r["http_version"], r["page_load_ms"], t0)
            for r in rows
        ]
        with AgentClient(url, tokens["client"], work / "cert.pem") as c:
            uploader = c.uploader(out / "spool", batch_records=500)
            uploader.add_many(entries)
            if not uploader.flush():
                raise FlexLabError(f"the agent did not take the uploads (spool: {out / 'spool'})")
            uploader.close()
        with AgentClient(url, tokens["learner"], work / "cert.pem") as learner:
            trained = learner.train(k)
            pool = learner._json(learner.http.get("/v1/flexhttp/pool"))
        with AgentClient(url, tokens["client"], work / "cert.pem") as c:
            info = c.classifier(out / "classifier")
        report = {"uploaded": len(entries), "pool": pool, "trained": trained, "classifier": info}
        if eval_dir is not None:
            report["evaluate"] = evaluate(out / "classifier", eval_dir)
        (out / "loop.json").write_text(json.dumps(report, indent=1) + "\n")
        return report
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# --- command line ---------------------------------------------------------------------------------


def _print_train(r: dict) -> None:
    print(
        f"{r['loads']} loads, {r['groups']} (condition, page) pairs over {r['conditions']} conditions and "
        f"{r['pages']} pages; H3 faster in {r['h3_wins'] * 100:.1f}% of pairs (by {r['metric']})"
    )
    print(f"{r['folds']}-fold cross-validation grouped by condition, accuracy against the per-pair winner:")
    for name, c in r["classifiers"].items():
        print(f"  {name:32s} {c['accuracy'] * 100:5.1f}%  (std {c['std'] * 100:.1f})")
    print(
        "k-means labels (the agent's): agreement with the per-pair winner, the forest trained on them scored "
        "against the per-pair winner, and against the k-means labels themselves (FlexHTTP's measure):"
    )
    for k, c in r["kmeans"].items():
        auto = " (auto)" if c["auto"] else ""
        print(
            f"  k={k:>3s}{auto:7s} labels agree {c['label_agreement'] * 100:5.1f}%, "
            f"forest {c['forest_on_kmeans_labels_accuracy'] * 100:5.1f}%, "
            f"against its labels {c['forest_against_kmeans_labels_accuracy'] * 100:5.1f}% "
            f"(majority {c['kmeans_labels_majority'] * 100:.1f}%)"
        )
    m = r["model"]
    if "error" in m:
        print(f"model: none ({m['error']})")
    else:
        print(f"model: {m['dir']} ({m['model_version']}, {m['rows']} rows, k={m['k']})")
    m = "SI" if r["metric"].startswith("speed") else "PLT"
    print(f"Fig. 1: median R = {m}_h2 / {m}_h3 (n) by RTT ms (rows) x loss % (columns)")
    for rtt in sorted(r["r_si"]["rtt_x_loss"], key=float):
        row = r["r_si"]["rtt_x_loss"][rtt]
        print(
            f"  {rtt:>4s}: "
            + "  ".join(f"{loss}%: {v[0]:.2f} ({v[1]})" for loss, v in sorted(row.items(), key=lambda kv: float(kv[0])))
        )
    print("Fig. 2: median R by files (rows) x page bytes (columns)")
    for fb, row in r["r_si"]["files_x_bytes"].items():
        print(f"  {fb:>6s}: " + "  ".join(f"{sb}: {v[0]:.2f} ({v[1]})" for sb, v in row.items()))


def _print_probe(results: list[dict]) -> None:
    print(f"{'condition':28s} {'rtt ms':>8s} {'loss %':>8s} {'Mbit/s':>8s}   (configured -> agent's median)")
    for r in results:
        c, m = r["condition"], r.get("median")
        if m is None:
            print(f"{c['id']:28s} no measurement (exit {r['exit']})")
            continue
        print(
            f"{c['id']:28s} {c['rtt_ms']:g} -> {m['rtt_ms']:.0f}   {c['loss_rate'] * 100:g} -> "
            f"{m['loss_rate'] * 100:.2f}   {c['rate_mbps']:g} -> {m['capacity_mbps']:.2f}"
        )


def _print_eval(r: dict, metric: str = "PLT") -> None:
    print(f"{r['groups']} (condition, page) pairs; the model picks the faster version in {r['accuracy'] * 100:.1f}%")
    print(f"{'policy':14s} {'mean ' + metric + ' ms':>12s} {'median ' + metric + ' ms':>14s}")
    for k, v in r["overall"].items():
        print(f"{k:14s} {v['mean_ms']:12.0f} {v['median_ms']:14.0f}")
    print(f"median {metric} ms per condition:")
    names = list(r["overall"])
    print(f"  {'condition':28s} " + " ".join(f"{k:>14s}" for k in names) + f" {'right':>6s}")
    for cid, d in r["per_condition"].items():
        print(f"  {cid:28s} " + " ".join(f"{d[k]:14.0f}" for k in names) + f" {d['accuracy'] * 100:5.0f}%")


def _print_eval_si(r: dict) -> None:
    print(
        f"Speed Index in Chromium: {r['loads']} loads ({r['failed_loads']} failed), H3 faster in "
        f"{r['h3_faster_share'] * 100:.1f}% of pairs; Chromium's own choice measured on {r['chromium_groups']}"
    )
    if r["loader_agreement"] is not None:
        print(
            f"our loader's H2/H3 ordering (median {r['loader_metric']}) agrees with Chromium's (median SI) on "
            f"{r['loader_agreement'] * 100:.1f}% of {r['loader_pairs']} pairs"
        )
    n = r.get("noise_floor")
    if n:
        print(
            f"noise floor ({n['pairs']} pairs with two loads of each version): one load's mean SI lies "
            f"{n['same_version_gain']['h2'] * 100:.1f}% (h2) / {n['same_version_gain']['h3'] * 100:.1f}% (h3) above "
            f"the faster of two loads of the same version, and h3's {n['between_versions_gain'] * 100:.1f}% above the "
            f"faster of one h2 and one h3 load; the faster version is the same in both loads in "
            f"{n['winner_agreement'] * 100:.1f}% of pairs"
        )
    _print_eval(r, "SI")


def _si_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--si", type=Path, action="append", default=[], help=help_text)


def _metric_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metric",
        choices=list(METRICS),
        default="plt",
        help="our loader's time: plt (every object, the default) or load-event (what delays a browser's load "
        "event: not the data scripts fetch); with --si, the loader's agreement with Chromium is by it",
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["client"]:
        return client_main(Path(argv[1]))
    p = argparse.ArgumentParser(
        prog="gearbox lab flexhttp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dataset", help="page loads over h2 and h3 across sampled Table 1 conditions (needs root)")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--conditions", type=int, default=20, help="WSP-sampled cells of Table 1's grid (default 20)")
    d.add_argument("--configs", choices=["paper"], help="§4's five configurations instead of a sample")
    d.add_argument("--pages", type=int, default=8)
    d.add_argument("--pages-seed", type=int, default=17)
    d.add_argument(
        "--max-page-bytes",
        type=float,
        default=3e6,
        help="skip generated pages heavier than this (default 3 MB, Table 1's p90 is ~2 MB): one 11 MB page "
        "takes minutes at 0.5 Mbit/s",
    )
    d.add_argument("--reps", type=int, default=2)
    d.add_argument("--jobs", type=int, default=1, help="conditions emulated at once")
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--request-timeout-s", type=float, default=120.0)
    t = sub.add_parser("train", help="classifiers with grouped 10-fold CV; the agent's forest exported")
    t.add_argument("--dataset", type=Path, required=True)
    t.add_argument("--out", type=Path, help="default DATASET/train")
    t.add_argument("--folds", type=int, default=10)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--k", type=int, action="append", default=[], help="also score k-means labels with this k")
    _si_argument(t, "learn Chromium's Speed Index (rows of `chromium`, repeatable) instead of our loader's PLT")
    _metric_argument(t)
    e = sub.add_parser("evaluate", help="the model's choices against H2-only, H3-only and the oracle")
    e.add_argument("--model", type=Path, required=True, help="a model folder (train's OUT/model, or the agent's)")
    e.add_argument("--dataset", type=Path, required=True)
    e.add_argument("--out", type=Path, help="write the report as JSON here")
    _si_argument(e, "judge by Speed Index in Chromium: rows of `chromium` or `gearbox pages measure` (repeatable)")
    _metric_argument(e)
    ch = sub.add_parser("chromium", help="Speed Index of a dataset's pages and conditions in Chromium (needs root)")
    ch.add_argument("--dataset", type=Path, required=True)
    ch.add_argument("--out", type=Path, required=True, help="folder: si.jsonl and one work folder per condition")
    ch.add_argument(
        "--http",
        action="append",
        choices=list(BROWSER_VERSIONS),
        help="version(s): h2, h3 (the default: both) and chromium (Chromium's own choice, first and later visit)",
    )
    ch.add_argument("--reps", type=int, default=3)
    ch.add_argument("--visits", type=int, default=2, help="chromium: visits by one browser profile (default 2)")
    ch.add_argument("--seed", type=int, default=5, help="seed of the emulated loss")
    ch.add_argument("--conditions", type=int, help="only this many of the dataset's conditions, evenly spread")
    ch.add_argument("--pages", type=int, help="only the dataset's first pages")
    pr = sub.add_parser("probe", help="the agent's RTT, loss and capacity estimates on emulated paths (needs root)")
    pr.add_argument("--out", type=Path, required=True)
    pr.add_argument("--conditions", type=int, default=5)
    pr.add_argument("--configs", choices=["paper"])
    pr.add_argument("--reps", type=int, default=3)
    pr.add_argument("--seed", type=int, default=1)
    lo = sub.add_parser("loop", help="a dataset through a real agent: uploads, labels, global forest, download")
    lo.add_argument("--dataset", type=Path, required=True)
    lo.add_argument("--eval-dataset", type=Path, help="evaluate the downloaded forest on this dataset")
    lo.add_argument("--out", type=Path, required=True)
    lo.add_argument("--k", type=int)
    de = sub.add_parser("demo", help="the whole loop on a clean short and a long lossy path (needs root; ~3 min)")
    de.add_argument("--out", type=Path, required=True)
    de.add_argument("--pages", type=int, default=2)
    de.add_argument("--reps", type=int, default=2, help="warm-up loads per page and version on each path")
    de.add_argument("--pages-seed", type=int, default=17)
    a = p.parse_args(argv)
    from gearbox.lab.environment import LabError

    try:
        if a.command == "dataset":
            conds = (
                [Condition(rtt, loss, rate) for rtt, loss, rate in PAPER_CONFIGS]
                if a.configs == "paper"
                else sample_conditions(a.conditions, a.seed)
            )
            if a.jobs < 1 or a.reps < 1 or a.pages < 1:
                raise FlexLabError("--jobs, --reps and --pages must be >= 1")
            dataset(a.out, conds, a.pages, a.pages_seed, a.reps, a.jobs, a.seed, a.request_timeout_s, a.max_page_bytes)
        elif a.command == "probe":
            conds = (
                [Condition(rtt, loss, rate) for rtt, loss, rate in PAPER_CONFIGS]
                if a.configs == "paper"
                else sample_conditions(a.conditions, a.seed)
            )
            _print_probe(probe_conditions(a.out, conds, a.reps, a.seed))
        elif a.command == "demo":
            from gearbox.flexhttp import demo

            if a.reps < 1 or a.pages < 1:
                raise FlexLabError("--reps and --pages must be >= 1")
            demo.print_report(demo.run(a.out, a.pages, a.reps, a.pages_seed))
        elif a.command == "loop":
            r = loop(a.dataset, a.eval_dataset, a.out, a.k)
            t = r["trained"]
            print(
                f"uploaded {r['uploaded']} entries; pool {r['pool']['entries']} from {r['pool']['contributors']} "
                f"contributor(s); version {t['version']}: k={t['k']}, {t['rows']} rows, H3 labels "
                f"{t['h3_share'] * 100:.1f}%; downloaded version {r['classifier']['version']}"
            )
            if "evaluate" in r:
                _print_eval(r["evaluate"])
        elif a.command == "train":
            r = train(a.dataset, a.out or a.dataset / "train", a.folds, a.seed, a.k or [4, 8, 16, 32], a.si, a.metric)
            _print_train(r)
        elif a.command == "chromium":
            if a.reps < 1:
                raise FlexLabError("--reps must be >= 1")
            if (a.conditions is not None and a.conditions < 1) or (a.pages is not None and a.pages < 1):
                raise FlexLabError("--conditions and --pages must be >= 1")
            path = chromium(
                a.dataset,
                a.out,
                a.http or ["h2", "h3"],
                a.reps,
                a.seed,
                a.visits,
                max_conditions=a.conditions,
                max_pages=a.pages,
            )
            print(f"flexhttp chromium: {path}")
        elif a.si:
            r = evaluate_si(a.model, a.dataset, a.si, a.metric)
            _print_eval_si(r)
            if a.out:
                a.out.write_text(json.dumps(r, indent=1) + "\n")
        else:
            r = evaluate(a.model, a.dataset, a.metric)
            _print_eval(r, "PLT" if a.metric == "plt" else "load event")
            if a.out:
                a.out.write_text(json.dumps(r, indent=1) + "\n")
    except (FlexLabError, LabError) as e:
        print(f"gearbox lab flexhttp: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
