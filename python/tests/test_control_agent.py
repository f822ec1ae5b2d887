"""The closed loop with the real data plane: a `gearbox edge` and a gearbox client write their
telemetry files, `gearbox control agent` beside each uploads them, and the edge's agent keeps the
Cwnd Table the edge reads on the control plane's active version. A policy pushed during the run
reaches the edge (its records show the new table's window), and every record written by the edge
and the client is stored exactly once."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from control_support import Control, control_plane
from support import REPO, free_port, stop, wait_until_listening

import gearbox
from gearbox.control.client import wait_for

TABLE = """version = {v}
cap = 100

[[cluster]]
prefix = "others"
iw = [{a}, {b}]
"""


def push_table(control: Control, root: Path, v: int, a: int, b: int) -> None:
    d = root / f"table-{v}"
    d.mkdir()
    (d / "cwnd.toml").write_text(TABLE.format(v=v, a=a, b=b))
    meta = {"format_version": 1, "model_version": f"t{v}", "training_data": {"sha256": hashlib.sha256(b"").hexdigest()}}
    (d / "cwnd.meta.json").write_text(json.dumps(meta))
    r = control.cli("policy", "push", "tcpwise", str(d), "--activate", "--token", control.tokens["admin"])
    assert r.returncode == 0, r.stderr


def agent(control: Control, role: str, root: Path, tail: Path, policies: Path | None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "gearbox.control", "agent", "--spool", str(root / f"spool-{role}")]
    args += ["--tail", str(tail), "--every", "0.2", "--url", control.url, "--token", control.tokens[role]]
    args += ["--cafile", str(control.cert)]
    if policies:
        args += ["--policies", str(policies)]
    log = (root / f"agent-{role}.log").open("wb")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop_agent(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_edge_and_client_upload_through_agents_and_the_edge_picks_up_a_pushed_table(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", "store")
    procs: list[subprocess.Popen[bytes]] = []
    edge_proc = None
    try:
        push_table(control, tmp_path, 1, 10, 15)
        policies = tmp_path / "policies"
        edge_jsonl, client_jsonl = tmp_path / "edge.jsonl", tmp_path / "client.jsonl"
        procs.append(agent(control, "edge", tmp_path, edge_jsonl, policies))
        table = policies / "tcpwise" / "current" / "cwnd.toml"
        assert wait_for(table.exists, 60), (tmp_path / "agent-edge.log").read_text()
        client_policies = tmp_path / "client-policies"
        procs.append(agent(control, "client", tmp_path, client_jsonl, client_policies))

        port = free_port()
        edge_log = tmp_path / "edge.log"
        with edge_log.open("wb") as log:
            edge_proc = subprocess.Popen(
                [str(gearbox_bin), "edge", "--listen", f"127.0.0.1:{port}", "--cert", str(control.cert)]
                + ["--key", str(control.directory / "key.pem"), "--telemetry", str(edge_jsonl)]
                + ["--cwnd-table", str(table)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_listening(edge_proc, port, edge_log)
        origin = f"https://127.0.0.1:{port}"

        def fetch(n: int) -> list[dict]:
            # A new client: new QUIC connections, which take the table's window at accept.
            with gearbox.Client(ca=str(control.cert), telemetry=str(client_jsonl)) as c:
                return [c.get(f"{origin}/bytes/2000", transport="quic").record for _ in range(n)]

        assert all(r["status"] == 200 for r in fetch(5))
        push_table(control, tmp_path, 2, 20, 25)  # during the run
        # A client-side policy pushed during the run too: the transport gear's models.
        r = control.cli(
            "policy",
            "push",
            "transport",
            str(REPO / "models" / "wisetrans"),
            "--activate",
            "--token",
            control.tokens["admin"],
        )
        assert r.returncode == 0, r.stderr
        client_model = client_policies / "transport" / "current" / "tcp.json"
        assert wait_for(client_model.exists, 60), (tmp_path / "agent-client.log").read_text()
        assert client_model.read_bytes() == (REPO / "models" / "wisetrans" / "tcp.json").read_bytes()

        def edge_took_v2() -> bool:
            fetch(1)
            return any((r.get("iw") or {}).get("iw_set") == [20, 25] for r in lines(edge_jsonl))

        assert wait_for(edge_took_v2, 60, every_s=0.5), edge_log.read_text()
        fetch(3)
        stop(edge_proc)
        for p in procs:
            stop_agent(p)  # a last pass: what the files hold now is uploaded before they exit

        written_edge, written_client = lines(edge_jsonl), lines(client_jsonl)
        assert {r["iw"]["iw_set"][0] for r in written_edge if r.get("iw")} == {10, 20}
        with control.http("admin") as admin:
            stored = [json.loads(line) for line in admin.get("/v1/telemetry").text.splitlines()]
            peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}

        def key(r: dict) -> str:
            return json.dumps(r, sort_keys=True)

        assert Counter(key(r) for r in stored if r["side"] == "edge") == Counter(key(r) for r in written_edge)
        assert Counter(key(r) for r in stored if r["side"] == "client") == Counter(key(r) for r in written_client)
        assert peers["edge"]["policies"] == {"tcpwise": 2, "transport": 1}
        assert peers["client"]["policies"] == {"tcpwise": 2, "transport": 1}
        assert peers["edge"]["records"] == len(written_edge) and peers["client"]["records"] == len(written_client)
    finally:
        if edge_proc is not None:
            stop(edge_proc)
        for p in procs:
            stop_agent(p)
        control.stop()
