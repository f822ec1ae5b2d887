"""The Cwnd Table (TCP WISE §IV-A, "Cwnd Table"): reading, validating and writing the TOML
file the edge applies and the learner rewrites (docs/tcpwise.md, "The Cwnd Table").

Validation is the edge's (`gearbox_gears::tcpwise::table`): two IWs per entry, each in
[3, cap], cap ≤ 1000, `chance_alpha` in [0, 1], no duplicate (prefix, hour), no unknown field;
an error names the file, the entry's line and the field, so that a table the learner accepts
is one the edge accepts. The table is written atomically (a temporary file in the same folder,
fsync, rename): an edge that polls the file sees the old table or the new one, never half of
one. Writing in place was rejected for exactly that.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

OTHERS = "others"
MAX_CAP = 1000
MIN_IW = 3
EDGE_SET_SIZE = 2
"""IWs per entry the edge accepts (α, β); only the fast start's tables hold more (§IV-C3)."""
TOP_FIELDS = {"version", "cap", "created_unix_ms", "cluster"}
ENTRY_FIELDS = {"prefix", "hour", "iw", "chance_alpha", "best", "reason"}
_CLUSTER_HEADER = re.compile(r"^\s*\[\[\s*cluster\s*\]\]")
_INT_ARRAY = re.compile(r"= \[\n((?:[ \t]+-?\d+,\n)+)\]")


class TableError(ValueError):
    """A Cwnd Table that cannot be used; the message names the file, line and field."""


@functools.lru_cache(maxsize=1 << 16)
def normalize_prefix(prefix: str) -> str:
    """`others`, or the prefix as its network (`10.1.2.7/24` → `10.1.2.0/24`). Raises ValueError.

    Cached: a learning pass asks for the same few thousand prefixes once per record, and
    `ipaddress` parsing was 72% of an iteration (`gearbox bench tcpwise`, docs/tcpwise.md)."""
    if prefix == OTHERS:
        return OTHERS
    return str(ipaddress.ip_network(prefix, strict=False))


@dataclass
class ClusterEntry:
    """One `[[cluster]]` of the table: a user cluster's IW set under test (§IV-A, Fig. 5)."""

    prefix: str
    """An IPv4 or IPv6 prefix, or `others`."""
    iw: tuple[int, ...]
    """The set under test, packets: α then β (more with the fast start); `[n, n]` is one IW."""
    hour: int | None = None
    """0-23 UTC; None: every hour without an entry of its own."""
    chance_alpha: float = 0.5
    """Probability that a connection draws α."""
    best: int | None = None
    """The learner's current best: the smallest IW of least p80 (§IV-C2)."""
    reason: str | None = None
    """What the learner changed in this entry, and why."""

    @property
    def key(self) -> tuple[str, int | None]:
        return (normalize_prefix(self.prefix), self.hour)


@dataclass
class CwndTable:
    """A whole Cwnd Table: version, cap and its entries (docs/tcpwise.md)."""

    version: int = 0
    cap: int = 100
    created_unix_ms: int | None = None
    entries: list[ClusterEntry] = field(default_factory=list)

    def index(self) -> dict[tuple[str, int | None], ClusterEntry]:
        """The entries by (normalized prefix, hour)."""
        return {e.key: e for e in self.entries}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def table_from_mapping(
    doc: dict[str, Any], source: str, entry_lines: list[int] | None = None, max_set: int = EDGE_SET_SIZE
) -> CwndTable:
    """Validates a parsed table; `source` (the file) and `entry_lines` (each `[[cluster]]`'s
    line) name the place of an error. `max_set`: the most IWs an entry may hold (the edge's 2;
    more only for the fast start, which the edge does not take yet)."""

    def where(i: int) -> str:
        line = f" line {entry_lines[i]}" if entry_lines and i < len(entry_lines) else ""
        return f"{source}:{line} cluster[{i}]"

    for key in doc:
        if key not in TOP_FIELDS:
            raise TableError(f"{source}: unknown field `{key}` (known: {', '.join(sorted(TOP_FIELDS))})")
    version = doc.get("version")
    if not _is_int(version) or version < 0:
        raise TableError(f"{source}: field `version` must be a whole number ≥ 0, got {version!r}")
    cap = doc.get("cap")
    if not _is_int(cap) or not MIN_IW <= cap <= MAX_CAP:
        raise TableError(f"{source}: field `cap` must be a whole number in [{MIN_IW}, {MAX_CAP}], got {cap!r}")
    created = doc.get("created_unix_ms")
    if created is not None and (not isinstance(created, int | float) or isinstance(created, bool) or created < 0):
        raise TableError(f"{source}: field `created_unix_ms` must be a time in ms ≥ 0, got {created!r}")
    clusters = doc.get("cluster", [])
    if not isinstance(clusters, list):
        raise TableError(f"{source}: field `cluster` must be an array of tables ([[cluster]])")
    entries: list[ClusterEntry] = []
    seen: dict[tuple[str, int | None], int] = {}
    for i, raw in enumerate(clusters):
        if not isinstance(raw, dict):
            raise TableError(f"{where(i)}: must be a table")
        for key in raw:
            if key not in ENTRY_FIELDS:
                raise TableError(f"{where(i)}: unknown field `{key}` (known: {', '.join(sorted(ENTRY_FIELDS))})")
        prefix = raw.get("prefix")
        if not isinstance(prefix, str):
            raise TableError(f'{where(i)}: field `prefix` must be a prefix or "others", got {prefix!r}')
        try:
            normalize_prefix(prefix)
        except ValueError as e:
            raise TableError(f'{where(i)}: field `prefix` {prefix!r} is not an IP prefix or "others": {e}') from None
        hour = raw.get("hour")
        if hour is not None and (not _is_int(hour) or not 0 <= hour <= 23):
            raise TableError(f"{where(i)}: field `hour` must be 0-23, got {hour!r}")
        iw = raw.get("iw")
        if not isinstance(iw, list) or not 2 <= len(iw) <= max_set or not all(_is_int(v) for v in iw):
            size = "two" if max_set == 2 else f"two to {max_set}"
            raise TableError(f"{where(i)}: field `iw` must be a list of {size} whole numbers (α, β), got {iw!r}")
        for v in iw:
            if not MIN_IW <= v <= cap:
                raise TableError(f"{where(i)}: field `iw` value {v} is outside [{MIN_IW}, cap {cap}]")
        chance = raw.get("chance_alpha", 0.5)
        if not isinstance(chance, int | float) or isinstance(chance, bool) or not 0.0 <= chance <= 1.0:
            raise TableError(f"{where(i)}: field `chance_alpha` must be in [0, 1], got {chance!r}")
        best = raw.get("best")
        if best is not None and (not _is_int(best) or not MIN_IW <= best <= cap):
            raise TableError(f"{where(i)}: field `best` must be a whole number in [{MIN_IW}, cap {cap}], got {best!r}")
        reason = raw.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise TableError(f"{where(i)}: field `reason` must be a string, got {reason!r}")
        entry = ClusterEntry(prefix, tuple(iw), hour, float(chance), best, reason)
        if entry.key in seen:
            raise TableError(
                f"{where(i)}: duplicate of cluster[{seen[entry.key]}] (prefix {prefix!r}, hour {hour!r}): "
                "field `prefix`/`hour` must be unique"
            )
        seen[entry.key] = i
        entries.append(entry)
    return CwndTable(version, cap, created, entries)


def parse_table(text: str, source: str, max_set: int = EDGE_SET_SIZE) -> CwndTable:
    """Parses and validates the text of a table; `source` names it in errors."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # its message says the line and column
        raise TableError(f"{source}: not valid TOML: {e}") from None
    lines = [n for n, line in enumerate(text.splitlines(), start=1) if _CLUSTER_HEADER.match(line)]
    return table_from_mapping(doc, source, lines, max_set)


def read_table(path: Path, max_set: int = EDGE_SET_SIZE) -> CwndTable:
    """Reads and validates the Cwnd Table at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TableError(f"{path}: cannot read: {e}") from None
    return parse_table(text, str(path), max_set)


def table_to_mapping(table: CwndTable) -> dict[str, Any]:
    """The TOML document of `table`, fields in the order of docs/tcpwise.md."""
    doc: dict[str, Any] = {"version": table.version, "cap": table.cap}
    if table.created_unix_ms is not None:
        doc["created_unix_ms"] = table.created_unix_ms
    clusters = []
    for e in table.entries:
        raw: dict[str, Any] = {"prefix": e.prefix}
        if e.hour is not None:
            raw["hour"] = e.hour
        raw["iw"] = list(e.iw)
        raw["chance_alpha"] = e.chance_alpha
        if e.best is not None:
            raw["best"] = e.best
        if e.reason is not None:
            raw["reason"] = e.reason
        clusters.append(raw)
    doc["cluster"] = clusters
    return doc


def dumps_table(table: CwndTable, max_set: int = EDGE_SET_SIZE) -> str:
    """The TOML text of `table`, validated first (the learner never writes a table the edge refuses)."""
    doc = table_to_mapping(table)
    table_from_mapping(doc, "the table to write", max_set=max_set)
    # tomli_w puts every array on lines of its own; an IW set reads better as `iw = [10, 15]`.
    return _INT_ARRAY.sub(lambda m: "= [" + ", ".join(re.findall(r"-?\d+", m.group(1))) + "]", tomli_w.dumps(doc))


def write_table(table: CwndTable, path: Path, max_set: int = EDGE_SET_SIZE) -> None:
    """Writes `table` to `path` atomically: a temporary file beside it, flushed to disk, then
    renamed over `path` (rename is atomic within one file system, so a reader sees the old
    file or the new one, whole)."""
    text = dumps_table(table, max_set)
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
