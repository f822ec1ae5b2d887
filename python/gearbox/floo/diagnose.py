"""`python -m gearbox.floo.diagnose`: what a Floo policy does on the held-apart scenarios,
and what switching itself costs there (docs/floo.md "Why the learned policy lost to Copa").

Each of the evaluation's scenarios (the same paths, application traces and seeds as
`gearbox lab floo evaluate`) runs once, driven from Python period by period the way the
simulator's gear drives it (`SimSession.drive`): every selection period, each live
connection's Monitor state is read and the chooser's controller switched in. Choosers:

- `--model-dir DIR`: the policy's greedy choice (its actor in NumPy, `gearbox.floo.export`'s
  forward pass); prints the choices per class, the mean class probabilities, and each
  feature's range over every state the policy saw (saturated or constant inputs);
- `--fixed CC`: always `CC` (a constant choice through the gear path);
- `--loss-rule LOW HIGH`: BBR above a period loss rate of HIGH, Cubic below LOW, Copa
  otherwise (a hand rule: is the Monitor's loss enough to beat Copa?).

Every run starts its connections on `--start-cc` and switches with `--switch`; the pooled
mean RCT (the evaluation's definition) and the per-class means of scenario means are
printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gearbox._native import SimSession
from gearbox.floo.export import predict_json
from gearbox.floo.scenarios import evaluation_set
from gearbox.lab.summary import rct_stats
from gearbox.sim.envs import ACTIONS, OBS_NAMES, observe


@dataclass(frozen=True)
class Chooser:
    kind: str  # "policy", "fixed" or "loss-rule"
    model: str | None = None
    fixed: str | None = None
    low: float = 0.0
    high: float = 1.0


def _choose(chooser: Chooser, doc: dict | None, features: np.ndarray) -> tuple[str, np.ndarray | None]:
    if chooser.kind == "fixed":
        return str(chooser.fixed), None
    if chooser.kind == "loss-rule":
        loss = float(features[OBS_NAMES.index("loss_rate")])
        return ("bbr" if loss > chooser.high else "cubic" if loss < chooser.low else "copa"), None
    assert doc is not None
    probs = predict_json(doc, features[None, :].astype(np.float64))[0][0]
    return ACTIONS[int(np.argmax(probs))], probs


def run(job: tuple[int, Chooser, float, float, str, str, int, str]) -> dict:
    index, chooser, duration_s, period_s, start, mode, seed, cache = job
    scenario = evaluation_set()[index]
    doc = json.loads((Path(str(chooser.model)) / "policy.json").read_text()) if chooser.kind == "policy" else None
    session = SimSession(scenario.config(Path(cache), duration_s, seed + index, "app", start), scenario.name)
    choices: Counter = Counter()
    states, probs = [], []
    while not session.advance(period_s):
        for m in session.monitor():
            if m.get("features") is None:
                continue
            x = observe(m)
            choice, p = _choose(chooser, doc, x)
            choices[choice] += 1
            states.append(x)
            if p is not None:
                probs.append(p)
            if choice != m["cca"]:
                session.switch(m["conn"], choice, mode)
    rcts = [float(r["rct_ms"]) for r in session.take_records() if r.get("rct_ms") is not None and not r.get("error")]
    return {"cls": scenario.cls, "rcts": rcts, "choices": choices, "states": states, "probs": probs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gearbox.floo.diagnose", description=__doc__.splitlines()[0])
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model-dir", type=Path, help="a Floo policy (policy.json)")
    who.add_argument("--fixed", choices=ACTIONS, help="always this controller")
    who.add_argument("--loss-rule", nargs=2, type=float, metavar=("LOW", "HIGH"), help="the hand rule above")
    p.add_argument("--start-cc", default="cubic", choices=ACTIONS, help="the controller connections start on")
    p.add_argument("--switch", default="full", choices=("full", "part"))
    p.add_argument("--scenarios", type=int, default=60, help="the first N of the evaluation's 60")
    p.add_argument("--duration-s", type=float, default=180.0)
    p.add_argument("--period-s", type=float, default=12.0)
    p.add_argument("--seed", type=int, default=7, help="application traces' seed (the evaluation's)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cache", default="lab-out/floo-diagnose/traces", help="trace cache")
    args = p.parse_args(argv)
    if args.model_dir is not None and not (args.model_dir / "policy.json").is_file():
        p.error(f"--model-dir {args.model_dir}: no policy.json")
    if args.model_dir is not None:
        chooser = Chooser("policy", model=str(args.model_dir.resolve()))
    elif args.fixed is not None:
        chooser = Chooser("fixed", fixed=args.fixed)
    else:
        chooser = Chooser("loss-rule", low=args.loss_rule[0], high=args.loss_rule[1])
    n = min(max(1, args.scenarios), len(evaluation_set()))
    cache = str(Path(args.cache).resolve())
    for s in evaluation_set()[:n]:  # traces first, in this process (workers would race)
        s.trace_path(Path(cache), 2 * args.duration_s + 60.0)
    jobs = [
        (i, chooser, args.duration_s, args.period_s, args.start_cc, args.switch, args.seed, cache) for i in range(n)
    ]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        res = list(pool.map(run, jobs))
    every = [x for r in res for x in r["rcts"]]
    classes = sorted({r["cls"] for r in res})
    per_class = {
        c: round(float(np.mean([np.mean(r["rcts"]) for r in res if r["cls"] == c and r["rcts"]])), 1) for c in classes
    }
    print(f"pooled mean RCT {rct_stats(every)['mean_ms']:.1f} ms over {len(every)} requests; per class {per_class}")
    choices = sum((r["choices"] for r in res), Counter())
    print(f"choices {dict(choices)}")
    probs = [p for r in res for p in r["probs"]]
    if probs:
        P = np.array(probs)
        mean = dict(zip(ACTIONS, P.mean(0).round(3).tolist(), strict=True))
        print(f"mean class probabilities {mean}; mean top {P.max(1).mean():.3f}")
    states = np.array([x for r in res for x in r["states"]])
    if chooser.kind == "policy" and len(states):
        print("feature: mean sd min median max, share at the clip, share exactly 0")
        for j, name in enumerate(OBS_NAMES):
            c = states[:, j]
            print(
                f"  {name:30s} {c.mean():7.3f} {c.std():7.3f} {c.min():7.3f} {np.median(c):7.3f} {c.max():7.3f} "
                f"{np.mean(np.abs(c) >= 10):.3f} {np.mean(c == 0):.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
