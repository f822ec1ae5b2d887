"""`gearbox/PathScheduling-v0` and `SimPageLoad`: SAILfish's stream-to-path scheduling in
the simulator (docs/sim.md "Page loads on several paths")."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gearbox.sim  # noqa: F401  (registers the environments)
from gearbox.sim import SimPageLoad
from gearbox.sim.paths import DEFAULT_SCENARIO, PathSchedulingEnv, feature_names


def episode(env: PathSchedulingEnv, choose, seed: int) -> tuple[float, dict]:
    obs, info = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, done, _, info = env.step(choose(obs))
        total += reward
    return total, info


def test_the_environment_passes_gymnasiums_checker():
    env = gym.make("gearbox/PathScheduling-v0").unwrapped
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (len(feature_names(2)),)


def test_the_fast_path_earns_more_reward_and_loads_faster_than_the_slow_one():
    env = PathSchedulingEnv(page_seeds=[3])
    fast_return, fast = episode(env, lambda _: 0, seed=1)
    slow_return, slow = episode(env, lambda _: 1, seed=1)
    assert fast["page_load_ms"] < slow["page_load_ms"]
    assert fast["mean_stream_ms"] < slow["mean_stream_ms"]
    assert fast_return > slow_return
    # The per-decision rewards add up to the episode's return.
    assert sum(fast["decision_rewards"]) == pytest.approx(fast_return, rel=1e-9, abs=1e-9)


def test_episodes_draw_only_the_given_pages():
    env = PathSchedulingEnv(page_seeds=[5, 6])
    seen = {env.reset(seed=s)[1]["page_seed"] for s in range(8)}
    assert seen <= {5, 6} and len(seen) == 2


def test_a_page_load_steps_stream_by_stream_and_records_the_path():
    load = SimPageLoad(DEFAULT_SCENARIO, 7)
    assert load.paths == 2
    first = load.next_stream()
    assert first["object"] == 0 and first["kind"] == "html" and len(first["paths"]) == 2
    load.assign(0, 1, "root on lte")
    while (r := load.next_stream()) is not None:
        load.assign(r["object"], 0, "wifi")
    out = load.outcome()
    assert not out["timed_out"] and out["page_load_ms"] > 0
    records = load.records()
    assert len(records) == len(out["streams"])
    root = next(r for r in records if r["url"].endswith(".html"))
    assert (root["path_index"], root["path_decision"]) == (1, "root on lte")
    with pytest.raises(ValueError, match="not waiting"):
        load.assign(0, 0)


def test_bad_input_is_refused_with_its_field():
    with pytest.raises(ValueError, match="path 3 does not exist"):
        load = SimPageLoad(DEFAULT_SCENARIO, 1)
        load.next_stream()
        load.assign(0, 3)
    with pytest.raises(ValueError, match="workload"):
        SimPageLoad(DEFAULT_SCENARIO.replace('"page"', '"app"'), 1, "x.toml")
    single = "duration_s = 1\nworkload = 'page'\n[down]\nrate_bps = 1000000\n"
    with pytest.raises(ValueError, match="same number of paths"):
        PathSchedulingEnv([DEFAULT_SCENARIO, single])
    env = PathSchedulingEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not in"):
        env.step(np.int64(2))


def test_rust_schedulers_load_a_page_and_an_unknown_one_gets_the_list():
    for name in ("minrtt", "round-robin", "single-best", "ecf", "blest"):
        out = SimPageLoad(DEFAULT_SCENARIO, 3).run(name)
        assert not out["timed_out"] and all(s["path"] in (0, 1) for s in out["streams"])
    with pytest.raises(ValueError, match="minrtt.*sailfish"):
        SimPageLoad(DEFAULT_SCENARIO, 3).run("fastest")
    with pytest.raises(ValueError, match="model_dir"):
        SimPageLoad(DEFAULT_SCENARIO, 3).run("sailfish")
