"""The scenario as dataclasses: paths and their schedules, traces, the population, the
workload, policies, the sample, and the conditions a scenario expands into; and a
path under a condition's values."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TraceRef:
    """Where a link's rate comes from when it follows a trace: a mahimahi file, or a
    `gearbox_link::tracegen` preset generated for a seed (`gearbox trace gen`)."""

    file: Path | None = None
    preset: str | None = None
    seed: int = 0
    duration_s: float | None = None

    def describe(self) -> str:
        return str(self.file) if self.file else f"{self.preset} (seed {self.seed})"


@dataclass
class ScheduledChange:
    """A change of a path at `at_s` seconds after the link starts; None = unchanged."""

    at_s: float
    bandwidth_mbps: float | None = None
    uplink_bandwidth_mbps: float | None = None
    trace: TraceRef | None = None
    rtt_ms: float | None = None
    jitter_ms: float | None = None
    loss_rate: float | None = None
    loss: dict[str, Any] | None = None
    policer: dict[str, Any] | None = None


@dataclass
class PathSpec:
    """One emulated path (both directions). Rates: `bandwidth_mbps` (server -> client and,
    unless `uplink_bandwidth_mbps` is given, client -> server too) or a trace (both
    directions). `rtt_ms` is split evenly into two one-way delays."""

    name: str | None = None
    bandwidth_mbps: float | None = None
    uplink_bandwidth_mbps: float | None = None
    trace: TraceRef | None = None
    rtt_ms: float | None = None
    jitter_ms: float | None = None
    jitter_ratio: float | None = None
    jitter_max_ms: float | None = None
    loss_rate: float | None = None
    loss: dict[str, Any] | None = None
    buffer_bdp: float | None = None
    buffer_packets: int | None = None
    queue_discipline: str | None = None
    policer: dict[str, Any] | None = None
    schedule: list[ScheduledChange] = field(default_factory=list)
    uplink: dict[str, Any] = field(default_factory=dict)
    downlink: dict[str, Any] = field(default_factory=dict)


@dataclass
class PopulationSpec:
    """Clients in `prefixes` /24s of `hosts_per_prefix` hosts, each prefix with its own
    pair of links built from the scenario's one path plus its `overrides`."""

    prefixes: int
    hosts_per_prefix: int
    overrides: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass
class WorkloadSpec:
    """`gearbox load --workload`: a built-in name or a file; seed None = derived from the
    scenario seed (per repetition)."""

    name: str
    seed: int | None = None
    time_scale: float = 1.0


@dataclass
class Policy:
    """A named way of running the edge and the client: the `gearbox load --proto` and extra
    flags of the client, extra flags of the edge. Gears are added as policies.

    The paths in the flags (`--model-dir`, `--gear-config`) are absolute, resolved against
    the scenario file's folder; `model_dir` repeats the `--model-dir` one, which the
    runner checks before running (a gear without its model runs as its fallback)."""

    name: str
    proto: str
    load_args: list[str] = field(default_factory=list)
    edge_args: list[str] = field(default_factory=list)
    baseline: bool = False
    label: str = ""
    model_dir: str | None = None
    # Added to the run's link seed: another draw of loss and jitter for the same requests
    # (the noise floor's second TCP-only run, lab/oracle.py). 0: the seed every policy shares.
    link_seed_offset: int = 0


@dataclass
class SampleSpec:
    """A space-filling sample of conditions: `n` points over `ranges` (WSP, sampling.py)."""

    method: str
    n: int
    seed: int
    ranges: dict[str, tuple[float, float]]
    log_scale: list[str] = field(default_factory=list)
    candidates: int | None = None


@dataclass
class PolicyPush:
    """One `gearbox control policy push GEAR DIR --activate` of a run (`[[control.push]]`)."""

    gear: str
    dir: Path
    at_s: float = 0.0
    """0: before the edge and the client start; else seconds after the links start."""


@dataclass
class ControlSpec:
    """`[control]`: each run starts `gearbox control serve` beside the edge; the edge and the
    client upload their telemetry to it and poll their policies (docs/lab.md, "Control
    plane")."""

    poll_s: float = 1.0
    pushes: list[PolicyPush] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`[control.jobs.NAME]`: the service's `[jobs.NAME]` (docs/control.md, "Learners on a
    schedule"), `{scenario}` in a command already replaced by the scenario's folder."""


@dataclass
class Scenario:
    """A parsed, checked scenario file."""

    name: str
    source: Path
    duration_s: float
    description: str = ""
    seed: int = 1
    repetitions: int = 1
    timeout_s: float | None = None
    topology: str = "single"
    workload: WorkloadSpec = field(default_factory=lambda: WorkloadSpec("app"))
    paths: list[PathSpec] = field(default_factory=list)
    population: PopulationSpec | None = None
    policies: list[Policy] = field(default_factory=list)
    grid: dict[str, list[float | int]] = field(default_factory=dict)
    sample: SampleSpec | None = None
    control: ControlSpec | None = None

    @property
    def run_timeout_s(self) -> float:
        """Limit of one run (`gearbox emu --duration-s`): the workload's duration plus time
        for the last responses to finish on a slow path."""
        return self.timeout_s if self.timeout_s is not None else 2.0 * self.duration_s + 30.0

    @property
    def baselines(self) -> list[Policy]:
        return [p for p in self.policies if p.baseline]


@dataclass
class Condition:
    """One point of the grid x sample product (the only one when neither is given)."""

    index: int
    params: dict[str, float | int]

    @property
    def id(self) -> str:
        return f"c{self.index:03d}"

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.params.items()) or "base"


def _fmt(v: float | int) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def effective_path(p: PathSpec, params: dict[str, float | int]) -> PathSpec:
    """The path with a condition's (or a prefix's) values applied."""
    q = PathSpec(**{f: getattr(p, f) for f in p.__dataclass_fields__})
    for k, v in params.items():
        setattr(q, k, v)
    if "jitter_ratio" in params:
        q.jitter_ms = None
    if "jitter_ms" in params:
        q.jitter_ratio = None
    return q


def rtt_jitter_ms(p: PathSpec) -> float | None:
    """RTT jitter half-width in ms (Floo Table 4 gives it as a share of the RTT, capped)."""
    if p.jitter_ms is not None:
        return p.jitter_ms
    if p.jitter_ratio is not None and p.rtt_ms is not None:
        j = p.jitter_ratio * p.rtt_ms
        return min(j, p.jitter_max_ms) if p.jitter_max_ms is not None else j
    return None
