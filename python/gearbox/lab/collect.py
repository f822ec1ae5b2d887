"""Collecting a lab folder's results: both ends' telemetry records of every run,
flattened into one table (`requests.parquet`, and the `requests`, `runs` and `conditions`
tables of `results.duckdb`), each row tagged with its run, condition and policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gearbox.lab.environment import LabError

# Types of the record fields (docs/telemetry.md); fields not listed are inferred, so a
# field added to the records later still lands in the table.
RECORD_TYPES: dict[str, str] = {
    "side": "string",
    "schema": "int64",
    "time_unix_ms": "float64",
    "conn_id": "int64",
    "protocol": "string",
    "method": "string",
    "status": "int64",
    "bytes": "int64",
    "error": "string",
    "client_addr": "string",
    "path": "string",
    "server_time_ms": "float64",
    "server_time_source": "string",
    "server_addr": "string",
    "local_addr": "string",
    "url": "string",
    "rct_ms": "float64",
    "ttfb_ms": "float64",
    "new_connection": "bool",
    "handshake_ms": "float64",
    "decision": "string",
    "click": "int64",
    "transport_cc": "string",
    "transport_rtt_ms": "float64",
    "transport_min_rtt_ms": "float64",
    "transport_rttvar_ms": "float64",
    "transport_cwnd_bytes": "int64",
    "transport_sent_packets": "int64",
    "transport_lost_packets": "int64",
    "transport_congestion_events": "int64",
    "transport_unacked_bytes": "int64",
    "transport_delivery_rate_bps": "int64",
}
NESTED_FIELDS = ("transport",)
RUN_COLUMNS: dict[str, str] = {
    "run_id": "string",
    "condition_id": "string",
    "condition": "string",
    "policy": "string",
    "proto": "string",
    "repetition": "int64",
    "link_seed": "int64",
    "workload_seed": "int64",
}


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"transport": {"cc": "bbr"}}` -> `{"transport_cc": "bbr"}` (any depth)."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if v is None and f"{prefix}{k}" in NESTED_FIELDS:
            continue  # a null `transport`: its transport_* columns stay null
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a telemetry file; a torn last line (a killed writer) is skipped."""
    records = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def rows_of_run(run: dict[str, Any], cond: dict[str, Any], policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The table rows of one run: its tags, its condition's values, then each record flattened."""
    base: dict[str, Any] = {
        "run_id": run["run_id"],
        "condition_id": run["condition_id"],
        "condition": cond["label"],
        "policy": run["policy"],
        "proto": policy["proto"],
        "repetition": run["repetition"],
        "link_seed": run["link_seed"],
        "workload_seed": run["workload_seed"],
    }
    for k, v in {**cond["values"], **cond["params"]}.items():
        base[f"cond_{k}"] = v
    rows = []
    run_dir = Path(run["dir"])
    for name in ("client.jsonl", "edge.jsonl"):
        for rec in read_records(run_dir / name):
            row = dict(base)
            t = rec.get("time_unix_ms")
            # Seconds since the emulator started (the links' time 0, within ~0.1 s):
            # the clock of the scenario's schedule.
            row["t_s"] = (t - run["started_unix_ms"]) / 1000.0 if isinstance(t, int | float) else None
            row.update(flatten(rec))
            rows.append(row)
    return rows


def to_arrow(rows: list[dict[str, Any]]) -> Any:
    """A pyarrow table of rows with the union of their keys; known fields get their
    documented types (so a column of nulls is still typed)."""
    import pyarrow as pa

    _ARROW_TYPES = {"string": pa.string, "int64": pa.int64, "float64": pa.float64, "bool": pa.bool_}
    columns: dict[str, list[Any]] = {}
    for row in rows:
        for k in row:
            columns.setdefault(k, [])
    for k, values in columns.items():
        values.extend(row.get(k) for row in rows)
    arrays = {}
    for k, values in columns.items():
        typ = RECORD_TYPES.get(k) or RUN_COLUMNS.get(k) or ("float64" if k.startswith("cond_") or k == "t_s" else None)
        if typ == "int64":
            values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
        try:
            arrays[k] = pa.array(values, type=_ARROW_TYPES[typ]() if typ else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            arrays[k] = pa.array(
                [None if v is None else json.dumps(v) if isinstance(v, list) else str(v) for v in values]
            )
    return pa.table(arrays) if arrays else pa.table({k: pa.array([], type=pa.string()) for k in RUN_COLUMNS})


def collect(out: Path) -> Any:
    """Builds the results table of a lab folder from its runs' telemetry and writes
    `requests.parquet` and `results.duckdb` (tables `requests`, `runs`, `conditions`).
    Returns the pyarrow table."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise LabError("collecting results needs pyarrow: run scripts/setup.sh (the `lab` extra)") from e
    runs = json.loads((out / "runs.json").read_text())
    conds = {c["condition_id"]: c for c in json.loads((out / "conditions.json").read_text())}
    policies = {p["name"]: p for p in json.loads((out / "plan.json").read_text())["policies"]}
    rows: list[dict[str, Any]] = []
    for run in runs:
        rows += rows_of_run(run, conds[run["condition_id"]], policies[run["policy"]])
    table = to_arrow(rows)
    pq.write_table(table, out / "requests.parquet")
    _write_duckdb(out, table, runs, list(conds.values()))
    return table


def _write_duckdb(out: Path, table: Any, runs: list[dict[str, Any]], conds: list[dict[str, Any]]) -> None:
    try:
        import duckdb
    except ImportError:
        print("gearbox lab: duckdb is not installed; wrote requests.parquet only", file=sys.stderr)
        return
    import pyarrow as pa

    db = out / "results.duckdb"
    db.unlink(missing_ok=True)
    con = duckdb.connect(str(db))
    try:
        runs_t = pa.Table.from_pylist(runs)
        conds_t = pa.Table.from_pylist(
            [
                {
                    "condition_id": c["condition_id"],
                    "label": c["label"],
                    **{f"cond_{k}": v for k, v in {**c["values"], **c["params"]}.items()},
                    "emu_json": json.dumps(c["emu"]),
                }
                for c in conds
            ]
        )
        for name, t in (("requests", table), ("runs", runs_t), ("conditions", conds_t)):
            con.register("incoming", t)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM incoming")
            con.unregister("incoming")
    finally:
        con.close()
