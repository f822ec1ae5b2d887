"""The learner's input: the edge's telemetry records that carry an `iw` object (TCP WISE §IV-B,
Data Collector; docs/tcpwise.md "What the edge records", docs/telemetry.md).

One sample per response: the cluster and hour the edge matched, the IW set it drew from, the IW
it drew, and the response's latency, `server_time_ms` (first byte sent to last byte
acknowledged, the seed's "TCP latency"). Client records, event records, records without `iw`
or with a static one (`iw.source = "static"`, no table), and failed responses (an `error`, or
no `server_time_ms`) are skipped and counted. A line that is not JSON, or an `iw` object of the
wrong shape, is an error naming the file and line, except the file's last line when it has no
newline yet: the edge may be writing it (a torn line), and it is read on the next pass.

`TelemetryReader` remembers how far it has read each file, so that the learner's loop
(`--every`) reads every record once even when it is written after the interval it belongs to
ended; filtering on time alone was rejected because it loses those late records.
"""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class RecordError(ValueError):
    """A telemetry line the learner cannot read; the message names the file and line."""


@dataclass(frozen=True)
class IwSample:
    """One response of a connection whose IW came from the Cwnd Table."""

    time_unix_ms: float
    """When the request arrived at the edge."""
    cluster: str
    """The table entry's prefix that matched (`others` when none did), as the edge wrote it."""
    hour: int
    """Hour of day (UTC) of the entry the edge applied: the record's `hour`, else that of its time."""
    iw_set: tuple[int, ...]
    """The set the connection drew from, packets."""
    iw: int
    """The IW the connection drew, packets."""
    latency_ms: float
    """The response's TCP latency (`server_time_ms`), §IV-B."""
    client_addr: str | None = None
    """The client's socket address (for splitting `others` into /24s)."""
    rtt_ms: float | None = None
    """`transport.rtt_ms`, when the stack gave it."""
    retransmits: int | None = None
    """`transport.retransmits`, else `transport.lost_packets`, when the stack gave it."""


@dataclass
class ReadStats:
    """What a pass over the telemetry kept and skipped, for the learner's log."""

    samples: int = 0
    not_edge: int = 0
    no_iw: int = 0
    no_latency: int = 0
    before_since: int = 0
    torn: int = 0

    def add(self, other: ReadStats) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def client_ip(addr: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP of a socket address (`1.2.3.4:5678`, `[2001:db8::1]:443`), IPv4-mapped IPv6 as IPv4;
    None when it is not one."""
    if not addr:
        return None
    host = addr
    if addr.startswith("["):
        host = addr[1 : addr.find("]")] if "]" in addr else addr
    elif addr.count(":") == 1:
        host = addr.split(":", 1)[0]
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sample_from_record(rec: Any, where: str, stats: ReadStats) -> IwSample | None:
    """The sample of one parsed record, None when the learner skips it (counted in `stats`)."""
    if not isinstance(rec, dict):
        raise RecordError(f"{where}: a record is a JSON object, got {type(rec).__name__}")
    if rec.get("side") != "edge" or "event" in rec:
        stats.not_edge += 1
        return None
    iw = rec.get("iw")
    if iw is None:
        stats.no_iw += 1
        return None
    if not isinstance(iw, dict):
        raise RecordError(f"{where}: field `iw` must be an object, got {iw!r}")
    if iw.get("source") == "static":  # `--initial-window`: no table, nothing to learn from
        stats.no_iw += 1
        return None
    cluster, hour, iw_set, chosen = iw.get("cluster"), iw.get("hour"), iw.get("iw_set"), iw.get("iw")
    if not isinstance(cluster, str):
        raise RecordError(f"{where}: field `iw.cluster` must be a string, got {cluster!r}")
    if hour is not None and (not _whole(hour) or not 0 <= hour <= 23):
        raise RecordError(f"{where}: field `iw.hour` must be 0-23 or null, got {hour!r}")
    if not isinstance(iw_set, list) or not iw_set or not all(_whole(v) for v in iw_set):
        raise RecordError(f"{where}: field `iw.iw_set` must be a list of whole numbers, got {iw_set!r}")
    if not _whole(chosen) or chosen not in iw_set:
        raise RecordError(f"{where}: field `iw.iw` must be one of `iw.iw_set` {iw_set}, got {chosen!r}")
    time_ms = rec.get("time_unix_ms")
    if not _number(time_ms):
        raise RecordError(f"{where}: field `time_unix_ms` must be a number, got {time_ms!r}")
    latency = rec.get("server_time_ms")
    if rec.get("error") is not None or latency is None:
        stats.no_latency += 1
        return None
    if not _number(latency) or latency < 0:
        raise RecordError(f"{where}: field `server_time_ms` must be a number ≥ 0 or null, got {latency!r}")
    if hour is None:
        hour = datetime.fromtimestamp(time_ms / 1000.0, tz=UTC).hour
    transport = rec.get("transport") if isinstance(rec.get("transport"), dict) else {}
    rtt = transport.get("rtt_ms")
    retrans = transport.get("retransmits", transport.get("lost_packets"))
    addr = rec.get("client_addr")
    return IwSample(
        time_unix_ms=float(time_ms),
        cluster=cluster,
        hour=hour,
        iw_set=tuple(iw_set),
        iw=chosen,
        latency_ms=float(latency),
        client_addr=addr if isinstance(addr, str) else None,
        rtt_ms=float(rtt) if _number(rtt) else None,
        retransmits=retrans if _whole(retrans) else None,
    )


def telemetry_files(path: Path) -> list[Path]:
    """The telemetry files of `path`: itself when a file, else its `*.jsonl` files, sorted."""
    if path.is_dir():
        return sorted(p for p in path.glob("*.jsonl") if p.is_file())
    if path.is_file():
        return [path]
    raise RecordError(f"{path}: no such file or folder")


@dataclass
class TelemetryReader:
    """Reads the samples of a telemetry folder or file, each line once across calls (§IV-B)."""

    path: Path
    since_ms: float | None = None
    """Records at or before this time (`time_unix_ms`) are skipped."""
    offsets: dict[Path, int] = field(default_factory=dict)
    """How far each file has been read, bytes (past its last complete line)."""

    def read_new(self) -> tuple[list[IwSample], ReadStats]:
        """The samples written since the last call (all of them on the first)."""
        samples: list[IwSample] = []
        stats = ReadStats()
        for file in telemetry_files(Path(self.path)):
            start = self.offsets.get(file, 0)
            try:
                size = file.stat().st_size
                if size < start:  # truncated or replaced: read it again from the start
                    start = 0
                with file.open("rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError as e:
                raise RecordError(f"{file}: cannot read: {e}") from None
            first_line = 1 + (self._lines_before(file, start) if start else 0)
            consumed = self._parse(file, data, first_line, samples, stats)
            self.offsets[file] = start + consumed
            self._line_counts[file] = first_line - 1 + data[:consumed].count(b"\n")
        return samples, stats

    def __post_init__(self) -> None:
        self._line_counts: dict[Path, int] = {}

    def _lines_before(self, file: Path, start: int) -> int:
        return self._line_counts.get(file, 0)

    def _parse(self, file: Path, data: bytes, first_line: int, out: list[IwSample], stats: ReadStats) -> int:
        """Parses `data` (a file from some line on) into `out`; returns the bytes consumed."""
        pos = 0
        line_no = first_line
        while pos < len(data):
            end = data.find(b"\n", pos)
            complete = end != -1
            raw = data[pos : end if complete else len(data)]
            where = f"{file}:{line_no}"
            if raw.strip():
                try:
                    rec = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    if not complete:  # a torn last line: the writer is not done with it
                        stats.torn += 1
                        return pos
                    raise RecordError(f"{where}: not a JSON record: {e}") from None
                sample = sample_from_record(rec, where, stats)
                if sample is not None:
                    if self.since_ms is not None and sample.time_unix_ms <= self.since_ms:
                        stats.before_since += 1
                    else:
                        stats.samples += 1
                        out.append(sample)
            if not complete:
                return len(data)
            pos = end + 1
            line_no += 1
        return pos


def read_samples(path: Path, since_ms: float | None = None) -> tuple[list[IwSample], ReadStats]:
    """Every sample of a telemetry folder or file newer than `since_ms`."""
    return TelemetryReader(Path(path), since_ms).read_new()
