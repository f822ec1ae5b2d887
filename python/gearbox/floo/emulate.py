"""The emulator half of Floo's evaluation: the same held-apart scenarios on the real edge
and client over HTTP/3 (docs/floo.md "Emulator"), to show that the simulator's ranking
holds on the real stack.

Each scenario becomes a lab scenario (docs/lab.md) with one condition: the scenario's
trace preset and seed on the path, its RTT, jitter, loss and buffer, the `app` workload,
and one policy per scheme, all HTTP/3 to `gearbox edge` with the scheme's flags:
`--cc NAME` for a static controller, `--cc START --gear floo --model-dir DIR` for Floo
(START: the policy's training start, `info.start_cc`)
(`--switch part` for P-Floo), `--gear random` for random switching. `gearbox lab run`
runs them one after another in network namespaces (root) and writes `summary.json`, whose
per-policy mean RCT this module compares with the simulator's.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from gearbox.floo.scenarios import Scenario
from gearbox.lab.runner import run_file

# The controllers kernel TCP offers for a static scheme (gearbox's BPF Westwood+ included).
TCP_STATIC = ("cubic", "bbr", "westwood")


def edge_args(scheme: str, model_dir: Path, period_s: float, proto: str = "quic") -> list[str]:
    """The edge flags of one scheme; on `tcp` the start controller is the kernel's
    (`--tcp-cc`) and the gear switches `TCP_CONGESTION`. On QUIC the learned schemes
    start where the policy was trained to start (`info.start_cc`, as the simulator's
    evaluation does); on TCP on Cubic (the kernel has no Copa)."""
    from gearbox.floo.evaluate import trained_start_cc

    if proto == "tcp" and scheme not in (*TCP_STATIC, "floo", "p-floo", "random"):
        raise ValueError(f"{scheme} has no kernel TCP implementation; on tcp the static schemes are {TCP_STATIC}")
    cc = "--tcp-cc" if proto == "tcp" else "--cc"
    start = trained_start_cc(model_dir)
    if proto == "tcp" and start not in TCP_STATIC:
        start = "cubic"
    gear = ["--period-s", f"{period_s:g}"]
    if scheme == "floo":
        return [cc, start, "--gear", "floo", "--model-dir", str(model_dir), *gear]
    if scheme == "p-floo":
        return [cc, start, "--gear", "floo", "--model-dir", str(model_dir), "--switch", "part", *gear]
    if scheme == "random":
        return [cc, start, "--gear", "random", *gear]
    return [cc, scheme]


def lab_scenario(
    s: Scenario,
    schemes: list[str],
    duration_s: float,
    seed: int,
    model_dir: Path,
    period_s: float,
    proto: str = "quic",
) -> str:
    """The lab scenario (TOML) of `s` with one policy per scheme, all over `proto`
    (`quic`: HTTP/3; `tcp`: HTTP/2 over kernel TCP)."""
    lines = [
        f'name = "floo-{s.name}"',
        f'description = "Floo evaluation, {s.cls}: {s.preset} trace, {s.rtt_ms} ms, loss {s.loss_rate}, '
        f'buffer {s.buffer_bdp} BDP"',
        "seed = 1",
        "repetitions = 1",
        f"duration_s = {duration_s:g}",
        'topology = "single"',
        "",
        "[workload]",
        'name = "app"',
        f"seed = {seed}",
        "",
        "[[path]]",
        f'trace = {{ preset = "{s.preset}", seed = {s.trace_seed} }}',
        f"rtt_ms = {s.rtt_ms:g}",
        f"jitter_ms = {s.jitter_ms:g}",
        f"loss_rate = {s.loss_rate:g}",
        f"buffer_bdp = {s.buffer_bdp:g}",
        "",
    ]
    for i, scheme in enumerate(schemes):
        args = ", ".join(json.dumps(a) for a in edge_args(scheme, model_dir, period_s, proto))
        lines += [
            f"[policies.{scheme}]",
            f'proto = "{proto}"',
            f"edge_args = [{args}]",
            f"baseline = {'true' if i == 0 else 'false'}",
            "",
        ]
    return "\n".join(lines)


def run(
    scenarios: list[Scenario],
    schemes: list[str],
    duration_s: float,
    seed: int,
    model_dir: Path,
    period_s: float,
    out: Path,
    proto: str = "quic",
) -> list[dict]:
    """Runs every scenario in the emulator; one row per scheme x scenario: mean, median
    and p90 RCT of the client's records, and what the edge's gear did (its decisions by
    choice, and its switches by outcome, from the edge's telemetry)."""
    rows: list[dict] = []
    for i, s in enumerate(scenarios):
        folder = out / f"{i:02d}-{s.name}"
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / "scenario.toml"
        file.write_text(lab_scenario(s, schemes, duration_s, seed + i, model_dir.resolve(), period_s, proto))
        print(f"floo evaluate: emulator {i + 1}/{len(scenarios)}: {s.name}", file=sys.stderr)
        run_file(file, folder / "lab")
        summary = json.loads((folder / "lab" / "summary.json").read_text())
        for p in summary["policies"]:
            choices, outcomes = gear_actions(folder / "lab" / "runs", p["policy"])
            rows.append(
                {
                    "scenario": s.name,
                    "class": s.cls,
                    "proto": proto,
                    "scheme": p["policy"],
                    "decisions": json.dumps(choices, sort_keys=True),
                    "switches": json.dumps(outcomes, sort_keys=True),
                    "requests": p["requests"],
                    "errors": p["errors"],
                    "mean_rct_ms": p["mean_ms"],
                    "median_rct_ms": p["median_ms"],
                    "p90_rct_ms": p["p90_ms"],
                }
            )
    return rows


def edge_events(runs: Path, policy: str) -> Iterator[dict]:
    """The event records (docs/telemetry.md "Event records") of the edge's telemetry over
    the runs of `policy` (their `edge.jsonl`), in run order; unreadable lines skipped."""
    # Run folders are `<condition>-<policy>-r<repetition>` (gearbox.lab.planning); a glob
    # `*-floo-r*` would also take P-Floo's `c000-p-floo-r0`.
    run = re.compile(rf"c\d+-{re.escape(policy)}-r\d+")
    for edge in sorted(runs.glob("*/edge.jsonl")):
        if not run.fullmatch(edge.parent.name):
            continue
        for line in edge.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(r, dict) and "event" in r:
                yield r


def gear_actions(runs: Path, policy: str) -> tuple[dict[str, int], dict[str, int]]:
    """The edge gear's decisions by chosen controller and its switches by outcome, over
    the runs of `policy`."""
    choices: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for r in edge_events(runs, policy):
        if r["event"] == "cc_decision":
            choices[r["choice"]] = choices.get(r["choice"], 0) + 1
        elif r["event"] == "cc_switch":
            key = f"{r['to']}:{r['outcome']}"
            outcomes[key] = outcomes.get(key, 0) + 1
    return choices, outcomes


def switch_effects(runs: Path, policy: str) -> list[dict]:
    """The `cc_switch_effect` records of `policy`'s runs: each switch that changed a
    connection's controller, with its loss and RTT over the second before and after."""
    return [r for r in edge_events(runs, policy) if r["event"] == "cc_switch_effect"]
