"""`gearbox lab floo seeds`: a training recipe judged over several learner seeds, not one.

A recipe is a folder with one policy per learner seed, `DIR/seed-N` (what `gearbox learn
floo ... --seed N --out DIR/seed-N` writes; `--train` trains the missing ones with the
learn arguments given after `--`). Each policy is scored by `gearbox lab floo evaluate`'s
own runs and summary (`gearbox.floo.evaluate`: the same scenarios, jobs and Static_Opt) on
each application-trace set of `--sets` (the evaluation's `--seed`; docs/floo.md uses 7, the
default set, and 8), with the static controllers run once per set and shared by every
policy. `--policy NAME=DIR` adds single policies (e.g. the shipped `models/floo`) for
comparison.

Output (under `--out`): `seeds.json` (per policy and set: Floo's summary entry and Copa's
and Static_Opt's mean RCT; per recipe and set: mean / min / max over its seeds) and
`report.md`, which is also printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from gearbox.floo import evaluate

STATIC_SCHEMES = list(evaluate.STATIC)


def _named(values: list[str], flag: str, p: argparse.ArgumentParser) -> list[tuple[str, Path]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            p.error(f"{flag}: give NAME=DIR, got {v!r}")
        out.append((name, Path(path)))
    return out


def _ints(text: str, flag: str, p: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        p.error(f"{flag}: give comma-separated integers, got {text!r}")
    if not values:
        p.error(f"{flag}: give at least one")
    return values


def score(summary: dict, scheme: str) -> dict:
    """What the report keeps of `scheme` in an evaluation summary, against Copa and
    Static_Opt of the same runs."""
    s = summary["schemes"]
    v, copa, opt = s[scheme], s["copa"]["mean_rct_ms"], s["static_opt"]["mean_rct_ms"]
    return {
        "mean_rct_ms": v["mean_rct_ms"],
        "vs_copa": v["mean_rct_ms"] / copa - 1.0,
        "x_static_opt_pooled": v["mean_rct_ms"] / opt,
        "x_static_opt_per_scenario": v["ratio_to_static_opt_mean"],
        "below_static_opt": v["scenarios_better_than_static_opt"],
        "switches_per_minute": v["switches_per_minute"],
        "by_class_ms": v["mean_rct_by_class_ms"],
        "copa_ms": copa,
        "static_opt_ms": opt,
    }


def spread(scores: list[dict]) -> dict:
    """Mean, min and max over a recipe's seeds of Floo's mean RCT and its ratios."""
    out: dict = {"seeds": len(scores)}
    for key in ("mean_rct_ms", "vs_copa", "x_static_opt_pooled", "x_static_opt_per_scenario"):
        xs = [s[key] for s in scores]
        out[key] = {"mean": float(np.mean(xs)), "min": float(min(xs)), "max": float(max(xs))}
    return out


def report(result: dict) -> str:
    sets = result["sets"]
    lines = [
        f"# Floo recipes over learner seeds: {result['scenarios']} held-apart scenarios, "
        f"application traces {', '.join(f'--seed {s}' for s in sets)}",
        "",
        "Static controllers per set (mean RCT ms): "
        + "; ".join(
            f"--seed {s}: Copa {result['static'][str(s)]['copa_ms']:.1f}, "
            f"Static_Opt {result['static'][str(s)]['static_opt_ms']:.1f}"
            for s in sets
        ),
        "",
        "| recipe | policy | "
        + " | ".join(f"--seed {s}: Floo ms | vs Copa | x Static_Opt pooled / per scenario | switches/min" for s in sets)
        + " |",
        "|---|---|" + "---:|---:|---:|---:|" * len(sets),
    ]
    for name, policies in result["policies"].items():
        for label, per_set in policies.items():
            cells = []
            for s in sets:
                v = per_set[str(s)]
                cells.append(
                    f"{v['mean_rct_ms']:.1f} | {100 * v['vs_copa']:+.1f}% | "
                    f"{v['x_static_opt_pooled']:.3f} / {v['x_static_opt_per_scenario']:.3f} | "
                    f"{v['switches_per_minute']:.2f}"
                )
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    if result["recipes"]:
        lines += [
            "",
            "Over each recipe's seeds, mean [min, max]:",
            "",
            "| recipe | seeds | "
            + " | ".join(f"--seed {s}: Floo ms | vs Copa | x Static_Opt pooled" for s in sets)
            + " |",
            "|---|---:|" + "---:|---:|---:|" * len(sets),
        ]
        for name, per_set in result["recipes"].items():
            cells = []
            for s in sets:
                v = per_set[str(s)]
                m, c, o = v["mean_rct_ms"], v["vs_copa"], v["x_static_opt_pooled"]
                cells.append(
                    f"{m['mean']:.1f} [{m['min']:.1f}, {m['max']:.1f}] | "
                    f"{100 * c['mean']:+.1f}% [{100 * c['min']:+.1f}, {100 * c['max']:+.1f}] | "
                    f"{o['mean']:.3f} [{o['min']:.3f}, {o['max']:.3f}]"
                )
            lines.append(f"| {name} | {per_set[str(sets[0])]['seeds']} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    learn_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, learn_args = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(
        prog="gearbox lab floo seeds", description=__doc__.splitlines()[0], epilog="-- LEARN_ARGS: with --train"
    )
    p.add_argument(
        "--recipe", action="append", default=[], metavar="NAME=DIR", help="a recipe's policies, DIR/seed-N (repeat)"
    )
    p.add_argument("--seeds", default="1,2,3", help="learner seeds of every recipe (comma-separated)")
    p.add_argument(
        "--policy", action="append", default=[], metavar="NAME=DIR", help="a single policy to compare (repeat)"
    )
    p.add_argument(
        "--train",
        action="store_true",
        help="train each missing DIR/seed-N of the (one) recipe: "
        "gearbox learn floo LEARN_ARGS --seed N --out DIR/seed-N",
    )
    p.add_argument("--sets", default="7,8", help="application-trace sets: the evaluation's --seed values")
    p.add_argument("--scenarios", type=int, default=60, help="held-apart scenarios (the evaluation's --scenarios)")
    p.add_argument("--duration-s", type=float, default=180.0, help="requests sent per run (the evaluation's)")
    p.add_argument("--period-s", type=float, default=12.0, help="the selection period SP")
    p.add_argument("--workload", default="app", help="the application trace's workload")
    p.add_argument("--jobs", type=int, default=1, help="parallel simulation processes")
    p.add_argument("--out", default="lab-out/floo-seeds", help="where seeds.json and report.md go")
    args = p.parse_args(argv)
    seeds = _ints(args.seeds, "--seeds", p)
    sets = _ints(args.sets, "--sets", p)
    recipes = _named(args.recipe, "--recipe", p)
    singles = _named(args.policy, "--policy", p)
    if not recipes and not singles:
        p.error("give at least one --recipe or --policy")
    if args.train and len(recipes) != 1:
        p.error("--train trains one --recipe")
    if learn_args and not args.train:
        p.error("learn arguments after -- need --train")
    if args.train:
        from gearbox.floo import train

        if any(a in ("--seed", "--out") or a.startswith(("--seed=", "--out=")) for a in learn_args):
            p.error("the learn arguments must not set --seed or --out (the recipe's folder and --seeds do)")
        _, folder = recipes[0]
        for n in seeds:
            out = folder / f"seed-{n}"
            if (out / "policy.json").is_file():
                print(f"floo seeds: {out} is trained; kept", file=sys.stderr)
                continue
            print(f"floo seeds: gearbox learn floo {' '.join(learn_args)} --seed {n} --out {out}", file=sys.stderr)
            code = train.main([*learn_args, "--seed", str(n), "--out", str(out)])
            if code != 0:
                return code
    policies: list[tuple[str, str, Path]] = [
        (name, f"seed {n}", folder / f"seed-{n}") for name, folder in recipes for n in seeds
    ] + [(name, "", folder) for name, folder in singles]
    missing = [str(d) for _, _, d in policies if not (d / "policy.json").is_file()]
    if missing:
        p.error(f"no policy.json in {', '.join(missing)} (train with `gearbox learn floo` or --train)")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scenarios = evaluate.held_apart(args.scenarios)
    t0 = time.perf_counter()
    result: dict = {"scenarios": len(scenarios), "sets": sets, "static": {}, "policies": {}, "recipes": {}}
    common = (args.duration_s, args.period_s, args.workload)
    for s in sets:
        cache = out / "traces"
        # The static controllers once per set: every policy's Static_Opt and Copa.
        static_jobs = evaluate.make_jobs(scenarios, STATIC_SCHEMES, *common, s, cache, Path("."), "copa")
        static_rows = evaluate.run_jobs(static_jobs, args.jobs)
        base = evaluate.summarise(static_rows)["schemes"]
        result["static"][str(s)] = {
            "copa_ms": base["copa"]["mean_rct_ms"],
            "static_opt_ms": base["static_opt"]["mean_rct_ms"],
            "static_opt_ratio_copa": base["copa"]["ratio_to_static_opt_mean"],
        }
        for name, label, folder in policies:
            start = evaluate.trained_start_cc(folder)
            jobs = evaluate.make_jobs(scenarios, ["floo"], *common, s, cache, folder, start)
            summary = evaluate.summarise(static_rows + evaluate.run_jobs(jobs, args.jobs))
            key = label or str(folder)
            result["policies"].setdefault(name, {}).setdefault(key, {})[str(s)] = score(summary, "floo")
            print(
                f"floo seeds: --seed {s}, {name} {key}: Floo {summary['schemes']['floo']['mean_rct_ms']:.1f} ms",
                file=sys.stderr,
            )
    for name, _ in recipes:
        per = result["policies"][name]
        result["recipes"][name] = {str(s): spread([per[f"seed {n}"][str(s)] for n in seeds]) for s in sets}
    result["wall_s"] = time.perf_counter() - t0
    (out / "seeds.json").write_text(json.dumps(result, indent=1))
    text = report(result)
    (out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
