"""The control plane's store: one interface, two back ends.

- `EmbeddedStore` (the default): a SQLite file for the metadata (tokens, batches, peers, policy
  versions and activations, job runs), telemetry in Parquet files partitioned by day and source
  (`telemetry/day=YYYY-MM-DD/source=NAME/*.parquet`, one per batch, merged in the background),
  read back with DuckDB; policy artifacts as files named by their sha256.
- `PostgresStore`: everything in PostgreSQL (psycopg 3), for deployments that outgrow one machine;
  selected by a `postgresql://` URL in the config.

Exactly once: a batch's key and its records commit in one transaction, so a retried batch (the
first attempt's answer lost, or the service killed after the commit) finds its key and stores
nothing more. The embedded store writes a batch's Parquet file (fsync, rename) before the
transaction that records the key and the file; a file left by a crash between the two is not
recorded and is deleted when the store opens. Compaction writes the merged file first and swaps
it for the small ones in one transaction; a crash leaves either the old files or the new one.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ROLES = ("edge", "client", "agent", "learner", "admin")

# DuckDB beside the service, not instead of it: one thread, a bounded buffer pool.
DUCKDB_CONFIG = {"threads": 1, "memory_limit": "256MB"}


class StoreError(Exception):
    """A store that cannot be opened or used, with the reason."""


@dataclass(frozen=True)
class IngestResult:
    """What a batch did: `duplicate` when its key was seen before (then nothing was stored now and
    `status`/`response` are the first attempt's)."""

    status: int
    response: dict
    duplicate: bool


def now_ms() -> int:
    return int(time.time() * 1000)


def day_of(time_unix_ms: float) -> str:
    return datetime.fromtimestamp(time_unix_ms / 1000.0, UTC).strftime("%Y-%m-%d")


def telemetry_row(source: str, record: dict, received_ms: int) -> tuple:
    """A record's row: its columns, its JSON text, and when its batch arrived (`received_ms`:
    what scheduled jobs select by, since `time_unix_ms` is when the request happened and a
    spooled batch arrives late)."""
    rct = record.get("rct_ms")
    return (
        source,
        record["side"],
        float(record["time_unix_ms"]),
        record.get("decision"),
        float(rct) if isinstance(rct, (int, float)) and not isinstance(rct, bool) else None,
        orjson.dumps(record).decode(),
        received_ms,
    )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL,
    created_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (source TEXT NOT NULL, key TEXT NOT NULL, received_ms BIGINT NOT NULL,
    stored INTEGER NOT NULL, rejected INTEGER NOT NULL, status INTEGER NOT NULL, response TEXT NOT NULL,
    PRIMARY KEY (source, key));
CREATE TABLE IF NOT EXISTS peers (name TEXT PRIMARY KEY, role TEXT NOT NULL, last_ms BIGINT NOT NULL,
    address TEXT, policies TEXT NOT NULL DEFAULT '{}', records BIGINT NOT NULL DEFAULT 0,
    rejected BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS policy_versions (gear TEXT NOT NULL, version INTEGER NOT NULL, sha256 TEXT NOT NULL,
    size BIGINT NOT NULL, who TEXT NOT NULL, created_ms BIGINT NOT NULL, training_digest TEXT NOT NULL,
    manifest TEXT NOT NULL, note TEXT, PRIMARY KEY (gear, version));
CREATE TABLE IF NOT EXISTS activations (id {id}, gear TEXT NOT NULL, scope TEXT NOT NULL, version INTEGER NOT NULL,
    who TEXT NOT NULL, at_ms BIGINT NOT NULL, action TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_runs (id {id}, job TEXT NOT NULL, started_ms BIGINT NOT NULL, cut_ms BIGINT NOT NULL,
    finished_ms BIGINT, outcome TEXT NOT NULL, version INTEGER, log TEXT NOT NULL DEFAULT '');
"""


class Store(ABC):
    """The metadata part is plain SQL shared by both back ends (`?` placeholders); telemetry and
    artifact bytes are each back end's own."""

    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.RLock()

    # --- the SQL both back ends share -------------------------------------------------------------

    @abstractmethod
    def _conn(self) -> Any: ...

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A cursor inside one transaction, under the store's lock."""
        with self._lock:
            conn = self._conn()
            cur = conn.cursor()
            try:
                yield _Cursor(cur, self.placeholder)
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            finally:
                cur.close()

    def _one(self, sql: str, args: tuple = ()) -> tuple | None:
        with self._tx() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._tx() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    # --- tokens -----------------------------------------------------------------------------------

    def add_token(self, token_hash: str, name: str, role: str) -> None:
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO tokens (hash, name, role, created_ms) VALUES (?, ?, ?, ?)",
                (token_hash, name, role, now_ms()),
            )

    def token(self, token_hash: str) -> tuple[str, str] | None:
        row = self._one("SELECT name, role FROM tokens WHERE hash = ?", (token_hash,))
        return (row[0], row[1]) if row else None

    def tokens(self) -> list[tuple[str, str, int]]:
        return [tuple(r) for r in self._all("SELECT name, role, created_ms FROM tokens ORDER BY created_ms")]

    # --- telemetry --------------------------------------------------------------------------------

    def ingest(self, source: str, role: str, key: str, rows: list[tuple], status: int, response: dict) -> IngestResult:
        """Stores a validated batch's rows (`telemetry_row`) under its key, once."""
        rejected = int(response.get("rejected", 0))
        first = self._one("SELECT status, response FROM batches WHERE source = ? AND key = ?", (source, key))
        if first is not None:
            return IngestResult(int(first[0]), json.loads(first[1]), True)
        # Outside the lock: the embedded store's files have names of their own.
        prepared = self._prepare_rows(source, rows) if rows else None
        with self._lock:
            try:
                with self._tx() as cur:
                    # ON CONFLICT: another process of a PostgreSQL deployment may have stored it since.
                    cur.execute(
                        "INSERT INTO batches (source, key, received_ms, stored, rejected, status, response) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (source, key, now_ms(), len(rows), rejected, status, json.dumps(response)),
                    )
                    if cur.rowcount == 0:
                        raise _Duplicate
                    if rows:
                        self._insert_rows(cur, source, rows, prepared)
                    cur.execute(
                        "INSERT INTO peers (name, role, last_ms, records, rejected) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (name) DO UPDATE SET last_ms = excluded.last_ms, "
                        "records = peers.records + excluded.records, rejected = peers.rejected + excluded.rejected",
                        (source, role, now_ms(), len(rows), rejected),
                    )
            except _Duplicate:
                self._discard(prepared)
                first = self._one("SELECT status, response FROM batches WHERE source = ? AND key = ?", (source, key))
                return IngestResult(int(first[0]), json.loads(first[1]), True)
            except BaseException:
                self._discard(prepared)
                raise
        return IngestResult(status, response, False)

    def _prepare_rows(self, source: str, rows: list[tuple]) -> Any:
        """Work done before the batch's transaction (the embedded store writes its files)."""
        return None

    def _discard(self, prepared: Any) -> None:  # noqa: B027 - only the embedded store has work to do
        """Undoes `_prepare_rows` when the transaction did not commit."""

    @abstractmethod
    def _insert_rows(self, cur: _Cursor, source: str, rows: list[tuple], prepared: Any) -> None: ...

    @abstractmethod
    def records(
        self,
        since_ms: float | None = None,
        side: str | None = None,
        received: tuple[int | None, int] | None = None,
    ) -> list[dict]:
        """The stored records (parsed), oldest first, optionally only those newer than `since_ms`,
        of one side, and whose batch arrived in `[received[0], received[1])`."""

    @abstractmethod
    def count_records(self) -> int: ...

    @abstractmethod
    def client_rct(self, since_ms: float) -> list[tuple[float, str | None, float]]:
        """`(time_unix_ms, decision, rct_ms)` of the client records with an RCT since `since_ms`."""

    def flush(self) -> None:  # noqa: B027 - only the embedded store has work to do
        """Makes every stored record visible to queries (the embedded store's Parquet move)."""

    # --- peers ------------------------------------------------------------------------------------

    def touch_peers(self, seen: list[tuple[str, str, str | None, int, str | None]]) -> None:
        """Records many contacts at once: `(name, role, address, last_ms, policies JSON or None)`."""
        with self._tx() as cur:
            cur.executemany(
                "INSERT INTO peers (name, role, last_ms, address, policies) VALUES (?, ?, ?, ?, COALESCE(?, '{}')) "
                "ON CONFLICT (name) DO UPDATE SET role = excluded.role, last_ms = excluded.last_ms, "
                "address = excluded.address, policies = COALESCE(?, peers.policies)",
                [(n, r, t, a, p, p) for n, r, a, t, p in seen],
            )

    def peers(self) -> list[dict]:
        rows = self._all(
            "SELECT name, role, last_ms, address, policies, records, rejected FROM peers ORDER BY role, name"
        )
        keys = ("name", "role", "last_ms", "address", "policies", "records", "rejected")
        out = [dict(zip(keys, r, strict=True)) for r in rows]
        for p in out:
            p["policies"] = json.loads(p["policies"])
        return out

    # --- policies ---------------------------------------------------------------------------------

    def add_version(
        self, gear: str, sha256: str, size: int, who: str, training_digest: str, manifest: dict, note: str | None
    ) -> int:
        with self._tx() as cur:
            cur.execute("SELECT COALESCE(MAX(version), 0) FROM policy_versions WHERE gear = ?", (gear,))
            version = int(cur.fetchone()[0]) + 1
            cur.execute(
                "INSERT INTO policy_versions (gear, version, sha256, size, who, created_ms, training_digest, "
                "manifest, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (gear, version, sha256, size, who, now_ms(), training_digest, json.dumps(manifest), note),
            )
        return version

    _VERSION_KEYS = ("gear", "version", "sha256", "size", "who", "created_ms", "training_digest", "manifest", "note")

    def _version_dict(self, row: tuple) -> dict:
        d = dict(zip(self._VERSION_KEYS, row, strict=True))
        d["manifest"] = json.loads(d["manifest"])
        return d

    def version(self, gear: str, version: int) -> dict | None:
        row = self._one(
            f"SELECT {', '.join(self._VERSION_KEYS)} FROM policy_versions WHERE gear = ? AND version = ?",
            (gear, version),
        )
        return self._version_dict(row) if row else None

    def versions(self, gear: str | None = None) -> list[dict]:
        cols = ", ".join(self._VERSION_KEYS)
        if gear is None:
            rows = self._all(f"SELECT {cols} FROM policy_versions ORDER BY gear, version")
        else:
            rows = self._all(f"SELECT {cols} FROM policy_versions WHERE gear = ? ORDER BY version", (gear,))
        return [self._version_dict(r) for r in rows]

    def activate(self, gear: str, scope: str, version: int, who: str, action: str) -> None:
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO activations (gear, scope, version, who, at_ms, action) VALUES (?, ?, ?, ?, ?, ?)",
                (gear, scope, version, who, now_ms(), action),
            )

    def _listed(self, table: str, cols: str, key: str, value: str | None) -> list[dict]:
        """Rows of `table` in id order as dicts of `cols`, those whose `key` is `value`
        when one is given."""
        where = f" WHERE {key} = ?" if value is not None else ""
        rows = self._all(f"SELECT {cols} FROM {table}{where} ORDER BY id", (value,) if value is not None else ())
        return [dict(zip(cols.split(", "), r, strict=True)) for r in rows]

    def activations(self, gear: str | None = None) -> list[dict]:
        return self._listed("activations", "id, gear, scope, version, who, at_ms, action", "gear", gear)

    def active(self) -> dict[tuple[str, str], int]:
        """`(gear, scope) -> version` of the latest activation of each."""
        rows = self._all(
            "SELECT a.gear, a.scope, a.version FROM activations a JOIN "
            "(SELECT gear, scope, MAX(id) AS id FROM activations GROUP BY gear, scope) m ON a.id = m.id"
        )
        return {(r[0], r[1]): int(r[2]) for r in rows}

    @abstractmethod
    def put_blob(self, sha256: str, data: bytes) -> None: ...

    @abstractmethod
    def get_blob(self, sha256: str) -> bytes | None: ...

    # --- jobs -------------------------------------------------------------------------------------

    def start_run(self, job: str, cut_ms: int) -> int:
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO job_runs (job, started_ms, cut_ms, outcome) VALUES (?, ?, ?, 'running') RETURNING id",
                (job, now_ms(), cut_ms),
            )
            return int(cur.fetchone()[0])

    def finish_run(self, run_id: int, outcome: str, log: str, version: int | None) -> None:
        with self._tx() as cur:
            cur.execute(
                "UPDATE job_runs SET finished_ms = ?, outcome = ?, log = ?, version = ? WHERE id = ?",
                (now_ms(), outcome, log, version, run_id),
            )

    def runs(self, job: str | None = None) -> list[dict]:
        return self._listed("job_runs", "id, job, started_ms, cut_ms, finished_ms, outcome, version, log", "job", job)

    @abstractmethod
    def close(self) -> None:
        """Flushes and closes."""


class _Duplicate(Exception):
    """The batch's key was stored meanwhile (rolls the transaction back)."""


class _Cursor:
    """A DB-API cursor that takes `?` placeholders whatever its driver's style."""

    def __init__(self, cur: Any, placeholder: str) -> None:
        self.raw = cur
        self._ph = placeholder

    def execute(self, sql: str, args: tuple = ()) -> None:
        self.raw.execute(sql if self._ph == "?" else sql.replace("?", self._ph), args)

    def executemany(self, sql: str, rows: Iterable[tuple]) -> None:
        self.raw.executemany(sql if self._ph == "?" else sql.replace("?", self._ph), rows)

    @property
    def rowcount(self) -> int:
        return self.raw.rowcount

    def fetchone(self) -> tuple | None:
        return self.raw.fetchone()

    def fetchall(self) -> list[tuple]:
        return self.raw.fetchall()


class EmbeddedStore(Store):
    """SQLite + Parquet partitions + DuckDB, in one directory."""

    COMPACT_BELOW_ROWS = 200_000  # files smaller than this are merged...
    COMPACT_FILES = 16  # ...once a partition has this many of them

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "blobs").mkdir(exist_ok=True)
        self.telemetry_dir = self.dir / "telemetry"
        self.telemetry_dir.mkdir(exist_ok=True)
        try:
            self._db = sqlite3.connect(self.dir / "control.sqlite3", check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(
                _SCHEMA.replace("{id}", "INTEGER PRIMARY KEY AUTOINCREMENT")
                + "CREATE TABLE IF NOT EXISTS parts (path TEXT PRIMARY KEY, partition TEXT NOT NULL,"
                " rows INTEGER NOT NULL);"
            )
        except sqlite3.Error as e:
            raise StoreError(f"{self.dir / 'control.sqlite3'}: {e}") from e
        self._db.isolation_level = "DEFERRED"
        # Held by queries and compaction: a query reads files that compaction would delete.
        self._files_lock = threading.Lock()
        self._remove_orphans()

    def _conn(self) -> sqlite3.Connection:
        return self._db

    def _remove_orphans(self) -> None:
        """Parquet files no committed transaction recorded (a crash between a file and its commit)."""
        known = {r[0] for r in self._all("SELECT path FROM parts")}
        for path in self.telemetry_dir.rglob("*"):
            if path.is_file() and str(path.relative_to(self.telemetry_dir)) not in known:
                path.unlink()

    def _write(self, rel: str, columns: dict) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.telemetry_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(pa.table(columns), tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _prepare_rows(self, source: str, rows: list[tuple]) -> list[tuple[str, str, int]]:
        """The batch's records as Parquet files, one per day it spans, written before the
        transaction that records them (a crash in between leaves files `_remove_orphans` deletes)."""
        import pyarrow as pa

        by_day: dict[str, list[tuple]] = {}
        for r in rows:
            by_day.setdefault(day_of(r[2]), []).append(r)
        written: list[tuple[str, str, int]] = []
        try:
            for day, group in by_day.items():
                partition = f"day={day}/source={source}"
                rel = f"{partition}/b-{uuid.uuid4().hex}.parquet"
                _, sides, times, decisions, rcts, records, received = zip(*group, strict=True)
                self._write(
                    rel,
                    {
                        "source": pa.array([source] * len(group), pa.string()),
                        "side": pa.array(sides, pa.string()),
                        "time_unix_ms": pa.array(times, pa.float64()),
                        "decision": pa.array(decisions, pa.string()),
                        "rct_ms": pa.array(rcts, pa.float64()),
                        "record": pa.array(records, pa.string()),
                        "received_ms": pa.array(received, pa.int64()),
                    },
                )
                written.append((rel, partition, len(group)))
        except BaseException:
            self._discard(written)
            raise
        return written

    def _discard(self, prepared: Any) -> None:
        for rel, _, _ in prepared or []:
            (self.telemetry_dir / rel).unlink(missing_ok=True)

    def _insert_rows(self, cur: _Cursor, source: str, rows: list[tuple], prepared: Any) -> None:
        cur.executemany("INSERT INTO parts (path, partition, rows) VALUES (?, ?, ?)", prepared)

    def flush(self) -> None:
        """Compaction: a partition's small files (one per batch) merged into one by DuckDB; the
        new file is recorded and the old ones forgotten in one transaction, then deleted."""
        import duckdb

        candidates = self._all(
            "SELECT partition, COUNT(*) FROM parts WHERE rows < ? GROUP BY partition HAVING COUNT(*) >= ?",
            (self.COMPACT_BELOW_ROWS, self.COMPACT_FILES),
        )
        for partition, _ in candidates:
            with self._files_lock:
                old = self._all(
                    "SELECT path, rows FROM parts WHERE partition = ? AND rows < ? ORDER BY path",
                    (partition, self.COMPACT_BELOW_ROWS),
                )
                rel = f"{partition}/c-{uuid.uuid4().hex}.parquet"
                path = self.telemetry_dir / rel
                tmp = path.with_name(path.name + ".tmp")
                con = duckdb.connect(config=DUCKDB_CONFIG)
                try:
                    con.execute(
                        f"COPY (SELECT * FROM read_parquet(?) ORDER BY time_unix_ms) TO '{tmp}' (FORMAT PARQUET)",
                        [[str(self.telemetry_dir / p) for p, _ in old]],
                    )
                finally:
                    con.close()
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                with self._tx() as cur:
                    cur.executemany("DELETE FROM parts WHERE path = ?", [(p,) for p, _ in old])
                    cur.execute(
                        "INSERT INTO parts (path, partition, rows) VALUES (?, ?, ?)",
                        (rel, partition, sum(n for _, n in old)),
                    )
                for p, _ in old:
                    (self.telemetry_dir / p).unlink(missing_ok=True)

    def _query(self, sql: str, args: list) -> list[tuple]:
        import duckdb

        with self._files_lock:
            parts = [str(self.telemetry_dir / r[0]) for r in self._all("SELECT path FROM parts")]
            if not parts:
                return []
            con = duckdb.connect(config=DUCKDB_CONFIG)
            try:
                return con.execute(sql.replace("FROM t ", "FROM read_parquet(?) ", 1), [parts, *args]).fetchall()
            finally:
                con.close()

    def records(
        self,
        since_ms: float | None = None,
        side: str | None = None,
        received: tuple[int | None, int] | None = None,
    ) -> list[dict]:
        where, args = _where(since_ms, side, received)
        rows = self._query(f"SELECT record FROM t {where} ORDER BY time_unix_ms", args)
        return [orjson.loads(r[0]) for r in rows]

    def count_records(self) -> int:
        return int(self._one("SELECT COALESCE(SUM(rows), 0) FROM parts")[0])

    def client_rct(self, since_ms: float) -> list[tuple[float, str | None, float]]:
        return self._query(
            "SELECT time_unix_ms, decision, rct_ms FROM t WHERE side = 'client' AND rct_ms IS NOT NULL "
            "AND time_unix_ms > ? ORDER BY time_unix_ms",
            [since_ms],
        )

    def put_blob(self, sha256: str, data: bytes) -> None:
        path = self.dir / "blobs" / sha256
        if path.exists():
            return
        tmp = path.with_name(sha256 + ".tmp")
        tmp.write_bytes(data)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def get_blob(self, sha256: str) -> bytes | None:
        path = self.dir / "blobs" / sha256
        return path.read_bytes() if path.exists() else None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _where(
    since_ms: float | None, side: str | None, received: tuple[int | None, int] | None = None
) -> tuple[str, list]:
    clauses, args = [], []
    if received is not None:
        if received[0] is not None:
            clauses.append("received_ms >= ?")
            args.append(received[0])
        clauses.append("received_ms < ?")
        args.append(received[1])
    if since_ms is not None:
        clauses.append("time_unix_ms > ?")
        args.append(since_ms)
    if side is not None:
        clauses.append("side = ?")
        args.append(side)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


class PostgresStore(Store):
    """Everything in one PostgreSQL database (psycopg 3): the same tables, telemetry in one table."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        super().__init__()
        import psycopg

        self.url = url
        try:
            self._db = psycopg.connect(url, connect_timeout=10)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to {_redact(url)}: {e}") from e
        with self._tx() as cur:
            for stmt in _SCHEMA.replace("{id}", "BIGSERIAL PRIMARY KEY").split(";"):
                if stmt.strip():
                    cur.execute(stmt)
            cur.execute(
                "CREATE TABLE IF NOT EXISTS telemetry (id BIGSERIAL PRIMARY KEY, source TEXT NOT NULL, "
                "side TEXT NOT NULL, time_unix_ms DOUBLE PRECISION NOT NULL, decision TEXT, rct_ms DOUBLE PRECISION, "
                "record TEXT NOT NULL, received_ms BIGINT NOT NULL)"
            )
            cur.execute("CREATE INDEX IF NOT EXISTS telemetry_time ON telemetry (time_unix_ms)")
            cur.execute("CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, data BYTEA NOT NULL)")

    def _conn(self) -> Any:
        return self._db

    def _insert_rows(self, cur: _Cursor, source: str, rows: list[tuple], prepared: Any) -> None:
        with cur.raw.copy(
            "COPY telemetry (source, side, time_unix_ms, decision, rct_ms, record, received_ms) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)

    def records(
        self,
        since_ms: float | None = None,
        side: str | None = None,
        received: tuple[int | None, int] | None = None,
    ) -> list[dict]:
        where, args = _where(since_ms, side, received)
        rows = self._all(f"SELECT record FROM telemetry {where} ORDER BY time_unix_ms, id", tuple(args))
        return [orjson.loads(r[0]) for r in rows]

    def count_records(self) -> int:
        return int(self._one("SELECT COUNT(*) FROM telemetry")[0])

    def client_rct(self, since_ms: float) -> list[tuple[float, str | None, float]]:
        return [
            tuple(r)
            for r in self._all(
                "SELECT time_unix_ms, decision, rct_ms FROM telemetry WHERE side = 'client' AND rct_ms IS NOT NULL "
                "AND time_unix_ms > ? ORDER BY time_unix_ms",
                (since_ms,),
            )
        ]

    def put_blob(self, sha256: str, data: bytes) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO blobs (sha256, data) VALUES (?, ?) ON CONFLICT DO NOTHING", (sha256, data))

    def get_blob(self, sha256: str) -> bytes | None:
        row = self._one("SELECT data FROM blobs WHERE sha256 = ?", (sha256,))
        return bytes(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def open_store(spec: str, base: Path) -> Store:
    """`postgresql://...` (or `postgres://`): PostgreSQL; anything else is the embedded store's
    directory, relative to `base` (the config file's folder)."""
    if spec.startswith(("postgresql://", "postgres://")):
        return PostgresStore(spec)
    path = Path(spec)
    return EmbeddedStore(path if path.is_absolute() else base / path)
