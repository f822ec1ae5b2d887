"""Planning a scenario's runs, and the files that describe them before anything runs.

A *run* is one (condition, policy, repetition). All policies of a condition and
repetition get the same link config, the same `gearbox emu --seed` (so the same random
losses and jitter draws for the same packet sequence) and the same workload seed (so the
same requests at the same times); only the policy's flags differ. Runs are ordered
repetition, condition, policy, so that the policies of one condition run close together
in time and any drift of the machine touches them alike.

`prepare` writes OUT/plan.json, OUT/conditions.json and each condition's EMU.toml, and
generates the preset traces the conditions name (docs/lab.md, "Output").
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gearbox.lab import scenario as sc
from gearbox.lab.environment import LabError


@dataclass
class Run:
    """One (condition, policy, repetition) and the seeds it runs with."""

    run_id: str
    condition: sc.Condition
    policy: sc.Policy
    repetition: int
    link_seed: int
    workload_seed: int
    dir: Path


def plan(s: sc.Scenario, out: Path) -> tuple[list[sc.Condition], list[Run]]:
    """The conditions and the runs, in run order (repetition, condition, policy)."""
    conds = sc.conditions(s)
    runs = []
    for rep in range(s.repetitions):
        for c in conds:
            for p in s.policies:
                run_id = f"{c.id}-{p.name}-r{rep}"
                runs.append(
                    Run(
                        run_id=run_id,
                        condition=c,
                        policy=p,
                        repetition=rep,
                        link_seed=(sc.link_seed(s, c, rep) + p.link_seed_offset) % 2**32,
                        workload_seed=sc.workload_seed(s, rep),
                        dir=out / "runs" / run_id,
                    )
                )
    return conds, runs


class TraceFiles:
    """Resolves a scenario's traces to files: user files as they are, presets generated
    once per (preset, seed, length) into OUT/traces with `gearbox trace gen`."""

    def __init__(self, out: Path, default_duration_s: float, gearbox: Path | None) -> None:
        self.dir = out / "traces"
        self.default_duration_s = default_duration_s
        self.gearbox = gearbox  # None: only name the files (planning, dry runs)

    def __call__(self, ref: sc.TraceRef, seed: int) -> Path:
        if ref.file is not None:
            return ref.file
        duration = ref.duration_s or self.default_duration_s
        path = self.dir / f"{ref.preset}-seed{seed}-{duration:g}s.trace"
        if self.gearbox is not None and not path.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            cmd = [str(self.gearbox), "trace", "gen", "--preset", str(ref.preset), "--seed", str(seed)]
            cmd += ["--duration-s", f"{duration:g}", "--out", str(path)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise LabError(
                    f"generating trace {ref.preset} (seed {seed}) failed: {r.stderr.strip() or r.stdout.strip()}"
                )
        return path


def prepare(s: sc.Scenario, out: Path, gearbox: Path | None) -> tuple[list[sc.Condition], list[Run], dict[str, Any]]:
    """Plans the runs and writes what they need: the scenario copy, traces, one EMU.toml
    per condition, plan.json and conditions.json. `gearbox` None: no traces generated."""
    out = out.resolve()  # the paths go into EMU.toml files and shell commands run elsewhere
    conds, runs = plan(s, out)
    out.mkdir(parents=True, exist_ok=True)
    if s.source.resolve() != (out / "scenario.toml").resolve():
        shutil.copyfile(s.source, out / "scenario.toml")
    traces = TraceFiles(out, math.ceil(s.run_timeout_s), gearbox)
    emu: dict[str, Any] = {}
    cond_rows = []
    for c in conds:
        emu[c.id] = sc.emu_config(s, c, traces)
        (out / "conditions").mkdir(exist_ok=True)
        (out / "conditions" / f"{c.id}.emu.toml").write_text(sc.dumps_toml(emu[c.id]))
        cond_rows.append(
            {
                "condition_id": c.id,
                "index": c.index,
                "label": c.label,
                "params": c.params,
                "values": sc.condition_values(s, c),
                "emu": emu[c.id],
            }
        )
    (out / "conditions.json").write_text(json.dumps(cond_rows, indent=1))
    plan_doc = {
        "scenario": s.name,
        "description": s.description,
        "source": str(s.source),
        "topology": s.topology,
        "seed": s.seed,
        "repetitions": s.repetitions,
        "duration_s": s.duration_s,
        "timeout_s": s.run_timeout_s,
        "workload": asdict(s.workload),
        "swept": list(s.grid) + (list(s.sample.ranges) if s.sample else []),
        "phases": sc.phases(s),
        "policies": [asdict(p) for p in s.policies],
        "control": None
        if s.control is None
        else {
            "poll_s": s.control.poll_s,
            "pushes": [{"gear": p.gear, "dir": str(p.dir), "at_s": p.at_s} for p in s.control.pushes],
        },
        "runs": [
            {
                "run_id": r.run_id,
                "condition_id": r.condition.id,
                "policy": r.policy.name,
                "repetition": r.repetition,
                "link_seed": r.link_seed,
                "workload_seed": r.workload_seed,
            }
            for r in runs
        ],
    }
    (out / "plan.json").write_text(json.dumps(plan_doc, indent=1))
    return conds, runs, emu
