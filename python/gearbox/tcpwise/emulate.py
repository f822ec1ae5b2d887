"""TCP WISE's ground truth (§V-A1, "the best IW of a condition") on kernel TCP in the
emulator: the real edge and client over HTTP/2 in network namespaces (root), each IW applied
to every connection by the edge's BPF `sock_ops` program (docs/tcpwise.md "Connection
Manager"), where the simulator's ground truth (`evaluate.ground_truth`) runs QUIC.

Each condition becomes one lab scenario (docs/lab.md): the condition's bottleneck (rate,
RTT, a one-BDP drop-tail queue, random loss on the server -> client direction only, as the
simulator's), TCP WISE's testbed traffic (`evaluate.WORKLOAD`: 100 KB responses, one per new
connection, ~100 a minute) and one policy per IW, `gearbox edge --cwnd-table` with a table
whose `others` entry pins that IW (`iw = [N, N]`). `gearbox lab run` runs the policies one
after another on the same requests. A response's latency is the client's completion time
less its handshake, as in the simulator's ground truth; the edge's own TCP latency
(`server_time_ms`, §IV-B) is reported beside it. The best IW is the smallest of least p80.

The edge's records say which IW the kernel applied (`iw.source = "kernel"`, `iw.iw`); a run
in which any connection got another IW is an error, not a figure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gearbox.lab.collect import read_records
from gearbox.lab.runner import run_file
from gearbox.stats import percentile
from gearbox.tcpwise.evaluate import Condition, latency_ms, write_workload

DEFAULT_IWS = (5, 10, 20, 30, 40, 50, 70, 100)
"""IWs of the sweep (the simulator's runs IW 1..100; in real time a grid)."""


def table_text(iw: int) -> str:
    """A Cwnd Table that pins every client at `iw` (docs/tcpwise.md "The Cwnd Table")."""
    return f'version = 1\ncap = {max(100, iw)}\n\n[[cluster]]\nprefix = "others"\niw = [{iw}, {iw}]\n'


def lab_scenario(c: Condition, iws: Sequence[int], tables: Path, duration_s: float, seed: int) -> str:
    """The lab scenario (TOML) of condition `c`: one HTTP/2 policy per IW."""
    lines = [
        f'name = "tcpwise-ground-truth-{c.name.replace("%", "pct")}"',
        f'description = "TCP WISE ground truth on kernel TCP: {c.name}, one policy per IW"',
        "seed = 1",
        "repetitions = 1",
        f"duration_s = {duration_s:g}",
        'topology = "single"',
        "",
        "[workload]",
        'name = "tcpwise-testbed.toml"',
        f"seed = {seed}",
        "",
        "[[path]]",
        f"bandwidth_mbps = {c.rate_mbps:g}",
        f"rtt_ms = {c.rtt_ms:g}",
        "buffer_bdp = 1.0",
        "",
    ]
    if c.loss > 0:
        lines += ["[path.downlink]", f'loss = {{ model = "bernoulli", loss_rate = {c.loss:g} }}', ""]
    for iw in iws:
        lines += [
            f"[policies.iw{iw}]",
            'proto = "tcp"',
            f"edge_args = {json.dumps(['--cwnd-table', str(tables / f'iw{iw}.toml')])}",
            f"baseline = {'true' if iw == 10 else 'false'}",
            f'label = "HTTP/2, kernel TCP, IW {iw}"',
            "",
        ]
    return "\n".join(lines)


def measure_iw(runs: Path, iw: int) -> dict[str, Any]:
    """The p80s of policy `iw<N>`'s runs, after checking that the kernel applied N."""
    client: list[dict[str, Any]] = []
    edge: list[dict[str, Any]] = []
    for run in sorted(runs.glob(f"*-iw{iw}-r*")):
        client += read_records(run / "client.jsonl")
        edge += read_records(run / "edge.jsonl")
    applied = [r["iw"] for r in edge if isinstance(r.get("iw"), dict)]
    wrong = [a for a in applied if a.get("source") != "kernel" or a.get("iw") != iw]
    if not applied or wrong:
        raise RuntimeError(
            f"IW {iw}: the kernel did not apply it to every connection ({len(applied)} records with an IW,"
            f" {len(wrong)} other: {wrong[:3]})"
        )
    lat = [x for x in (latency_ms(r) for r in client) if x is not None]
    server = [float(r["server_time_ms"]) for r in edge if r.get("server_time_ms") is not None]
    errors = sum(1 for r in client if r.get("error"))
    if not lat:
        raise RuntimeError(f"IW {iw}: no response completed")
    return {
        "iw": iw,
        "responses": len(lat),
        "errors": errors,
        "p80_ms": round(percentile(lat, 80), 2),
        "median_ms": round(percentile(lat, 50), 2),
        "server_p80_ms": round(percentile(server, 80), 2) if server else None,
    }


def run(conditions: Sequence[Condition], iws: Sequence[int], duration_s: float, seed: int, out: Path) -> dict[str, Any]:
    """Every condition in the emulator; per condition the sweep and its best IW."""
    out.mkdir(parents=True, exist_ok=True)
    tables = (out / "tables").resolve()
    tables.mkdir(exist_ok=True)
    for iw in iws:
        (tables / f"iw{iw}.toml").write_text(table_text(iw), encoding="utf-8")
    result: dict[str, Any] = {}
    for i, c in enumerate(conditions):
        folder = out / c.name.replace("%", "pct")
        folder.mkdir(parents=True, exist_ok=True)
        write_workload(folder)
        file = folder / "scenario.toml"
        file.write_text(lab_scenario(c, iws, tables, duration_s, seed), encoding="utf-8")
        print(f"tcpwise ground truth (emulator) {i + 1}/{len(conditions)}: {c.name}", file=sys.stderr)
        run_file(file, folder / "lab")
        sweep = [measure_iw(folder / "lab" / "runs", iw) for iw in iws]
        best = min(sweep, key=lambda s: (s["p80_ms"], s["iw"]))
        ten = next((s for s in sweep if s["iw"] == 10), None)
        result[c.name] = {
            "best_iw": best["iw"],
            "p80_ms": best["p80_ms"],
            "iw10_p80_ms": ten["p80_ms"] if ten else None,
            "sweep": sweep,
        }
    return result


def report(result: dict[str, Any], simulator: dict[str, Any] | None) -> str:
    """Markdown: per condition the sweep's p80s, the best IW, and the simulator's beside it."""
    lines = ["# TCP WISE ground truth on kernel TCP (emulator)", ""]
    for name, r in result.items():
        sim = (simulator or {}).get(name)
        lines.append(
            f"## {name}: best IW {r['best_iw']} (p80 {r['p80_ms']:.1f} ms; IW 10 {r['iw10_p80_ms']} ms)"
            + (f"; simulator (QUIC): best {sim['best_iw']}, p80 {sim['p80_ms']} ms" if sim else "")
        )
        lines += ["", "| IW | responses | errors | p80 ms | median ms | edge's TCP latency p80 ms |"]
        lines.append("|---:|---:|---:|---:|---:|---:|")
        for s in r["sweep"]:
            lines.append(
                f"| {s['iw']} | {s['responses']} | {s['errors']} | {s['p80_ms']:.1f} | {s['median_ms']:.1f} |"
                f" {s['server_p80_ms']} |"
            )
        lines.append("")
    return "\n".join(lines)
