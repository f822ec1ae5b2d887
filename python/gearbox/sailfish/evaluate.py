"""`gearbox lab sailfish evaluate`: SAILfish against the classical stream schedulers on the
path pairs of SAILfish Table 5.2 and held-apart pairs of each class, in the simulator
(SAILfish §5.2-5.3).

Every scheme loads every test page (the eight Table 5.1-sized pages of
`gearbox.sailfish.scenarios`, never trained on) over every pair, `--reps` times with the
same simulation seeds for every scheme; each stream's path is chosen by a Rust path gear
inside the simulation (`SimPageLoad.run`, the same `PathGear` objects as the client):

- `sailfish`: the trained policy (`--model-dir`, default `models/sailfish`);
- `minrtt` (stream-based MinRTT, SAILfish's main baseline), `ecf`, `blest`,
  `round-robin`, `single-best`;
- `path0`, `path1`: every stream on one path (the best of the two is the single-path
  oracle in hindsight).

Output (under `--out`): `loads.csv` (one row per scheme x pair x page x repetition: mean
stream completion time, page load time), `summary.json`, `report.md` (Fig. 5.2-5.4's
views: mean stream completion per class and per page size, each scheme's ratio to
MinRTT and ECF, and whether the issue's targets hold) and `streams-cdf.png` when
matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from gearbox._native import SimPageLoad
from gearbox.sailfish.scenarios import (
    CLASSES,
    TABLE_5_1_FILES,
    TABLE_5_2,
    PathPair,
    evaluation_page_seeds,
    sample_pairs,
)

EVAL_PAIR_SEED = 1_000_033
HEURISTICS = ("minrtt", "ecf", "blest", "round-robin", "single-best")
SINGLE = ("path0", "path1")
SIZES = {0: "small", 1: "small", 2: "small", 3: "medium", 4: "medium", 5: "medium", 6: "large", 7: "large"}


def load_one(pair: PathPair, page_seed: int, sim_seed: int, scheme: str, model_dir: str | None) -> dict:
    """One page load: its streams' completion times and the page load time."""
    load = SimPageLoad(pair.config(seed=sim_seed), page_seed, pair.name)
    if scheme in SINGLE:
        path = SINGLE.index(scheme)
        while (r := load.next_stream()) is not None:
            load.assign(r["object"], path, scheme)
        out = load.outcome()
    else:
        out = load.run(scheme, model_dir if scheme == "sailfish" else None)
    streams = [s["completion_ms"] for s in out["streams"] if s["completion_ms"] is not None]
    return {
        "timed_out": out["timed_out"],
        "page_load_ms": out["page_load_ms"],
        "streams_ms": streams,
        "on_path0": sum(1 for s in out["streams"] if s["path"] == 0),
    }


def evaluate(
    pairs: list[PathPair], schemes: list[str], reps: int, model_dir: str | None, out: Path
) -> tuple[list[dict], dict]:
    """Every scheme on every pair x page x repetition; writes `loads.csv` and returns the
    rows and the per-stream completion times by scheme (for the CDF)."""
    pages = evaluation_page_seeds()
    rows, streams_by_scheme = [], defaultdict(list)
    for pair in pairs:
        for pi, page in enumerate(pages):
            for rep in range(reps):
                for scheme in schemes:
                    r = load_one(pair, page, 1 + rep, scheme, model_dir)
                    streams_by_scheme[scheme].extend(r["streams_ms"])
                    rows.append(
                        {
                            "scheme": scheme,
                            "pair": pair.name,
                            "class": pair.cls,
                            "page": page,
                            "page_files": TABLE_5_1_FILES[pi],
                            "size": SIZES[pi],
                            "rep": rep,
                            "timed_out": r["timed_out"],
                            "mean_stream_ms": float(np.mean(r["streams_ms"])) if r["streams_ms"] else math.nan,
                            "page_load_ms": r["page_load_ms"] if r["page_load_ms"] is not None else math.nan,
                            "streams_on_path0": r["on_path0"],
                        }
                    )
    out.mkdir(parents=True, exist_ok=True)
    with (out / "loads.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows, streams_by_scheme


def summarise(rows: list[dict], schemes: list[str]) -> dict:
    """Mean stream completion and page load time per scheme, per class and per page size;
    ratios to MinRTT and ECF; the issue's targets."""

    def mean(key: str, **where) -> float:
        values = [r[key] for r in rows if all(r[k] == v for k, v in where.items()) and math.isfinite(r[key])]
        return float(np.mean(values)) if values else math.nan

    summary: dict = {"schemes": {}, "by_class": {}, "by_size": {}}
    for s in schemes:
        summary["schemes"][s] = {
            "mean_stream_ms": mean("mean_stream_ms", scheme=s),
            "page_load_ms": mean("page_load_ms", scheme=s),
            "timed_out": sum(1 for r in rows if r["scheme"] == s and r["timed_out"]),
        }
    for c in CLASSES:
        summary["by_class"][c] = {s: mean("mean_stream_ms", scheme=s, **{"class": c}) for s in schemes}
    for size in ("small", "medium", "large"):
        summary["by_size"][size] = {s: mean("mean_stream_ms", scheme=s, size=size) for s in schemes}
    if "sailfish" in schemes and {"minrtt", "ecf"} <= set(schemes):
        targets = {}
        for c, by in summary["by_class"].items():
            heuristics = [by[h] for h in HEURISTICS if h in by and math.isfinite(by[h])]
            if c == "homogeneous":
                ok = by["sailfish"] <= min(heuristics)
                rule = "never worse than the best heuristic"
            else:
                ok = by["sailfish"] <= 0.9 * min(by["minrtt"], by["ecf"])
                rule = ">= 10% below MinRTT and ECF"
            targets[c] = {"rule": rule, "met": bool(ok)}
        summary["targets"] = targets
    return summary


def report(summary: dict, schemes: list[str], meta: dict) -> str:
    def fmt(v: float) -> str:
        return f"{v:,.0f}" if math.isfinite(v) else "-"

    lines = [
        "# SAILfish in the simulator",
        "",
        f"{meta['pairs']} path pairs ({meta['table_pairs']} of Table 5.2 + {meta['held_apart']} held apart), "
        f"8 test pages, {meta['reps']} repetitions; {meta['seconds']:.0f} s.",
        "",
        "## Mean stream completion time (ms) per class",
        "",
        "| class | " + " | ".join(schemes) + " |",
        "|---|" + "---:|" * len(schemes),
    ]
    for c, by in summary["by_class"].items():
        lines.append(f"| {c} | " + " | ".join(fmt(by[s]) for s in schemes) + " |")
    lines += ["", "## Mean stream completion time (ms) per page size", ""]
    lines += ["| pages | " + " | ".join(schemes) + " |", "|---|" + "---:|" * len(schemes)]
    for size, by in summary["by_size"].items():
        lines.append(f"| {size} | " + " | ".join(fmt(by[s]) for s in schemes) + " |")
    lines += ["", "## All loads", "", "| scheme | mean stream ms | page load ms | timed out |", "|---|---:|---:|---:|"]
    for s, v in summary["schemes"].items():
        lines.append(f"| {s} | {fmt(v['mean_stream_ms'])} | {fmt(v['page_load_ms'])} | {v['timed_out']} |")
    if "targets" in summary:
        lines += ["", "## Targets", "", "| class | rule | met |", "|---|---|---|"]
        for c, t in summary["targets"].items():
            lines.append(f"| {c} | {t['rule']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def plot_cdf(streams: dict[str, list[float]], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for s, values in streams.items():
        if values:
            x = np.sort(values)
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=s)
    ax.set_xscale("log")
    ax.set_xlabel("stream completion time (ms)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "streams-cdf.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gearbox lab sailfish evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, default=Path("models/sailfish"))
    ap.add_argument("--held-apart-per-class", type=int, default=3, help="held-apart pairs per class")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (simulation seeds) per load")
    ap.add_argument("--schemes", default=",".join(("sailfish", *HEURISTICS, *SINGLE)))
    ap.add_argument("--out", type=Path, default=Path("out/sailfish-eval"))
    args = ap.parse_args(argv)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    valid = ("sailfish", *HEURISTICS, *SINGLE)
    unknown = [s for s in schemes if s not in valid]
    if unknown:
        ap.error(f"--schemes: unknown {unknown}; valid: {', '.join(valid)}")
    if args.reps < 1 or args.held_apart_per_class < 0:
        ap.error("--reps must be >= 1 and --held-apart-per-class >= 0")
    if "sailfish" in schemes and not (args.model_dir / "policy.json").exists():
        ap.error(f"--model-dir: {args.model_dir / 'policy.json'} does not exist (train with gearbox learn sailfish)")
    pairs = list(TABLE_5_2) + sample_pairs(args.held_apart_per_class, EVAL_PAIR_SEED, prefix="eval")
    t0 = time.perf_counter()
    rows, streams = evaluate(pairs, schemes, args.reps, str(args.model_dir), args.out)
    summary = summarise(rows, schemes)
    meta = {
        "pairs": len(pairs),
        "table_pairs": len(TABLE_5_2),
        "held_apart": len(pairs) - len(TABLE_5_2),
        "reps": args.reps,
        "seconds": time.perf_counter() - t0,
        "model_dir": str(args.model_dir),
    }
    (args.out / "summary.json").write_text(json.dumps({**summary, "meta": meta}, indent=1) + "\n")
    text = report(summary, schemes, meta)
    (args.out / "report.md").write_text(text)
    plot_cdf(streams, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
