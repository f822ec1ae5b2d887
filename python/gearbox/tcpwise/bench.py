"""The learner's half of `gearbox bench tcpwise` (also `python -m gearbox.tcpwise.bench`): the
time of one learning iteration (Algorithm 1's decision-making state over every (cluster, hour),
TCP WISE §IV-C3) and the size of the Cwnd Table it writes, at the scale of the seed's online
experiment (§V-B3: 3928 clusters with enough samples, learnt per hour).

Synthetic telemetry, generated here: `--clusters` /24s × `--hours` hours, each entry under test
with a set (α, α + Δ) and `--samples` responses of each IW (latencies drawn from a seeded
generator, so every entry makes a decision), plus a baseline in the same run: the same number of
samples reduced to one p80 per (cluster, hour, IW) without the learner, so the learner's own
cost reads as a ratio. A benchmark, not a test: it prints figures and judges none.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict

from gearbox.stats import percentile
from gearbox.tcpwise.config import LearnConfig
from gearbox.tcpwise.learner import learn
from gearbox.tcpwise.records import IwSample
from gearbox.tcpwise.table import ClusterEntry, CwndTable, dumps_table

PROG = "gearbox bench tcpwise"


def synthetic(clusters: int, hours: int, samples: int, seed: int) -> tuple[CwndTable, list[IwSample]]:
    """A table of `clusters` × `hours` entries and `samples` responses per IW of each."""
    rng = random.Random(seed)
    entries = []
    out: list[IwSample] = []
    for c in range(clusters):
        prefix = f"10.{c >> 8 & 255}.{c & 255}.0/24"
        for h in range(hours):
            alpha = 5 + 5 * rng.randrange(0, 12)
            iw_set = (alpha, alpha + 5)
            entries.append(ClusterEntry(prefix, iw_set, h, 0.5, None, None))
            base = rng.uniform(30, 400)
            for iw in iw_set:
                for k in range(samples):
                    out.append(
                        IwSample(
                            time_unix_ms=float(h * 3_600_000 + k),
                            cluster=prefix,
                            hour=h,
                            iw_set=iw_set,
                            iw=iw,
                            latency_ms=base * rng.uniform(0.7, 1.6),
                            client_addr=f"10.{c >> 8 & 255}.{c & 255}.{1 + k % 250}:40000",
                        )
                    )
    entries.append(ClusterEntry("others", (10, 15), None, 0.5, None, None))
    return CwndTable(1, 100, 0, entries), out


def baseline(samples: list[IwSample]) -> int:
    """The least any learner must do with the samples: group them and take each group's p80."""
    groups: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for s in samples:
        groups[(s.cluster, s.hour, s.iw)].append(s.latency_ms)
    return sum(1 for v in groups.values() if percentile(v, 80) >= 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--clusters", type=int, default=4096, help="client /24s (default 4096)")
    p.add_argument("--hours", type=int, default=24, help="hours per cluster, 1-24 (default 24)")
    p.add_argument("--samples", type=int, default=10, help="responses per IW per entry, = S_min (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="timings; the median is printed")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if not (1 <= a.clusters <= 65536 and 1 <= a.hours <= 24 and a.samples >= 1 and a.repeats >= 1):
        p.error("--clusters in [1, 65536], --hours in [1, 24], --samples and --repeats >= 1")
    gen0 = time.perf_counter()
    table, samples = synthetic(a.clusters, a.hours, a.samples, a.seed)
    gen_s = time.perf_counter() - gen0
    config = LearnConfig(s_min=a.samples)
    learn_s, base_s = [], []
    result = None
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        baseline(samples)
        base_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = learn(table, samples, config, now_unix_ms=0)
        learn_s.append(time.perf_counter() - t0)
    assert result is not None
    t0 = time.perf_counter()
    text = dumps_table(result.table)
    dump_s = time.perf_counter() - t0
    moved = sum(1 for d in result.decisions.values() if d.moved)
    med = sorted(learn_s)[len(learn_s) // 2]
    bmed = sorted(base_s)[len(base_s) // 2]
    entries = len(result.table.entries)
    print(f"{PROG}: learner, {a.clusters} clusters x {a.hours} hours, {len(samples)} samples ({gen_s:.1f} s to make)")
    print(f"  one learning iteration: {med:.2f} s (median of {a.repeats}); {moved} of {entries} entries moved")
    print(f"  per sample {med / len(samples) * 1e6:.2f} us; per entry {med / entries * 1e6:.1f} us")
    print(f"  baseline (group + p80 only): {bmed:.2f} s; learner / baseline = {med / bmed:.2f}")
    print(f"  next Cwnd Table: {entries} entries, {len(text.encode())} bytes of TOML")
    print(f"    ({len(text.encode()) / entries:.0f} bytes per entry, with `reason`), written in {dump_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
