"""Scenario files: what an experiment runs, read strictly from TOML (schema: docs/lab.md).

A scenario names the topology and each path's link in the vocabulary people use for
networks (``bandwidth_mbps``, ``rtt_ms``, ``loss_rate``, ``buffer_bdp``, a trace), the
schedule of changes, the workload, the policies to compare, the duration, repetitions
and seed, and optionally a grid or a space-filling sample of conditions. One module per
job, all of it importable from here (``from gearbox.lab import scenario as sc``):

- ``vocabulary``: the words a scenario may use (topologies, presets, sweepable knobs);
- ``reader``: strict TOML tables, and ``ScenarioError`` naming the file and the field;
- ``model``: the scenario as dataclasses;
- ``parse``: ``load`` a file / ``parse`` a document into a checked ``Scenario``;
- ``conditions``: the conditions a scenario expands into, run seeds, phases;
- ``emu``: each condition's paths compiled into the ``gearbox emu`` config (EMU.toml).
"""

from gearbox.lab.scenario.conditions import (
    condition_values,
    conditions,
    derive_seed,
    link_seed,
    phases,
    trace_seed,
    workload_seed,
)
from gearbox.lab.scenario.emu import TraceResolver, compile_path, dumps_toml, emu_config
from gearbox.lab.scenario.model import (
    Condition,
    ControlSpec,
    PathSpec,
    Policy,
    PolicyPush,
    PopulationSpec,
    SampleSpec,
    Scenario,
    ScheduledChange,
    TraceRef,
    WorkloadSpec,
    effective_path,
    rtt_jitter_ms,
)
from gearbox.lab.scenario.parse import load, parse
from gearbox.lab.scenario.reader import ScenarioError, check_knob
from gearbox.lab.scenario.vocabulary import (
    BUILTIN_POLICIES,
    BUILTIN_WORKLOADS,
    CONDITION_COLUMNS,
    KNOBS,
    LINK_CONFIG_KEYS,
    LOSS_MODELS,
    PATH_LOAD_FLAGS,
    POLICER_ACTIONS,
    PROTOS,
    QUEUE_DISCIPLINES,
    RESERVED_EDGE_FLAGS,
    RESERVED_LOAD_FLAGS,
    TOPOLOGIES,
    TRACE_PRESETS,
)

__all__ = [
    "BUILTIN_POLICIES",
    "BUILTIN_WORKLOADS",
    "CONDITION_COLUMNS",
    "KNOBS",
    "LINK_CONFIG_KEYS",
    "LOSS_MODELS",
    "PATH_LOAD_FLAGS",
    "POLICER_ACTIONS",
    "PROTOS",
    "QUEUE_DISCIPLINES",
    "RESERVED_EDGE_FLAGS",
    "RESERVED_LOAD_FLAGS",
    "TOPOLOGIES",
    "TRACE_PRESETS",
    "Condition",
    "ControlSpec",
    "PathSpec",
    "Policy",
    "PolicyPush",
    "PopulationSpec",
    "SampleSpec",
    "Scenario",
    "ScenarioError",
    "ScheduledChange",
    "TraceRef",
    "TraceResolver",
    "WorkloadSpec",
    "check_knob",
    "compile_path",
    "condition_values",
    "conditions",
    "derive_seed",
    "dumps_toml",
    "effective_path",
    "emu_config",
    "link_seed",
    "load",
    "parse",
    "phases",
    "rtt_jitter_ms",
    "trace_seed",
    "workload_seed",
]
