#!/usr/bin/env python3
"""Compare SAILfish policies evaluated by `gearbox lab sailfish evaluate` (simulator) in
separate runs, against the heuristics of those runs (docs/sailfish.md "1-D convolution
against the MLP").

    scripts/sailfish-compare.py conv=out/eval-conv mlp=out/eval-mlp [...]

Each argument is LABEL=DIR, DIR an evaluation's `--out` (its `loads.csv`). The runs must
cover the same pairs, pages and repetitions (checked), so the heuristics' loads are the
same in each (the simulation is seeded); MinRTT and ECF are read from the first. Prints
Markdown: per class, mean stream completion time and page load time of each policy and
of MinRTT and ECF, over all pairs, over the Table 5.2 pairs and over the held-apart
pairs, and each policy's change against MinRTT.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

CLASSES = ("low-bdw similar", "low-bdw dissimilar", "homogeneous", "high-bdw dissimilar", "high-bdw similar")
BASELINES = ("minrtt", "ecf")


def read(path: Path) -> list[dict]:
    with (path / "loads.csv").open() as f:
        return list(csv.DictReader(f))


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    runs = {}
    for arg in argv:
        label, _, directory = arg.partition("=")
        try:
            runs[label] = read(Path(directory))
        except OSError as e:
            print(f"sailfish-compare: {arg}: {e}", file=sys.stderr)
            return 1
    keys = {
        label: sorted((r["pair"], r["page"], r["rep"]) for r in rows if r["scheme"] == "minrtt")
        for label, rows in runs.items()
    }
    first = next(iter(keys.values()))
    for label, k in keys.items():
        if k != first:
            print(f"sailfish-compare: {label} covers other loads than {next(iter(keys))}", file=sys.stderr)
            return 1
    # values[(scheme label, subset, class, metric)] -> list of per-load values
    values: dict[tuple, list[float]] = defaultdict(list)
    base_rows = next(iter(runs.values()))
    sources = [(b, b, base_rows) for b in BASELINES] + [(label, "sailfish", rows) for label, rows in runs.items()]
    for name, scheme, rows in sources:
        for r in rows:
            if r["scheme"] != scheme or r["timed_out"] == "True":
                continue
            subset = "table 5.2" if r["pair"].startswith("t52-") else "held apart"
            for metric in ("mean_stream_ms", "page_load_ms"):
                for s in ("all", subset):
                    for c in (r["class"], "all classes"):
                        values[(name, s, c, metric)].append(float(r[metric]))
    names = [label for label in runs] + list(BASELINES)
    for metric, title in (("mean_stream_ms", "Mean stream completion time"), ("page_load_ms", "Page load time")):
        for subset in ("all", "table 5.2", "held apart"):
            print(f"\n{title} (ms), {subset} pairs; in brackets the change against MinRTT\n")
            print("| class | " + " | ".join(names) + " |")
            print("|---|" + "---:|" * len(names))
            for c in (*CLASSES, "all classes"):
                base = mean(values[("minrtt", subset, c, metric)])
                cells = []
                for n in names:
                    v = mean(values[(n, subset, c, metric)])
                    cells.append(f"{v:,.0f}" if n in BASELINES else f"{v:,.0f} ({100 * (v / base - 1):+.0f}%)")
                print(f"| {c} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
