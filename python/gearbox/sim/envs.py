"""gymnasium environments over the simulator (docs/sim.md "Environments").

`gearbox/CcaSelection-v0` is Floo's selection problem (Floo §3.3): every selection period
SP the agent sees the connection's monitor (Floo §3.2, Table 2, normalised as below) and
picks its congestion controller among the seed's four (Cubic, BBR, Copa, Westwood+); the
switch is the suite's full switching (§3.4); Floo's reward is ln(previous mean RCT / mean RCT
of this period), so a period that completes requests faster than the one before is
rewarded. Each episode draws one of the given scenarios (simulation configs, docs/sim.md)
and a seed; an episode ends when the simulation does (every request done, or its
virtual-time limit).

Rewards (`reward=`): `gradient` is Floo's; `level` scores each period's RCT against a
fixed 1 s; `baseline` compares each period's requests with the same requests run by one
static controller (`baseline_cca`, Copa by default) in a reference simulation of the
same episode (same seed, same application trace, same path): ln(their mean RCT under the
baseline / their mean RCT under the policy). docs/floo.md "Reward" says why.

`switch_cost` (default 0) is gearbox's addition, not Floo §3.3's: a step whose action
switches the watched connection's controller (a choice other than the controller its
monitor reported running, and a switch the session carried out) has `switch_cost`
subtracted from its reward, so a policy pays for a switch whatever the reward. Staying
costs nothing. docs/floo.md "Switching cost" says why.
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
# `baseline` is ln(mean RCT of the period's requests under a static controller in a reference
# run of the same episode / their mean RCT under the policy): 0 for a policy that does what
# the baseline does, positive where switching helps, and its episode sum does not
# telescope. The reference run does not depend on the actions, so it shifts each return
# by an action-independent amount (a baseline in the policy-gradient sense) and removes
# the scenario's RCT level, which dominates `level`'s variance.
REWARDS = ("gradient", "level", "baseline")
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


def with_cc(text: str, cca: str) -> str:
    """A simulation config's TOML text with its top-level `cc` (the controller every
    connection starts on) set to `cca`."""
    lines = text.splitlines()
    first_table = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines))
    head = [line for line in lines[:first_table] if not line.replace(" ", "").startswith("cc=")]
    return "\n".join([f'cc = "{cca}"', *head, *lines[first_table:]])


def request_key(record: dict[str, Any]) -> tuple[float, str]:
    """What identifies a request across two runs of the same application trace: when it
    was issued and what it asked for."""
    return (round(float(record["time_unix_ms"]), 3), str(record["url"]))


def reference_rcts(text: str, name: str, cca: str, period_s: float) -> dict[tuple[float, str], list[float]]:
    """Each request's RCT when the whole episode runs on the static controller `cca`
    (every key's RCTs in completion order; a key can repeat when two requests of the same
    size are issued at the same instant)."""
    session = SimSession(text, name)
    session.drive(cca, period_s, "full", None, 0)
    out: dict[tuple[float, str], list[float]] = {}
    for r in session.take_records():
        rct = r.get("rct_ms")
        if rct is not None and not r.get("error") and math.isfinite(rct):
            out.setdefault(request_key(r), []).append(float(rct))
    return out


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
        baseline_cca: str = "copa",
        start_cca: str | None = None,
        switch_cost: float = 0.0,
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
        if baseline_cca not in ACTIONS:
            raise ValueError(f"baseline_cca must be one of {', '.join(ACTIONS)}, got {baseline_cca!r}")
        if start_cca is not None and start_cca not in ACTIONS:
            raise ValueError(f"start_cca must be one of {', '.join(ACTIONS)}, got {start_cca!r}")
        if not (math.isfinite(switch_cost) and switch_cost >= 0):
            raise ValueError(f"switch_cost must be a finite number >= 0, got {switch_cost}")
        self.reward = reward
        self.switch_cost = float(switch_cost)
        self.baseline_cca = baseline_cca
        self.start_cca = start_cca
        self._reference: dict[tuple[float, str], list[float]] = {}
        self._reference_mean: float | None = None
        self._scenarios = texts
        self.period_s = period_s
        self.mode = mode
        self.action_space = spaces.Discrete(len(ACTIONS))
        self.observation_space = spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(len(OBS_NAMES),), dtype=np.float32)
        self._session: SimSession | None = None
        self._last_rct: float | None = None
        self._conn: int | None = None
        self._cca: str | None = None  # the watched connection's running controller
        self._episode_rcts: list[float] = []
        self._episode_switches = 0
        self.last_switched = False  # whether the last step switched (and was charged switch_cost)

    def _scenario(self, seed: int) -> tuple[str, str]:
        text, name = self._scenarios[int(self.np_random.integers(len(self._scenarios)))]
        # The episode's seed replaces the config's, so episodes differ.
        lines = [line for line in text.splitlines() if not line.strip().startswith("seed")]
        return f"seed = {seed}\n" + "\n".join(lines), name

    def _period(self) -> tuple[np.ndarray, float | None, bool, list[dict[str, Any]]]:
        assert self._session is not None
        finished = self._session.advance(self.period_s)
        monitors = self._session.monitor()
        m = monitors[-1] if monitors else None
        self._conn = m["conn"] if m else None
        self._cca = m.get("cca") if m else None
        rcts = [r for r in (m["rcts_ms"] if m else []) if math.isfinite(r)]
        self._episode_rcts.extend(r for x in monitors for r in x["rcts_ms"] if math.isfinite(r))
        records = self._session.take_records() if self.reward == "baseline" else []
        return observe(m), (sum(rcts) / len(rcts) if rcts else None), finished, records

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        text, name = self._scenario(int(self.np_random.integers(2**31)))
        if self.start_cca is not None:
            text = with_cc(text, self.start_cca)
        self._session = SimSession(text, name)
        self._episode_rcts = []
        self._episode_switches = 0
        if self.reward == "baseline":
            self._reference = reference_rcts(with_cc(text, self.baseline_cca), name, self.baseline_cca, self.period_s)
            every = [x for v in self._reference.values() for x in v]
            self._reference_mean = sum(every) / len(every) if every else None
        obs, rct, _, _ = self._period()
        self._last_rct = rct
        return obs, {"now_s": self._session.now_s}

    def _baseline_reward(self, records: list[dict[str, Any]]) -> float:
        """ln(mean RCT of `records`' requests in the reference run / their mean RCT here);
        requests the reference run never finished are left out."""
        ours, theirs = [], []
        for r in records:
            rct = r.get("rct_ms")
            if rct is None or r.get("error") or not math.isfinite(rct):
                continue
            ref = self._reference.get(request_key(r))
            if ref:
                ours.append(float(rct))
                theirs.append(ref.pop(0))
        if not ours or sum(ours) <= 0 or sum(theirs) <= 0:
            return 0.0
        return math.log(sum(theirs) / sum(ours))

    def step(self, action: Any):
        if self._session is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space} ({', '.join(ACTIONS)})")
        choice = ACTIONS[int(action)]
        switched = False
        if self._conn is not None:
            try:
                self._session.switch(self._conn, choice, self.mode)
                # What the simulator's gear loop counts as a switch (`SimSession.drive`).
                switched = self._cca is not None and choice != self._cca
            except ValueError:
                pass  # the connection ended within the period; the next one is watched
        obs, rct, finished, records = self._period()
        reward = 0.0
        if self.reward == "baseline":
            reward = self._baseline_reward(records)
        elif self.reward == "gradient":
            if rct is not None and self._last_rct is not None and rct > 0:
                reward = math.log(self._last_rct / rct)
        elif rct is not None and rct > 0:
            reward = math.log(LEVEL_RCT_MS / rct)
        if switched:
            reward -= self.switch_cost
        if rct is not None:
            self._last_rct = rct
        self.last_switched = switched
        self._episode_switches += int(switched)
        info: dict[str, Any] = {"now_s": self._session.now_s, "mean_rct_ms": rct}
        if finished and self._episode_rcts:
            # The whole episode's mean request completion time (every connection).
            info["episode_mean_rct_ms"] = sum(self._episode_rcts) / len(self._episode_rcts)
            info["episode_switches"] = self._episode_switches
            if self.reward == "baseline":
                # The same episode on the baseline controller alone.
                info["episode_baseline_rct_ms"] = self._reference_mean
        return obs, float(reward), bool(finished), False, info
