"""`gearbox bench control` (a benchmark, not a test: it prints figures and judges nothing).

For each store (embedded; PostgreSQL in a throw-away server unless --no-postgres) it starts a real
`gearbox control serve` over HTTPS in a subprocess and measures, from this process:

- ingestion: `--records` client records sent as batches of 1,000 by 4 concurrent uploaders
  (bodies serialised beforehand, so the figure is the service's), records stored per second of
  wall time, checked against the store's count afterwards;
- polls: `--pollers` simulated pollers (each with its own edge token), `--polls` polls each, 64 in
  flight at once over keep-alive connections, every poll after the first with its ETag (304);
- memory: the service's peak resident set (VmHWM) after each phase, and PostgreSQL's resident
  memory (all its processes) at the end;
- the native uploader (docs/control.md, "Native upload and polling"): a spool of `--native-records`
  client records in sealed batches of 1,000, as a `gearbox` process leaves it after an outage,
  drained by `gearbox get --control ...` (the Rust uploader: one TLS connection per batch, batches
  in order); records stored per second of the process's wall time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from gearbox.control.client import _ssl_context
from gearbox.control.store import open_store
from gearbox.control.tokens import hash_token, new_token

BATCH = 1000
SENDERS = 4
IN_FLIGHT = 64


def _record(i: int) -> dict:
    return {
        "side": "client",
        "schema": 1,
        "time_unix_ms": time.time() * 1000,
        "conn_id": i,
        "server_addr": "127.0.0.1:4433",
        "local_addr": "127.0.0.1:40000",
        "protocol": "h3",
        "method": "GET",
        "url": f"https://127.0.0.1:4433/bytes/{i}",
        "status": 200,
        "bytes": 10_000,
        "rct_ms": 20.0 + i % 13,
        "ttfb_ms": 10.0,
        "new_connection": False,
        "handshake_ms": None,
        "transport": {
            "cc": "cubic",
            "rtt_ms": 10.0,
            "min_rtt_ms": 9.0,
            "rttvar_ms": 1.0,
            "cwnd_bytes": 14600,
            "sent_packets": 10,
            "lost_packets": 0,
            "congestion_events": None,
            "unacked_bytes": 0,
            "delivery_rate_bps": 80_000_000,
        },
        "decision": "static",
        "click": None,
        "error": None,
    }


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _rss_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class _Service:
    def __init__(self, root: Path, store: str, pollers: int) -> None:
        from gearbox import _native

        self.root = root
        cert, key = root / "cert.pem", root / "key.pem"
        _native.make_cert(["localhost", "127.0.0.1"], str(cert), str(key))
        self.cert, self.port = cert, _port()
        (root / "control.toml").write_text(
            f'[server]\nlisten = "127.0.0.1:{self.port}"\ncert = "{cert}"\nkey = "{key}"\nstore = "{store}"\n'
            "max_body_bytes = 16777216\n"
        )
        s = open_store(store, root)
        self.client_token, self.admin_token = new_token(), new_token()
        s.add_token(hash_token(self.client_token), "bench-client", "client")
        s.add_token(hash_token(self.admin_token), "bench-admin", "admin")
        self.poll_tokens = [new_token() for _ in range(pollers)]
        for i, t in enumerate(self.poll_tokens):
            s.add_token(hash_token(t), f"edge-{i}", "edge")
        s.close()
        self.log = (root / "serve.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gearbox.control", "serve", "--config", str(root / "control.toml")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        with httpx.Client(verify=_ssl_context(cert), timeout=2) as h:
            while True:
                try:
                    if h.get(f"{self.url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the service did not start: {(root / 'serve.log').read_text()}")
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()


def _ingest(svc: _Service, records: int) -> tuple[float, int]:
    bodies = []
    for start in range(0, records, BATCH):
        recs = [_record(i) for i in range(start, min(records, start + BATCH))]
        bodies.append(json.dumps({"records": recs}, separators=(",", ":")).encode())
    queue = list(enumerate(bodies))
    lock = threading.Lock()
    errors: list[str] = []

    def sender() -> None:
        with httpx.Client(
            verify=_ssl_context(svc.cert), timeout=120, headers={"Authorization": f"Bearer {svc.client_token}"}
        ) as h:
            while True:
                with lock:
                    if not queue:
                        return
                    _, body = queue.pop()
                r = h.post(
                    f"{svc.url}/v1/telemetry",
                    content=body,
                    headers={"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"},
                )
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"ingestion failed: {errors[0]}")
    with httpx.Client(verify=_ssl_context(svc.cert), timeout=120) as h:
        r = h.get(f"{svc.url}/v1/dashboard", headers={"Authorization": f"Bearer {svc.admin_token}"})
        stored = int(r.json()["records"])
    return records / elapsed, stored


async def _polls(svc: _Service, polls: int) -> tuple[float, int, int]:
    """The pollers share `IN_FLIGHT` keep-alive TLS connections, one request at a time on each,
    written and read here directly (HTTP/1.1 with Content-Length): httpx's client costs more CPU
    per request than the service, and would measure itself."""
    ctx = _ssl_context(svc.cert)
    host = f"127.0.0.1:{svc.port}"
    etags: list[str | None] = [None] * len(svc.poll_tokens)
    work = [(i, n) for n in range(polls) for i in range(len(svc.poll_tokens))]
    counts = {"200": 0, "304": 0, "other": 0}

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", svc.port, ssl=ctx)
        try:
            while work:
                i, _ = work.pop()
                extra = f"If-None-Match: {etags[i]}\r\n" if etags[i] else ""
                writer.write(
                    (
                        f"GET /v1/policies HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {svc.poll_tokens[i]}\r\n"
                        f"X-Gearbox-Policies: tcpwise=1\r\n{extra}\r\n"
                    ).encode()
                )
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                status = head.split(" ", 2)[1]
                length, etag = 0, None
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "etag":
                        etag = value.strip()
                if length:
                    await reader.readexactly(length)
                counts[status if status in counts else "other"] += 1
                if etag:
                    etags[i] = etag
        finally:
            writer.close()

    # Each poller polls once before any polls twice (the work list is popped from its end).
    work.reverse()
    t0 = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - t0
    if counts["other"]:
        raise RuntimeError(f"{counts['other']} polls failed")
    return (counts["200"] + counts["304"]) / elapsed, counts["200"], counts["304"]


def _push_policy(svc: _Service, root: Path) -> None:
    import hashlib

    from gearbox.control import policy as pol

    d = root / "policy"
    d.mkdir()
    (d / "cwnd.toml").write_text('version = 1\ncap = 100\n\n[[cluster]]\nprefix = "others"\niw = [10, 15]\n')
    meta = {"format_version": 1, "model_version": "bench", "training_data": {"sha256": hashlib.sha256(b"").hexdigest()}}
    (d / "cwnd.meta.json").write_text(json.dumps(meta))
    with httpx.Client(
        verify=_ssl_context(svc.cert), timeout=60, headers={"Authorization": f"Bearer {svc.admin_token}"}
    ) as h:
        r = h.post(f"{svc.url}/v1/policies/tcpwise/versions", content=pol.pack(d))
        r.raise_for_status()
        h.post(f"{svc.url}/v1/policies/tcpwise/activate", json={"version": 1}).raise_for_status()


def _peer_records(svc: _Service, name: str) -> int:
    with httpx.Client(
        verify=_ssl_context(svc.cert), timeout=60, headers={"Authorization": f"Bearer {svc.admin_token}"}
    ) as h:
        peers = h.get(f"{svc.url}/v1/peers").json()["peers"]
    return sum(int(p.get("records") or 0) for p in peers if p["name"] == name)


def _native_drain(svc: _Service, root: Path, records: int) -> str:
    """The Rust uploader draining a spool of `records` records; a line of figures."""
    from gearbox.lab.environment import LabError, find_gearbox

    try:
        gearbox = find_gearbox()
    except LabError as e:
        return f"native uploader: not measured ({e})"
    spool = root / "native-spool"
    spool.mkdir()
    for seq, start in enumerate(range(0, records, BATCH), start=1):
        lines = (json.dumps(_record(i), separators=(",", ":")) for i in range(start, min(records, start + BATCH)))
        (spool / f"{seq:012d}-{uuid.uuid4().hex}.batch.jsonl").write_text("\n".join(lines) + "\n")
    before = _peer_records(svc, "bench-client")
    t0 = time.perf_counter()
    # The request itself fails at once (nothing listens on port 9); the process then sends its
    # spool before it exits (for up to 5 s, its final_upload_ms).
    subprocess.run(
        [str(gearbox), "get", "https://127.0.0.1:9/", "--control", svc.url, "--token", svc.client_token]
        + ["--control-ca", str(svc.cert), "--spool", str(spool)],
        capture_output=True,
        timeout=120,
    )
    wall = time.perf_counter() - t0
    stored = _peer_records(svc, "bench-client") - before
    left = len(list(spool.glob("*.batch.jsonl")))
    return (
        f"native uploader: {stored / wall:,.0f} records/s ({stored} of {records} + 1 stored in {wall:.2f} s "
        f"by one `gearbox get`, {left} batches left in its spool)"
    )


def run_bench(records: int, pollers: int, polls: int, with_postgres: bool, native_records: int = 50_000) -> None:
    print(
        f"gearbox bench control: {records} records in batches of {BATCH} by {SENDERS} uploaders; "
        f"{pollers} pollers x {polls} polls, {IN_FLIGHT} in flight; {os.cpu_count()} CPUs"
    )
    stores: list[tuple[str, str | None]] = [("embedded", None)]
    if with_postgres:
        stores.append(("postgresql", "pg"))
    pg = None
    try:
        for label, kind in stores:
            with tempfile.TemporaryDirectory(prefix="gearbox-bench-control-") as tmp:
                root = Path(tmp)
                spec = "store"
                if kind == "pg":
                    from gearbox.control.pgtemp import TempPostgres

                    pg = pg or TempPostgres()
                    spec = pg.database()
                svc = _Service(root, spec, pollers)
                try:
                    cpu0 = _cpu_s(svc.proc.pid)
                    rate, stored = _ingest(svc, records)
                    cpu_ingest = _cpu_s(svc.proc.pid) - cpu0
                    rss_ingest = _rss_kib(svc.proc.pid, "VmHWM")
                    _push_policy(svc, root)
                    cpu0 = _cpu_s(svc.proc.pid)
                    t0 = time.perf_counter()
                    poll_rate, n200, n304 = asyncio.run(_polls(svc, polls))
                    poll_wall = time.perf_counter() - t0
                    cpu_poll = _cpu_s(svc.proc.pid) - cpu0
                    rss_poll = _rss_kib(svc.proc.pid, "VmHWM")
                    pg_rss = sum(_rss_kib(p, "VmRSS") for p in pg.server_pids()) if kind == "pg" and pg else 0
                    native = _native_drain(svc, root, native_records) if native_records > 0 else ""
                finally:
                    svc.stop()
                lost = records - stored
                pg_note = f"; PostgreSQL RSS {pg_rss / 1024:.0f} MiB (all its processes)" if kind == "pg" else ""
                print(
                    f"{label:>10}: ingestion {rate:,.0f} records/s ({stored} stored, {lost} missing; service CPU "
                    f"{cpu_ingest / records * 1e6:.0f} us/record); polls {poll_rate:,.0f} req/s ({n200} x 200, "
                    f"{n304} x 304; service CPU {cpu_poll / poll_wall * 100:.0f}% of one core, "
                    f"{cpu_poll / (n200 + n304) * 1e6:.0f} us/poll); service peak RSS "
                    f"{rss_ingest / 1024:.0f} MiB after ingestion, {rss_poll / 1024:.0f} MiB after polls" + pg_note
                )
                if native:
                    print(f"{label:>10}: {native}")
    finally:
        if pg is not None:
            pg.stop()
