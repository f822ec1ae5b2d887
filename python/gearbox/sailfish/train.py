"""`gearbox learn sailfish`: SAILfish's stream-to-path policy trained by A2C in the simulator
(SAILfish §4.2.2, §5.1.4), exported as a `gearbox-mlp` policy.

Each epoch is one page load (`gearbox/PathScheduling-v0`): a training page (seeds below
the test pages', `gearbox.sailfish.scenarios`) over one of the training path pairs
(`sample_pairs(--pairs-per-class, --pair-seed)`: the five classes of SAILfish Table 5.2
and around them; the Table 5.2 pairs themselves and the evaluation's held-apart pairs are
not trained on); every stream's path chosen by the policy, rewarded by eq. 4.1.

Output in `--out` (default `models/sailfish`): `policy.json` + `policy.meta.json` (the
actor and its sidecar: the observation's feature names and the path indices as classes),
`a2c.npz` (actor and critic), `pairs.json` (the training pairs: the sidecar's
training-data digest), `history.json` (one entry per update) and `training.png` (mean
stream completion time and return against epochs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from gearbox.sailfish.a2c import A2CConfig
from gearbox.sailfish.scenarios import TEST_PAGE_SEED_START, sample_pairs

TRAIN_PAIR_SEED = 20261126


def plot(history: list[dict], out: Path) -> Path | None:
    """Mean stream completion time (smoothed) and return against epochs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [h for h in history if math.isfinite(h.get("info/mean_stream_ms", math.nan))]
    if not rows:
        return None

    def smooth(values: list[float], k: int = 50) -> list[float]:
        out, acc = [], 0.0
        for i, v in enumerate(values):
            acc += v
            if i >= k:
                acc -= values[i - k]
            out.append(acc / min(i + 1, k))
        return out

    epochs = [h["epochs"] for h in rows]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(epochs, smooth([h["info/mean_stream_ms"] for h in rows]), color="tab:blue")
    ax.set_xlabel("epochs (page loads)")
    ax.set_ylabel("mean stream completion ms (50-epoch mean)", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(epochs, smooth([h["mean_return"] for h in rows]), color="tab:orange")
    ax2.set_ylabel("episode return (50-epoch mean)", color="tab:orange")
    fig.tight_layout()
    path = out / "training.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    prog = os.environ.get("GEARBOX_LEARN_PROG", "gearbox learn sailfish")
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=7000, help="page loads to train on (SAILfish §5.1.4: ~7,000)")
    ap.add_argument("--pairs-per-class", type=int, default=40, help="training path pairs per Table 5.2 class")
    ap.add_argument("--pair-seed", type=int, default=TRAIN_PAIR_SEED)
    ap.add_argument("--train-pages", type=int, default=5000, help="training pages (page seeds 0..N-1)")
    ap.add_argument("--seed", type=int, default=1, help="the learner's seed")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop after this much wall time")
    defaults = A2CConfig()
    ap.add_argument("--actor-lr", type=float, default=defaults.actor_lr, help="SAILfish §5.1.2: 1e-4")
    ap.add_argument("--critic-lr", type=float, default=defaults.critic_lr, help="SAILfish §5.1.2: 1e-3")
    ap.add_argument("--entropy-start", type=float, default=defaults.entropy_start, help="SAILfish §5.1.2: 10")
    ap.add_argument("--entropy-end", type=float, default=defaults.entropy_end)
    ap.add_argument("--episodes-per-update", type=int, default=defaults.episodes_per_update)
    ap.add_argument("--out", type=Path, default=Path("models/sailfish"))
    args = ap.parse_args(argv)
    if args.epochs < 1:
        ap.error(f"--epochs must be >= 1, got {args.epochs}")
    if args.pairs_per_class < 1:
        ap.error(f"--pairs-per-class must be >= 1, got {args.pairs_per_class}")
    if not 1 <= args.train_pages <= TEST_PAGE_SEED_START:
        ap.error(f"--train-pages must be in 1..{TEST_PAGE_SEED_START}, got {args.train_pages}")

    from gearbox.floo.export import export_actor
    from gearbox.models.sidecar import sha256_file
    from gearbox.sailfish.a2c import train
    from gearbox.sim.paths import PathSchedulingEnv, feature_names

    pairs = sample_pairs(args.pairs_per_class, args.pair_seed, prefix="train")
    env = PathSchedulingEnv([p.config() for p in pairs], page_seeds=range(args.train_pages))
    args.out.mkdir(parents=True, exist_ok=True)
    pairs_file = args.out / "pairs.json"
    pairs_file.write_text(json.dumps([asdict(p) for p in pairs], indent=1) + "\n")
    deadline = time.monotonic() + 60 * args.max_minutes if args.max_minutes else None

    def report(r: dict) -> bool:
        if r["update"] % 250 == 0:
            print(
                f"epoch {r['epochs']:5d}  {r['seconds']:6.0f} s  return {r['mean_return']:8.2f}  "
                f"entropy {r['entropy']:.3f} (weight {r['entropy_weight']:.3f})  "
                f"stream {r.get('info/mean_stream_ms', math.nan):6.0f} ms",
                flush=True,
            )
        return deadline is None or time.monotonic() < deadline

    config = A2CConfig(
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        entropy_start=args.entropy_start,
        entropy_end=args.entropy_end,
        episodes_per_update=args.episodes_per_update,
    )
    try:
        config.check()
    except ValueError as e:
        ap.error(str(e))
    result = train(env, config, args.epochs, args.seed, on_update=report)
    result.save(args.out / "a2c.npz")
    (args.out / "history.json").write_text(json.dumps(result.history) + "\n")
    plot(result.history, args.out)
    info = {
        "algorithm": "a2c",
        "epochs": result.history[-1]["epochs"],
        "steps": result.history[-1]["steps"],
        "seconds": round(result.seconds, 1),
        "seed": args.seed,
        "train_pages": args.train_pages,
        "pairs": len(pairs),
        "config": asdict(result.config),
    }
    model = export_actor(
        result.actor_params,
        feature_names(env.n_paths),
        args.out,
        [f"path{i}" for i in range(env.n_paths)],
        info,
        negative_slope=result.config.negative_slope,
        training_data=pairs_file,
        training_rows=result.history[-1]["steps"],
        model_version=f"sailfish-{sha256_file(pairs_file)[:12]}",
    )
    meta = json.loads(model.with_suffix("").with_suffix(".meta.json").read_text())
    print(
        f"trained {info['epochs']} epochs ({info['steps']} decisions) in {info['seconds']} s; "
        f"wrote {model} ({meta['model_version']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
