"""`gearbox/PathScheduling-v0`: SAILfish's stream-to-path scheduling in the simulator
(SAILfish §4.2.1; docs/sim.md "Page loads on several paths").

One episode is one page load (SAILfish §5.1.4: an epoch is one website delivery) over a
multipath client: a page drawn from a page workload, a pair (or more) of paths drawn from
the given scenarios. Every stream the browser-like order releases (HTML, then CSS and JS,
then the rest, each once its dependencies have arrived) is one step: the agent sees each
path's state and the stream's size and priority, and picks the path that carries it.

Reward (SAILfish eq. 4.1): R_t = α·bdw − β·ctime − γ·aRTT − δ·aLOSS with α, β, γ, δ =
1.0, 1.0, 0.8, 0.6 (§5.1.2), in units that make each term of order one on the paths of
SAILfish Table 5.2: bdw is the chosen path's delivery-rate estimate in 10 Mbit/s, ctime
the stream's completion time in seconds, aRTT the sum of the paths' sRTTs in 100 ms,
aLOSS the lost packets of every path in the load so far, in tens. A stream's
completion time is known only when it arrives, so a step's reward carries the immediate
terms of its own decision and −β·ctime of the streams that completed since the previous
step (the episode's sum is the sum of eq. 4.1 over its decisions); `info["decision_rewards"]`
at the end gives eq. 4.1 per decision for learners that credit each decision exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gearbox._native import SimPageLoad, sailfish_feature_names

# SAILfish §5.1.2's reward weights.
ALPHA, BETA, GAMMA, DELTA = 1.0, 1.0, 0.8, 0.6

# Two contrasting paths (SAILfish Table 5.2's heterogeneous class): WiFi-like and LTE-like.
DEFAULT_SCENARIO = """
duration_s = 1.0
time_limit_s = 120.0
workload = "page"
[[path]]
name = "wifi"
[path.down]
rate_bps = 20000000
delay_ms = 10.0
base_rtt_ms = 20.0
[[path]]
name = "lte"
[path.down]
rate_bps = 5000000
delay_ms = 40.0
base_rtt_ms = 80.0
"""

# The observation is SAILfish's state computed in Rust by the code the client's SAILfish
# gear runs (`gearbox_gears::path::sailfish::features`; docs/sailfish.md "State"): per
# path, RTTs in 100 ms, rates and counts on log scales, all >= 0; then the stream's size
# and urgency.
OBS_MAX = 1e4


def feature_names(paths: int) -> list[str]:
    """The observation's names, in order, for a client with `paths` paths."""
    return sailfish_feature_names(paths)


def observe(request: dict[str, Any]) -> np.ndarray:
    """The observation of one decision (a `SimPageLoad.next_stream()` dict)."""
    return np.clip(np.asarray(request["features"], dtype=np.float32), 0.0, OBS_MAX)


def immediate_reward(request: dict[str, Any], path: int) -> float:
    """Eq. 4.1's terms known at the decision: α·bdw − γ·aRTT − δ·aLOSS."""
    paths = request["paths"]
    bdw = (paths[path]["delivery_rate_bps"] or 0) / 10e6
    artt = sum(p["srtt_ms"] for p in paths if p["srtt_ms"] is not None) / 100.0
    aloss = sum(p["lost_packets"] for p in paths) / 10.0
    return ALPHA * bdw - GAMMA * artt - DELTA * aloss


class PathSchedulingEnv(gym.Env):
    """SAILfish's stream-to-path scheduling (module docstring). `scenarios`: simulation
    configs with `[[path]]` entries (all with the same number of paths) and a page
    workload, as TOML text or file paths; `page_seeds`: the pages an episode may draw
    (keep training and test pages apart by giving each its own seeds)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenarios: Sequence[str | Path] | None = None,
        page_seeds: Sequence[int] | None = None,
    ) -> None:
        texts = []
        for s in scenarios or [DEFAULT_SCENARIO]:
            p = Path(s) if isinstance(s, Path) or (isinstance(s, str) and "\n" not in s) else None
            texts.append((p.read_text(), str(p)) if p is not None else (str(s), "<scenario>"))
        counts = {SimPageLoad(text, 0, name).paths for text, name in texts}
        if len(counts) != 1:
            raise ValueError(f"scenarios: every scenario needs the same number of paths, got {sorted(counts)}")
        self.n_paths = counts.pop()
        self._scenarios = texts
        self._page_seeds = list(page_seeds) if page_seeds is not None else None
        if self._page_seeds == []:
            raise ValueError("page_seeds: give at least one page seed")
        size = len(feature_names(self.n_paths))
        self.action_space = spaces.Discrete(self.n_paths)
        # Every feature is >= 0; the largest (log2 of a cwnd in packets, streams in flight)
        # stay far below OBS_MAX.
        self.observation_space = spaces.Box(0.0, OBS_MAX, shape=(size,), dtype=np.float32)
        self._load: SimPageLoad | None = None
        self._request: dict[str, Any] | None = None
        self._decisions: list[tuple[int, float]] = []
        self._credited: set[int] = set()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        text, name = self._scenarios[int(self.np_random.integers(len(self._scenarios)))]
        sim_seed = int(self.np_random.integers(2**31))
        lines = [line for line in text.splitlines() if not line.strip().startswith("seed")]
        if self._page_seeds is not None:
            page = self._page_seeds[int(self.np_random.integers(len(self._page_seeds)))]
        else:
            page = int(self.np_random.integers(2**31))
        self._load = SimPageLoad(f"seed = {sim_seed}\n" + "\n".join(lines), page, name)
        self._decisions = []
        self._credited = set()
        self._request = self._load.next_stream()
        if self._request is None:
            raise RuntimeError(f"{name}: page {page} needs no decision")
        return observe(self._request), {"page_seed": page, "object": self._request["object"]}

    def step(self, action: Any):
        if self._load is None or self._request is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        path = int(action)
        request = self._request
        reward = immediate_reward(request, path)
        self._decisions.append((request["object"], reward))
        self._load.assign(request["object"], path, "agent")
        self._request = self._load.next_stream()
        outcome = self._load.outcome()
        for s in outcome["streams"]:
            if s["completion_ms"] is not None and s["object"] not in self._credited:
                self._credited.add(s["object"])
                reward -= BETA * s["completion_ms"] / 1e3
        info: dict[str, Any] = {}
        done = self._request is None
        if done:
            ctime = {s["object"]: s["completion_ms"] for s in outcome["streams"]}
            info["page_load_ms"] = outcome["page_load_ms"]
            info["timed_out"] = outcome["timed_out"]
            done_ms = [c for c in ctime.values() if c is not None]
            info["mean_stream_ms"] = sum(done_ms) / len(done_ms) if done_ms else None
            info["decision_rewards"] = [r - BETA * (ctime.get(obj) or 0.0) / 1e3 for obj, r in self._decisions]
            obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        else:
            obs = observe(self._request)
            info["object"] = self._request["object"]
        return obs, float(reward), done, False, info
