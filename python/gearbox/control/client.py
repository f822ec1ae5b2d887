"""The edge's and client's side of the control plane: an uploader that never loses a record and a
poller that hot-swaps policies (docs/control.md, "Uploading" and "Polling").

`Uploader`: records are gathered into batches; a sealed batch is first written to a bounded
on-disk spool (one file per batch, its idempotency key inside), then sent. A batch leaves the
spool only when the control plane has answered for it, so a batch whose answer was lost (the
service killed mid-request, a network cut) is sent again with the same key and stored once.
When the spool is full the oldest batches are dropped, and counted.

`PolicyPoller`: polls `/v1/policies` with `If-None-Match`; for each gear whose version changed it
downloads the artifact, checks its sha256, writes it beside the running one (`GEAR/vN`), lets the
caller load it (`accept`), then swaps `GEAR/current` (a symlink, replaced atomically). A corrupt
artifact or one the caller refuses is dropped and the running policy stays; what is on disk
(`current`) is where a restarted edge or client starts when the control plane is down.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from gearbox.control import policy as pol

# Answers after which a batch leaves the spool: stored (200), or stored with its bad records
# rejected (400 with a count), or refused as too large (413: resending cannot help).
_FINAL = {200, 400, 413}


def _ssl_context(cafile: str | Path | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cafile=str(cafile)) if cafile else True


class AuthError(Exception):
    """The control plane refused the token (401/403): resending will not help."""


@dataclass
class UploadStats:
    sent_batches: int = 0
    sent_records: int = 0
    duplicates: int = 0
    rejected_records: int = 0
    dropped_batches: int = 0
    failures: int = 0


class Uploader:
    """Batches records into the spool and sends them; thread-safe."""

    def __init__(
        self,
        url: str,
        token: str,
        spool: str | Path,
        cafile: str | Path | None = None,
        batch_records: int = 1000,
        max_spool_bytes: int = 256 * 1024 * 1024,
        timeout_s: float = 10.0,
        path: str = "/v1/telemetry",
    ) -> None:
        self.url = url.rstrip("/")
        #: The route batches go to: telemetry, or another service's route with the same contract
        #: (`{"records": [...]}` with an Idempotency-Key; the FlexHTTP agent's trace uploads).
        self.path = path
        self.spool = Path(spool)
        self.spool.mkdir(parents=True, exist_ok=True)
        for tmp in self.spool.glob("*.tmp"):
            tmp.unlink()
        self.batch_records = batch_records
        self.max_spool_bytes = max_spool_bytes
        self.stats = UploadStats()
        self.last_errors: list[dict] = []
        self._pending: list[dict] = []
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._seq = max((int(p.name.split("-")[0]) for p in self._batches()), default=0)
        self._http = httpx.Client(
            verify=_ssl_context(cafile),
            timeout=timeout_s,
            headers={"Authorization": f"Bearer {token}"},
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _batches(self) -> list[Path]:
        return sorted(self.spool.glob("*.batch.json"))

    def add(self, record: dict) -> None:
        self.add_many([record])

    def add_many(self, records: Iterable[dict]) -> None:
        with self._lock:
            for r in records:
                self._pending.append(r)
                if len(self._pending) >= self.batch_records:
                    self._seal_locked()

    def seal(self, meta: dict | None = None) -> None:
        """Writes the records gathered so far to the spool as one batch; `meta` travels with it
        (a file tail's offset: `FileTail`)."""
        with self._lock:
            self._seal_locked(meta)

    def spooled_meta(self) -> list[dict]:
        """The `meta` of the batches still in the spool."""
        out = []
        for path in self._batches():
            try:
                out.append(json.loads(path.read_text()).get("meta") or {})
            except (OSError, json.JSONDecodeError):
                pass
        return out

    def _seal_locked(self, meta: dict | None = None) -> None:
        if not self._pending:
            return
        self._seq += 1
        key = uuid.uuid4().hex
        path = self.spool / f"{self._seq:012d}-{key}.batch.json"
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as f:
            json.dump({"key": key, "records": self._pending, "meta": meta}, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._pending = []
        self._bound()

    def _bound(self) -> None:
        batches = self._batches()
        total = sum(p.stat().st_size for p in batches)
        while batches and total > self.max_spool_bytes:
            oldest = batches.pop(0)
            total -= oldest.stat().st_size
            oldest.unlink()
            self.stats.dropped_batches += 1

    def spooled(self) -> int:
        """Batches waiting in the spool."""
        return len(self._batches())

    def send(self) -> bool:
        """Sends the spooled batches in order; stops at the first that gets no final answer.
        True when the spool is empty."""
        with self._send_lock:
            for path in self._batches():
                try:
                    batch = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError):
                    continue  # dropped by the bound meanwhile, or torn by a crash before the rename
                try:
                    resp = self._http.post(
                        f"{self.url}{self.path}",
                        content=json.dumps({"records": batch["records"]}, separators=(",", ":")),
                        headers={"Idempotency-Key": batch["key"], "Content-Type": "application/json"},
                    )
                except httpx.HTTPError:
                    self.stats.failures += 1
                    return False
                if resp.status_code in (401, 403):
                    raise AuthError(f"{self.url}: {resp.status_code} {resp.text}")
                if resp.status_code not in _FINAL:
                    self.stats.failures += 1
                    return False
                if resp.status_code == 413:
                    self.stats.dropped_batches += 1  # too large to ever be taken: counted, not resent
                body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
                self.stats.sent_batches += 1
                self.stats.sent_records += int(body.get("stored", 0))
                self.stats.rejected_records += int(body.get("rejected", 0))
                self.stats.duplicates += 1 if body.get("duplicate") else 0
                if body.get("errors"):
                    self.last_errors = body["errors"]
                path.unlink(missing_ok=True)
            return True

    def flush(self) -> bool:
        """Seals what is gathered and sends everything; True when nothing is left."""
        self.seal()
        return self.send()

    def start(self, every_s: float = 1.0) -> None:
        """Seals and sends every `every_s` in a background thread."""

        def loop() -> None:
            while not self._stop.wait(every_s):
                try:
                    self.flush()
                except AuthError:
                    return

        self._thread = threading.Thread(target=loop, name="gearbox-uploader", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        self.seal()
        self._http.close()


@dataclass(frozen=True)
class Active:
    gear: str
    version: int
    path: Path


class PolicyPoller:
    """Keeps `root/GEAR/current` on the control plane's active version of each gear."""

    def __init__(
        self,
        url: str,
        token: str,
        root: str | Path,
        cafile: str | Path | None = None,
        accept: Callable[[str, Path], None] | None = None,
        timeout_s: float = 10.0,
        keep: int = 2,
    ) -> None:
        self.url = url.rstrip("/")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.accept = accept
        self.keep = keep
        self.etag: str | None = None
        self.interval_s: float | None = None
        self.refused: list[str] = []
        self._http = httpx.Client(
            verify=_ssl_context(cafile), timeout=timeout_s, headers={"Authorization": f"Bearer {token}"}
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> dict[str, Active]:
        """What is on disk now: the last good copy of each gear (also when the control plane is down)."""
        out: dict[str, Active] = {}
        for gear_dir in sorted(self.root.iterdir()):
            link = gear_dir / "current"
            if link.is_symlink() and link.exists():
                target = os.readlink(link)
                if target.startswith("v") and target[1:].isdigit():
                    out[gear_dir.name] = Active(gear_dir.name, int(target[1:]), gear_dir / target)
        return out

    def poll_once(self) -> list[Active]:
        """One poll; returns the gears swapped. Raises httpx.HTTPError when unreachable."""
        have = self.current()
        headers = {"X-Gearbox-Policies": ",".join(f"{a.gear}={a.version}" for a in have.values())}
        if self.etag:
            headers["If-None-Match"] = self.etag
        resp = self._http.get(f"{self.url}/v1/policies", headers=headers)
        if resp.status_code == 304:
            return []
        if resp.status_code in (401, 403):
            raise AuthError(f"{self.url}: {resp.status_code} {resp.text}")
        resp.raise_for_status()
        body = resp.json()
        self.interval_s = body.get("poll_interval_s")
        swapped, failed = [], False
        for gear, want in sorted(body["policies"].items()):
            if gear in have and have[gear].version == want["version"]:
                continue
            try:
                swapped.append(self._take(gear, want))
            except (pol.PolicyError, httpx.HTTPError, OSError, ValueError) as e:
                self.refused.append(f"{gear} v{want['version']}: {e}")
                failed = True
        # After a refusal, ask again next time rather than trusting the ETag.
        self.etag = None if failed else resp.headers.get("etag")
        return swapped

    def _take(self, gear: str, want: dict) -> Active:
        resp = self._http.get(f"{self.url}{want['url']}")
        resp.raise_for_status()
        gear_dir = self.root / gear
        gear_dir.mkdir(exist_ok=True)
        name = f"v{int(want['version'])}"
        path = pol.install(resp.content, want["sha256"], gear_dir, name)
        if self.accept is not None:
            try:
                self.accept(gear, path)
            except Exception as e:
                shutil.rmtree(path, ignore_errors=True)
                raise pol.PolicyError(f"refused by the loader: {e}") from e
        link_tmp = gear_dir / "current.tmp"
        link_tmp.unlink(missing_ok=True)
        os.symlink(name, link_tmp)
        os.replace(link_tmp, gear_dir / "current")
        self._prune(gear_dir, name)
        return Active(gear, int(want["version"]), path)

    def _prune(self, gear_dir: Path, current: str) -> None:
        versions = sorted(
            (p for p in gear_dir.iterdir() if p.is_dir() and p.name[1:].isdigit() and p.name.startswith("v")),
            key=lambda p: int(p.name[1:]),
        )
        old = [p for p in versions if p.name != current][: max(0, len(versions) - self.keep)]
        for p in old:
            shutil.rmtree(p, ignore_errors=True)

    def start(self, every_s: float | None = None) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except (httpx.HTTPError, ValueError):
                    pass
                except AuthError:
                    return
                self._stop.wait(every_s or self.interval_s or 30.0)

        self._thread = threading.Thread(target=loop, name="gearbox-poller", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        self._http.close()


def wait_for(predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return predicate()
