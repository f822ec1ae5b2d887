"""Reading a scenario file: `load` (a file) and `parse` (a TOML document) into a checked
`Scenario`; every error names the file and the field (reader.py)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gearbox.lab.scenario.model import (
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
)
from gearbox.lab.scenario.reader import MISSING, ScenarioError, Table, check_knob, kind_of
from gearbox.lab.scenario.vocabulary import (
    BUILTIN_POLICIES,
    BUILTIN_WORKLOADS,
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


def load(path: str | Path) -> Scenario:
    """Reads and checks a scenario file; raises ScenarioError naming the file and field."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(source, "", f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ScenarioError(source, "", f"not UTF-8 text (byte {e.start}): TOML files are UTF-8") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, "", f"not valid TOML: {e}") from e
    return parse(data, path)


def parse(data: dict[str, Any], path: Path) -> Scenario:
    """Checks an already-parsed TOML document; `path` locates relative files and names errors."""
    t = Table(data, "", str(path))
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

    s.policies = _policies(t, base)
    g = t.table("grid")
    if g is not None:
        s.grid = _grid(g)
    st = t.table("sample")
    if st is not None:
        s.sample = _sample(st)
    ct = t.table("control")
    if ct is not None:
        s.control = _control(ct, base, s)
    t.done()
    _check_sweeps(t, s)
    return s


# The registry's gears a lab run's edge and client poll (docs/control.md).
CONTROL_GEARS = ("tcpwise", "floo", "wisetrans")


def _control(t: Table, base: Path, s: Scenario) -> ControlSpec:
    c = ControlSpec(poll_s=t.float("poll_s", 1.0, positive=True))
    for pt in t.tables("push"):
        gear = pt.str("gear", choices=CONTROL_GEARS)
        d = _resolved(pt, "dir", base, pt.str("dir"))
        if not d.is_dir():
            raise pt.error("dir", f"{d}: no such folder (a policy folder: model files with their sidecars)")
        at_s = pt.float("at_s", 0.0)
        if not 0.0 <= at_s < s.duration_s:
            raise pt.error("at_s", f"must be in [0, duration_s = {s.duration_s:g}), got {at_s:g}")
        c.pushes.append(PolicyPush(gear=gear, dir=d, at_s=at_s))
        pt.done()
    c.jobs = _control_jobs(t, base)
    t.done()
    return c


def _control_jobs(t: Table, base: Path) -> dict[str, dict[str, Any]]:
    """`[control.jobs.NAME]`, checked as the control plane checks its `[jobs]` (same keys and
    messages); `{scenario}` in a command becomes the scenario's folder, so a learner's config
    file can sit beside the scenario."""
    from gearbox.control.config import ConfigError
    from gearbox.control.config import parse as parse_control

    jobs = t.raw("jobs", {})
    if not isinstance(jobs, dict):
        raise t.error("jobs", f"must be a table of [control.jobs.NAME] tables, got {kind_of(jobs)}")
    out: dict[str, dict[str, Any]] = {}
    for name, j in jobs.items():
        if isinstance(j, dict) and isinstance(j.get("command"), list):
            folder = str(base.resolve())
            j = {**j, "command": [c.replace("{scenario}", folder) if isinstance(c, str) else c for c in j["command"]]}
        out[name] = j
    try:
        parse_control({"jobs": out}, None)
    except ConfigError as e:
        # "<config>: [jobs.NAME].key: ..." -> this file's control.jobs.NAME.key
        msg = str(e).removeprefix("<config>: ")
        where, _, reason = msg.partition(": ")
        raise t.error(where.strip("[").replace("]", ""), reason or msg) from None
    return out


def _resolved(t: Table, key: str, base: Path, value: str) -> Path:
    """`value`, a path relative to the scenario's folder, made absolute; a value no file
    system takes (a NUL byte, a name too long) is refused naming the field."""
    try:
        path = (base / value).resolve()
        path.is_file()  # the checks below stat it; fail here, with the field, if it cannot be
    except (ValueError, OSError) as e:
        raise t.error(key, f"{value!r} is not a usable path: {e}") from e
    return path


def _workload(t: Table, base: Path) -> WorkloadSpec:
    name = t.str("name")
    if name not in BUILTIN_WORKLOADS:
        file = _resolved(t, "name", base, name)
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


def _trace(t: Table, key: str, base: Path) -> TraceRef | None:
    v = t.raw(key, None)
    if v is None:
        return None
    if isinstance(v, str):
        v = {"file": v}
    tt = Table(v, t.sub(key), t.source)
    file = tt.str("file", None)
    preset = tt.str("preset", None)
    if (file is None) == (preset is None):
        raise tt.error(None, "give exactly one of `file` (a mahimahi trace) and `preset` (a generator)")
    if file is not None:
        p = _resolved(tt, "file", base, file)
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


def _loss(t: Table, key: str) -> dict[str, Any] | None:
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


def _policer(t: Table, key: str) -> dict[str, Any] | None:
    v = t.raw(key, None)
    if v is None:
        return None
    if v == "none":
        return {"action": "none"}
    pt = Table(v, t.sub(key), t.source)
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


def _knob(t: Table, key: str) -> Any:
    v = t.raw(key, None)
    return None if v is None else check_knob(t.error, key, v)


def _path(t: Table, base: Path) -> PathSpec:
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


def _population(t: Table) -> PopulationSpec:
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


def _check_topology(t: Table, s: Scenario, pop: Table | None) -> None:
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


def _policies(t: Table, base: Path) -> list[Policy]:
    v = t.raw("policies", ["tcp", "h1", "quic"])
    if isinstance(v, list):
        for i, name in enumerate(v):
            if not isinstance(name, str) or name not in BUILTIN_POLICIES:
                raise ScenarioError(
                    t.source,
                    f"policies[{i}]",
                    f"{name!r} is not a built-in policy ({', '.join(BUILTIN_POLICIES)}); "
                    f'define it as a table: [policies.{name}] proto = "quic" ...',
                )
        v = {name: {} for name in v}
    pt = Table(v, "policies", t.source)
    if not v:
        raise pt.error(None, "name at least one policy")
    out = []
    for name in list(v):
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", name):
            raise pt.error(name, "policy names are 1-32 lowercase letters, digits, `_`, `-` (they name folders)")
        d = Table(pt.raw(name), pt.sub(name), t.source)
        builtin = BUILTIN_POLICIES.get(name)
        proto = d.str("proto", builtin[0] if builtin else MISSING, choices=PROTOS)
        load_args = d.strs("load_args", [])
        edge_args = d.strs("edge_args", [])
        for key, args, reserved in (
            ("load_args", load_args, RESERVED_LOAD_FLAGS),
            ("edge_args", edge_args, RESERVED_EDGE_FLAGS),
        ):
            for a in args:
                if a.split("=", 1)[0] in reserved:
                    raise d.error(key, f"{a.split('=', 1)[0]} is set by the runner (the same for every policy)")
        load_args, paths = _resolve_paths(d, "load_args", load_args, base)
        plain = builtin is not None and proto == builtin[0] and not load_args and not edge_args
        out.append(
            Policy(
                name=name,
                proto=proto,
                load_args=load_args,
                edge_args=edge_args,
                baseline=d.bool("baseline", plain),
                label=d.str("label", builtin[1] if plain and builtin else name),
                model_dir=paths.get("--model-dir"),
                link_seed_offset=d.int("link_seed_offset", 0, lo=0, hi=2**31 - 1),
            )
        )
        d.done()
    pt.done()
    return out


def _resolve_paths(d: Table, key: str, args: list[str], base: Path) -> tuple[list[str], dict[str, str]]:
    """`args` with the value of each path flag (`--model-dir DIR`, `--gear-config FILE`,
    either as two words or `--flag=value`) made absolute against `base`, the scenario
    file's folder, as workload and trace files are; and those values by flag. A gear
    settings file that does not exist is refused here (it ships with the scenario); a
    model folder is checked by the runner, since training makes it."""
    out: list[str] = []
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag not in PATH_LOAD_FLAGS:
            out.append(args[i])
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise d.error(key, f"{flag} needs a value (a path relative to {base})")
            value = args[i + 1]
            i += 1
        i += 1
        path = _resolved(d, key, base, value)
        if flag == "--gear-config" and not path.is_file():
            raise d.error(key, f"{flag} {value}: no such file {path} (paths in a scenario are relative to its folder)")
        found[flag] = str(path)
        out += [flag, str(path)]
    return out, found


def _item_error(t: Table, key: str, i: int) -> Callable[[str, str], ScenarioError]:
    """An error maker naming element `i` of the list `key`, e.g. `grid.loss_rate[1]`."""
    return lambda _key, message: t.error(f"{key}[{i}]", message)


def _grid(t: Table) -> dict[str, list[float | int]]:
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


def _sample(t: Table) -> SampleSpec:
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


def _check_sweeps(t: Table, s: Scenario) -> None:
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
