"""The global trace pool (FlexHTTP §3.3.2) in the control plane's store: one table beside the store's
own, written through its transactions, so the embedded store (SQLite) and PostgreSQL both hold it.

A trace entry is what a client saw on one page load: the network features it measured against the
agent, the page's Table 1 features, the HTTP version used, the Speed Index, the time. It is anonymised
on arrival: the client's address is cut to its /24 (IPv4) or /48 (IPv6) prefix and the uploader is kept
only as a pseudonym (a hash of its token's name) for the per-client contribution cap; no URL is stored
(the page's features describe it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import time

import numpy as np

from gearbox.control.store import Store
from gearbox.flexhttp.features import FEATURES, NETWORK_FEATURES, PAGE_FEATURES, VERSIONS, FeatureError, check_features

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS flexhttp_traces (contributor TEXT NOT NULL, prefix TEXT NOT NULL, "
    "time_unix_ms DOUBLE PRECISION NOT NULL, http_version TEXT NOT NULL, speed_index_ms DOUBLE PRECISION NOT NULL, "
    "features TEXT NOT NULL, received_ms BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS flexhttp_traces_time ON flexhttp_traces (time_unix_ms)",
    "CREATE TABLE IF NOT EXISTS flexhttp_batches (contributor TEXT NOT NULL, key TEXT NOT NULL, "
    "received_ms BIGINT NOT NULL, response TEXT NOT NULL, PRIMARY KEY (contributor, key))",
)


def prefix_of(address: str | None) -> str:
    """The /24 (IPv4) or /48 (IPv6) network of an address; "unknown" without one."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    bits = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{bits}", strict=False))


def pseudonym(name: str) -> str:
    return hashlib.sha256(b"gearbox-flexhttp:" + name.encode()).hexdigest()[:16]


def validate(entry: object, where: str) -> tuple[float, str, float, list[float]]:
    """(time_unix_ms, http_version, speed_index_ms, features) of an uploaded entry, or FeatureError
    naming the field."""
    if not isinstance(entry, dict):
        raise FeatureError(f"{where}: expected an object")
    t = entry.get("time_unix_ms")
    if t is None:
        raise FeatureError(f"{where}.time_unix_ms: missing")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise FeatureError(f"{where}.time_unix_ms: expected a positive number, found {t!r}")
    v = entry.get("http_version")
    if v is None:
        raise FeatureError(f"{where}.http_version: missing")
    if v not in VERSIONS:
        raise FeatureError(f"{where}.http_version: expected one of {', '.join(VERSIONS)}, found {v!r}")
    si = entry.get("speed_index_ms")
    if si is None:
        raise FeatureError(f"{where}.speed_index_ms: missing")
    if isinstance(si, bool) or not isinstance(si, (int, float)) or not math.isfinite(si) or si <= 0:
        raise FeatureError(f"{where}.speed_index_ms: expected a positive number, found {si!r}")
    x = check_features(entry.get("network"), entry.get("page"), where)
    return float(t), str(v), float(si), x


class TracePool:
    """The pool's rows in a control-plane store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The store's own transaction (its lock, its SQL parameter style): one table among its tables.
        with store._tx() as cur:
            for stmt in _SCHEMA:
                cur.execute(stmt)

    def add(self, contributor: str, address: str | None, key: str, rows: list[tuple], response: dict) -> dict | None:
        """Stores validated rows (`validate`'s tuples) under the batch's key, once; returns the first
        answer when the key was seen before, else None."""
        who = pseudonym(contributor)
        prefix = prefix_of(address)
        now = int(time.time() * 1000)
        with self.store._tx() as cur:
            cur.execute("SELECT response FROM flexhttp_batches WHERE contributor = ? AND key = ?", (who, key))
            first = cur.fetchone()
            if first is not None:
                return json.loads(first[0])
            cur.execute(
                "INSERT INTO flexhttp_batches (contributor, key, received_ms, response) VALUES (?, ?, ?, ?)",
                (who, key, now, json.dumps(response)),
            )
            cur.executemany(
                "INSERT INTO flexhttp_traces (contributor, prefix, time_unix_ms, http_version, speed_index_ms, "
                "features, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(who, prefix, t, v, si, json.dumps(x), now) for t, v, si, x in rows],
            )
        return None

    def entries(self, since_ms: float | None = None) -> dict:
        """Columns of the pool, oldest first: x (n, len(FEATURES)), version, si, contributor, prefix, time."""
        where, args = ("WHERE time_unix_ms >= ?", (since_ms,)) if since_ms is not None else ("", ())
        rows = self.store._all(
            "SELECT contributor, prefix, time_unix_ms, http_version, speed_index_ms, features FROM flexhttp_traces "
            f"{where} ORDER BY time_unix_ms",
            args,
        )
        return {
            "x": np.array([json.loads(r[5]) for r in rows], dtype=float).reshape(len(rows), len(FEATURES)),
            "version": [r[3] for r in rows],
            "si_ms": np.array([float(r[4]) for r in rows]),
            "contributor": [r[0] for r in rows],
            "prefix": [r[1] for r in rows],
            "time_unix_ms": [float(r[2]) for r in rows],
        }

    def summary(self) -> dict:
        rows = self.store._all(
            "SELECT http_version, COUNT(*), COUNT(DISTINCT contributor), COUNT(DISTINCT prefix) FROM flexhttp_traces "
            "GROUP BY http_version"
        )
        total = self.store._one(
            "SELECT COUNT(*), COUNT(DISTINCT contributor), COUNT(DISTINCT prefix) FROM flexhttp_traces"
        )
        return {
            "entries": int(total[0]),
            "contributors": int(total[1]),
            "prefixes": int(total[2]),
            "by_version": {r[0]: int(r[1]) for r in rows},
        }


def entry_of(features: list[float], http_version: str, si_ms: float, time_unix_ms: float) -> dict:
    """An upload's entry from a feature vector in FEATURES order (the lab and clients build them so)."""
    n = len(NETWORK_FEATURES)
    return {
        "time_unix_ms": time_unix_ms,
        "http_version": http_version,
        "speed_index_ms": si_ms,
        "network": dict(zip(NETWORK_FEATURES, features[:n], strict=True)),
        "page": dict(zip(PAGE_FEATURES, features[n:], strict=True)),
    }
