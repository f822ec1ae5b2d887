"""WiseTrans evaluation (WiseTrans §IV-C, §IV-D, §IV-E): modes on held-apart paths, against Ideal.

    python -m gearbox.wisetrans evaluate           # run the eval scenarios (root), print and save the tables
    python -m gearbox.wisetrans evaluate --no-run  # recompute from out/wisetrans/eval
    python -m gearbox.wisetrans demo               # the short version: one changing path, <= 5 min

Regions (the seed's two cities, §IV-C): `plain` (scenarios/wisetrans-eval.toml) and `udp`
(scenarios/wisetrans-eval-udp.toml, whose access network rate-limits UDP part of the time,
§II-B). Generalisation (§IV-D, Fig. 11): `bbr` (scenarios/wisetrans-eval-bbr.toml), the edge's
QUIC on BBR instead of the CUBIC the models were trained with, no retraining.

Per mode: mean, median, std and p99 of request cost (RCT; a failed request costs 10 000 ms,
as in the label, so a mode cannot look fast by failing), reductions `1 - mode / baseline`
against TCP-only and QUIC-only, and the gap to Ideal. **Ideal** (§IV-C: "the shorter
average completion time between TCP and QUIC ... for each network condition"): on the
identical TCP-only and QUIC-only replays, per 10 s window of send time the protocol with the
lower summed cost, each request taking that protocol's RCT (dataset.ideal_choice). Deep dive
(§IV-E, Figs. 12b, 16, Table IV) from the decision strings (docs/wisetrans.md): exploration
frequency (requests in `phase=probe`), switching frequency (changes of `choice` between
consecutive non-probe decisions), share of switches followed by a lower mean cost in the 10 s
after than in the 10 s before (Fig. 16), rollback rate (rollbacks / switches), and the
Rollback Checker's verifications (`suspect`: a deterioration measured again on the old protocol).
Fig. 1: lambda = mean RCT_TCP / mean RCT_QUIC per training condition (bandwidth x loss).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gearbox.stats import percentile
from gearbox.wisetrans import dataset as ds

REPO_ROOT = ds.REPO_ROOT


@dataclass
class Args:
    regions: dict[str, str] = field(
        default_factory=lambda: {
            "plain": "scenarios/wisetrans-eval.toml",
            "udp": "scenarios/wisetrans-eval-udp.toml",
            "bbr": "scenarios/wisetrans-eval-bbr.toml",
            "vere": "scenarios/wisetrans-eval-vere.toml",
            # Issue 19's classes: UDP throttled then blocked mid-session; a changing mobile path.
            "block": "scenarios/wisetrans-eval-block.toml",
            "mobile": "scenarios/wisetrans-eval-mobile.toml",
        }
    )
    # Regions pooled into one more table (the seed's overall numbers pool its two cities).
    pooled: dict[str, list[str]] = field(
        default_factory=lambda: {"both": ["plain", "udp"], "block+mobile": ["block", "mobile"]}
    )
    out: str = "out/wisetrans/eval"  # lab result folders, one per region
    results: str = "data/wisetrans/eval.json"  # the numbers docs/wisetrans.md quotes
    dataset_grid: str = "out/wisetrans/dataset/grid"  # Fig. 1's lambda from the training grid
    window_ms: float = 10_000.0  # Ideal's window and Fig. 16's before/after span (§IV-E4: 10 s)
    failed_cost_ms: float = 10_000.0  # as in the label (docs/wisetrans.md)
    run: bool = True


MODES = (
    "tcp",
    "tcp2",
    "quic",
    "race",
    "strawman",
    "mlp",
    "wisetrans-v1",
    "wisetrans-v1-norollback",
    "wisetrans-v1-seedrollback",
    "wisetrans-v1-retrained",
    "wisetrans-v2",
    "wisetrans-v2-seedprobe",
    "wisetrans-v2-seedrollback",
    "wisetrans-v2-nojump",
    "wisetrans-v2-hedge",
    "oracle",
    "noise-ideal",
)
# Not gears: the second TCP-only run and the Ideal of the two TCP-only runs (the noise floor).
NOT_GEARS = ("tcp", "quic", "tcp2")


def stats(costs: list[float]) -> dict[str, float | int | None]:
    if not costs:
        return {"requests": 0, "mean": None, "median": None, "std": None, "p99": None, "max": None}
    x = np.asarray(costs, dtype=float)
    return {
        "requests": int(x.size),
        "mean": float(x.mean()),
        "median": percentile(x, 50),
        "std": float(x.std()),
        "p99": percentile(x, 99),
        "max": float(x.max()),
    }


def parse_decision(s: str | None) -> dict[str, str]:
    """`mode;phase=..;score=..;choice=..;why=..[;k=v]*` -> dict (docs/wisetrans.md)."""
    if not s:
        return {}
    parts = s.split(";")
    out = {"mode": parts[0]}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        out[k] = v
    return out


def deep_dive(records: list[dict[str, Any]], window_ms: float, failed_cost_ms: float) -> dict[str, Any]:
    """Exploration, switching, switches that helped, rollbacks of one run's records."""
    recs = sorted(records, key=lambda r: r["time_unix_ms"])
    dec = [parse_decision(r.get("decision")) for r in recs]
    n = len(recs)
    probes = sum(1 for d in dec if is_exploration(d))
    rollbacks = sum(1 for d in dec if "rollback" in d)
    # Rollback verifications started (`suspect=` on the first verification request).
    verifications = sum(1 for d in dec if "suspect" in d)
    switches_at = []
    prev = None
    for r, d in zip(recs, dec, strict=True):
        if d.get("phase") == "probe" or "choice" not in d:
            continue
        if prev is not None and d["choice"] != prev:
            switches_at.append(float(r["time_unix_ms"]))
        prev = d["choice"]
    helped = 0
    for t in switches_at:
        before = [ds.request_cost_ms(r, failed_cost_ms) for r in recs if t - window_ms <= r["time_unix_ms"] < t]
        after = [ds.request_cost_ms(r, failed_cost_ms) for r in recs if t <= r["time_unix_ms"] < t + window_ms]
        if before and after and np.mean(after) < np.mean(before):
            helped += 1
    quic = sum(1 for r in recs if r.get("protocol") == "h3")
    # The client's hedge over TCP (docs/client.md): started, and answered by the hedge.
    hedged = [r for r in recs if r.get("hedged")]
    return {
        "hedged": len(hedged),
        "hedge_tcp_won": sum(1 for r in hedged if r.get("protocol") == r["hedged"]),
        "requests": n,
        "quic_share": quic / n if n else None,
        "exploration_freq": probes / n if n else None,
        "switches": len(switches_at),
        "switching_freq": len(switches_at) / max(1, n - 1),
        "switches_helped": helped / len(switches_at) if switches_at else None,
        "rollbacks": rollbacks,
        "rollback_rate": rollbacks / len(switches_at) if switches_at else None,
        "verifications": verifications,
    }


def selection_accuracy(records: list[dict[str, Any]], window_choice: dict[int, str], window_ms: float) -> dict:
    """Table III/IV's accuracy: the share of a run's requests sent on the protocol Ideal
    chose for their 10 s window (windows by send time since the run's first send, as in
    dataset.ideal_choice; the runs replay the same requests at the same offsets)."""
    if not records:
        return {"judged": 0, "correct": 0}
    t0 = min(float(r["time_unix_ms"]) for r in records)
    judged = correct = 0
    for r in records:
        ideal = window_choice.get(int((float(r["time_unix_ms"]) - t0) // window_ms))
        if ideal is None or r.get("protocol") is None:
            continue
        judged += 1
        correct += int(("quic" if r["protocol"] == "h3" else "tcp") == ideal)
    return {"judged": judged, "correct": correct}


def is_exploration(decision: dict[str, str]) -> bool:
    """A probe slot or extra (`why=probe-...`) or a rollback verification request
    (`why=verify-...`); `probe-wait` requests ride on the last selected protocol and are
    not experiments."""
    why = decision.get("why", "")
    return (why.startswith("probe-") and why != "probe-wait") or why.startswith("verify-")


def gap_attribution(records: list[dict[str, Any]], ideal: list[dict[str, Any]], failed_cost_ms: float) -> dict:
    """Where a run's gap to Ideal comes from: the sum of (cost - Ideal's cost of the same
    request) over its exploration requests (probe slots and extras) and over the rest, and
    Ideal's total over the same requests, ms. `ideal` is dataset.ideal_choice of the run's
    static pair; requests are matched by its `key`."""
    ideal_cost = {x["key"]: x["rct_ms"] for x in ideal}
    out = {"explore_gap_ms": 0.0, "other_gap_ms": 0.0, "ideal_ms": 0.0}
    for key, r in zip(ds.match_keys(records), records, strict=True):
        if key not in ideal_cost:
            continue
        gap = ds.request_cost_ms(r, failed_cost_ms) - ideal_cost[key]
        out["explore_gap_ms" if is_exploration(parse_decision(r.get("decision"))) else "other_gap_ms"] += gap
        out["ideal_ms"] += ideal_cost[key]
    return out


def runs_by_policy(lab_out: Path) -> dict[tuple[str, int], dict[str, Path]]:
    """(condition, repetition) -> policy -> run folder."""
    out: dict[tuple[str, int], dict[str, Path]] = {}
    for r in json.loads((lab_out / "runs.json").read_text()):
        out.setdefault((r["condition_id"], r["repetition"]), {})[r["policy"]] = Path(r["dir"])
    return out


def edge_bytes(run_dir: Path) -> int | None:
    """Response bytes the edge wrote in one run (the sum of its records' `bytes`), None when
    the run has no edge records. Against the client's received bytes it shows what a hedge
    duplicated (both copies were served, one was received in full)."""
    path = run_dir / "edge.jsonl"
    if not path.exists():
        return None
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if rec.get("side") == "edge" and "event" not in rec:
            total += int(rec.get("bytes") or 0)
    return total


def region_table(lab_outs: Path | list[Path], a: Args) -> dict[str, Any]:
    """Per mode and Ideal: stats, reductions, gap to Ideal, deep dive; pooled over the
    conditions and repetitions of one or more lab folders. `per_run` gives each mode's
    mean-cost reduction against TCP-only and QUIC-only and its gap to Ideal in every
    (condition, repetition) separately, as min / max: the spread that says which
    differences of the pooled numbers are more than run-to-run noise."""
    costs: dict[str, list[float]] = {}
    failed: dict[str, int] = {}
    dives: dict[str, list[dict[str, Any]]] = {}
    per_run: dict[str, dict[str, list[float]]] = {}
    # Response bytes the edge wrote and the client received, per mode (runs with edge records).
    served: dict[str, list[int]] = {}
    for lab_out in lab_outs if isinstance(lab_outs, list) else [lab_outs]:
        for _, runs in sorted(runs_by_policy(lab_out).items()):
            recs = {policy: ds.client_records(d) for policy, d in runs.items()}
            for policy, d in runs.items():
                sent = edge_bytes(d)
                if sent is not None:
                    both = served.setdefault(policy, [0, 0])
                    both[0] += sent
                    both[1] += sum(int(r.get("bytes") or 0) for r in recs[policy])
            means: dict[str, float] = {}
            for policy, rs in recs.items():
                c = [ds.request_cost_ms(r, a.failed_cost_ms) for r in rs]
                costs.setdefault(policy, []).extend(c)
                failed[policy] = failed.get(policy, 0) + sum(1 for r in rs if r.get("error") is not None)
                if c:
                    means[policy] = float(np.mean(c))
                if policy not in NOT_GEARS:
                    dives.setdefault(policy, []).append(deep_dive(rs, a.window_ms, a.failed_cost_ms))
            if "tcp" in recs and "quic" in recs:
                ideal = ds.ideal_choice(recs["tcp"], recs["quic"], a.window_ms, a.failed_cost_ms)
                costs.setdefault("ideal", []).extend(x["rct_ms"] for x in ideal)
                if ideal:
                    means["ideal"] = float(np.mean([x["rct_ms"] for x in ideal]))
                window_choice = {x["window"]: x["choice"] for x in ideal}
                for policy, rs in recs.items():
                    if policy not in NOT_GEARS and dives.get(policy):
                        dives[policy][-1].update(selection_accuracy(rs, window_choice, a.window_ms))
                        dives[policy][-1].update(gap_attribution(rs, ideal, a.failed_cost_ms))
            if "tcp" in recs and "tcp2" in recs:
                # The noise floor: §IV-C's Ideal over two TCP-only runs of the same requests on
                # different link seeds. It is below TCP-only only because it takes the faster
                # of two noisy samples per window.
                noise = ds.ideal_choice(recs["tcp"], recs["tcp2"], a.window_ms, a.failed_cost_ms)
                costs.setdefault("noise-ideal", []).extend(x["rct_ms"] for x in noise)
                if noise:
                    means["noise-ideal"] = float(np.mean([x["rct_ms"] for x in noise]))
            for mode, m in means.items():
                spread = per_run.setdefault(mode, {"vs_tcp": [], "vs_quic": [], "gap_ideal": []})
                for key, base, sign in (("vs_tcp", "tcp", 1), ("vs_quic", "quic", 1), ("gap_ideal", "ideal", -1)):
                    if base in means and base != mode and means[base] > 0:
                        spread[key].append(sign * (1 - m / means[base]))
    table: dict[str, Any] = {}
    for mode, c in costs.items():
        table[mode] = stats(c)
        if mode in failed:
            table[mode]["failed"] = failed[mode]
        if mode in served:
            table[mode]["edge_bytes"], table[mode]["client_bytes"] = served[mode]
        spread = per_run.get(mode, {})
        table[mode]["per_run"] = {k: {"runs": len(v), "min": min(v), "max": max(v)} for k, v in spread.items() if v}
    for mode, row in table.items():
        for base in ("tcp", "quic", "ideal", "oracle"):
            if base in table and base != mode:
                for stat in ("mean", "median", "std", "p99"):
                    b, v = table[base][stat], row[stat]
                    row[f"vs_{base}_{stat}"] = (1 - v / b) if b and v is not None else None
    for mode, ds_list in dives.items():
        total = {
            k: 0.0
            for k in (
                "requests",
                "switches",
                "rollbacks",
                "verifications",
                "judged",
                "correct",
                "explore_gap_ms",
                "other_gap_ms",
                "ideal_ms",
                "hedged",
                "hedge_tcp_won",
            )
        }
        probes = helped = 0.0
        for d in ds_list:
            total["requests"] += d["requests"]
            total["switches"] += d["switches"]
            total["rollbacks"] += d["rollbacks"]
            total["verifications"] += d.get("verifications", 0)
            for k in ("judged", "correct", "explore_gap_ms", "other_gap_ms", "ideal_ms", "hedged", "hedge_tcp_won"):
                total[k] += d.get(k, 0)
            probes += (d["exploration_freq"] or 0) * d["requests"]
            helped += (d["switches_helped"] or 0) * d["switches"]
        n, s = total["requests"], total["switches"]
        table[mode]["deep_dive"] = {
            "exploration_freq": probes / n if n else None,
            "switches": int(s),
            "switching_freq": s / n if n else None,
            "switches_helped": helped / s if s else None,
            "rollback_rate": total["rollbacks"] / s if s else None,
            "verifications": int(total["verifications"]),
            "quic_share": float(np.mean([d["quic_share"] or 0 for d in ds_list])),
            "selection_accuracy": total["correct"] / total["judged"] if total["judged"] else None,
            # Gap to Ideal (share of Ideal's total) from exploration requests and from the rest.
            "gap_from_exploration": total["explore_gap_ms"] / total["ideal_ms"] if total["ideal_ms"] else None,
            "gap_from_other": total["other_gap_ms"] / total["ideal_ms"] if total["ideal_ms"] else None,
            "hedged_share": total["hedged"] / n if n else None,
            "hedge_tcp_won_share": total["hedge_tcp_won"] / total["hedged"] if total["hedged"] else None,
        }
    return table


def fig1_lambda(grid_out: Path, a: Args) -> list[dict[str, Any]]:
    """lambda = mean RCT_TCP / mean RCT_QUIC per training condition (> 1: QUIC faster)."""
    rows = []
    if not (grid_out / "runs.json").exists():
        return rows
    for cond, tcp_dir, quic_dir in ds.paired_runs(grid_out):
        t = [ds.request_cost_ms(r, a.failed_cost_ms) for r in ds.client_records(tcp_dir)]
        q = [ds.request_cost_ms(r, a.failed_cost_ms) for r in ds.client_records(quic_dir)]
        if t and q:
            rows.append({**cond["values"], "lambda": float(np.mean(t) / np.mean(q))})
    return rows


def format_region(name: str, table: dict[str, Any]) -> str:
    def ms(v: Any) -> str:
        return "-" if v is None else f"{v:.0f}"

    def pct(v: Any) -> str:
        return "-" if v is None else f"{v * 100:+.1f}%"

    lines = [
        f"region {name}: request cost (RCT; failed = 10 s), ms; reductions 1 - mode / baseline",
        "| mode | requests | failed | mean | median | std | p99 | max | mean vs TCP | mean vs QUIC | median vs TCP "
        "| median vs QUIC | p99 vs TCP | gap to Ideal (mean) | gap to live oracle (mean) "
        "| per run: vs TCP, vs QUIC, gap to Ideal (min..max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def spread(r: dict[str, Any]) -> str:
        pr = r.get("per_run", {})
        parts = [
            f"{pct(pr[k]['min'])}..{pct(pr[k]['max'])}" if k in pr else "-" for k in ("vs_tcp", "vs_quic", "gap_ideal")
        ]
        n = max((pr[k]["runs"] for k in pr), default=0)
        return f"{', '.join(parts)} ({n} runs)" if n else "-"

    order = [m for m in (*MODES, "ideal") if m in table] + [m for m in table if m not in (*MODES, "ideal")]
    for m in order:
        r = table[m]
        gap = None if m == "ideal" or r.get("vs_ideal_mean") is None else -r["vs_ideal_mean"]
        gap_oracle = None if r.get("vs_oracle_mean") is None else -r["vs_oracle_mean"]
        lines.append(
            f"| {m} | {r['requests']} | {r.get('failed', '-')} | {ms(r['mean'])} | {ms(r['median'])} | "
            f"{ms(r['std'])} | {ms(r['p99'])} | {ms(r.get('max'))} | "
            f"{pct(r.get('vs_tcp_mean'))} | {pct(r.get('vs_quic_mean'))} | {pct(r.get('vs_tcp_median'))} | "
            f"{pct(r.get('vs_quic_median'))} | {pct(r.get('vs_tcp_p99'))} | {pct(gap)} | {pct(gap_oracle)} | "
            f"{spread(r)} |"
        )
    floor = table.get("noise-ideal", {}).get("vs_tcp_mean")
    if floor is not None:
        lines += [
            "",
            f"noise floor: the Ideal of two TCP-only runs (tcp, tcp2: other link seed) is {floor * 100:.1f}% "
            "below TCP-only; a mode's gap to Ideal smaller than that is within noise",
        ]
    dd = [(m, table[m]["deep_dive"]) for m in order if "deep_dive" in table[m]]
    if dd:
        lines += [
            "",
            "| mode | QUIC share | agrees with Ideal | exploration freq | switches | switching freq "
            "| switches that helped | rollback rate | rollback verifications "
            "| gap to Ideal from exploring / the rest |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m, d in dd:
            f = lambda v: "-" if v is None else f"{v * 100:.1f}%"  # noqa: E731
            lines.append(
                f"| {m} | {f(d['quic_share'])} | {f(d.get('selection_accuracy'))} | {f(d['exploration_freq'])} | "
                f"{d['switches']} | "
                f"{f(d['switching_freq'])} | {f(d['switches_helped'])} | {f(d['rollback_rate'])} | "
                f"{d.get('verifications', 0)} | {pct(d.get('gap_from_exploration'))} / {pct(d.get('gap_from_other'))} |"
            )
        hedging = [(m, d) for m, d in dd if d.get("hedged_share")]
        if hedging:
            lines.append("")
        for m, d in hedging:
            won = d.get("hedge_tcp_won_share")
            sent, got = table[m].get("edge_bytes"), table[m].get("client_bytes")
            extra = f"; the edge wrote {sent / got - 1:+.1%} of the bytes the client received" if sent and got else ""
            lines.append(
                f"{m}: {d['hedged_share'] * 100:.1f}% of requests hedged over TCP, the hedge answered "
                f"{'-' if won is None else f'{won * 100:.0f}%'} of them{extra}"
            )
    return "\n".join(lines)


def run_regions(a: Args, regions: dict[str, str]) -> None:
    from gearbox.lab import runner
    from gearbox.lab import scenario as sc

    for region, path in regions.items():
        runner.run_scenario(sc.load(REPO_ROOT / path), REPO_ROOT / a.out / region, jobs=1, force=True, progress=False)


def main(argv: list[str] | None = None) -> int:
    a = Args()
    p = argparse.ArgumentParser(prog="gearbox lab wisetrans evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--no-run", action="store_true", help="recompute from the runs already in --out")
    p.add_argument("--region", action="append", help="only these regions (plain, udp, bbr, vere, block, mobile)")
    p.add_argument("--out", default=a.out)
    p.add_argument("--results", default=a.results, help="where the numbers go (JSON)")
    ns = p.parse_args(argv)
    if ns.region and ns.results == a.results:
        # The results hold every region found in --out: a few regions run into a new folder would
        # replace the committed numbers of all the others.
        p.error(f"--region writes only the regions in --out: name the output with --results, not {a.results}")
    a.run, a.out, a.results = not ns.no_run, ns.out, ns.results
    regions = {k: v for k, v in a.regions.items() if not ns.region or k in ns.region}
    if a.run:
        run_regions(a, regions)
    result: dict[str, Any] = {"regions": {}}
    for region in a.regions:
        folder = REPO_ROOT / a.out / region
        if not (folder / "runs.json").exists():
            continue
        table = region_table(folder, a)
        result["regions"][region] = table
        print(format_region(region, table) + "\n")
    for name, members in a.pooled.items():
        folders = [REPO_ROOT / a.out / m for m in members if (REPO_ROOT / a.out / m / "runs.json").exists()]
        if len(folders) == len(members):
            table = region_table(folders, a)
            result["regions"][name] = table
            print(format_region(f"{name} ({' + '.join(members)})", table) + "\n")
    result["fig1_lambda"] = fig1_lambda(REPO_ROOT / a.dataset_grid, a)
    if result["fig1_lambda"]:
        print("Fig. 1: lambda = mean RCT_TCP / mean RCT_QUIC (> 1: QUIC faster), training grid")
        for r in result["fig1_lambda"]:
            print("  " + ", ".join(f"{k}={v:g}" for k, v in r.items() if v is not None))
    path = REPO_ROOT / a.results
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
    return 0


def demo(argv: list[str] | None = None) -> int:
    """The short version (<= 5 min): scenarios/wisetrans-demo.toml, then its table."""
    p = argparse.ArgumentParser(prog="gearbox lab wisetrans demo")
    p.add_argument("--out", default="out/wisetrans/demo")
    p.add_argument("--scenario", default="scenarios/wisetrans-demo.toml")
    ns = p.parse_args(argv)
    a = Args()
    from gearbox.lab import runner
    from gearbox.lab import scenario as sc

    out = REPO_ROOT / ns.out
    runner.run_scenario(sc.load(REPO_ROOT / ns.scenario), out, jobs=1, force=True, progress=False)
    print(format_region("demo", region_table(out, a)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
