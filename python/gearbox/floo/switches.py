"""`gearbox lab floo switches`: what the Floo gear's own switches do to their connections
on the real edge (Floo §5.4, Fig. 12-13; docs/floo.md "Switching with the gear in the loop").

Held-apart scenarios of `gearbox lab floo evaluate` (the same application trace per
scenario, seed + its index; `python/gearbox/floo/emulate.py`) run on the real edge once
per scheme, by default Floo (full switching) and P-Floo (part switching). Which ones:
`--pick switching` (default) runs Floo on the whole set in the simulator first (seconds)
and takes the `--scenarios` where it switched most (the policy keeps its start
controller in most scenarios, so a spread would measure few switches); `--pick spread`
takes them in turn from each class, as `evaluate --emulator` does. The edge writes one
`cc_switch_effect` record per switch that changed a connection's controller (the
connection's loss rate, sRTT, min RTT and window over the second before and the second
after it, docs/telemetry.md); this command gathers them and reports, per switch (from ->
to) and mode, how many there were, the loss rate within 1 s after against the 1 s
before, and sRTT after against before, beside each scheme's mean RCT (Floo Fig. 9's
comparison), with Fig. 13's view of the loss after each switch, full against part.

Output (under `--out`): `emulator-quic/` (the lab runs), `emulator-quic.csv` (one row
per scheme x scenario), `switches.csv` (one row per switch), `switches.md` (the report)
and `switch-loss.png` when matplotlib is installed. `--report-only` rebuilds the report
from an earlier run's folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

MODES = ("full", "part")


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _losses(effects: list[dict], side: str) -> list[float]:
    """The loss rates of the effects' `side` windows that carried traffic."""
    return [e[side]["loss_rate"] for e in effects if e[side].get("loss_rate") is not None]


def _pooled(effects: list[dict], side: str) -> float | None:
    """Lost over sent bytes of the effects' `side` windows together (weighted by traffic)."""
    sent = sum(e[side]["sent_bytes"] for e in effects)
    return sum(e[side]["lost_bytes"] for e in effects) / sent if sent > 0 else None


def summarise_effects(effects: list[dict]) -> list[dict]:
    """One row per (from, to, mode), then one per mode over every pair (`from` = `to` =
    "all"): the switches, how many of their windows before / after carried traffic, the
    mean loss rate of those windows (lost over sent bytes, each switch's window weighted
    alike, Fig. 13's unit) and of all of them pooled (weighted by their bytes), the mean
    bytes sent in each window, and the mean sRTT and window at the switch and one second
    later."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for e in effects:
        groups.setdefault((e["from"], e["to"], e["mode"]), []).append(e)
        groups.setdefault(("all", "all", e["mode"]), []).append(e)

    def order(key: tuple[str, str, str]) -> tuple:
        f, t, m = key
        return (f == "all", f, t, MODES.index(m) if m in MODES else len(MODES), m)

    rows = []
    for key in sorted(groups, key=order):
        es = groups[key]
        loss = {side: _losses(es, side) for side in ("before", "after")}
        rows.append(
            {
                "from": key[0],
                "to": key[1],
                "mode": key[2],
                "switches": len(es),
                "traffic_before": len(loss["before"]),
                "traffic_after": len(loss["after"]),
                "loss_before": _mean(loss["before"]),
                "loss_after": _mean(loss["after"]),
                "pooled_loss_before": _pooled(es, "before"),
                "pooled_loss_after": _pooled(es, "after"),
                "sent_before_kb": _mean([e["before"]["sent_bytes"] / 1e3 for e in es]),
                "sent_after_kb": _mean([e["after"]["sent_bytes"] / 1e3 for e in es]),
                "srtt_before_ms": _mean([e["before"]["srtt_ms"] for e in es]),
                "srtt_after_ms": _mean([e["after"]["srtt_ms"] for e in es]),
                "cwnd_before_kb": _mean([e["before"]["cwnd_bytes"] / 1e3 for e in es]),
                "cwnd_after_kb": _mean([e["after"]["cwnd_bytes"] / 1e3 for e in es]),
            }
        )
    return rows


def rct_by_scheme(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per scheme over the emulated scenarios (rows of `emulate.run`): the mean of the
    scenarios' mean RCTs, the mean over every request (weighted by the scenarios'
    request counts), requests and errors."""
    out: dict[str, dict[str, float]] = {}
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        rs = [r for r in rows if r["scheme"] == scheme and r["mean_rct_ms"] not in (None, "")]
        n = [float(r["requests"]) for r in rs]
        m = [float(r["mean_rct_ms"]) for r in rs]
        out[scheme] = {
            "scenarios": len(rs),
            "mean_of_scenarios_ms": float(np.mean(m)) if m else float("nan"),
            "mean_rct_ms": float(np.dot(n, m) / sum(n)) if sum(n) > 0 else float("nan"),
            "requests": int(sum(n)),
            "errors": int(sum(float(r["errors"]) for r in rs)),
        }
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def report(table: list[dict], rct: dict[str, dict[str, float]], effects: dict[str, list[dict]], head: str) -> str:
    """The Markdown report: the switch table, the RCTs, the decisions behind them."""
    lines = [
        "# Floo's own switches on the real edge (Floo §5.4, Fig. 12-13)",
        "",
        head,
        "",
        "Loss: lost over sent bytes of each switch's window (1 s before it, 1 s after it), "
        "averaged over the switches whose window carried traffic (`n` before / after), and pooled "
        "over all of them (bytes lost / bytes sent); kB: mean bytes sent per window; "
        "sRTT and cwnd: at the switch and one second later.",
        "",
        "| from → to | mode | switches | n before / after | loss 1 s before | loss 1 s after | "
        "pooled before / after | kB sent before / after | sRTT ms before | sRTT ms after | "
        "cwnd kB before | cwnd kB after |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        pair = "all" if r["from"] == "all" else f"{r['from']} → {r['to']}"
        lines.append(
            f"| {pair} | {r['mode']} | {r['switches']} | {r['traffic_before']} / {r['traffic_after']} | "
            f"{_pct(r['loss_before'])} | {_pct(r['loss_after'])} | "
            f"{_pct(r['pooled_loss_before'])} / {_pct(r['pooled_loss_after'])} | "
            f"{_ms(r['sent_before_kb'])} / {_ms(r['sent_after_kb'])} | {_ms(r['srtt_before_ms'])} | "
            f"{_ms(r['srtt_after_ms'])} | {_ms(r['cwnd_before_kb'])} | {_ms(r['cwnd_after_kb'])} |"
        )
    lines += [
        "",
        "| scheme | scenarios | requests | errors | mean RCT ms (all requests) | mean of scenario means ms | "
        "switches |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scheme, v in rct.items():
        lines.append(
            f"| {scheme} | {v['scenarios']} | {v['requests']} | {v['errors']} | {v['mean_rct_ms']:.1f} | "
            f"{v['mean_of_scenarios_ms']:.1f} | {len(effects.get(scheme, []))} |"
        )
    if "floo" in rct and "p-floo" in rct:
        full, part = rct["floo"]["mean_rct_ms"], rct["p-floo"]["mean_rct_ms"]
        lines += ["", f"Floo's mean RCT is {100 * (full - part) / part:+.2f}% against P-Floo's (Floo Fig. 9: -7.59%)."]
    lines.append("")
    return "\n".join(lines)


def plot(effects: dict[str, list[dict]], out: Path) -> Path | None:
    """Fig. 13's view: the CDF of each switch's loss rate within 1 s after it, full
    against part (the 1 s before, dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.4))
    every = [e for es in effects.values() for e in es]
    for i, mode in enumerate(MODES):
        for side, style in (("after", "-"), ("before", ":")):
            v = np.sort([100 * x for x in _losses([e for e in every if e["mode"] == mode], side)])
            if len(v) == 0:
                continue
            y = np.arange(1, len(v) + 1) / len(v)
            ax.step(v, y, where="post", linestyle=style, color=f"C{i}", label=f"{mode}, 1 s {side} (n={len(v)})")
    ax.set_xlabel("loss rate (%)")
    ax.set_ylabel("CDF of switches")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Loss around the gear's switches (Floo Fig. 13 view)", fontsize=9)
    fig.tight_layout()
    path = out / "switch-loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def switching_scenarios(
    scenarios: list, n: int, duration_s: float, period_s: float, seed: int, model_dir: Path, cache: Path
) -> list[tuple[int, object, int]]:
    """The (index, scenario, switches) of the `n` scenarios where Floo switched most in the
    simulator (`evaluate`'s runs: the same application trace and duration), ties by
    index; only those where it switched at all; in index order."""
    from gearbox.floo.evaluate import make_jobs, run_jobs, trained_start_cc

    jobs = make_jobs(
        scenarios, ["floo"], duration_s, period_s, "app", seed, cache, model_dir, trained_start_cc(model_dir)
    )
    rows = run_jobs(jobs, 1)
    ranked = sorted(range(len(scenarios)), key=lambda i: (-rows[i]["switches"], i))
    return sorted((i, scenarios[i], rows[i]["switches"]) for i in ranked[:n] if rows[i]["switches"] > 0)


def collect(out: Path, schemes: list[str]) -> tuple[list[dict], dict[str, list[dict]]]:
    """The emulator rows (`emulator-quic.csv`) and every scheme's switch effects (each
    carrying its scenario) of the runs under `out`."""
    from gearbox.floo import emulate

    with (out / "emulator-quic.csv").open() as f:
        rows = list(csv.DictReader(f))
    effects: dict[str, list[dict]] = {s: [] for s in schemes}
    for runs in sorted((out / "emulator-quic").glob("*/lab/runs")):
        scenario = runs.parent.parent.name
        for s in schemes:
            effects[s] += [{**e, "scenario": scenario, "scheme": s} for e in emulate.switch_effects(runs, s)]
    return rows, effects


def write_switches_csv(effects: dict[str, list[dict]], path: Path) -> None:
    keys = ["scheme", "scenario", "conn_id", "at_s", "from", "to", "mode"]
    sides = ["span_s", "sent_bytes", "lost_bytes", "loss_rate", "srtt_ms", "min_rtt_ms", "cwnd_bytes"]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys + [f"{side}_{k}" for side in ("before", "after") for k in sides])
        for es in effects.values():
            for e in es:
                w.writerow([e.get(k) for k in keys] + [e[side].get(k) for side in ("before", "after") for k in sides])


def main(argv: list[str] | None = None) -> int:
    from gearbox.floo.evaluate import STATIC, _spread, held_apart

    p = argparse.ArgumentParser(prog="gearbox lab floo switches", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default="models/floo", help="the Floo policy (policy.json + sidecar)")
    p.add_argument("--out", default="lab-out/floo-switches", help="where the runs and the report go")
    p.add_argument("--scenarios", type=int, default=8, help="held-apart scenarios run in the emulator")
    p.add_argument(
        "--pick",
        choices=("switching", "spread"),
        default="switching",
        help="switching: those where Floo switches most in the simulator; spread: in turn from each class",
    )
    p.add_argument("--of", type=int, default=60, help="the held-apart set they are taken from (evaluate's --scenarios)")
    p.add_argument("--duration-s", type=float, default=60.0, help="requests sent per emulated run")
    p.add_argument("--period-s", type=float, default=12.0, help="the selection period SP")
    p.add_argument("--seed", type=int, default=7, help="application traces' seed (scenario i: seed + i, as evaluate)")
    p.add_argument("--schemes", default="floo,p-floo", help="comma-separated schemes (evaluate's)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from --out's earlier runs")
    args = p.parse_args(argv)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    bad = [s for s in schemes if s not in (*STATIC, "floo", "p-floo", "random")]
    if bad:
        p.error(f"--schemes: unknown {bad}")
    model_dir = Path(args.model_dir)
    out = Path(args.out)
    if args.report_only:
        if not (out / "emulator-quic.csv").is_file():
            p.error(f"--report-only: {out / 'emulator-quic.csv'} does not exist (run without --report-only first)")
        wall = None
    else:
        if any(s in ("floo", "p-floo") for s in schemes) and not (model_dir / "policy.json").is_file():
            p.error(f"--model-dir {model_dir}: no policy.json (train one with `gearbox learn floo`)")
        from gearbox.floo import emulate

        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        rows: list[dict] = []
        pool = held_apart(args.of)
        if args.pick == "switching":
            found = switching_scenarios(
                pool, args.scenarios, args.duration_s, args.period_s, args.seed, model_dir, out / "traces"
            )
            picked = [(i, scn) for i, scn, _ in found]
            sim = {scn.name: n for _, scn, n in found}
        else:
            picked, sim = _spread(pool, args.scenarios), {}
        if not picked:
            p.error(f"--pick switching: Floo switches in none of the {args.of} scenarios in the simulator")
        (out / "picked.json").write_text(
            json.dumps([{"index": i, "scenario": scn.name, "sim_switches": sim.get(scn.name)} for i, scn in picked])
        )
        for i, scn in picked:
            rows += emulate.run(
                [scn], schemes, args.duration_s, args.seed + i, model_dir, args.period_s, out / "emulator-quic"
            )
        wall = time.perf_counter() - t0
        with (out / "emulator-quic.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        (out / "run.json").write_text(json.dumps({"argv": sys.argv, "pick": args.pick, "wall_s": wall}, indent=2))
    rows, effects = collect(out, schemes)
    write_switches_csv(effects, out / "switches.csv")
    table = summarise_effects([e for es in effects.values() for e in es])
    head = (
        f"{len({r['scenario'] for r in rows})} held-apart scenarios, schemes {', '.join(schemes)}, "
        f"HTTP/3 to the real edge in the emulator" + (f"; {wall:.0f} s of wall time." if wall is not None else ".")
    )
    if (out / "picked.json").is_file():
        picked = json.loads((out / "picked.json").read_text())
        head += " Scenarios (index in the held-apart set, Floo's switches in the simulator): " + ", ".join(
            f"{p['scenario']} ({p['index']}, {'-' if p['sim_switches'] is None else p['sim_switches']})" for p in picked
        )
    text = report(table, rct_by_scheme(rows), effects, head)
    (out / "switches.md").write_text(text)
    plot(effects, out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
