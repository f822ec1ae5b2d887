#!/usr/bin/env python3
"""Plots the switching traces of docs/cc.md "Switching, measured" (Floo Fig. 3 and 12).

Reads the CSVs that `cargo run --release -p gearbox-emu --example cc_switch -- traces DIR`
writes (one per switch and mode: t_s, cca, phase, cwnd_bytes, srtt_ms,
delivery_rate_bytes_per_s, sent_bytes, lost_bytes) and draws, for each switch, cwnd,
sRTT and delivery rate over time with full and part switching side by side.

    .venv/bin/python scripts/plot-cc-switch.py DIR docs/img/cc-switch.png
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

SWITCHES = [("bbr", "copa"), ("bbr", "cubic"), ("cubic", "bbr")]
MODES = ["full", "part"]


def load(path: Path) -> dict[str, list[float]]:
    cols: dict[str, list[float]] = {"t": [], "cwnd": [], "srtt": [], "rate": []}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            cols["t"].append(float(row["t_s"]))
            cols["cwnd"].append(float(row["cwnd_bytes"]) / 1e3)
            cols["srtt"].append(float(row["srtt_ms"]))
            cols["rate"].append(float(row["delivery_rate_bytes_per_s"]) * 8 / 1e6)
    return cols


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[1]), Path(argv[2])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("cwnd", "cwnd (kB)"), ("srtt", "sRTT (ms)"), ("rate", "delivery rate (Mbit/s)")]
    fig, axes = plt.subplots(len(rows), len(SWITCHES), figsize=(12, 7.5), sharex=True)
    for j, (a, b) in enumerate(SWITCHES):
        for mode, style in zip(MODES, ["-", "--"], strict=True):
            path = src / f"{a}-{b}-{mode}.csv"
            if not path.exists():
                print(f"{path}: missing (run the cc_switch example's `traces` first)", file=sys.stderr)
                return 1
            data = load(path)
            for i, (key, _) in enumerate(rows):
                axes[i][j].plot(data["t"], data[key], style, label=f"{mode} switching")
        axes[0][j].set_title(f"{a} → {b}")
        for i, (_, label) in enumerate(rows):
            axes[i][j].axvline(10.0, color="grey", linewidth=0.8)
            if j == 0:
                axes[i][j].set_ylabel(label)
        axes[-1][j].set_xlabel("time (s); switch asked at 10 s")
    axes[0][0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    dst.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dst, dpi=80)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
