"""The experiment runner: every policy of a scenario on identical emulated conditions,
then one results table and the per-policy RCT statistics with reductions against the
baselines (docs/architecture.md: a result is a ratio against baselines measured in
the same run).

A *run* is one (condition, policy, repetition). All policies of a condition and
repetition get the same link config, the same `gearbox emu --seed` (so the same random
losses and jitter draws for the same packet sequence) and the same workload seed (so the
same requests at the same times); only the policy's flags differ. Runs are ordered
repetition, condition, policy, so that the policies of one condition run close together
in time and any drift of the machine touches them alike.

Each run is one `gearbox emu` process (docs/emu.md) with `gearbox edge` in the server
namespace and `gearbox load` in the client namespace, each writing its telemetry
(docs/telemetry.md) into the run's folder. Collecting flattens both ends' records into
one table (`requests.parquet`, and the `requests` table of `results.duckdb`), tagged with
the run, condition and policy. The shell commands go through `sh -c` in the namespaces,
so every path in them is quoted (`shlex.quote`) and only `$GEARBOX_*` is left to the shell.

`--jobs N` runs N emulations at once. Each has its own namespaces, so they do not share
links, but they share CPUs: on a small machine, parallel runs measure the machine as
much as the network. Keep 1 for numbers you report.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gearbox.lab import scenario as sc

REPO_ROOT = Path(__file__).resolve().parents[3]
PORT = 4433
STATISTICS = ("mean", "median", "p90", "p99")
MAX_PRINTED_CONDITIONS = 24

# Types of the record fields (docs/telemetry.md); fields not listed are inferred, so a
# field added to the records later still lands in the table.
RECORD_TYPES: dict[str, str] = {
    "side": "string",
    "schema": "int64",
    "time_unix_ms": "float64",
    "conn_id": "int64",
    "protocol": "string",
    "method": "string",
    "status": "int64",
    "bytes": "int64",
    "error": "string",
    "client_addr": "string",
    "path": "string",
    "server_time_ms": "float64",
    "server_time_source": "string",
    "server_addr": "string",
    "local_addr": "string",
    "url": "string",
    "rct_ms": "float64",
    "ttfb_ms": "float64",
    "new_connection": "bool",
    "handshake_ms": "float64",
    "decision": "string",
    "click": "int64",
    "transport_cc": "string",
    "transport_rtt_ms": "float64",
    "transport_min_rtt_ms": "float64",
    "transport_rttvar_ms": "float64",
    "transport_cwnd_bytes": "int64",
    "transport_sent_packets": "int64",
    "transport_lost_packets": "int64",
    "transport_congestion_events": "int64",
    "transport_unacked_bytes": "int64",
    "transport_delivery_rate_bps": "int64",
}
NESTED_FIELDS = ("transport",)
RUN_COLUMNS: dict[str, str] = {
    "run_id": "string",
    "condition_id": "string",
    "condition": "string",
    "policy": "string",
    "proto": "string",
    "repetition": "int64",
    "link_seed": "int64",
    "workload_seed": "int64",
}


class LabError(RuntimeError):
    """A problem the user can fix (missing root, binary, package); printed without a traceback."""


# ---------------------------------------------------------------------------------------
# Finding what runs


def find_gearbox() -> Path:
    """The `gearbox` binary: $GEARBOX_BIN, else `gearbox` on PATH, else the repository's
    target/release, else target/debug."""
    env = os.environ.get("GEARBOX_BIN")
    if env:
        p = Path(env)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise LabError(f"GEARBOX_BIN={env} is not an executable file")
        return p
    on_path = shutil.which("gearbox")
    if on_path:
        return Path(on_path)
    for profile in ("release", "debug"):
        p = REPO_ROOT / "target" / profile / "gearbox"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise LabError(
        "no `gearbox` binary found (looked at $GEARBOX_BIN, PATH, target/release and target/debug): "
        "build it with `cargo build --release -p gearbox-cli`, or set GEARBOX_BIN"
    )


def check_emulator() -> None:
    """Emulation needs root, /dev/net/tun and `ip` (docs/emu.md); say which is missing."""
    without = "`gearbox sim` runs the same link model in virtual time without root."
    if os.geteuid() != 0:
        raise LabError(
            "gearbox lab run emulates paths between network namespaces, which needs root: "
            f"run it as root (e.g. with sudo). {without}"
        )
    if not Path("/dev/net/tun").exists():
        raise LabError(f"gearbox lab run needs /dev/net/tun (the TUN driver), and this machine has none. {without}")
    if shutil.which("ip") is None and not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists():
        raise LabError("gearbox lab run needs the `ip` command (Debian package iproute2)")


# ---------------------------------------------------------------------------------------
# Planning


@dataclass
class Run:
    """One (condition, policy, repetition) and the seeds it runs with."""

    run_id: str
    condition: sc.Condition
    policy: sc.Policy
    repetition: int
    link_seed: int
    workload_seed: int
    dir: Path


@dataclass
class RunResult:
    """What one run did. `status`: ok, timeout (the time limit stopped the client), failed."""

    run_id: str
    condition_id: str
    policy: str
    proto: str
    repetition: int
    link_seed: int
    workload_seed: int
    status: str
    exit_code: int | None
    started_unix_ms: float
    wall_s: float
    client_records: int = 0
    edge_records: int = 0
    message: str = ""
    dir: str = ""


def plan(s: sc.Scenario, out: Path) -> tuple[list[sc.Condition], list[Run]]:
    """The conditions and the runs, in run order (repetition, condition, policy)."""
    conds = sc.conditions(s)
    runs = []
    for rep in range(s.repetitions):
        for c in conds:
            for p in s.policies:
                run_id = f"{c.id}-{p.name}-r{rep}"
                runs.append(
                    Run(
                        run_id=run_id,
                        condition=c,
                        policy=p,
                        repetition=rep,
                        link_seed=sc.link_seed(s, c, rep),
                        workload_seed=sc.workload_seed(s, rep),
                        dir=out / "runs" / run_id,
                    )
                )
    return conds, runs


class TraceFiles:
    """Resolves a scenario's traces to files: user files as they are, presets generated
    once per (preset, seed, length) into OUT/traces with `gearbox trace gen`."""

    def __init__(self, out: Path, default_duration_s: float, gearbox: Path | None) -> None:
        self.dir = out / "traces"
        self.default_duration_s = default_duration_s
        self.gearbox = gearbox  # None: only name the files (planning, dry runs)

    def __call__(self, ref: sc.TraceRef, seed: int) -> Path:
        if ref.file is not None:
            return ref.file
        duration = ref.duration_s or self.default_duration_s
        path = self.dir / f"{ref.preset}-seed{seed}-{duration:g}s.trace"
        if self.gearbox is not None and not path.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            cmd = [str(self.gearbox), "trace", "gen", "--preset", str(ref.preset), "--seed", str(seed)]
            cmd += ["--duration-s", f"{duration:g}", "--out", str(path)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise LabError(
                    f"generating trace {ref.preset} (seed {seed}) failed: {r.stderr.strip() or r.stdout.strip()}"
                )
        return path


def prepare(s: sc.Scenario, out: Path, gearbox: Path | None) -> tuple[list[sc.Condition], list[Run], dict[str, Any]]:
    """Plans the runs and writes what they need: the scenario copy, traces, one EMU.toml
    per condition, plan.json and conditions.json. `gearbox` None: no traces generated."""
    out = out.resolve()  # the paths go into EMU.toml files and shell commands run elsewhere
    conds, runs = plan(s, out)
    out.mkdir(parents=True, exist_ok=True)
    if s.source.resolve() != (out / "scenario.toml").resolve():
        shutil.copyfile(s.source, out / "scenario.toml")
    traces = TraceFiles(out, math.ceil(s.run_timeout_s), gearbox)
    emu: dict[str, Any] = {}
    cond_rows = []
    for c in conds:
        emu[c.id] = sc.emu_config(s, c, traces)
        (out / "conditions").mkdir(exist_ok=True)
        (out / "conditions" / f"{c.id}.emu.toml").write_text(sc.dumps_toml(emu[c.id]))
        cond_rows.append(
            {
                "condition_id": c.id,
                "index": c.index,
                "label": c.label,
                "params": c.params,
                "values": sc.condition_values(s, c),
                "emu": emu[c.id],
            }
        )
    (out / "conditions.json").write_text(json.dumps(cond_rows, indent=1))
    plan_doc = {
        "scenario": s.name,
        "description": s.description,
        "source": str(s.source),
        "topology": s.topology,
        "seed": s.seed,
        "repetitions": s.repetitions,
        "duration_s": s.duration_s,
        "timeout_s": s.run_timeout_s,
        "workload": asdict(s.workload),
        "swept": list(s.grid) + (list(s.sample.ranges) if s.sample else []),
        "phases": sc.phases(s),
        "policies": [asdict(p) for p in s.policies],
        "runs": [
            {
                "run_id": r.run_id,
                "condition_id": r.condition.id,
                "policy": r.policy.name,
                "repetition": r.repetition,
                "link_seed": r.link_seed,
                "workload_seed": r.workload_seed,
            }
            for r in runs
        ],
    }
    (out / "plan.json").write_text(json.dumps(plan_doc, indent=1))
    return conds, runs, emu


# ---------------------------------------------------------------------------------------
# Running


def _commands(s: sc.Scenario, run: Run, gearbox: Path, cert: Path, key: Path) -> tuple[str, str]:
    """The --server and --client shell commands of one run."""
    q = shlex.quote
    gb = q(str(gearbox))
    d = run.dir
    server = (
        f"exec {gb} edge --listen $GEARBOX_SERVER_ADDR:{PORT} --cert {q(str(cert))} --key {q(str(key))} "
        f"--telemetry {q(str(d / 'edge.jsonl'))}"
    )
    if run.policy.edge_args:
        server += " " + " ".join(q(a) for a in run.policy.edge_args)
    client = (
        f"{gb} load --workload {q(s.workload.name)} --target https://$GEARBOX_SERVER_ADDR:{PORT} "
        f"--proto {q(run.policy.proto)} --seed {run.workload_seed} --duration-s {s.duration_s:g} "
        f"--time-scale {s.workload.time_scale:g} --insecure --telemetry {q(str(d / 'client.jsonl'))} --json"
    )
    if s.topology != "single":
        # One --local-addr per client address: a request's path is its client index
        # modulo their number (docs/client.md), so multipath and population spread.
        client += ' $(for a in $(echo "$GEARBOX_CLIENT_ADDRS" | tr , " "); do printf -- "--local-addr %s " "$a"; done)'
    if run.policy.load_args:
        client += " " + " ".join(q(a) for a in run.policy.load_args)
    client += f" > {q(str(d / 'load.json'))}"
    return server, client


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def run_one(s: sc.Scenario, run: Run, emu: dict[str, Any], gearbox: Path, cert: Path, key: Path) -> RunResult:
    """Runs one emulation and says how it went; never raises for a failed run."""
    run.dir.mkdir(parents=True, exist_ok=True)
    for name in ("edge.jsonl", "client.jsonl", "load.json"):
        (run.dir / name).unlink(missing_ok=True)  # gearbox appends; a rerun starts clean
    config = run.dir / "emu.toml"
    config.write_text(sc.dumps_toml(emu))
    server, client = _commands(s, run, gearbox, cert, key)
    limit = s.run_timeout_s
    cmd = [str(gearbox), "emu", "--config", str(config), "--server", server, "--client", client]
    cmd += ["--seed", str(run.link_seed), "--duration-s", f"{limit:g}", "--ready-ports", f"{PORT}/tcp,{PORT}/udp"]
    (run.dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    started = time.time()
    with (run.dir / "emu.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            code: int | None = proc.wait(timeout=limit + 60)
        except subprocess.TimeoutExpired:
            # gearbox emu enforces its own limit; this is the backstop if it hangs.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()  # its watchdog removes the namespaces
                proc.wait()
            code = None
    wall = time.time() - started
    status, message = "ok", ""
    if code == 124:
        status, message = "timeout", f"the client was still running after {limit:g} s (timeout_s) and was stopped"
    elif code != 0:
        status = "failed"
        tail = (run.dir / "emu.log").read_text(errors="replace").strip().splitlines()[-3:]
        message = f"gearbox emu exited with {code}: " + " | ".join(tail)
    return RunResult(
        run_id=run.run_id,
        condition_id=run.condition.id,
        policy=run.policy.name,
        proto=run.policy.proto,
        repetition=run.repetition,
        link_seed=run.link_seed,
        workload_seed=run.workload_seed,
        status=status,
        exit_code=code,
        started_unix_ms=started * 1000.0,
        wall_s=wall,
        client_records=_count_lines(run.dir / "client.jsonl"),
        edge_records=_count_lines(run.dir / "edge.jsonl"),
        message=message,
        dir=str(run.dir),
    )


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)


@dataclass
class Outcome:
    """What `run_scenario` did: the per-run results and the summary of the table."""

    out: Path
    results: list[RunResult]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.status != "ok"]


def run_scenario(
    s: sc.Scenario,
    out: Path,
    jobs: int = 1,
    gearbox: Path | None = None,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> Outcome:
    """Runs every run of the scenario, then collects and summarizes (see module doc)."""
    if jobs < 1:
        raise LabError(f"--jobs must be >= 1, got {jobs}")
    gearbox = (gearbox or find_gearbox()).resolve()
    out = out.resolve()
    check_emulator()
    if (out / "runs.json").exists() and not force:
        raise LabError(
            f"{out} already holds results of a lab run: pass --force to replace them, or choose another --out"
        )
    if "/target/debug/" in str(gearbox):
        log(
            f"gearbox lab: using the debug build {gearbox}; its edge and client are slow, so RCTs are inflated: "
            "`cargo build --release -p gearbox-cli` for numbers to report"
        )
    if out.exists() and force:
        for name in (
            "runs",
            "conditions",
            "runs.json",
            "requests.parquet",
            "results.duckdb",
            "summary.json",
            "report.html",
        ):
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    conds, runs, emu = prepare(s, out, gearbox)
    cert, key = out / "cert.pem", out / "key.pem"
    if not (cert.exists() and key.exists()):
        r = subprocess.run(
            [str(gearbox), "cert", "--name", "10.0.0.1,localhost", "--cert", str(cert), "--key", str(key)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise LabError(f"gearbox cert failed: {r.stderr.strip()}")
    log(
        f"gearbox lab: {s.name}: {len(conds)} condition(s) x {len(s.policies)} policies x {s.repetitions} "
        f"repetition(s) = {len(runs)} runs of ~{s.duration_s:g} s, into {out}"
    )
    results: list[RunResult] = []
    bar = _progress(len(runs), progress)
    try:
        if jobs == 1:
            for run in runs:
                if bar is not None:
                    bar.set_postfix_str(f"{run.condition.id} {run.policy.name} r{run.repetition}")
                res = run_one(s, run, emu[run.condition.id], gearbox, cert, key)
                results.append(res)
                _note(res, bar, log)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(run_one, s, run, emu[run.condition.id], gearbox, cert, key) for run in runs]
                for f in as_completed(futures):
                    res = f.result()
                    results.append(res)
                    _note(res, bar, log)
            order = {r.run_id: i for i, r in enumerate(runs)}
            results.sort(key=lambda r: order[r.run_id])
    finally:
        if bar is not None:
            bar.close()
        if results:
            (out / "runs.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = collect(out)
    summary = summarize(out, table)
    return Outcome(out=out, results=results, summary=summary)


def _note(res: RunResult, bar: Any, log: Callable[[str], None]) -> None:
    if bar is not None:
        bar.update(1)
    if res.status != "ok":
        msg = f"gearbox lab: run {res.run_id}: {res.status}: {res.message} (logs in {res.dir})"
        if bar is not None:
            bar.write(msg, file=sys.stderr)
        else:
            log(msg)


# ---------------------------------------------------------------------------------------
# Collecting: one table of both ends' records


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"transport": {"cc": "bbr"}}` -> `{"transport_cc": "bbr"}` (any depth)."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if v is None and f"{prefix}{k}" in NESTED_FIELDS:
            continue  # a null `transport`: its transport_* columns stay null
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a telemetry file; a torn last line (a killed writer) is skipped."""
    records = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def rows_of_run(run: dict[str, Any], cond: dict[str, Any], policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The table rows of one run: its tags, its condition's values, then each record flattened."""
    base: dict[str, Any] = {
        "run_id": run["run_id"],
        "condition_id": run["condition_id"],
        "condition": cond["label"],
        "policy": run["policy"],
        "proto": policy["proto"],
        "repetition": run["repetition"],
        "link_seed": run["link_seed"],
        "workload_seed": run["workload_seed"],
    }
    for k, v in {**cond["values"], **cond["params"]}.items():
        base[f"cond_{k}"] = v
    rows = []
    run_dir = Path(run["dir"])
    for name in ("client.jsonl", "edge.jsonl"):
        for rec in read_records(run_dir / name):
            row = dict(base)
            t = rec.get("time_unix_ms")
            # Seconds since the emulator started (the links' time 0, within ~0.1 s):
            # the clock of the scenario's schedule.
            row["t_s"] = (t - run["started_unix_ms"]) / 1000.0 if isinstance(t, int | float) else None
            row.update(flatten(rec))
            rows.append(row)
    return rows


def to_arrow(rows: list[dict[str, Any]]) -> Any:
    """A pyarrow table of rows with the union of their keys; known fields get their
    documented types (so a column of nulls is still typed)."""
    import pyarrow as pa

    _ARROW_TYPES = {"string": pa.string, "int64": pa.int64, "float64": pa.float64, "bool": pa.bool_}
    columns: dict[str, list[Any]] = {}
    for row in rows:
        for k in row:
            columns.setdefault(k, [])
    for k, values in columns.items():
        values.extend(row.get(k) for row in rows)
    arrays = {}
    for k, values in columns.items():
        typ = RECORD_TYPES.get(k) or RUN_COLUMNS.get(k) or ("float64" if k.startswith("cond_") or k == "t_s" else None)
        if typ == "int64":
            values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
        try:
            arrays[k] = pa.array(values, type=_ARROW_TYPES[typ]() if typ else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            arrays[k] = pa.array(
                [None if v is None else json.dumps(v) if isinstance(v, list) else str(v) for v in values]
            )
    return pa.table(arrays) if arrays else pa.table({k: pa.array([], type=pa.string()) for k in RUN_COLUMNS})


def collect(out: Path) -> Any:
    """Builds the results table of a lab folder from its runs' telemetry and writes
    `requests.parquet` and `results.duckdb` (tables `requests`, `runs`, `conditions`).
    Returns the pyarrow table."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise LabError("collecting results needs pyarrow: run scripts/setup.sh (the `lab` extra)") from e
    runs = json.loads((out / "runs.json").read_text())
    conds = {c["condition_id"]: c for c in json.loads((out / "conditions.json").read_text())}
    policies = {p["name"]: p for p in json.loads((out / "plan.json").read_text())["policies"]}
    rows: list[dict[str, Any]] = []
    for run in runs:
        rows += rows_of_run(run, conds[run["condition_id"]], policies[run["policy"]])
    table = to_arrow(rows)
    pq.write_table(table, out / "requests.parquet")
    _write_duckdb(out, table, runs, list(conds.values()))
    return table


def _write_duckdb(out: Path, table: Any, runs: list[dict[str, Any]], conds: list[dict[str, Any]]) -> None:
    try:
        import duckdb
    except ImportError:
        print("gearbox lab: duckdb is not installed; wrote requests.parquet only", file=sys.stderr)
        return
    import pyarrow as pa

    db = out / "results.duckdb"
    db.unlink(missing_ok=True)
    con = duckdb.connect(str(db))
    try:
        runs_t = pa.Table.from_pylist(runs)
        conds_t = pa.Table.from_pylist(
            [
                {
                    "condition_id": c["condition_id"],
                    "label": c["label"],
                    **{f"cond_{k}": v for k, v in {**c["values"], **c["params"]}.items()},
                    "emu_json": json.dumps(c["emu"]),
                }
                for c in conds
            ]
        )
        for name, t in (("requests", table), ("runs", runs_t), ("conditions", conds_t)):
            con.register("incoming", t)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM incoming")
            con.unregister("incoming")
    finally:
        con.close()


# ---------------------------------------------------------------------------------------
# Statistics and reductions


def rct_stats(values: Iterable[float]) -> dict[str, float | None]:
    """Mean, median, p90, p99 (numpy's linear interpolation) of RCTs in ms; None when empty."""
    import numpy as np

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {f"{s}_ms": None for s in STATISTICS}
    return {
        "mean_ms": float(v.mean()),
        "median_ms": float(np.percentile(v, 50)),
        "p90_ms": float(np.percentile(v, 90)),
        "p99_ms": float(np.percentile(v, 99)),
    }


def reduction(policy_value: float | None, baseline_value: float | None) -> float | None:
    """1 - policy / baseline: 0.25 = the policy's statistic is 25% lower (better) than the
    baseline's; negative = worse. None when either is missing or the baseline is 0."""
    if policy_value is None or baseline_value is None or baseline_value == 0:
        return None
    return 1.0 - policy_value / baseline_value


def reductions(stats: list[dict[str, Any]], baselines: list[str]) -> list[dict[str, Any]]:
    """For every policy and every baseline other than itself, the reduction of each statistic."""
    by_name = {s["policy"]: s for s in stats}
    out = []
    for s in stats:
        for b in baselines:
            if b == s["policy"] or b not in by_name:
                continue
            for stat in STATISTICS:
                pv, bv = s[f"{stat}_ms"], by_name[b][f"{stat}_ms"]
                out.append(
                    {
                        "policy": s["policy"],
                        "baseline": b,
                        "statistic": stat,
                        "policy_ms": pv,
                        "baseline_ms": bv,
                        "reduction": reduction(pv, bv),
                    }
                )
    return out


def policy_stats(rows: list[dict[str, Any]], policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-policy statistics over client records (failed requests are counted, not timed)."""
    out = []
    for p in policies:
        mine = [r for r in rows if r["policy"] == p["name"] and r.get("side") == "client"]
        ok = [r["rct_ms"] for r in mine if r.get("error") is None and r.get("rct_ms") is not None]
        out.append(
            {
                "policy": p["name"],
                "label": p.get("label", p["name"]),
                "proto": p["proto"],
                "baseline": bool(p.get("baseline")),
                "requests": len(mine),
                "errors": len(mine) - len(ok),
                **rct_stats(ok),
            }
        )
    return out


def summarize(out: Path, table: Any = None) -> dict[str, Any]:
    """Per-policy statistics (all conditions and repetitions pooled: every policy saw the
    same requests on the same links), per condition and policy, and reductions against
    every baseline; writes summary.json, summary.csv, reductions.csv, by_condition.csv."""
    import pyarrow.parquet as pq

    if table is None:
        table = pq.read_table(out / "requests.parquet")
    plan_doc = json.loads((out / "plan.json").read_text())
    runs = json.loads((out / "runs.json").read_text())
    conds = json.loads((out / "conditions.json").read_text())
    wanted = ("policy", "side", "error", "rct_ms", "condition_id", "t_s")
    cols = {k: table.column(k).to_pylist() for k in wanted if k in table.column_names}
    n = table.num_rows
    rows = [{k: cols[k][i] if k in cols else None for k in wanted} for i in range(n)]
    policies = plan_doc["policies"]
    baselines = [p["name"] for p in policies if p.get("baseline")]
    stats = policy_stats(rows, policies)
    by_condition = []
    for c in conds:
        mine = [r for r in rows if r["condition_id"] == c["condition_id"]]
        for st in policy_stats(mine, policies):
            by_condition.append({"condition_id": c["condition_id"], "condition": c["label"], **c["params"], **st})
    cond_reductions = []
    for c in conds:
        cs = [r for r in by_condition if r["condition_id"] == c["condition_id"]]
        for r in reductions(cs, baselines):
            cond_reductions.append({"condition_id": c["condition_id"], **r})
    by_phase = []
    phase_list = plan_doc.get("phases", [])
    if len(phase_list) > 1:
        for ph in phase_list:
            end = math.inf if ph["end_s"] is None else ph["end_s"]
            mine = [r for r in rows if r["t_s"] is not None and ph["start_s"] <= r["t_s"] < end]
            for st in policy_stats(mine, policies):
                by_phase.append({"start_s": ph["start_s"], "end_s": ph["end_s"], "phase": ph["label"], **st})
    summary = {
        "scenario": plan_doc["scenario"],
        "description": plan_doc.get("description", ""),
        "statistics": list(STATISTICS),
        "baselines": baselines,
        "policies": stats,
        "reductions": reductions(stats, baselines),
        "by_condition": by_condition,
        "reductions_by_condition": cond_reductions,
        "by_phase": by_phase,
        "runs": {
            "total": len(runs),
            "ok": sum(r["status"] == "ok" for r in runs),
            "timeout": sum(r["status"] == "timeout" for r in runs),
            "failed": sum(r["status"] == "failed" for r in runs),
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _write_csv(out / "summary.csv", _summary_rows(stats, summary["reductions"], baselines))
    _write_csv(out / "reductions.csv", summary["reductions"])
    _write_csv(out / "by_condition.csv", by_condition)
    if by_phase:
        _write_csv(out / "by_phase.csv", by_phase)
    return summary


def _summary_rows(
    stats: list[dict[str, Any]], reds: list[dict[str, Any]], baselines: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for s in stats:
        row = dict(s)
        for b in baselines:
            for stat in STATISTICS:
                hit = [r for r in reds if r["policy"] == s["policy"] and r["baseline"] == b and r["statistic"] == stat]
                row[f"reduction_vs_{b}_{stat}"] = hit[0]["reduction"] if hit else None
        rows.append(row)
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r[k] for k in keys})


def format_table(summary: dict[str, Any]) -> str:
    """The per-policy table and the reductions, as printed by `gearbox lab run`."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:+.1f}%"

    head = ["policy", "proto", "requests", "errors", "mean ms", "median ms", "p90 ms", "p99 ms"]
    body = [
        [
            p["policy"] + (" *" if p["baseline"] else ""),
            p["proto"],
            str(p["requests"]),
            str(p["errors"]),
            ms(p["mean_ms"]),
            ms(p["median_ms"]),
            ms(p["p90_ms"]),
            ms(p["p99_ms"]),
        ]
        for p in summary["policies"]
    ]
    lines = [f"RCT per policy, {summary['scenario']} (* = baseline; all conditions and repetitions pooled)"]
    lines += _grid_text(head, body)
    reds = summary["reductions"]
    if reds:
        lines += ["", "reduction = 1 - policy / baseline (positive: the policy is faster)"]
        head = ["policy", "vs baseline", *STATISTICS]
        body = []
        pairs = list(dict.fromkeys((r["policy"], r["baseline"]) for r in reds))
        for pol, base in pairs:
            vals = {r["statistic"]: r["reduction"] for r in reds if r["policy"] == pol and r["baseline"] == base}
            body.append([pol, base, *(pct(vals.get(s)) for s in STATISTICS)])
        lines += _grid_text(head, body)
    conds = list(dict.fromkeys((c["condition_id"], c["condition"]) for c in summary.get("by_condition", [])))
    if len(conds) > 1:
        shown = conds[:MAX_PRINTED_CONDITIONS]
        lines += ["", "median / p90 RCT (ms) by condition"]
        pols = [p["policy"] for p in summary["policies"]]
        body = []
        for cid, label in shown:
            cells = [cid, label]
            for pol in pols:
                st = next(x for x in summary["by_condition"] if x["condition_id"] == cid and x["policy"] == pol)
                cells.append(f"{ms(st['median_ms'])} / {ms(st['p90_ms'])}")
            body.append(cells)
        lines += _grid_text(["condition", "parameters", *pols], body)
        if len(conds) > len(shown):
            lines.append(f"... {len(conds) - len(shown)} more in by_condition.csv")
    if summary.get("by_phase"):
        lines += ["", "median / p90 RCT (ms) by phase of the schedule (requests by send time)"]
        spans = list(dict.fromkeys((p["start_s"], p["end_s"], p["phase"]) for p in summary["by_phase"]))
        pols = [p["policy"] for p in summary["policies"]]
        head = ["phase", "from s", *pols]
        body = []
        for start, _end, label in spans:
            cells = [label, f"{start:g}"]
            for pol in pols:
                st = next(x for x in summary["by_phase"] if x["start_s"] == start and x["policy"] == pol)
                cells.append(f"{ms(st['median_ms'])} / {ms(st['p90_ms'])}")
            body.append(cells)
        lines += _grid_text(head, body)
    r = summary["runs"]
    if r["failed"] or r["timeout"]:
        lines += ["", f"runs: {r['ok']} ok, {r['timeout']} timed out, {r['failed']} failed (see runs.json)"]
    return "\n".join(lines)


def _grid_text(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head), *(fmt.format(*row) for row in body)]
