"""Network conditions for Floo's training and evaluation, as simulation configs (docs/sim.md).

Floo §4.3.1 trains on real wireless traces (the time-varying rate) combined with RTT,
RTT jitter, loss rate and buffer size drawn by the space-filling WSP algorithm over the
ranges of its Table 4; §5.1 evaluates on 60 scenarios (10 stationary WiFi, 20 stationary
cellular, 30 mobile cellular) whose trace and parameter combinations were not used in
training, for 3 minutes each with newly generated application traces.

gearbox has no real traces in the repository (and nothing may be downloaded), so the
rate comes from the project's trace generators (docs/traces.md), one family per class:

| class | presets |
|---|---|
| `wifi` (stationary WiFi) | `wifi` |
| `cellular-stationary` | `4g-stationary`, `3g-hsdpa` |
| `cellular-mobile` | `4g-mobile`, `high-speed-rail` |

Table 4 (RTT 10-300 ms in four bands, jitter/RTT 0-0.2 with at most 20 ms, loss 0 / 0-0.1
/ 0.1-5 %, buffer 0.3-1.5 BDP) is sampled with `gearbox.lab.sampling.wsp` over the unit
cube, one coordinate per parameter; the RTT band and the loss band are picked by the
coordinate's third or quarter, then the value uniformly within the band, so each band is
as likely as Table 4 lists them. The buffer is a drop-tail queue of `buffer x BDP` at the
trace's mean rate.

Held apart: training draws trace seeds and WSP points from one seed stream, the
evaluation from another (`EVAL_SEED`), so no evaluation scenario's trace or parameter set
was seen in training; the workload's seed differs too (new application traces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gearbox._native import generate_trace
from gearbox.lab.sampling import wsp
from gearbox.lab.scenario.emu import compile_path, dumps_toml
from gearbox.lab.scenario.model import PathSpec, TraceRef

CLASSES: dict[str, tuple[str, ...]] = {
    "wifi": ("wifi",),
    "cellular-stationary": ("4g-stationary", "3g-hsdpa"),
    "cellular-mobile": ("4g-mobile", "high-speed-rail"),
}

# Floo §5.1: 10 stationary WiFi, 20 stationary cellular, 30 mobile cellular.
EVAL_MIX = {"wifi": 10, "cellular-stationary": 20, "cellular-mobile": 30}

# Table 4 bands.
RTT_BANDS_MS = ((10.0, 50.0), (50.0, 100.0), (100.0, 150.0), (150.0, 300.0))
LOSS_BANDS = ((0.0, 0.0), (0.0, 0.001), (0.001, 0.05))
JITTER_OVER_RTT = (0.0, 0.2)
JITTER_MAX_MS = 20.0
BUFFER_BDP = (0.3, 1.5)

TRAIN_SEED = 1
EVAL_SEED = 1_000_003


@dataclass(frozen=True)
class Scenario:
    """One network condition: a trace preset and seed plus Table 4's four parameters."""

    name: str
    cls: str
    preset: str
    trace_seed: int
    rtt_ms: float
    jitter_ms: float
    loss_rate: float
    buffer_bdp: float

    def trace_path(self, cache: Path, duration_s: float) -> Path:
        """The scenario's trace file in `cache`, generated on first use."""
        path = cache / f"{self.preset}-{self.trace_seed}-{int(math.ceil(duration_s))}s.trace"
        if not path.exists():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            generate_trace(self.preset, float(math.ceil(duration_s)), self.trace_seed, tmp)
            tmp.replace(path)
        return path

    def config(self, cache: Path, duration_s: float, seed: int, workload: str = "app", cc: str = "cubic") -> str:
        """The simulation config (TOML) of this scenario: `duration_s` of `workload`
        requests seeded by `seed`, starting on `cc`."""
        # The trace must cover the run and its tail (the virtual-time limit).
        trace = self.trace_path(cache, 2 * duration_s + 60.0)
        links = compile_path(self.path_spec(), lambda _ref, _where: trace, ("path", 0))
        head = {"seed": seed, "duration_s": duration_s, "cc": cc, "workload": workload}
        return dumps_toml({**head, "down": links["downlink"], "up": links["uplink"]})

    def path_spec(self) -> PathSpec:
        """The scenario as the lab's path (docs/lab.md): the simulator's links are compiled
        by the same code as the emulator's (`gearbox.lab.scenario.emu.compile_path`), so a
        scenario means the same path in both: the trace in both directions, half the
        jitter each way, the loss each way, the buffer in BDPs of the RTT."""
        return PathSpec(
            trace=TraceRef(preset=self.preset, seed=self.trace_seed),
            rtt_ms=self.rtt_ms,
            jitter_ms=self.jitter_ms,
            loss_rate=self.loss_rate,
            buffer_bdp=self.buffer_bdp,
        )


def _band(u: float, bands: tuple[tuple[float, float], ...]) -> float:
    i = min(int(u * len(bands)), len(bands) - 1)
    lo, hi = bands[i]
    within = u * len(bands) - i
    return lo + within * (hi - lo)


def sample(mix: dict[str, int], seed: int, prefix: str) -> list[Scenario]:
    """`sum(mix.values())` scenarios: per class its count, each a preset of the class (in
    turn), a trace seed and one WSP point of Table 4 (module docs)."""
    unknown = set(mix) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown scenario classes {sorted(unknown)}; valid: {', '.join(CLASSES)}")
    total = sum(mix.values())
    if total < 1:
        raise ValueError("the scenario mix is empty")
    points = wsp(total, 4, seed)
    rng = np.random.default_rng(seed)
    out: list[Scenario] = []
    k = 0
    for cls, n in mix.items():
        presets = CLASSES[cls]
        for i in range(n):
            u_rtt, u_jit, u_loss, u_buf = points[k]
            rtt = _band(float(u_rtt), RTT_BANDS_MS)
            jitter = min(JITTER_MAX_MS, rtt * (JITTER_OVER_RTT[0] + float(u_jit) * JITTER_OVER_RTT[1]))
            out.append(
                Scenario(
                    name=f"{prefix}-{cls}-{i:02d}",
                    cls=cls,
                    preset=presets[i % len(presets)],
                    trace_seed=int(rng.integers(1, 2**31)),
                    rtt_ms=round(rtt, 3),
                    jitter_ms=round(jitter, 3),
                    loss_rate=round(_band(float(u_loss), LOSS_BANDS), 6),
                    buffer_bdp=round(BUFFER_BDP[0] + float(u_buf) * (BUFFER_BDP[1] - BUFFER_BDP[0]), 4),
                )
            )
            k += 1
    return out


def training_set(n: int = 200, seed: int = TRAIN_SEED) -> list[Scenario]:
    """`n` training scenarios, spread over the classes like the evaluation mix."""
    shares = {c: max(1, round(n * m / sum(EVAL_MIX.values()))) for c, m in EVAL_MIX.items()}
    return sample(shares, seed, "train")


def evaluation_set(mix: dict[str, int] | None = None, seed: int = EVAL_SEED) -> list[Scenario]:
    """The held-apart evaluation scenarios (Floo §5.1's 60 by default)."""
    return sample(mix or EVAL_MIX, seed, "eval")
