"""`gearbox lab tcpwise evaluate`: TCP WISE's testbed evaluation (§V-A) in the simulator.

Two parts, both over QUIC in virtual time (docs/sim.md), with TCP WISE's testbed traffic:
100 KB responses, one per new connection, about 100 requests a minute (Poisson arrivals,
§V-A1), over one path whose rate, RTT and random loss are the conditions of Figs. 7-9
(20 or 10 Mbit/s, 20 or 10 ms, 0 or 10% loss).

- **Ground truth** (§V-A1: "brutally searching the best IW from 1 to 100"): per condition and
  IW, `--reps` simulations of `--gt-seconds` each, every connection started with that IW (the
  config's `initial_window`); the IW's p80 latency is over all their responses, its spread the
  least and greatest p80 of one repetition. The best IW is §IV-C2's: the smallest IW of least
  p80.
- **Convergence** (§V-A2, Figs. 7-9): one long simulation per figure, the learner
  (`gearbox.tcpwise.learn`, Algorithm 1 as `gearbox learn tcpwise` runs it) in the loop: every
  θ of simulated time the records of the interval become samples, the learner writes the next
  Cwnd Table, and the simulator's server draws each new connection's IW from it with the edge's
  own QUIC gear (`SimSession.set_cwnd_table`). Iterations 1-20 and 41-60 run the base
  condition (20 Mbit/s, 20 ms, 0 loss), 21-40 the figure's changed one (a scheduled change of
  the link). Per iteration: the set under test, α (the learner's current best, the control),
  the p80 latency of the interval, and the ground truth of the condition in force. The target
  (the TCP WISE issue): α within ±Δ of the best IW in ≤ 10 iterations after each change.

A response's latency is the client's completion time less the connection's handshake: the
request's one-way trip, the response's transfer and its last byte's arrival, which is the seed's
"TCP latency" (§IV-B: first byte sent to last byte acknowledged) shifted by half a round trip
at both ends. The simulator has no server-side record, so this is the closest figure it gives.

Output under `--out`: `ground_truth.csv` (condition x IW: p80, spread, samples),
`ground_truth.json` (best IW per condition), `convergence.csv` (figure x iteration),
`summary.json`, `report.md`, and `convergence.png` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gearbox._native import SimSession
from gearbox.stats import percentile
from gearbox.tcpwise.config import LearnConfig
from gearbox.tcpwise.learner import learn
from gearbox.tcpwise.records import IwSample
from gearbox.tcpwise.table import ClusterEntry, CwndTable, dumps_table

PROG = "gearbox lab tcpwise evaluate"
CLIENT_CLUSTER = "10.0.0.0/24"
"""The simulator's client is 10.0.0.2 (docs/sim.md), so the /24 TCP WISE learns is this one."""
RESPONSE_BYTES = 100_000
"""§V-A1: "we perform the experiments with 100KB responses"."""

# §V-A1: "user server sends about 100 requests to frontend server in one minute": Poisson
# arrivals, exponential gaps of mean 600 ms tabulated at their quantiles (the `search`
# workload's table), one response of 100 KB per new connection (TCP WISE sets the IW per
# connection).
WORKLOAD = f"""# TCP WISE's testbed traffic (§V-A1), written by `{PROG}`.
name = "tcpwise-testbed"
description = "100 KB responses, one per new connection, about 100 a minute (TCP WISE §V-A1)"
connection = "per_request"

[clicks]
requests_per_click = [[1, 1.0]]
think_time_ms = [
    [0, 0.0], [30.8, 0.05], [63.2, 0.1], [97.5, 0.15], [133.9, 0.2], [172.6, 0.25], [214, 0.3],
    [258.5, 0.35], [306.5, 0.4], [358.7, 0.45], [415.9, 0.5], [479.1, 0.55], [549.8, 0.6],
    [629.9, 0.65], [722.4, 0.7], [831.8, 0.75], [965.7, 0.8], [1138.3, 0.85], [1381.6, 0.9],
    [1797.4, 0.95], [2763.1, 0.99], [4144.7, 0.999], [5526.2, 1.0],
]
request_bytes = [[300, 1.0]]
response_bytes = [[{RESPONSE_BYTES}, 1.0]]
"""


@dataclass(frozen=True)
class Condition:
    """One network condition of Figs. 7-9: the bottleneck's rate, the path's RTT, random loss."""

    rate_mbps: float
    rtt_ms: float
    loss: float

    @property
    def name(self) -> str:
        return f"{self.rate_mbps:g}Mbps-{self.rtt_ms:g}ms-{self.loss * 100:g}%"


BASE = Condition(20, 20, 0.0)
"""Iterations 1-20 and 41-60 of Figs. 7-9."""
FIGURES: dict[str, Condition] = {
    "fig7-bandwidth": Condition(10, 20, 0.0),
    "fig8-rtt": Condition(20, 10, 0.0),
    "fig9-loss": Condition(20, 20, 0.10),
}
"""Iterations 21-40 of each figure (§V-A2)."""
CONDITIONS = [Condition(r, t, loss) for r in (20, 10) for t in (20, 10) for loss in (0.0, 0.10)]
"""The eight conditions of the issue: 20/10 Mbit/s × 20/10 ms × 0/10% loss."""


def _link(c: Condition, loss: bool) -> str:
    # ASSUMPTION: the seed's tc set-up gives no buffer size; a one-BDP drop-tail queue (the
    # simulator's usual choice) at the base RTT. Random loss (netem, §V-A2) on the server ->
    # client direction only, where the response's packets go.
    text = (
        f"rate_bps = {int(c.rate_mbps * 1e6)}\ndelay_ms = {c.rtt_ms / 2}\nbase_rtt_ms = {c.rtt_ms}\n"
        "queue = { limit_bdp = 1.0 }\n"
    )
    if loss and c.loss > 0:
        text += f'loss = {{ model = "bernoulli", loss_rate = {c.loss} }}\n'
    return text


def sim_config(
    condition: Condition,
    workload: Path,
    seconds: float,
    seed: int,
    initial_window: int | None = None,
    changes: Sequence[tuple[float, Condition]] = (),
) -> str:
    """A simulation config of `seconds` of requests over `condition`, switching to each of
    `changes` (start in seconds, condition) with a scheduled change of both links."""
    lines = [
        f"seed = {seed}",
        f"duration_s = {seconds}",
        f"time_limit_s = {seconds + 60}",
        'cc = "cubic"',
        f'workload = "{workload}"',
    ]
    if initial_window is not None:
        lines.append(f"initial_window = {initial_window}")
    out = "\n".join(lines) + "\n"
    for side in ("down", "up"):
        out += f"[{side}]\n" + _link(condition, side == "down")
        for at_s, c in changes:
            loss = c.loss if side == "down" else 0.0
            out += (
                f"[[{side}.schedule]]\nat_ms = {at_s * 1e3}\nrate_bps = {int(c.rate_mbps * 1e6)}\n"
                f"delay_ms = {c.rtt_ms / 2}\nbase_rtt_ms = {c.rtt_ms}\n"
                f'loss = {{ model = "bernoulli", loss_rate = {loss} }}\n'
            )
    return out


def latency_ms(record: dict[str, Any]) -> float | None:
    """A response's latency (module doc): completion time less the connection's handshake."""
    rct = record.get("rct_ms")
    if rct is None or record.get("error"):
        return None
    return float(rct) - float(record.get("handshake_ms") or 0.0)


def write_workload(out: Path) -> Path:
    path = out / "tcpwise-testbed.toml"
    path.write_text(WORKLOAD, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# Ground truth


@dataclass
class IwResult:
    condition: str
    iw: int
    p80_ms: float
    p80_min_ms: float
    p80_max_ms: float
    samples: int


def run_fixed(condition: Condition, iw: int, workload: Path, seconds: float, seed: int) -> list[float]:
    """The latencies of one simulation with every connection at `iw`."""
    session = SimSession(sim_config(condition, workload, seconds, seed, initial_window=iw), name=condition.name)
    while not session.advance(60.0):
        pass
    return [x for r in session.take_records() if (x := latency_ms(r)) is not None]


def _run_fixed_args(args: tuple[Condition, int, Path, float, int]) -> list[float]:
    return run_fixed(*args)


def ground_truth(
    conditions: Iterable[Condition],
    iws: Sequence[int],
    workload: Path,
    seconds: float,
    reps: int,
    progress: bool = False,
    jobs: int = 1,
) -> tuple[list[IwResult], dict[str, dict[str, Any]]]:
    """Every IW of `iws` under every condition; the best IW per condition (§IV-C2's)."""
    rows: list[IwResult] = []
    best: dict[str, dict[str, Any]] = {}
    conditions = list(conditions)
    runs = [(c, iw, workload, seconds, 1 + rep) for c in conditions for iw in iws for rep in range(reps)]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_run_fixed_args, runs, chunksize=4))
    else:
        results = [_run_fixed_args(r) for r in runs]
    latencies = {(r[0].name, r[1], r[4]): lat for r, lat in zip(runs, results, strict=True)}
    for c in conditions:
        mine: list[IwResult] = []
        for iw in iws:
            per_rep = [latencies[(c.name, iw, 1 + rep)] for rep in range(reps)]
            pooled = [x for lat in per_rep for x in lat]
            if not pooled:
                # Nothing completed (quinn with an initial window of one packet never
                # finishes a connection): no p80, never the best.
                mine.append(IwResult(c.name, iw, math.inf, math.inf, math.inf, 0))
                continue
            p80s = [percentile(lat, 80) for lat in per_rep if lat]
            mine.append(IwResult(c.name, iw, percentile(pooled, 80), min(p80s), max(p80s), len(pooled)))
        if all(r.samples == 0 for r in mine):
            raise RuntimeError(f"{c.name}: no IW of {list(iws)} completed a response")
        least = min(r.p80_ms for r in mine)
        b = min((r for r in mine if r.p80_ms == least), key=lambda r: r.iw)
        # IWs whose p80 is within the best's own spread: the flat bottom of the curve, where
        # the repetitions cannot tell the IWs apart.
        near = [r.iw for r in mine if r.p80_ms <= b.p80_max_ms]
        best[c.name] = {
            "best_iw": b.iw,
            "p80_ms": round(b.p80_ms, 2),
            "p80_spread_ms": [round(b.p80_min_ms, 2), round(b.p80_max_ms, 2)],
            "iw10_p80_ms": next((round(r.p80_ms, 2) for r in mine if r.iw == 10), None),
            "indistinguishable_iws": [min(near), max(near)],
        }
        rows.extend(mine)
        if progress:
            print(f"{PROG}: ground truth {c.name}: best IW {b.iw}, p80 {b.p80_ms:.1f} ms", file=sys.stderr)
    return rows, best


# ---------------------------------------------------------------------------------------
# Convergence


@dataclass
class Iteration:
    figure: str
    iteration: int
    condition: str
    iw_set: tuple[int, ...]
    alpha: int
    p80_ms: float | None
    samples: int
    best_iw: int | None
    best_p80_ms: float | None
    reason: str


def _samples(records: list[dict[str, Any]], offset_ms: float = 0.0) -> list[IwSample]:
    out = []
    for r in records:
        iw = r.get("iw")
        lat = latency_ms(r)
        if not iw or lat is None or iw.get("cluster") is None:
            continue
        out.append(
            IwSample(
                time_unix_ms=float(r["time_unix_ms"]) + offset_ms,
                cluster=iw["cluster"],
                hour=int(iw.get("hour", 0)),
                iw_set=tuple(iw["iw_set"]),
                iw=int(iw["iw"]),
                latency_ms=lat,
                client_addr=r.get("local_addr"),
                rtt_ms=(r.get("transport") or {}).get("rtt_ms"),
                # The server's losses, as the edge's own record gives them to the learner.
                retransmits=(r.get("server_transport") or r.get("transport") or {}).get("lost_packets"),
            )
        )
    return out


def convergence(
    figure: str,
    changed: Condition,
    workload: Path,
    config: LearnConfig,
    theta_s: float,
    iterations: Sequence[int],
    truth: dict[str, dict[str, Any]],
    seed: int = 1,
) -> list[Iteration]:
    """One run of Figs. 7-9: `iterations` = (base, changed, base) lengths in learning intervals."""
    first, second, third = iterations
    total = first + second + third
    table = CwndTable(
        version=1,
        cap=config.cap,
        created_unix_ms=0,
        entries=[
            ClusterEntry(CLIENT_CLUSTER, config.startup_set, None, 0.5, None, "startup"),
            ClusterEntry("others", config.startup_set, None, 0.5, None, "startup"),
        ],
    )
    out: list[Iteration] = []
    carry: list[IwSample] = []
    for i in range(1, total + 1):
        cond = changed if first < i <= first + second else BASE
        entry = next(e for e in table.entries if e.prefix == CLIENT_CLUSTER)
        # One simulation per interval: the simulator's cost per event grows with the
        # requests of the whole run, so 60 short runs are much cheaper than one long one;
        # every response is on a new connection anyway, so only the queue's state at the
        # boundary is lost. Times are shifted so that the learner sees one timeline.
        session = SimSession(sim_config(cond, workload, theta_s, seed * 1000 + i), name=f"{figure} #{i}")
        session.set_cwnd_table(dumps_table(table), seed=seed * 1000 + i, name=f"{figure} table v{table.version}")
        while not session.advance(theta_s):
            pass
        records = session.take_records()
        samples = _samples(records, offset_ms=(i - 1) * theta_s * 1e3)
        lat = [s.latency_ms for s in samples]
        result = learn(table, carry + samples, config, now_unix_ms=int(i * theta_s * 1e3))
        carry = result.carry
        table = result.table
        nxt = next(e for e in table.entries if e.prefix == CLIENT_CLUSTER)
        gt = truth.get(cond.name, {})
        out.append(
            Iteration(
                figure,
                i,
                cond.name,
                entry.iw,
                entry.iw[0],
                percentile(lat, 80) if lat else None,
                len(lat),
                gt.get("best_iw"),
                gt.get("p80_ms"),
                nxt.reason or "",
            )
        )
    return out


def iterations_to_converge(rows: list[Iteration], start: int, end: int, delta: int) -> int | None:
    """The first iteration in (start, end] whose α is within ±Δ of the ground truth, counted from
    the change (1 = the first interval after it); None if it never is."""
    for r in rows:
        if start < r.iteration <= end and r.best_iw is not None and abs(r.alpha - r.best_iw) <= delta:
            return r.iteration - start
    return None


# ---------------------------------------------------------------------------------------
# Output


def _plot(rows: list[Iteration], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figures = sorted({r.figure for r in rows})
    fig, axes = plt.subplots(2, len(figures), figsize=(4.2 * len(figures), 5.2), squeeze=False, sharex=True)
    for col, name in enumerate(figures):
        mine = [r for r in rows if r.figure == name]
        x = [r.iteration for r in mine]
        ax = axes[0][col]
        ax.step(x, [r.alpha for r in mine], where="post", label="TCP WISE α")
        ax.step(x, [r.best_iw for r in mine], where="post", linestyle="--", label="brute-force best")
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("IW (packets)")
        ax.legend(fontsize=7)
        ax = axes[1][col]
        ax.plot(x, [r.p80_ms for r in mine], marker=".", markersize=3, label="TCP WISE p80")
        ax.step(x, [r.best_p80_ms for r in mine], where="post", linestyle="--", label="best IW's p80")
        ax.set_xlabel("learning iteration")
        ax.set_ylabel("p80 latency (ms)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def _write_csv(path: Path, rows: list[Any]) -> None:
    if not rows:
        path.write_text("", encoding="utf-8")
        return
    fields = list(vars(rows[0]))
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(r).items()})


def parse_iws(text: str) -> list[int]:
    """`1..100`, `1..100/5` (every 5th) or `5,10,20`; each IW in [1, 1000]."""
    try:
        if ".." in text:
            lo, rest = text.split("..", 1)
            hi, _, step = rest.partition("/")
            iws = list(range(int(lo), int(hi) + 1, int(step) if step else 1))
        else:
            iws = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--iws {text!r}: expected LO..HI, LO..HI/STEP or a list A,B,C") from None
    if not iws or any(not 1 <= iw <= 1000 for iw in iws):
        raise argparse.ArgumentTypeError(f"--iws {text!r}: needs IWs in [1, 1000]")
    return iws


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default out/tcpwise-eval; --population: out/tcpwise-population)",
    )
    p.add_argument("--iws", type=parse_iws, default=parse_iws("1..100"), help="ground-truth IWs (default 1..100)")
    p.add_argument("--reps", type=int, default=3, help="ground-truth simulations per condition and IW")
    p.add_argument("--gt-seconds", type=float, default=120.0, help="simulated seconds of requests per repetition")
    p.add_argument(
        "--conditions",
        choices=["all", "figures"],
        default="all",
        help="ground truth for the eight conditions, or only those Figs. 7-9 visit",
    )
    p.add_argument(
        "--theta", type=float, default=None, help="learning interval θ, simulated s (default 60, §V-A1; population 120)"
    )
    p.add_argument(
        "--iterations",
        default="20,20,20",
        help="learning intervals before, during and after the change (Figs. 7-9: 20,20,20)",
    )
    p.add_argument("--figures", default=",".join(FIGURES), help=f"which of {', '.join(FIGURES)} (or none)")
    p.add_argument("--initial-alpha", type=int, default=5, help="α of the startup set (§V-A1: (5, 10))")
    p.add_argument("--delta", type=int, default=5, help="Δ (§V-A1: 5)")
    p.add_argument(
        "--s-min",
        type=int,
        default=None,
        help="S_min per IW (default 40: ~100 requests per θ split over α and β give ~50 each; population 30)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--loss-guard",
        action="store_true",
        help="the convergence runs' learner with gearbox's loss guard (default: Algorithm 1 exactly)",
    )
    p.add_argument(
        "--ground-truth",
        type=Path,
        default=None,
        help="reuse the ground_truth.json of an earlier run instead of measuring it",
    )
    p.add_argument("--jobs", type=int, default=1, help="ground-truth simulations in parallel (processes)")
    p.add_argument("--quiet", action="store_true")
    emu = p.add_argument_group(
        "ground truth on kernel TCP in the emulator (root; python/gearbox/tcpwise/emulate.py)",
        "--emulator sweeps IWs over HTTP/2 on the edge's BPF program instead of the simulator",
    )
    emu.add_argument("--emulator", action="store_true", help="the ground truth of the conditions on kernel TCP")
    emu.add_argument(
        "--emulator-iws", type=parse_iws, default=parse_iws("5,10,20,30,40,50,70,100"), help="IWs of the sweep"
    )
    emu.add_argument("--emulator-duration-s", type=float, default=60.0, help="seconds of requests per IW")
    pop = p.add_argument_group(
        "population (§V-B; python/gearbox/tcpwise/population.py)",
        "--population runs TCP WISE's online evaluation over a population of client /24s instead of the testbed's",
    )
    pop.add_argument("--population", action="store_true", help="IW 10, Riptide-style, TCP WISE and the oracle")
    pop.add_argument("--prefixes", type=int, default=32, help="client /24 prefixes, each its own path")
    pop.add_argument("--rate", type=float, default=0.5, help="search requests per second per prefix")
    pop.add_argument("--intervals", type=int, default=20, help="learning intervals of θ")
    pop.add_argument("--eval-intervals", type=int, default=5, help="the last intervals measured")
    pop.add_argument(
        "--oracle-iws", type=parse_iws, default=parse_iws("5,10,15,20,30,40,60,80"), help="the oracle's IWs"
    )
    pop.add_argument("--no-fast-start", action="store_true", help="TCP WISE from (10, 15) instead of the fast start")
    pop.add_argument(
        "--learn-config",
        type=Path,
        default=Path("scenarios/control/tcpwise-learn.toml"),
        help="with --population --emulator: the loop's learner config (default: tcpwise-loop's)",
    )
    pop.add_argument(
        "--stages",
        type=lambda v: [x for x in v.split(",") if x],
        default=["base", "tcpwise", "riptide", "oracle"],
        help="with --population --emulator: which of base,tcpwise,riptide,oracle (base first; riptide needs it)",
    )
    pop.add_argument(
        "--transports",
        type=lambda v: [x for x in v.split(",") if x],
        default=["tcp", "quic"],
        help="with --population --emulator: tcp, quic or both",
    )
    a = p.parse_args(argv)
    if a.population and a.emulator:
        from gearbox.tcpwise import popemu

        a.out = a.out or Path("out/tcpwise-population-emulator")
        a.theta = a.theta if a.theta is not None else 6.0
        if a.prefixes < 1 or a.rate <= 0 or a.theta <= 0 or a.emulator_duration_s <= 0:
            p.error("--prefixes, --rate, --theta and --emulator-duration-s must be positive")
        if not 1 <= a.prefixes <= 256:
            p.error(f"--prefixes {a.prefixes}: the emulator's population takes 1 to 256 here")
        if any(iw < 3 for iw in a.oracle_iws):
            p.error("--oracle-iws: IWs of at least 3")
        bad = [s for s in a.stages if s not in ("base", "tcpwise", "riptide", "oracle")]
        bad += [t for t in a.transports if t not in popemu.TRANSPORTS]
        if bad or "base" not in a.stages or not a.transports:
            p.error(f"--stages (base,tcpwise,riptide,oracle; base required) / --transports (tcp,quic): {bad}")
        if not a.learn_config.is_file():
            p.error(f"--learn-config {a.learn_config}: no such file")
        return popemu.main(a)
    if a.population:
        from gearbox.tcpwise import population

        a.out = a.out or Path("out/tcpwise-population")
        a.theta = a.theta if a.theta is not None else 120.0
        a.s_min = a.s_min if a.s_min is not None else 30
        if a.prefixes < 1 or a.rate <= 0 or a.theta <= 0 or not 1 <= a.eval_intervals <= a.intervals:
            p.error("--prefixes, --rate and --theta must be positive, and 1 <= --eval-intervals <= --intervals")
        if not 1 <= a.prefixes <= 16384:
            p.error(f"--prefixes {a.prefixes}: at most 16384")
        if any(iw < 3 for iw in a.oracle_iws):
            p.error("--oracle-iws: IWs of at least 3")
        return population.main(a)
    figures = [f for f in a.figures.split(",") if f and f != "none"]
    for f in figures:
        if f not in FIGURES:
            p.error(f"--figures: unknown figure {f!r}; valid: {', '.join(FIGURES)}")
    conds = CONDITIONS if a.conditions == "all" else [BASE, *(FIGURES[f] for f in figures)]
    given_truth = None
    if a.ground_truth is not None:
        try:
            given_truth = json.loads(a.ground_truth.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            p.error(f"--ground-truth {a.ground_truth}: {e}")
    if a.emulator:
        from gearbox.tcpwise import emulate

        a.out = a.out or Path("out/tcpwise-emulator")
        if a.emulator_duration_s <= 0 or any(iw < 3 for iw in a.emulator_iws):
            p.error("--emulator-duration-s must be positive and --emulator-iws at least 3")
        result = emulate.run(conds, a.emulator_iws, a.emulator_duration_s, a.seed, a.out)
        (a.out / "ground_truth_emulator.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        text = emulate.report(result, given_truth)
        (a.out / "ground_truth_emulator.md").write_text(text, encoding="utf-8")
        if not a.quiet:
            print(text)
        return 0
    a.out = a.out or Path("out/tcpwise-eval")
    a.theta = a.theta if a.theta is not None else 60.0
    a.s_min = a.s_min if a.s_min is not None else 40
    try:
        its = [int(x) for x in a.iterations.split(",")]
        if len(its) != 3 or any(x < 1 for x in its):
            raise ValueError
    except ValueError:
        p.error(f"--iterations {a.iterations!r}: three positive counts, e.g. 20,20,20")
    if a.reps < 1 or a.gt_seconds <= 0 or a.theta <= 0:
        p.error("--reps, --gt-seconds and --theta must be positive")
    config = LearnConfig(
        delta=a.delta,
        s_min=a.s_min,
        theta_s=a.theta,
        initial_alpha=a.initial_alpha,
        per_hour=False,
        loss_guard=a.loss_guard,
    )
    a.out.mkdir(parents=True, exist_ok=True)
    workload = write_workload(a.out)
    started = time.perf_counter()
    if given_truth is not None:
        truth = given_truth
    else:
        gt_rows, truth = ground_truth(conds, a.iws, workload, a.gt_seconds, a.reps, progress=not a.quiet, jobs=a.jobs)
        _write_csv(a.out / "ground_truth.csv", gt_rows)
    (a.out / "ground_truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
    rows: list[Iteration] = []
    summary: dict[str, Any] = {"ground_truth": truth, "figures": {}}
    first, second, _ = its
    for f in figures:
        mine = convergence(f, FIGURES[f], workload, config, a.theta, its, truth, seed=a.seed)
        rows.extend(mine)
        after = {
            "to_changed": iterations_to_converge(mine, first, first + second, a.delta),
            "back_to_base": iterations_to_converge(mine, first + second, sum(its), a.delta),
            "from_start": iterations_to_converge(mine, 0, first, a.delta),
        }
        summary["figures"][f] = {
            "iterations_within_delta": after,
            "target_met": all(v is not None and v <= 10 for v in after.values()),
        }
        if not a.quiet:
            print(f"{PROG}: {f}: iterations to ±Δ {after}", file=sys.stderr)
    _write_csv(a.out / "convergence.csv", rows)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    summary["parameters"] = {
        "iws": [a.iws[0], a.iws[-1], len(a.iws)],
        "reps": a.reps,
        "gt_seconds": a.gt_seconds,
        "theta_s": a.theta,
        "iterations": its,
        "delta": a.delta,
        "s_min": a.s_min,
        "initial_set": list(config.startup_set),
    }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plotted = bool(rows) and _plot(rows, a.out / "convergence.png")
    lines = ["# TCP WISE evaluation (simulator, QUIC)", "", "| condition | best IW | p80 (ms) | spread | IW 10 p80 |"]
    lines.append("|---|---|---|---|---|")
    for name, t in truth.items():
        lines.append(f"| {name} | {t['best_iw']} | {t['p80_ms']} | {t['p80_spread_ms']} | {t['iw10_p80_ms']} |")
    lines += ["", "| figure | to changed | back to base | from start | target met |", "|---|---|---|---|---|"]
    for f, s in summary["figures"].items():
        it = s["iterations_within_delta"]
        lines.append(f"| {f} | {it['to_changed']} | {it['back_to_base']} | {it['from_start']} | {s['target_met']} |")
    if plotted:
        lines += ["", "![convergence](convergence.png)"]
    (a.out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if not a.quiet:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
