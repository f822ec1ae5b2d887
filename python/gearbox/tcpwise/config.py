"""The learner's parameters (TCP WISE §IV-C, Algorithm 1's inputs), one dataclass with the
seed's values as defaults, loadable from the `[tcpwise]` table of a TOML file.

Every field says the seed section its default comes from; the two the seed leaves open (the
cap and S_min's number) are gearbox's choices and say so. Unknown keys are refused, naming the
file and the key, like every gearbox config.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAST_START_SET: tuple[int, ...] = (10, 15, 20, 25, 30)


class ConfigError(ValueError):
    """A `[tcpwise]` table that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class LearnConfig:
    """Algorithm 1's inputs (TCP WISE §IV-C3) and the learner's bounds."""

    delta: int = 5
    """Δ, the step by which the IW set moves, packets (§IV-C3: "we preliminarily use Δ = 5")."""
    s_min: int = 100
    """S_min, the fewest samples each IW of a set needs in an interval before a decision
    (§IV-C3 names it; 100 is the number of requests per interval of the seed's testbed, §V-A)."""
    theta_s: float = 60.0
    """θ, the learning interval of `--every` when none is given, seconds (§V-A: one minute)."""
    initial_alpha: int = 10
    """α of the startup set (α, α + Δ) (§IV-C3: "α = 10 (as [12] proposed) and β = α + Δ")."""
    min_iw: int = 3
    """The smallest IW the learner writes, packets (docs/tcpwise.md: every IW is in [3, cap])."""
    cap: int = 100
    """The largest IW the learner writes and the table's `cap`, packets (gearbox's choice: the
    seed's ground truth searched IW 1..100, §V-A; the table allows up to 1000)."""
    percentile: float = 80.0
    """The performance objective, a latency percentile (§IV-C2: the 80th)."""
    fast_start: bool = False
    """Start a table without an `others` entry from `fast_start_set` instead of (α, α + Δ)
    (§IV-C3: "the size of initial IW set could be more than two for fast converging"). The
    edge takes two IWs per entry today and refuses such a table (docs/tcpwise.md)."""
    fast_start_set: tuple[int, ...] = field(default=FAST_START_SET)
    """The fast start's initial set, packets."""
    prefix_v4: int = 24
    """Prefix length of an IPv4 user cluster (§IV-C1: the /24)."""
    prefix_v6: int = 48
    """Prefix length of an IPv6 user cluster (gearbox's IPv6 counterpart of the /24)."""
    per_hour: bool = True
    """Learn each cluster per hour of the day (§IV-C3: "we also learn the best IW in 24 hours
    individually"); off: hour-less entries stay hour-less."""
    loss_guard: bool = False
    """gearbox's guard, not the seed's, off by default so that the learner is Algorithm 1
    exactly (docs/tcpwise.md "The loss guard"): an IW does not win
    over a smaller IW of its set when its responses lost more packets than the smaller's by more
    than `loss_guard_share` of the extra window. A larger IW's A/B win on a thin path is taken
    from its neighbours on the shared bottleneck; its extra packets, mostly dropped, show it."""
    loss_guard_share: float = 0.5
    """The guard's bound: the mean extra lost packets per response, as a share of the extra
    initial window (0.5: a larger IW stops winning once half of what it adds is lost)."""

    pooled_by_cluster: bool = False
    """gearbox's addition, not the seed's, off by default (docs/tcpwise.md "Pooled entries
    compared per cluster"): in an entry that pools several client /24s (`others`), each
    sample's latency is divided by the median latency of its own /24's samples in the
    interval before the percentile is taken, and only /24s with samples of every IW of the
    set take part. The seed's `others` pools millions of flows; a lab's pools a few dozen
    /24s whose latencies differ by 50x, so the pooled p80 of each IW says more about which
    /24s happened to draw it than about the IW."""

    def __post_init__(self) -> None:
        problems = []
        if self.delta < 1:
            problems.append(f"delta {self.delta} is below 1 (§IV-C3: the smallest Δ is 1)")
        if self.s_min < 1:
            problems.append(f"s_min {self.s_min} is below 1")
        if not self.theta_s > 0:
            problems.append(f"theta_s {self.theta_s} is not positive")
        if not 3 <= self.min_iw <= self.cap:
            problems.append(f"min_iw {self.min_iw} is outside [3, cap {self.cap}]")
        if not 3 <= self.cap <= 1000:
            problems.append(f"cap {self.cap} is outside [3, 1000]")
        if not 0 < self.percentile < 100:
            problems.append(f"percentile {self.percentile} is outside (0, 100)")
        for name, iw in [("initial_alpha", self.initial_alpha), ("initial_alpha + delta", self.startup_set[-1])]:
            if not self.min_iw <= iw <= self.cap:
                problems.append(f"{name} {iw} is outside [min_iw {self.min_iw}, cap {self.cap}]")
        if len(self.fast_start_set) < 2 or any(not self.min_iw <= iw <= self.cap for iw in self.fast_start_set):
            problems.append(
                f"fast_start_set {list(self.fast_start_set)} needs two or more IWs in [min_iw, cap {self.cap}]"
            )
        if not 0 < self.loss_guard_share <= 10:
            problems.append(f"loss_guard_share {self.loss_guard_share} is outside (0, 10]")
        if not 8 <= self.prefix_v4 <= 32 or not 16 <= self.prefix_v6 <= 128:
            problems.append(f"prefix_v4 {self.prefix_v4} / prefix_v6 {self.prefix_v6} outside [8, 32] / [16, 128]")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def max_set(self) -> int:
        """The most IWs a table entry may hold: the edge's two, the fast start's set size when on."""
        return max(2, len(self.fast_start_set)) if self.fast_start else 2

    @property
    def startup_set(self) -> tuple[int, ...]:
        """Algorithm 1's startup set: the fast start's set, or (α, α + Δ) (§IV-C3)."""
        if self.fast_start:
            return tuple(self.fast_start_set)
        return (self.initial_alpha, self.initial_alpha + self.delta)


def config_from_mapping(values: dict[str, Any], source: str) -> LearnConfig:
    """A LearnConfig from the keys of a `[tcpwise]` table; `source` names it in errors."""
    fields = {f.name: f for f in dataclasses.fields(LearnConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"{source}: unknown key `{key}` (known: {', '.join(sorted(fields))})")
        default = getattr(LearnConfig(), key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:  # the fast start's set
            ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            value = tuple(value) if ok else value
        if not ok:
            raise ConfigError(f"{source}: `{key}` = {value!r} has the wrong type ({type(default).__name__} expected)")
        kwargs[key] = value
    try:
        return LearnConfig(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_config(path: Path) -> LearnConfig:
    """The `[tcpwise]` table of the TOML file `path` (defaults for what it leaves out; the
    seed's values when the file has no such table)."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not TOML: {e}") from None
    table = doc.get("tcpwise", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `tcpwise` must be a table")
    return config_from_mapping(table, f"{path} [tcpwise]")
