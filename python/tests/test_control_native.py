"""The data plane's native control plane support (docs/control.md, "Native upload and polling"):
`gearbox edge --control URL --token T` and `gearbox load --control ...` spool and upload their
records themselves, and the edge polls its Cwnd Table from the registry, with no agent beside
them.

- the kill test, native: an edge and a client upload while the control plane is SIGKILLed twice and
  restarted; every record each wrote to its file is stored exactly once;
- policies: a table pushed during the run is swapped into the running edge; a corrupt artifact (the
  stored bytes damaged) and a table that does not parse are refused with the running one kept; an
  edge restarted while the control plane is down starts from the copy on disk, and what it records
  meanwhile is uploaded once the control plane is back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from control_support import Control, control_plane, make_cert, store_spec
from control_support import postgres as postgres  # noqa: F401 (fixture)
from support import REPO, free_port, stop, wait_until_listening
from test_control import STORES, TABLE, _activate, _push, policy_dir

import gearbox
from gearbox.control.client import wait_for


def control_flags(control: Control, role: str, spool: Path) -> list[str]:
    return [
        "--control",
        control.url,
        "--token",
        control.tokens[role],
        "--control-ca",
        str(control.cert),
        "--spool",
        str(spool),
    ]


def start_edge(gearbox_bin: Path, control: Control, root: Path, name: str, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log_path = root / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [str(gearbox_bin), "--log", "info", "edge", "--listen", f"127.0.0.1:{port}"]
            + ["--cert", str(control.cert), "--key", str(control.directory / "key.pem")]
            + ["--telemetry", str(root / "edge.jsonl")]
            + control_flags(control, "edge", root / "edge-spool")
            + list(extra),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_until_listening(proc, port, log_path)
    return proc, port


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def stored(control: Control) -> list[dict]:
    with control.http("admin") as admin:
        return [json.loads(line) for line in admin.get("/v1/telemetry").text.splitlines()]


def key(r: dict) -> str:
    return json.dumps(r, sort_keys=True)


def spooled_batches(spool: Path) -> int:
    return len(list(spool.glob("*.batch.jsonl"))) if spool.exists() else 0


@pytest.mark.parametrize("kind", STORES)
def test_native_edge_and_client_upload_while_the_control_plane_is_killed_every_record_stored_once(
    kind: str, request: pytest.FixtureRequest, gearbox_bin: Path, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", store_spec(kind, request))
    edge, port = start_edge(gearbox_bin, control, tmp_path, "edge", "--batch-records", "20")
    client_jsonl, client_spool = tmp_path / "client.jsonl", tmp_path / "client-spool"
    halt = threading.Event()
    runs: list[subprocess.CompletedProcess] = []

    def load_forever() -> None:
        # One `gearbox load` after another on the same spool: a run that ends while the control
        # plane is down leaves its batches for the next.
        while not halt.is_set():
            runs.append(
                subprocess.run(
                    [str(gearbox_bin), "--log", "info", "load", "--workload", "feed", "--requests", "40"]
                    + ["--target", f"https://127.0.0.1:{port}", "--ca", str(control.cert), "--time-scale", "0.05"]
                    + ["--telemetry", str(client_jsonl), "--batch-records", "20"]
                    + control_flags(control, "client", client_spool),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )

    loader = threading.Thread(target=load_forever)
    try:
        loader.start()
        for _ in range(2):
            # Kill the service while batches are going through.
            base = len(stored(control))
            assert wait_for(lambda b=base: len(stored(control)) > b + 60, 90), (tmp_path / "edge.log").read_text()
            control.kill()
            time.sleep(1.5)  # both sides spool meanwhile
            control.start()
        assert wait_for(lambda: len(runs) >= 3, 120)
        halt.set()
        loader.join(timeout=180)
        assert not loader.is_alive()
        stop(edge)  # SIGTERM: the edge seals its last batch and sends it before it exits
        bad = [r for r in runs if r.returncode != 0]
        assert not bad, bad[0].stderr
        # The last client run exited with the service up: its spool is empty.
        assert spooled_batches(client_spool) == 0 and spooled_batches(tmp_path / "edge-spool") == 0
        written_edge, written_client = lines(tmp_path / "edge.jsonl"), lines(client_jsonl)
        assert len(written_edge) >= 120 and len(written_client) >= 120
        got = stored(control)
        assert Counter(key(r) for r in got if r["side"] == "edge") == Counter(key(r) for r in written_edge)
        assert Counter(key(r) for r in got if r["side"] == "client") == Counter(key(r) for r in written_client)
        # The kills did cut uploads: both sides saw the service unreachable and retried.
        assert "upload failed" in (tmp_path / "edge.log").read_text()
        assert any("upload failed" in r.stderr or "left in the spool" in r.stderr for r in runs)
    finally:
        halt.set()
        loader.join(timeout=180)
        stop(edge)
        control.stop()


def test_native_edge_swaps_a_pushed_table_refuses_corrupt_ones_and_restarts_from_the_copy_on_disk(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", "store")
    policies = tmp_path / "policies"
    current = policies / "tcpwise" / "current"
    edge = None
    try:
        edge, port = start_edge(gearbox_bin, control, tmp_path, "edge", "--policies", str(policies), "--poll-s", "0.2")
        origin = f"https://127.0.0.1:{port}"

        def fetch() -> list[int] | None:
            # A new client: a new QUIC connection, which takes the table's window at accept.
            before = len(lines(tmp_path / "edge.jsonl"))
            with gearbox.Client(ca=str(control.cert)) as c:
                c.get(f"{origin}/bytes/2000", transport="quic")

            def served() -> list[dict]:
                return [r for r in lines(tmp_path / "edge.jsonl")[before:] if r.get("path") == "/bytes/2000"]

            assert wait_for(lambda: served() != [], 30)
            return (served()[-1].get("iw") or {}).get("iw_set")

        # No table yet: the default window.
        assert fetch() is None
        t1 = TABLE.replace("iw = [10, 15]", "iw = [20, 25]")
        assert "iw = [20, 25]" in t1
        assert _push(control, "tcpwise", policy_dir(tmp_path, "v1", t1), "--activate")[0] == 0
        assert wait_for(lambda: fetch() == [20, 25], 60, every_s=0.3), (tmp_path / "edge.log").read_text()
        assert os.readlink(current) == "v1"

        # A corrupt artifact: v2's stored bytes damaged after the push. Refused, v1 stays.
        v2 = policy_dir(tmp_path, "v2", t1.replace("iw = [20, 25]", "iw = [30, 35]"))
        assert _push(control, "tcpwise", v2)[0] == 0
        with control.http("admin") as admin:
            sha2 = admin.get("/v1/policies/tcpwise/versions").json()["versions"][1]["sha256"]
        blob = control.directory / "store" / "blobs" / sha2
        blob.write_bytes(blob.read_bytes().replace(b"iw = [30, 35]", b"iw = [90, 95]"))
        _activate(control, "tcpwise", 2)
        log = tmp_path / "edge.log"
        assert wait_for(lambda: "sha256 mismatch" in log.read_text(), 30), log.read_text()
        # A table that does not parse (a window above its cap): the edge's loader refuses it.
        v3 = policy_dir(tmp_path, "v3", t1.replace("iw = [20, 25]", "iw = [20, 2500]"))
        assert _push(control, "tcpwise", v3, "--activate")[0] == 0
        assert wait_for(lambda: "refused by the loader" in log.read_text(), 30), log.read_text()
        assert os.readlink(current) == "v1" and not (policies / "tcpwise" / "v3").exists()
        assert fetch() == [20, 25]
        with control.http("admin") as admin:
            peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}
        assert peers["edge"]["policies"] == {"tcpwise": 1}

        # A good one during the run is swapped in.
        v4 = policy_dir(tmp_path, "v4", t1.replace("iw = [20, 25]", "iw = [40, 45]"))
        assert _push(control, "tcpwise", v4, "--activate")[0] == 0
        assert wait_for(lambda: fetch() == [40, 45], 60, every_s=0.3), log.read_text()
        assert os.readlink(current) == "v4"

        # The control plane down: a restarted edge starts from the copy on disk, and spools.
        stop(edge)
        control.stop()
        edge, port = start_edge(
            gearbox_bin, control, tmp_path, "edge-2", "--policies", str(policies), "--poll-s", "0.2"
        )
        origin = f"https://127.0.0.1:{port}"
        assert fetch() == [40, 45]
        assert fetch() == [40, 45]
        control.start()
        stop(edge)
        edge = None
        written = lines(tmp_path / "edge.jsonl")
        assert Counter(key(r) for r in stored(control) if r["side"] == "edge") == Counter(key(r) for r in written)
    finally:
        if edge is not None:
            stop(edge)
        control.stop()


def test_native_control_flags_are_checked_before_the_edge_starts(gearbox_bin: Path, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)

    def edge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(gearbox_bin), "edge", "--listen", f"127.0.0.1:{free_port()}", "--cert", str(cert), "--key", str(key)]
            + list(args),
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = edge("--token", "x")
    assert r.returncode != 0 and "--token needs --control URL" in r.stderr
    r = edge("--control", "https://127.0.0.1:1", "--control-ca", "ca.pem")
    assert r.returncode != 0 and "control: token" in r.stderr
    r = edge("--control", "http://127.0.0.1:1", "--token", "t", "--control-ca", "ca.pem")
    assert r.returncode != 0 and "HTTPS only" in r.stderr

    def get(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(gearbox_bin), "get", "https://127.0.0.1:9/", "--control", "https://127.0.0.1:1", "--token", "t"]
            + ["--control-ca", str(cert), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    # The client polls its transport gear's models: only a gear that runs models takes --policies.
    r = get("--policies", str(tmp_path / "p"))
    assert r.returncode != 0 and "which decide only `--proto auto` requests" in r.stderr
    r = get("--policies", str(tmp_path / "p"), "--gear", "race")
    assert r.returncode != 0 and "the transport gear race runs no model to poll" in r.stderr
    r = get("--poll-s", "1")
    assert r.returncode != 0 and "give --policies DIR too" in r.stderr
    missing = tmp_path / "no-such-ca.pem"
    r = edge("--control", "https://127.0.0.1:1", "--token", "t", "--control-ca", str(missing))
    assert r.returncode != 0 and str(missing) in r.stderr


def test_the_loop_scenario_stores_every_record_once_and_the_edge_takes_the_table_pushed_during_the_run(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """`gearbox control loop` (docs/control.md, "The loop scenario"), short."""
    from gearbox.control.loop import run_loop

    r = run_loop(tmp_path / "loop", duration_s=4.0, push_at_s=1.0, requests=10, poll_s=0.5, gearbox=gearbox_bin)
    assert r["ok"], r
    assert r["sides"]["edge"]["written"] > 0 and r["sides"]["client"]["written"] > 0
    assert r["push_to_swap_ms"] is not None and r["push_to_first_use_ms"] is not None


def test_native_edge_swaps_a_pushed_floo_model_and_refuses_one_that_does_not_load(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", "store")
    policies = tmp_path / "policies"
    current = policies / "floo" / "current"
    floo = ["--gear", "floo", "--period-s", "0.5", "--policies", str(policies), "--poll-s", "0.2"]
    edge = None
    try:
        edge, _ = start_edge(gearbox_bin, control, tmp_path, "edge", *floo)
        log = tmp_path / "edge.log"
        assert _push(control, "floo", REPO / "models" / "floo", "--activate")[0] == 0
        assert wait_for(lambda: os.path.islink(current), 60), log.read_text()
        assert os.readlink(current) == "v1" and "policy swapped" in log.read_text()
        # A model that does not load (its policy file damaged; the sidecar still valid): refused.
        broken = tmp_path / "floo-broken"
        shutil.copytree(REPO / "models" / "floo", broken)
        (broken / "policy.json").write_text('{"not": "a model"}')
        assert _push(control, "floo", broken, "--activate")[0] == 0
        assert wait_for(lambda: "refused by the loader" in log.read_text(), 60), log.read_text()
        assert os.readlink(current) == "v1" and not (policies / "floo" / "v2").exists()
        with control.http("admin") as admin:
            peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}
        assert peers["edge"]["policies"] == {"floo": 1}
        # Restarted while the control plane is down: Floo runs the copy on disk.
        stop(edge)
        control.stop()
        edge, _ = start_edge(gearbox_bin, control, tmp_path, "edge-2", *floo)
        assert wait_for(lambda: "policy poll failed" in (tmp_path / "edge-2.log").read_text(), 30)
        assert "no usable model" not in (tmp_path / "edge-2.log").read_text()
    finally:
        if edge is not None:
            stop(edge)
        control.stop()


def _decision_policies(records: list[dict]) -> list[int | None]:
    from gearbox.lab.control import policy_version

    return [policy_version(r) for r in sorted(records, key=lambda r: r["time_unix_ms"])]


def test_native_client_swaps_pushed_transport_models_mid_run_refuses_corrupt_ones_and_restarts_from_disk(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """`gearbox load|get --control ... --policies DIR` (docs/control.md, "The client's policies"):
    WiseTrans' models pushed during a run are taken by the running client, every record names the
    version that chose its transport, a corrupt or unloadable version is refused with the running
    one kept, and a client started while the control plane is down runs the copy on disk."""
    control = control_plane(tmp_path / "control", "store")
    policies = tmp_path / "client-policies"
    current = policies / "wisetrans" / "current"
    client_jsonl = tmp_path / "client.jsonl"
    edge = None

    def client_flags() -> list[str]:
        return control_flags(control, "client", tmp_path / "client-spool") + [
            "--policies",
            str(policies),
            "--poll-s",
            "0.2",
            "--proto",
            "auto",
            "--gear",
            "wisetrans-v2",
            "--ca",
            str(control.cert),
        ]

    def get(port: int, log: str) -> dict:
        r = subprocess.run(
            [str(gearbox_bin), "--log", "info", "get", f"https://127.0.0.1:{port}/bytes/3000"]
            + ["--out", str(client_jsonl)]
            + client_flags(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        (tmp_path / log).write_text(r.stderr)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    try:
        edge, port = start_edge(gearbox_bin, control, tmp_path, "edge")
        assert _push(control, "wisetrans", REPO / "models" / "wisetrans", "--activate")[0] == 0
        # `get` polls once before its request: version 1 decides it and is kept on disk.
        assert _decision_policies([get(port, "get-first.log")]) == [1]
        assert os.readlink(current) == "v1"
        # A run of `gearbox load` long enough for a push in its middle (feed: clicks of ~13 requests).
        load = subprocess.Popen(
            [str(gearbox_bin), "--log", "info", "load", "--workload", "feed", "--duration-s", "240"]
            + ["--time-scale", "0.05", "--target", f"https://127.0.0.1:{port}"]
            + ["--telemetry", str(client_jsonl)]
            + client_flags(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "load.log").open("wb"),
        )
        try:
            assert wait_for(lambda: 1 in _decision_policies(lines(client_jsonl)), 60), (
                tmp_path / "load.log"
            ).read_text()
            assert _push(control, "wisetrans", REPO / "models" / "wisetrans-bbr", "--activate")[0] == 0
            assert load.wait(timeout=180) == 0, (tmp_path / "load.log").read_text()
        finally:
            if load.poll() is None:
                load.kill()
        seen = _decision_policies(lines(client_jsonl))
        # The run starts from the copy on disk (1) and takes the push (2) without a restart:
        # version 1, then version 2 (requests of one click start together, so at the swap their
        # start times may interleave by a little).
        assert set(seen) == {1, 2} and seen[1] == 1 and seen[-1] == 2, seen
        assert sum(a != b for a, b in zip(seen, seen[1:], strict=False)) <= 3, seen
        assert os.readlink(current) == "v2"
        log = (tmp_path / "load.log").read_text()
        assert "policy swapped" in log and "new models in use" in log

        # A corrupt artifact (v3's stored bytes damaged after the push): the sha256 check refuses it.
        assert _push(control, "wisetrans", REPO / "models" / "wisetrans")[0] == 0
        with control.http("admin") as admin:
            sha3 = admin.get("/v1/policies/wisetrans/versions").json()["versions"][2]["sha256"]
        blob = control.directory / "store" / "blobs" / sha3
        damaged = bytearray(blob.read_bytes())
        damaged[len(damaged) // 2] ^= 0x55
        blob.write_bytes(bytes(damaged))
        _activate(control, "wisetrans", 3)
        r = get(port, "get-corrupt.log")
        assert _decision_policies([r]) == [2]
        assert "sha256 mismatch" in (tmp_path / "get-corrupt.log").read_text()
        # Models that do not load (a damaged model file, its sidecar intact): the loader refuses them.
        broken = tmp_path / "wisetrans-broken"
        shutil.copytree(REPO / "models" / "wisetrans", broken)
        (broken / "quic.json").write_text('{"learner": "not a model"}')
        assert _push(control, "wisetrans", broken, "--activate")[0] == 0
        r = get(port, "get-broken.log")
        assert _decision_policies([r]) == [2]
        assert "refused by the loader" in (tmp_path / "get-broken.log").read_text()
        assert os.readlink(current) == "v2" and not (policies / "wisetrans" / "v4").exists()
        with control.http("admin") as admin:
            peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}
        assert peers["client"]["policies"] == {"wisetrans": 2}

        # The control plane down: the client runs the copy on disk and spools its record.
        control.stop()
        r = get(port, "get-down.log")
        assert _decision_policies([r]) == [2]
        assert "policy poll failed" in (tmp_path / "get-down.log").read_text()
        control.start()
        get(port, "get-back.log")  # sends what the previous run left in the spool, then its own
        assert spooled_batches(tmp_path / "client-spool") == 0
        written = lines(client_jsonl)
        assert Counter(key(r) for r in stored(control) if r["side"] == "client") == Counter(key(r) for r in written)
    finally:
        if edge is not None:
            stop(edge)
        control.stop()


def test_the_python_client_uploads_its_records_with_control_and_a_later_client_sends_what_an_outage_left(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """`gearbox.Client(control={...})`: the records go to the spool and to the control plane, each
    stored once; records made while the service is down wait in the spool for the next client."""
    control = control_plane(tmp_path / "control", "store")
    edge = None
    telemetry = tmp_path / "client.jsonl"
    settings = {
        "url": control.url,
        "token": control.tokens["client"],
        "ca": str(control.cert),
        "spool": str(tmp_path / "spool"),
        "batch_records": 3,
    }
    try:
        edge, port = start_edge(gearbox_bin, control, tmp_path, "edge")
        with pytest.raises(ValueError, match="unknown field `tokn`"):
            gearbox.Client(control={**settings, "tokn": "x"})
        with pytest.raises(ValueError, match="no transport gear with models to poll"):
            gearbox.Client(control={**settings, "policies": str(tmp_path / "p")})
        with gearbox.Client(ca=str(control.cert), telemetry=str(telemetry), control=settings) as c:
            for transport in ("tcp", "quic", "h1", "tcp", "quic"):
                c.get(f"https://127.0.0.1:{port}/bytes/1500", transport=transport)
        control.stop()
        with gearbox.Client(ca=str(control.cert), telemetry=str(telemetry), control=settings) as c:
            for _ in range(4):
                c.get(f"https://127.0.0.1:{port}/bytes/700", transport="quic")
        assert spooled_batches(tmp_path / "spool") > 0  # the service was down: they wait
        control.start()
        with gearbox.Client(ca=str(control.cert), telemetry=str(telemetry), control=settings) as c:
            c.get(f"https://127.0.0.1:{port}/bytes/10", transport="tcp")
        assert spooled_batches(tmp_path / "spool") == 0
        written = lines(telemetry)
        assert len(written) == 10
        assert Counter(key(r) for r in stored(control) if r["side"] == "client") == Counter(key(r) for r in written)
    finally:
        if edge is not None:
            stop(edge)
        control.stop()
