"""Proximal Policy Optimisation for discrete actions, in JAX (flax + optax): Floo's learner.

Floo §3.3 trains its congestion-control selector with PPO, actor-critic, from the clipped
surrogate objective of Appendix A (Eq. 4); Appendix D (Table 7) gives the networks and the
numbers: an actor and a critic, each with one hidden layer of 200 units and Leaky ReLU, a
softmax over the actions, a linear value unit, Adam with learning rates 1e-4 (actor) and
2e-4 (critic), discount 0.99, clip 0.2. Those are the defaults of `PPOConfig` below; the
rest of PPO's knobs, which the paper does not give, take the usual values of the CleanRL
PPO (GAE lambda 0.95, 4 epochs of 4 minibatches, entropy bonus 0.01, gradient norm 0.5).

The whole algorithm is this one file, in the style of CleanRL's `ppo.py` and PureJaxRL:
hyper-parameters in a dataclass, the loop in plain sight. Environments are gymnasium
vector environments (in this process, one local process each, or one Ray actor each:
`gearbox.sim.vector`), stepped from Python; the learner's arithmetic (sampling actions, the
advantages, every epoch and minibatch of an update) is compiled once by `jax.jit`.
Rejected: `sbx-rl` / stable-baselines3 (they import torch, whose wheels pull gigabytes
of CUDA), and a pure-JAX environment loop as in PureJaxRL, which our simulator — a Rust
state machine behind a Python module — cannot be.

Design points worth knowing:

* **Two networks, two optimisers.** Actor and critic share nothing (Appendix D describes
  two networks with their own learning rates), so the actor's loss (clipped surrogate
  minus the entropy bonus) updates the actor only and the critic's (squared error to the
  GAE returns) the critic only; no value-loss coefficient is needed.
* **Episode ends.** Vector environments reset an environment in the same step it ends
  (gymnasium's `AutoresetMode.SAME_STEP`), so every stored transition is a real one. An
  episode cut by a time limit (`truncated`) is not a failure: its last reward gets
  `gamma * V(final observation)` added, the value it would have gone on to earn.
* **Episode-level reward normalisation** (Floo §3.3, `PPOConfig.episode_reward_norm`,
  off by default): each finished episode's rewards are normalised together
  (`normalize_episode_rewards`) before PPO learns from them, which needs whole episodes
  and so runs a loop of its own (`_train_episodic`: transitions queue per environment
  until their episode ends).
* **Evaluation without JAX.** `act` runs the actor in NumPy (float64), the same rule the
  exported model follows in Rust (`gearbox.floo.export`, docs/models.md "Dense
  networks"), so a policy can be evaluated where JAX is not installed.

Check it on a gymnasium classic-control task before trusting it on ours:

    PYTHONPATH=python .venv/bin/python -m gearbox.floo.ppo --cartpole

With the defaults above (8 environments, 300k steps, seed 1) that run printed, on this
lab's 2-vCPU VM while other builds kept it busy (load average 13): 299,008 steps, 292
updates, 39.5 s (about 17 s of it compiling); mean training return over the last 10
updates 447.4; the greedy policy (`act`) 500.0 in each of 20 episodes, CartPole-v1's cap
(a random policy lasts ~22 steps).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gearbox.sim.vector import make_vector_env

# A network's parameters: {"hidden": {"kernel": (inputs, units), "bias": (units,)}, "<out>": {...}}
# with "<out>" = "logits" (actor) or "value" (critic), as NumPy arrays.
Params = dict[str, dict[str, np.ndarray]]

# `PPOConfig.episode_reward_norm`'s values.
EPISODE_REWARD_NORMS = ("none", "std", "zscore")


def normalize_episode_rewards(rewards: Sequence[float] | np.ndarray, mode: str) -> np.ndarray:
    """The rewards of one whole episode, normalised as Floo §3.3 asks ("after one entire
    training episode, we normalize all the rewards uniformly").

    The paper gives no formula. Here "uniformly" is read as: one affine map, computed from
    that episode's rewards alone, applied to every reward of the episode, so their order and
    ratios of differences are kept and episodes of different scales (a scenario whose RCT
    swings by seconds against one that moves by milliseconds) weigh alike in the update:

    * `"std"`: r_t / sigma, sigma the population standard deviation of the episode's
      rewards. Signs are kept: with `--reward baseline` a period better than the reference
      stays positive, and the episode's mean (its gain over the reference) is kept in units
      of its own spread.
    * `"zscore"`: (r_t - mu) / sigma, mu their mean: only how each period compares with
      the rest of its episode is kept.
    * `"none"`: unchanged.

    An episode whose rewards are all equal (sigma <= 1e-8; e.g. a one-step episode) comes
    out as 0 under "zscore" and, under "std", divided by their magnitude |r| (so +-1, or 0
    if they are 0: a policy that did exactly what the reference did). Float64 in and out."""
    r = np.asarray(rewards, dtype=np.float64)
    if mode == "none" or r.size == 0:
        return r.copy()
    if mode not in EPISODE_REWARD_NORMS:
        raise ValueError(f"episode reward normalisation must be one of {', '.join(EPISODE_REWARD_NORMS)}, got {mode!r}")
    sigma = float(r.std())
    if mode == "zscore":
        return (r - r.mean()) / sigma if sigma > 1e-8 else np.zeros_like(r)
    if sigma > 1e-8:
        return r / sigma
    magnitude = float(np.abs(r).max())
    return r / magnitude if magnitude > 1e-8 else np.zeros_like(r)


@dataclass(frozen=True)
class PPOConfig:
    """PPO's hyper-parameters. Floo's values (Appendix D, Table 7) where the paper gives
    them; CleanRL's PPO defaults otherwise."""

    # Networks (Floo Appendix D): one hidden layer of 200 units each, Leaky ReLU.
    hidden_units: int = 200
    negative_slope: float = 0.01  # Leaky ReLU's slope below 0: flax's default (the paper gives none)
    # Optimisation (Floo Table 7): Adam, actor 1e-4, critic 2e-4, discount 0.99, clip 0.2.
    actor_lr: float = 1e-4
    critic_lr: float = 2e-4
    gamma: float = 0.99
    clip_eps: float = 0.2
    # Not in the paper: CleanRL's PPO defaults.
    gae_lambda: float = 0.95
    rollout_steps: int = 128  # steps per environment between updates
    num_envs: int = 1  # environments stepped together (train()'s num_envs overrides)
    update_epochs: int = 4  # passes over each rollout
    num_minibatches: int = 4  # per pass; must divide rollout_steps * num_envs
    ent_coef: float = 0.01  # entropy bonus in the actor's loss
    max_grad_norm: float = 0.5  # each network's gradient is clipped to this global norm
    normalize_advantages: bool = True  # per minibatch
    adam_eps: float = 1e-5
    # Floo §3.3: "after one entire training episode, we normalize all the rewards
    # uniformly". "none" (CleanRL, and every policy trained before 2026-11-27), "std" or
    # "zscore": `normalize_episode_rewards` says what each does, `_train_episodic` how.
    episode_reward_norm: str = "none"

    def check(self) -> None:
        """Refuse values PPO cannot run with, naming the field."""
        positive_int = ("hidden_units", "rollout_steps", "num_envs", "update_epochs", "num_minibatches")
        for name in positive_int:
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"PPOConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("actor_lr", "critic_lr", "clip_eps", "max_grad_norm", "adam_eps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"PPOConfig.{name} must be > 0, got {value!r}")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {value!r}")
        if not (math.isfinite(self.ent_coef) and self.ent_coef >= 0):
            raise ValueError(f"PPOConfig.ent_coef must be >= 0, got {self.ent_coef!r}")
        if self.episode_reward_norm not in EPISODE_REWARD_NORMS:
            raise ValueError(
                f"PPOConfig.episode_reward_norm must be one of {', '.join(EPISODE_REWARD_NORMS)}, "
                f"got {self.episode_reward_norm!r}"
            )
        if not math.isfinite(self.negative_slope):
            raise ValueError(f"PPOConfig.negative_slope must be finite, got {self.negative_slope!r}")
        batch = self.rollout_steps * self.num_envs
        if batch % self.num_minibatches:
            raise ValueError(
                f"PPOConfig.num_minibatches ({self.num_minibatches}) must divide rollout_steps x num_envs "
                f"({self.rollout_steps} x {self.num_envs} = {batch})"
            )


@dataclass
class TrainResult:
    """What `train` returns: both networks' parameters (NumPy), the configuration used and
    one dict per update (`history`, keys in `train`'s docstring)."""

    actor_params: Params
    critic_params: Params
    config: PPOConfig
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def act(self, obs: np.ndarray, greedy: bool = True, rng: np.random.Generator | None = None) -> Any:
        return act(self.actor_params, obs, greedy, negative_slope=self.config.negative_slope, rng=rng)

    def save(self, path: str | Path) -> Path:
        return save_params(path, self.actor_params, self.critic_params, config=self.config)


# ---------------------------------------------------------------------------------------
# Networks (Floo Appendix D)


class Actor(nn.Module):
    """State -> one logit per action: Dense(hidden) -> Leaky ReLU -> Dense(actions); the
    policy is their softmax."""

    num_actions: int
    hidden_units: int
    negative_slope: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        # Orthogonal initialisation as in CleanRL; the small output gain starts the policy
        # near uniform, so early rollouts explore every action.
        h = nn.Dense(self.hidden_units, kernel_init=nn.initializers.orthogonal(math.sqrt(2)), name="hidden")(x)
        h = nn.leaky_relu(h, negative_slope=self.negative_slope)
        return nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01), name="logits")(h)


class Critic(nn.Module):
    """State -> V(state): Dense(hidden) -> Leaky ReLU -> Dense(1)."""

    hidden_units: int
    negative_slope: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Dense(self.hidden_units, kernel_init=nn.initializers.orthogonal(math.sqrt(2)), name="hidden")(x)
        h = nn.leaky_relu(h, negative_slope=self.negative_slope)
        return nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), name="value")(h)[..., 0]


# ---------------------------------------------------------------------------------------
# Acting in NumPy (evaluation; the rule the Rust evaluator follows)


def actor_logits(
    params: Params | Sequence[tuple[np.ndarray, np.ndarray]],
    obs: np.ndarray,
    negative_slope: float = PPOConfig.negative_slope,
) -> np.ndarray:
    """The actor's logits for one observation (shape (actions,)) or a batch (rows), in
    float64. `params`: the actor's (`hidden`, `logits`), or a sequence of dense layers
    `(kernel, bias)`, input first, Leaky ReLU after all but the last (the exported file's
    rule; e.g. SAILfish's convolutional actor, `gearbox.sailfish.a2c.dense_layers`)."""
    x = np.asarray(obs, dtype=np.float64)
    if not isinstance(params, dict):
        layers = list(params)
        for i, (kernel, bias) in enumerate(layers):
            x = x @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64)
            if i < len(layers) - 1:
                x = np.where(x >= 0.0, x, negative_slope * x)
        return x
    h = x @ np.asarray(params["hidden"]["kernel"], np.float64) + np.asarray(params["hidden"]["bias"], np.float64)
    h = np.where(h >= 0.0, h, negative_slope * h)
    return h @ np.asarray(params["logits"]["kernel"], np.float64) + np.asarray(params["logits"]["bias"], np.float64)


def action_probabilities(
    params: Params | Sequence[tuple[np.ndarray, np.ndarray]],
    obs: np.ndarray,
    negative_slope: float = PPOConfig.negative_slope,
) -> np.ndarray:
    """The policy: softmax of `actor_logits`."""
    z = actor_logits(params, obs, negative_slope)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def act(
    params: Params | Sequence[tuple[np.ndarray, np.ndarray]],
    obs: np.ndarray,
    greedy: bool = True,
    *,
    negative_slope: float = PPOConfig.negative_slope,
    rng: np.random.Generator | None = None,
) -> Any:
    """The action for one observation (an int) or for each row of a batch (an int array).
    `greedy`: the most likely action (the first on a tie), as the edge uses the policy;
    otherwise one drawn from the policy with `rng` (a fresh unseeded generator if None)."""
    obs = np.asarray(obs)
    if greedy:
        actions = np.argmax(actor_logits(params, obs, negative_slope), axis=-1)
    else:
        rng = rng if rng is not None else np.random.default_rng()
        p = np.atleast_2d(action_probabilities(params, obs, negative_slope))
        u = rng.random((p.shape[0], 1))
        # Inverse CDF; the clip keeps a rounding shortfall of the cumulative sum in range.
        actions = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)
        actions = actions.reshape(obs.shape[:-1])
    return int(actions) if actions.ndim == 0 else actions.astype(np.int64)


# ---------------------------------------------------------------------------------------
# Saving and loading (npz: "actor/hidden/kernel", ..., and the config as JSON)


def save_params(
    path: str | Path, actor_params: Params, critic_params: Params | None = None, *, config: PPOConfig | None = None
) -> Path:
    """Write the parameters (and the configuration, if given) to one `.npz` file."""
    arrays: dict[str, np.ndarray] = {}
    for net, params in (("actor", actor_params), ("critic", critic_params)):
        for layer, tensors in (params or {}).items():
            for name, value in tensors.items():
                arrays[f"{net}/{layer}/{name}"] = np.asarray(value)
    if config is not None:
        arrays["config_json"] = np.asarray(json.dumps(asdict(config)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:  # a file object: np.savez would append ".npz" to a bare name
        np.savez(f, **arrays)
    return path


def load_params(path: str | Path) -> tuple[Params, Params | None, PPOConfig | None]:
    """(actor, critic or None, config or None) from a file `save_params` wrote."""
    nets: dict[str, Params] = {"actor": {}, "critic": {}}
    config = None
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            if key == "config_json":
                known = {f.name for f in fields(PPOConfig)}
                values = json.loads(str(data[key]))
                unknown = sorted(set(values) - known)
                if unknown:
                    raise ValueError(f"{path}: config_json has unknown fields {unknown}")
                config = PPOConfig(**values)
                continue
            parts = key.split("/")
            if len(parts) != 3 or parts[0] not in nets:
                raise ValueError(f"{path}: unexpected array {key!r} (expected actor/<layer>/<name>)")
            nets[parts[0]].setdefault(parts[1], {})[parts[2]] = data[key]
    if not nets["actor"]:
        raise ValueError(f"{path}: no actor parameters")
    return nets["actor"], (nets["critic"] or None), config


# ---------------------------------------------------------------------------------------
# Training


def _to_numpy(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: np.asarray(a), tree)


def _numeric(value: Any) -> float | None:
    """`value` as a finite float, or None (None, NaN, text, arrays...)."""
    if isinstance(value, bool | np.bool_):
        return float(value)
    if isinstance(value, int | float | np.integer | np.floating):
        v = float(value)
        return v if math.isfinite(v) else None
    return None


def _learner(config: PPOConfig, obs_dim: int, num_actions: int):
    """The networks, optimisers and the two compiled functions of the loop: `policy` (act
    and value a batch of observations) and `update` (GAE, then every epoch and minibatch)."""
    actor = Actor(num_actions, config.hidden_units, config.negative_slope)
    critic = Critic(config.hidden_units, config.negative_slope)

    def adam(lr: float) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=config.adam_eps))

    actor_tx, critic_tx = adam(config.actor_lr), adam(config.critic_lr)

    @jax.jit
    def policy(actor_params, critic_params, obs, key, t):
        # The step's key is derived inside: one dispatch per environment step, not two.
        logits = actor.apply({"params": actor_params}, obs)
        action = jax.random.categorical(jax.random.fold_in(key, t), logits)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
        return action, logp, critic.apply({"params": critic_params}, obs)

    @jax.jit
    def value(critic_params, obs):
        return critic.apply({"params": critic_params}, obs)

    def gae(rewards, values, dones, last_value):
        """Advantages by generalised advantage estimation, backwards in time; `dones[t]`
        says transition t ended its episode, so nothing after it flows back."""

        def back(carry, t):
            next_adv, next_value = carry
            reward, v, done = t
            live = 1.0 - done
            delta = reward + config.gamma * next_value * live - v
            adv = delta + config.gamma * config.gae_lambda * live * next_adv
            return (adv, v), adv

        _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True)
        return adv, adv + values

    def actor_loss(params, obs, actions, old_logp, adv):
        """The clipped surrogate (Floo Appendix A, Eq. 4) minus the entropy bonus."""
        logp_all = jax.nn.log_softmax(actor.apply({"params": params}, obs))
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=1)[:, 0]
        log_ratio = logp - old_logp
        ratio = jnp.exp(log_ratio)
        if config.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        clipped = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
        surrogate = jnp.minimum(ratio * adv, clipped * adv).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(axis=1).mean()
        stats = {
            "entropy": entropy,
            # Schulman's low-variance estimator of KL(old || new), as CleanRL reports it.
            "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
            "clip_fraction": (jnp.abs(ratio - 1.0) > config.clip_eps).mean(),
            "policy_loss": -surrogate,
        }
        return -surrogate - config.ent_coef * entropy, stats

    def critic_loss(params, obs, returns):
        return 0.5 * ((critic.apply({"params": params}, obs) - returns) ** 2).mean()

    @jax.jit
    def update(state, rollout, last_value, key):
        actor_params, critic_params, actor_opt, critic_opt = state
        obs, actions, logp, rewards, dones, values = rollout
        adv, returns = gae(rewards, values, dones, last_value)
        batch = obs.shape[0] * obs.shape[1]
        flat = (
            obs.reshape(batch, -1),
            actions.reshape(batch),
            logp.reshape(batch),
            adv.reshape(batch),
            returns.reshape(batch),
        )
        size = batch // config.num_minibatches

        def minibatch(state, idx):
            actor_params, critic_params, actor_opt, critic_opt = state
            o, a, lp, ad, ret = (x[idx] for x in flat)
            (_, stats), g_actor = jax.value_and_grad(actor_loss, has_aux=True)(actor_params, o, a, lp, ad)
            v_loss, g_critic = jax.value_and_grad(critic_loss)(critic_params, o, ret)
            step, actor_opt = actor_tx.update(g_actor, actor_opt, actor_params)
            actor_params = optax.apply_updates(actor_params, step)
            step, critic_opt = critic_tx.update(g_critic, critic_opt, critic_params)
            critic_params = optax.apply_updates(critic_params, step)
            return (actor_params, critic_params, actor_opt, critic_opt), {**stats, "value_loss": v_loss}

        def epoch(state, key):
            order = jax.random.permutation(key, batch)[: size * config.num_minibatches]
            return jax.lax.scan(minibatch, state, order.reshape(config.num_minibatches, size))

        state, stats = jax.lax.scan(epoch, state, jax.random.split(key, config.update_epochs))
        return state, jax.tree_util.tree_map(jnp.mean, stats)

    def init(key):
        k_actor, k_critic = jax.random.split(key)
        dummy = jnp.zeros((1, obs_dim), jnp.float32)
        actor_params = actor.init(k_actor, dummy)["params"]
        critic_params = critic.init(k_critic, dummy)["params"]
        return actor_params, critic_params, actor_tx.init(actor_params), critic_tx.init(critic_params)

    return init, policy, value, update


def train(
    make_env: Callable[[int], gym.Env],
    config: PPOConfig,
    total_steps: int,
    seed: int,
    num_envs: int | None = None,
    parallel: bool = False,
    on_update: Callable[[dict[str, Any]], bool | None] | None = None,
    ray_address: str | None = None,
) -> TrainResult:
    """Train an actor and a critic by PPO on `num_envs` (default `config.num_envs`)
    environments `make_env(i)`, for `total_steps` environment steps in all, rounded down
    to whole updates of `config.rollout_steps x num_envs` steps (at least one update).

    Environment i is reset with seed `seed + i` at the start; the rest of the run draws
    from `seed` too, so the same arguments give the same result. Observations must be a
    flat `Box` (the env normalises them: Floo §3.3 feeds normalised metrics), actions a
    `Discrete` space.

    After each update, one dict goes into `TrainResult.history` and to `on_update`; an
    `on_update` that returns False stops the training there (a time budget). The dict:
    `update`, `steps` (environment steps so far), `seconds` (since the start),
    `episodes` (that ended during the update), `mean_return` and `mean_length` (over
    those, NaN if none ended), `policy_loss`, `value_loss`, `entropy`, `approx_kl`,
    `clip_fraction` (means over the update's minibatches), and `info/<key>`: the mean
    over the ended episodes of each number the env put in the `info` of its last step
    (e.g. `info/mean_rct_ms`; values that are None or NaN are left out).
    """
    num_envs = config.num_envs if num_envs is None else num_envs
    config = replace(config, num_envs=num_envs)
    config.check()
    if not (isinstance(total_steps, int) and total_steps >= 1):
        raise ValueError(f"total_steps must be an integer >= 1, got {total_steps!r}")
    envs = make_vector_env(make_env, num_envs, parallel, ray_address)
    try:
        return _train(envs, config, total_steps, seed, on_update)
    finally:
        envs.close()


def _train(
    envs: gym.vector.VectorEnv,
    config: PPOConfig,
    total_steps: int,
    seed: int,
    on_update: Callable[[dict[str, Any]], bool | None] | None,
) -> TrainResult:
    start = time.perf_counter()
    obs_space, action_space = envs.single_observation_space, envs.single_action_space
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"PPO here needs a Discrete action space, the env has {action_space}")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"PPO here needs a flat Box observation space, the env has {obs_space}")
    obs_dim, num_actions, n, T = obs_space.shape[0], int(action_space.n), config.num_envs, config.rollout_steps

    init, policy, value, update = _learner(config, obs_dim, num_actions)
    key, init_key = jax.random.split(jax.random.PRNGKey(seed))
    state = init(init_key)
    if config.episode_reward_norm != "none":
        learner = (policy, value, update, state, key)
        return _train_episodic(envs, config, total_steps, seed, on_update, start, learner)

    buffers = {
        "obs": np.zeros((T, n, obs_dim), np.float32),
        "actions": np.zeros((T, n), np.int32),
        "logp": np.zeros((T, n), np.float32),
        "rewards": np.zeros((T, n), np.float32),
        "dones": np.zeros((T, n), np.float32),
        "values": np.zeros((T, n), np.float32),
    }
    obs, _ = envs.reset(seed=[seed + i for i in range(n)])
    episode_return, episode_length = np.zeros(n), np.zeros(n, np.int64)
    history: list[dict[str, Any]] = []
    steps = 0
    num_updates = max(1, total_steps // (T * n))
    for u in range(1, num_updates + 1):
        returns, lengths, infos_ended = [], [], {}
        key, rollout_key = jax.random.split(key)
        for t in range(T):
            action, logp, v = policy(state[0], state[1], jnp.asarray(obs, jnp.float32), rollout_key, np.int32(t))
            action = np.asarray(action)
            next_obs, reward, terminated, truncated, info = envs.step(action)
            reward = np.asarray(reward, np.float64)
            buffers["obs"][t], buffers["actions"][t] = obs, action
            buffers["logp"][t], buffers["values"][t] = np.asarray(logp), np.asarray(v)
            done = np.logical_or(terminated, truncated)
            episode_return += reward
            episode_length += 1
            learn_reward = reward.copy()
            if done.any():
                final_obs, final_info = info.get("final_obs"), info.get("final_info", {})
                cut = np.flatnonzero(np.logical_and(truncated, np.logical_not(terminated)))
                if len(cut):
                    # A time limit, not a failure: bootstrap with the value of where it stopped.
                    last = np.stack([np.asarray(final_obs[i], np.float32) for i in cut])
                    learn_reward[cut] += config.gamma * np.asarray(value(state[1], jnp.asarray(last)))
                for i in np.flatnonzero(done):
                    returns.append(float(episode_return[i]))
                    lengths.append(int(episode_length[i]))
                    _collect_ended(final_info, i, infos_ended)
                episode_return[done], episode_length[done] = 0.0, 0
            buffers["rewards"][t], buffers["dones"][t] = learn_reward, done
            obs = next_obs
            steps += n
        last_value = value(state[1], jnp.asarray(obs, jnp.float32))
        key, update_key = jax.random.split(key)
        rollout = tuple(jnp.asarray(buffers[k]) for k in ("obs", "actions", "logp", "rewards", "dones", "values"))
        state, stats = update(state, rollout, last_value, update_key)
        record = _update_record(u, steps, start, returns, lengths, stats, buffers["rewards"], infos_ended)
        history.append(record)
        if on_update is not None and on_update(record) is False:
            break  # the caller's budget (e.g. `gearbox learn floo --max-minutes`) is spent
    return _result(state, config, history, start)


def _result(state: Any, config: PPOConfig, history: list[dict[str, Any]], start: float) -> TrainResult:
    """The trained (actor, critic) as NumPy and how training went."""
    return TrainResult(
        actor_params=_to_numpy(state[0]),
        critic_params=_to_numpy(state[1]),
        config=config,
        history=history,
        seconds=time.perf_counter() - start,
    )


def _update_record(
    update: int,
    steps: int,
    start: float,
    returns: list[float],
    lengths: list[int],
    stats: dict[str, Any],
    rewards: np.ndarray,
    infos_ended: dict[str, list[float]],
) -> dict[str, Any]:
    """One update's line of the training history: progress, the episodes that ended since the
    last line, the learner's statistics and the rewards it learned from."""
    return {
        "update": update,
        "steps": steps,
        "seconds": time.perf_counter() - start,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)) if returns else math.nan,
        "mean_length": float(np.mean(lengths)) if lengths else math.nan,
        **{k: float(v) for k, v in stats.items()},
        **_reward_stats(rewards),
        **{f"info/{k}": float(np.mean(v)) for k, v in infos_ended.items()},
    }


def _reward_stats(rewards: np.ndarray) -> dict[str, float]:
    """The rewards an update learned from (after any normalisation and time-limit
    bootstrap): their mean, standard deviation and largest magnitude."""
    r = np.asarray(rewards, np.float64)
    return {"reward_mean": float(r.mean()), "reward_std": float(r.std()), "reward_abs_max": float(np.abs(r).max())}


def _collect_ended(final_info: dict[str, Any], i: int, infos_ended: dict[str, list[float]]) -> None:
    """Adds the numeric `final_info` entries of ended environment `i` to `infos_ended`."""
    for k, values in final_info.items():
        present = final_info.get(f"_{k}")
        if k.startswith("_") or present is None or not present[i]:
            continue
        number = _numeric(values[i])
        if number is not None:
            infos_ended.setdefault(k, []).append(number)


def _train_episodic(
    envs: gym.vector.VectorEnv,
    config: PPOConfig,
    total_steps: int,
    seed: int,
    on_update: Callable[[dict[str, Any]], bool | None] | None,
    start: float,
    learner: tuple[Any, ...],
) -> TrainResult:
    """`_train` with Floo §3.3's episode-level reward normalisation
    (`config.episode_reward_norm`, `normalize_episode_rewards`).

    An episode's rewards can be normalised only once it has ended, and Floo's episodes (about
    50 selection periods, their number varying with the workload) do not line up with the
    rollouts (64 steps). So each environment's transitions wait in a pending list until its
    episode ends; then that episode's rewards are normalised together (the time-limit
    bootstrap, `gamma * V(final observation)`, is added after, in the critic's normalised
    units) and its transitions join the environment's ready queue. An update runs whenever
    every environment has `rollout_steps` ready transitions, on the first `rollout_steps` of
    each (in order, so GAE sees whole episodes or their heads; a cut head is bootstrapped
    with the current critic's value of the next ready observation, which always exists).

    The price is a lag: a transition is learned from up to about one episode plus one
    rollout after it was collected, so the policy that acted (whose log-probability the
    clipped ratio uses) can be an update or two older than the one being updated; Floo's
    own agents (Appendix C) also send whole episodes to the central learner, which pushes
    the model for the next episode. The number of updates is `total_steps //
    (rollout_steps x envs)` as in `_train`; the environments run for as many more steps as
    the queues need (`steps` in the history counts every step taken). `mean_return` in the
    history stays the raw (unnormalised) episode return. `learner`: `_train`'s (policy,
    value, update, initial state, key)."""
    policy, value, update, state, key = learner
    obs_dim, n, T = envs.single_observation_space.shape[0], config.num_envs, config.rollout_steps

    # One transition: (obs, action, logp, value, learn reward, done).
    pending: list[list[list[Any]]] = [[] for _ in range(n)]
    ready: list[list[tuple[Any, ...]]] = [[] for _ in range(n)]
    obs, _ = envs.reset(seed=[seed + i for i in range(n)])
    episode_return, episode_length = np.zeros(n), np.zeros(n, np.int64)
    history: list[dict[str, Any]] = []
    steps, t, updates = 0, 0, 0
    num_updates = max(1, total_steps // (T * n))
    returns, lengths, infos_ended = [], [], {}
    key, rollout_key = jax.random.split(key)
    while updates < num_updates:
        if t == T:
            key, rollout_key = jax.random.split(key)
            t = 0
        action, logp, v = policy(state[0], state[1], jnp.asarray(obs, jnp.float32), rollout_key, np.int32(t))
        t += 1
        action, logp, v = np.asarray(action), np.asarray(logp), np.asarray(v)
        next_obs, reward, terminated, truncated, info = envs.step(action)
        reward = np.asarray(reward, np.float64)
        done = np.logical_or(terminated, truncated)
        episode_return += reward
        episode_length += 1
        steps += n
        for i in range(n):
            pending[i].append(
                [
                    np.asarray(obs[i], np.float32),
                    int(action[i]),
                    float(logp[i]),
                    float(v[i]),
                    float(reward[i]),
                    bool(done[i]),
                ]
            )
        if done.any():
            final_obs, final_info = info.get("final_obs"), info.get("final_info", {})
            for i in np.flatnonzero(done):
                episode = pending[i]
                for tr, r in zip(
                    episode,
                    normalize_episode_rewards([tr[4] for tr in episode], config.episode_reward_norm),
                    strict=True,
                ):
                    tr[4] = float(r)
                if truncated[i] and not terminated[i]:
                    last = jnp.asarray(np.asarray(final_obs[i], np.float32)[None, :])
                    episode[-1][4] += config.gamma * float(np.asarray(value(state[1], last))[0])
                ready[i].extend(tuple(tr) for tr in episode)
                pending[i] = []
                returns.append(float(episode_return[i]))
                lengths.append(int(episode_length[i]))
                _collect_ended(final_info, i, infos_ended)
            episode_return[done], episode_length[done] = 0.0, 0
        obs = next_obs
        while updates < num_updates and all(len(q) >= T for q in ready):
            batch = [q[:T] for q in ready]
            for i in range(n):
                ready[i] = ready[i][T:]
            # Field f of every transition as a (T, envs[, obs]) array.
            o, a, lp, vals, rew, dn = (
                np.stack([np.asarray([tr[f] for tr in b]) for b in batch], axis=1) for f in range(6)
            )
            # The value after each column's last transition: the next ready observation's
            # (there is one unless the last transition ended its episode, where it is unused).
            nxt = np.stack([q[0][0] if q else np.zeros(obs_dim, np.float32) for q in ready])
            last_value = value(state[1], jnp.asarray(nxt))
            key, update_key = jax.random.split(key)
            rollout = (
                jnp.asarray(o, jnp.float32),
                jnp.asarray(a, jnp.int32),
                jnp.asarray(lp, jnp.float32),
                jnp.asarray(rew, jnp.float32),
                jnp.asarray(dn, jnp.float32),
                jnp.asarray(vals, jnp.float32),
            )
            state, stats = update(state, rollout, last_value, update_key)
            updates += 1
            record = _update_record(updates, steps, start, returns, lengths, stats, rew, infos_ended)
            returns, lengths, infos_ended = [], [], {}
            history.append(record)
            if on_update is not None and on_update(record) is False:
                updates = num_updates  # the caller's budget is spent
    return _result(state, config, history, start)


# ---------------------------------------------------------------------------------------
# The classic-control check


def _cartpole(index: int) -> gym.Env:
    return gym.make("CartPole-v1")


def evaluate(
    make_env: Callable[[int], gym.Env],
    actor_params: Params,
    episodes: int,
    seed: int,
    negative_slope: float = PPOConfig.negative_slope,
) -> list[float]:
    """Undiscounted return of each of `episodes` greedy episodes (`act`, NumPy), on one
    env reset with seeds `seed`, `seed + 1`, ..."""
    env = make_env(0)
    out = []
    try:
        for e in range(episodes):
            obs, _ = env.reset(seed=seed + e)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(actor_params, obs, negative_slope=negative_slope))
                total += float(reward)
                done = terminated or truncated
            out.append(total)
    finally:
        env.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="PPO (JAX) self-check on gymnasium's CartPole-v1")
    ap.add_argument("--cartpole", action="store_true", help="train on CartPole-v1 (the only task here)")
    ap.add_argument("--steps", type=int, default=300_000, help="environment steps in all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--parallel", action="store_true", help="one process per environment")
    ap.add_argument(
        "--ray-address", default=None, help="one Ray actor per environment on this cluster ('local': start one)"
    )
    ap.add_argument("--save", type=Path, default=None, help="write the parameters to this .npz")
    args = ap.parse_args(argv)
    if not args.cartpole:
        ap.error("nothing to do: give --cartpole")

    def report(r: dict[str, Any]) -> None:
        if r["update"] % 25 == 0:
            print(
                f"update {r['update']:4d}  steps {r['steps']:7d}  {r['seconds']:6.1f} s  "
                f"return {r['mean_return']:6.1f}  length {r['mean_length']:6.1f}  "
                f"entropy {r['entropy']:.3f}  kl {r['approx_kl']:.4f}",
                flush=True,
            )

    result = train(
        _cartpole,
        PPOConfig(),
        args.steps,
        args.seed,
        num_envs=args.num_envs,
        parallel=args.parallel,
        on_update=report,
        ray_address=args.ray_address,
    )
    recent = [r["mean_return"] for r in result.history[-10:] if not math.isnan(r["mean_return"])]
    greedy = evaluate(_cartpole, result.actor_params, 20, seed=10_000, negative_slope=result.config.negative_slope)
    steps = result.history[-1]["steps"]
    print(
        f"CartPole-v1: {steps} steps, {len(result.history)} updates, {result.seconds:.1f} s; "
        f"mean training return over the last 10 updates {np.mean(recent):.1f}; "
        f"greedy policy over 20 episodes: mean {np.mean(greedy):.1f}, min {np.min(greedy):.0f} (500 is the cap)"
    )
    if args.save is not None:
        print(f"saved {result.save(args.save)}")


if __name__ == "__main__":
    main()
