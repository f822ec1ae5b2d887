"""`gearbox lab floo evaluate`: Floo against static controllers, the hindsight-best static
controller and random switching on held-apart scenarios in the simulator (Floo §5.2).

Every scheme runs every scenario with the same application trace (the workload seed) in
the simulator, its controller chosen every selection period by a Rust gear inside the
simulation (`SimSession.drive`, the same `CcaPeriodGear` objects as the edge):

- `cubic`, `bbr`, `copa`, `westwood`, `vivace`: one controller for the whole run;
- `static_opt`: per scenario, the static controller whose mean RCT was lowest, in
  hindsight (Floo's Static_Opt);
- `floo`: the trained policy, full switching (Floo §3.4); `p-floo`: the same policy with
  part switching; `random`: a controller drawn at random every period;
- `fixed-<controller>` (not run by default): a constant choice through the gear path,
  e.g. `fixed-copa`: every connection starts on `--start-cc` like Floo's and is switched
  to Copa at its first selection period; what the gear path itself costs.

Every connection of the learned schemes starts on `--start-cc` (the edge's `--cc`), by
default the one the policy was trained with (`info.start_cc` of its `policy.json`; Cubic
for a policy that does not say).

Output (under `--out`): `runs.csv` (one row per scheme x scenario: mean / median / p90 RCT,
mean client sRTT, mean per-request throughput, switches), `summary.json` and
`report.md` (Fig. 6's view: mean / median / p90 RCT per scheme, each scheme's ratio to
Static_Opt per scenario class; Fig. 8's: normalised delay and throughput), and
`rct.png` / `delay-throughput.png` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gearbox._native import SimSession
from gearbox.floo.scenarios import Scenario, evaluation_set
from gearbox.lab.summary import rct_stats

STATIC = ("cubic", "bbr", "copa", "westwood", "vivace")
LEARNED = ("floo", "p-floo", "random")
FIXED = tuple(f"fixed-{c}" for c in ("cubic", "bbr", "copa", "westwood"))


@dataclass(frozen=True)
class Job:
    scenario: Scenario
    scheme: str
    duration_s: float
    period_s: float
    workload: str
    seed: int
    cache: str
    model_dir: str | None
    start_cc: str = "cubic"


def _stats(values: list[float]) -> tuple[float, float, float]:
    """Mean, median and p90 in the lab's definitions (`gearbox.lab.summary.rct_stats`)."""
    s = rct_stats(values)
    if s["mean_ms"] is None:
        return math.nan, math.nan, math.nan
    return s["mean_ms"], s["median_ms"], s["p90_ms"]


def run_one(job: Job) -> dict:
    """One scheme on one scenario: the row of `runs.csv`."""
    static = job.scheme in STATIC
    cc = job.scheme if static else job.start_cc
    text = job.scenario.config(Path(job.cache), job.duration_s, job.seed, job.workload, cc)
    session = SimSession(text, job.scenario.name)
    if static:
        gear, mode = job.scheme, "full"
    elif job.scheme in FIXED:
        gear, mode = job.scheme.removeprefix("fixed-"), "full"
    else:
        gear = "floo" if job.scheme in ("floo", "p-floo") else "random"
        mode = "part" if job.scheme == "p-floo" else "full"
    t0 = time.perf_counter()
    run = session.drive(gear, job.period_s, mode, job.model_dir, job.seed)
    wall = time.perf_counter() - t0
    recs = [r for r in session.take_records() if r.get("rct_ms") is not None and not r.get("error")]
    rcts = [float(r["rct_ms"]) for r in recs]
    rtts = [float(r["transport"]["rtt_ms"]) for r in recs if r.get("transport")]
    thpt = [8e-3 * r["bytes"] / r["rct_ms"] for r in recs if r["rct_ms"] > 0]  # Mbit/s
    mean, median, p90 = _stats(rcts)
    return {
        "scenario": job.scenario.name,
        "class": job.scenario.cls,
        "scheme": job.scheme,
        "requests": len(rcts),
        "mean_rct_ms": mean,
        "median_rct_ms": median,
        "p90_rct_ms": p90,
        "mean_srtt_ms": float(np.mean(rtts)) if rtts else math.nan,
        "mean_thpt_mbps": float(np.mean(thpt)) if thpt else math.nan,
        "switches": run["switches"],
        "periods": run["periods"],
        "connections": len({r["conn_id"] for r in recs}),
        "wall_s": wall,
        "period_s": job.period_s,
        "rcts": rcts,
    }


def summarise(rows: list[dict]) -> dict:
    """Static_Opt per scenario, then per scheme: pooled RCT statistics, ratios to
    Static_Opt, switching frequency, normalised delay and throughput (Floo Fig. 6, 8)."""
    by_scn: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_scn.setdefault(r["scenario"], {})[r["scheme"]] = r
    # Static_Opt: the best static controller of each scenario, in hindsight.
    for runs in by_scn.values():
        best = min((runs[s] for s in STATIC if s in runs), key=lambda r: r["mean_rct_ms"])
        runs["static_opt"] = dict(best, scheme="static_opt", chosen=best["scheme"])
    schemes = [s for s in (*STATIC, "static_opt", *LEARNED, *FIXED) if any(s in v for v in by_scn.values())]
    out: dict = {"scenarios": len(by_scn), "schemes": {}}
    for s in schemes:
        runs = [v[s] for v in by_scn.values() if s in v]
        rcts = [x for r in runs for x in r["rcts"]]
        mean, median, p90 = _stats(rcts)
        ratios = [r["mean_rct_ms"] / by_scn[r["scenario"]]["static_opt"]["mean_rct_ms"] for r in runs]
        per_class: dict[str, float] = {}
        for cls in sorted({r["class"] for r in runs}):
            rs = [r for r in runs if r["class"] == cls]
            per_class[cls] = float(np.mean([r["mean_rct_ms"] for r in rs]))

        # Fig. 8: each scenario's sRTT over its lowest, throughput over its highest.
        def lowest(r: dict, key: str) -> float:
            return min(v[key] for v in by_scn[r["scenario"]].values())

        def highest(r: dict, key: str) -> float:
            return max(v[key] for v in by_scn[r["scenario"]].values())

        norm_delay = [r["mean_srtt_ms"] / lowest(r, "mean_srtt_ms") for r in runs]
        norm_thpt = [r["mean_thpt_mbps"] / highest(r, "mean_thpt_mbps") for r in runs]
        periods = sum(r["periods"] for r in runs)
        minutes = periods * runs[0]["period_s"] / 60.0
        out["schemes"][s] = {
            "requests": len(rcts),
            "mean_rct_ms": mean,
            "median_rct_ms": median,
            "p90_rct_ms": p90,
            "mean_of_scenario_means_ms": float(np.mean([r["mean_rct_ms"] for r in runs])),
            "ratio_to_static_opt_mean": float(np.mean(ratios)),
            "scenarios_better_than_static_opt": int(sum(x < 1.0 for x in ratios)),
            "mean_rct_by_class_ms": per_class,
            "norm_delay": float(np.mean(norm_delay)),
            "norm_thpt": float(np.mean(norm_thpt)),
            "switches_per_minute": sum(r["switches"] for r in runs) / minutes if minutes > 0 else 0.0,
        }
    chosen: dict[str, int] = {}
    for v in by_scn.values():
        chosen[v["static_opt"]["chosen"]] = chosen.get(v["static_opt"]["chosen"], 0) + 1
    out["static_opt_choices"] = chosen
    return out


def report(summary: dict, args: argparse.Namespace) -> str:
    lines = [
        f"# Floo evaluation: {summary['scenarios']} held-apart scenarios in the simulator",
        "",
        f"`gearbox lab floo evaluate --duration-s {args.duration_s} --period-s {args.period_s} "
        f"--workload {args.workload}` (model: `{args.model_dir}`; learned schemes start on {args.start_cc}).",
        "",
        "| scheme | requests | mean RCT ms | median | p90 | mean ratio to Static_Opt | scenarios below Static_Opt | "
        "norm. delay | norm. thpt | switches/min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s, v in summary["schemes"].items():
        lines.append(
            f"| {s} | {v['requests']} | {v['mean_rct_ms']:.1f} | {v['median_rct_ms']:.1f} | {v['p90_rct_ms']:.1f} | "
            f"{v['ratio_to_static_opt_mean']:.3f} | {v['scenarios_better_than_static_opt']} | "
            f"{v['norm_delay']:.3f} | {v['norm_thpt']:.3f} | {v['switches_per_minute']:.2f} |"
        )
    classes = sorted({c for v in summary["schemes"].values() for c in v["mean_rct_by_class_ms"]})
    lines += ["", "Mean of the scenario mean RCTs per class (ms):", "", "| scheme | " + " | ".join(classes) + " |"]
    lines.append("|---|" + "---:|" * len(classes))
    for s, v in summary["schemes"].items():
        cells = " | ".join(f"{v['mean_rct_by_class_ms'].get(c, math.nan):.1f}" for c in classes)
        lines.append(f"| {s} | {cells} |")
    lines += ["", f"Static_Opt's choices: {summary['static_opt_choices']}", ""]
    return "\n".join(lines)


def plot(rows: list[dict], summary: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    schemes = list(summary["schemes"])
    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(schemes))
    bars = ((-0.25, "mean_rct_ms", "mean"), (0.0, "median_rct_ms", "median"), (0.25, "p90_rct_ms", "p90"))
    for off, key, label in bars:
        ax.bar(x + off, [summary["schemes"][s][key] for s in schemes], width=0.25, label=label)
    ax.set_xticks(x, schemes, rotation=30)
    ax.set_ylabel("RCT (ms)")
    ax.legend()
    ax.set_title("Request completion time per scheme (Floo Fig. 6 view)")
    fig.tight_layout()
    fig.savefig(out / "rct.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for s in schemes:
        v = summary["schemes"][s]
        ax.scatter(v["norm_delay"], v["norm_thpt"], label=s)
    ax.set_xlabel("normalised delay (sRTT / scenario's lowest)")
    ax.set_ylabel("normalised throughput (/ scenario's highest)")
    ax.invert_xaxis()
    ax.legend(fontsize=7)
    ax.set_title("Delay vs throughput (Floo Fig. 8 view)")
    fig.tight_layout()
    fig.savefig(out / "delay-throughput.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gearbox lab floo evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default="models/floo", help="the Floo policy (policy.json + sidecar)")
    p.add_argument("--out", default="lab-out/floo-eval", help="where the runs and the report go")
    p.add_argument("--scenarios", type=int, default=60, help="held-apart scenarios, split 1:2:3 like Floo §5.1")
    p.add_argument("--duration-s", type=float, default=180.0, help="requests sent per run (Floo: 3 minutes)")
    p.add_argument("--period-s", type=float, default=12.0, help="the selection period SP")
    p.add_argument("--workload", default="app", help="the application trace's workload")
    p.add_argument("--schemes", default=",".join((*STATIC, *LEARNED)), help="comma-separated schemes")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes")
    p.add_argument("--seed", type=int, default=7, help="application traces' seed")
    p.add_argument(
        "--start-cc",
        default=None,
        help="the controller the learned schemes' connections start on (default: the policy's training start, "
        "else cubic)",
    )
    p.add_argument(
        "--emulator",
        type=int,
        default=0,
        metavar="N",
        help="also run N of the scenarios on the real edge and client in the emulator (root; docs/floo.md)",
    )
    p.add_argument("--emulator-duration-s", type=float, default=60.0, help="requests sent per emulated run")
    p.add_argument(
        "--emulator-schemes",
        default=None,
        help="schemes of the emulator half (default: --schemes; tcp: cubic, bbr, westwood, floo, p-floo, random)",
    )
    p.add_argument(
        "--emulator-proto",
        choices=("quic", "tcp"),
        default="quic",
        help="tcp runs the QUIC-trained policy on kernel TCP connections (HTTP/2) and reports what it did",
    )
    args = p.parse_args(argv)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    bad = [s for s in schemes if s not in (*STATIC, *LEARNED, *FIXED)]
    if bad:
        p.error(f"--schemes: unknown {bad}; valid: {', '.join((*STATIC, *LEARNED, *FIXED))}")
    if not any(s in STATIC for s in schemes):
        p.error("--schemes: give at least one static controller (Static_Opt is the best of them)")
    model_dir = Path(args.model_dir)
    if any(s in ("floo", "p-floo") for s in schemes) and not (model_dir / "policy.json").is_file():
        p.error(f"--model-dir {model_dir}: no policy.json (train one with `gearbox learn floo`)")
    if args.start_cc is None:
        args.start_cc = trained_start_cc(model_dir)
    if args.start_cc not in ("cubic", "bbr", "copa", "westwood", "vivace"):
        p.error(f"--start-cc: unknown controller {args.start_cc!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scenarios = held_apart(args.scenarios)
    jobs = make_jobs(
        scenarios,
        schemes,
        args.duration_s,
        args.period_s,
        args.workload,
        args.seed,
        out / "traces",
        model_dir,
        args.start_cc,
    )
    t0 = time.perf_counter()
    rows = run_jobs(jobs, args.jobs)
    summary = summarise(rows)
    summary["wall_s"] = time.perf_counter() - t0
    summary["start_cc"] = args.start_cc
    with (out / "runs.csv").open("w", newline="") as f:
        keys = [k for k in rows[0] if k != "rcts"]
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    text = report(summary, args)
    if args.emulator > 0:
        text += emulator_part(args, scenarios, schemes, rows, model_dir, out)
    (out / "report.md").write_text(text)
    plot(rows, summary, out)
    print(text)
    return 0


def held_apart(n: int) -> list[Scenario]:
    """The evaluation's `n` held-apart scenarios, split 1:2:3 (WiFi, stationary cellular,
    mobile cellular) like Floo §5.1."""
    mix = {"wifi": max(1, n // 6), "cellular-stationary": max(1, n // 3)}
    mix["cellular-mobile"] = max(1, n - sum(mix.values()))
    return evaluation_set(mix)


def make_jobs(
    scenarios: list[Scenario],
    schemes: list[str],
    duration_s: float,
    period_s: float,
    workload: str,
    seed: int,
    cache: Path,
    model_dir: Path,
    start_cc: str,
) -> list[Job]:
    """One run per scenario and scheme; scenario i's application trace has seed `seed + i`.
    Generates the scenarios' traces into `cache` first, in this process (the workers would
    race to write the same file)."""
    for scn in scenarios:
        scn.trace_path(cache.resolve(), 2 * duration_s + 60.0)
    return [
        Job(scn, s, duration_s, period_s, workload, seed + i, str(cache.resolve()), str(model_dir.resolve()), start_cc)
        for i, scn in enumerate(scenarios)
        for s in schemes
    ]


def run_jobs(jobs: list[Job], processes: int) -> list[dict]:
    """`run_one` of every job in `processes` spawned processes (not forked: a caller may
    have JAX's threads running, and forking them can deadlock), rows in the jobs' order."""
    t0 = time.perf_counter()
    rows: list[dict] = []
    with ProcessPoolExecutor(max_workers=max(1, processes), mp_context=multiprocessing.get_context("spawn")) as pool:
        for i, row in enumerate(pool.map(run_one, jobs, chunksize=1)):
            rows.append(row)
            if (i + 1) % 25 == 0 or i + 1 == len(jobs):
                print(f"floo evaluate: {i + 1}/{len(jobs)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rows


def trained_start_cc(model_dir: Path) -> str:
    """The controller the policy in `model_dir` was trained starting from (`info.start_cc`
    of its `policy.json`); Cubic when it does not say or there is no readable policy."""
    try:
        info = json.loads((model_dir / "policy.json").read_text()).get("info", {})
    except (OSError, ValueError):
        return "cubic"
    start = info.get("start_cc") if isinstance(info, dict) else None
    return start if isinstance(start, str) else "cubic"


def _spread(scenarios: list[Scenario], n: int) -> list[tuple[int, Scenario]]:
    """`n` scenarios taken in turn from each class (index in the list, scenario)."""
    by_class: dict[str, list[tuple[int, Scenario]]] = {}
    for i, s in enumerate(scenarios):
        by_class.setdefault(s.cls, []).append((i, s))
    picked: list[tuple[int, Scenario]] = []
    while len(picked) < min(n, len(scenarios)):
        for items in by_class.values():
            if items and len(picked) < n:
                picked.append(items.pop(0))
    return sorted(picked)


def emulator_part(
    args: argparse.Namespace,
    scenarios: list[Scenario],
    schemes: list[str],
    sim_rows: list[dict],
    model_dir: Path,
    out: Path,
) -> str:
    """Runs `--emulator` scenarios on the real stack and compares each scheme's mean RCT
    and each scenario's ranking with the simulator's."""
    from gearbox.floo import emulate

    picked = _spread(scenarios, args.emulator)
    if args.emulator_schemes:
        schemes = [s.strip() for s in args.emulator_schemes.split(",") if s.strip()]
    if args.emulator_proto == "tcp":
        schemes = [s for s in schemes if s in (*emulate.TCP_STATIC, "floo", "p-floo", "random")]
    # The same application trace as the simulator's run of the scenario (its seed).
    emu_rows: list[dict] = []
    for i, scn in picked:
        emu_rows += emulate.run(
            [scn],
            schemes,
            args.emulator_duration_s,
            args.seed + i,
            model_dir,
            args.period_s,
            out / f"emulator-{args.emulator_proto}",
            args.emulator_proto,
        )
    with (out / f"emulator-{args.emulator_proto}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(emu_rows[0]))
        w.writeheader()
        w.writerows(emu_rows)
    names = {s.name for _, s in picked}
    sim = {(r["scenario"], r["scheme"]): r["mean_rct_ms"] for r in sim_rows if r["scenario"] in names}
    emu = {(r["scenario"], r["scheme"]): r["mean_rct_ms"] for r in emu_rows}
    lines = [
        "",
        f"## Emulator: {len(picked)} of the scenarios on the real edge and client "
        f"({'HTTP/2 over kernel TCP' if args.emulator_proto == 'tcp' else 'HTTP/3'}), "
        f"{args.emulator_duration_s:g} s of requests each",
        "",
        "| scheme | simulator mean RCT ms | emulator mean RCT ms |",
        "|---|---:|---:|",
    ]
    for scheme in schemes:
        sv = [sim[(n, scheme)] for n in sorted(names) if (n, scheme) in sim]
        ev = [emu[(n, scheme)] for n in sorted(names) if emu.get((n, scheme)) is not None]
        lines.append(f"| {scheme} | {np.mean(sv):.1f} | {np.mean(ev):.1f} |")
    same_best, rhos = 0, []
    for n in sorted(names):
        pairs = [(sim.get((n, s)), emu.get((n, s))) for s in schemes]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if len(pairs) < 2:
            continue
        a, b = np.argsort(np.argsort([p[0] for p in pairs])), np.argsort(np.argsort([p[1] for p in pairs]))
        rhos.append(float(np.corrcoef(a, b)[0, 1]))
        same_best += int(np.argmin([p[0] for p in pairs]) == np.argmin([p[1] for p in pairs]))
    lines += [
        "",
        f"Per scenario, the schemes' RCT ranks in the two agree with Spearman rho {np.mean(rhos):.2f} on average "
        f"(min {min(rhos):.2f}); the best scheme is the same in {same_best} of {len(rhos)} scenarios.",
        "",
        "What the edge's gear did (decisions by chosen controller; switches by target and outcome):",
        "",
    ]
    for scheme in schemes:
        choices: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        for r in emu_rows:
            if r["scheme"] == scheme:
                for k, v in json.loads(r["decisions"]).items():
                    choices[k] = choices.get(k, 0) + v
                for k, v in json.loads(r["switches"]).items():
                    outcomes[k] = outcomes.get(k, 0) + v
        if choices or outcomes:
            lines.append(f"- {scheme}: decisions {choices}; switches {outcomes}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
