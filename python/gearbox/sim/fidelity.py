"""`gearbox sim fidelity`: the same QUIC scenarios in the emulator and in the simulator,
compared condition by condition (docs/sim.md, "Fidelity").

The conditions: a grid of 16 (rate 5 or 50 Mbit/s x RTT 20 or 100 ms x loss 0 or 1% x
drop-tail buffer 0.5 or 2 BDP) and three rate traces (`wifi`, `4g-mobile`, `3g-hsdpa`
presets, 40 ms, 1 BDP). Each runs twice: the `app` workload (its mean request completion
time is compared; target: within 10%) and one 3 MB download (its goodput, bytes over
completion time; target: within 5%). Both sides get the same scenario files, the same
link and workload seeds and the same requests (`gearbox sim run` is the lab's runner
with the simulator behind it); the emulator runs the release edge and client with
`--realtime-endpoints`, so that the machine's other work is not in its numbers.

Writes OUT/scenarios/*.toml, OUT/emu/<scenario>, OUT/sim/<scenario>, OUT/fidelity.json and
OUT/fidelity.md (the table docs/sim.md shows), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

from gearbox.lab import scenario as sc
from gearbox.lab.collect import read_records
from gearbox.lab.environment import LabError, find_gearbox

BULK_BYTES = 3_000_000
TRACES = ("wifi", "4g-mobile", "3g-hsdpa")
# |sim / emu - 1| within these counts as agreeing (the simulator issue's targets).
TARGETS = {"app": 0.10, "bulk": 0.05}

GRID = """
[[path]]
rtt_ms = 40.0
buffer_bdp = 1.0

[grid]
bandwidth_mbps = [5.0, 50.0]
rtt_ms = [20.0, 100.0]
loss_rate = [0.0, 0.01]
buffer_bdp = [0.5, 2.0]
"""

TRACE = """
[[path]]
trace = {{ preset = "{preset}", seed = 1 }}
rtt_ms = 40.0
buffer_bdp = 1.0
"""


@dataclass
class Row:
    """One condition and workload, measured on both sides."""

    scenario: str
    condition: str
    label: str
    workload: str
    metric: str
    emu: float
    sim: float
    requests_emu: int
    requests_sim: int
    # Standard error of `diff` from the repetitions, paired: in one repetition both sides
    # send the same requests, and only the loss draws and timings differ, so the spread
    # of the per-repetition ratios is what chance moves the difference by (nan with one).
    se: float = float("nan")

    @property
    def diff(self) -> float:
        return self.sim / self.emu - 1.0 if self.emu else float("inf")

    @property
    def within(self) -> bool:
        return abs(self.diff) <= TARGETS[self.workload]

    @property
    def noise(self) -> float:
        """Two standard errors of `diff`: a difference inside it is one the repetitions
        cannot tell from chance."""
        return 2.0 * self.se


def write_scenarios(folder: Path, reps: int, duration_s: float) -> list[Path]:
    """The scenario files (and the bulk workload file) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    bulk = folder / "bulk-3mb.toml"
    bulk.write_text(
        f'name = "bulk-3mb"\ndescription = "one {BULK_BYTES // 1_000_000} MB download"\n'
        f'connection = "per_request"\n\n[bulk]\nsize_bytes = {BULK_BYTES}\nrequest_bytes = 100\n'
    )
    paths = []
    for kind, workload in (("app", "app"), ("bulk", str(bulk))):
        shapes = [("grid", GRID)] + [(t, TRACE.format(preset=t)) for t in TRACES]
        for shape, body in shapes:
            name = f"fidelity-{shape}-{kind}"
            text = (
                f'name = "{name}"\nseed = 1\nrepetitions = {reps}\nduration_s = {duration_s:g}\ntimeout_s = 120\n\n'
                f'[workload]\nname = "{workload}"\nseed = 1\n{body}\n[policies.quic]\nbaseline = true\n'
            )
            p = folder / f"{name}.toml"
            p.write_text(text)
            paths.append(p)
    return paths


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """The run's completed client requests (the lab's reader; failed ones left out)."""
    rows = read_records(run_dir / "client.jsonl")
    return [r for r in rows if r.get("error") is None and r.get("rct_ms") is not None]


def _metric(recs: list[dict[str, Any]]) -> float:
    """The mean RCT in ms, or for the bulk download its mean goodput in Mbit/s."""
    if not recs:
        return float("nan")
    if any(r.get("bytes", 0) >= BULK_BYTES for r in recs):
        return fmean(r["bytes"] * 8 / 1e6 / (r["rct_ms"] / 1e3) for r in recs)
    return fmean(r["rct_ms"] for r in recs)


def measure(out: Path) -> dict[str, tuple[str, float, int, dict[int, float]]]:
    """Per condition of a finished lab folder: (label, metric over all its requests,
    requests, metric of each repetition)."""
    conds = {c["condition_id"]: c for c in json.loads((out / "conditions.json").read_text())}
    per: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for run in json.loads((out / "runs.json").read_text()):
        per.setdefault(run["condition_id"], {}).setdefault(run["repetition"], []).extend(_records(Path(run["dir"])))
    result = {}
    for cid, reps in sorted(per.items()):
        recs = [r for rep in reps.values() for r in rep]
        by_rep = {k: _metric(v) for k, v in reps.items() if v}
        result[cid] = (conds[cid].get("label", cid), _metric(recs), len(recs), by_rep)
    return result


def compare(name: str, emu_out: Path, sim_out: Path) -> list[Row]:
    kind = "bulk" if name.endswith("-bulk") else "app"
    emu, sim = measure(emu_out), measure(sim_out)
    rows = []
    for cid in sorted(emu):
        label, e, ne, rep_e = emu[cid]
        _, s, ns, rep_s = sim.get(cid, (label, float("nan"), 0, {}))
        ratios = [rep_s[k] / rep_e[k] for k in rep_e if k in rep_s and rep_e[k]]
        se = stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
        metric = "goodput Mbit/s" if kind == "bulk" else "mean RCT ms"
        if label == "base":  # a trace scenario's one condition
            label = name.removeprefix("fidelity-").removesuffix(f"-{kind}") + " trace, 40 ms, 1 BDP"
        rows.append(Row(name, cid, label, kind, metric, e, s, ne, ns, se))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| scenario | condition | metric | emulator | simulator | sim / emu - 1 | 2 SE | within target |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        verdict = "yes" if r.within else ("no, within 2 SE" if abs(r.diff) <= r.noise else "no")
        lines.append(
            f"| {r.scenario.removeprefix('fidelity-')} | {r.label} | {r.metric} | {r.emu:.1f} | "
            f"{r.sim:.1f} | {r.diff * 100:+.1f}% | {r.noise * 100:.0f}% | {verdict} |"
        )
    for kind in ("app", "bulk"):
        sel = [r for r in rows if r.workload == kind]
        if sel:
            n = sum(r.within for r in sel)
            chance = sum(not r.within and abs(r.diff) <= r.noise for r in sel)
            lines.append(
                f"\n{kind}: {n} of {len(sel)} conditions within {TARGETS[kind] * 100:.0f}%, {chance} more within two "
                f"standard errors of their repetitions; mean |difference| {fmean(abs(r.diff) for r in sel) * 100:.1f}%"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gearbox sim fidelity", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("out/sim-fidelity"), help="output folder")
    p.add_argument("--reps", type=int, default=1, help="repetitions of every condition (default 1)")
    p.add_argument("--duration-s", type=float, default=15.0, help="requests sent for this long per run (app)")
    p.add_argument("--only", help="run only the scenarios whose name contains this")
    p.add_argument("--compare-only", action="store_true", help="compare finished runs in --out, run nothing")
    p.add_argument(
        "--sim-only",
        action="store_true",
        help="rerun only the simulator and compare with the emulator's runs already in --out (a simulator change)",
    )
    args = p.parse_args(argv)
    from gearbox.lab import runner

    try:
        gearbox = find_gearbox()
        paths = write_scenarios(args.out / "scenarios", args.reps, args.duration_s)
        if args.only:
            paths = [x for x in paths if args.only in x.stem]
        rows: list[Row] = []
        for path in paths:
            s = sc.load(path)
            emu_out, sim_out = args.out / "emu" / s.name, args.out / "sim" / s.name
            if not args.compare_only:
                runner.run_scenario(s, sim_out, jobs=2, gearbox=gearbox, force=True, progress=False, backend="sim")
            if not (args.compare_only or args.sim_only):
                runner.run_scenario(s, emu_out, gearbox=gearbox, force=True, progress=False, realtime_endpoints=True)
            rows += compare(s.name, emu_out, sim_out)
    except (sc.ScenarioError, LabError) as e:
        print(f"gearbox sim fidelity: error: {e}", file=sys.stderr)
        return 2
    text = table(rows)
    (args.out / "fidelity.md").write_text(text + "\n")
    (args.out / "fidelity.json").write_text(
        json.dumps([{**asdict(r), "diff": r.diff, "within": r.within, "noise": r.noise} for r in rows], indent=1)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
