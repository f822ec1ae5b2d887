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
* **Networks** (`A2CConfig.network`). `"mlp"`: the PPO file's actor and critic
  (`gearbox.floo.ppo.Actor`, `Critic`: one hidden layer, Leaky ReLU) over the flat
  observation, the RTT history being 8 of each path's inputs, with `hidden_units` = 128,
  the width of SAILfish's merged layer. `"conv"`: SAILfish §5.1.2 as written, after
  Pensieve: a 1-D convolution (`conv_filters` filters of `conv_kernel` samples, no
  padding, Leaky ReLU) over each path's recent RTTs (`conv_inputs`: the columns of each
  path's history, oldest first), its outputs flattened and merged with the other inputs
  into the 128-unit layer (`ConvActor`, `ConvCritic`: actor and critic have the same
  structure, each its own weights). One convolution serves every path (its weights are
  shared), since an RTT series means the same on either path; Pensieve gives each of its
  input series its own. Pensieve's 128 filters are not used: the merged layer's inputs
  (paths x positions x filters) set the decision's cost in Rust, and 8 filters keep it
  near the issue's 5 µs (docs/sailfish.md "1-D convolution against the MLP").
* **Export of the convolution** (`dense_layers`). The data plane evaluates dense networks
  (`gearbox-policy`, format `gearbox-mlp`), and a convolution without padding is a dense
  layer whose weights are the filter taps placed at each position and zero elsewhere. The
  inputs that bypass the convolution must reach the merged layer unchanged through that
  layer's Leaky ReLU: each goes through two units, +x and -x, since
  `leaky_relu(x) - leaky_relu(-x) = (1 + slope) x` for every x, so the merged layer takes
  its weight divided by (1 + slope) from the first and the negated weight from the second.
  The exported actor is then three dense layers, exactly the trained function (up to
  rounding), and every consumer of the format (the Rust gear, `predict_json`, the
  benchmarks) runs it unchanged. Rejected: a convolution layer in `gearbox-policy`, which
  would save the first layer's zero weights (~4k of ~20k multiply-adds) but add a second
  layer kind, its file format and its own test vectors to the data plane.

Rollouts and evaluation run without JAX: `gearbox.floo.ppo.act` (NumPy) on the actor's
dense layers (`dense_layers`), the rule the exported file follows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gearbox.floo.ppo import Actor, Critic, Params, act, save_params

NETWORKS = ("mlp", "conv")
# A network written as dense layers, input first: (kernel (inputs, units), bias (units,)).
DenseLayers = list[tuple[np.ndarray, np.ndarray]]


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
    # The network (module docs): "mlp" (flat input) or "conv" (SAILfish §5.1.2: a 1-D
    # convolution over each sequence of `conv_inputs`, e.g. each path's RTT history, oldest
    # first, merged with the other inputs into the hidden layer).
    network: str = "mlp"
    conv_inputs: tuple[tuple[int, ...], ...] = ()
    conv_filters: int = 8
    conv_kernel: int = 4  # Pensieve's filter size

    def check(self, obs_dim: int | None = None) -> None:
        """Refuse values A2C cannot run with, naming the field (`obs_dim`: also check the
        convolution's inputs against an observation of that size)."""
        for name in ("hidden_units", "episodes_per_update", "conv_filters", "conv_kernel"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"A2CConfig.{name} must be an integer >= 1, got {value!r}")
        if self.network not in NETWORKS:
            raise ValueError(f"A2CConfig.network must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.network == "conv":
            seqs = self.conv_inputs
            if not seqs or not all(isinstance(q, tuple | list) and q for q in seqs):
                raise ValueError("A2CConfig.conv_inputs must name the inputs of at least one sequence")
            if len({len(q) for q in seqs}) != 1 or len(seqs[0]) < self.conv_kernel:
                raise ValueError(
                    f"A2CConfig.conv_inputs: every sequence must have the same length, at least conv_kernel "
                    f"({self.conv_kernel}); got lengths {[len(q) for q in seqs]}"
                )
            flat = [j for q in seqs for j in q]
            if not all(isinstance(j, int) and j >= 0 for j in flat) or len(set(flat)) != len(flat):
                raise ValueError(f"A2CConfig.conv_inputs must be distinct input indices >= 0, got {seqs!r}")
            if obs_dim is not None and max(flat) >= obs_dim:
                raise ValueError(f"A2CConfig.conv_inputs: input {max(flat)} is outside the {obs_dim}-value observation")
            if not 1.0 + self.negative_slope > 0.0:
                raise ValueError(
                    f"A2CConfig.negative_slope must be > -1 with the conv network, got {self.negative_slope}"
                )
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
    obs_dim: int = 0

    def actor_layers(self) -> DenseLayers:
        """The actor as dense layers: what is exported and what `act` runs."""
        return dense_layers(self.actor_params, self.config, self.obs_dim)

    def act(self, obs: np.ndarray, greedy: bool = True, rng: np.random.Generator | None = None) -> Any:
        return act(self.actor_layers(), obs, greedy, negative_slope=self.config.negative_slope, rng=rng)

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


# ---------------------------------------------------------------------------------------
# SAILfish §5.1.2's networks: a 1-D convolution over each path's RTT history


def _other_inputs(conv_inputs: tuple[tuple[int, ...], ...], obs_dim: int) -> list[int]:
    """The inputs that are not in a sequence, in order: they bypass the convolution."""
    in_sequences = {j for q in conv_inputs for j in q}
    return [j for j in range(obs_dim) if j not in in_sequences]


def _conv_hidden(x: jax.Array, config: A2CConfig) -> jax.Array:
    """The body both networks share in structure (called inside their `nn.compact`):
    `rtt_conv` over each sequence (one set of filters for all), Leaky ReLU, flattened as
    (sequence, position, filter), then the other inputs, into `hidden` and its Leaky ReLU."""
    seqs = np.asarray(config.conv_inputs, np.int32)
    n_seq, length = seqs.shape
    windows = x[:, seqs.reshape(-1)].reshape(x.shape[0] * n_seq, length, 1)
    conv = nn.Conv(
        config.conv_filters,
        (config.conv_kernel,),
        padding="VALID",
        kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
        name="rtt_conv",
    )
    c = nn.leaky_relu(conv(windows), negative_slope=config.negative_slope).reshape(x.shape[0], -1)
    rest = x[:, np.asarray(_other_inputs(config.conv_inputs, x.shape[1]), np.int32)]
    h = nn.Dense(config.hidden_units, kernel_init=nn.initializers.orthogonal(math.sqrt(2)), name="hidden")(
        jnp.concatenate([c, rest], axis=1)
    )
    return nn.leaky_relu(h, negative_slope=config.negative_slope)


class ConvActor(nn.Module):
    """State -> one logit per path: the convolutional body, then Dense(actions) (initialised
    small, as the PPO file's actor, so the first page loads explore every path)."""

    num_actions: int
    config: A2CConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = _conv_hidden(x, self.config)
        return nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01), name="logits")(h)


class ConvCritic(nn.Module):
    """State -> V(state): the convolutional body (its own weights), then Dense(1)."""

    config: A2CConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = _conv_hidden(x, self.config)
        return nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), name="value")(h)[..., 0]


def dense_layers(actor_params: Params, config: A2CConfig, obs_dim: int) -> DenseLayers:
    """The actor as dense layers in float64 (module docs, "Export of the convolution"):
    for "mlp" its two layers as they are; for "conv" three, computing the same function.

    Layer 1 (obs_dim -> S*P*F + 2*R units): unit (s, p, f) has filter f's taps on the
    inputs `conv_inputs[s][p:p + K]` and its bias; the R other inputs get a +1 and a -1
    unit each. Layer 2 is `hidden`, its rows for the other inputs split over their two
    units as +w / (1 + slope) and -w / (1 + slope). Layer 3 is `logits`."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    hidden, logits = actor_params["hidden"], actor_params["logits"]
    if config.network == "mlp":
        return [(f64(hidden["kernel"]), f64(hidden["bias"])), (f64(logits["kernel"]), f64(logits["bias"]))]
    config.check(obs_dim)
    seqs = np.asarray(config.conv_inputs)
    n_seq, length = seqs.shape
    taps, f = f64(actor_params["rtt_conv"]["kernel"]), config.conv_filters
    if taps.shape != (config.conv_kernel, 1, f):
        raise ValueError(f"rtt_conv kernel is {taps.shape}, the config says {(config.conv_kernel, 1, f)}")
    positions = length - config.conv_kernel + 1
    n_conv = n_seq * positions * f
    other = _other_inputs(config.conv_inputs, obs_dim)
    wh = f64(hidden["kernel"])
    if wh.shape[0] != n_conv + len(other):
        raise ValueError(
            f"hidden takes {wh.shape[0]} inputs, the convolution and the others give {n_conv + len(other)}"
        )
    w1 = np.zeros((obs_dim, n_conv + 2 * len(other)))
    b1 = np.zeros(n_conv + 2 * len(other))
    for s_ in range(n_seq):
        for p in range(positions):
            unit = (s_ * positions + p) * f
            for k in range(config.conv_kernel):
                w1[seqs[s_, p + k], unit : unit + f] = taps[k, 0, :]
            b1[unit : unit + f] = f64(actor_params["rtt_conv"]["bias"])
    for r, j in enumerate(other):
        w1[j, n_conv + 2 * r] = 1.0
        w1[j, n_conv + 2 * r + 1] = -1.0
    w2 = np.zeros((n_conv + 2 * len(other), wh.shape[1]))
    w2[:n_conv] = wh[:n_conv]
    w2[n_conv::2] = wh[n_conv:] / (1.0 + config.negative_slope)
    w2[n_conv + 1 :: 2] = -wh[n_conv:] / (1.0 + config.negative_slope)
    return [(w1, b1), (w2, f64(hidden["bias"])), (f64(logits["kernel"]), f64(logits["bias"]))]


def networks(config: A2CConfig, num_actions: int) -> tuple[nn.Module, nn.Module]:
    """(actor, critic) flax modules of `config.network`."""
    if config.network == "conv":
        return ConvActor(num_actions, config), ConvCritic(config)
    return Actor(num_actions, config.hidden_units, config.negative_slope), Critic(
        config.hidden_units, config.negative_slope
    )


def _learner(config: A2CConfig, obs_dim: int, num_actions: int):
    actor, critic = networks(config, num_actions)

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
    config.check(env.observation_space.shape[0] if isinstance(env.observation_space, gym.spaces.Box) else None)
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
        actor_np = dense_layers(jax.tree_util.tree_map(np.asarray, state[0]), config, obs_space.shape[0])
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
    return A2CResult(to_np(state[0]), to_np(state[1]), config, history, time.perf_counter() - start, obs_space.shape[0])


# ---------------------------------------------------------------------------------------
# The shipped test vector of the convolutional actor

VECTOR_SET = "j_sailfish_conv_actor"


def write_test_vector(out_dir: Path, seed: int = 20261126, rows: int = 200, hidden_units: int = 32) -> list[Path]:
    """A `ConvActor` for two paths of SAILfish's observation (`gearbox.sim.paths`: 17
    inputs per path, 8 of them its RTT history, and 2 for the stream) with random weights
    (the merged layer narrowed to `hidden_units` to keep the file small; the structure is
    the trained one's), exported as dense layers (`dense_layers`), and JAX's own float32
    forward pass of the flax module on `rows` rows: values in [-1, 4] (the env's lie in
    [0, 10]; negatives exercise the +x / -x units of the inputs that bypass the
    convolution), some exactly 0, ~10% missing (NaN, which the file's `impute` makes 0;
    JAX is given 0). `cargo test -p gearbox-policy --test vectors` compares the Rust
    forward pass of the file with these outputs."""
    from gearbox.floo.export import export_actor, write_vector_cases
    from gearbox.sailfish.train import rtt_history_inputs
    from gearbox.sim.paths import feature_names

    names = feature_names(2)
    config = A2CConfig(hidden_units=hidden_units, network="conv", conv_inputs=rtt_history_inputs(names, 2))
    actor = ConvActor(2, config)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 4.0, size=(rows, len(names))).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = 0.0
    x[rng.random(x.shape) < 0.1] = np.nan
    x[0, :] = np.nan  # every input missing
    params = actor.init(jax.random.PRNGKey(seed), jnp.zeros((1, len(names))))["params"]
    # Weights large enough that the logits spread (a fresh actor's output layer is ~0.01),
    # which would hide a wrong tap, position or sign.
    params = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), params)
    params["logits"]["kernel"] = (rng.normal(size=params["logits"]["kernel"].shape) / 4).astype(np.float32)
    params["rtt_conv"]["bias"] = rng.normal(scale=0.5, size=config.conv_filters).astype(np.float32)
    zero_filled = np.nan_to_num(x, nan=0.0)
    # Centre the logits over these rows, so that either path is the greedy choice of some.
    logits = np.asarray(actor.apply({"params": params}, jnp.asarray(zero_filled)), np.float32)
    params["logits"]["bias"] = (params["logits"]["bias"] - logits.mean(axis=0)).astype(np.float32)
    logits = np.asarray(actor.apply({"params": params}, jnp.asarray(zero_filled)), np.float32)
    probabilities = np.asarray(jax.nn.softmax(jnp.asarray(logits)), np.float32)
    info = {"purpose": "test vector: random weights, not a trained policy", "seed": seed, "jax": jax.__version__}
    classes = ["path0", "path1"]
    model = export_actor(
        dense_layers(params, config, len(names)),
        names,
        out_dir,
        classes,
        info,
        negative_slope=config.negative_slope,
        model_version=f"test-vectors-{VECTOR_SET}-1",
        name=VECTOR_SET,
    )
    return write_vector_cases(Path(out_dir), VECTOR_SET, names, x, logits, probabilities, model)


def main(argv: list[str] | None = None) -> None:
    from gearbox.floo.export import vector_main

    vector_main(
        argv, "SAILfish A2C: write the convolutional actor's shipped test vector", VECTOR_SET, write_test_vector
    )


if __name__ == "__main__":
    main()
