"""The words a scenario file may use: topologies, workloads, protocols, trace presets,
queue disciplines, loss models, policer actions, the built-in baseline policies, the
path properties a grid or sample may sweep, and the `LinkConfig` fields a raw
`[path.uplink]` / `[path.downlink]` table may set (docs/lab.md)."""

from __future__ import annotations

import math

TOPOLOGIES = ("single", "multipath", "population")
BUILTIN_WORKLOADS = ("feed", "app", "search", "bulk", "page")
# "auto": the client's transport gear picks per request (`--gear MODE` in load_args,
# docs/wisetrans.md).
PROTOS = ("tcp", "h1", "quic", "auto")
# gearbox_link::tracegen::Preset names (docs/traces.md); a test checks them against
# `gearbox trace presets` when the binary is built.
TRACE_PRESETS = ("3g-hsdpa", "4g-stationary", "4g-mobile", "5g-stationary", "5g-mobile", "wifi", "high-speed-rail")
QUEUE_DISCIPLINES = ("drop_tail", "drop_head", "codel")

# The static baselines every scenario can name without defining them (every result is a
# ratio against baselines, docs/architecture.md): `gearbox load --proto` of each, and a
# label for tables.
BUILTIN_POLICIES: dict[str, tuple[str, str]] = {
    "tcp": ("tcp", "HTTP/2 over TCP"),
    "h1": ("h1", "HTTP/1.1 over TCP"),
    "quic": ("quic", "HTTP/3 over QUIC"),
}
# Flags the runner sets itself; a policy giving them would silently fight the runner.
RESERVED_LOAD_FLAGS = ("--workload", "--target", "--proto", "--seed", "--duration-s", "--requests", "--telemetry")
RESERVED_EDGE_FLAGS = ("--listen", "--cert", "--key", "--telemetry", "--config")
# Flags of `gearbox load` whose value is a path: resolved against the scenario file's
# folder, so that a scenario runs the same from any working directory (docs/lab.md).
PATH_LOAD_FLAGS = ("--model-dir", "--gear-config")

# Path properties a grid, a sample or a population prefix may set (name -> (kind, lo, hi,
# lo_inclusive)). `kind` "float" accepts ints too; "int" only integers.
KNOBS: dict[str, tuple[str, float, float, bool]] = {
    "bandwidth_mbps": ("float", 0.0, math.inf, False),
    "uplink_bandwidth_mbps": ("float", 0.0, math.inf, False),
    "rtt_ms": ("float", 0.0, math.inf, False),
    "jitter_ms": ("float", 0.0, math.inf, True),
    "jitter_ratio": ("float", 0.0, math.inf, True),
    "loss_rate": ("float", 0.0, 1.0, True),
    "buffer_bdp": ("float", 0.0, math.inf, False),
    "buffer_packets": ("int", 0, math.inf, False),
}
# Condition columns every results table has (path 0's effective values), so that tables
# of different scenarios share a schema.
CONDITION_COLUMNS = ("bandwidth_mbps", "rtt_ms", "jitter_ms", "loss_rate", "buffer_bdp")

LOSS_MODELS: dict[str, tuple[str, ...]] = {
    "none": (),
    "bernoulli": ("loss_rate",),
    "gilbert_elliott": ("p_good_to_bad", "p_bad_to_good", "loss_in_good", "loss_in_bad"),
    "gilbert_elliott_mean": ("mean_loss_rate", "mean_burst_packets"),
}
POLICER_ACTIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "drop": ("protocol", "drop_rate"),
    "rate_limit": ("protocol", "rate_bps", "burst_bytes"),
    "block": ("protocol",),
}
LINK_CONFIG_KEYS = (
    "rate_bps",
    "trace_file",
    "delay_ms",
    "jitter_ms",
    "allow_reorder",
    "base_rtt_ms",
    "queue",
    "loss",
    "policer",
    "schedule",
    "log_events",
)
