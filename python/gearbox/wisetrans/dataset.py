"""WiseTrans training data (WiseTrans §IV-B3): paired TCP-only / QUIC-only lab runs -> labelled rows.

    python -m gearbox.wisetrans dataset            # run the scenarios (root), build data/wisetrans/dataset.parquet
    python -m gearbox.wisetrans dataset --no-run   # rebuild the rows from runs already in --out

The seed trains on 128,000 request logs from 38 hours of a production app (§IV-B3); we have
no users, so the lab replays the same `feed` requests (WiseTrans §III-D) over emulated paths
(a grid, a WSP sample, cellular/HSR traces, UDP policers), once TCP-only and once QUIC-only
on identical link seeds, and labels each request by which protocol completed the same
requests faster around it. The label convention is docs/wisetrans.md's "Label" section, to
the letter:

- features of record i of run P: the Rust Feature Extractor (`gearbox._native.wisetrans_features`,
  the very code the gear runs, so training and deployment cannot drift) after observing run
  P's records in completion order up to i, window 10 s;
- label: S = the requests issued in run P within (t_i - 10 s, t_i] (t_i = i's completion)
  that exist in both runs (matched by (click, url, k)); cost_X = sum of their RCTs in run X,
  a failed request counting 10 000 ms; label 1 ("switch") iff cost_other < cost_P.

Rows whose S is empty carry no comparison and are dropped. The Ideal of §IV-C (per 10 s
window the better of the two static runs) uses the same matching; it lives here so the
evaluation computes it with the same code.

Rejected alternative: labelling by per-request RCT (the other run's same request faster).
Single requests are noisy (one loss, one queue spike); the window sum is what the gear can
act on, and it is the convention the gear's documentation fixes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gearbox.wisetrans.features import FEATURE_NAMES

REPO_ROOT = Path(__file__).resolve().parents[3]

# Table I's seven features in Table I order, then gearbox's four that make policing and
# blackholes visible: one list, kept beside its Python transcription of features.rs.
FEATURES = FEATURE_NAMES


@dataclass
class Args:
    # The lab scenarios whose paired tcp/quic runs make the data (grid, WSP sample, traces,
    # policers: §IV-B3's variety of networks, Fig. 1's axes, §II-B's UDP QoS).
    scenarios: list[str] = field(
        default_factory=lambda: [
            "scenarios/wisetrans-dataset-grid.toml",
            "scenarios/wisetrans-dataset-wsp.toml",
            "scenarios/wisetrans-dataset-traces.toml",
            "scenarios/wisetrans-dataset-policer.toml",
            "scenarios/wisetrans-dataset-udp.toml",
            "scenarios/wisetrans-dataset-traces2.toml",
            # Population parts (issue 19): eight clients on eight links per run, so eight
            # conditions per run; they replace wsp2 (20 single-path conditions, 40 runs), which
            # no longer fits the ~45 minutes of lab time with them.
            "scenarios/wisetrans-dataset-popa.toml",
            "scenarios/wisetrans-dataset-popb.toml",
            "scenarios/wisetrans-dataset-popc.toml",
            "scenarios/wisetrans-dataset-popd.toml",
            "scenarios/wisetrans-dataset-pope.toml",
        ]
    )
    out: str = "out/wisetrans/dataset"  # lab result folders, one per scenario (by its name's last part)
    dataset: str = "data/wisetrans/dataset.parquet"  # the shipped rows
    window_ms: float = 10_000.0  # docs/wisetrans.md: the Feature Extractor's and the label's window
    failed_cost_ms: float = 10_000.0  # docs/wisetrans.md: a failed request's cost
    run: bool = True  # False: only rebuild the rows from existing runs
    # Extra `gearbox edge` flags for every run, appended to each policy's own: a changed
    # implementation for §IV-D's retraining arm, e.g. ["--cc", "bbr"] (QUIC on BBR).
    edge_args: list[str] = field(default_factory=list)
    missing_only: bool = False  # run only the parts whose folder has no runs.json yet


# ---------------------------------------------------------------------------- matching


def completion_ms(r: dict[str, Any]) -> float:
    """A record's time: completion (`time_unix_ms + rct_ms`); a failed one at `time_unix_ms`."""
    rct = r.get("rct_ms")
    if r.get("error") is None and isinstance(rct, int | float) and math.isfinite(rct) and rct >= 0:
        return float(r["time_unix_ms"]) + float(rct)
    return float(r["time_unix_ms"])


def request_cost_ms(r: dict[str, Any], failed_cost_ms: float = 10_000.0) -> float:
    """RCT, or `failed_cost_ms` for a failed request."""
    rct = r.get("rct_ms")
    if r.get("error") is None and isinstance(rct, int | float) and math.isfinite(rct):
        return float(rct)
    return failed_cost_ms


def match_keys(records: Sequence[dict[str, Any]]) -> list[tuple[Any, str, int]]:
    """(click, url, k) of each record, k = the occurrence of (click, url) in send order."""
    order = sorted(range(len(records)), key=lambda i: (records[i]["time_unix_ms"], i))
    seen: dict[tuple[Any, str], int] = {}
    keys: list[tuple[Any, str, int]] = [("", "", 0)] * len(records)
    for i in order:
        pair = (records[i].get("click"), records[i].get("url", ""))
        k = seen.get(pair, 0)
        seen[pair] = k + 1
        keys[i] = (pair[0], pair[1], k)
    return keys


def client_records(run_dir: Path) -> list[dict[str, Any]]:
    """The client's records of one lab run."""
    out = []
    path = run_dir / "client.jsonl"
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if rec.get("side", "client") == "client":
                out.append(rec)
    return out


# ---------------------------------------------------------------------------- labels


def label_rows(
    run_p: Sequence[dict[str, Any]],
    run_q: Sequence[dict[str, Any]],
    protocol: str,
    window_ms: float = 10_000.0,
    failed_cost_ms: float = 10_000.0,
    features: Sequence[dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Labelled rows of run P (`protocol`, "tcp" or "quic") against the paired run Q.

    One row per record of P with a non-empty comparison set: the seven features, `label`
    (1 = switch), `cost_self_ms`, `cost_other_ms`, `window_requests`, `t_ms` (completion,
    ms since P's first send). `features` defaults to the Rust extractor's."""
    if features is None:
        from gearbox import _native

        features = _native.wisetrans_features(protocol, list(run_p), window_ms=window_ms)
    if len(features) != len(run_p):
        raise ValueError(f"{len(features)} feature rows for {len(run_p)} records")
    if not run_p:
        return []
    keys_p = match_keys(run_p)
    q_by_key = dict(zip(match_keys(run_q), run_q, strict=True))
    sends = [float(r["time_unix_ms"]) for r in run_p]
    t0 = min(sends)
    # Records of P present in Q, by send time, for the window sums.
    both = sorted(
        (sends[j], request_cost_ms(run_p[j], failed_cost_ms), request_cost_ms(q_by_key[keys_p[j]], failed_cost_ms))
        for j in range(len(run_p))
        if keys_p[j] in q_by_key
    )
    rows = []
    for i, r in enumerate(run_p):
        t_i = completion_ms(r)
        cost_p = cost_q = 0.0
        n = 0
        for send, cp, cq in both:  # a few hundred records per run: a plain scan is clear and fast
            if t_i - window_ms < send <= t_i:
                cost_p += cp
                cost_q += cq
                n += 1
        if n == 0:
            continue
        row = {name: float(features[i][name]) for name in FEATURES}
        row.update(
            protocol=protocol,
            t_ms=t_i - t0,
            window_requests=n,
            cost_self_ms=cost_p,
            cost_other_ms=cost_q,
            label=int(cost_q < cost_p),
        )
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- Ideal (§IV-C)


def ideal_choice(
    run_tcp: Sequence[dict[str, Any]],
    run_quic: Sequence[dict[str, Any]],
    window_ms: float = 10_000.0,
    failed_cost_ms: float = 10_000.0,
) -> list[dict[str, Any]]:
    """§IV-C's Ideal on identical replays: the requests of both runs matched by (click, url, k)
    and grouped into windows of `window_ms` by send time since the first send; per window the
    protocol with the lower summed cost. Returns one dict per matched request: `key` (its
    match key), `window`, `choice` ("tcp"/"quic"), `rct_ms` (the chosen run's cost), `tcp_ms`,
    `quic_ms`. Tie: TCP (the default transport)."""
    if not run_tcp or not run_quic:
        return []
    q_by_key = dict(zip(match_keys(run_quic), run_quic, strict=True))
    t0 = min(float(r["time_unix_ms"]) for r in run_tcp)
    windows: dict[int, list[tuple[Any, float, float]]] = {}
    for key, r in zip(match_keys(run_tcp), run_tcp, strict=True):
        q = q_by_key.get(key)
        if q is None:
            continue
        w = int((float(r["time_unix_ms"]) - t0) // window_ms)
        windows.setdefault(w, []).append((key, request_cost_ms(r, failed_cost_ms), request_cost_ms(q, failed_cost_ms)))
    out = []
    for w in sorted(windows):
        triples = windows[w]
        choice = "quic" if sum(q for _, _, q in triples) < sum(t for _, t, _ in triples) else "tcp"
        for key, t, q in triples:
            out.append(
                {
                    "key": key,
                    "window": w,
                    "choice": choice,
                    "rct_ms": q if choice == "quic" else t,
                    "tcp_ms": t,
                    "quic_ms": q,
                }
            )
    return out


# ---------------------------------------------------------------------------- lab runs -> rows


def paired_runs(lab_out: Path) -> Iterable[tuple[dict[str, Any], Path, Path]]:
    """(condition, tcp run folder, quic run folder) of every condition and repetition of a lab
    result folder whose two static runs both left records."""
    conds = {c["condition_id"]: c for c in json.loads((lab_out / "conditions.json").read_text())}
    runs = json.loads((lab_out / "runs.json").read_text())
    by = {(r["condition_id"], r["repetition"], r["policy"]): r for r in runs}
    for (cid, rep, policy), r in sorted(by.items()):
        if policy != "tcp" or (cid, rep, "quic") not in by:
            continue
        yield conds[cid], Path(r["dir"]), Path(by[(cid, rep, "quic")]["dir"])


def client_prefix(record: dict[str, Any]) -> int:
    """The emulated client's /24 prefix from its local address (docs/emu.md: prefix i has
    `100.(64 + i / 256).(i % 256).h`); 0 for any other address (the single topology's)."""
    host = str(record.get("local_addr", "")).rsplit(":", 1)[0].strip("[]")
    parts = host.split(".")
    if len(parts) == 4 and parts[0] == "100" and all(p.isdigit() for p in parts):
        return (int(parts[1]) - 64) * 256 + int(parts[2])
    return 0


def by_prefix(records: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """A run's records split by client prefix: in the population topology each prefix has
    its own link, so each is a network condition of its own (one prefix otherwise)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(client_prefix(r), []).append(r)
    return out


def rows_of_lab(lab_out: Path, part: str, a: Args) -> list[dict[str, Any]]:
    """Labelled rows of every condition of a lab folder; in a population run, of every
    client prefix separately (`group` = part/condition/prefix, the unit of grouped CV)."""
    rows = []
    for cond, tcp_dir, quic_dir in paired_runs(lab_out):
        rt, rq = by_prefix(client_records(tcp_dir)), by_prefix(client_records(quic_dir))
        for prefix in sorted(set(rt) & set(rq)):
            tags = {
                "part": part,
                "condition_id": cond["condition_id"],
                "condition": cond["label"],
                "prefix": prefix,
                "group": f"{part}/{cond['condition_id']}/p{prefix}",
                "run": tcp_dir.name.rsplit("-", 2)[0],
            }
            for proto, p, q in (("tcp", rt[prefix], rq[prefix]), ("quic", rq[prefix], rt[prefix])):
                for row in label_rows(p, q, proto, a.window_ms, a.failed_cost_ms):
                    rows.append({**tags, **row})
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_part(path: str, edge_args: Sequence[str] = ()) -> tuple[str, Any]:
    """A dataset scenario and its part name (its name's last part), with `edge_args`
    appended to every policy's edge flags."""
    from gearbox.lab import scenario as sc

    s = sc.load(REPO_ROOT / path if not Path(path).is_absolute() else path)
    for p in s.policies:
        p.edge_args = [*p.edge_args, *edge_args]
    return s.name.rsplit("-", 1)[-1], s


def run_scenarios(
    scenarios: Sequence[str],
    out: Path,
    edge_args: Sequence[str] = (),
    missing_only: bool = False,
    progress: bool = False,
) -> list[tuple[str, Path]]:
    """Runs each scenario with the lab (one emulation at a time) into out/<part>;
    `missing_only` skips parts that already have a runs.json."""
    from gearbox.lab import runner

    done = []
    for path in scenarios:
        part, s = load_part(path, edge_args)
        if not (missing_only and (out / part / "runs.json").exists()):
            runner.run_scenario(s, out / part, jobs=1, force=True, progress=progress)
        done.append((part, out / part))
    return done


def main(argv: list[str] | None = None) -> int:
    a = Args()
    p = argparse.ArgumentParser(prog="gearbox lab wisetrans dataset", description=__doc__.split("\n")[0])
    p.add_argument("--scenario", action="append", help="scenario file (repeatable; default: the four shipped parts)")
    p.add_argument("--out", default=a.out)
    p.add_argument("--dataset", default=a.dataset)
    p.add_argument("--no-run", action="store_true", help="only rebuild rows from the runs already in --out")
    p.add_argument("--missing-only", action="store_true", help="run only the parts without runs in --out")
    p.add_argument(
        "--edge-arg",
        action="append",
        default=[],
        help="extra `gearbox edge` flag for every run (repeatable), e.g. --edge-arg=--cc --edge-arg=bbr",
    )
    ns = p.parse_args(argv)
    a.scenarios = ns.scenario or a.scenarios
    a.out, a.dataset, a.run = ns.out, ns.dataset, not ns.no_run
    a.edge_args, a.missing_only = ns.edge_arg, ns.missing_only
    out = REPO_ROOT / a.out if not Path(a.out).is_absolute() else Path(a.out)
    if a.run:
        parts = run_scenarios(a.scenarios, out, a.edge_args, a.missing_only)
    else:
        names = [load_part(path)[0] for path in a.scenarios]
        parts = [(name, out / name) for name in names]
    rows: list[dict[str, Any]] = []
    for part, folder in parts:
        if not (folder / "runs.json").exists():
            print(f"dataset: {folder} has no runs, skipped", file=sys.stderr)
            continue
        got = rows_of_lab(folder, part, a)
        print(f"dataset: {part}: {len(got)} rows")
        rows.extend(got)
    if not rows:
        print("dataset: no rows", file=sys.stderr)
        return 1
    dataset = REPO_ROOT / a.dataset
    write_parquet(rows, dataset)
    for proto in ("tcp", "quic"):
        mine = [r for r in rows if r["protocol"] == proto]
        pos = sum(r["label"] for r in mine)
        print(f"dataset: {proto}: {len(mine)} rows, {pos} switch ({pos / max(1, len(mine)):.1%})")
    print(f"dataset: wrote {dataset} ({dataset.stat().st_size / 1024:.0f} KiB, sha256 {sha256_of(dataset)[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
