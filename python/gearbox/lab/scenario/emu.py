"""Compiling a scenario's paths under one condition into the ``gearbox emu`` config
(``EMU.toml``, docs/emu.md), whose links are ``gearbox_link::LinkConfig`` tables.

Why a vocabulary above ``LinkConfig``: grids and samplers sweep *path* properties
(Floo §4.3.1 / Table 4: RTT, jitter, loss, buffer in BDP; FlexHTTP Table 1: capacity,
RTT, loss), and each property touches both directions of a path (an RTT is two one-way
delays, a buffer in BDP needs the RTT). Raw ``[path.uplink]`` / ``[path.downlink]``
tables stay available for what the vocabulary does not cover; they are merged last.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from gearbox.lab.scenario.conditions import trace_seed
from gearbox.lab.scenario.model import Condition, PathSpec, Scenario, TraceRef, effective_path, rtt_jitter_ms

TraceResolver = Callable[[TraceRef, int], Path]
"""(trace, seed) -> a mahimahi file: the runner generates presets with `gearbox trace gen`."""


def _bps(mbps: float) -> int:
    return max(1, round(mbps * 1e6))


def compile_path(
    p: PathSpec, trace_file: Callable[[TraceRef, tuple[object, ...]], Path], where: tuple[object, ...]
) -> dict[str, dict[str, Any]]:
    """Both directions of a path as `LinkConfig` tables: {"uplink": ..., "downlink": ...}."""
    jitter = rtt_jitter_ms(p)
    links: dict[str, dict[str, Any]] = {}
    for direction in ("uplink", "downlink"):
        link: dict[str, Any] = {}
        up = direction == "uplink"
        if up and p.uplink_bandwidth_mbps is not None:
            link["rate_bps"] = _bps(p.uplink_bandwidth_mbps)
        elif p.bandwidth_mbps is not None:
            link["rate_bps"] = _bps(p.bandwidth_mbps)
        elif p.trace is not None:
            link["trace_file"] = str(trace_file(p.trace, (*where, "base")))
        if p.rtt_ms is not None:
            link["delay_ms"] = p.rtt_ms / 2.0
            link["base_rtt_ms"] = p.rtt_ms
        if jitter:
            # Each direction varies by half, so the RTT varies within +-jitter.
            link["jitter_ms"] = jitter / 2.0
        queue: dict[str, Any] = {}
        if p.queue_discipline is not None:
            queue["discipline"] = p.queue_discipline
        if p.buffer_bdp is not None:
            queue["limit_bdp"] = p.buffer_bdp
        if p.buffer_packets is not None:
            queue["limit_packets"] = p.buffer_packets
        if queue:
            link["queue"] = queue
        if p.loss is not None:
            link["loss"] = dict(p.loss)
        elif p.loss_rate:
            link["loss"] = {"model": "bernoulli", "loss_rate": p.loss_rate}
        if p.policer is not None:
            link["policer"] = dict(p.policer)
        schedule = []
        uplink_follows = p.uplink_bandwidth_mbps is None
        for i, c in enumerate(p.schedule):
            ch: dict[str, Any] = {"at_ms": c.at_s * 1000.0}
            if up and c.uplink_bandwidth_mbps is not None:
                ch["rate_bps"] = _bps(c.uplink_bandwidth_mbps)
                uplink_follows = False
            elif c.bandwidth_mbps is not None and (not up or uplink_follows):
                ch["rate_bps"] = _bps(c.bandwidth_mbps)
            elif c.trace is not None and (not up or uplink_follows):
                ch["trace_file"] = str(trace_file(c.trace, (*where, "schedule", i)))
            if c.rtt_ms is not None:
                ch["delay_ms"] = c.rtt_ms / 2.0
                ch["base_rtt_ms"] = c.rtt_ms
            if c.jitter_ms is not None:
                ch["jitter_ms"] = c.jitter_ms / 2.0
            if c.loss is not None:
                ch["loss"] = dict(c.loss)
            elif c.loss_rate is not None:
                ch["loss"] = {"model": "bernoulli", "loss_rate": c.loss_rate} if c.loss_rate > 0 else {"model": "none"}
            if c.policer is not None:
                ch["policer"] = dict(c.policer)
            if len(ch) > 1:
                schedule.append(ch)
        if schedule:
            link["schedule"] = schedule
        link.update(p.downlink if not up else p.uplink)
        links[direction] = link
    return links


def emu_config(s: Scenario, c: Condition, resolve: TraceResolver) -> dict[str, Any]:
    """The `gearbox emu` config (docs/emu.md) of one condition, as a dict for `dumps_toml`."""

    def trace_file(ref: TraceRef, where: tuple[object, ...]) -> Path:
        return resolve(ref, trace_seed(s, ref, *where))

    if s.topology == "population":
        assert s.population is not None
        p = effective_path(s.paths[0], c.params)
        default = compile_path(p, trace_file, ("path", 0))
        pop: dict[str, Any] = {
            "prefixes": s.population.prefixes,
            "hosts_per_prefix": s.population.hosts_per_prefix,
            "uplink": default["uplink"],
            "downlink": default["downlink"],
        }
        prefixes = []
        for index, over in sorted(s.population.overrides.items()):
            links = compile_path(effective_path(p, over), trace_file, ("path", 0))
            prefixes.append({"index": index, "uplink": links["uplink"], "downlink": links["downlink"]})
        if prefixes:
            pop["prefix"] = prefixes
        return {"topology": "population", "population": pop}
    paths = []
    for i, spec in enumerate(s.paths):
        links = compile_path(effective_path(spec, c.params), trace_file, ("path", i))
        entry: dict[str, Any] = {"uplink": links["uplink"], "downlink": links["downlink"]}
        if spec.name:
            entry = {"name": spec.name, **entry}
        paths.append(entry)
    return {"topology": s.topology, "path": paths}


def dumps_toml(doc: dict[str, Any]) -> str:
    """TOML text of a config dict (what `emu_config` makes), written by tomli-w: strings
    with any Unicode (a trace file's path) come out as TOML reads them back."""
    return tomli_w.dumps(doc)
