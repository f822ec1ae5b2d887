"""The simulator from Python: a session stepped by hand, and the gymnasium environment."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gearbox.sim  # noqa: F401  (registers the environments)
from gearbox.sim import SimSession
from gearbox.sim.envs import OBS_NAMES

BULK = """
seed = 3
duration_s = 1.0
time_limit_s = 60.0
cc = "cubic"
workload = "bulk"
[down]
rate_bps = 50000000
delay_ms = 10.0
base_rtt_ms = 20.0
[down.queue]
limit_bdp = 1.0
"""


def test_a_session_advances_monitors_switches_and_hands_out_records() -> None:
    s = SimSession(BULK, "bulk.toml")
    assert s.advance(2.0) is False
    assert s.now_s == pytest.approx(2.0)
    [m] = s.monitor()
    assert m["cca"] == "cubic" and m["conn"] == 0
    assert m["min_rtt_ms"] >= 20.0 and m["goodput"] > 1e6
    s.switch(0, "bbr")
    s.advance(2.0)
    assert s.monitor()[0]["cca"] == "bbr"
    while not s.advance(5.0):
        pass
    [record] = s.take_records()
    assert record["source"] == "sim" and record["bytes"] == 50_000_000
    assert s.take_records() == []


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="duration_s"):
        SimSession(BULK.replace("duration_s = 1.0", "duration_s = -1.0"))
    s = SimSession(BULK)
    s.advance(1.0)
    with pytest.raises(ValueError, match="unknown controller 'vegas'|valid"):
        s.switch(0, "vegas")
    with pytest.raises(ValueError, match="mode"):
        s.switch(0, "bbr", "half")
    with pytest.raises(ValueError, match="no live connection 5"):
        s.switch(5, "bbr")
    with pytest.raises(ValueError, match="seconds"):
        s.advance(float("nan"))


def test_the_cca_selection_environment_passes_gymnasiums_checker_and_runs_an_episode() -> None:
    env = gym.make("gearbox/CcaSelection-v0", period_s=6.0)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=1)
    assert obs.shape == (len(OBS_NAMES),) and obs.dtype == np.float32
    steps, rewards = 0, []
    done = False
    while not done and steps < 40:
        obs, reward, terminated, truncated, info = env.step(steps % 4)
        rewards.append(reward)
        done = terminated or truncated
        steps += 1
    assert done, "the default episode ends within 40 periods"
    assert all(np.isfinite(rewards))
    with pytest.raises(ValueError, match="action 9 is not in Discrete"):
        env.unwrapped.step(9)
