"""Collecting a lab folder's results: both ends' telemetry records of every run,
flattened into one table (`requests.parquet`, and the `requests`, `runs` and `conditions`
tables of `results.duckdb`), each row tagged with its run, condition and policy."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gearbox.lab.control import policy_version
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
    "retried_from": "string",
    "retry_lost_ms": "float64",
    "hedged": "string",
    "hedge_at_ms": "float64",
    "path_index": "int64",
    "path_decision": "string",
    "policy_version": "int64",
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
    "transport_timeouts": "int64",
    "iw_cluster": "string",
    "iw_hour": "int64",
    "iw_iw": "int64",
    "iw_source": "string",
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


LAB_FILES = ("plan.json", "conditions.json", "runs.json")
# The fields collecting and summarizing read, per file (docs/lab.md, "Output").
PLAN_FIELDS: dict[str, type] = {"scenario": str, "policies": list}
POLICY_FIELDS: dict[str, type] = {"name": str, "proto": str}
CONDITION_FIELDS: dict[str, type] = {"condition_id": str, "label": str, "params": dict, "values": dict, "emu": dict}
RUN_FIELDS: dict[str, type] = {
    "run_id": str,
    "condition_id": str,
    "policy": str,
    "repetition": int,
    "link_seed": int,
    "workload_seed": int,
    "status": str,
    "started_unix_ms": float,
}


@dataclass
class LabFolder:
    """The description files of a lab folder, read and checked."""

    out: Path
    plan: dict[str, Any]
    conditions: list[dict[str, Any]]
    runs: list[dict[str, Any]]

    def run_dir(self, run: dict[str, Any]) -> Path:
        """A run's telemetry folder, OUT/runs/RUN_ID (found even after OUT was moved)."""
        return self.out / "runs" / run["run_id"]


def read_lab_folder(out: Path) -> LabFolder:
    """Reads plan.json, conditions.json and runs.json of a lab folder; a folder that is not
    a lab run, or a file that is not what `gearbox lab run` writes, is a LabError naming
    the file (and the entry and field)."""
    if not out.is_dir():
        raise LabError(f"{out} is not a folder: give the output folder of `gearbox lab run` (its --out)")
    missing = [name for name in LAB_FILES if not (out / name).is_file()]
    if missing:
        raise LabError(
            f"{out} is not a lab run folder: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing "
            "(`gearbox lab run` writes plan.json, conditions.json and runs.json)"
        )
    plan = read_json(out / "plan.json", dict)
    _check_fields(out / "plan.json", "", plan, PLAN_FIELDS)
    for i, p in enumerate(plan["policies"]):
        _check_fields(out / "plan.json", f"policies[{i}]", p, POLICY_FIELDS)
    conditions = read_json(out / "conditions.json", list)
    for i, c in enumerate(conditions):
        _check_fields(out / "conditions.json", f"[{i}]", c, CONDITION_FIELDS)
    runs = read_json(out / "runs.json", list)
    condition_ids = {c["condition_id"] for c in conditions}
    policy_names = {p["name"] for p in plan["policies"]}
    for i, r in enumerate(runs):
        _check_fields(out / "runs.json", f"[{i}]", r, RUN_FIELDS)
        if r["condition_id"] not in condition_ids:
            raise LabError(f"{out / 'runs.json'}: [{i}].condition_id: {r['condition_id']!r} is not in conditions.json")
        if r["policy"] not in policy_names:
            raise LabError(f"{out / 'runs.json'}: [{i}].policy: {r['policy']!r} is not a policy of plan.json")
    return LabFolder(out=out, plan=plan, conditions=conditions, runs=runs)


def read_json(path: Path, kind: type) -> Any:
    """A JSON file that must hold an object (`kind` dict) or an array (list); LabError
    naming the file (and line and column) otherwise."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LabError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise LabError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    if not isinstance(doc, kind):
        want = "an object" if kind is dict else "an array"
        raise LabError(f"{path}: must be {want}, got {_json_kind(doc)}")
    return doc


def _check_fields(path: Path, where: str, entry: Any, fields: dict[str, type]) -> None:
    if not isinstance(entry, dict):
        raise LabError(f"{path}: {where or 'the document'}: must be an object, got {_json_kind(entry)}")
    for key, kind in fields.items():
        at = f"{where}.{key}" if where else key
        if key not in entry:
            raise LabError(f"{path}: {at}: missing")
        v = entry[key]
        ok = isinstance(v, int | float) and not isinstance(v, bool) if kind is float else isinstance(v, kind)
        if kind is int and isinstance(v, bool):
            ok = False
        if not ok:
            raise LabError(f"{path}: {at}: must be {_JSON_KINDS[kind]}, got {_json_kind(v)}")


_JSON_KINDS = {str: "a string", int: "an integer", float: "a number", list: "an array", dict: "an object"}


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    return next((name for kind, name in _JSON_KINDS.items() if isinstance(v, kind)), type(v).__name__)


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
    """The per-request records of a telemetry file (none if the file is absent: a run that
    failed before its side started). Event records (those with an `event` field, such as
    the edge's `cc_switch`, docs/telemetry.md) are not requests and are left out. A torn
    last line (a writer killed mid-line) is skipped; any other line that is not a JSON
    object is a LabError naming the file and line."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LabError(f"{path}: cannot read: {e.strerror or e}") from e
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # no newline after it: torn, not corrupt
                continue
            raise LabError(f"{path}:{number}: not a telemetry record (invalid JSON: {e.msg})") from e
        if not isinstance(record, dict):
            raise LabError(f"{path}:{number}: not a telemetry record (a JSON {type(record).__name__}, not an object)")
        if "event" not in record:
            records.append(record)
    return records


def without_model(records: list[dict[str, Any]]) -> list[str]:
    """The decisions among `records` that say `why=no-model`: a gear that found no model
    and chose its documented fallback (docs/wisetrans.md, "Decision strings")."""
    return [d for d in (r.get("decision") for r in records) if isinstance(d, str) and "why=no-model" in d.split(";")]


def rows_of_run(
    run: dict[str, Any], cond: dict[str, Any], policy: dict[str, Any], run_dir: Path
) -> list[dict[str, Any]]:
    """The table rows of one run: its tags, its condition's values, then each record of
    the telemetry in `run_dir` flattened."""
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
    for name in ("client.jsonl", "edge.jsonl"):
        for rec in read_records(run_dir / name):
            row = dict(base)
            t = rec.get("time_unix_ms")
            # Seconds since the emulator started (the links' time 0, within ~0.1 s):
            # the clock of the scenario's schedule.
            row["t_s"] = (t - run["started_unix_ms"]) / 1000.0 if isinstance(t, int | float) else None
            row.update(flatten(rec))
            version = policy_version(rec)
            if version is not None:
                # The control plane's version of the gear's policy that decided (lab/control.py).
                row["policy_version"] = version
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
    lab = read_lab_folder(out)
    conds = {c["condition_id"]: c for c in lab.conditions}
    policies = {p["name"]: p for p in lab.plan["policies"]}
    rows: list[dict[str, Any]] = []
    for run in lab.runs:
        _refuse_runs_without_model(lab, run)
        rows += rows_of_run(run, conds[run["condition_id"]], policies[run["policy"]], lab.run_dir(run))
    table = to_arrow(rows)
    pq.write_table(table, out / "requests.parquet")
    _write_duckdb(out, table, lab.runs, lab.conditions)
    return table


def _refuse_runs_without_model(lab: LabFolder, run: dict[str, Any]) -> None:
    """A run whose gear ran without its model measured the fallback, not the gear: its
    records must never be summarized under the policy's name."""
    for name in ("client.jsonl", "edge.jsonl"):
        path = lab.run_dir(run) / name
        records = read_records(path)
        fallback = without_model(records)
        if fallback:
            raise LabError(
                f"{path}: {len(fallback)} of {len(records)} records say `why=no-model` (first: {fallback[0]!r}): "
                f"policy {run['policy']!r} ran without its gear's model, so the gear did not run; "
                f"check the --model-dir of policies.{run['policy']}.load_args in {lab.plan.get('source')}"
            )


def read_results_table(out: Path) -> Any:
    """OUT/requests.parquet as a pyarrow table; a LabError naming it if it is unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = out / "requests.parquet"
    try:
        return pq.read_table(path)
    except FileNotFoundError as e:
        raise LabError(f"{path} is missing: `gearbox lab collect {out}` rebuilds it from the runs") from e
    except (pa.ArrowException, OSError) as e:
        raise LabError(f"{path}: not a readable Parquet file ({e}): `gearbox lab collect {out}` rebuilds it") from e


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
