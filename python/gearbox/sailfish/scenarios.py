"""Path pairs and pages for SAILfish's training and evaluation (SAILfish §5.2.1-5.2.2).

**Path pairs.** SAILfish Table 5.2 gives one pair per class: (1) low-bandwidth similar,
(2) low-bandwidth dissimilar, (3) homogeneous, (4) high-bandwidth dissimilar, (5)
high-bandwidth similar, drawn from bandwidth 1-100 Mbit/s, latency 0-50 ms and loss 0-2%
per path. `TABLE_5_2` holds those five pairs; `sample_pairs` draws more pairs "from each
class and around them" with these rules (our reading of the class names, since the thesis
gives only the examples):

| class | path 1 bandwidth | path 2 bandwidth |
|---|---|---|
| low-bdw similar | 5-20 Mbit/s | within 1-3.5x below path 1 |
| low-bdw dissimilar | 20-50 Mbit/s | 1-6 Mbit/s |
| homogeneous | 10-100 Mbit/s | the same |
| high-bdw dissimilar | 50-100 Mbit/s | 1.3-2x path 1, capped at 100 |
| high-bdw similar | 70-100 Mbit/s | within 1.25x, capped at 100 |

and each path's latency uniform in 0-50 ms and loss uniform in 0-2%, from one seeded
generator. "Latency" is read as the path's one-way delay (Mininet's link `delay`), so a
path's RTT is twice it; each path gets a queue of one BDP and at least 64 packets.

**Pages.** Pages come from the `page` workload (docs/workloads.md), identified by seed.
Training uses seeds below `TEST_PAGE_SEED_START`; the eight test pages are the first seeds
from `TEST_PAGE_SEED_START` on whose object counts are those of SAILfish Table 5.1 (6, 10,
21, 25, 35, 35, 40 and 47 files: small, medium and large), so training and test pages
never mix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gearbox._native import generate_page
from gearbox.lab.scenario.emu import compile_path, dumps_toml
from gearbox.lab.scenario.model import PathSpec

CLASSES = ("low-bdw similar", "low-bdw dissimilar", "homogeneous", "high-bdw dissimilar", "high-bdw similar")
TABLE_5_1_FILES = (6, 10, 21, 25, 35, 35, 40, 47)
# Table 5.1's page classes of the eight test pages, in the same order.
PAGE_SIZES = ("small", "small", "small", "medium", "medium", "medium", "large", "large")
TEST_PAGE_SEED_START = 1_000_000
TRAIN_PAGE_SEEDS = range(0, TEST_PAGE_SEED_START)
MIN_QUEUE_PACKETS = 64


@dataclass(frozen=True)
class PathParams:
    """One path: bandwidth (Mbit/s), one-way latency (ms), loss (fraction)."""

    mbps: float
    latency_ms: float
    loss: float

    def spec(self, name: str) -> PathSpec:
        rtt = 2.0 * self.latency_ms
        bdp_packets = self.mbps * 1e6 * rtt / 1e3 / 8 / 1500
        return PathSpec(
            name=name,
            bandwidth_mbps=self.mbps,
            rtt_ms=rtt,
            loss_rate=self.loss if self.loss > 0 else None,
            buffer_packets=max(MIN_QUEUE_PACKETS, int(round(bdp_packets))),
        )


@dataclass(frozen=True)
class PathPair:
    """A class's pair of paths, named."""

    name: str
    cls: str
    paths: tuple[PathParams, PathParams]

    def config(self, seed: int = 1, time_limit_s: float = 120.0) -> str:
        """The simulation config (TOML, docs/sim.md "Page loads on several paths")."""
        entries = []
        for i, p in enumerate(self.paths):
            links = compile_path(p.spec(f"path{i}"), _no_trace, ("path", i))
            entries.append({"name": f"path{i}", "down": links["downlink"], "up": links["uplink"]})
        head = {"seed": seed, "duration_s": 1.0, "time_limit_s": time_limit_s, "workload": "page"}
        return dumps_toml({**head, "path": entries})


def _no_trace(_ref, _where):
    raise ValueError("SAILfish's paths have fixed rates, not traces")


TABLE_5_2 = (
    PathPair("t52-low-similar", CLASSES[0], (PathParams(15, 3.5, 0.0018), PathParams(5, 12.5, 0.0027))),
    PathPair("t52-low-dissimilar", CLASSES[1], (PathParams(38, 17.0, 0.0191), PathParams(3, 9.0, 0.0069))),
    PathPair("t52-homogeneous", CLASSES[2], (PathParams(45, 14.0, 0.0033), PathParams(45, 18.5, 0.0175))),
    PathPair("t52-high-dissimilar", CLASSES[3], (PathParams(56, 18.0, 0.0183), PathParams(80, 23.0, 0.0141))),
    PathPair("t52-high-similar", CLASSES[4], (PathParams(82, 21.5, 0.0131), PathParams(98, 14.0, 0.0004))),
)


def _bandwidths(cls: str, rng: np.random.Generator) -> tuple[float, float]:
    if cls == CLASSES[0]:
        a = rng.uniform(5, 20)
        return a, max(1.0, a / rng.uniform(1.0, 3.5))
    if cls == CLASSES[1]:
        return rng.uniform(20, 50), rng.uniform(1, 6)
    if cls == CLASSES[2]:
        a = rng.uniform(10, 100)
        return a, a
    if cls == CLASSES[3]:
        a = rng.uniform(50, 100)
        return a, min(100.0, a * rng.uniform(1.3, 2.0))
    if cls == CLASSES[4]:
        a = rng.uniform(70, 100)
        return a, min(100.0, a * rng.uniform(1.0, 1.25))
    raise ValueError(f"unknown class {cls!r}; valid: {', '.join(CLASSES)}")


def sample_pairs(per_class: int, seed: int, prefix: str = "pair") -> list[PathPair]:
    """`per_class` pairs of each class (module docstring); the paths' order is shuffled so
    the faster path is not always path 0."""
    rng = np.random.default_rng(seed)
    out = []
    for c, cls in enumerate(CLASSES):
        for i in range(per_class):
            bw = _bandwidths(cls, rng)
            paths = [
                PathParams(
                    round(float(b), 2), round(float(rng.uniform(0, 50)), 2), round(float(rng.uniform(0, 0.02)), 4)
                )
                for b in bw
            ]
            if rng.random() < 0.5:
                paths.reverse()
            out.append(PathPair(f"{prefix}-{c}-{i}", cls, (paths[0], paths[1])))
    return out


def evaluation_page_seeds() -> list[int]:
    """The eight test pages (module docstring), in Table 5.1's order."""
    wanted = list(TABLE_5_1_FILES)
    found: list[int | None] = [None] * len(wanted)
    seed = TEST_PAGE_SEED_START
    while any(f is None for f in found):
        n = len(generate_page(seed)["objects"])
        for i, w in enumerate(wanted):
            if found[i] is None and n == w:
                found[i] = seed
                break
        seed += 1
        if seed > TEST_PAGE_SEED_START + 1_000_000:
            raise RuntimeError("no page seeds with Table 5.1's object counts in a million tries")
    return [s for s in found if s is not None]
