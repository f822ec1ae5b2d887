"""The control plane in a lab run (docs/lab.md, "Control plane"; docs/control.md, "A lab
scenario").

A scenario with a `[control]` table gives every run its own `gearbox control serve` (a fresh
embedded store, its own tokens) in the server namespace beside the edge, on the server's
address: the edge reaches it locally, the client over the emulated links, as a client reaches
a control plane in a data centre. The edge and the client run with `--control`: they upload
their telemetry (spooled, in batches with idempotency keys) and poll their policies. The
scenario's `[[control.push]]` entries are pushed with `gearbox control policy push GEAR DIR
--activate`: those at 0 s before the edge starts, the others during the run, `at_s` after the
links started. The scenario's `[control.jobs.NAME]` are the service's `[jobs.NAME]`: learners
on a schedule over the telemetry it stores, whose output becomes the gear's next version
(TCP WISE's loop: edge -> telemetry -> learner -> Cwnd Table -> edge, unattended).

The pieces, in the order a run uses them:

- `prepare` (root namespace, before the run): the run's control folder, config, tokens;
- `server_prefix` / `client_suffix`: the shell around the runner's `gearbox edge` and
  `gearbox load` commands. The server side starts the service, waits for it, pushes, and
  leaves a background process for the pushes during the run (`python -m gearbox.lab.control
  start DIR`). The client side waits after `gearbox load` until the edge's spool is empty
  and its telemetry file has been quiet for 2 s (`wait-spool`; the edge writes a response's
  record only once its last byte is acknowledged, after the client has it): `gearbox emu`
  stops the edge and the service 1 s after the client exits, so the edge's last batches are
  sent while the service is still up, rather than left in its spool;
- `check` (root namespace, after the run): every record the edge and the client wrote to
  their files is compared with what the store holds (each exactly once), and each client
  request is counted under the policy version that chose its transport (its decision's
  `policy=N`), each edge connection under its Cwnd Table's version; each job run's outcome
  and, for a `tcpwise` job, whether the edge went on to serve the tables it wrote.

Rejected alternative: one control plane for the whole scenario in the root namespace. The
namespaces have no route to it, and runs would share a registry, so a run's versions would
depend on the runs before it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PORT = 8443
# The edge polls these gears; the client polls `wisetrans` (docs/control.md).
EDGE_GEARS = ("tcpwise", "floo")
CLIENT_GEAR = "wisetrans"
# Transport gears whose models the client swaps (`gearbox load --gear`, the default first).
SWAPPABLE_MODES = ("wisetrans-v2", "wisetrans-v1", "mlp")
START_TIMEOUT_S = 90.0
SPOOL_TIMEOUT_S = 60.0
# How long the edge's telemetry file must stay the same size before its spool counts as sent
# for good (longer than the slowest path's round trips between a response and its record).
TELEMETRY_QUIET_S = 2.0


@dataclass
class RunControl:
    """One run's control plane: its folder (config, store, logs), tokens and pushes."""

    dir: Path
    cert: Path
    tokens: dict[str, str]
    poll_s: float
    pushes: list[dict[str, Any]] = field(default_factory=list)
    job_gears: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://$GEARBOX_SERVER_ADDR:{PORT}"


def prepare(s: Any, run_dir: Path, cert: Path, key: Path) -> RunControl:
    """The run's control folder: `control.toml` (listening on every address of the server
    namespace), an empty embedded store with an admin, an edge and a client token, and
    `pushes.json`. A rerun starts from an empty store."""
    from gearbox.control.loop import prepare_instance

    d = run_dir / "control"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for spool in ("edge-spool", "client-spool", "edge-policies", "client-policies"):
        shutil.rmtree(run_dir / spool, ignore_errors=True)
    tokens = prepare_instance(d, f"0.0.0.0:{PORT}", cert, key, s.control.poll_s)
    if s.control.jobs:
        with (d / "control.toml").open("a") as f:
            f.write(jobs_toml(s.control.jobs))
    pushes = [{"gear": p.gear, "dir": str(p.dir), "at_s": p.at_s} for p in s.control.pushes]
    (d / "pushes.json").write_text(json.dumps({"admin": tokens["admin"], "pushes": pushes}, indent=1))
    return RunControl(
        dir=d,
        cert=cert,
        tokens=tokens,
        poll_s=s.control.poll_s,
        pushes=pushes,
        job_gears=sorted({str(j["gear"]) for j in s.control.jobs.values()}),
    )


def jobs_toml(jobs: dict[str, dict[str, Any]]) -> str:
    """`[jobs.NAME]` tables for the service's config (already checked by the scenario's parser)."""
    import tomli_w

    return "\n" + tomli_w.dumps({"jobs": jobs})


def _flags(c: RunControl, role: str, spool: Path) -> str:
    q = shlex.quote
    return f"--control {c.url} --token {q(c.tokens[role])} --control-ca {q(str(c.cert))} --spool {q(str(spool))}"


def edge_flags(c: RunControl, run_dir: Path) -> str:
    """The edge's `--control` flags; `--policies` when the scenario pushes an edge gear."""
    flags = _flags(c, "edge", run_dir / "edge-spool")
    if any(p["gear"] in EDGE_GEARS for p in c.pushes) or any(g in EDGE_GEARS for g in c.job_gears):
        flags += f" --policies {shlex.quote(str(run_dir / 'edge-policies'))} --poll-s {c.poll_s:g}"
    return flags


def polls_transport_models(proto: str, load_args: list[str]) -> bool:
    """Whether a policy's client runs a transport gear whose models it can poll: `--proto
    auto` with WiseTrans (v1, v2, the default) or `mlp`."""
    if proto != "auto":
        return False
    mode = SWAPPABLE_MODES[0]
    for i, a in enumerate(load_args):
        if a == "--gear" and i + 1 < len(load_args):
            mode = load_args[i + 1]
        elif a.startswith("--gear="):
            mode = a.split("=", 1)[1]
    return mode.lower() in SWAPPABLE_MODES


def client_flags(c: RunControl, run_dir: Path, proto: str, load_args: list[str]) -> str:
    """The client's `--control` flags; `--policies` when it polls its transport models and the
    scenario pushes them."""
    flags = _flags(c, "client", run_dir / "client-spool")
    if polls_transport_models(proto, load_args) and any(p["gear"] == CLIENT_GEAR for p in c.pushes):
        flags += f" --policies {shlex.quote(str(run_dir / 'client-policies'))} --poll-s {c.poll_s:g}"
    return flags


def server_prefix(c: RunControl) -> str:
    """Shell run before `exec gearbox edge`: the service in the background, then the pushes."""
    q = shlex.quote
    py = q(sys.executable)
    d = c.dir
    return (
        f"export GEARBOX_CONTROL_URL={c.url} GEARBOX_CONTROL_CA={q(str(c.cert))}; "
        f"{py} -m gearbox.control serve --config {q(str(d / 'control.toml'))} >> {q(str(d / 'serve.log'))} 2>&1 & "
        f"{py} -m gearbox.lab.control start {q(str(d))} >> {q(str(d / 'pushes.log'))} 2>&1 || exit 1; "
    )


def client_suffix(run_dir: Path) -> str:
    """Shell run after `gearbox load`: wait until the edge's spool is sent, keep load's status."""
    q = shlex.quote
    return (
        f"; rc=$?; {q(sys.executable)} -m gearbox.lab.control wait-spool {q(str(run_dir / 'edge-spool'))} "
        f"--telemetry {q(str(run_dir / 'edge.jsonl'))} "
        f">> {q(str(run_dir / 'control' / 'pushes.log'))} 2>&1; exit $rc"
    )


# --- inside the server namespace --------------------------------------------------------------


def _healthy(url: str, cafile: str) -> bool:
    import httpx

    from gearbox.control.client import _ssl_context

    try:
        return httpx.get(f"{url}/healthz", verify=_ssl_context(cafile), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _push(d: Path, admin: str, push: dict[str, Any], started: float) -> None:
    """`gearbox control policy push GEAR DIR --activate`, and when (in `pushed.jsonl`)."""
    from gearbox.control.__main__ import main as control_main

    rc = control_main(["policy", "push", push["gear"], push["dir"], "--activate", "--token", admin])
    line = {**push, "ok": rc == 0, "at_unix_ms": time.time() * 1000, "after_s": time.monotonic() - started}
    with (d / "pushed.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")
    print(f"pushed {push['gear']} from {push['dir']} at {line['after_s']:.2f} s: exit {rc}", flush=True)


def start(d: Path) -> int:
    """Waits for the service, pushes the 0 s policies, and leaves a child for the others."""
    started = time.monotonic()
    doc = json.loads((d / "pushes.json").read_text())
    url, ca = os.environ["GEARBOX_CONTROL_URL"], os.environ["GEARBOX_CONTROL_CA"]
    while not _healthy(url, ca):
        if time.monotonic() - started > START_TIMEOUT_S:
            print(f"the control plane did not answer within {START_TIMEOUT_S:g} s (see serve.log)", flush=True)
            return 1
        time.sleep(0.1)
    print(f"control plane up after {time.monotonic() - started:.2f} s", flush=True)
    later = [p for p in doc["pushes"] if p["at_s"] > 0]
    for p in doc["pushes"]:
        if p["at_s"] <= 0:
            _push(d, doc["admin"], p, started)
    if later:
        # In the server's process group: gearbox emu stops it with the edge.
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gearbox.lab.control",
                "later",
                str(d),
                "--since",
                str(time.time() - (time.monotonic() - started)),
            ],
            stdin=subprocess.DEVNULL,
        )
    return 0


def later(d: Path, since_unix: float) -> int:
    """The pushes during the run, each `at_s` after `since_unix` (the server command's start)."""
    doc = json.loads((d / "pushes.json").read_text())
    started = time.monotonic() - (time.time() - since_unix)
    for p in sorted((p for p in doc["pushes"] if p["at_s"] > 0), key=lambda p: p["at_s"]):
        wait = p["at_s"] - (time.monotonic() - started)
        if wait > 0:
            time.sleep(wait)
        _push(d, doc["admin"], p, started)
    return 0


def spool_empty(spool: Path) -> bool:
    """No sealed batch waiting and nothing in the open one (docs/control.md, "Upload")."""
    if not spool.is_dir():
        return True
    if any(spool.glob("*.batch.jsonl")):
        return False
    open_batch = spool / "open.jsonl"
    return not open_batch.exists() or open_batch.stat().st_size == 0


def wait_spool(spool: Path, telemetry: Path | None = None, timeout_s: float = SPOOL_TIMEOUT_S) -> int:
    """Waits until `spool` holds no record and, with `telemetry`, that file has not grown for
    `TELEMETRY_QUIET_S`: the edge writes a response's record only once its last byte is
    acknowledged, a round trip or more after the client has the response, so an empty spool
    right after `gearbox load` exits can still be followed by the run's last record (which the
    edge would then spool after the service had stopped)."""
    deadline = time.monotonic() + timeout_s

    def size() -> int:
        return telemetry.stat().st_size if telemetry is not None and telemetry.exists() else 0

    last, since = size(), time.monotonic()
    while True:
        now_size = size()
        if now_size != last:
            last, since = now_size, time.monotonic()
        quiet = telemetry is None or time.monotonic() - since >= TELEMETRY_QUIET_S
        if quiet and spool_empty(spool):
            return 0
        if time.monotonic() > deadline:
            print(f"{spool}: still holds records after {timeout_s:g} s", flush=True)
            return 1
        time.sleep(0.1)


# --- after the run ----------------------------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line of a killed writer: not a record it wrote
    return out


def policy_version(record: dict[str, Any]) -> int | None:
    """The registry version that chose a client record's transport (`policy=N` in its
    decision), if a polled policy did."""
    decision = record.get("decision")
    if not isinstance(decision, str):
        return None
    for part in decision.split(";")[1:]:
        k, _, v = part.partition("=")
        if k == "policy" and v.isdigit():
            return int(v)
    return None


def check(run_dir: Path) -> dict[str, Any]:
    """What the run's control plane holds against what the edge and client wrote (each record
    exactly once), the pushes, and the policy version behind each request; `ok` says whether
    every record was stored once."""
    from gearbox.control.config import load as load_config
    from gearbox.control.store import open_store

    d = run_dir / "control"
    jobs = load_config(d / "control.toml").jobs
    store = open_store("store", d)
    try:
        stored = store.records()
        peers = {p["name"]: p["policies"] for p in store.peers()}
        runs = {name: store.runs(name) for name in jobs}
    finally:
        store.close()

    def key(r: dict[str, Any]) -> str:
        return json.dumps(r, sort_keys=True)

    sides: dict[str, Any] = {}
    for side in ("edge", "client"):
        written = Counter(key(r) for r in _lines(run_dir / f"{side}.jsonl"))
        got = Counter(key(r) for r in stored if r.get("side") == side)
        sides[side] = {
            "written": sum(written.values()),
            "stored": sum(got.values()),
            "missing": sum((written - got).values()),
            "twice": sum((got - written).values()),
            "left_in_spool": not spool_empty(run_dir / f"{side}-spool"),
        }
    client = _lines(run_dir / "client.jsonl")
    by_policy = Counter(str(policy_version(r)) if policy_version(r) is not None else "none" for r in client)
    edge = _lines(run_dir / "edge.jsonl")
    edge_tables = Counter(str((r.get("iw") or {}).get("table_version", "none")) for r in edge if r.get("iw"))
    result = {
        "sides": sides,
        "pushed": _lines(d / "pushed.jsonl"),
        "client_requests_by_policy_version": dict(sorted(by_policy.items())),
        "edge_records_by_table_version": dict(sorted(edge_tables.items(), key=lambda kv: _version_key(kv[0]))),
        "peers": peers,
    }
    result["ok"] = all(s["missing"] == 0 and s["twice"] == 0 for s in sides.values()) and all(
        p.get("ok") for p in result["pushed"]
    )
    if jobs:
        result["jobs"] = {
            name: [
                {k: run[k] for k in ("started_ms", "finished_ms", "outcome", "version")}
                | {"log_tail": (run.get("log") or "")[-600:]}
                for run in job_runs
            ]
            for name, job_runs in runs.items()
        }
        bad = [
            f"{name} run {i + 1}: {run['outcome']}"
            for name, job_runs in runs.items()
            for i, run in enumerate(job_runs)
            if run["outcome"] not in JOB_OUTCOMES_OK and run["finished_ms"] is not None
        ]
        result["job_problems"] = bad
        result["ok"] = result["ok"] and not bad
        if any(j.gear == "tcpwise" for j in jobs.values()):
            loop = tcpwise_loop(edge)
            result["tcpwise_loop"] = loop
            result["ok"] = result["ok"] and loop["advanced"]
    (run_dir / "control.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


# A job run that did what it should: pushed and activated (or held) a version, or had no output.
# A run the end of the lab run cut short (no `finished_ms`: the service was stopped) is no fault.
JOB_OUTCOMES_OK = ("activated", "held", "no_output")


def _version_key(v: str) -> tuple[int, int | str]:
    return (0, int(v)) if v.isdigit() else (1, v)


def tcpwise_loop(edge: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether TCP WISE's loop closed in a run: the Cwnd Table versions the edge served, in
    the order it first served them, with the IW sets each served (per transport) and when; the
    loop `advanced` when the edge served a later table than its first, and `moved` when a later
    table's records carry an IW set the first table's did not."""
    served = [r for r in edge if isinstance(r.get("iw"), dict) and r["iw"].get("table_version") is not None]
    served.sort(key=lambda r: r.get("time_unix_ms") or 0)
    versions: dict[int, dict[str, Any]] = {}
    for r in served:
        iw = r["iw"]
        v = versions.setdefault(
            int(iw["table_version"]),
            {"first_unix_ms": r.get("time_unix_ms"), "records": 0, "iw_sets": {}, "sources": {}},
        )
        v["records"] += 1
        key = f"{iw.get('cluster', '?')} {iw.get('iw_set')}"
        v["iw_sets"][key] = v["iw_sets"].get(key, 0) + 1
        v["sources"][iw.get("source", "?")] = v["sources"].get(iw.get("source", "?"), 0) + 1
    order = sorted(versions, key=lambda v: versions[v]["first_unix_ms"] or 0)
    sets: dict[bool, set[tuple[int, ...]]] = {True: set(), False: set()}
    for r in served:
        sets[bool(order) and int(r["iw"]["table_version"]) == order[0]].add(tuple(r["iw"].get("iw_set") or ()))
    first_sets, later_sets = sets[True], sets[False]
    return {
        "versions": {str(v): versions[v] for v in order},
        "first_version": order[0] if order else None,
        "last_version": order[-1] if order else None,
        "advanced": len(order) > 1 and order[-1] > order[0],
        "moved": bool(later_sets - first_sets),
        "new_iw_sets": sorted(list(s) for s in later_sets - first_sets),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gearbox.lab.control", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("start", help="wait for the service, push the 0 s policies, schedule the others")
    s.add_argument("dir", type=Path)
    lt = sub.add_parser("later", help="the pushes during the run")
    lt.add_argument("dir", type=Path)
    lt.add_argument("--since", type=float, required=True)
    w = sub.add_parser("wait-spool", help="wait until a spool folder holds no record")
    w.add_argument("spool", type=Path)
    w.add_argument("--telemetry", type=Path, help="the edge's telemetry file: also wait until it stops growing")
    c = sub.add_parser("check", help="compare a run's stored records with its telemetry files")
    c.add_argument("run_dir", type=Path)
    a = p.parse_args(argv)
    if a.command == "start":
        return start(a.dir)
    if a.command == "later":
        return later(a.dir, a.since)
    if a.command == "wait-spool":
        return wait_spool(a.spool, a.telemetry)
    print(json.dumps(check(a.run_dir), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
