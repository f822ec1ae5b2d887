"""Running a real `gearbox control serve` for the tests, with its own certificate, store and tokens;
and a real PostgreSQL server (Debian's `postgresql`) in a temporary folder.

Every wait is bounded; every process started here is stopped (SIGTERM, then SIGKILL) when the test
ends, passes or not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from support import free_port

from gearbox.control.pgtemp import PostgresError, TempPostgres

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
ROLES = ("edge", "client", "agent", "learner", "admin")


def make_cert(directory: Path) -> tuple[Path, Path]:
    """The project's certificate (`gearbox cert`'s code, through the native module)."""
    from gearbox import _native

    cert, key = directory / "cert.pem", directory / "key.pem"
    _native.make_cert(["localhost", "127.0.0.1"], str(cert), str(key))
    return cert, key


@dataclass
class Control:
    """A control plane in a subprocess: its URL, CA file, one token per role, its folder."""

    directory: Path
    config: Path
    port: int
    cert: Path
    store: str
    tokens: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: The service's module: the control plane, or one built on it (gearbox.flexhttp, the agent).
    module: str = "gearbox.control"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / f"serve-{self.starts}.log"

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gearbox.control", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.directory,
            env={**os.environ, "GEARBOX_CONTROL_URL": self.url, "GEARBOX_CONTROL_CA": str(self.cert)},
        )

    def token(self, role: str, name: str) -> str:
        """A token made in this process (the CLI's own test makes one with `token create`)."""
        from gearbox.control.store import open_store
        from gearbox.control.tokens import hash_token, new_token

        store = open_store(self.store, self.directory)
        try:
            token = new_token()
            store.add_token(hash_token(token), name, role)
        finally:
            store.close()
        return token

    def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "serve", "--config", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(verify=self.ssl(), timeout=2) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"control plane exited with {self.proc.returncode}:\n{self.log.read_text()}")
                try:
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.HTTPError:
                    time.sleep(0.1)
        raise RuntimeError(f"control plane not up within {START_TIMEOUT_S} s:\n{self.log.read_text()}")

    def ssl(self):  # noqa: ANN201
        from gearbox.control.client import _ssl_context

        return _ssl_context(self.cert)

    def http(self, role: str = "admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, verify=self.ssl(), timeout=30, headers=headers)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)


def write_config(directory: Path, port: int, cert: Path, key: Path, store: str, extra: str = "") -> Path:
    config = directory / "control.toml"
    config.write_text(
        f"""[server]
listen = "127.0.0.1:{port}"
cert = "{cert}"
key = "{key}"
store = "{store}"
max_body_bytes = 1048576
poll_interval_s = 1
flush_interval_s = 0.5

[groups]
canary = ["edge-canary"]
{extra}
"""
    )
    return config


def control_plane(directory: Path, store: str, extra: str = "", start: bool = True) -> Control:
    """A configured control plane with one token per role (named after the role)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = make_cert(directory)
    port = free_port()
    config = write_config(directory, port, cert, key, store, extra)
    c = Control(directory=directory, config=config, port=port, cert=cert, store=store)
    for role in ROLES:
        c.tokens[role] = c.token(role, role)
    if start:
        c.start()
    return c


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[TempPostgres]:
    """One server for the session (gearbox.control.pgtemp); each test takes a fresh database."""
    try:
        server = TempPostgres()
    except PostgresError as e:
        pytest.fail(str(e))
    try:
        yield server
    finally:
        server.stop()


def store_spec(kind: str, request: pytest.FixtureRequest) -> str:
    """`embedded` -> a folder name; `postgres` -> a fresh database's URL."""
    if kind == "embedded":
        return "store"
    return request.getfixturevalue("postgres").database()


def edge_record(i: int, **extra: object) -> dict:
    rec = {
        "side": "edge",
        "schema": 1,
        "time_unix_ms": time.time() * 1000,
        "conn_id": i,
        "client_addr": "10.1.2.3:5555",
        "protocol": "h2",
        "method": "GET",
        "path": f"/bytes/{i}",
        "status": 200,
        "bytes": 1000 + i,
        "server_time_ms": 12.5,
        "server_time_source": "tcp_unacked_zero",
        "transport": None,
        "error": None,
    }
    rec.update(extra)
    return rec


def client_record(i: int, **extra: object) -> dict:
    rec = {
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
        "bytes": 1000,
        "rct_ms": 20.0 + i % 7,
        "ttfb_ms": 10.0,
        "new_connection": i == 0,
        "handshake_ms": None,
        "transport": {
            "cc": "cubic",
            "rtt_ms": 10.0,
            "min_rtt_ms": 9.0,
            "rttvar_ms": None,
            "cwnd_bytes": 14600,
            "sent_packets": 10,
            "lost_packets": 0,
            "congestion_events": 0,
            "unacked_bytes": None,
            "delivery_rate_bps": None,
        },
        "decision": None,
        "click": None,
        "error": None,
    }
    rec.update(extra)
    return rec
