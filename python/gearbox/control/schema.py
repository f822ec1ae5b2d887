"""Validation of telemetry records against the schema of docs/telemetry.md.

One function, `validate(record)`, returns `None` for a good record or the first problem as
`(field, reason)`. The control plane keeps the good records of a batch and rejects each bad one
naming its field (docs/control.md, "Telemetry"). Fields the schema does not know are kept: a
newer data plane may add fields before this table learns them; a field it knows must have its
type.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA_VERSION = 1

_NUM = "number"
_INT = "integer"
_STR = "string"
_BOOL = "boolean"
_OBJ = "object"

# field -> (type, nullable). Required fields of each kind; the optional ones are below.
_COMMON: dict[str, tuple[str, bool]] = {
    "schema": (_INT, False),
    "time_unix_ms": (_NUM, False),
    "conn_id": (_INT, False),
}
_REQUEST_COMMON: dict[str, tuple[str, bool]] = {
    "method": (_STR, False),
    "status": (_INT, True),
    "bytes": (_INT, False),
    "transport": (_OBJ, True),
    "error": (_STR, True),
}
_EDGE: dict[str, tuple[str, bool]] = {
    "client_addr": (_STR, False),
    "protocol": (_STR, True),
    "path": (_STR, False),
    "server_time_ms": (_NUM, True),
    "server_time_source": (_STR, True),
}
_EDGE_OPTIONAL: dict[str, tuple[str, bool]] = {"iw": (_OBJ, False)}
_CLIENT: dict[str, tuple[str, bool]] = {
    "server_addr": (_STR, False),
    "local_addr": (_STR, False),
    "protocol": (_STR, False),
    "url": (_STR, False),
    "rct_ms": (_NUM, True),
    "ttfb_ms": (_NUM, True),
    "new_connection": (_BOOL, False),
    "handshake_ms": (_NUM, True),
    "decision": (_STR, True),
    "click": (_INT, True),
}
_CLIENT_OPTIONAL: dict[str, tuple[str, bool]] = {
    "decision_id": (_INT, True),
    "retried_from": (_STR, True),
    "retry_lost_ms": (_NUM, True),
    "hedged": (_STR, True),
    "hedge_at_ms": (_NUM, True),
    "path_index": (_INT, True),
    "path_decision": (_STR, True),
}
_EVENT: dict[str, tuple[str, bool]] = {"event": (_STR, False)}
_TRANSPORT: dict[str, tuple[str, bool]] = {
    "cc": (_STR, False),
    "rtt_ms": (_NUM, False),
    "min_rtt_ms": (_NUM, True),
    "rttvar_ms": (_NUM, True),
    "cwnd_bytes": (_INT, False),
    "sent_packets": (_INT, False),
    "lost_packets": (_INT, False),
    "congestion_events": (_INT, True),
    "unacked_bytes": (_INT, True),
    "delivery_rate_bps": (_INT, True),
}
_IW: dict[str, tuple[str, bool]] = {"iw": (_INT, False), "source": (_STR, False)}
_PROTOCOLS = ("h1", "h2", "h3")
_KIND_NAMES = {_NUM: "a finite number", _INT: "an integer", _STR: "a string", _BOOL: "a boolean", _OBJ: "an object"}

Problem = tuple[str, str]


def _type_ok(value: Any, kind: str) -> bool:
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, dict)


def _check(obj: dict, fields: dict[str, tuple[str, bool]], prefix: str, required: bool) -> Problem | None:
    for name, (kind, nullable) in fields.items():
        if name not in obj:
            if required:
                return prefix + name, "missing"
            continue
        value = obj[name]
        if value is None:
            if not nullable:
                return prefix + name, "null, but the schema requires a value"
            continue
        if not _type_ok(value, kind):
            return prefix + name, f"expected {_KIND_NAMES[kind]}, found {type(value).__name__} {_short(value)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validate(record: Any) -> Problem | None:
    """`None` when `record` follows the telemetry schema (version 1), else `(field, reason)`."""
    if not isinstance(record, dict):
        return "", f"a record must be a JSON object, found {type(record).__name__}"
    side = record.get("side")
    if side not in ("edge", "client"):
        return "side", "missing" if side is None else f'must be "edge" or "client", found {_short(side)}'
    problem = _check(record, _COMMON, "", True)
    if problem:
        return problem
    if record["schema"] != SCHEMA_VERSION:
        return "schema", f"version {record['schema']} is not supported (this control plane reads {SCHEMA_VERSION})"
    if record["conn_id"] < 0:
        return "conn_id", "must not be negative"
    if "event" in record:
        problem = _check(record, _EVENT, "", True)
    else:
        problem = _check(record, _REQUEST_COMMON, "", True)
        if problem is None:
            sided, optional = (_EDGE, _EDGE_OPTIONAL) if side == "edge" else (_CLIENT, _CLIENT_OPTIONAL)
            problem = _check(record, sided, "", True) or _check(record, optional, "", False)
        if problem is None and record.get("protocol") is not None and record["protocol"] not in _PROTOCOLS:
            problem = "protocol", f"must be one of h1, h2, h3, found {_short(record['protocol'])}"
        if problem is None and record["bytes"] < 0:
            problem = "bytes", "must not be negative"
        if problem is None and isinstance(record.get("iw"), dict):
            problem = _check(record["iw"], _IW, "iw.", True)
    if problem is None and isinstance(record.get("transport"), dict):
        problem = _check(record["transport"], _TRANSPORT, "transport.", True)
    return problem
