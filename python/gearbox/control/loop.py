"""`gearbox control loop`: the closed loop on one machine, natively (docs/control.md, "The loop
scenario").

A control plane (its own certificate, embedded store and tokens), a `gearbox edge` and `gearbox
load` runs that upload their telemetry themselves (`--control`), and a TCP WISE Cwnd Table pushed
during the run that the edge polls and swaps in. It checks what the issue asks of the loop and
prints figures:

- every record the edge and the client wrote to their files is stored exactly once;
- the edge ran the table active at its start, then the one pushed during the run (its records'
  `iw.iw_set`), and the control plane's peers list shows the version it runs;
- how long from the push to the first request served with the new table.

The client runs `gearbox load` again and again (`--requests` at a time over QUIC) on one spool, so
each run opens new connections, which take the table's window at accept (TCP WISE §IV-A). No root
and no emulated links: the edge and the client talk over loopback; the lab's scenarios
(docs/lab.md) add links with `edge_args`/`load_args` carrying the same `--control` flags.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TABLE = """version = {v}
cap = 100

[[cluster]]
prefix = "others"
iw = [{a}, {b}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _table(root: Path, v: int, a: int, b: int) -> Path:
    d = root / f"tcpwise-v{v}"
    d.mkdir(parents=True)
    (d / "cwnd.toml").write_text(TABLE.format(v=v, a=a, b=b))
    training = f"loop table {v}\n".encode()
    (d / "train.txt").write_bytes(training)
    meta = {
        "format_version": 1,
        "model_version": f"loop-{v}",
        "training_data": {"sha256": hashlib.sha256(training).hexdigest(), "file": "train.txt", "rows": 1},
    }
    (d / "cwnd.meta.json").write_text(json.dumps(meta))
    return d


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stop(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)


def prepare_instance(folder: Path, listen: str, cert: Path, key: Path, poll_s: float) -> dict[str, str]:
    """A scripted control plane's folder (this loop's, and each lab run's with a
    `[control]` table): `control.toml` listening on `listen` with an embedded store in
    `folder/store`, and an admin, an edge and a client token, returned by role."""
    from gearbox.control.store import open_store
    from gearbox.control.tokens import hash_token, new_token

    (folder / "control.toml").write_text(
        f'[server]\nlisten = "{listen}"\ncert = "{cert}"\nkey = "{key}"\nstore = "store"\n'
        f"poll_interval_s = {poll_s}\nflush_interval_s = 0.5\n"
    )
    tokens: dict[str, str] = {}
    store = open_store("store", folder)
    try:
        for role in ("admin", "edge", "client"):
            tokens[role] = new_token()
            store.add_token(hash_token(tokens[role]), role, role)
    finally:
        store.close()
    return tokens


def run_loop(out: Path, duration_s: float, push_at_s: float, requests: int, poll_s: float, gearbox: Path) -> dict:
    import httpx

    from gearbox.control.client import _ssl_context, wait_for

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cert, key = out / "cert.pem", out / "key.pem"
    subprocess.run(
        [str(gearbox), "cert", "--name", "localhost,127.0.0.1", "--cert", str(cert), "--key", str(key)],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    url = f"https://127.0.0.1:{port}"
    config = out / "control.toml"
    tokens = prepare_instance(out, f"127.0.0.1:{port}", cert, key, poll_s)
    env = {**os.environ, "GEARBOX_CONTROL_URL": url, "GEARBOX_CONTROL_CA": str(cert)}
    procs: list[subprocess.Popen] = []

    def log(name: str):  # noqa: ANN202
        return (out / f"{name}.log").open("ab")

    def push(d: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "gearbox.control", "policy", "push", "tcpwise", str(d), "--activate"]
            + ["--token", tokens["admin"]],
            check=True,
            capture_output=True,
            env=env,
        )

    def control_flags(role: str) -> list[str]:
        return [
            "--control",
            url,
            "--token",
            tokens[role],
            "--control-ca",
            str(cert),
            "--spool",
            str(out / f"{role}-spool"),
        ]

    try:
        serve = subprocess.Popen(
            [sys.executable, "-m", "gearbox.control", "serve", "--config", str(config)],
            cwd=out,
            stdin=subprocess.DEVNULL,
            stdout=log("control"),
            stderr=subprocess.STDOUT,
        )
        procs.append(serve)
        http = httpx.Client(base_url=url, verify=_ssl_context(cert), timeout=30)

        def up() -> bool:
            try:
                return http.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        if not wait_for(up, 60, every_s=0.1):
            raise RuntimeError(f"the control plane did not start: {(out / 'control.log').read_text()}")
        push(_table(out / "tables", 1, 10, 15))

        edge_port = _free_port()
        edge = subprocess.Popen(
            [
                str(gearbox),
                "--log",
                "info",
                "edge",
                "--listen",
                f"127.0.0.1:{edge_port}",
                "--cert",
                str(cert),
                "--key",
                str(key),
            ]
            + ["--telemetry", str(out / "edge.jsonl"), "--policies", str(out / "edge-policies")]
            + ["--poll-s", str(poll_s)]
            + control_flags("edge"),
            stdin=subprocess.DEVNULL,
            stdout=log("edge"),
            stderr=subprocess.STDOUT,
        )
        procs.append(edge)
        current = out / "edge-policies" / "tcpwise" / "current"
        if not wait_for(lambda: os.path.islink(current), 60, every_s=0.1):
            raise RuntimeError(f"the edge took no policy: {(out / 'edge.log').read_text()}")

        started = time.monotonic()
        pushed_ms: float | None = None
        loads = 0

        def new_table_served() -> bool:
            return any((r.get("iw") or {}).get("iw_set") == [20, 25] for r in _lines(out / "edge.jsonl"))

        # Past the duration only while the pushed table has not been served yet (bounded).
        while time.monotonic() - started < duration_s or (
            pushed_ms is not None and not new_table_served() and time.monotonic() - started < duration_s + 60
        ):
            if pushed_ms is None and time.monotonic() - started >= push_at_s:
                push(_table(out / "tables", 2, 20, 25))
                pushed_ms = time.time() * 1000  # active in the registry from here
            r = subprocess.run(
                [str(gearbox), "load", "--workload", "feed", "--requests", str(requests), "--proto", "quic"]
                + ["--target", f"https://127.0.0.1:{edge_port}", "--ca", str(cert), "--seed", str(loads + 1)]
                + ["--telemetry", str(out / "client.jsonl"), "--time-scale", "0.1"]
                + control_flags("client"),
                capture_output=True,
                text=True,
                timeout=300,
            )
            loads += 1
            if r.returncode != 0:
                raise RuntimeError(f"gearbox load failed: {r.stderr}")
        swapped_ms = os.lstat(current).st_mtime * 1000 if os.readlink(current) == "v2" else None
        _stop(edge)
        procs.remove(edge)
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        stored = [json.loads(line) for line in http.get("/v1/telemetry", headers=admin).text.splitlines()]
        peers = {p["name"]: p for p in http.get("/v1/peers", headers=admin).json()["peers"]}
        http.close()
    finally:
        for p in procs:
            _stop(p)

    def key(r: dict) -> str:
        return json.dumps(r, sort_keys=True)

    result: dict = {"loads": loads, "sides": {}}
    for side in ("edge", "client"):
        written = Counter(key(r) for r in _lines(out / f"{side}.jsonl"))
        got = Counter(key(r) for r in stored if r.get("side") == side)
        result["sides"][side] = {
            "written": sum(written.values()),
            "stored": sum(got.values()),
            "missing": sum((written - got).values()),
            "extra": sum((got - written).values()),
        }
    served = [r for r in _lines(out / "edge.jsonl") if r.get("iw")]
    windows = sorted({tuple(r["iw"]["iw_set"]) for r in served if r["iw"].get("iw_set")})
    after = [r["time_unix_ms"] for r in served if r["iw"].get("iw_set") == [20, 25]]
    result["windows_served"] = [list(w) for w in windows]
    result["push_to_swap_ms"] = (swapped_ms - pushed_ms) if swapped_ms and pushed_ms else None
    result["push_to_first_use_ms"] = (min(after) - pushed_ms) if after and pushed_ms else None
    result["edge_runs"] = peers.get("edge", {}).get("policies")
    result["ok"] = (
        all(s["missing"] == 0 and s["extra"] == 0 and s["written"] > 0 for s in result["sides"].values())
        and [10, 15] in result["windows_served"]
        and [20, 25] in result["windows_served"]
        and result["edge_runs"] == {"tcpwise": 2}
    )
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gearbox control loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("out/control-loop"), help="output folder (replaced)")
    p.add_argument("--duration-s", type=float, default=20.0, help="how long the client runs (default 20)")
    p.add_argument("--push-at-s", type=float, default=8.0, help="when the new table is pushed (default 8)")
    p.add_argument("--requests", type=int, default=30, help="requests per `gearbox load` run (default 30)")
    p.add_argument("--poll-s", type=float, default=1.0, help="the service's poll interval (default 1)")
    a = p.parse_args(argv)
    from gearbox.lab.environment import find_gearbox

    r = run_loop(a.out, a.duration_s, a.push_at_s, a.requests, a.poll_s, find_gearbox())
    for side, s in r["sides"].items():
        print(
            f"{side:6} records written {s['written']:6}  stored {s['stored']:6}  "
            f"missing {s['missing']}  twice {s['extra']}"
        )
    print(f"gearbox load runs: {r['loads']}; windows the edge served: {r['windows_served']}")
    if r["push_to_first_use_ms"] is None:
        print("the new table was never used")
    else:
        print(
            f"push -> edge swapped: {r['push_to_swap_ms']:.0f} ms; "
            f"push -> first request served with it (a new connection): {r['push_to_first_use_ms']:.0f} ms"
        )
    print(
        f"the control plane says the edge runs {r['edge_runs']}; {'OK' if r['ok'] else 'FAILED'} ({a.out}/summary.json)"
    )
    return 0 if r["ok"] else 1
