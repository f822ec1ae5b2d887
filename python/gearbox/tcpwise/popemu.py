"""`gearbox lab tcpwise evaluate --population --emulator`: TCP WISE's online evaluation (§V-B:
Tables I-II, Fig. 11) on the real edge in the emulator, over kernel TCP (the edge's BPF
`sock_ops` program) and QUIC (the edge's gear), where `population.py` runs it in the simulator
over QUIC only.

**The population** is `population.draw_paths(prefixes, seed)`, the simulator's draw: the same
seed gives the same /24s with the same rates, RTTs, random loss and buffers (in packets), set
as `[[population.prefix]]` overrides of the lab's population topology (docs/emu.md: each /24
its own pair of links). One difference: the lab's per-prefix override has no per-direction
loss, so a lossy /24 loses packets in both directions here (the simulator: responses only).

**Traffic**: the `search` workload (a new connection per response) at `rate` requests per
second per /24 on average (the workload's time scale), `seconds` of real time, the same
requests and link seeds under every policy (the lab's seeds: one scenario seed and one
condition, so every run of every stage gets the same ones).

**Policies**, per transport (`tcp`: HTTP/2 on kernel TCP; `quic`: HTTP/3):
- `iw10`: the edge without a table (the stacks' default IW 10), the seed's TCP-10 (§V-B1).
- `tcpwise`: the unattended loop of `scenarios/tcpwise-loop.toml` (docs/tcpwise.md, "The loop
  in the lab"): a control plane beside the edge, its job running `gearbox learn tcpwise` every
  θ over the records that arrived since its last run, from an empty table (the fast start for
  `others`), the edge polling the table. The job keeps the samples of entries it kept for too
  few samples in the table's policy folder (`--carry-out`, read back with `--carry`), as the
  learner's own `--every` loop does. It learns during the measured run, as TCP WISE's online
  experiment did; the report gives the run's second half too.
- `riptide`: a Riptide-style baseline ("Riptide: Jump-Starting Back-Office Connections in Cloud
  Systems", docs/papers.md): each /24's IW is the mean congestion window its connections ended
  with in the `iw10` run of the same transport (the edge records' `transport.cwnd_bytes` over
  the stack's packet: 1,448-byte segments on TCP, 1,200-byte packets on QUIC), in [3, 100];
  applied with `gearbox edge --cwnd-table` (an `iw = [n, n]` entry per /24).
- `oracle`: per /24 the IW of the grid (`oracle_iws`, IW 10 being the `iw10` run) whose run
  gave its responses the least p80: hindsight, chosen on the data it is scored on; one run per
  IW with every connection at that IW (`others` pinned). Prefixes have links of their own, so
  a /24's responses under one IW do not depend on the others' IWs.

A response's latency is the client's completion time less its handshake
(`evaluate.latency_ms`), as in the simulator's evaluation; the edge's TCP latency
(`server_time_ms`, §IV-B, what the learner minimises) is reported beside it. Table II: the
retransmission rate is the edge's retransmitted over sent packets (TCP: `tcpi_total_retrans`
over `tcpi_segs_out`; QUIC: lost over sent) and the share of responses whose connection
retransmitted; on kernel TCP also the share of responses whose connection had a
retransmission timeout, and timeouts per response (the edge's `transport.timeouts`,
`tcpi_total_rto`); quinn counts no timeouts.

**Fidelity** (`fidelity`): the emulator must carry the paths as configured at this load; per
run, from the edge's records, the least RTT each /24's connections measured against its
configured RTT (a relay that falls behind delivers late, which shows first as RTTs above the
configured floor), and the relay's own summary (CPU time over wall time, packets it could not
route or write) from `emu.log` when `GEARBOX_LOG` asks `gearbox emu` for it (`main` does).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gearbox.stats import percentile
from gearbox.tcpwise.evaluate import latency_ms
from gearbox.tcpwise.population import SEARCH_MEAN_GAP_S, PrefixPath, draw_paths

PROG = "gearbox lab tcpwise evaluate --population --emulator"
TRANSPORTS = ("tcp", "quic")
POLICIES = ("iw10", "riptide", "tcpwise", "oracle")
PACKET_BYTES = {"tcp": 1448, "quic": 1200}
"""The unit of a window in each stack's IW: a TCP segment on the lab's 1,500-byte MTU with
timestamps, and gearbox's QUIC packet (gearbox-cc's PACKET_BYTES)."""
MIN_IW, CAP = 3, 100
RELAY_LOG = "gearbox::emu_cmd=info"
"""`GEARBOX_LOG` for the runs: `gearbox emu`'s link and relay summaries in each run's emu.log."""


@dataclass(frozen=True)
class Plan:
    """What every stage shares."""

    paths: tuple[PrefixPath, ...]
    seconds: float
    """Real seconds of requests per run."""
    rate: float
    """`search` requests per second per /24."""
    seed: int
    theta_s: float
    learn_config: Path
    """The learner's `[tcpwise]` table (docs/tcpwise.md, "Learning")."""

    @property
    def time_scale(self) -> float:
        return 1.0 / (SEARCH_MEAN_GAP_S * self.rate * len(self.paths))

    @property
    def workload_seconds(self) -> float:
        """`duration_s` is in the workload's time: real seconds over the time scale."""
        return self.seconds / self.time_scale


def table_text(entries: dict[str, int], version: int = 1) -> str:
    """A Cwnd Table pinning each prefix (or `others`) at its IW (docs/tcpwise.md)."""
    out = f"version = {version}\ncap = {CAP}\n"
    for prefix, iw in entries.items():
        out += f'\n[[cluster]]\nprefix = "{prefix}"\niw = [{iw}, {iw}]\n'
    return out


def scenario_text(plan: Plan, name: str, policies: Sequence[tuple[str, str, Path | None]], control: bool) -> str:
    """A lab scenario (TOML) over the plan's population. `policies`: (name, proto, Cwnd Table
    or None); `control`: the tcpwise loop (a control plane and its learner job) instead."""
    lines = [
        f"# {PROG}: stage {name} (python/gearbox/tcpwise/popemu.py)",
        f'name = "{name}"',
        f'description = "TCP WISE population ({len(plan.paths)} /24s) on the emulator: {name}"',
        f"seed = {plan.seed}",
        "repetitions = 1",
        f"duration_s = {plan.workload_seconds:.3f}",
        f"timeout_s = {max(plan.workload_seconds, plan.seconds + 240):.3f}",
        'topology = "population"',
    ]
    if control:
        lines.append(f"policies = [{', '.join(json.dumps(p[0]) for p in policies)}]")
    lines += [
        "",
        "[workload]",
        'name = "search"',
        f"seed = {plan.seed}",
        f"time_scale = {plan.time_scale:.6f}",
        "",
        "[population]",
        f"prefixes = {len(plan.paths)}",
        "hosts_per_prefix = 1",
    ]
    for p in plan.paths:
        lines += [
            "",
            "[[population.prefix]]",
            f"index = {p.index}",
            f"bandwidth_mbps = {p.rate_mbps:g}",
            f"rtt_ms = {p.rtt_ms:g}",
            f"buffer_packets = {p.buffer_packets}",
        ]
        if p.loss > 0:
            lines.append(f"loss_rate = {p.loss:g}")
    lines += ["", "[[path]]                       # overridden per prefix above"]
    lines += ["bandwidth_mbps = 10.0", "rtt_ms = 20.0"]
    if control:
        lines += [
            "",
            "[control]",
            "poll_s = 0.5",
            "",
            "[[control.push]]               # an empty table (version 1): IW 10 until the job's first run",
            'gear = "tcpwise"',
            'dir = "tcpwise-empty"',
            "",
            "[control.jobs.tcpwise]",
            'gear = "tcpwise"',
            f"every_s = {plan.theta_s:g}",
            'side = "edge"',
            'command = ["{python}", "-m", "gearbox.tcpwise", "learn", "--telemetry", "{telemetry}",',
            '           "--table", "{input}/cwnd.toml", "--out", "{output}/cwnd.toml",',
            '           "--carry", "{input}/carry.jsonl", "--carry-out", "{output}/carry.jsonl",',
            f'           "--config", {json.dumps(str(plan.learn_config))}]',
            "timeout_s = 60.0",
        ]
    else:
        for pname, proto, table in policies:
            lines += ["", f"[policies.{pname}]", f'proto = "{proto}"', "baseline = false"]
            if table is not None:
                lines.append(f"edge_args = {json.dumps(['--cwnd-table', str(table)])}")
    return "\n".join(lines) + "\n"


EMPTY_TABLE = """# The Cwnd Table the population's TCP WISE loop starts from: no entry, every connection at
# the stack's default IW (10) until the learner's first run writes `others` (the fast start).
version = 1
cap = 100
"""


def write_empty_policy(folder: Path) -> None:
    """The control plane's first push: an empty Cwnd Table with its sidecar (docs/control.md)."""
    import hashlib

    folder.mkdir(parents=True, exist_ok=True)
    note = b"empty cwnd table of the population's tcpwise loop\n"
    (folder / "cwnd.toml").write_text(EMPTY_TABLE, encoding="utf-8")
    (folder / "train.txt").write_bytes(note)
    meta = {
        "format_version": 1,
        "model_version": "tcpwise-population-1",
        "training_data": {"sha256": hashlib.sha256(note).hexdigest(), "file": "train.txt", "rows": 1},
    }
    (folder / "cwnd.meta.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------
# Records -> figures


def prefix_of(addr: str | None) -> int | None:
    """The population index of a client address `100.(64 + i / 256).(i % 256).h[:port]`."""
    if not addr:
        return None
    m = re.match(r"^100\.(\d+)\.(\d+)\.\d+", addr)
    if not m or int(m.group(1)) < 64:
        return None
    return (int(m.group(1)) - 64) * 256 + int(m.group(2))


@dataclass
class RunRecords:
    """One run's client and edge request records."""

    client: list[dict[str, Any]]
    edge: list[dict[str, Any]]


def read_run(run_dir: Path) -> RunRecords:
    from gearbox.lab.collect import read_records

    return RunRecords(read_records(run_dir / "client.jsonl"), read_records(run_dir / "edge.jsonl"))


def latencies(records: Iterable[dict[str, Any]], since_ms: float | None = None) -> dict[int, list[float]]:
    """Client latencies (completion less handshake) per /24, of requests sent after `since_ms`."""
    out: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if since_ms is not None and float(r.get("time_unix_ms") or 0.0) < since_ms:
            continue
        p, lat = prefix_of(r.get("local_addr")), latency_ms(r)
        if p is not None and lat is not None:
            out[p].append(lat)
    return out


def riptide_iws(edge: Iterable[dict[str, Any]], transport: str) -> dict[int, int]:
    """Per /24, the mean window its connections ended with, in packets of the stack, in [3, 100]."""
    cwnds: dict[int, list[float]] = defaultdict(list)
    for r in edge:
        t = r.get("transport") or {}
        p = prefix_of(r.get("client_addr"))
        if p is None or r.get("error") or t.get("cwnd_bytes") is None:
            continue
        cwnds[p].append(float(t["cwnd_bytes"]) / PACKET_BYTES[transport])
    return {p: min(CAP, max(MIN_IW, round(sum(v) / len(v)))) for p, v in sorted(cwnds.items())}


def final_iws(edge: Sequence[dict[str, Any]]) -> dict[int, int]:
    """Per /24, α (the learner's current best, the control) of the set the edge applied to its
    last connection; 10 for a /24 whose last connection had no table entry."""
    out: dict[int, int] = {}
    for r in sorted(edge, key=lambda r: float(r.get("time_unix_ms") or 0.0)):
        p = prefix_of(r.get("client_addr"))
        if p is None:
            continue
        iw = r.get("iw")
        out[p] = int(iw["iw_set"][0]) if isinstance(iw, dict) and iw.get("iw_set") else 10
    return out


def _stats(lat: list[float]) -> dict[str, Any]:
    if not lat:
        return {"responses": 0}
    return {
        "responses": len(lat),
        "mean_ms": round(sum(lat) / len(lat), 1),
        **{f"p{q}_ms": round(percentile(lat, q), 1) for q in (10, 20, 50, 80, 90, 99)},
    }


def _retransmissions(edge: Iterable[dict[str, Any]], prefixes: set[int] | None = None) -> dict[str, Any]:
    sent = lost = lossy = n = 0
    server: list[float] = []
    timeouts: list[int] = []
    for r in edge:
        p = prefix_of(r.get("client_addr"))
        if p is None or (prefixes is not None and p not in prefixes) or r.get("error"):
            continue
        t = r.get("transport") or {}
        if t.get("sent_packets") is None:
            continue
        n += 1
        sent += int(t["sent_packets"])
        lost += int(t.get("lost_packets") or 0)
        lossy += 1 if (t.get("lost_packets") or 0) > 0 else 0
        if r.get("server_time_ms") is not None:
            server.append(float(r["server_time_ms"]))
        if t.get("timeouts") is not None:
            timeouts.append(int(t["timeouts"]))
    return {
        "edge_responses": n,
        "retransmission_rate": round(lost / sent, 4) if sent else None,
        "lossy_response_share": round(lossy / n, 4) if n else None,
        "server_p80_ms": round(percentile(server, 80), 1) if server else None,
        # Kernel TCP's retransmission timeouts (`transport.timeouts`, tcpi_total_rto); QUIC: none.
        "timeout_response_share": round(sum(1 for x in timeouts if x > 0) / len(timeouts), 4) if timeouts else None,
        "timeouts_per_response": round(sum(timeouts) / len(timeouts), 4) if timeouts else None,
    }


def summarize(
    paths: Sequence[PrefixPath],
    runs: dict[str, RunRecords],
    oracle_iws: Sequence[int],
    transport: str = "tcp",
    tcpwise_second_half: bool = True,
) -> dict[str, Any]:
    """One transport's figures from its runs: `iw10`, `riptide`, `tcpwise` and `iw<N>` for the
    grid (IW 10 is `iw10`). Missing runs are left out of the figures (a cut stage)."""
    grid = {10: runs["iw10"], **{iw: runs[f"iw{iw}"] for iw in oracle_iws if iw != 10 and f"iw{iw}" in runs}}
    per_run_lat = {name: latencies(r.client) for name, r in runs.items()}
    # The hindsight oracle: per /24, the smallest IW of least p80 among the grid's runs.
    oracle_iw: dict[int, int] = {}
    for p in paths:
        best: tuple[float, int] | None = None
        for iw in sorted(grid):
            lat = latencies(grid[iw].client).get(p.index, []) if iw != 10 else per_run_lat["iw10"].get(p.index, [])
            if lat and (best is None or percentile(lat, 80) < best[0]):
                best = (percentile(lat, 80), iw)
        if best is not None:
            oracle_iw[p.index] = best[1]
    policy_lat: dict[str, dict[int, list[float]]] = {}
    policy_edge: dict[str, list[dict[str, Any]]] = {}
    for name in ("iw10", "riptide", "tcpwise"):
        if name in runs:
            policy_lat[name] = per_run_lat[name]
            policy_edge[name] = runs[name].edge
    if len(grid) > 1:
        policy_lat["oracle"] = {
            p: latencies(grid[iw].client).get(p, []) if iw != 10 else per_run_lat["iw10"].get(p, [])
            for p, iw in oracle_iw.items()
        }
        policy_edge["oracle"] = [r for iw, rr in grid.items() for r in rr.edge if _oracle_iw_of(oracle_iw, r) == iw]
    cls = {p.index: p.cls for p in paths}
    out: dict[str, Any] = {"overall": {}, "by_class": {}, "per_prefix": [], "iw_per_prefix": {}}
    for name, lat in policy_lat.items():
        flat = [x for v in lat.values() for x in v]
        out["overall"][name] = {**_stats(flat), **_retransmissions(policy_edge[name])}
        out["by_class"][name] = {
            c: _stats([x for p, v in lat.items() if cls.get(p) == c for x in v]) for c in ("small", "medium", "large")
        }
    base = out["overall"].get("iw10", {})
    out["vs_iw10"] = {
        name: {
            q: round(100.0 * (s[q] / base[q] - 1.0), 1)
            for q in ("mean_ms", "p50_ms", "p80_ms", "p90_ms", "p99_ms")
            if s.get(q) is not None and base.get(q)
        }
        for name, s in out["overall"].items()
    }
    if "riptide" in runs:
        out["iw_per_prefix"]["riptide"] = riptide_iws(runs["iw10"].edge, transport)
    if "tcpwise" in runs:
        out["iw_per_prefix"]["tcpwise"] = final_iws(runs["tcpwise"].edge)
    if len(grid) > 1:
        out["iw_per_prefix"]["oracle"] = oracle_iw
    if tcpwise_second_half and "tcpwise" in runs:
        # The same requests in the two runs: the second half by send time from each run's first.
        half: dict[str, Any] = {}
        for name in ("iw10", "tcpwise"):
            recs = runs[name].client
            times = [float(r["time_unix_ms"]) for r in recs if r.get("time_unix_ms") is not None]
            if not times:
                continue
            t0, t1 = min(times), max(times)
            lat = latencies(recs, since_ms=t0 + (t1 - t0) / 2)
            half[name] = _stats([x for v in lat.values() for x in v])
        if half.get("iw10", {}).get("p80_ms") and half.get("tcpwise", {}).get("p80_ms"):
            half["p80_vs_iw10"] = round(100.0 * (half["tcpwise"]["p80_ms"] / half["iw10"]["p80_ms"] - 1.0), 1)
            half["p99_vs_iw10"] = round(100.0 * (half["tcpwise"]["p99_ms"] / half["iw10"]["p99_ms"] - 1.0), 1)
        out["tcpwise_second_half"] = half
    for p in paths:
        row: dict[str, Any] = {"index": p.index, "prefix": p.prefix, "class": p.cls}
        row["bdp_packets"] = round(p.bdp_packets, 1)
        for name, lat in policy_lat.items():
            v = lat.get(p.index, [])
            row[f"{name}_p80_ms"] = round(percentile(v, 80), 1) if v else None
        for name, iws in out["iw_per_prefix"].items():
            row[f"{name}_iw"] = iws.get(p.index)
        out["per_prefix"].append(row)
    return out


def _oracle_iw_of(oracle_iw: dict[int, int], r: dict[str, Any]) -> int | None:
    p = prefix_of(r.get("client_addr"))
    return None if p is None else oracle_iw.get(p)


def fidelity(paths: Sequence[PrefixPath], run: RunRecords, emu_log: str = "") -> dict[str, Any]:
    """How closely one run's paths held their configured RTT (module doc), and the relay's summary."""
    least: dict[int, float] = {}
    for r in run.edge:
        p = prefix_of(r.get("client_addr"))
        m = (r.get("transport") or {}).get("min_rtt_ms")
        if p is not None and m is not None:
            least[p] = min(least.get(p, math.inf), float(m))
    excess = [least[p.index] - p.rtt_ms for p in paths if p.index in least]
    out: dict[str, Any] = {
        "prefixes_seen": len(least),
        "min_rtt_excess_ms": {
            "min": round(min(excess), 2) if excess else None,
            "median": round(percentile(excess, 50), 2) if excess else None,
            "max": round(max(excess), 2) if excess else None,
        },
        "requests": len(run.client),
        "errors": sum(1 for r in run.client if r.get("error")),
    }
    emu_log = re.sub(r"\x1b\[[0-9;]*m", "", emu_log)  # tracing's colours
    m = re.search(r"relay summary.*", emu_log)
    if m:
        kv = dict(re.findall(r"(\w+)=([0-9.eE+-]+)", m.group(0)))
        cpu, wall = float(kv.get("relay_cpu_s", "nan")), float(kv.get("wall_s", "nan"))
        out["relay_cpu_share"] = round(cpu / wall, 4) if wall > 0 else None
        out["unroutable"] = int(float(kv.get("unroutable", 0)))
        out["tun_write_errors"] = int(float(kv.get("tun_write_errors", 0)))
    drops = {"queue_drops": 0, "loss_drops": 0, "delivered": 0}
    for line in re.findall(r"link summary.*", emu_log):
        kv = dict(re.findall(r"(\w+)=([0-9]+)", line))
        for k in drops:
            drops[k] += int(kv.get(k, 0))
    if any(drops.values()):
        out["links"] = drops
    return out


# ---------------------------------------------------------------------------------------
# Report


def _fmt(v: Any, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def report(result: dict[str, Any], parameters: dict[str, Any]) -> str:
    """Markdown: per transport Table I, Table II, the IW per /24 at the end, and the fidelity."""
    lines = ["# TCP WISE population evaluation (emulator: kernel TCP and QUIC on the real edge)", ""]
    lines.append("Parameters: " + ", ".join(f"{k} = {v}" for k, v in parameters.items()))
    for transport, s in result["transports"].items():
        label = "kernel TCP (HTTP/2, the BPF program)" if transport == "tcp" else "QUIC (HTTP/3, the gear)"
        lines += ["", f"## {label}", ""]
        lines += ["| policy | responses | mean | p10 | p20 | p50 | p80 | p90 | p99 | p80 vs IW 10 | p99 vs IW 10 |"]
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in POLICIES:
            o = s["overall"].get(name)
            if not o or not o.get("responses"):
                continue
            d = s["vs_iw10"].get(name, {})
            cells = [o.get(k) for k in ("mean_ms", "p10_ms", "p20_ms", "p50_ms", "p80_ms", "p90_ms", "p99_ms")]
            lines.append(
                f"| {name} | {o['responses']} | "
                + " | ".join(_fmt(c) for c in cells)
                + f" | {_fmt(d.get('p80_ms'), '+.1f')}% | {_fmt(d.get('p99_ms'), '+.1f')}% |"
            )
        half = s.get("tcpwise_second_half") or {}
        if "p80_vs_iw10" in half:
            tw, ten = half["tcpwise"], half["iw10"]
            lines += [
                "",
                f"Second half of the run (requests sent after its middle): TCP WISE p80 {tw['p80_ms']:.0f}"
                f" ms against IW 10's {ten['p80_ms']:.0f} ms ({half['p80_vs_iw10']:+.1f}%), p99"
                f" {tw['p99_ms']:.0f} against {ten['p99_ms']:.0f} ms ({half['p99_vs_iw10']:+.1f}%).",
            ]
        lines += ["", "| policy | class | responses | p50 | p80 | p99 |", "|---|---|---:|---:|---:|---:|"]
        for name in POLICIES:
            for c, cs in (s["by_class"].get(name) or {}).items():
                if cs.get("responses"):
                    q = " | ".join(f"{cs[k]:.0f}" for k in ("p50_ms", "p80_ms", "p99_ms"))
                    lines.append(f"| {name} | {c} | {cs['responses']} | {q} |")
        lines += [
            "",
            "| policy | retransmission rate | responses that retransmitted | responses with a timeout |"
            " timeouts per response | edge's TCP latency p80 (ms) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name in POLICIES:
            o = s["overall"].get(name)
            if o and o.get("retransmission_rate") is not None:
                share = o.get("timeout_response_share")
                per = _fmt(o.get("timeouts_per_response"), ".3f")
                lines.append(
                    f"| {name} | {100 * o['retransmission_rate']:.2f}% | {100 * o['lossy_response_share']:.1f}% |"
                    f" {'-' if share is None else f'{100 * share:.1f}%'} | {per} | {_fmt(o.get('server_p80_ms'))} |"
                )
        lines += ["", "| policy | IW: /24s |", "|---|---|"]
        for name, iws in s["iw_per_prefix"].items():
            hist: dict[int, int] = defaultdict(int)
            for iw in iws.values():
                hist[iw] += 1
            lines.append(f"| {name} | " + ", ".join(f"{iw}: {n}" for iw, n in sorted(hist.items())) + " |")
    fid = result.get("fidelity") or {}
    if fid:
        lines += [
            "",
            "## Fidelity (per run)",
            "",
            "| run | requests | errors | /24s seen | least RTT over configured, ms (min / median / max) |"
            " relay CPU share | queue drops | random-loss drops | unroutable |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for run, f in fid.items():
            e = f["min_rtt_excess_ms"]
            links = f.get("links") or {}
            lines.append(
                f"| {run} | {f['requests']} | {f['errors']} | {f['prefixes_seen']} | "
                f"{_fmt(e['min'], '.2f')} / {_fmt(e['median'], '.2f')} / {_fmt(e['max'], '.2f')} | "
                f"{_fmt(f.get('relay_cpu_share'), '.3f')} | {_fmt(links.get('queue_drops'), 'd')} | "
                f"{_fmt(links.get('loss_drops'), 'd')} | {_fmt(f.get('unroutable'), 'd')} |"
            )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# The stages


def _run_stage(plan: Plan, out: Path, name: str, policies: list[tuple[str, str, Path | None]], control: bool) -> Path:
    from gearbox.lab.runner import run_file

    folder = out / name
    if (folder / "lab" / "runs.json").exists():
        # A finished stage of an earlier invocation with the same --out: kept, so a cut
        # evaluation goes on where it stopped (delete the folder to run it again).
        print(f"{PROG}: stage {name} already ran in {folder}; kept", file=sys.stderr)
        return folder / "lab" / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    if control:
        write_empty_policy(folder / "tcpwise-empty")
    file = folder / "scenario.toml"
    file.write_text(scenario_text(plan, name, policies, control), encoding="utf-8")
    started = time.monotonic()
    print(f"{PROG}: stage {name} ({', '.join(p[0] for p in policies)})", file=sys.stderr)
    try:
        run_file(file, folder / "lab")
    except RuntimeError as e:
        # A failed run is reported by the runner (runs.json); the others' records still count.
        print(f"{PROG}: {e}", file=sys.stderr)
    print(f"{PROG}: stage {name} took {time.monotonic() - started:.0f} s", file=sys.stderr)
    return folder / "lab" / "runs"


def run(
    plan: Plan,
    oracle_iws: Sequence[int],
    out: Path,
    stages: Sequence[str] = ("base", "tcpwise", "riptide", "oracle"),
    transports: Sequence[str] = TRANSPORTS,
) -> dict[str, Any]:
    """Every stage in the emulator (root), in order of importance; returns the result."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GEARBOX_LOG", RELAY_LOG)
    tables = out / "tables"
    tables.mkdir(exist_ok=True)
    runs: dict[str, dict[str, Path]] = {t: {} for t in transports}
    if "base" in stages:
        d = _run_stage(plan, out, "base", [(f"{t}-iw10", t, None) for t in transports], False)
        for t in transports:
            runs[t]["iw10"] = d / f"c000-{t}-iw10-r0"
    if "tcpwise" in stages:
        d = _run_stage(plan, out, "tcpwise", [(t, t, None) for t in transports], True)
        for t in transports:
            runs[t]["tcpwise"] = d / f"c000-{t}-r0"
    if "riptide" in stages and all("iw10" in runs[t] for t in transports):
        pols = []
        for t in transports:
            iws = riptide_iws(read_run(runs[t]["iw10"]).edge, t)
            table = tables / f"riptide-{t}.toml"
            table.write_text(table_text({plan.paths[p].prefix: iw for p, iw in iws.items()}), encoding="utf-8")
            pols.append((f"{t}-riptide", t, table))
        d = _run_stage(plan, out, "riptide", pols, False)
        for t in transports:
            runs[t]["riptide"] = d / f"c000-{t}-riptide-r0"
    grid = [iw for iw in oracle_iws if iw != 10]
    if "oracle" in stages and grid:
        for iw in grid:
            (tables / f"iw{iw}.toml").write_text(table_text({"others": iw}), encoding="utf-8")
        # Transport by transport, so that a cut run leaves one transport's grid whole.
        pols = [(f"{t}-iw{iw}", t, tables / f"iw{iw}.toml") for t in transports for iw in grid]
        d = _run_stage(plan, out, "oracle", pols, False)
        for t in transports:
            for iw in grid:
                runs[t][f"iw{iw}"] = d / f"c000-{t}-iw{iw}-r0"
    result: dict[str, Any] = {"transports": {}, "fidelity": {}}
    for t in transports:
        records = {k: read_run(v) for k, v in runs[t].items() if (v / "client.jsonl").exists()}
        if "iw10" in records:
            result["transports"][t] = summarize(plan.paths, records, oracle_iws, t)
        for k, v in runs[t].items():
            if k in records:
                log = (v / "emu.log").read_text(errors="replace") if (v / "emu.log").exists() else ""
                result["fidelity"][f"{t} {k}"] = fidelity(plan.paths, records[k], log)
    return result


def main(args: Any) -> int:
    """Runs with the parsed arguments of `gearbox lab tcpwise evaluate --population --emulator`."""
    paths = tuple(draw_paths(args.prefixes, args.seed))
    plan = Plan(paths, args.emulator_duration_s, args.rate, args.seed, args.theta, args.learn_config.resolve())
    started = time.perf_counter()
    result = run(plan, args.oracle_iws, args.out, args.stages, args.transports)
    parameters = {
        "prefixes": len(paths),
        "rate_per_prefix_per_s": args.rate,
        "seconds_per_run": args.emulator_duration_s,
        "theta_s": args.theta,
        "learn_config": str(args.learn_config),
        "oracle_iws": list(args.oracle_iws),
        "seed": args.seed,
        "stages": list(args.stages),
        "transports": list(args.transports),
    }
    result["parameters"] = parameters
    result["paths"] = [
        {**p.__dict__, "prefix": p.prefix, "class": p.cls, "bdp_packets": round(p.bdp_packets, 1)} for p in paths
    ]
    result["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "population-emulator.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = report(result, parameters)
    (args.out / "population-emulator.md").write_text(text, encoding="utf-8")
    if not args.quiet:
        print(text)
    return 0
