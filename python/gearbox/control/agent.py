"""`gearbox control agent`: connects a process that writes telemetry files (a `gearbox edge
--telemetry FILE`, a `gearbox load --telemetry FILE`, any client with `telemetry=`) to the control
plane without changing it: tails the files and uploads their records (`Uploader`, spooled, each
record once), and keeps a folder on the active policies (`PolicyPoller`), whose
`GEAR/current/...` files the process reads (e.g. `gearbox edge --cwnd-table
DIR/tcpwise/current/cwnd.toml`: the edge reloads the table when the file changes).

Exactly once across restarts of the agent: a batch's spool file records the offset its last line
ended at, and the tail resumes from the largest offset among the spooled batches and its state file,
so a line is never put in two batches.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from gearbox.control.client import AuthError, PolicyPoller, Uploader


class FileTail:
    """New complete lines of one JSON Lines file, from where the last run stopped."""

    def __init__(self, path: Path, uploader: Uploader, state: Path) -> None:
        self.path, self.uploader, self.state = Path(path), uploader, Path(state)
        key = str(self.path.resolve())
        offsets = [m.get("offset", 0) for m in uploader.spooled_meta() if m.get("file") == key]
        saved = 0
        if self.state.exists():
            try:
                saved = int(json.loads(self.state.read_text()).get("offset", 0))
            except (ValueError, json.JSONDecodeError):
                saved = 0
        self.key = key
        self.offset = max([saved, *offsets])
        self.bad_lines = 0

    def poll(self) -> int:
        """Reads the lines written since the last call into one sealed batch; returns how many."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size < self.offset:  # truncated or replaced: start over
            self.offset = 0
        if size == self.offset:
            return 0
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n")
        if end < 0:
            return 0  # a line being written: next time
        records = []
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                self.bad_lines += 1
        new_offset = self.offset + end + 1
        if records:
            self.uploader.add_many(records)
            self.uploader.seal({"file": self.key, "offset": new_offset})
        self.offset = new_offset
        tmp = self.state.with_name(self.state.name + ".tmp")
        tmp.write_text(json.dumps({"file": self.key, "offset": new_offset}))
        os.replace(tmp, self.state)
        return len(records)


def run_agent(
    url: str,
    token: str,
    cafile: str | None,
    spool: Path,
    tails: list[Path],
    policies: Path | None,
    every_s: float,
    stop: threading.Event | None = None,
) -> None:
    """Until `stop` is set (or forever): every `every_s`, tail, upload, poll."""
    stop = stop or threading.Event()
    spool.mkdir(parents=True, exist_ok=True)
    uploader = Uploader(url, token, spool / "batches", cafile, batch_records=1_000_000)
    files = [FileTail(t, uploader, spool / f"tail-{i}.json") for i, t in enumerate(tails)]
    poller = PolicyPoller(url, token, policies, cafile) if policies else None
    try:
        while True:
            for f in files:
                f.poll()
            try:
                uploader.send()
            except AuthError as e:
                print(f"gearbox control agent: {e}", flush=True)
                return
            if poller is not None:
                try:
                    for a in poller.poll_once():
                        print(f"gearbox control agent: {a.gear} version {a.version} at {a.path}", flush=True)
                except AuthError as e:
                    print(f"gearbox control agent: {e}", flush=True)
                    return
                except Exception as e:  # noqa: BLE001 - unreachable: keep the copy on disk, retry
                    print(f"gearbox control agent: poll failed: {e}", flush=True)
                for r in poller.refused:
                    print(f"gearbox control agent: refused {r}", flush=True)
                poller.refused.clear()
            if stop.wait(every_s):
                return
    finally:
        for f in files:
            f.poll()
        try:
            uploader.send()
        except AuthError:
            pass
        uploader.close()
        if poller is not None:
            poller.close()
