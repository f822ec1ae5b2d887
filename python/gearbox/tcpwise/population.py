"""`gearbox lab tcpwise evaluate --population`: TCP WISE's online evaluation (§V-B) in the
simulator, over a population of client /24 prefixes.

TCP WISE's online experiment (§V-B) served Baidu's mobile search users, clustered by /24
prefix, from servers of which half set each cluster's IW (the learner, §IV-C) and half used
IW 10 (TCP-10); it reports the latency percentiles (Table I), the retransmission and timeout
rates (Table II) and each cluster's learned IW (Fig. 11). Here the users are the simulator's
population topology (docs/sim.md "Population": each /24 its own pair of links) and the
requests the `search` workload (Fig. 10's sizes, a new connection per response), over QUIC.

**Paths** (`draw_paths`, seeded): per prefix, independently,
- bottleneck rate log-uniform in [0.3, 50] Mbit/s (both directions);
- base RTT log-uniform in [10, 500] ms;
- random loss on the server -> client direction: none for 60% of prefixes, else uniform in
  [0, 3%];
- drop-tail buffer shallow (0.25-0.5 BDP) or deep (2-4 BDP) with equal chance, at least 4
  packets.
The ranges are the TCP WISE issue's (RTT 10-500 ms, 0.3-50 Mbit/s, loss 0-3%, shallow and deep
buffers); log-uniform spreads the prefixes over each range's decades. ASSUMPTION: the seed
gives only Fig. 10's RTT distribution (median ~60 ms, mean ~500 ms) and no bandwidths.
Prefixes are grouped for the report by their BDP in 1200-byte packets: `small` (< 10, where
an IW above 10 overfills the path), `medium` (10-50), `large` (> 50).

**Traffic**: the `search` workload with its send times scaled (`time_scale`) to `--rate`
requests per second per prefix on average; the workload's client index modulo the prefixes
picks the prefix, as `gearbox load` spreads requests over its addresses.

**Timeline**: `--intervals` learning intervals of θ simulated seconds, one simulation each
(every response is on a new connection, so only queues are lost at a boundary); interval *i*
has the same requests and link seeds under every policy. The last `--eval-intervals` are
measured.

**Policies** (all on the same requests and links):
- `iw10`: every connection at IW 10 (TCP-10, the seed's baseline, §V-B1).
- `riptide`: a Riptide-style baseline ("Riptide: Jump-Starting Back-Office Connections in
  Cloud Systems", docs/papers.md): per destination prefix, new connections start at the mean
  congestion window (1200-byte packets) the previous interval's connections to that prefix
  reached at their end, bounded by [3, cap]; IW 10 where nothing was seen. The simulator's
  records carry the server end's window as the response completed (`server_transport`).
- `tcpwise`: the learner as `gearbox learn tcpwise` runs it (Algorithm 1; the fast start of
  §V-B3, (10, 15, 20, 25, 30); `per_hour = false`), fed each interval's records, its table
  applied by the edge's own QUIC gear in the simulator (`SimSession.set_cwnd_table`).
- `tcpwise_guard`: the same learner with gearbox's loss guard (`LearnConfig.loss_guard`,
  docs/tcpwise.md "The loss guard").
- `oracle`: per prefix, the IW of `--oracle-iws` with the least p80 over the measured
  intervals, each IW run on the same requests (hindsight: chosen on the data it is scored on).
  Prefixes have their own links, so a prefix's responses under one IW do not depend on the
  other prefixes' IWs, and the oracle's latencies are those of its chosen IW's run.

A response's latency is the client's completion time less the connection's handshake, as in
the testbed evaluation (`evaluate.latency_ms`). Table II's retransmission rate is the server's
lost over sent packets (QUIC retransmits lost frames in new packets); quinn-proto counts no
timeouts, so the timeout ratio is not reported; in its place the share of responses whose
connection lost a packet.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gearbox._native import SimSession
from gearbox.stats import percentile
from gearbox.tcpwise.config import LearnConfig
from gearbox.tcpwise.evaluate import _samples, latency_ms
from gearbox.tcpwise.learner import learn
from gearbox.tcpwise.records import IwSample
from gearbox.tcpwise.table import OTHERS, ClusterEntry, CwndTable, dumps_table

PROG = "gearbox lab tcpwise evaluate --population"
PACKET_BYTES = 1200
"""The unit of gearbox's initial windows (gearbox-cc's PACKET_BYTES)."""
SEARCH_MEAN_GAP_S = 0.610
"""Mean gap between `search` requests at time scale 1 (workloads/search.toml)."""
CLASSES = ("small", "medium", "large")
POLICIES = ("iw10", "riptide", "tcpwise", "tcpwise_guard", "oracle")


@dataclass(frozen=True)
class PrefixPath:
    """One client /24's path."""

    index: int
    rate_mbps: float
    rtt_ms: float
    loss: float
    buffer_bdp: float

    @property
    def prefix(self) -> str:
        return f"100.{64 + self.index // 256}.{self.index % 256}.0/24"

    @property
    def bdp_packets(self) -> float:
        return self.rate_mbps * 1e6 / 8 * self.rtt_ms / 1e3 / PACKET_BYTES

    @property
    def buffer_packets(self) -> int:
        return max(4, round(self.buffer_bdp * self.rate_mbps * 1e6 / 8 * self.rtt_ms / 1e3 / 1500))

    @property
    def cls(self) -> str:
        b = self.bdp_packets
        return "small" if b < 10 else "medium" if b <= 50 else "large"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw_paths(prefixes: int, seed: int) -> list[PrefixPath]:
    """Every prefix's path, drawn from the module doc's distributions with `seed`."""
    rng = random.Random(seed)
    out = []
    for i in range(prefixes):
        rate = _log_uniform(rng, 0.3, 50.0)
        rtt = _log_uniform(rng, 10.0, 500.0)
        loss = 0.0 if rng.random() < 0.6 else rng.uniform(0.0, 0.03)
        buffer = rng.uniform(0.25, 0.5) if rng.random() < 0.5 else rng.uniform(2.0, 4.0)
        out.append(PrefixPath(i, round(rate, 3), round(rtt, 1), round(loss, 4), round(buffer, 2)))
    return out


def _link(p: PrefixPath, down: bool) -> str:
    loss = p.loss if down else 0.0
    return (
        f"rate_bps = {int(p.rate_mbps * 1e6)}\ndelay_ms = {p.rtt_ms / 2}\nbase_rtt_ms = {p.rtt_ms}\n"
        f"queue = {{ limit_packets = {p.buffer_packets} }}\n"
        f'loss = {{ model = "bernoulli", loss_rate = {loss} }}\n'
    )


def sim_config(
    paths: Sequence[PrefixPath], seconds: float, rate: float, seed: int, initial_window: int | None = None
) -> str:
    """A population simulation of `seconds` of `search` requests at `rate` per prefix per second."""
    scale = 1.0 / (SEARCH_MEAN_GAP_S * rate * len(paths))
    lines = [
        f"seed = {seed}",
        f"duration_s = {seconds / scale}",
        f"time_scale = {scale}",
        f"time_limit_s = {seconds + 120}",
        'cc = "cubic"',
        'workload = "search"',
    ]
    if initial_window is not None:
        lines.append(f"initial_window = {initial_window}")
    out = "\n".join(lines) + "\n"
    out += f"[population]\nprefixes = {len(paths)}\nhosts_per_prefix = 1\n"
    out += "[population.down]\nrate_bps = 10000000\ndelay_ms = 10.0\n"
    for p in paths:
        out += f"[[population.prefix]]\nindex = {p.index}\n"
        out += "[population.prefix.down]\n" + _link(p, True)
        out += "[population.prefix.up]\n" + _link(p, False)
    return out


def prefix_index(record: dict[str, Any]) -> int:
    """The /24 of a record's client address (`100.(64 + i / 256).(i % 256).h`)."""
    o = record["local_addr"].split(":")[0].split(".")
    return (int(o[1]) - 64) * 256 + int(o[2])


@dataclass
class Response:
    """One measured response."""

    prefix: int
    latency_ms: float
    iw: int
    sent_packets: int
    lost_packets: int


def _responses(records: list[dict[str, Any]], fixed_iw: int | None) -> list[Response]:
    out = []
    for r in records:
        lat = latency_ms(r)
        if lat is None:
            continue
        st = r.get("server_transport") or {}
        iw = (r.get("iw") or {}).get("iw", fixed_iw if fixed_iw is not None else 10)
        out.append(
            Response(prefix_index(r), lat, int(iw), int(st.get("sent_packets", 0)), int(st.get("lost_packets", 0)))
        )
    return out


@dataclass
class Run:
    """One simulation's records, and how many of its requests the time limit cut off."""

    records: list[dict[str, Any]]
    unfinished: int


def _simulate(config: str, name: str, table: str | None = None, seed: int = 0) -> Run:
    session = SimSession(config, name=name)
    if table is not None:
        session.set_cwnd_table(table, seed=seed, name=f"{name} table")
    while not session.advance(60.0):
        pass
    return Run(list(session.take_records()), session.unfinished)


@dataclass(frozen=True)
class Setup:
    """What every run shares."""

    paths: tuple[PrefixPath, ...]
    theta_s: float
    rate: float
    intervals: int
    eval_intervals: int
    seed: int
    learn: LearnConfig

    def interval_seed(self, i: int) -> int:
        return self.seed * 1000 + i

    def config(self, i: int, initial_window: int | None = None) -> str:
        return sim_config(self.paths, self.theta_s, self.rate, self.interval_seed(i), initial_window)

    @property
    def measured(self) -> range:
        return range(self.intervals - self.eval_intervals + 1, self.intervals + 1)


@dataclass
class Measured:
    """A policy's responses in the measured intervals, and its requests the simulations' time
    limit cut off there (no record: not in the percentiles, reported beside them)."""

    responses: list[Response] = field(default_factory=list)
    unfinished: int = 0

    def add(self, run: Run, fixed_iw: int | None) -> None:
        self.responses += _responses(run.records, fixed_iw)
        self.unfinished += run.unfinished


def run_fixed(setup: Setup, iw: int) -> Measured:
    """The measured intervals with every connection at `iw`."""
    out = Measured()
    for i in setup.measured:
        out.add(_simulate(setup.config(i, iw), f"IW {iw} #{i}"), iw)
    return out


def _table(version: int, entries: list[ClusterEntry], cap: int) -> CwndTable:
    return CwndTable(version=version, cap=cap, created_unix_ms=0, entries=entries)


def run_riptide(setup: Setup) -> tuple[Measured, dict[int, int]]:
    """Riptide-style: each prefix's IW is the mean window its previous interval's connections
    ended with (module doc). Returns the measured responses and the last IW per prefix."""
    cap, low = setup.learn.cap, setup.learn.min_iw
    iws: dict[int, int] = {}
    out = Measured()
    for i in range(1, setup.intervals + 1):
        entries = [ClusterEntry(setup.paths[p].prefix, (iw, iw)) for p, iw in sorted(iws.items())]
        entries.append(ClusterEntry(OTHERS, (10, 10)))
        table = dumps_table(_table(i, entries, cap))
        run = _simulate(setup.config(i), f"riptide #{i}", table, setup.interval_seed(i))
        if i in setup.measured:
            out.add(run, None)
        cwnds: dict[int, list[float]] = defaultdict(list)
        for r in run.records:
            st = r.get("server_transport")
            if st and r.get("error") is None:
                cwnds[prefix_index(r)].append(st["cwnd_bytes"] / PACKET_BYTES)
        for p, v in cwnds.items():
            iws[p] = min(cap, max(low, round(sum(v) / len(v))))
    return out, iws


def run_tcpwise(setup: Setup) -> tuple[Measured, dict[int, int], list[dict[str, Any]]]:
    """The online learner, interval by interval. Returns the measured responses, each prefix's
    α (the learner's current best) at the end, and one line per interval."""
    cfg = setup.learn
    startup = ClusterEntry(OTHERS, cfg.startup_set, None, 1.0 / len(cfg.startup_set), None, "startup")
    table = _table(1, [startup], cfg.cap)
    carry: list[IwSample] = []
    out = Measured()
    log: list[dict[str, Any]] = []
    for i in range(1, setup.intervals + 1):
        run = _simulate(setup.config(i), f"tcpwise #{i}", dumps_table(table, cfg.max_set), setup.interval_seed(i))
        if i in setup.measured:
            out.add(run, None)
        samples = _samples(run.records, offset_ms=(i - 1) * setup.theta_s * 1e3)
        lat = [s.latency_ms for s in samples]
        result = learn(table, carry + samples, cfg, now_unix_ms=int(i * setup.theta_s * 1e3))
        carry, table = result.carry, result.table
        log.append(
            {
                "interval": i,
                "entries": len(table.entries),
                "p80_ms": round(percentile(lat, 80), 1) if lat else None,
                "responses": len(lat),
            }
        )
    alphas: dict[int, int] = {}
    others = next(e for e in table.entries if e.prefix == OTHERS)
    by_prefix = {e.prefix: e for e in table.entries if e.hour is None}
    for p in setup.paths:
        e = by_prefix.get(p.prefix, others)
        alphas[p.index] = e.best if e.best is not None else e.iw[0]
    return out, alphas, log


def _task(args: tuple[str, Setup, int]) -> Any:
    kind, setup, iw = args
    if kind == "fixed":
        return run_fixed(setup, iw)
    if kind == "riptide":
        return run_riptide(setup)
    if kind == "tcpwise_guard":
        return run_tcpwise(replace(setup, learn=replace(setup.learn, loss_guard=True)))
    return run_tcpwise(setup)


def _stats(rs: list[Response]) -> dict[str, Any]:
    lat = [r.latency_ms for r in rs]
    if not lat:
        return {"responses": 0}
    sent = sum(r.sent_packets for r in rs)
    return {
        "responses": len(lat),
        "mean_ms": round(sum(lat) / len(lat), 1),
        **{f"p{q}_ms": round(percentile(lat, q), 1) for q in (10, 20, 50, 80, 90, 99)},
        "retransmission_rate": round(sum(r.lost_packets for r in rs) / sent, 4) if sent else None,
        "lossy_response_share": round(sum(1 for r in rs if r.lost_packets > 0) / len(rs), 4),
    }


def evaluate(setup: Setup, oracle_iws: Sequence[int], jobs: int = 1, progress: bool = False) -> dict[str, Any]:
    """Every policy over the setup; the summary (Tables I-II, Fig. 11, per prefix)."""
    iws = sorted(set(oracle_iws) | {10})
    tasks = [
        ("tcpwise", setup, 0),
        ("tcpwise_guard", setup, 0),
        ("riptide", setup, 0),
        *(("fixed", setup, iw) for iw in iws),
    ]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_task, tasks))
    else:
        results = []
        for t in tasks:
            results.append(_task(t))
            if progress:
                print(f"{PROG}: {t[0]} {t[2] or ''} done", file=sys.stderr)
    (tw, tw_iws, tw_log), (tg, tg_iws, _), (rp, rp_iws) = results[0], results[1], results[2]
    fixed: dict[int, Measured] = dict(zip(iws, results[3:], strict=True))
    # The hindsight oracle: per prefix, the smallest IW of least p80 over the measured intervals.
    oracle: list[Response] = []
    oracle_iw: dict[int, int] = {}
    for p in setup.paths:
        best = None
        for iw in iws:
            lat = [r.latency_ms for r in fixed[iw].responses if r.prefix == p.index]
            if lat and (best is None or percentile(lat, 80) < best[0]):
                best = (percentile(lat, 80), iw)
        if best is not None:
            oracle_iw[p.index] = best[1]
            oracle += [r for r in fixed[best[1]].responses if r.prefix == p.index]
    by_policy = {
        "iw10": fixed[10].responses,
        "riptide": rp.responses,
        "tcpwise": tw.responses,
        "tcpwise_guard": tg.responses,
        "oracle": oracle,
    }
    # The oracle's cut-off requests cannot be told apart by prefix (they have no record).
    unfinished = {"iw10": fixed[10].unfinished, "riptide": rp.unfinished, "tcpwise": tw.unfinished}
    unfinished |= {"tcpwise_guard": tg.unfinished, "oracle": None}
    final_iw = {
        "iw10": {p.index: 10 for p in setup.paths},
        "riptide": rp_iws,
        "tcpwise": tw_iws,
        "tcpwise_guard": tg_iws,
        "oracle": oracle_iw,
    }
    cls = {p.index: p.cls for p in setup.paths}
    summary: dict[str, Any] = {"overall": {}, "by_class": {}, "per_prefix": [], "iw_distribution": {}}
    for name, rs in by_policy.items():
        summary["overall"][name] = {**_stats(rs), "unfinished": unfinished[name]}
        summary["by_class"][name] = {c: _stats([r for r in rs if cls[r.prefix] == c]) for c in CLASSES}
        hist: dict[int, int] = defaultdict(int)
        for p in setup.paths:
            if p.index in final_iw[name]:
                hist[final_iw[name][p.index]] += 1
        summary["iw_distribution"][name] = dict(sorted(hist.items()))
    for p in setup.paths:
        row: dict[str, Any] = {**asdict(p), "prefix": p.prefix, "class": p.cls, "bdp_packets": round(p.bdp_packets, 1)}
        for name, rs in by_policy.items():
            lat = [r.latency_ms for r in rs if r.prefix == p.index]
            row[f"{name}_p80_ms"] = round(percentile(lat, 80), 1) if lat else None
            row[f"{name}_iw"] = final_iw[name].get(p.index)
        summary["per_prefix"].append(row)
    summary["classes"] = {c: sum(1 for p in setup.paths if p.cls == c) for c in CLASSES}
    summary["tcpwise_intervals"] = tw_log
    base = summary["overall"]["iw10"]
    summary["vs_iw10"] = {
        name: {
            q: round(100.0 * (s[q] / base[q] - 1.0), 1)
            for q in ("mean_ms", "p50_ms", "p80_ms", "p90_ms", "p99_ms")
            if s.get(q) is not None and base.get(q)
        }
        for name, s in summary["overall"].items()
    }
    return summary


def report(summary: dict[str, Any], parameters: dict[str, Any]) -> str:
    """Markdown: Table I (latency percentiles), Table II (retransmissions), Fig. 11 (IWs)."""
    lines = ["# TCP WISE population evaluation (simulator, QUIC)", ""]
    lines.append("Parameters: " + ", ".join(f"{k} = {v}" for k, v in parameters.items()))
    lines += ["", "| policy | responses | mean | p10 | p20 | p50 | p80 | p90 | p99 | p80 vs IW 10 |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in POLICIES:
        s = summary["overall"][name]
        if not s.get("responses"):
            continue
        d = summary["vs_iw10"][name].get("p80_ms")
        cells = [s[k] for k in ("mean_ms", "p10_ms", "p20_ms", "p50_ms", "p80_ms", "p90_ms", "p99_ms")]
        lines.append(f"| {name} | {s['responses']} | " + " | ".join(f"{c:.0f}" for c in cells) + f" | {d:+.1f}% |")
    cut = {n: summary["overall"][n].get("unfinished") for n in POLICIES}
    if any(cut.values()):
        lines += ["", "Requests the time limit cut off (no record, not in the percentiles): "]
        lines[-1] += ", ".join(f"{n} {'?' if c is None else c}" for n, c in cut.items())
    lines += ["", "| policy | class (prefixes) | responses | p50 | p80 | p99 |", "|---|---|---:|---:|---:|---:|"]
    for name in POLICIES:
        for c in CLASSES:
            s = summary["by_class"][name][c]
            if s.get("responses"):
                lines.append(
                    f"| {name} | {c} ({summary['classes'][c]}) | {s['responses']} | {s['p50_ms']:.0f} | "
                    f"{s['p80_ms']:.0f} | {s['p99_ms']:.0f} |"
                )
    lines += ["", "| policy | retransmission rate | responses with a loss |", "|---|---:|---:|"]
    for name in POLICIES:
        s = summary["overall"][name]
        if s.get("responses") and s.get("retransmission_rate") is not None:
            lines.append(f"| {name} | {100 * s['retransmission_rate']:.2f}% | {100 * s['lossy_response_share']:.1f}% |")
    lines += ["", "| policy | IW: prefixes |", "|---|---|"]
    for name in ("riptide", "tcpwise", "tcpwise_guard", "oracle"):
        h = summary["iw_distribution"][name]
        lines.append(f"| {name} | " + ", ".join(f"{iw}: {n}" for iw, n in h.items()) + " |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> bool:
    """Fig. 11's analogue: the share of prefixes at each IW, per policy."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = ("riptide", "tcpwise", "oracle")
    width = 1.6
    for k, name in enumerate(names):
        h = summary["iw_distribution"][name]
        total = sum(h.values()) or 1
        ax.bar([iw + (k - 1) * width for iw in h], [100.0 * n / total for n in h.values()], width=width, label=name)
    ax.set_xlabel("initial window (packets)")
    ax.set_ylabel("% of prefixes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def main(args: Any) -> int:
    """Runs with the parsed arguments of `gearbox lab tcpwise evaluate --population`."""
    config = LearnConfig(
        delta=args.delta, s_min=args.s_min, theta_s=args.theta, fast_start=not args.no_fast_start, per_hour=False
    )
    paths = tuple(draw_paths(args.prefixes, args.seed))
    setup = Setup(paths, args.theta, args.rate, args.intervals, args.eval_intervals, args.seed, config)
    started = time.perf_counter()
    summary = evaluate(setup, args.oracle_iws, jobs=args.jobs, progress=not args.quiet)
    parameters = {
        "prefixes": args.prefixes,
        "rate_per_prefix_per_s": args.rate,
        "theta_s": args.theta,
        "intervals": args.intervals,
        "eval_intervals": args.eval_intervals,
        "s_min": args.s_min,
        "delta": args.delta,
        "fast_start": config.fast_start,
        "oracle_iws": list(args.oracle_iws),
        "seed": args.seed,
    }
    summary["parameters"] = parameters
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "population.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    text = report(summary, parameters)
    if plot(summary, args.out / "population-iw.png"):
        text += "\n![IW per prefix](population-iw.png)\n"
    (args.out / "population.md").write_text(text, encoding="utf-8")
    if not args.quiet:
        print(text)
    return 0
