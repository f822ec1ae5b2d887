"""`gearbox learn sailfish`: SAILfish's stream-to-path policy trained by A2C in the simulator
(SAILfish §4.2.2, §5.1.4), exported as a `gearbox-mlp` policy.

Each epoch is one page load (`gearbox/PathScheduling-v0`): a training page (seeds below
the test pages', `gearbox.sailfish.scenarios`) over one of the training path pairs
(`sample_pairs(--pairs-per-class, --pair-seed)`: the five classes of SAILfish Table 5.2
and around them; the Table 5.2 pairs themselves and the evaluation's held-apart pairs are
not trained on); every stream's path chosen by the policy, rewarded by eq. 4.1.

`--network` picks the actor and critic (`gearbox.sailfish.a2c`): `mlp`, one hidden layer
over all the inputs (the shipped policy), or `conv`, SAILfish §5.1.2's 1-D convolution
over each path's RTT history merged with the other inputs into the 128-unit layer. Both
export to the same dense-network format (the convolution as an equivalent dense layer,
`gearbox.sailfish.a2c.dense_layers`), so the client's gear runs either.

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

from gearbox.sailfish.a2c import NETWORKS, A2CConfig
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
    ax.set_ylabel("mean stream completion ms (mean of 50 updates)", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(epochs, smooth([h["mean_return"] for h in rows]), color="tab:orange")
    ax2.set_ylabel("episode return (mean of 50 updates)", color="tab:orange")
    fig.tight_layout()
    path = out / "training.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def rtt_history_inputs(names: list[str], paths: int) -> tuple[tuple[int, ...], ...]:
    """The observation's columns of each path's sRTT history, oldest first (the inputs of
    the conv network's convolution, SAILfish §5.1.2)."""
    out = []
    for i in range(paths):
        cols = [j for j, n in enumerate(names) if n.startswith(f"p{i}_srtt_hist")]
        cols.sort(key=lambda j: int(names[j].removeprefix(f"p{i}_srtt_hist").split("_")[0]))
        out.append(tuple(cols))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    prog = os.environ.get("GEARBOX_LEARN_PROG", "gearbox learn sailfish")
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--epochs", type=int, default=14000, help="page loads to train on (SAILfish §5.1.4 converged in ~7,000)"
    )
    ap.add_argument("--pairs-per-class", type=int, default=40, help="training path pairs per Table 5.2 class")
    ap.add_argument("--pair-seed", type=int, default=TRAIN_PAIR_SEED)
    ap.add_argument("--train-pages", type=int, default=5000, help="training pages (page seeds 0..N-1)")
    ap.add_argument("--seed", type=int, default=1, help="the learner's seed")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop after this much wall time")
    # SAILfish §5.1.2's values are A2CConfig's defaults (actor 1e-4, entropy 10, one page
    # load per update); these defaults are the ones that trained the shipped policy, chosen
    # by the comparison in docs/sailfish.md "Training".
    ap.add_argument("--actor-lr", type=float, default=1e-3, help="actor learning rate (SAILfish: 1e-4)")
    ap.add_argument("--critic-lr", type=float, default=1e-3, help="critic learning rate (SAILfish: 1e-3)")
    ap.add_argument("--entropy-start", type=float, default=1.0, help="entropy weight at the start (SAILfish: 10)")
    ap.add_argument("--entropy-end", type=float, default=0.01, help="entropy weight at the end")
    ap.add_argument("--episodes-per-update", type=int, default=4, help="page loads per update (SAILfish: 1)")
    ap.add_argument(
        "--network",
        choices=NETWORKS,
        default="mlp",
        help="mlp: one hidden layer over all inputs (the shipped policy); conv: SAILfish §5.1.2's 1-D convolution "
        "over each path's RTT history, merged with the other inputs into the hidden layer",
    )
    ap.add_argument("--conv-filters", type=int, default=A2CConfig.conv_filters, help="with --network conv")
    ap.add_argument(
        "--conv-kernel", type=int, default=A2CConfig.conv_kernel, help="with --network conv: taps per filter"
    )
    ap.add_argument("--out", type=Path, default=Path("models/sailfish"))
    args = ap.parse_args(argv)
    if args.epochs < 1:
        ap.error(f"--epochs must be >= 1, got {args.epochs}")
    if args.pairs_per_class < 1:
        ap.error(f"--pairs-per-class must be >= 1, got {args.pairs_per_class}")
    if not 1 <= args.train_pages <= TEST_PAGE_SEED_START:
        ap.error(f"--train-pages must be in 1..{TEST_PAGE_SEED_START}, got {args.train_pages}")

    from gearbox.floo.export import export_actor
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

    names = feature_names(env.n_paths)
    config = A2CConfig(
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        entropy_start=args.entropy_start,
        entropy_end=args.entropy_end,
        episodes_per_update=args.episodes_per_update,
        network=args.network,
        conv_inputs=rtt_history_inputs(names, env.n_paths) if args.network == "conv" else (),
        conv_filters=args.conv_filters,
        conv_kernel=args.conv_kernel,
    )
    try:
        config.check(len(names))
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
        "network": result.config.network,
    }
    layers = result.actor_layers()
    model = export_actor(
        layers,
        names,
        args.out,
        [f"path{i}" for i in range(env.n_paths)],
        info,
        negative_slope=result.config.negative_slope,
        training_data=pairs_file,
        training_rows=result.history[-1]["steps"],
        model_version=f"sailfish-{weights_digest(layers)[:12]}",
    )
    meta = json.loads(model.with_suffix("").with_suffix(".meta.json").read_text())
    print(
        f"trained {info['epochs']} epochs ({info['steps']} decisions) in {info['seconds']} s; "
        f"wrote {model} ({meta['model_version']})"
    )
    return 0


def weights_digest(layers) -> str:
    """sha256 over the actor's weights and biases (float64, row-major): the model
    version names the policy itself. The training pairs' digest, which it was before,
    stays the same when the same recipe learns other weights (another seed, or the page
    workload's graphs changed), and two different policies shared a version."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for weights, bias in layers:
        for a in (weights, bias):
            a = np.ascontiguousarray(a, dtype=np.float64)
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
