"""Running a real `gearbox edge` for the tests: binary lookup, ports, certificates, start, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDGE_START_TIMEOUT_S = 30.0
EDGE_STOP_TIMEOUT_S = 10.0


def find_gearbox_bin() -> Path | None:
    """$GEARBOX_BIN, else the newer of target/release/gearbox and target/debug/gearbox."""
    env = os.environ.get("GEARBOX_BIN")
    if env:
        return Path(env)
    built = [p for p in (REPO / "target/release/gearbox", REPO / "target/debug/gearbox") if p.is_file()]
    return max(built, key=lambda p: p.stat().st_mtime, default=None)


def free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 (the edge serves QUIC on the TCP port)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port free for both TCP and UDP")


def make_cert(gearbox_bin: Path, directory: Path, stem: str) -> tuple[Path, Path]:
    cert, key = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    subprocess.run(
        [str(gearbox_bin), "cert", "--name", "localhost,127.0.0.1", "--cert", str(cert), "--key", str(key)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass(frozen=True)
class Edge:
    """A running edge: its origin URL, the certificate that verifies it, its telemetry file."""

    origin: str
    port: int
    cert: Path
    telemetry: Path
    log: Path


def wait_until_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + EDGE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gearbox edge exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"gearbox edge did not listen on {port} within {EDGE_START_TIMEOUT_S} s:\n{log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=EDGE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=EDGE_STOP_TIMEOUT_S)


@contextmanager
def running_edge(
    gearbox_bin: Path, directory: Path, args: Sequence[str] = (), host: str = "127.0.0.1"
) -> Iterator[Edge]:
    """A `gearbox edge` on a free loopback port with a fresh certificate and its telemetry
    and log in `directory`, plus `args`; stopped on exit. `host` names the origin
    (`localhost` where Chromium needs a name for its flags)."""
    cert, key = make_cert(gearbox_bin, directory, "edge")
    port = free_port()
    telemetry, log = directory / "edge.jsonl", directory / "edge.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [str(gearbox_bin), "edge", "--listen", f"127.0.0.1:{port}", "--cert", str(cert), "--key", str(key)]
            + ["--telemetry", str(telemetry), *args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_listening(proc, port, log)
        yield Edge(origin=f"https://{host}:{port}", port=port, cert=cert, telemetry=telemetry, log=log)
    finally:
        stop(proc)
