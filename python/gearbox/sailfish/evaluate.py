"""`gearbox lab sailfish evaluate`: SAILfish against the classical stream schedulers on the
path pairs of SAILfish Table 5.2 and held-apart pairs of each class, in the simulator, or
with `--emulator` on the real edge and client over two emulated paths with kernel MPTCP
as a further scheme (`gearbox.sailfish.emulate`) (SAILfish §5.2-5.3).

Every scheme loads every test page (the eight Table 5.1-sized pages of
`gearbox.sailfish.scenarios`, never trained on) over every pair, `--reps` times with the
same simulation seeds for every scheme; each stream's path is chosen by a Rust path gear
inside the simulation (`SimPageLoad.run`, the same `PathGear` objects as the client):

- `sailfish`: the trained policy (`--model-dir`, default `models/sailfish`);
- `minrtt` (stream-based MinRTT, SAILfish's main baseline), `ecf`, `blest`,
  `round-robin`, `single-best`;
- `path0`, `path1`: every stream on one path; `single-oracle`: per load, the better of
  the two in hindsight (reported when both ran).

`--emulator` runs the Table 5.2 pairs (no held-apart ones unless asked for) with
`sailfish`, the heuristics and `mptcp` (HTTP/2 over the kernel's Multipath TCP), each
load a real `gearbox load` of the same test page. `--pages` and `--pairs` make the grid
smaller (the demo, the tests).

Output (under `--out`): `loads.csv` (one row per scheme x pair x page x repetition: mean
stream completion time, page load time; in the emulator also whether every object
arrived and the failed attempts), `summary.json`, `report.md` (Fig. 5.2-5.4's
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
    PAGE_SIZES,
    TABLE_5_1_FILES,
    TABLE_5_2,
    PathPair,
    evaluation_page_seeds,
    sample_pairs,
)

EVAL_PAIR_SEED = 1_000_033
HEURISTICS = ("minrtt", "ecf", "blest", "round-robin", "single-best")
# The emulator's default schemes: SAILfish, the heuristics and the kernel's MPTCP.
EMULATOR_SCHEMES = ("sailfish", *HEURISTICS, "mptcp")
SINGLE = ("path0", "path1")


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
    pairs: list[PathPair],
    schemes: list[str],
    reps: int,
    model_dir: str | None,
    out: Path,
    pages: list[tuple[int, int]] | None = None,
) -> tuple[list[dict], dict]:
    """Every scheme on every pair x page x repetition; writes `loads.csv` and returns the
    rows and the per-stream completion times by scheme (for the CDF). `pages`: (index in
    Table 5.1's order, seed) of the test pages to load, default all eight."""
    if pages is None:
        pages = list(enumerate(evaluation_page_seeds()))
    rows, streams_by_scheme = [], defaultdict(list)
    for pair in pairs:
        for pi, page in pages:
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
                            "size": PAGE_SIZES[pi],
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


def with_single_oracle(rows: list[dict], schemes: list[str]) -> tuple[list[dict], list[str]]:
    """Adds, per pair x page x repetition, the better of `path0` and `path1` in hindsight
    (by mean stream completion) as the scheme `single-oracle`."""
    if not set(SINGLE) <= set(schemes):
        return rows, schemes
    by_load: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["scheme"] in SINGLE:
            by_load[(r["pair"], r["page"], r["rep"])].append(r)
    extra = [
        {**min(pair, key=lambda r: r["mean_stream_ms"]), "scheme": "single-oracle"}
        for pair in by_load.values()
        if len(pair) == 2
    ]
    return rows + extra, [*schemes, "single-oracle"]


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
            "loads": sum(1 for r in rows if r["scheme"] == s),
        }
        if any("failed_attempts" in r for r in rows):
            summary["schemes"][s]["failed_attempts"] = sum(
                r.get("failed_attempts", 0) for r in rows if r["scheme"] == s
            )
    summary["page_load_by_class"] = {}
    for c in CLASSES:
        summary["by_class"][c] = {s: mean("mean_stream_ms", scheme=s, **{"class": c}) for s in schemes}
        summary["page_load_by_class"][c] = {s: mean("page_load_ms", scheme=s, **{"class": c}) for s in schemes}
    for size in ("small", "medium", "large"):
        summary["by_size"][size] = {s: mean("mean_stream_ms", scheme=s, size=size) for s in schemes}
    if "sailfish" in schemes and {"minrtt", "ecf"} <= set(schemes):
        targets = {}
        for c, by in summary["by_class"].items():
            heuristics = [by[h] for h in HEURISTICS if h in by and math.isfinite(by[h])]
            if not (heuristics and math.isfinite(by["sailfish"])):
                continue  # no load of this class in the run
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
    """The report (markdown): per class, per page size, all loads, the targets."""

    def fmt(v: float) -> str:
        return f"{v:,.0f}" if math.isfinite(v) else "-"

    def table(title: str, key: str, by_what: dict[str, dict[str, float]]) -> list[str]:
        lines = ["", f"## {title}", "", f"| {key} | " + " | ".join(schemes) + " |", "|---|" + "---:|" * len(schemes)]
        for name, by in by_what.items():
            if any(math.isfinite(by[s]) for s in schemes):
                lines.append(f"| {name} | " + " | ".join(fmt(by[s]) for s in schemes) + " |")
        return lines

    emulator = meta.get("emulator", False)
    where = "in the emulator (real edge and client)" if emulator else "in the simulator"
    lines = [
        f"# SAILfish {where}",
        "",
        f"{meta['pairs']} path pairs ({meta['table_pairs']} of Table 5.2 + {meta['held_apart']} held apart), "
        f"{meta['pages']} test pages, {meta['reps']} repetitions; {meta['seconds']:.0f} s"
        + ("; edge and client under SCHED_FIFO (--realtime-endpoints)." if meta.get("realtime_endpoints") else "."),
    ]
    lines += table("Mean stream completion time (ms) per class", "class", summary["by_class"])
    lines += table("Mean stream completion time (ms) per page size", "pages", summary["by_size"])
    lines += table("Page load time (ms) per class", "class", summary["page_load_by_class"])
    missing = "incomplete" if emulator else "timed out"
    head = f"| scheme | loads | mean stream ms | page load ms | {missing} |"
    rule = "|---|---:|---:|---:|---:|"
    if emulator:
        head += " failed attempts |"
        rule += "---:|"
    lines += ["", "## All loads", "", head, rule]
    for s, v in summary["schemes"].items():
        row = f"| {s} | {v['loads']} | {fmt(v['mean_stream_ms'])} | {fmt(v['page_load_ms'])} | {v['timed_out']} |"
        if emulator:
            row += f" {v.get('failed_attempts', 0)} |"
        lines.append(row)
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
    ap.add_argument(
        "--held-apart-per-class",
        type=int,
        default=None,
        help="held-apart pairs per class (default 3; 0 with --emulator)",
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions (simulation seeds, or emulated loads) per load")
    ap.add_argument(
        "--schemes",
        default=None,
        help=f"default: {','.join(('sailfish', *HEURISTICS, *SINGLE))}; "
        f"with --emulator {','.join(EMULATOR_SCHEMES)} (path0 and path1 allowed too)",
    )
    ap.add_argument(
        "--pairs",
        default=None,
        help="only these Table 5.2 pairs, by name (e.g. t52-low-dissimilar,t52-homogeneous), and no held-apart ones",
    )
    ap.add_argument(
        "--pages",
        default=None,
        help="only these of the eight test pages, by index in Table 5.1's order (0-2 small, 3-5 medium, 6-7 large)",
    )
    ap.add_argument(
        "--emulator",
        action="store_true",
        help="run the real edge and multipath client over two emulated paths instead of the simulator "
        "(root; schemes include kernel MPTCP; docs/sailfish.md)",
    )
    ap.add_argument(
        "--realtime-endpoints",
        action="store_true",
        help="with --emulator: edge and client under SCHED_FIFO below the relay (gearbox emu --realtime-endpoints), "
        "so a busy machine adds no scheduling delay to what they measure",
    )
    ap.add_argument("--out", type=Path, default=None, help="default out/sailfish-eval (out/sailfish-eval-emu)")
    args = ap.parse_args(argv)
    out = args.out or Path("out/sailfish-eval-emu" if args.emulator else "out/sailfish-eval")
    default_schemes = EMULATOR_SCHEMES if args.emulator else ("sailfish", *HEURISTICS, *SINGLE)
    schemes = [s.strip() for s in (args.schemes or ",".join(default_schemes)).split(",") if s.strip()]
    valid = ("sailfish", *HEURISTICS, *SINGLE, *(("mptcp",) if args.emulator else ()))
    unknown = [s for s in schemes if s not in valid]
    if unknown or not schemes:
        hint = "" if args.emulator or "mptcp" not in unknown else " (mptcp runs in the emulator only: --emulator)"
        ap.error(f"--schemes: unknown {unknown or schemes}; valid: {', '.join(valid)}{hint}")
    held_apart = args.held_apart_per_class
    if held_apart is None:
        held_apart = 0 if args.emulator else 3
    if args.realtime_endpoints and not args.emulator:
        ap.error("--realtime-endpoints is an emulator setting: add --emulator")
    if args.reps < 1 or held_apart < 0:
        ap.error("--reps must be >= 1 and --held-apart-per-class >= 0")
    if "sailfish" in schemes and not (args.model_dir / "policy.json").exists():
        ap.error(f"--model-dir: {args.model_dir / 'policy.json'} does not exist (train with gearbox learn sailfish)")
    if args.pairs is not None:
        names = [n.strip() for n in args.pairs.split(",") if n.strip()]
        known = {p.name: p for p in TABLE_5_2}
        missing = [n for n in names if n not in known]
        if missing or not names:
            ap.error(f"--pairs: unknown {missing or names}; the Table 5.2 pairs are {', '.join(known)}")
        pairs = [known[n] for n in names]
    else:
        pairs = list(TABLE_5_2) + sample_pairs(held_apart, EVAL_PAIR_SEED, prefix="eval")
    all_pages = list(enumerate(evaluation_page_seeds()))
    if args.pages is not None:
        try:
            picked = sorted({int(i) for i in args.pages.split(",") if i.strip()})
        except ValueError:
            picked = []
        if not picked or any(i < 0 or i >= len(all_pages) for i in picked):
            ap.error(f"--pages: {args.pages!r}: give indices 0-{len(all_pages) - 1}, comma-separated")
        all_pages = [all_pages[i] for i in picked]
    t0 = time.perf_counter()
    if args.emulator:
        from gearbox.lab.environment import LabError
        from gearbox.sailfish import emulate

        try:
            rows = emulate.evaluate(
                pairs, schemes, all_pages, args.reps, args.model_dir, out, realtime_endpoints=args.realtime_endpoints
            )
        except (LabError, RuntimeError) as e:
            print(f"gearbox lab sailfish evaluate: {e}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, emulate.Interrupted):
            print("gearbox lab sailfish evaluate: interrupted; the emulation was stopped", file=sys.stderr)
            return 130
        streams = defaultdict(list)
        for r in rows:
            streams[r["scheme"]].extend(r["streams_ms"])
        rows = [{k: v for k, v in r.items() if k != "streams_ms"} | {"timed_out": not r["complete"]} for r in rows]
        out.mkdir(parents=True, exist_ok=True)
        with (out / "loads.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        rows, streams = evaluate(pairs, schemes, args.reps, str(args.model_dir), out, all_pages)
        rows, schemes = with_single_oracle(rows, schemes)
    summary = summarise(rows, schemes)
    meta = {
        "pairs": len(pairs),
        "table_pairs": sum(1 for p in pairs if p in TABLE_5_2),
        "held_apart": sum(1 for p in pairs if p not in TABLE_5_2),
        "pages": len(all_pages),
        "reps": args.reps,
        "seconds": time.perf_counter() - t0,
        "model_dir": str(args.model_dir),
        "emulator": args.emulator,
        "realtime_endpoints": args.realtime_endpoints,
    }
    (out / "summary.json").write_text(json.dumps({**summary, "meta": meta}, indent=1) + "\n")
    text = report(summary, schemes, meta)
    (out / "report.md").write_text(text)
    plot_cdf(streams, out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
