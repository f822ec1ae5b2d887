"""Parallel rollouts: many simulator environments stepped together, in this process, in
local processes, or on a Ray cluster (docs/sim.md, "Parallel rollouts").

Floo trained its selector over episodes run side by side on ten emulated testbeds (Floo
§4.3.1); here the episodes are simulator runs, and a learner steps `num_envs` of them as
one gymnasium vector environment. `make_vector_env` picks where they run:

* in this process, one after the other (`SyncVectorEnv`), the default;
* one local process each (`AsyncVectorEnv`, started with "spawn": forking a process that
  runs JAX can deadlock), `parallel=True`;
* one Ray actor each (`RayVectorEnv` below), `ray_address="..."`: the address of a running
  Ray cluster (`ray start --head` prints it; "auto" finds the one on this machine), or
  "local" for a Ray instance started for this run. Each node must have gearbox installed
  (the actors build their environment there from `make_env`).

Whatever the choice, environment i is `make_env(i)`, reset with the seed the learner
gives it, and reset in the same step its episode ends (gymnasium's
`AutoresetMode.SAME_STEP`, which `gearbox.floo.ppo` relies on): the same seeds give the
same transitions on all three, which `python/tests/test_sim_vector.py` checks.

Ray is used through its own API (an actor per environment, `ray.get` on a step's
results); nothing here schedules work across machines by itself.
"""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

AUTORESET = gym.vector.AutoresetMode.SAME_STEP


def make_vector_env(
    make_env: Callable[[int], gym.Env],
    num_envs: int,
    parallel: bool = False,
    ray_address: str | None = None,
) -> gym.vector.VectorEnv:
    """`num_envs` environments `make_env(0)`, `make_env(1)`, ... stepped together, each
    reset in the step it ends. `parallel`: one local process each; `ray_address`: one Ray
    actor each on that cluster (see the module's doc). With either, `make_env` must pickle
    (a module-level function or a `functools.partial` of one): a ValueError says so."""
    if not (isinstance(num_envs, int) and num_envs >= 1):
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    if parallel and ray_address is not None:
        raise ValueError("choose local processes (parallel=True) or a Ray cluster (ray_address), not both")
    if parallel or ray_address is not None:
        where = "a new process" if parallel else "a Ray actor"
        try:
            pickle.dumps(make_env)
        except Exception as e:  # lambdas, local functions, bound objects that do not pickle
            raise ValueError(
                f"each environment runs in {where}, so make_env must pickle "
                f"(a module-level function or a functools.partial of one): {e}"
            ) from e
    fns = [functools.partial(make_env, i) for i in range(num_envs)]
    if ray_address is not None:
        return RayVectorEnv(fns, ray_address)
    if parallel:
        return gym.vector.AsyncVectorEnv(fns, context="spawn", autoreset_mode=AUTORESET)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=AUTORESET)


def registered(index: int, env_id: str, **kwargs: Any) -> gym.Env:
    """`make_env` for a registered environment: `functools.partial(registered,
    env_id="gearbox/CcaSelection-v0", period_s=6.0)` makes environment `index` with
    `gym.make(env_id, **kwargs)` (the index only tells the environments apart; seeds come
    with `reset`). A partial of it pickles, so it runs in processes and on Ray."""
    import gearbox.sim  # noqa: F401  (registers gearbox's environments where this runs)

    return gym.make(env_id, **kwargs)


class _EnvWorker:
    """One environment inside a Ray actor. `step` resets an ended episode at once and hands
    back its last observation and info beside the new episode's first (SAME_STEP)."""

    def __init__(self, make_env: Callable[[], gym.Env]):
        self.env = make_env()

    def spaces(self) -> tuple[gym.Space, gym.Space, dict[str, Any]]:
        return self.env.observation_space, self.env.action_space, dict(self.env.metadata)

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any], tuple[Any, dict[str, Any]] | None]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        final = None
        if terminated or truncated:
            final = (obs, info)
            obs, info = self.env.reset()
        return obs, float(reward), bool(terminated), bool(truncated), info, final

    def close(self) -> None:
        self.env.close()


def _connect(address: str) -> None:
    """Join the Ray cluster at `address` ("local": start one for this process), once per
    process; a cluster already joined is kept. A RuntimeError names the address when Ray
    cannot reach it."""
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": False}
    if address == "local":  # a cluster of this machine alone, on loopback
        kwargs.update(include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise RuntimeError(f"Ray cluster at {address!r}: {e}") from e


class RayVectorEnv(gym.vector.VectorEnv):
    """Environments on a Ray cluster, one actor each, stepped together: every actor gets its
    action at once and the step waits for all of them. Batches observations and infos as
    `SyncVectorEnv` does (the same arrays for the same transitions); SAME_STEP autoreset
    only, the mode the learners use."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], address: str):
        import ray

        _connect(address)
        worker = ray.remote(_EnvWorker)  # Ray's default for actors: placed on a CPU, holding none
        self._ray = ray
        self._workers = [worker.remote(fn) for fn in env_fns]
        self._closed = False
        self.num_envs = len(self._workers)
        obs_space, action_space, metadata = ray.get(self._workers[0].spaces.remote())
        self.single_observation_space, self.single_action_space = obs_space, action_space
        self.observation_space = batch_space(obs_space, self.num_envs)
        self.action_space = batch_space(action_space, self.num_envs)
        self.metadata = {**metadata, "autoreset_mode": AUTORESET}
        self._observations = create_empty_array(obs_space, n=self.num_envs, fn=np.zeros)

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for {self.num_envs} environments")
        results = self._ray.get([w.reset.remote(s, options) for w, s in zip(self._workers, seeds, strict=True)])
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, [obs for obs, _ in results], self._observations)
        return copy.deepcopy(self._observations), infos

    def step(self, actions: Any):
        calls = [w.step.remote(a) for w, a in zip(self._workers, iterate(self.action_space, actions), strict=True)]
        results = self._ray.get(calls)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for i, (_, reward, terminated, truncated, info, final) in enumerate(results):
            rewards[i], terminations[i], truncations[i] = reward, terminated, truncated
            if final is not None:
                infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, [r[0] for r in results], self._observations)
        return copy.deepcopy(self._observations), rewards, terminations, truncations, infos

    def close_extras(self, **kwargs: Any) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._ray.get([w.close.remote() for w in self._workers])
        finally:
            for w in self._workers:
                self._ray.kill(w)


def bench_main(argv: list[str] | None = None) -> int:
    """`python -m gearbox.sim.vector`: environment steps per wall second of
    `gearbox/CcaSelection-v0` (Floo's 12 s selection period) stepped in this process, in
    local processes and on Ray, with random actions. A benchmark: it prints figures."""
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m gearbox.sim.vector", description=bench_main.__doc__)
    p.add_argument("--envs", type=int, default=2, help="environments stepped together")
    p.add_argument("--steps", type=int, default=200, help="vector steps per mode (after one reset)")
    p.add_argument("--period-s", type=float, default=12.0, help="the selection period")
    p.add_argument("--ray-address", default="local", help="the Ray cluster ('local': start one)")
    p.add_argument("--modes", default="here,processes,ray", help="comma-separated: here, processes, ray")
    args = p.parse_args(argv)
    if args.envs < 1 or args.steps < 1:
        p.error("--envs and --steps must be >= 1")
    make = functools.partial(registered, env_id="gearbox/CcaSelection-v0", period_s=args.period_s)
    rng = np.random.default_rng(0)
    for mode in args.modes.split(","):
        if mode not in ("here", "processes", "ray"):
            p.error(f"--modes: unknown mode {mode!r} (here, processes, ray)")
        t0 = time.perf_counter()
        envs = make_vector_env(
            make, args.envs, parallel=mode == "processes", ray_address=args.ray_address if mode == "ray" else None
        )
        try:
            envs.reset(seed=1)
            t1 = time.perf_counter()
            ends = 0
            for _ in range(args.steps):
                actions = rng.integers(envs.single_action_space.n, size=args.envs)
                _, _, terminated, truncated, _ = envs.step(actions)
                ends += int(np.sum(terminated | truncated))
            t2 = time.perf_counter()
        finally:
            envs.close()
        steps = args.steps * args.envs
        print(
            f"{mode:9s} {args.envs} envs: {steps} steps ({ends} episodes ended) in {t2 - t1:.2f} s, "
            f"{steps / (t2 - t1):.0f} steps/s; start-up and first reset {t1 - t0:.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(bench_main())
