"""The live oracle of the transport gear (issue 19; docs/wisetrans.md, `oracle.rs`): per
phase of a scenario's schedule, the protocol that was better there in the static runs of the
same lab run, handed to the `oracle` gear (crates/gearbox-gears/src/transport/oracle.rs)
as its schedule, and run like any other policy (docs/wisetrans.md, `oracle.rs`).

WiseTrans §IV-C's Ideal (gearbox.wisetrans.dataset.ideal_choice) is computed after the fact
from two independent runs: per 10 s window the faster one, each request taking that run's
time. Taking the lower of two noisy samples flatters it, so a gear can look far from "ideal"
when it is as good as anything that could be run. The live oracle is a run: it meets the
network's noise like every other mode. How much the hindsight Ideal gains from noise alone
is the **noise floor**: the Ideal of two TCP-only runs of the same requests on different
link seeds (policy `link_seed_offset`, docs/lab.md), against one of them.

A scenario asks for the oracle with a policy that runs `--gear oracle`:

    [policies.oracle]
    proto = "auto"
    load_args = ["--gear", "oracle"]

placed after the two static policies named `tcp` and `quic` (runs go repetition,
condition, policy, so they have finished by then). Before the oracle's run the runner
calls `gear_config_for_run`, which writes `oracle.toml` (`oracle_schedule`) into the run's
folder and adds `--gear-config` for it. Without both static runs the schedule is empty and
the gear uses TCP (its decisions say `why=no-schedule`).

Time: phases are in seconds since the emulator started (the schedule's clock); the gear
counts from its first request. The static runs' first send (the mean of the two, `t_s` as
collect.py computes it) converts one into the other; a scenario with a schedule starts its
client at link time 1.5 s (`runner.CLIENT_AT_LINK_S`), so it is a little over 1.5 s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gearbox.wisetrans import dataset as ds


def send_s(record: dict[str, Any], started_unix_ms: float) -> float:
    """A record's send time in seconds since its run started (collect.py's `t_s`)."""
    return (float(record["time_unix_ms"]) - started_unix_ms) / 1000.0


def phase_of(t_s: float, phases: Sequence[dict[str, Any]]) -> int | None:
    """Index of the phase holding `t_s` (`start_s <= t_s < end_s`, `end_s` None = open)."""
    for i, ph in enumerate(phases):
        end = ph.get("end_s")
        if ph["start_s"] <= t_s and (end is None or t_s < end):
            return i
    return None


def phase_choices(
    tcp: Sequence[dict[str, Any]],
    quic: Sequence[dict[str, Any]],
    tcp_started_ms: float,
    phases: Sequence[dict[str, Any]],
    failed_cost_ms: float = 10_000.0,
) -> list[dict[str, Any]]:
    """Per phase: the mean cost of the same requests (matched by (click, url, k), phase by
    the TCP run's send time) in the TCP-only and the QUIC-only run, and the cheaper protocol
    (`choice`; a tie or a phase without matched requests: TCP, the default transport).
    Cost = RCT, a failed request `failed_cost_ms`, as §IV-C's Ideal."""
    q_by_key = dict(zip(ds.match_keys(quic), quic, strict=True))
    sums = [[0.0, 0.0, 0] for _ in phases]
    for key, r in zip(ds.match_keys(tcp), tcp, strict=True):
        q = q_by_key.get(key)
        i = phase_of(send_s(r, tcp_started_ms), phases)
        if q is None or i is None:
            continue
        sums[i][0] += ds.request_cost_ms(r, failed_cost_ms)
        sums[i][1] += ds.request_cost_ms(q, failed_cost_ms)
        sums[i][2] += 1
    out = []
    for ph, (t, q, n) in zip(phases, sums, strict=True):
        out.append(
            {
                "start_s": ph["start_s"],
                "end_s": ph.get("end_s"),
                "requests": n,
                "tcp_mean_ms": t / n if n else None,
                "quic_mean_ms": q / n if n else None,
                "choice": "quic" if n and q < t else "tcp",
            }
        )
    return out


def first_send_s(records: Sequence[dict[str, Any]], started_unix_ms: float) -> float | None:
    return min((send_s(r, started_unix_ms) for r in records), default=None)


def schedule(choices: Sequence[dict[str, Any]], first_send: float) -> list[dict[str, Any]]:
    """The gear's `oracle_schedule`: one step per change of choice, `from_ms` after the first
    request (phase start minus the first send, at least 0)."""
    steps: list[dict[str, Any]] = []
    for c in choices:
        from_ms = max(0, int(math.floor((c["start_s"] - first_send) * 1000.0)))
        if steps and steps[-1]["choice"] == c["choice"]:
            continue
        if steps and steps[-1]["from_ms"] >= from_ms:
            steps[-1] = {"from_ms": steps[-1]["from_ms"], "choice": c["choice"]}
            continue
        steps.append({"from_ms": from_ms, "choice": c["choice"]})
    return steps


def config_toml(steps: Sequence[dict[str, Any]], choices: Sequence[dict[str, Any]]) -> str:
    """A `--gear-config` file with the schedule, and the measurements behind it as comments."""
    lines = ["# Live oracle (python/gearbox/lab/oracle.py): per phase, the protocol with the lower mean cost"]
    for c in choices:
        t = "-" if c["tcp_mean_ms"] is None else f"{c['tcp_mean_ms']:.1f}"
        q = "-" if c["quic_mean_ms"] is None else f"{c['quic_mean_ms']:.1f}"
        lines.append(f"# phase from {c['start_s']:g} s: tcp {t} ms, quic {q} ms over {c['requests']} requests")
    for s in steps:
        lines += ["", "[[oracle_schedule]]", f"from_ms = {s['from_ms']}", f'choice = "{s["choice"]}"']
    return "\n".join(lines) + "\n"


def wants_oracle(load_args: Sequence[str]) -> bool:
    """Whether a policy's client flags run the `oracle` gear."""
    args = list(load_args)
    for i, a in enumerate(args):
        if a == "--gear=oracle" or (a == "--gear" and i + 1 < len(args) and args[i + 1] == "oracle"):
            return True
    return False


def gear_config_for_run(
    run_dir: Path,
    static: dict[str, tuple[Path, float]],
    phases: Sequence[dict[str, Any]],
    failed_cost_ms: float = 10_000.0,
) -> Path:
    """Writes `run_dir/oracle.toml` from the static runs of the same condition and
    repetition (`static`: "tcp"/"quic" -> (run folder, started_unix_ms)) and returns it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    choices: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    if "tcp" in static and "quic" in static:
        (tcp_dir, tcp_t0), (quic_dir, quic_t0) = static["tcp"], static["quic"]
        tcp, quic = ds.client_records(tcp_dir), ds.client_records(quic_dir)
        firsts = [f for f in (first_send_s(tcp, tcp_t0), first_send_s(quic, quic_t0)) if f is not None]
        if tcp and quic and firsts:
            choices = phase_choices(tcp, quic, tcp_t0, phases, failed_cost_ms)
            steps = schedule(choices, sum(firsts) / len(firsts))
    path = run_dir / "oracle.toml"
    path.write_text(config_toml(steps, choices))
    (run_dir / "oracle.json").write_text(json.dumps({"phases": choices, "schedule": steps}, indent=1) + "\n")
    return path
