"""A throw-away PostgreSQL server in a temporary folder (Debian's `postgresql` package: initdb and
pg_ctl from /usr/lib/postgresql/*/bin), for the tests and `gearbox bench control`.

PostgreSQL refuses to run as root; as root the server runs as `nobody` (runuser), its folder
owned by that user. Every step is bounded in time; `stop()` shuts it down and removes the folder.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


class PostgresError(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TempPostgres:
    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise PostgresError("PostgreSQL is not installed (Debian's postgresql package): run scripts/setup.sh")
        self.bindir = Path(found[-1]).parent
        self.prefix: list[str] = []
        uid = gid = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            self.prefix, uid, gid = ["runuser", "-u", "nobody", "--"], pw.pw_uid, pw.pw_gid
        # As root, in /tmp: `nobody` must reach the folder, which a root-only $TMPDIR would stop.
        self.root = Path(tempfile.mkdtemp(prefix="gearbox-pg-", dir="/tmp" if uid is not None else None))
        self.data, sock = self.root / "data", self.root / "sock"
        sock.mkdir()
        if uid is not None:
            for p in (self.root, sock):
                os.chown(p, uid, gid)
        self.port = _free_port()
        self.log = self.root / "server.log"
        self._env = {**os.environ, "LC_ALL": "C"}
        try:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
            opts = f"-p {self.port} -k {sock} -c listen_addresses=127.0.0.1"
            self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "60", "start")
        except BaseException:
            self.stop()
            raise
        self.url_base = f"postgresql://postgres@127.0.0.1:{self.port}"

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=120, env=self._env
        )
        if r.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise PostgresError(f"{tool} failed ({r.returncode}): {r.stderr.strip()}\n{log}")

    def database(self) -> str:
        """A fresh database; returns its URL."""
        import psycopg

        name = "g_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url_base + "/postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{self.url_base}/{name}"

    def server_pids(self) -> list[int]:
        """The postmaster and its children (for memory figures)."""
        try:
            master = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        pids = [master]
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == master:
                        pids.append(int(d.name))
                except (OSError, ValueError, IndexError):
                    pass
        return pids

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
            except (PostgresError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)
