"""Parallel rollouts (gearbox.sim.vector): the same environments stepped in this process,
in local processes and as actors of a Ray cluster that this test starts (`ray start
--head` on a free loopback port, stopped at the end) give the same transitions, and PPO
trains the same parameters on Ray as in this process."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

# Token authentication with a token of this test run's own, for the head this test starts
# and for this process alike, set before Ray is imported (Ray reads the mode when it is
# imported). With the mode unset, Ray turns token authentication on wherever
# ~/.ray/auth_token exists (any `ray.init()` writes one), and a head and a driver that decide
# differently refuse each other ("InvalidAuthToken").
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
ray = pytest.importorskip("ray")

from gearbox.sim.vector import make_vector_env, registered  # noqa: E402

CARTPOLE = functools.partial(registered, env_id="CartPole-v1", max_episode_steps=30)
CCA = functools.partial(registered, env_id="gearbox/CcaSelection-v0", period_s=6.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A one-node Ray cluster of this machine's Python, its address; stopped (the process
    group `ray start --block` leads) whatever the tests did."""
    port = _free_port()
    # Ray's socket paths must stay short (AF_UNIX, 107 bytes): a short temporary folder.
    temp = Path(tempfile.mkdtemp(prefix="gbray", dir="/tmp"))
    ray_bin = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    try:
        for _ in range(600):  # the GCS port opens within seconds; bounded at ~2 minutes
            if head.poll() is not None:
                pytest.fail(f"ray start exited with {head.returncode}: {head.stdout.read() if head.stdout else ''}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"Ray's head did not open port {port}")
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        # SIGINT: `ray start --block` stops every process it started and exits (~1 s);
        # on SIGTERM it lingers.
        os.killpg(head.pid, signal.SIGINT)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _rollout(envs: gym.vector.VectorEnv, steps: int, seed: int) -> list[tuple]:
    """Observations, rewards, ends and final observations of `steps` steps of actions that
    depend on the step and the environment, from `reset(seed=seed)`."""
    out = []
    try:
        obs, _ = envs.reset(seed=seed)
        out.append((obs,))
        n = envs.num_envs
        for t in range(steps):
            actions = np.array([(t + i) % envs.single_action_space.n for i in range(n)])
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            final = infos.get("final_obs")
            finals = [final[i] if infos["_final_obs"][i] else None for i in range(n)] if final is not None else []
            out.append((obs, rewards, terminated, truncated, finals))
    finally:
        envs.close()
    return out


def _assert_same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, list):
                assert len(u) == len(v)
                for p, q in zip(u, v, strict=True):
                    assert (p is None) == (q is None)
                    if p is not None:
                        np.testing.assert_array_equal(p, q)
            else:
                np.testing.assert_array_equal(u, v)


def test_ray_local_processes_and_this_process_give_the_same_transitions(ray_cluster: str) -> None:
    here = _rollout(make_vector_env(CARTPOLE, 3), 70, seed=5)
    ends = sum(int(np.sum(s[2] | s[3])) for s in here[1:])
    assert ends >= 6, "episodes of at most 30 steps end (and reset) inside 70 steps"
    _assert_same(here, _rollout(make_vector_env(CARTPOLE, 3, ray_address=ray_cluster), 70, seed=5))
    _assert_same(here, _rollout(make_vector_env(CARTPOLE, 3, parallel=True), 70, seed=5))
    # The simulator's own environment in Ray's worker processes: same seeds, same periods.
    cca_here = _rollout(make_vector_env(CCA, 2), 4, seed=11)
    _assert_same(cca_here, _rollout(make_vector_env(CCA, 2, ray_address=ray_cluster), 4, seed=11))


def test_ppo_trains_the_same_parameters_on_ray(ray_cluster: str) -> None:
    from gearbox.floo.ppo import PPOConfig, train

    cfg = PPOConfig(rollout_steps=64, num_minibatches=2, update_epochs=2)
    here = train(CARTPOLE, cfg, total_steps=256, seed=7, num_envs=2)
    on_ray = train(CARTPOLE, cfg, total_steps=256, seed=7, num_envs=2, ray_address=ray_cluster)
    for a, b in zip(here.history, on_ray.history, strict=True):
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    np.testing.assert_array_equal(here.actor_params["hidden"]["kernel"], on_ray.actor_params["hidden"]["kernel"])


def test_bad_choices_are_named() -> None:
    with pytest.raises(ValueError, match="not both"):
        make_vector_env(CARTPOLE, 2, parallel=True, ray_address="local")
    with pytest.raises(ValueError, match="must pickle"):
        make_vector_env(lambda i: gym.make("CartPole-v1"), 2, ray_address="local")
    with pytest.raises(ValueError, match="num_envs"):
        make_vector_env(CARTPOLE, 0)
