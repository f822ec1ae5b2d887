"""Learners on a schedule (`[jobs]` in the config): each job runs its command as a subprocess
every `every_s`, with

- `{telemetry}`: a JSON Lines file of the records (of `side`, if set) whose batches arrived since
  the job's last run (all of them the first time): the learning interval's samples, late
  (spooled) batches included, none twice;
- `{input}`: a folder holding the gear's active version (empty when none is active);
- `{output}`: an empty folder where the learner writes the next version;
- `{python}`: the Python running the control plane.

A run that exits 0 and leaves files in `{output}` becomes the gear's next version (pushed through
the same checks as `gearbox control policy push`), activated in the job's scope or held for
approval. A TOML file the learner wrote without a sidecar (a Cwnd Table) gets one recording the
exported telemetry's sha256 as its training data. Every run's start, end, outcome, version and
log (the command's output) are kept (`/v1/jobs`, the dashboard).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gearbox.control import policy as pol
from gearbox.control.config import Config, Job
from gearbox.control.store import Store, now_ms

MAX_LOG_BYTES = 64 * 1024


class Scheduler:
    def __init__(self, config: Config, store: Store, service: object) -> None:
        self.config, self.store, self.service = config, store, service
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="control-jobs", daemon=True)
        self._last_start: dict[str, float] = {}

    def start(self) -> None:
        if self.config.jobs:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        next_due = {name: time.monotonic() + job.every_s for name, job in self.config.jobs.items()}
        while not self._stop.is_set():
            now = time.monotonic()
            for name, job in self.config.jobs.items():
                if now >= next_due[name] and not self._stop.is_set():
                    next_due[name] = now + job.every_s
                    run_job(job, self.store, self.service)
            self._stop.wait(0.2)


# A batch is committed within moments of the time it was received (its `received_ms`); a run
# reads the batches received before its cut, this long before it starts, so that none still
# committing is missed, and the next run starts where this one's window ended.
COMMIT_MARGIN_MS = 2000


def run_job(job: Job, store: Store, service: object) -> dict:
    """One run of a job, start to finish; returns its stored run."""
    cut = now_ms() - COMMIT_MARGIN_MS
    earlier = store.runs(job.name)
    window = (int(earlier[-1]["cut_ms"]) if earlier else None, cut)
    run_id = store.start_run(job.name, cut)
    log: list[str] = []
    outcome, version = "failed", None
    try:
        with tempfile.TemporaryDirectory(prefix=f"gearbox-job-{job.name}-") as tmp:
            root = Path(tmp)
            telemetry = root / "telemetry.jsonl"
            records = store.records(side=job.side, received=window)
            with telemetry.open("w") as f:
                for r in records:
                    f.write(json.dumps(r, separators=(",", ":")) + "\n")
            input_dir, output_dir = root / "input", root / "output"
            input_dir.mkdir()
            output_dir.mkdir()
            _fill_input(store, job, input_dir)
            subst = {
                "{telemetry}": str(telemetry),
                "{input}": str(input_dir),
                "{output}": str(output_dir),
                "{python}": sys.executable,
            }
            argv = [_substitute(a, subst) for a in job.command]
            log.append(f"$ {' '.join(argv)}  ({len(records)} records)")
            try:
                proc = subprocess.run(
                    argv, capture_output=True, text=True, timeout=job.timeout_s, stdin=subprocess.DEVNULL
                )
            except subprocess.TimeoutExpired as e:
                log.append(_text(e.stdout) + _text(e.stderr))
                outcome = "timeout"
                raise _Done from None
            except OSError as e:
                log.append(f"cannot start: {e}")
                raise _Done from None
            log.append(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                log.append(f"exit status {proc.returncode}")
                raise _Done
            if not any(output_dir.iterdir()):
                outcome = "no_output"
                raise _Done
            _add_sidecars(output_dir, telemetry, len(records), job, run_id)
            v = service.push(job.gear, pol.pack(output_dir), None, f"job:{job.name}", f"run {run_id}")
            version = v["version"]
            if job.activate:
                service.activate(job.gear, version, job.scope, f"job:{job.name}")
                outcome = "activated"
            else:
                outcome = "held"
            log.append(f"{job.gear} version {version}: {outcome}")
    except _Done:
        pass
    except pol.PolicyError as e:
        log.append(f"policy refused: {e}")
        outcome = "refused"
    except Exception as e:  # noqa: BLE001 - a run's failure is its outcome, kept with the log
        log.append(f"{type(e).__name__}: {e}")
    text = "\n".join(log)
    if len(text) > MAX_LOG_BYTES:
        text = text[-MAX_LOG_BYTES:]
    store.finish_run(run_id, outcome, text, version)
    return store.runs(job.name)[-1]


class _Done(Exception):
    pass


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")


def _substitute(arg: str, subst: dict[str, str]) -> str:
    for k, v in subst.items():
        arg = arg.replace(k, v)
    return arg


def _fill_input(store: Store, job: Job, input_dir: Path) -> None:
    active = store.active()
    version = active.get((job.gear, job.scope)) or active.get((job.gear, "global"))
    if version is None:
        return
    v = store.version(job.gear, version)
    data = store.get_blob(v["sha256"])
    for name, content in pol.unpack_files(data).items():
        path = input_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _add_sidecars(output_dir: Path, telemetry: Path, rows: int, job: Job, run_id: int) -> None:
    digest = hashlib.sha256(telemetry.read_bytes()).hexdigest()
    for p in sorted(output_dir.rglob("*.toml")):
        meta = p.with_name(p.name[: -len(".toml")] + pol.SIDECAR_SUFFIX)
        if not meta.exists():
            meta.write_text(
                json.dumps(
                    {
                        "format_version": 1,
                        "model_version": f"{job.name}-run{run_id}",
                        "training_data": {"sha256": digest, "file": "telemetry.jsonl", "rows": rows},
                        "trainer": f"gearbox control job {job.name}: {' '.join(job.command)}",
                    },
                    indent=2,
                )
                + "\n"
            )
