"""`gearbox learn floo`: Floo's selection policy trained by PPO in the simulator (Floo §3.3,
§4.3, Appendix C-D), exported as a `gearbox-mlp` policy the edge evaluates.

Each episode is one simulated connection (`gearbox/CcaSelection-v0`): `--episode-s` of the
`app` workload (Floo §4.3.1: 10-minute episodes, a new application trace each) over one of
the training scenarios (`gearbox.floo.scenarios.training_set`: real-world-like traces
plus WSP-sampled Table 4 parameters), the controller chosen every selection period among
Cubic, BBR, Copa and Westwood+, switched with full state migration (`--switch`), every
connection starting on `--start-cc`. The reward is `--reward baseline` by default: the
period's requests' mean RCT when the episode runs on `--baseline-cc` alone over their mean
RCT under the policy, in log; Floo §3.3's ln(previous mean RCT / mean RCT) is `--reward
gradient` (docs/floo.md says why it was replaced); `--switch-cost C` (gearbox's addition, not
Floo's) subtracts C from the reward of a period whose action switched the running controller.
Rollouts run in `--envs` local processes (Floo Appendix C runs ten agent/server/client sets;
here, one per core), with `--in-process` one after another in the learner's process (the
same policy, one core), or with `--ray-address` as `--envs` Ray actors on that cluster
(`gearbox.sim.vector`).

Output in `--out` (default `models/floo`): `policy.json` + `policy.meta.json` (the actor,
the sidecar naming the Monitor's features and the four controllers), `ppo.npz` (actor and
critic, to resume or inspect), `scenarios.json` (the training scenarios: the sidecar's
training-data digest), `history.json` (one entry per PPO update) and `training.png` (mean
episode reward and mean RCT against steps).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from gearbox.floo.scenarios import training_set


def make_env(
    index: int,
    configs: list[str],
    period_s: float,
    mode: str,
    reward: str = "gradient",
    baseline_cca: str = "copa",
    start_cca: str | None = None,
    switch_cost: float = 0.0,
):
    """Environment `index` of the rollouts (module level: rollout processes are spawned,
    so the factory must pickle)."""
    from gearbox.sim.envs import CcaSelectionEnv

    return CcaSelectionEnv(
        scenarios=configs,
        period_s=period_s,
        mode=mode,
        reward=reward,
        baseline_cca=baseline_cca,
        start_cca=start_cca,
        switch_cost=switch_cost,
    )


def plot(history: list[dict], out: Path) -> Path | None:
    """Mean episode reward and mean RCT against environment steps."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [h for h in history if math.isfinite(h.get("mean_return", math.nan))]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    steps = [h["steps"] for h in rows]
    ax.plot(steps, [h["mean_return"] for h in rows], color="tab:blue")
    ax.set_xlabel("environment steps (selection periods)")
    ax.set_ylabel("mean episode reward", color="tab:blue")
    rct = [(h["steps"], h.get("info/episode_mean_rct_ms")) for h in rows]
    rct = [(s, r) for s, r in rct if r is not None and math.isfinite(r)]
    if rct:
        ax2 = ax.twinx()
        ax2.plot([s for s, _ in rct], [r for _, r in rct], color="tab:red")
        ax2.set_ylabel("mean RCT of the episodes (ms)", color="tab:red")
    ax.set_title("Floo PPO training in the simulator")
    fig.tight_layout()
    path = out / "training.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gearbox learn floo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="models/floo", help="where the policy goes")
    p.add_argument("--steps", type=int, default=60_000, help="environment steps (selection periods) in all")
    p.add_argument("--max-minutes", type=float, default=30.0, help="stop after the update that passes this")
    p.add_argument("--scenarios", type=int, default=200, help="training scenarios (WSP points x trace families)")
    p.add_argument("--episode-s", type=float, default=600.0, help="requests sent per episode (Floo: 10 minutes)")
    p.add_argument("--period-s", type=float, default=12.0, help="the selection period SP")
    p.add_argument("--workload", default="app", help="the application traces' workload")
    p.add_argument("--envs", type=int, default=os.cpu_count() or 1, help="rollout environments (one process each)")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="step the --envs environments one after another in the learner's process instead of one process "
        "each: the same policy, on one core (for a machine that is busy with other work)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="run the --envs environments as Ray actors on this cluster ('auto': the one on this machine, "
        "'local': start one)",
    )
    p.add_argument("--rollout-steps", type=int, default=64, help="steps per environment between updates")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--reward",
        choices=("gradient", "level", "baseline"),
        default="baseline",
        help="gradient: Floo's ln(previous / current mean RCT); level: ln(1 s / current mean RCT); baseline: "
        "ln(the period's requests' mean RCT under --baseline-cc in a reference run / under the policy) (docs/floo.md)",
    )
    p.add_argument("--baseline-cc", default="copa", help="the reference run's static controller (--reward baseline)")
    p.add_argument(
        "--start-cc", default="copa", help="the controller each connection starts on (the edge's --cc; docs/floo.md)"
    )
    p.add_argument(
        "--switch",
        choices=("full", "part"),
        default="full",
        help="how the rollouts switch: full (Floo) or part (P-Floo) migration (docs/floo.md)",
    )
    p.add_argument(
        "--ent-coef",
        type=float,
        default=0.1,
        help="PPO's entropy bonus (0.1: the shipped policy's; with CleanRL's 0.01 it collapsed to Copa, docs/floo.md)",
    )
    p.add_argument(
        "--episode-reward-norm",
        choices=("none", "std", "zscore"),  # ppo.EPISODE_REWARD_NORMS (ppo loads JAX: imported when training starts)
        default="none",
        help="Floo §3.3's episode-level reward normalisation: each finished episode's rewards divided by their "
        "standard deviation (std) or standardised (zscore) before PPO learns from them (gearbox.floo.ppo."
        "normalize_episode_rewards; docs/floo.md)",
    )
    p.add_argument(
        "--switch-cost",
        type=float,
        default=0.0,
        help="subtracted from a period's reward when the policy switches the running controller (0: none, "
        "Floo's reward; gearbox's addition, not Floo §3.3's; docs/floo.md \"Switching cost\")",
    )
    p.add_argument("--actor-lr", type=float, default=None, help="the actor's learning rate (default: Floo's 1e-4)")
    p.add_argument("--critic-lr", type=float, default=None, help="the critic's learning rate (default: Floo's 2e-4)")
    args = p.parse_args(argv)
    for name in ("steps", "scenarios", "envs", "rollout_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("baseline_cc", "start_cc"):
        value = getattr(args, name)
        if value not in ("cubic", "bbr", "copa", "westwood"):
            p.error(f"--{name.replace('_', '-')} must be one of cubic, bbr, copa, westwood, got {value!r}")
    if not (math.isfinite(args.switch_cost) and args.switch_cost >= 0):
        p.error(f"--switch-cost must be a finite number >= 0, got {args.switch_cost}")
    if args.in_process and args.ray_address is not None:
        p.error("--in-process and --ray-address: choose one")
    for name in ("episode_s", "period_s", "max_minutes"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            p.error(f"--{name.replace('_', '-')} must be a positive number, got {v}")

    from gearbox.floo import ppo
    from gearbox.floo.export import export_actor
    from gearbox.sim.envs import ACTIONS, OBS_NAMES

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = (out / ".traces").resolve()
    scenarios = training_set(args.scenarios)
    configs = [s.config(cache, args.episode_s, 0, args.workload, args.start_cc) for s in scenarios]
    (out / "scenarios.json").write_text(json.dumps([asdict(s) for s in scenarios], indent=1) + "\n")

    config = ppo.PPOConfig(rollout_steps=args.rollout_steps, num_envs=args.envs)
    overrides = {
        k: getattr(args, k)
        for k in ("ent_coef", "actor_lr", "critic_lr", "episode_reward_norm")
        if getattr(args, k) is not None
    }
    config = ppo.PPOConfig(**{**asdict(config), **overrides})
    while (args.rollout_steps * args.envs) % config.num_minibatches:
        config = ppo.PPOConfig(**{**asdict(config), "num_minibatches": config.num_minibatches // 2})
    try:
        config.check()
    except ValueError as e:
        p.error(str(e))
    deadline = time.monotonic() + args.max_minutes * 60.0

    def on_update(h: dict) -> bool:
        rct = h.get("info/episode_mean_rct_ms", math.nan)
        ref = h.get("info/episode_baseline_rct_ms")
        print(
            f"floo: update {h['update']}, {h['steps']} steps, {h['seconds']:.0f} s, "
            f"episodes {h['episodes']}, mean reward {h['mean_return']:.3f}, mean RCT {rct:.1f} ms"
            + (f" (baseline {ref:.1f})" if ref is not None else "")
            + f", entropy {h['entropy']:.3f}",
            file=sys.stderr,
        )
        if time.monotonic() > deadline:
            print(f"floo: --max-minutes {args.max_minutes} reached; keeping this update's policy", file=sys.stderr)
            return False
        return True

    t0 = time.perf_counter()
    factory = functools.partial(
        make_env,
        configs=configs,
        period_s=args.period_s,
        mode=args.switch,
        reward=args.reward,
        baseline_cca=args.baseline_cc,
        start_cca=args.start_cc,
        switch_cost=args.switch_cost,
    )
    result = ppo.train(
        factory,
        config,
        args.steps,
        args.seed,
        num_envs=args.envs,
        parallel=args.envs > 1 and args.ray_address is None and not args.in_process,
        on_update=on_update,
        ray_address=args.ray_address,
    )
    actor, critic = result.actor_params, result.critic_params
    seconds = time.perf_counter() - t0
    info = {
        "trainer": "gearbox learn floo",
        "steps": result.history[-1]["steps"] if result.history else 0,
        "seconds": round(seconds, 1),
        "envs": args.envs,
        "episode_s": args.episode_s,
        "period_s": args.period_s,
        "workload": args.workload,
        "scenarios": len(scenarios),
        "seed": args.seed,
        "reward": args.reward,
        "baseline_cc": args.baseline_cc if args.reward == "baseline" else None,
        "start_cc": args.start_cc,
        "switch": args.switch,
        "switch_cost": args.switch_cost,
        "ppo": asdict(result.config),
    }
    ppo.save_params(out / "ppo.npz", actor, critic, config=result.config)
    export_actor(
        actor,
        list(OBS_NAMES),
        out,
        list(ACTIONS),
        info,
        negative_slope=result.config.negative_slope,
        training_data=out / "scenarios.json",
        training_rows=info["steps"],
    )
    (out / "history.json").write_text(json.dumps(result.history, indent=1, default=float) + "\n")
    plot(result.history, out)
    print(f"floo: trained {info['steps']} steps in {seconds:.0f} s; policy in {out}/policy.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
