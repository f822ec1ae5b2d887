"""The numbers of a lab run: per-policy RCT statistics (all conditions pooled, by
condition, by phase of the schedule) and their reductions against every baseline, written
as summary.json and CSV files, and the text table `gearbox lab run` prints."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gearbox.lab.collect import read_lab_folder, read_results_table

STATISTICS = ("mean", "median", "p90", "p99")
MAX_PRINTED_CONDITIONS = 24


def rct_stats(values: Iterable[float]) -> dict[str, float | None]:
    """Mean, median, p90, p99 of RCTs in ms (`gearbox.stats.percentile`: linear
    interpolation, docs/telemetry.md "Percentiles"); None when empty."""
    import numpy as np

    from gearbox.stats import percentile

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {f"{s}_ms": None for s in STATISTICS}
    return {
        "mean_ms": float(v.mean()),
        "median_ms": percentile(v, 50),
        "p90_ms": percentile(v, 90),
        "p99_ms": percentile(v, 99),
    }


def reduction(policy_value: float | None, baseline_value: float | None) -> float | None:
    """1 - policy / baseline: 0.25 = the policy's statistic is 25% lower (better) than the
    baseline's; negative = worse. None when either is missing or the baseline is 0."""
    if policy_value is None or baseline_value is None or baseline_value == 0:
        return None
    return 1.0 - policy_value / baseline_value


def reductions(stats: list[dict[str, Any]], baselines: list[str]) -> list[dict[str, Any]]:
    """For every policy and every baseline other than itself, the reduction of each statistic."""
    by_name = {s["policy"]: s for s in stats}
    out = []
    for s in stats:
        for b in baselines:
            if b == s["policy"] or b not in by_name:
                continue
            for stat in STATISTICS:
                pv, bv = s[f"{stat}_ms"], by_name[b][f"{stat}_ms"]
                out.append(
                    {
                        "policy": s["policy"],
                        "baseline": b,
                        "statistic": stat,
                        "policy_ms": pv,
                        "baseline_ms": bv,
                        "reduction": reduction(pv, bv),
                    }
                )
    return out


def policy_stats(rows: list[dict[str, Any]], policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-policy statistics over client records (failed requests are counted, not timed)."""
    out = []
    for p in policies:
        mine = [r for r in rows if r["policy"] == p["name"] and r.get("side") == "client"]
        ok = [r["rct_ms"] for r in mine if r.get("error") is None and r.get("rct_ms") is not None]
        out.append(
            {
                "policy": p["name"],
                "label": p.get("label", p["name"]),
                "proto": p["proto"],
                "baseline": bool(p.get("baseline")),
                "requests": len(mine),
                "errors": len(mine) - len(ok),
                **rct_stats(ok),
            }
        )
    return out


def path_stats(rows: list[dict[str, Any]], policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy and path of a multipath client (the records' `path_index`): the
    requests each path carried, their share of the policy's requests, and their RCT
    statistics; empty when no client record names a path."""
    client = [r for r in rows if r.get("side") == "client"]
    paths = sorted({r["path_index"] for r in client if r.get("path_index") is not None})
    out = []
    for p in policies:
        mine = [r for r in client if r["policy"] == p["name"]]
        for path in paths:
            on = [r for r in mine if r.get("path_index") == path]
            if not on:
                continue
            ok = [r["rct_ms"] for r in on if r.get("error") is None and r.get("rct_ms") is not None]
            out.append(
                {
                    "policy": p["name"],
                    "path_index": path,
                    "requests": len(on),
                    "share": len(on) / len(mine),
                    "errors": len(on) - len(ok),
                    **rct_stats(ok),
                }
            )
    return out


PATH_TABLE_HEAD = ("policy", "path", "requests", "median / p90 ms")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def path_table_rows(by_path: list[dict[str, Any]]) -> list[list[str]]:
    """The rows of the per-path table (printed and in the report): policy, path,
    requests (share), median / p90 RCT."""
    return [
        [
            x["policy"],
            str(x["path_index"]),
            f"{x['requests']} ({100 * x['share']:.0f}%)",
            f"{_ms(x['median_ms'])} / {_ms(x['p90_ms'])}",
        ]
        for x in by_path
    ]


def summarize(out: Path, table: Any = None) -> dict[str, Any]:
    """Per-policy statistics (all conditions and repetitions pooled: every policy saw the
    same requests on the same links), per condition and policy, and reductions against
    every baseline, and per path of a multipath client; writes summary.json, summary.csv,
    reductions.csv, by_condition.csv (and by_phase.csv, by_path.csv where they apply)."""
    lab = read_lab_folder(out)
    if table is None:
        table = read_results_table(out)
    plan_doc, runs, conds = lab.plan, lab.runs, lab.conditions
    wanted = ("policy", "side", "error", "rct_ms", "condition_id", "t_s", "path_index")
    cols = {k: table.column(k).to_pylist() for k in wanted if k in table.column_names}
    n = table.num_rows
    rows = [{k: cols[k][i] if k in cols else None for k in wanted} for i in range(n)]
    policies = plan_doc["policies"]
    baselines = [p["name"] for p in policies if p.get("baseline")]
    stats = policy_stats(rows, policies)
    by_condition = []
    for c in conds:
        mine = [r for r in rows if r["condition_id"] == c["condition_id"]]
        for st in policy_stats(mine, policies):
            by_condition.append({"condition_id": c["condition_id"], "condition": c["label"], **c["params"], **st})
    cond_reductions = []
    for c in conds:
        cs = [r for r in by_condition if r["condition_id"] == c["condition_id"]]
        for r in reductions(cs, baselines):
            cond_reductions.append({"condition_id": c["condition_id"], **r})
    by_phase = []
    phase_list = plan_doc.get("phases", [])
    if len(phase_list) > 1:
        for ph in phase_list:
            end = math.inf if ph["end_s"] is None else ph["end_s"]
            mine = [r for r in rows if r["t_s"] is not None and ph["start_s"] <= r["t_s"] < end]
            for st in policy_stats(mine, policies):
                by_phase.append({"start_s": ph["start_s"], "end_s": ph["end_s"], "phase": ph["label"], **st})
    by_path = path_stats(rows, policies)
    summary = {
        "scenario": plan_doc["scenario"],
        "description": plan_doc.get("description", ""),
        "statistics": list(STATISTICS),
        "baselines": baselines,
        "policies": stats,
        "reductions": reductions(stats, baselines),
        "by_condition": by_condition,
        "reductions_by_condition": cond_reductions,
        "by_phase": by_phase,
        "by_path": by_path,
        "runs": {
            "total": len(runs),
            "ok": sum(r["status"] == "ok" for r in runs),
            "timeout": sum(r["status"] == "timeout" for r in runs),
            "failed": sum(r["status"] == "failed" for r in runs),
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _write_csv(out / "summary.csv", _summary_rows(stats, summary["reductions"], baselines))
    _write_csv(out / "reductions.csv", summary["reductions"])
    _write_csv(out / "by_condition.csv", by_condition)
    if by_phase:
        _write_csv(out / "by_phase.csv", by_phase)
    if by_path:
        _write_csv(out / "by_path.csv", by_path)
    return summary


def _summary_rows(
    stats: list[dict[str, Any]], reds: list[dict[str, Any]], baselines: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for s in stats:
        row = dict(s)
        for b in baselines:
            for stat in STATISTICS:
                hit = [r for r in reds if r["policy"] == s["policy"] and r["baseline"] == b and r["statistic"] == stat]
                row[f"reduction_vs_{b}_{stat}"] = hit[0]["reduction"] if hit else None
        rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r[k] for k in keys})


def format_table(summary: dict[str, Any]) -> str:
    """The per-policy table and the reductions, as printed by `gearbox lab run`."""
    ms = _ms

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}%"

    head = ["policy", "proto", "requests", "errors", "mean ms", "median ms", "p90 ms", "p99 ms"]
    body = [
        [
            p["policy"] + (" *" if p["baseline"] else ""),
            p["proto"],
            str(p["requests"]),
            str(p["errors"]),
            ms(p["mean_ms"]),
            ms(p["median_ms"]),
            ms(p["p90_ms"]),
            ms(p["p99_ms"]),
        ]
        for p in summary["policies"]
    ]
    lines = [f"RCT per policy, {summary['scenario']} (* = baseline; all conditions and repetitions pooled)"]
    lines += _grid_text(head, body)
    reds = summary["reductions"]
    if reds:
        lines += ["", "reduction = 1 - policy / baseline (positive: the policy is faster)"]
        head = ["policy", "vs baseline", *STATISTICS]
        body = []
        pairs = list(dict.fromkeys((r["policy"], r["baseline"]) for r in reds))
        for pol, base in pairs:
            vals = {r["statistic"]: r["reduction"] for r in reds if r["policy"] == pol and r["baseline"] == base}
            body.append([pol, base, *(pct(vals.get(s)) for s in STATISTICS)])
        lines += _grid_text(head, body)
    conds = list(dict.fromkeys((c["condition_id"], c["condition"]) for c in summary.get("by_condition", [])))
    if len(conds) > 1:
        shown = conds[:MAX_PRINTED_CONDITIONS]
        lines += ["", "median / p90 RCT (ms) by condition"]
        pols = [p["policy"] for p in summary["policies"]]
        body = []
        for cid, label in shown:
            cells = [cid, label]
            for pol in pols:
                st = next(x for x in summary["by_condition"] if x["condition_id"] == cid and x["policy"] == pol)
                cells.append(f"{ms(st['median_ms'])} / {ms(st['p90_ms'])}")
            body.append(cells)
        lines += _grid_text(["condition", "parameters", *pols], body)
        if len(conds) > len(shown):
            lines.append(f"... {len(conds) - len(shown)} more in by_condition.csv")
    if summary.get("by_phase"):
        lines += ["", "median / p90 RCT (ms) by phase of the schedule (requests by send time)"]
        spans = list(dict.fromkeys((p["start_s"], p["end_s"], p["phase"]) for p in summary["by_phase"]))
        pols = [p["policy"] for p in summary["policies"]]
        head = ["phase", "from s", *pols]
        body = []
        for start, _end, label in spans:
            cells = [label, f"{start:g}"]
            for pol in pols:
                st = next(x for x in summary["by_phase"] if x["start_s"] == start and x["policy"] == pol)
                cells.append(f"{ms(st['median_ms'])} / {ms(st['p90_ms'])}")
            body.append(cells)
        lines += _grid_text(head, body)
    if summary.get("by_path"):
        lines += ["", "requests (share) and median / p90 RCT (ms) by path of the multipath client"]
        lines += _grid_text(list(PATH_TABLE_HEAD), path_table_rows(summary["by_path"]))
    r = summary["runs"]
    if r["failed"] or r["timeout"]:
        lines += ["", f"runs: {r['ok']} ok, {r['timeout']} timed out, {r['failed']} failed (see runs.json)"]
    return "\n".join(lines)


def _grid_text(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head), *(fmt.format(*row) for row in body)]
