"""gymnasium environments over the simulator (docs/sim.md "Environments").

`gearbox/CcaSelection-v0` is Floo's selection problem (Floo §3.3): every selection period
SP the agent sees the connection's monitor (Floo §3.2, Table 2, normalised as below) and
picks its congestion controller among the seed's four (Cubic, BBR, Copa, Westwood+); the
switch is the suite's full switching (§3.4); the reward is ln(previous mean RCT / mean RCT
of this period), so a period that completes requests faster than the one before is
rewarded. Each episode draws one of the given scenarios (simulation configs, docs/sim.md)
and a seed; an episode ends when the simulation does (every request done, or its
virtual-time limit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gearbox._native import SimSession, floo_feature_names

ACTIONS = ("cubic", "bbr", "copa", "westwood")

# Rewards: `gradient` is Floo's, ln(previous period's mean RCT / this period's) (§3.3); its
# sum over an episode telescopes to ln(first / last), so each action's credit is one noisy
# difference. `level` is ln(LEVEL_RCT_MS / this period's mean RCT): the sum is the episode's
# (negative) mean log RCT per period, which is what the evaluation scores. Both are 0 in a
# period where no request finished.
REWARDS = ("gradient", "level")
LEVEL_RCT_MS = 1000.0

# A default episode: one client fetching the `feed` workload over a 10 Mbit/s, 40 ms path.
DEFAULT_SCENARIO = """
duration_s = 120.0
workload = "feed"
[down]
rate_bps = 10000000
delay_ms = 20.0
base_rtt_ms = 40.0
[down.queue]
limit_bdp = 1.0
"""

# The observation is the Floo Monitor's normalised state, computed in Rust by the same code
# the edge's gear runs (`gearbox_gears::floo::features`; docs/floo.md "State"): 16 numbers
# in [-10, 10], the controller one-hot last.
OBS_NAMES = tuple(floo_feature_names())
OBS_CLIP = 10.0


def observe(m: dict[str, Any] | None) -> np.ndarray:
    """The observation vector of one connection monitor (zeros before a connection, or on
    one of quinn's built-ins, which the monitor cannot read)."""
    if m is None or m.get("features") is None:
        return np.zeros(len(OBS_NAMES), dtype=np.float32)
    return np.asarray(m["features"], dtype=np.float32)


class CcaSelectionEnv(gym.Env):
    """Floo's controller selection (module docstring). `scenarios`: simulation configs,
    as TOML text or file paths; `period_s`: the selection period SP (Floo: 12 s)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenarios: Sequence[str | Path] | None = None,
        period_s: float = 12.0,
        mode: str = "full",
        reward: str = "gradient",
    ) -> None:
        texts = []
        for s in scenarios or [DEFAULT_SCENARIO]:
            p = Path(s) if isinstance(s, Path) or (isinstance(s, str) and "\n" not in s) else None
            texts.append((p.read_text(), str(p)) if p is not None else (str(s), "<scenario>"))
        if not texts:
            raise ValueError("scenarios: give at least one simulation config")
        if not (period_s > 0 and math.isfinite(period_s)):
            raise ValueError(f"period_s must be > 0, got {period_s}")
        if mode not in ("full", "part"):
            raise ValueError(f'mode must be "full" or "part", got {mode!r}')
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.reward = reward
        self._scenarios = texts
        self.period_s = period_s
        self.mode = mode
        self.action_space = spaces.Discrete(len(ACTIONS))
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(len(OBS_NAMES),), dtype=np.float32)
        self._session: SimSession | None = None
        self._last_rct: float | None = None
        self._conn: int | None = None
        self._episode_rcts: list[float] = []

    def _scenario(self, seed: int) -> tuple[str, str]:
        text, name = self._scenarios[int(self.np_random.integers(len(self._scenarios)))]
        # The episode's seed replaces the config's, so episodes differ.
        lines = [line for line in text.splitlines() if not line.strip().startswith("seed")]
        return f"seed = {seed}\n" + "\n".join(lines), name

    def _period(self) -> tuple[np.ndarray, float | None, bool]:
        assert self._session is not None
        finished = self._session.advance(self.period_s)
        monitors = self._session.monitor()
        m = monitors[-1] if monitors else None
        self._conn = m["conn"] if m else None
        rcts = [r for r in (m["rcts_ms"] if m else []) if math.isfinite(r)]
        self._episode_rcts.extend(r for x in monitors for r in x["rcts_ms"] if math.isfinite(r))
        return observe(m), (sum(rcts) / len(rcts) if rcts else None), finished

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        text, name = self._scenario(int(self.np_random.integers(2**31)))
        self._session = SimSession(text, name)
        self._episode_rcts = []
        obs, rct, _ = self._period()
        self._last_rct = rct
        return obs, {"now_s": self._session.now_s}

    def step(self, action: Any):
        if self._session is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space} ({', '.join(ACTIONS)})")
        if self._conn is not None:
            try:
                self._session.switch(self._conn, ACTIONS[int(action)], self.mode)
            except ValueError:
                pass  # the connection ended within the period; the next one is watched
        obs, rct, finished = self._period()
        reward = 0.0
        if self.reward == "gradient":
            if rct is not None and self._last_rct is not None and rct > 0:
                reward = math.log(self._last_rct / rct)
        elif rct is not None and rct > 0:
            reward = math.log(LEVEL_RCT_MS / rct)
        if rct is not None:
            self._last_rct = rct
        info: dict[str, Any] = {"now_s": self._session.now_s, "mean_rct_ms": rct}
        if finished and self._episode_rcts:
            # The whole episode's mean request completion time (every connection).
            info["episode_mean_rct_ms"] = sum(self._episode_rcts) / len(self._episode_rcts)
        return obs, float(reward), bool(finished), False, info
