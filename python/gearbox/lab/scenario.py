"""Scenario files: what an experiment runs, read strictly from TOML (schema: docs/lab.md).

A scenario names the topology and each path's link in the vocabulary people use for
networks (``bandwidth_mbps``, ``rtt_ms``, ``loss_rate``, ``buffer_bdp``, a trace), the
schedule of changes, the workload, the policies to compare, the duration, repetitions
and seed, and optionally a grid or a space-filling sample of conditions. This module
reads and checks it, expands it into conditions, and compiles every condition's paths
into the ``gearbox emu`` config (``EMU.toml``, docs/emu.md), whose links are
``gearbox_link::LinkConfig`` tables.

Why our own validation and not a schema library: the rule of the house is that bad
input gets an error naming the file and the field (``demo.toml: path[0].schedule[1].
loss_rate: must be in [0, 1], got 2``), and that a misspelt field is refused, never
ignored. ``tomllib`` + dataclasses + the small ``_Table`` reader below do exactly that
with the standard library; pydantic would add a dependency and its own error wording.

Why a vocabulary above ``LinkConfig``: grids and samplers sweep *path* properties
(Floo §4.3.1 / Table 4: RTT, jitter, loss, buffer in BDP; FlexHTTP Table 1: capacity,
RTT, loss), and each property touches both directions of a path (an RTT is two one-way
delays, a buffer in BDP needs the RTT). Raw ``[path.uplink]`` / ``[path.downlink]``
tables stay available for what the vocabulary does not cover; they are merged last.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

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


class ScenarioError(ValueError):
    """A scenario that cannot run as written; the message names the file and the field."""

    def __init__(self, source: str, field_path: str, message: str) -> None:
        self.source = source
        self.field_path = field_path
        self.message = message
        where = f"{source}: {field_path}: " if field_path else f"{source}: "
        super().__init__(where + message)


_MISSING = object()


class _Table:
    """A TOML table being read: typed getters that name the field on error, and `done()`
    to refuse whatever was not read (unknown fields)."""

    def __init__(self, data: Any, path: str, source: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(source, path, f"must be a table, got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.path = path
        self.source = source
        self.known: list[str] = []

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, message: str) -> ScenarioError:
        return ScenarioError(self.source, self.sub(key) if key else self.path, message)

    def has(self, key: str) -> bool:
        self.known.append(key)
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.known.append(key)
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise self.error(key, "is required")
        return default

    def str(self, key: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {_kind(v)}")
        if choices is not None and v not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        v = self.raw(key, default)
        if key in self.data and not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {_kind(v)}")
        return v

    def int(self, key: str, default: Any = _MISSING, lo: int | None = None, hi: int | None = None) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"must be an integer, got {_kind(v)}")
        if lo is not None and v < lo:
            raise self.error(key, f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise self.error(key, f"must be <= {hi}, got {v}")
        return v

    def float(self, key: str, default: Any = _MISSING, positive: bool = False) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        return _number(self.error, key, v, 0.0 if positive else -math.inf, math.inf, not positive)

    def strs(self, key: str, default: Any = _MISSING) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, "must be a list of strings")
        return list(v)

    def table(self, key: str) -> _Table | None:
        v = self.raw(key, None)
        return None if v is None else _Table(v, self.sub(key), self.source)

    def tables(self, key: str) -> list[_Table]:
        v = self.raw(key, [])
        if isinstance(v, dict):
            v = [v]
        if not isinstance(v, list):
            raise self.error(key, f"must be an array of tables ([[{self.sub(key)}]]), got {_kind(v)}")
        return [_Table(x, f"{self.sub(key)}[{i}]", self.source) for i, x in enumerate(v)]

    def done(self) -> None:
        unknown = [k for k in self.data if k not in self.known]
        if unknown:
            expected = ", ".join(sorted(set(self.known)))
            raise self.error(unknown[0], f"unknown field `{unknown[0]}` (expected one of: {expected})")


def _kind(v: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}.get(type(v), type(v).__name__)


def _number(
    err: Callable[[str, str], ScenarioError], key: str, v: Any, lo: float, hi: float, lo_inclusive: bool
) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise err(key, f"must be a number, got {_kind(v)}")
    v = float(v)
    if not math.isfinite(v):
        raise err(key, f"must be finite, got {v}")
    if math.isfinite(lo) and math.isfinite(hi) and not (lo < v <= hi or (v == lo and lo_inclusive)):
        raise err(key, f"must be in {'[' if lo_inclusive else '('}{lo:g}, {hi:g}], got {v:g}")
    if v < lo or (v == lo and not lo_inclusive):
        raise err(key, f"must be {'>=' if lo_inclusive else '>'} {lo:g}, got {v:g}")
    if v > hi:
        raise err(key, f"must be <= {hi:g}, got {v:g}")
    return v


def check_knob(err: Callable[[str, str], ScenarioError], key: str, v: Any) -> float | int:
    """Checks one value of a path property (a grid value, a sampled range end, an override)."""
    kind, lo, hi, lo_inclusive = KNOBS[key]
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise err(key, f"must be an integer, got {_kind(v)}")
        if v <= lo:
            raise err(key, f"must be > {lo:g}, got {v}")
        return v
    return _number(err, key, v, lo, hi, lo_inclusive)


# ---------------------------------------------------------------------------------------
# The scenario, as dataclasses


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
    flags of the client, extra flags of the edge. Gears are added as policies."""

    name: str
    proto: str
    load_args: list[str] = field(default_factory=list)
    edge_args: list[str] = field(default_factory=list)
    baseline: bool = False
    label: str = ""


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


# ---------------------------------------------------------------------------------------
# Reading


def load(path: str | Path) -> Scenario:
    """Reads and checks a scenario file; raises ScenarioError naming the file and field."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ScenarioError(source, "", f"cannot read: {e.strerror or e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, "", f"not valid TOML: {e}") from e
    return parse(data, path)


def parse(data: dict[str, Any], path: Path) -> Scenario:
    """Checks an already-parsed TOML document; `path` locates relative files and names errors."""
    t = _Table(data, "", str(path))
    base = path.parent
    s = Scenario(
        name=t.str("name", path.stem),
        source=path,
        description=t.str("description", ""),
        seed=t.int("seed", 1, lo=0, hi=2**63 - 1),
        repetitions=t.int("repetitions", 1, lo=1, hi=10_000),
        duration_s=t.float("duration_s", positive=True),
        timeout_s=t.float("timeout_s", None, positive=True),
        topology=t.str("topology", "single", choices=TOPOLOGIES),
    )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", s.name):
        raise t.error("name", f"must be letters, digits, `_`, `-`, `.` (it names folders), got {s.name!r}")
    if s.timeout_s is not None and s.timeout_s < s.duration_s:
        raise t.error("timeout_s", f"must be at least duration_s ({s.duration_s:g}), got {s.timeout_s:g}")

    wt = t.table("workload")
    if wt is None:
        raise t.error("workload", 'is required (e.g. [workload] name = "app")')
    s.workload = _workload(wt, base)

    s.paths = [_path(pt, base) for pt in t.tables("path")]
    pop = t.table("population")
    _check_topology(t, s, pop)
    if pop is not None:
        s.population = _population(pop)

    s.policies = _policies(t)
    g = t.table("grid")
    if g is not None:
        s.grid = _grid(g)
    st = t.table("sample")
    if st is not None:
        s.sample = _sample(st)
    t.done()
    _check_sweeps(t, s)
    return s


def _workload(t: _Table, base: Path) -> WorkloadSpec:
    name = t.str("name")
    if name not in BUILTIN_WORKLOADS:
        file = (base / name).resolve()
        if not file.is_file():
            raise t.error(
                "name",
                f"unknown workload {name!r}: built-in workloads are {', '.join(BUILTIN_WORKLOADS)} "
                f"(or give the path of a workload .toml file; {file} does not exist)",
            )
        name = str(file)
    w = WorkloadSpec(
        name=name,
        seed=t.int("seed", None, lo=0, hi=2**63 - 1),
        time_scale=t.float("time_scale", 1.0, positive=True),
    )
    t.done()
    return w


def _trace(t: _Table, key: str, base: Path) -> TraceRef | None:
    v = t.raw(key, None)
    if v is None:
        return None
    if isinstance(v, str):
        v = {"file": v}
    tt = _Table(v, t.sub(key), t.source)
    file = tt.str("file", None)
    preset = tt.str("preset", None)
    if (file is None) == (preset is None):
        raise tt.error(None, "give exactly one of `file` (a mahimahi trace) and `preset` (a generator)")
    if file is not None:
        p = (base / file).resolve()
        if not p.is_file():
            raise tt.error("file", f"no such trace file: {p}")
        tt.done()
        return TraceRef(file=p)
    if preset not in TRACE_PRESETS:
        raise tt.error("preset", f"unknown trace preset {preset!r}: presets are {', '.join(TRACE_PRESETS)}")
    ref = TraceRef(
        preset=preset,
        seed=tt.int("seed", -1, lo=0, hi=2**63 - 1),
        duration_s=tt.float("duration_s", None, positive=True),
    )
    tt.done()
    return ref


def _loss(t: _Table, key: str) -> dict[str, Any] | None:
    lt = t.table(key)
    if lt is None:
        return None
    model = lt.str("model", choices=tuple(LOSS_MODELS))
    out: dict[str, Any] = {"model": model}
    for k in LOSS_MODELS[model]:
        v = lt.float(k)
        if k == "mean_burst_packets":
            if v < 1:
                raise lt.error(k, f"must be >= 1 packet, got {v:g}")
        elif not 0.0 <= v <= 1.0:
            raise lt.error(k, f"must be a probability in [0, 1], got {v:g}")
        out[k] = v
    if model == "gilbert_elliott_mean" and not 0.0 < out["mean_loss_rate"] < 1.0:
        raise lt.error("mean_loss_rate", f"must be in (0, 1), got {out['mean_loss_rate']:g}")
    lt.done()
    return out


def _policer(t: _Table, key: str) -> dict[str, Any] | None:
    v = t.raw(key, None)
    if v is None:
        return None
    if v == "none":
        return {"action": "none"}
    pt = _Table(v, t.sub(key), t.source)
    action = pt.str("action", choices=tuple(POLICER_ACTIONS))
    out: dict[str, Any] = {"action": action}
    for k in POLICER_ACTIONS[action]:
        if k == "protocol":
            out[k] = pt.str(k, choices=("udp", "tcp"))
        elif k == "drop_rate":
            out[k] = pt.float(k)
            if not 0.0 <= out[k] <= 1.0:
                raise pt.error(k, f"must be a probability in [0, 1], got {out[k]:g}")
        else:
            out[k] = pt.int(k, lo=1)
    pt.done()
    return out


def _knob(t: _Table, key: str) -> Any:
    v = t.raw(key, None)
    return None if v is None else check_knob(t.error, key, v)


def _path(t: _Table, base: Path) -> PathSpec:
    p = PathSpec(
        name=t.str("name", None),
        bandwidth_mbps=_knob(t, "bandwidth_mbps"),
        uplink_bandwidth_mbps=_knob(t, "uplink_bandwidth_mbps"),
        trace=_trace(t, "trace", base),
        rtt_ms=_knob(t, "rtt_ms"),
        jitter_ms=_knob(t, "jitter_ms"),
        jitter_ratio=_knob(t, "jitter_ratio"),
        jitter_max_ms=t.float("jitter_max_ms", None, positive=True),
        loss_rate=_knob(t, "loss_rate"),
        loss=_loss(t, "loss"),
        buffer_bdp=_knob(t, "buffer_bdp"),
        buffer_packets=_knob(t, "buffer_packets"),
        queue_discipline=t.str("queue_discipline", None, choices=QUEUE_DISCIPLINES),
        policer=_policer(t, "policer"),
    )
    if p.name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", p.name):
        raise t.error("name", f"must be 1-32 letters, digits, `_`, `-`, `.`; got {p.name!r}")
    if p.bandwidth_mbps is not None and p.trace is not None:
        raise t.error("trace", "give only one of bandwidth_mbps and trace")
    if p.jitter_ms is not None and p.jitter_ratio is not None:
        raise t.error("jitter_ratio", "give only one of jitter_ms and jitter_ratio")
    if p.loss_rate is not None and p.loss is not None:
        raise t.error("loss", "give only one of loss_rate and loss")
    for st in t.tables("schedule"):
        c = ScheduledChange(
            at_s=st.float("at_s"),
            bandwidth_mbps=_knob(st, "bandwidth_mbps"),
            uplink_bandwidth_mbps=_knob(st, "uplink_bandwidth_mbps"),
            trace=_trace(st, "trace", base),
            rtt_ms=_knob(st, "rtt_ms"),
            jitter_ms=_knob(st, "jitter_ms"),
            loss_rate=_knob(st, "loss_rate"),
            loss=_loss(st, "loss"),
            policer=_policer(st, "policer"),
        )
        if c.at_s < 0:
            raise st.error("at_s", f"must be >= 0 seconds, got {c.at_s:g}")
        if c.bandwidth_mbps is not None and c.trace is not None:
            raise st.error("trace", "give only one of bandwidth_mbps and trace")
        if c.loss_rate is not None and c.loss is not None:
            raise st.error("loss", "give only one of loss_rate and loss")
        if p.schedule and c.at_s < p.schedule[-1].at_s:
            raise st.error("at_s", f"changes must be in time order; {c.at_s:g} s comes after {p.schedule[-1].at_s:g} s")
        st.done()
        p.schedule.append(c)
    for direction in ("uplink", "downlink"):
        raw = t.table(direction)
        if raw is not None:
            for k in raw.data:
                if k not in LINK_CONFIG_KEYS:
                    raise raw.error(k, f"unknown field `{k}` (LinkConfig fields: {', '.join(LINK_CONFIG_KEYS)})")
            setattr(p, direction, dict(raw.data))
    t.done()
    return p


def _population(t: _Table) -> PopulationSpec:
    pop = PopulationSpec(
        prefixes=t.int("prefixes", lo=1, hi=16384), hosts_per_prefix=t.int("hosts_per_prefix", 1, lo=1, hi=254)
    )
    for pt in t.tables("prefix"):
        index = pt.int("index", lo=0, hi=pop.prefixes - 1)
        if index in pop.overrides:
            raise pt.error("index", f"prefix {index} is overridden twice")
        over = {k: check_knob(pt.error, k, pt.raw(k)) for k in list(pt.data) if k in KNOBS}
        pt.known.extend(KNOBS)
        pt.done()
        pop.overrides[index] = over
    t.done()
    return pop


def _check_topology(t: _Table, s: Scenario, pop: _Table | None) -> None:
    n = len(s.paths)
    if n == 0:
        raise t.error("path", "at least one [[path]] is required")
    if s.topology == "single" and n != 1:
        raise t.error("path", f'topology "single" takes exactly one [[path]], got {n}')
    if s.topology == "multipath" and n > 256:
        raise t.error("path", f'topology "multipath" takes 1 to 256 [[path]], got {n}')
    if s.topology == "population":
        if pop is None:
            raise t.error("population", 'topology "population" needs a [population] table')
        if n != 1:
            raise t.error("path", f'topology "population" takes one [[path]] (every prefix\'s link), got {n}')
    elif pop is not None:
        raise t.error("population", f'only for topology "population" (this scenario is {s.topology!r})')


def _policies(t: _Table) -> list[Policy]:
    v = t.raw("policies", ["tcp", "h1", "quic"])
    if isinstance(v, list):
        for i, name in enumerate(v):
            if name not in BUILTIN_POLICIES:
                raise ScenarioError(
                    t.source,
                    f"policies[{i}]",
                    f"{name!r} is not a built-in policy ({', '.join(BUILTIN_POLICIES)}); "
                    f'define it as a table: [policies.{name}] proto = "quic" ...',
                )
        v = {name: {} for name in v}
    pt = _Table(v, "policies", t.source)
    if not v:
        raise pt.error(None, "name at least one policy")
    out = []
    for name in list(v):
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", name):
            raise pt.error(name, "policy names are 1-32 lowercase letters, digits, `_`, `-` (they name folders)")
        d = _Table(pt.raw(name), pt.sub(name), t.source)
        builtin = BUILTIN_POLICIES.get(name)
        proto = d.str("proto", builtin[0] if builtin else _MISSING, choices=PROTOS)
        load_args = d.strs("load_args", [])
        edge_args = d.strs("edge_args", [])
        for key, args, reserved in (
            ("load_args", load_args, RESERVED_LOAD_FLAGS),
            ("edge_args", edge_args, RESERVED_EDGE_FLAGS),
        ):
            for a in args:
                if a.split("=", 1)[0] in reserved:
                    raise d.error(key, f"{a.split('=', 1)[0]} is set by the runner (the same for every policy)")
        plain = builtin is not None and proto == builtin[0] and not load_args and not edge_args
        out.append(
            Policy(
                name=name,
                proto=proto,
                load_args=load_args,
                edge_args=edge_args,
                baseline=d.bool("baseline", plain),
                label=d.str("label", builtin[1] if plain and builtin else name),
            )
        )
        d.done()
    pt.done()
    return out


def _item_error(t: _Table, key: str, i: int) -> Callable[[str, str], ScenarioError]:
    """An error maker naming element `i` of the list `key`, e.g. `grid.loss_rate[1]`."""
    return lambda _key, message: t.error(f"{key}[{i}]", message)


def _grid(t: _Table) -> dict[str, list[float | int]]:
    out: dict[str, list[float | int]] = {}
    for key in list(t.data):
        if key not in KNOBS:
            raise t.error(key, f"unknown field `{key}` (a grid sweeps: {', '.join(KNOBS)})")
        values = t.raw(key)
        if not isinstance(values, list) or not values:
            raise t.error(key, "must be a non-empty list of values")
        checked = [check_knob(_item_error(t, key, i), key, x) for i, x in enumerate(values)]
        if len(set(checked)) != len(checked):
            raise t.error(key, "lists a value twice")
        out[key] = checked
    t.done()
    return out


def _sample(t: _Table) -> SampleSpec:
    method = t.str("method", "wsp", choices=("wsp",))
    n = t.int("n", lo=1, hi=100_000)
    seed = t.int("seed", 1, lo=0, hi=2**63 - 1)
    candidates = t.int("candidates", None, lo=2, hi=1_000_000)
    rt = t.table("ranges")
    if rt is None or not rt.data:
        raise t.error("ranges", "is required: e.g. [sample.ranges] rtt_ms = [10, 200]")
    ranges: dict[str, tuple[float, float]] = {}
    for key in list(rt.data):
        if key not in KNOBS:
            raise rt.error(key, f"unknown field `{key}` (a sample ranges over: {', '.join(KNOBS)})")
        v = rt.raw(key)
        if not isinstance(v, list) or len(v) != 2:
            raise rt.error(key, "must be [min, max]")
        lo, hi = (check_knob(_item_error(rt, key, i), key, x) for i, x in enumerate(v))
        if hi < lo:
            raise rt.error(key, f"min {lo:g} is above max {hi:g}")
        ranges[key] = (float(lo), float(hi))
    rt.done()
    log_scale = t.strs("log_scale", [])
    for i, k in enumerate(log_scale):
        if k not in ranges:
            raise t.error(f"log_scale[{i}]", f"{k!r} has no range in [sample.ranges]")
        if ranges[k][0] <= 0:
            raise t.error(f"log_scale[{i}]", f"{k} ranges from {ranges[k][0]:g}: a log scale needs values > 0")
    if candidates is not None and candidates < n:
        raise t.error("candidates", f"must be at least n ({n}), got {candidates}")
    t.done()
    return SampleSpec(method=method, n=n, seed=seed, ranges=ranges, log_scale=log_scale, candidates=candidates)


def _check_sweeps(t: _Table, s: Scenario) -> None:
    swept = list(s.grid) + (list(s.sample.ranges) if s.sample else [])
    where = {k: "grid" for k in s.grid} | {k: "sample.ranges" for k in (s.sample.ranges if s.sample else {})}
    for k in set(s.grid) & set(s.sample.ranges if s.sample else {}):
        raise ScenarioError(t.source, f"sample.ranges.{k}", "is also swept by [grid]; sweep each property once")
    for i, p in enumerate(s.paths):
        if p.bandwidth_mbps is None and p.trace is None and "bandwidth_mbps" not in swept:
            raise ScenarioError(
                t.source, f"path[{i}]", "needs a rate: give bandwidth_mbps or trace (or sweep bandwidth_mbps)"
            )
        for k in ("buffer_bdp", "jitter_ratio"):
            if getattr(p, k) is not None and p.rtt_ms is None and "rtt_ms" not in swept:
                raise ScenarioError(t.source, f"path[{i}].{k}", "needs rtt_ms to scale it by")
    for k in swept:
        for i, p in enumerate(s.paths):
            if k in ("bandwidth_mbps", "uplink_bandwidth_mbps") and p.trace is not None:
                raise ScenarioError(
                    t.source,
                    f"{where[k]}.{k}",
                    f"path[{i}] takes its rate from a trace; remove the trace or this sweep",
                )
            if k in ("jitter_ms", "jitter_ratio") and (p.jitter_ms is not None or p.jitter_ratio is not None):
                other = "jitter_ms" if p.jitter_ms is not None else "jitter_ratio"
                if other != k:
                    raise ScenarioError(t.source, f"{where[k]}.{k}", f"path[{i}] sets {other}; sweep that instead")
            if k in ("buffer_bdp", "jitter_ratio") and p.rtt_ms is None and "rtt_ms" not in swept:
                raise ScenarioError(t.source, f"{where[k]}.{k}", f"path[{i}] has no rtt_ms to scale it by")
            if k == "loss_rate" and p.loss is not None:
                raise ScenarioError(
                    t.source, f"{where[k]}.{k}", f"path[{i}] gives a `loss` table; remove it to sweep loss_rate"
                )


# ---------------------------------------------------------------------------------------
# Conditions and seeds


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


# ---------------------------------------------------------------------------------------
# Compiling to EMU.toml

TraceResolver = Callable[[TraceRef, int], Path]
"""(trace, seed) -> a mahimahi file: the runner generates presets with `gearbox trace gen`."""


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
        "jitter_ms": _jitter(p),
        "loss_rate": p.loss_rate if p.loss_rate is not None else (0.0 if p.loss is None else None),
        "buffer_bdp": p.buffer_bdp,
    }


def _jitter(p: PathSpec) -> float | None:
    """RTT jitter half-width in ms (Floo Table 4 gives it as a share of the RTT, capped)."""
    if p.jitter_ms is not None:
        return p.jitter_ms
    if p.jitter_ratio is not None and p.rtt_ms is not None:
        j = p.jitter_ratio * p.rtt_ms
        return min(j, p.jitter_max_ms) if p.jitter_max_ms is not None else j
    return None


def _bps(mbps: float) -> int:
    return max(1, round(mbps * 1e6))


def compile_path(
    p: PathSpec, trace_file: Callable[[TraceRef, tuple[object, ...]], Path], where: tuple[object, ...]
) -> dict[str, dict[str, Any]]:
    """Both directions of a path as `LinkConfig` tables: {"uplink": ..., "downlink": ...}."""
    jitter = _jitter(p)
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
