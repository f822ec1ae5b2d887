"""The experiment runner: every policy of a scenario on identical emulated conditions
(planning.py), then one results table (collect.py) and the per-policy RCT statistics with
reductions against the baselines (summary.py; docs/architecture.md: a result is a ratio
against baselines measured in the same run).

Each run is one `gearbox emu` process (docs/emu.md) with `gearbox edge` in the server
namespace and `gearbox load` in the client namespace, each writing its telemetry
(docs/telemetry.md) into the run's folder. The shell commands go through `sh -c` in the
namespaces, so every path in them is quoted (`shlex.quote`) and only `$GEARBOX_*` is
left to the shell.

`--jobs N` runs N emulations at once. Each has its own namespaces, so they do not share
links, but they share CPUs: on a small machine, parallel runs measure the machine as
much as the network. Keep 1 for numbers you report.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gearbox.lab import control, oracle
from gearbox.lab import scenario as sc
from gearbox.lab.collect import collect, read_records, without_model
from gearbox.lab.environment import LabError, check_emulator, find_gearbox
from gearbox.lab.planning import Run, prepare
from gearbox.lab.summary import summarize

PORT = 4433


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

    @classmethod
    def of(
        cls,
        run: Run,
        status: str,
        exit_code: int | None,
        started_s: float,
        message: str,
        client_records: int,
        edge_records: int = 0,
    ) -> RunResult:
        """The result of `run`, started at `started_s` (Unix seconds) and ending now."""
        return cls(
            run_id=run.run_id,
            condition_id=run.condition.id,
            policy=run.policy.name,
            proto=run.policy.proto,
            repetition=run.repetition,
            link_seed=run.link_seed,
            workload_seed=run.workload_seed,
            status=status,
            exit_code=exit_code,
            started_unix_ms=started_s * 1000.0,
            wall_s=time.time() - started_s,
            client_records=client_records,
            edge_records=edge_records,
            message=message,
            dir=str(run.dir),
        )


def _commands(
    s: sc.Scenario, run: Run, gearbox: Path, cert: Path, key: Path, ctl: control.RunControl | None = None
) -> tuple[str, str]:
    """The --server and --client shell commands of one run (with `ctl`, around the run's
    control plane: lab/control.py)."""
    q = shlex.quote
    gb = q(str(gearbox))
    d = run.dir
    server = (
        f"{control.server_prefix(ctl) if ctl else ''}"
        f"exec {gb} edge --listen $GEARBOX_SERVER_ADDR:{PORT} --cert {q(str(cert))} --key {q(str(key))} "
        f"--telemetry {q(str(d / 'edge.jsonl'))}"
    )
    if run.policy.edge_args:
        server += " " + " ".join(q(a) for a in run.policy.edge_args)
    if ctl:
        server += " " + control.edge_flags(ctl, d)
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
    if ctl:
        client += " " + control.client_flags(ctl, d, run.policy.proto, run.policy.load_args)
    client += f" > {q(str(d / 'load.json'))}"
    if ctl:
        client += control.client_suffix(d)
    return server, client


def count_lines(path: Path) -> int:
    """Non-empty lines of a telemetry file (0 if it is absent)."""
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def run_one(
    s: sc.Scenario,
    run: Run,
    emu: dict[str, Any],
    gearbox: Path,
    cert: Path,
    key: Path,
    realtime_endpoints: bool = False,
) -> RunResult:
    """Runs one emulation and says how it went; never raises for a failed run.
    `realtime_endpoints`: `gearbox emu --realtime-endpoints` (docs/emu.md)."""
    run.dir.mkdir(parents=True, exist_ok=True)
    for name in ("edge.jsonl", "client.jsonl", "load.json"):
        (run.dir / name).unlink(missing_ok=True)  # gearbox appends; a rerun starts clean
    config = run.dir / "emu.toml"
    config.write_text(sc.dumps_toml(emu))
    ctl = control.prepare(s, run.dir, cert, key) if s.control else None
    server, client = _commands(s, run, gearbox, cert, key, ctl)
    limit = s.run_timeout_s
    cmd = [str(gearbox), "emu", "--config", str(config), "--server", server, "--client", client]
    cmd += ["--seed", str(run.link_seed), "--duration-s", f"{limit:g}", "--ready-ports", f"{PORT}/tcp,{PORT}/udp"]
    if realtime_endpoints:
        cmd.append("--realtime-endpoints")
    if ctl:
        # The edge starts once the control plane answers and the first policies are pushed.
        cmd += ["--ready-timeout-s", f"{control.START_TIMEOUT_S + 30:g}"]
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
    status, message = "ok", ""
    if code == 124:
        status, message = "timeout", f"the client was still running after {limit:g} s (timeout_s) and was stopped"
    elif code != 0:
        status = "failed"
        tail = (run.dir / "emu.log").read_text(errors="replace").strip().splitlines()[-3:]
        message = f"gearbox emu exited with {code}: " + " | ".join(tail)
    if ctl:
        try:
            checked = control.check(run.dir)
        except Exception as e:  # noqa: BLE001 - a run's failure, reported as such
            checked = {"ok": False, "sides": {}, "pushed": [], "error": f"{type(e).__name__}: {e}"}
        sides = checked["sides"]
        if not checked["ok"] and status == "ok":
            status = "failed"
            message = "control plane: " + "; ".join(
                f"{side}: {v['written']} records written, {v['stored']} stored "
                f"({v['missing']} missing, {v['twice']} twice)"
                for side, v in sides.items()
            )
            if not all(p.get("ok") for p in checked["pushed"]):
                message += "; a policy push failed (control/pushes.log)"
            if checked.get("job_problems"):
                message += "; learner jobs: " + ", ".join(checked["job_problems"]) + " (control.json)"
            loop = checked.get("tcpwise_loop")
            if loop is not None and not loop["advanced"]:
                message += (
                    "; the TCP WISE loop did not close: the edge served Cwnd Table versions "
                    f"{list(loop['versions'])} and none a job wrote after its first"
                )
            if "error" in checked:
                message += f"; the store could not be read: {checked['error']} (control/serve.log)"
    fallback = [d for name in ("client.jsonl", "edge.jsonl") for d in without_model(read_records(run.dir / name))]
    if fallback:
        status = "failed"
        message = (
            f"the gear ran without its model ({len(fallback)} decisions say why=no-model, first: {fallback[0]!r}); "
            + message
        ).rstrip("; ")
    return RunResult.of(
        run,
        status,
        code,
        started,
        message,
        client_records=count_lines(run.dir / "client.jsonl"),
        edge_records=count_lines(run.dir / "edge.jsonl"),
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


def check_models(s: sc.Scenario) -> None:
    """Refuses a scenario that names a model folder (`--model-dir`) that is not there: its
    gear would fall back to its static choice and the run would carry the gear's name."""
    for p in s.policies:
        if p.model_dir is not None and not Path(p.model_dir).is_dir():
            raise sc.ScenarioError(
                str(s.source),
                f"policies.{p.name}.load_args",
                f"--model-dir {p.model_dir}: no such folder, so the gear would run without its model (as its "
                "fallback) under the name of the policy; train the model (docs/wisetrans.md) or fix the path "
                "(relative to the scenario file's folder)",
            )


def run_scenario(
    s: sc.Scenario,
    out: Path,
    jobs: int = 1,
    gearbox: Path | None = None,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    backend: str = "emu",
    realtime_endpoints: bool = False,
) -> Outcome:
    """Runs every run of the scenario, then collects and summarizes (see module doc).
    `backend`: "emu" (the emulator with the real edge and client) or "sim" (`gearbox sim
    run`: the simulator, QUIC only; gearbox/sim/run.py). `realtime_endpoints`: the edge and
    client of each emulation under SCHED_FIFO (`gearbox emu --realtime-endpoints`)."""
    if jobs < 1:
        raise LabError(f"--jobs must be >= 1, got {jobs}")
    if backend not in ("emu", "sim"):
        raise LabError(f"unknown backend {backend!r}: emu or sim")
    check_models(s)
    if backend == "sim":
        from gearbox.sim import run as sim_run

        sim_run.check(s)
    gearbox = (gearbox or find_gearbox()).resolve()
    out = out.resolve()
    if backend == "emu":
        check_emulator()
    if (out / "runs.json").exists() and not force:
        raise LabError(
            f"{out} already holds results of a lab run: pass --force to replace them, or choose another --out"
        )
    if backend == "emu" and "/target/debug/" in str(gearbox):
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
    if jobs > 1 and any(oracle.wants_oracle(p.load_args) for p in s.policies):
        raise LabError("the live oracle (--gear oracle) reads the static runs before it runs: use --jobs 1")
    conds, runs, emu = prepare(s, out, gearbox)
    cert, key = out / "cert.pem", out / "key.pem"

    def execute(run: Run) -> RunResult:
        if backend == "sim":
            return sim_run.run_one(s, run, emu[run.condition.id], gearbox)
        return run_one(s, run, emu[run.condition.id], gearbox, cert, key, realtime_endpoints)

    if backend == "emu" and not (cert.exists() and key.exists()):
        r = subprocess.run(
            [str(gearbox), "cert", "--name", "10.0.0.1,localhost", "--cert", str(cert), "--key", str(key)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise LabError(f"gearbox cert failed: {r.stderr.strip()}")
    log(
        f"gearbox {'lab' if backend == 'emu' else 'sim'}: {s.name}: "
        f"{len(conds)} condition(s) x {len(s.policies)} policies x {s.repetitions} "
        f"repetition(s) = {len(runs)} runs of ~{s.duration_s:g} s, into {out}"
    )
    results: list[RunResult] = []
    bar = _progress(len(runs), progress)
    try:
        if jobs == 1:
            for run in runs:
                if bar is not None:
                    bar.set_postfix_str(f"{run.condition.id} {run.policy.name} r{run.repetition}")
                res = execute(with_oracle(s, run, results))
                results.append(res)
                _note(res, bar, log)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(execute, run) for run in runs]
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


def with_oracle(s: sc.Scenario, run: Run, done: list[RunResult]) -> Run:
    """The run itself, or for a live-oracle policy (`--gear oracle`, lab/oracle.py) the run
    with `--gear-config` pointing at the schedule made from the finished `tcp` and `quic`
    runs of its condition and repetition."""
    if not oracle.wants_oracle(run.policy.load_args):
        return run
    static = {
        r.policy: (Path(r.dir), r.started_unix_ms)
        for r in done
        if r.condition_id == run.condition.id and r.repetition == run.repetition and r.policy in ("tcp", "quic")
    }
    path = oracle.gear_config_for_run(run.dir, static, sc.phases(s))
    return replace(run, policy=replace(run.policy, load_args=[*run.policy.load_args, "--gear-config", str(path)]))


def _note(res: RunResult, bar: Any, log: Callable[[str], None]) -> None:
    if bar is not None:
        bar.update(1)
    if res.status != "ok":
        msg = f"gearbox lab: run {res.run_id}: {res.status}: {res.message} (logs in {res.dir})"
        if bar is not None:
            bar.write(msg, file=sys.stderr)
        else:
            log(msg)


def run_file(file: Path, out: Path) -> Path:
    """`gearbox lab run FILE --out OUT` in a child process, as a gear's evaluation runs its
    emulator half (its progress bar goes to stderr); returns `OUT`. Raises RuntimeError
    naming the file and the output folder when the run fails."""
    done = subprocess.run(
        [sys.executable, "-m", "gearbox.lab", "run", str(file), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gearbox lab run {file} failed (exit {done.returncode}); see {out}")
    return out
