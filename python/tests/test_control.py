"""The control plane (`gearbox control`, docs/control.md) as its users meet it: a real service over
HTTPS in a subprocess, with the embedded store and with a real PostgreSQL server, the same tests
against both."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from control_support import Control, client_record, control_plane, edge_record, store_spec
from control_support import postgres as postgres  # noqa: F401 (fixture)

from gearbox.control import policy as pol
from gearbox.control.client import PolicyPoller, Uploader, wait_for
from gearbox.control.schema import validate

STORES = ["embedded", "postgres"]

TABLE = """version = 1
cap = 100

[[cluster]]
prefix = "others"
iw = [10, 15]
"""


def policy_dir(root: Path, name: str = "p", table: str = TABLE, training: bytes = b"train-1") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "cwnd.toml").write_text(table)
    (d / "train.csv").write_bytes(training)
    meta = {
        "format_version": 1,
        "model_version": name,
        "training_data": {"sha256": hashlib.sha256(training).hexdigest(), "file": "train.csv", "rows": 1},
    }
    (d / "cwnd.meta.json").write_text(json.dumps(meta))
    return d


@pytest.fixture(params=STORES)
def control(request: pytest.FixtureRequest, tmp_path: Path):  # noqa: ANN201
    c = control_plane(tmp_path / "control", store_spec(request.param, request))
    try:
        yield c
    finally:
        c.stop()


# --- schema ---------------------------------------------------------------------------------------


def test_schema_accepts_the_records_the_data_plane_writes_and_names_the_field_of_a_bad_one() -> None:
    assert validate(edge_record(1)) is None
    assert validate(edge_record(1, iw={"iw": 15, "source": "table", "cluster": "others"})) is None
    assert validate(client_record(1)) is None
    assert validate({"side": "edge", "schema": 1, "time_unix_ms": 1.0, "conn_id": 3, "event": "cc_switch"}) is None
    assert validate(edge_record(1, bytes="many"))[0] == "bytes"
    assert validate(edge_record(1, status=None)) is None
    assert validate(client_record(1, rct_ms=float("nan")))[0] == "rct_ms"
    assert validate(client_record(1, protocol="h4"))[0] == "protocol"
    bad_transport = client_record(1)
    bad_transport["transport"]["cwnd_bytes"] = None
    assert validate(bad_transport)[0] == "transport.cwnd_bytes"
    missing = client_record(1)
    del missing["url"]
    assert validate(missing) == ("url", "missing")
    assert validate(edge_record(1, schema=2))[0] == "schema"
    assert validate(edge_record(1, iw={"iw": "x", "source": "table"}))[0] == "iw.iw"
    assert validate([1])[0] == ""
    assert validate({"side": "middle"})[0] == "side"


# --- auth, limits, bad input ----------------------------------------------------------------------


def test_tokens_roles_size_limit_and_bad_input(control: Control) -> None:
    batch = {"records": [edge_record(1)]}
    made = control.cli("token", "create", "--role", "edge", "--name", "edge-9", "--config", str(control.config))
    assert made.returncode == 0 and made.stdout.startswith("gbx_"), made.stderr
    listed = control.cli("token", "list", "--config", str(control.config))
    assert "edge-9\tedge" in listed.stdout and made.stdout.strip() not in listed.stdout
    bad = control.cli("token", "create", "--role", "edge", "--name", "bad name", "--config", str(control.config))
    assert bad.returncode == 2 and "--name" in bad.stderr
    with httpx.Client(verify=control.ssl()) as h:
        r = h.get(f"{control.url}/v1/policies", headers={"Authorization": f"Bearer {made.stdout.strip()}"})
        assert r.status_code == 200
    with control.http("") as anon:
        assert anon.post("/v1/telemetry", json=batch, headers={"Idempotency-Key": "k"}).status_code == 401
        r = anon.post(
            "/v1/telemetry", json=batch, headers={"Idempotency-Key": "k", "Authorization": "Bearer not-a-token"}
        )
        assert r.status_code == 401 and r.json()["detail"] == "unknown token"
    with control.http("learner") as learner:
        r = learner.post("/v1/telemetry", json=batch, headers={"Idempotency-Key": "k"})
        assert r.status_code == 403 and "learner" in r.json()["detail"]
        assert learner.post("/v1/policies/tcpwise/activate", json={"version": 1}).status_code == 403
    with control.http("edge") as edge:
        assert edge.get("/v1/peers").status_code == 403
        assert edge.get("/v1/telemetry").status_code == 403
        # Oversized: declared, and streamed without a length.
        big = b"x" * (1024 * 1024 + 1)
        r = edge.post("/v1/telemetry", content=big, headers={"Idempotency-Key": "big"})
        assert r.status_code == 413 and "exceeds the limit" in r.json()["detail"]
        r = edge.post("/v1/telemetry", content=iter([big[:600_000], big[600_000:]]), headers={"Idempotency-Key": "b2"})
        assert r.status_code == 413
        r = edge.post("/v1/telemetry", content=b"{not json", headers={"Idempotency-Key": "m"})
        assert r.status_code == 400 and r.json()["detail"].startswith("body: malformed JSON")
        r = edge.post("/v1/telemetry", json={"rows": []}, headers={"Idempotency-Key": "m2"})
        assert r.status_code == 400 and r.json()["detail"].startswith("records:")
        assert edge.post("/v1/telemetry", json=batch).status_code == 400  # no Idempotency-Key
        # One bad record: rejected naming its field and counted; the rest kept.
        records = [edge_record(i) for i in range(5)]
        records[2]["status"] = "ok"
        r = edge.post("/v1/telemetry", json={"records": records}, headers={"Idempotency-Key": "partial"})
        assert r.status_code == 400
        body = r.json()
        assert body["stored"] == 4 and body["rejected"] == 1
        assert body["errors"] == [{"index": 2, "field": "status", "reason": "expected an integer, found str 'ok'"}]
        assert "record 2: status" in body["detail"]
    with control.http("admin") as admin:
        stored = [json.loads(line) for line in admin.get("/v1/telemetry").text.splitlines()]
        assert sorted(r["conn_id"] for r in stored) == [0, 1, 3, 4]
        peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}
        assert peers["edge"]["records"] == 4 and peers["edge"]["rejected"] == 1
        schema = admin.get("/v1/openapi.json").json()
        assert "/v1/telemetry" in schema["paths"] and "/v1/policies" in schema["paths"]


def test_a_retried_batch_is_stored_once(control: Control) -> None:
    records = [client_record(i) for i in range(50)]
    with control.http("client") as client:
        first = client.post("/v1/telemetry", json={"records": records}, headers={"Idempotency-Key": "b-1"})
        again = client.post("/v1/telemetry", json={"records": records}, headers={"Idempotency-Key": "b-1"})
        assert first.status_code == again.status_code == 200
        assert first.json() == {"stored": 50, "rejected": 0, "duplicate": False}
        assert again.json() == {"stored": 50, "rejected": 0, "duplicate": True}
        other = client.post("/v1/telemetry", json={"records": records[:3]}, headers={"Idempotency-Key": "b-2"})
        assert other.json()["duplicate"] is False
    with control.http("admin") as admin:
        stored = admin.get("/v1/telemetry", params={"side": "client"}).text.splitlines()
        assert len(stored) == 53
        # The same key from another peer is another batch.
    with control.http("edge") as edge:
        r = edge.post("/v1/telemetry", json={"records": [edge_record(9)]}, headers={"Idempotency-Key": "b-1"})
        assert r.json()["duplicate"] is False


# --- policy registry ------------------------------------------------------------------------------


def _push(control: Control, gear: str, d: Path, *extra: str) -> tuple[int, str]:
    r = control.cli("policy", "push", gear, str(d), "--token", control.tokens["admin"], *extra)
    return r.returncode, r.stdout + r.stderr


def test_policy_push_activate_poll_rollback(control: Control, tmp_path: Path) -> None:
    # Refused: no sidecar; a training data file that is not the recorded one; a stated sha256
    # that is not the upload's; --training-data that the sidecar does not record.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "cwnd.toml").write_text(TABLE)
    rc, out = _push(control, "tcpwise", bare)
    assert rc == 2 and "no sidecar" in out
    wrong = policy_dir(tmp_path, "wrong")
    (wrong / "train.csv").write_bytes(b"other data")
    rc, out = _push(control, "tcpwise", wrong)
    assert rc == 2 and "training data digest mismatch" in out
    good = policy_dir(tmp_path, "v1")
    other_data = tmp_path / "other.csv"
    other_data.write_bytes(b"not it")
    rc, out = _push(control, "tcpwise", good, "--training-data", str(other_data))
    assert rc == 2 and "training data digest mismatch" in out
    data = pol.pack(good)
    with control.http("learner") as learner:
        r = learner.post("/v1/policies/tcpwise/versions", content=data, headers={"X-Gearbox-SHA256": "0" * 64})
        assert r.status_code == 400 and "sha256 mismatch" in r.json()["detail"]
        r = learner.post("/v1/policies/tcpwise/versions", content=pol.pack(bare))
        assert r.status_code == 400 and "no sidecar" in r.json()["detail"]
    with control.http("admin") as admin:
        assert admin.get("/v1/policies/tcpwise/versions").json()["versions"] == []

    rc, out = _push(control, "tcpwise", good, "--training-data", str(good / "train.csv"), "--activate")
    assert rc == 0, out
    assert "tcpwise version 1" in out and "active in global" in out
    rc, out = _push(control, "tcpwise", policy_dir(tmp_path, "v2", TABLE.replace("version = 1", "version = 2")))
    assert rc == 0, out

    with control.http("edge") as edge:
        r = edge.get("/v1/policies")
        etag = r.headers["etag"]
        assert r.json()["policies"]["tcpwise"]["version"] == 1
        assert edge.get("/v1/policies", headers={"If-None-Match": etag}).status_code == 304
        act = control.cli("policy", "activate", "tcpwise", "2", "--token", control.tokens["admin"])
        assert act.returncode == 0, act.stderr
        r = edge.get("/v1/policies", headers={"If-None-Match": etag})
        assert r.status_code == 200 and r.json()["policies"]["tcpwise"]["version"] == 2
        art = edge.get(r.json()["policies"]["tcpwise"]["url"])
        assert hashlib.sha256(art.content).hexdigest() == r.json()["policies"]["tcpwise"]["sha256"]
        assert pol.unpack_files(art.content)["cwnd.toml"].decode().startswith("version = 2")
        rb = control.cli("policy", "rollback", "tcpwise", "--token", control.tokens["admin"])
        assert rb.returncode == 0 and "rolled back to version 1" in rb.stdout, rb.stderr
        assert edge.get("/v1/policies").json()["policies"]["tcpwise"]["version"] == 1
        # Rollback to any earlier version, by number.
        rb = control.cli("policy", "rollback", "tcpwise", "--to", "2", "--token", control.tokens["admin"])
        assert rb.returncode == 0, rb.stderr
        assert edge.get("/v1/policies").json()["policies"]["tcpwise"]["version"] == 2
    # A group scope: the canary edge runs version 1, everyone else version 2.
    act = control.cli("policy", "activate", "tcpwise", "1", "--scope", "canary", "--token", control.tokens["admin"])
    assert act.returncode == 0, act.stderr
    bad = control.cli("policy", "activate", "tcpwise", "1", "--scope", "nope", "--token", control.tokens["admin"])
    assert bad.returncode == 2 and "scope" in bad.stderr
    canary = control.token("edge", "edge-canary")
    with control.http("edge") as edge:
        assert edge.get("/v1/policies").json()["policies"]["tcpwise"]["version"] == 2
        r = edge.get("/v1/policies", headers={"Authorization": f"Bearer {canary}"})
        assert r.json()["policies"]["tcpwise"] == {**r.json()["policies"]["tcpwise"], "version": 1, "scope": "canary"}
    with control.http("admin") as admin:
        listing = admin.get("/v1/policies/tcpwise/versions").json()
        assert [v["version"] for v in listing["versions"]] == [1, 2]
        v1 = listing["versions"][0]
        assert v1["who"] == "admin" and v1["training_digest"] == hashlib.sha256(b"train-1").hexdigest()
        assert v1["sha256"] == hashlib.sha256(pol.pack(good)).hexdigest()
        assert listing["active"] == {"global": 2, "canary": 1}
        assert [h["action"] for h in listing["history"]] == ["activate", "activate", "rollback", "rollback", "activate"]


def _activate(control: Control, gear: str, version: int) -> None:
    with control.http("admin") as admin:
        r = admin.post(f"/v1/policies/{gear}/activate", json={"version": version})
        assert r.status_code == 200, r.text


def test_poller_swaps_keeps_the_last_good_copy_and_refuses_a_corrupt_artifact(tmp_path: Path) -> None:
    control = control_plane(tmp_path / "control", "store")
    try:
        assert _push(control, "tcpwise", policy_dir(tmp_path, "v1"), "--activate")[0] == 0
        loaded: list[tuple[str, str]] = []

        def accept(gear: str, path: Path) -> None:
            # The edge's part: load the new policy beside the old one; a bad one raises.
            text = (path / "cwnd.toml").read_text()
            if "cap = 100" not in text:
                raise ValueError("not a table this edge accepts")
            loaded.append((gear, text.splitlines()[0]))

        root = tmp_path / "policies"
        poller = PolicyPoller(control.url, control.tokens["edge"], root, control.cert, accept=accept)
        assert [a.version for a in poller.poll_once()] == [1]
        assert (root / "tcpwise" / "current" / "cwnd.toml").read_text() == TABLE
        assert poller.poll_once() == []  # 304
        # A corrupt artifact (the stored bytes damaged) is refused: sha256 mismatch, v1 stays.
        v2 = policy_dir(tmp_path, "v2", TABLE.replace("version = 1", "version = 2"))
        assert _push(control, "tcpwise", v2)[0] == 0
        _activate(control, "tcpwise", 2)
        with control.http("admin") as admin:
            sha2 = admin.get("/v1/policies/tcpwise/versions").json()["versions"][1]["sha256"]
        blob = control.directory / "store" / "blobs" / sha2
        blob.write_bytes(blob.read_bytes().replace(b"version = 2", b"version = 9"))
        assert poller.poll_once() == []
        assert "sha256 mismatch" in poller.refused[-1]
        assert poller.current()["tcpwise"].version == 1
        assert (root / "tcpwise" / "current" / "cwnd.toml").read_text() == TABLE
        # A policy the loader refuses is not swapped in either.
        assert _push(control, "tcpwise", policy_dir(tmp_path, "v3", TABLE.replace("cap = 100", "cap = 50")))[0] == 0
        _activate(control, "tcpwise", 3)
        assert poller.poll_once() == []
        assert "refused by the loader" in poller.refused[-1] and poller.current()["tcpwise"].version == 1
        # A good one is.
        v4 = policy_dir(tmp_path, "v4", TABLE.replace("version = 1", "version = 4"))
        assert _push(control, "tcpwise", v4)[0] == 0
        _activate(control, "tcpwise", 4)
        assert [a.version for a in poller.poll_once()] == [4]
        assert loaded == [("tcpwise", "version = 1"), ("tcpwise", "version = 4")]
        poller.close()
        # The dashboard's peers know which version the edge runs.
        PolicyPoller(control.url, control.tokens["edge"], root, control.cert).poll_once()
        with control.http("admin") as admin:
            peers = {p["name"]: p for p in admin.get("/v1/peers").json()["peers"]}
            assert peers["edge"]["policies"] == {"tcpwise": 4}
        # The control plane down: a restarted poller starts from the copy on disk.
        control.stop()
        restarted = PolicyPoller(control.url, control.tokens["edge"], root, control.cert)
        with pytest.raises(httpx.HTTPError):
            restarted.poll_once()
        assert restarted.current()["tcpwise"].version == 4
        assert (restarted.current()["tcpwise"].path / "cwnd.toml").read_text().startswith("version = 4")
        restarted.close()
    finally:
        control.stop()


# --- nothing lost ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STORES)
def test_kill_the_control_plane_mid_upload_every_record_stored_once(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", store_spec(kind, request))
    uploaders = {
        "edge": Uploader(control.url, control.tokens["edge"], tmp_path / "spool-edge", control.cert, batch_records=50),
        "client": Uploader(
            control.url, control.tokens["client"], tmp_path / "spool-client", control.cert, batch_records=50
        ),
    }
    written: dict[str, int] = {"edge": 0, "client": 0}
    stop = threading.Event()
    kills = 0

    def produce(side: str) -> None:
        make = edge_record if side == "edge" else client_record
        up = uploaders[side]
        while not stop.is_set():
            up.add_many(make(written[side] + i) for i in range(25))
            written[side] += 25
            up.flush()
            time.sleep(0.002)

    threads = [threading.Thread(target=produce, args=(s,)) for s in uploaders]
    try:
        for t in threads:
            t.start()
        for _ in range(2):
            # Wait until batches are going through, then kill the service in the middle of them.
            base = sum(u.stats.sent_batches for u in uploaders.values())
            assert wait_for(lambda b=base: sum(u.stats.sent_batches for u in uploaders.values()) > b + 10, 60)
            control.kill()
            kills += 1
            time.sleep(0.3)  # uploads fail meanwhile and stay in the spool
            control.start()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        for up in uploaders.values():
            assert wait_for(up.flush, 60, every_s=0.2), "the spool did not drain"
        assert kills == 2
        assert sum(u.stats.failures for u in uploaders.values()) > 0, "no upload was cut by the kills"
        with control.http("admin") as admin:
            stored = [json.loads(line) for line in admin.get("/v1/telemetry").text.splitlines()]
        for side in ("edge", "client"):
            ids = Counter(r["conn_id"] for r in stored if r["side"] == side)
            assert written[side] > 0
            assert sorted(ids) == list(range(written[side])), f"{side}: records lost"
            assert max(ids.values()) == 1, f"{side}: records stored twice"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        for up in uploaders.values():
            up.close()
        control.stop()


def test_uploader_spools_while_the_control_plane_is_down_and_bounds_the_spool(tmp_path: Path) -> None:
    control = control_plane(tmp_path / "control", "store", start=False)
    up = Uploader(control.url, control.tokens["edge"], tmp_path / "spool", control.cert, batch_records=10)
    try:
        up.add_many(edge_record(i) for i in range(35))
        assert up.flush() is False and up.spooled() == 4
        # Resent from the spool by a new uploader (the process restarted), once the service is up.
        up.close()
        control.start()
        up = Uploader(control.url, control.tokens["edge"], tmp_path / "spool", control.cert, batch_records=10)
        assert up.flush() is True and up.spooled() == 0 and up.stats.sent_records == 35
        # Bounded: a full spool drops its oldest batches and counts them.
        control.stop()
        small = Uploader(
            control.url,
            control.tokens["edge"],
            tmp_path / "spool2",
            control.cert,
            batch_records=10,
            max_spool_bytes=8000,
        )
        small.add_many(edge_record(i) for i in range(100))
        small.seal()
        assert small.stats.dropped_batches > 0
        assert sum(p.stat().st_size for p in (tmp_path / "spool2").glob("*.batch.json")) <= 8000
        small.close()
    finally:
        up.close()
        control.stop()
    assert os.path.isdir(tmp_path / "spool")


def test_embedded_store_merges_small_files_and_forgets_files_no_commit_recorded(tmp_path: Path) -> None:
    from gearbox.control.store import EmbeddedStore, telemetry_row

    store = EmbeddedStore(tmp_path / "store")
    for b in range(20):
        rows = [telemetry_row("edge-1", edge_record(b * 10 + i), 1000 + b) for i in range(10)]
        assert not store.ingest("edge-1", "edge", f"k{b}", rows, 200, {"stored": 10, "rejected": 0}).duplicate
    files = sorted((tmp_path / "store" / "telemetry").rglob("*.parquet"))
    assert len(files) == 20 and all("/source=edge-1/" in str(f) and "/day=" in str(f) for f in files)
    store.flush()
    merged = sorted((tmp_path / "store" / "telemetry").rglob("*.parquet"))
    assert len(merged) == 1 and merged[0].name.startswith("c-")
    assert sorted(r["conn_id"] for r in store.records()) == list(range(200))
    assert store.count_records() == 200
    assert sorted(r["conn_id"] for r in store.records(received=(1005, 1007))) == list(range(50, 70))
    store.close()
    # A file written for a batch whose transaction never committed (the service killed in between).
    stray = merged[0].with_name("b-stray.parquet")
    stray.write_bytes(merged[0].read_bytes())
    store = EmbeddedStore(tmp_path / "store")
    assert not stray.exists()
    assert store.count_records() == 200 and len(store.records()) == 200
    store.close()
