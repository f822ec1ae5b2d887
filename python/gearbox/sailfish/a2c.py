"""Advantage actor-critic (A2C) for discrete actions, in JAX (flax + optax): SAILfish's learner.

SAILfish §4.2.2 and §5.1.2 train the stream-to-path scheduler with A2C in the style of
Pensieve's agent: an actor (softmax over the paths) and a critic (a linear value) with the
same body, updated in batches at the end of each epoch, an epoch being one page load
(§5.1.4); discount 0.99, Adam with learning rates 1e-4 (actor) and 1e-3 (critic), and an
entropy bonus whose weight starts at 10 and is slowly decreased (§5.1.2). Those are the
defaults of `A2CConfig`. What the thesis does not give is written here with its reason:

* **Returns and advantages.** Each decision's return is the discounted sum of the rewards
  from it to the end of its page load (an episode always ends: the page loads or its time
  limit passes), and its advantage is that return minus the critic's value, as in
  Pensieve's `compute_gradients`. The environment credits each stream's completion time
  to the decision that placed it (`info["decision_rewards"]`, `gearbox.sim.paths`), so a
  decision's own reward is SAILfish's eq. 4.1 for it.
* **Entropy schedule.** The weight decays geometrically from `entropy_start` to
  `entropy_end` over the run (the thesis gives the start, 10, and "slowly decrease"); with
  advantages normalised per batch, a weight of 10 keeps the early policy near uniform.
* **Batch.** One page load per update by default (`episodes_per_update`), as each of
  Pensieve's agents sends the gradient of one batch of its own experience; SAILfish's
  ~7,000 epochs are then ~7,000 updates.
* **Networks.** Actor and critic are the PPO file's (`gearbox.floo.ppo.Actor`, `Critic`:
  one hidden layer, Leaky ReLU) with `hidden_units` = 128, the width of SAILfish's merged
  layer, so the actor exports to the same dense-network format the data plane evaluates.
  SAILfish's 1-D convolution over each path's recent RTTs is not used: the RTT history is
  part of the flat input instead (the SAILfish issue's closing note carries the measured
  comparison or says it is missing).

Evaluation runs without JAX: `gearbox.floo.ppo.act` (NumPy) on the actor's parameters.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gearbox.floo.ppo import Actor, Critic, Params, act, save_params


@dataclass(frozen=True)
class A2CConfig:
    """A2C's hyper-parameters: SAILfish §5.1.2's values where it gives them."""

    hidden_units: int = 128
    negative_slope: float = 0.01
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    gamma: float = 0.99
    entropy_start: float = 10.0
    entropy_end: float = 0.01
    episodes_per_update: int = 1
    normalize_advantages: bool = True
    max_grad_norm: float = 0.5
    # Use the environment's per-decision eq. 4.1 rewards (info["decision_rewards"]) when it
    # gives them; otherwise the step rewards.
    decision_rewards: bool = True

    def check(self) -> None:
        """Refuse values A2C cannot run with, naming the field."""
        for name in ("hidden_units", "episodes_per_update"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"A2CConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("actor_lr", "critic_lr", "max_grad_norm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"A2CConfig.{name} must be > 0, got {value!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"A2CConfig.gamma must be in [0, 1], got {self.gamma!r}")
        for name in ("entropy_start", "entropy_end"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"A2CConfig.{name} must be > 0, got {value!r}")


@dataclass
class A2CResult:
    """What `train` returns: both networks' parameters (NumPy), the configuration and one
    dict per update (`history`)."""

    actor_params: Params
    critic_params: Params
    config: A2CConfig
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def act(self, obs: np.ndarray, greedy: bool = True, rng: np.random.Generator | None = None) -> Any:
        return act(self.actor_params, obs, greedy, negative_slope=self.config.negative_slope, rng=rng)

    def save(self, path):
        return save_params(path, self.actor_params, self.critic_params, config=self.config)


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """R_t = r_t + gamma * R_{t+1}, with R after the last step 0 (the episode ended)."""
    out = np.zeros(len(rewards), np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def _learner(config: A2CConfig, obs_dim: int, num_actions: int):
    actor = Actor(num_actions, config.hidden_units, config.negative_slope)
    critic = Critic(config.hidden_units, config.negative_slope)

    def adam(lr: float) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr))

    actor_tx, critic_tx = adam(config.actor_lr), adam(config.critic_lr)

    # Batches are padded to a power of two and masked, so `update` compiles once per size
    # class rather than once per page load length.
    def mean(x, mask):
        return (x * mask).sum() / mask.sum()

    def actor_loss(params, obs, actions, adv, mask, entropy_weight):
        logp_all = jax.nn.log_softmax(actor.apply({"params": params}, obs))
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=1)[:, 0]
        entropy = mean(-(jnp.exp(logp_all) * logp_all).sum(axis=1), mask)
        return -mean(logp * adv, mask) - entropy_weight * entropy, entropy

    def critic_loss(params, obs, returns, mask):
        return 0.5 * mean((critic.apply({"params": params}, obs) - returns) ** 2, mask)

    @jax.jit
    def update(state, obs, actions, returns, mask, entropy_weight):
        actor_params, critic_params, actor_opt, critic_opt = state
        values = critic.apply({"params": critic_params}, obs)
        adv = returns - values
        if config.normalize_advantages:
            mu = mean(adv, mask)
            adv = (adv - mu) / (jnp.sqrt(mean((adv - mu) ** 2, mask)) + 1e-8)
        adv = jax.lax.stop_gradient(adv * mask)
        (_, entropy), g_actor = jax.value_and_grad(actor_loss, has_aux=True)(
            actor_params, obs, actions, adv, mask, entropy_weight
        )
        v_loss, g_critic = jax.value_and_grad(critic_loss)(critic_params, obs, returns, mask)
        step, actor_opt = actor_tx.update(g_actor, actor_opt, actor_params)
        actor_params = optax.apply_updates(actor_params, step)
        step, critic_opt = critic_tx.update(g_critic, critic_opt, critic_params)
        critic_params = optax.apply_updates(critic_params, step)
        return (actor_params, critic_params, actor_opt, critic_opt), {"entropy": entropy, "value_loss": v_loss}

    def init(key):
        k_actor, k_critic = jax.random.split(key)
        dummy = jnp.zeros((1, obs_dim), jnp.float32)
        actor_params = actor.init(k_actor, dummy)["params"]
        critic_params = critic.init(k_critic, dummy)["params"]
        return actor_params, critic_params, actor_tx.init(actor_params), critic_tx.init(critic_params)

    return init, update


def train(
    env: gym.Env,
    config: A2CConfig,
    epochs: int,
    seed: int,
    on_update: Callable[[dict[str, Any]], bool | None] | None = None,
) -> A2CResult:
    """Train on `env` for `epochs` episodes (rounded down to whole updates of
    `config.episodes_per_update`, at least one). Episode e is reset with seed `seed + e`;
    the same arguments give the same result. After each update one dict goes into the
    history and to `on_update` (False stops the run): `update`, `epochs`, `steps`,
    `seconds`, `mean_return` (undiscounted, of the update's episodes), `entropy_weight`,
    `entropy`, `value_loss`, and `info/<key>`, the mean of each number the env put in its
    episodes' last `info` (e.g. `info/mean_stream_ms`)."""
    config.check()
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(f"A2C here needs a Discrete action space, the env has {env.action_space}")
    obs_space = env.observation_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"A2C here needs a flat Box observation space, the env has {obs_space}")
    start = time.perf_counter()
    init, update = _learner(config, obs_space.shape[0], int(env.action_space.n))
    state = init(jax.random.PRNGKey(seed))
    # Rollouts sample from the policy in NumPy (`act`, the rule the exported model
    # follows): a jitted call per decision costs more than the decision's simulation.
    rng = np.random.default_rng(seed)
    updates = max(1, epochs // config.episodes_per_update)
    decay = (config.entropy_end / config.entropy_start) ** (1.0 / max(1, updates - 1))
    history: list[dict[str, Any]] = []
    steps = episode = 0
    for u in range(updates):
        batch_obs, batch_actions, batch_returns, totals, infos = [], [], [], [], {}
        actor_np = jax.tree_util.tree_map(np.asarray, state[0])
        for _ in range(config.episodes_per_update):
            obs, _ = env.reset(seed=seed + episode)
            episode += 1
            ep_obs, ep_actions, ep_rewards, done, info = [], [], [], False, {}
            while not done:
                action = int(act(actor_np, obs, greedy=False, negative_slope=config.negative_slope, rng=rng))
                ep_obs.append(obs)
                ep_actions.append(action)
                obs, reward, terminated, truncated, info = env.step(action)
                ep_rewards.append(float(reward))
                done = terminated or truncated
            steps += len(ep_actions)
            totals.append(sum(ep_rewards))
            rewards = ep_rewards
            if config.decision_rewards and len(info.get("decision_rewards", [])) == len(ep_rewards):
                rewards = info["decision_rewards"]
            batch_obs.extend(ep_obs)
            batch_actions.extend(ep_actions)
            batch_returns.extend(discounted_returns(np.asarray(rewards), config.gamma))
            for k_, v in info.items():
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    infos.setdefault(k_, []).append(float(v))
        weight = config.entropy_start * decay**u
        n = len(batch_actions)
        size = 1 << max(5, (n - 1).bit_length())
        pad = size - n
        state, stats = update(
            state,
            jnp.asarray(np.pad(np.asarray(batch_obs, np.float32), ((0, pad), (0, 0)))),
            jnp.asarray(np.pad(np.asarray(batch_actions, np.int32), (0, pad))),
            jnp.asarray(np.pad(np.asarray(batch_returns, np.float32), (0, pad))),
            jnp.asarray(np.pad(np.ones(n, np.float32), (0, pad))),
            jnp.float32(weight),
        )
        record = {
            "update": u + 1,
            "epochs": episode,
            "steps": steps,
            "seconds": time.perf_counter() - start,
            "mean_return": float(np.mean(totals)),
            "entropy_weight": weight,
            **{k_: float(v) for k_, v in stats.items()},
            **{f"info/{k_}": float(np.mean(v)) for k_, v in infos.items()},
        }
        history.append(record)
        if on_update is not None and on_update(record) is False:
            break
    to_np = lambda tree: jax.tree_util.tree_map(np.asarray, tree)  # noqa: E731
    return A2CResult(to_np(state[0]), to_np(state[1]), config, history, time.perf_counter() - start)
