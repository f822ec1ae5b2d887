"""What a scenario expands into: its conditions (the grid's product times the sample's
points), the seeds of each run, and how conditions and the schedule's phases are
described in results (the `cond_*` columns, the by-phase breakdown)."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

from gearbox.lab.scenario.model import (
    Condition,
    PathSpec,
    Scenario,
    ScheduledChange,
    TraceRef,
    effective_path,
    rtt_jitter_ms,
)


def derive_seed(seed: int, *labels: object) -> int:
    """A 32-bit seed for one purpose (`"link", condition, repetition`), stable across
    Python versions and machines (no `hash()`), independent between purposes."""
    text = "/".join(str(x) for x in (seed, *labels)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big")


def conditions(s: Scenario) -> list[Condition]:
    """The grid's full product, times the sample's points (one empty condition without either)."""
    keys = list(s.grid)
    grid_points = [dict(zip(keys, values, strict=True)) for values in itertools.product(*(s.grid[k] for k in keys))]
    sample_points: list[dict[str, float | int]] = [{}]
    if s.sample is not None:
        from gearbox.lab.sampling import sample_conditions

        sample_points = sample_conditions(s.sample)
    out = []
    for g, p in itertools.product(grid_points, sample_points):
        out.append(Condition(index=len(out), params={**g, **p}))
    return out


def workload_seed(s: Scenario, repetition: int) -> int:
    """The workload seed of a repetition: the same for every policy and condition."""
    if s.workload.seed is not None:
        return s.workload.seed + repetition
    return derive_seed(s.seed, "workload", repetition)


def link_seed(s: Scenario, condition: Condition, repetition: int) -> int:
    """`gearbox emu --seed` of a run: the same for every policy."""
    return derive_seed(s.seed, "link", condition.index, repetition)


def trace_seed(s: Scenario, ref: TraceRef, *where: object) -> int:
    """A preset trace's seed: given, or derived from the scenario seed and the trace's place."""
    return ref.seed if ref.seed >= 0 else derive_seed(s.seed, "trace", *where)


def _describe(change: PathSpec | ScheduledChange) -> str:
    """A few words for a path's settings or a change of them, e.g. `4g-mobile trace, 70 ms, loss 1%`."""
    words = []
    if change.bandwidth_mbps is not None:
        words.append(f"{change.bandwidth_mbps:g} Mbit/s")
    if change.trace is not None:
        words.append(f"{change.trace.preset or (change.trace.file.name if change.trace.file else '')} trace")
    if change.rtt_ms is not None:
        words.append(f"{change.rtt_ms:g} ms")
    if change.loss_rate is not None:
        words.append(f"loss {100 * change.loss_rate:g}%")
    if change.loss is not None:
        words.append(f"loss {change.loss['model']}")
    if change.policer is not None:
        pol = change.policer
        if pol["action"] == "none":
            words.append("no policer")
        elif pol["action"] == "rate_limit":
            words.append(f"{pol['protocol'].upper()} limited to {pol['rate_bps'] / 1e6:g} Mbit/s")
        elif pol["action"] == "block":
            words.append(f"{pol['protocol'].upper()} blocked")
        else:
            words.append(f"{pol['protocol'].upper()} dropped at {100 * pol['drop_rate']:g}%")
    return ", ".join(words) or "unchanged"


def phases(s: Scenario) -> list[dict[str, Any]]:
    """The stretches of time between path 0's scheduled changes (one without a schedule):
    `{"start_s", "end_s" (None = to the end), "label"}`. Reports break RCTs down by them."""
    p = s.paths[0]
    times = [0.0] + [c.at_s for c in p.schedule if c.at_s > 0]
    labels = [_describe(p)] + [_describe(c) for c in p.schedule if c.at_s > 0]
    if p.schedule and p.schedule[0].at_s == 0:
        labels[0] = _describe(p) + "; " + _describe(p.schedule[0])
    out = []
    for i, (t, label) in enumerate(zip(times, labels, strict=True)):
        end = times[i + 1] if i + 1 < len(times) else None
        out.append({"start_s": t, "end_s": end, "label": label})
    return out


def condition_values(s: Scenario, c: Condition) -> dict[str, float | None]:
    """Path 0's effective bandwidth, RTT, jitter, loss and buffer under a condition (the
    `cond_*` columns of the results)."""
    p = effective_path(s.paths[0], c.params)
    return {
        "bandwidth_mbps": p.bandwidth_mbps,
        "rtt_ms": p.rtt_ms,
        "jitter_ms": rtt_jitter_ms(p),
        "loss_rate": p.loss_rate if p.loss_rate is not None else (0.0 if p.loss is None else None),
        "buffer_bdp": p.buffer_bdp,
    }
