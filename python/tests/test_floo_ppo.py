"""PPO (gearbox.floo.ppo) on gymnasium's CartPole-v1 before it is trusted on our simulator.

Budgets are in environment steps, fixed seeds: the learning test trains ~30k steps (a few
seconds of CPU after JAX compiles) and must beat a random policy by far; the rest check the
plumbing (save/load, NumPy acting against JAX, parallel rollouts, episode info, bad input).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from gearbox.floo.ppo import (  # noqa: E402
    Actor,
    PPOConfig,
    TrainResult,
    act,
    action_probabilities,
    actor_logits,
    evaluate,
    load_params,
    normalize_episode_rewards,
    save_params,
    train,
)


def cartpole(index: int, max_episode_steps: int | None = None) -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def random_policy_return(episodes: int = 50, seed: int = 0) -> float:
    env, rng = cartpole(0), np.random.default_rng(seed)
    total = 0.0
    for e in range(episodes):
        env.reset(seed=seed + e)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(2)))
            total += float(reward)
            done = terminated or truncated
    return total / episodes


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    # 60 updates of 4 x 128 steps with Floo's own learning rates and networks.
    return train(cartpole, PPOConfig(), total_steps=30_720, seed=0, num_envs=4)


def test_ppo_learns_cartpole_far_beyond_a_random_policy(trained: TrainResult) -> None:
    random_return = random_policy_return()
    assert 15 < random_return < 35  # CartPole-v1's random policy lasts ~22 steps
    history = trained.history
    assert len(history) == 60 and history[-1]["steps"] == 30_720
    assert [r["steps"] for r in history] == [512 * (u + 1) for u in range(60)]
    late = np.nanmean([r["mean_return"] for r in history[-5:]])
    early = np.nanmean([r["mean_return"] for r in history[:5]])
    assert late > 3 * random_return, (early, late, random_return)
    assert late > 2 * early, (early, late)
    greedy = evaluate(cartpole, trained.actor_params, episodes=10, seed=1000)
    assert np.mean(greedy) > 4 * random_return, greedy
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "mean_length", "seconds"):
        assert all(math.isfinite(r[key]) for r in history), key
    # The policy sharpened from uniform over two actions (entropy ln 2).
    assert history[0]["entropy"] == pytest.approx(math.log(2), abs=0.01)
    assert history[-1]["entropy"] < history[0]["entropy"]


def test_numpy_actor_is_the_jax_actor(trained: TrainResult) -> None:
    cfg = trained.config
    obs = np.random.default_rng(3).normal(size=(64, 4)).astype(np.float32)
    actor = Actor(2, cfg.hidden_units, cfg.negative_slope)
    logits = np.asarray(actor.apply({"params": trained.actor_params}, obs))
    np.testing.assert_allclose(actor_logits(trained.actor_params, obs), logits, rtol=1e-5, atol=1e-5)
    assert trained.actor_params["hidden"]["kernel"].shape == (4, 200)
    assert trained.actor_params["logits"]["kernel"].shape == (200, 2)
    assert trained.critic_params["value"]["kernel"].shape == (200, 1)


def test_act_is_greedy_or_samples_the_policy(trained: TrainResult) -> None:
    params = {
        "hidden": {"kernel": np.eye(3, 4), "bias": np.zeros(4)},
        "logits": {"kernel": np.eye(4, 3), "bias": np.array([0.0, 0.5, -0.5])},
    }
    obs = np.array([0.2, -1.0, 0.0])
    p = action_probabilities(params, obs)
    assert act(params, obs) == int(np.argmax(p)) == 1
    batch = np.stack([obs, [3.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    assert act(params, batch).tolist() == [1, 0, 2]
    rng = np.random.default_rng(5)
    draws = np.array([act(params, obs, greedy=False, rng=rng) for _ in range(4000)])
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / len(draws), p, atol=0.03)
    sampled = act(params, np.repeat(obs[None], 4000, axis=0), greedy=False, rng=rng)
    np.testing.assert_allclose(np.bincount(sampled, minlength=3) / len(sampled), p, atol=0.03)
    # Leaky ReLU: the negative input reaches the logits through the slope.
    np.testing.assert_allclose(actor_logits(params, obs)[1], 0.5 - 0.01, rtol=1e-12)


def test_saved_parameters_load_back_and_act_the_same(trained: TrainResult, tmp_path: Path) -> None:
    path = trained.save(tmp_path / "floo-cartpole")
    assert path == tmp_path / "floo-cartpole"  # the name given, no extension added
    actor, critic, config = load_params(path)
    assert config == trained.config
    for layer in ("hidden", "logits"):
        for name in ("kernel", "bias"):
            np.testing.assert_array_equal(actor[layer][name], trained.actor_params[layer][name])
    np.testing.assert_array_equal(critic["value"]["kernel"], trained.critic_params["value"]["kernel"])
    obs = np.random.default_rng(1).normal(size=(100, 4))
    assert act(actor, obs).tolist() == trained.act(obs).tolist()
    only_actor = save_params(tmp_path / "actor.npz", trained.actor_params)
    actor, critic, config = load_params(only_actor)
    assert critic is None and config is None and set(actor) == {"hidden", "logits"}


def test_parallel_rollouts_train_exactly_as_sequential_ones() -> None:
    # Episodes cut at 30 steps, so time-limit bootstrapping runs in both.
    make = functools.partial(cartpole, max_episode_steps=30)
    cfg = PPOConfig(rollout_steps=64, num_minibatches=2, update_epochs=2)
    sync = train(make, cfg, total_steps=256, seed=7, num_envs=2)
    parallel = train(make, cfg, total_steps=256, seed=7, num_envs=2, parallel=True)
    assert len(sync.history) == len(parallel.history) == 2
    for a, b in zip(sync.history, parallel.history, strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert sync.history[0]["episodes"] >= 4  # 2 x 64 steps of episodes at most 30 long
    np.testing.assert_array_equal(sync.actor_params["hidden"]["kernel"], parallel.actor_params["hidden"]["kernel"])


def test_episode_end_info_is_averaged_into_the_history() -> None:
    class WithInfo(gym.Wrapper):
        """CartPole whose last step reports how far the cart got (None on the other steps)."""

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            done = terminated or truncated
            return obs, reward, terminated, truncated, {**info, "final_x": abs(float(obs[0])) if done else None}

    cfg = PPOConfig(rollout_steps=100, num_minibatches=2, update_epochs=1)
    result = train(lambda i: WithInfo(cartpole(i)), cfg, total_steps=200, seed=2, num_envs=1)
    for record in result.history:
        assert record["episodes"] >= 2
        assert 0.0 <= record["info/final_x"] <= 2.4 + 0.3  # the track is +-2.4


def test_bad_configuration_and_environments_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"num_minibatches \(3\) must divide rollout_steps x num_envs"):
        train(cartpole, PPOConfig(num_minibatches=3), total_steps=1000, seed=0)
    with pytest.raises(ValueError, match=r"PPOConfig.gamma must be in \[0, 1\]"):
        train(cartpole, PPOConfig(gamma=1.5), total_steps=1000, seed=0)
    with pytest.raises(ValueError, match="PPOConfig.actor_lr must be > 0"):
        train(cartpole, PPOConfig(actor_lr=float("nan")), total_steps=1000, seed=0)
    with pytest.raises(ValueError, match="total_steps must be an integer >= 1"):
        train(cartpole, PPOConfig(), total_steps=0, seed=0)
    with pytest.raises(ValueError, match="make_env must pickle"):
        train(lambda i: cartpole(i), PPOConfig(), total_steps=128, seed=0, parallel=True)
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        train(lambda i: gym.make("Pendulum-v1"), PPOConfig(), total_steps=128, seed=0)


def test_a_bad_parameter_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    with path.open("wb") as f:
        np.savez(f, **{"policy/hidden/kernel": np.zeros((2, 2))})
    with pytest.raises(ValueError, match="bad.npz: unexpected array 'policy/hidden/kernel'"):
        load_params(path)


def cca_selection(index: int) -> gym.Env:
    import gearbox.sim  # noqa: F401  (registers the environments)

    return gym.make("gearbox/CcaSelection-v0")


def test_ppo_runs_on_the_simulators_cca_selection_environment() -> None:
    # Two default episodes side by side (10 Mbit/s, 40 ms, the feed workload; SP 12 s):
    # the learner takes the env's 16 features and 4 controllers as they are.
    cfg = PPOConfig(rollout_steps=16, num_minibatches=2)
    result = train(cca_selection, cfg, total_steps=32, seed=0, num_envs=2)
    (record,) = result.history
    assert record["steps"] == 32 and record["episodes"] >= 2
    assert math.isfinite(record["mean_return"]) and math.isfinite(record["value_loss"])
    assert record["info/mean_rct_ms"] > 0  # the env's last period's mean RCT, averaged over episodes
    assert record["entropy"] == pytest.approx(math.log(4), abs=0.01)
    assert result.actor_params["hidden"]["kernel"].shape == (16, 200)
    assert result.actor_params["logits"]["kernel"].shape == (200, 4)


def test_episode_reward_normalisation_is_one_map_per_episode() -> None:
    r = np.array([0.3, -0.1, 0.5, 0.1])
    std = normalize_episode_rewards(r, "std")
    np.testing.assert_allclose(std, r / r.std())
    assert std.std() == pytest.approx(1.0) and np.all(np.sign(std) == np.sign(r))
    np.testing.assert_allclose(normalize_episode_rewards(1000 * r, "std"), std)  # the scale is gone
    z = normalize_episode_rewards(r, "zscore")
    assert z.mean() == pytest.approx(0.0, abs=1e-12) and z.std() == pytest.approx(1.0)
    np.testing.assert_array_equal(normalize_episode_rewards(r, "none"), r)
    # All equal: zscore gives 0, std the sign (0 for a policy that did what the reference did).
    np.testing.assert_array_equal(normalize_episode_rewards([0.2, 0.2], "zscore"), [0.0, 0.0])
    np.testing.assert_array_equal(normalize_episode_rewards([-0.2, -0.2], "std"), [-1.0, -1.0])
    np.testing.assert_array_equal(normalize_episode_rewards([0.0, 0.0, 0.0], "std"), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="must be one of none, std, zscore"):
        normalize_episode_rewards(r, "minmax")
    with pytest.raises(ValueError, match="PPOConfig.episode_reward_norm must be one of"):
        train(cartpole, PPOConfig(episode_reward_norm="minmax"), total_steps=128, seed=0)


class ScaledEpisodes(gym.Env):
    """Episodes of `length` steps whose rewards are PATTERN[t] x 10**(k % 4) in the k-th
    episode: the same shape at scales 1 to 1000, whatever the actions."""

    PATTERN = (0.5, -1.0, 2.0, 0.25, 1.0)

    def __init__(self, length: int, index: int = 0) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.k, self.t = length, -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k, self.t = self.k + 1, 0
        return np.array([self.t / self.length, 0.0], np.float32), {}

    def step(self, action):
        reward = self.PATTERN[self.t] * 10.0 ** (self.k % 4)
        self.t += 1
        obs = np.array([self.t / self.length, float(action)], np.float32)
        return obs, reward, self.t == self.length, False, {}


@pytest.mark.parametrize("length", [4, 3])  # rollouts of whole episodes (8 = 2 x 4), and cut ones
def test_training_learns_from_each_episodes_rewards_normalised(length: int) -> None:
    cfg = PPOConfig(rollout_steps=8, num_minibatches=2, update_epochs=1)
    make = functools.partial(ScaledEpisodes, length)
    normed = train(make, replace(cfg, episode_reward_norm="std"), total_steps=8 * 2 * 6, seed=3, num_envs=2)
    assert len(normed.history) == 6
    if length == 4:
        raw = train(make, cfg, total_steps=8 * 2 * 6, seed=3, num_envs=2)
        assert max(h["reward_abs_max"] for h in raw.history) == pytest.approx(2000.0)  # without: the scales reach PPO
        assert normed.history[-1]["steps"] == raw.history[-1]["steps"] == 96  # whole episodes per rollout: no wait
    pattern = normalize_episode_rewards(ScaledEpisodes.PATTERN[:length], "std")
    for h in normed.history:
        # Every episode, at any scale, reaches PPO as the same normalised pattern.
        assert h["reward_abs_max"] == pytest.approx(np.abs(pattern).max(), rel=1e-6)
        if length == 4:
            assert h["reward_mean"] == pytest.approx(pattern.mean(), rel=1e-6)
            assert h["reward_std"] == pytest.approx(1.0, rel=1e-6)
    # The history's returns stay the raw ones (episodes at scale 1000 reach 2750 with length 4).
    assert max(h["mean_return"] for h in normed.history if h["episodes"]) > 100.0
    assert normed.config.episode_reward_norm == "std"
