"""`gearbox sim run SCENARIO.toml`: a lab scenario in the simulator (docs/sim.md, "Lab
scenarios").

Everything but the runner is the lab's: the scenario reader, the plan (conditions x
policies x repetitions, with the same link and workload seeds), the results table, the
summary and the report (`gearbox lab report OUT` works on the output). Each run is one
`gearbox sim exec` over the condition's links, the workload's requests from the run's
workload seed (the requests `gearbox lab run` sends), instead of one `gearbox emu` with a
real edge and client: no root, and a run takes a fraction of its simulated time.

The simulator runs QUIC only, over the `single`, the `multipath` (one QUIC connection per
path, docs/sim.md "Workloads on several paths") or the `population` topology (clients over
/24 prefixes, each prefix its own links, docs/sim.md "Population"); the workload's
`time_scale` scales send times as `gearbox load --time-scale` does. On several paths a
request goes where `gearbox load` sends it (workload client c on path c mod paths), or
where the path scheduler of a policy's `--scheduler NAME` puts it (SAILfish §4.2.1; the
same schedulers, and `sailfish` with `--sailfish-model DIR`). A scenario that needs more is
refused before anything runs, with the feature named and `gearbox lab run` suggested: a
policy over TCP (`tcp`, `h1`; MPTCP is TCP), a client flag other than those two
(`load_args`: the client's gears choose a protocol), an edge flag other than `--cc` and
`--initial-window` (the edge's TCP-only flags change nothing for QUIC and are let
through), a path of a multipath scenario that goes dark (a UDP block or drop-all policer,
or all packets lost: the simulated client has no request failure, so its requests would
wait for the run's time limit where `gearbox load` records them failed), a `[control]`
table (a control plane beside the edge).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gearbox.lab import scenario as sc
from gearbox.lab.environment import LabError, find_gearbox
from gearbox.lab.planning import Run
from gearbox.lab.runner import CLIENT_AT_LINK_S, CLIENT_STARTUP_S, RunResult, count_lines, time_varying

# Edge flags the simulator's server takes (name in the sim config).
SIM_EDGE_FLAGS = {"--cc": "cc", "--initial-window": "initial_window"}
# Edge flags that only touch TCP connections: a QUIC run is the same with or without them.
TCP_ONLY_EDGE_FLAGS = ("--tcp-cc", "--tcp-notsent-lowat", "--tcp-processing-ms", "--mptcp")
# Edge flags without a value.
EDGE_SWITCHES = ("--mptcp", "--no-alt-svc")
# Client flags of a multipath scenario's policy the simulator takes (name in the sim config):
# the path scheduler of every request (`gearbox load --scheduler`) and SAILfish's policy.
SIM_LOAD_FLAGS = {"--scheduler": "path_scheduler", "--sailfish-model": "sailfish_model"}
# `gearbox load --sailfish-model`'s default.
SAILFISH_MODEL = Path("models/sailfish")


def _refuse(s: sc.Scenario, field: str, what: str) -> sc.ScenarioError:
    return sc.ScenarioError(
        str(s.source),
        field,
        f"{what}: the simulator runs QUIC only, on one path, several paths or a population; use `gearbox lab run`",
    )


def _flags(args: list[str], switches: tuple[str, ...] = ()) -> Iterator[tuple[str, str | None]]:
    """A command line's flags with their values: `--flag=value`, `--flag value`, or a
    switch (one of `switches`) with None; a flag missing its value at the end gets None."""
    i = 0
    while i < len(args):
        flag, value = args[i], None
        if "=" in flag:
            flag, value = flag.split("=", 1)
            i += 1
        elif flag in switches:
            i += 1
        else:
            value = args[i + 1] if i + 1 < len(args) else None
            i += 2
        yield flag, value


def edge_settings(s: sc.Scenario, p: sc.Policy) -> dict[str, Any]:
    """The sim config fields of a policy's edge flags; a ScenarioError naming the first
    flag the simulator cannot honour."""
    out: dict[str, Any] = {}
    for flag, value in _flags(p.edge_args, EDGE_SWITCHES):
        if flag in TCP_ONLY_EDGE_FLAGS:
            continue
        if flag not in SIM_EDGE_FLAGS or value is None:
            raise _refuse(s, f"policies.{p.name}.edge_args", f"edge flag {flag}")
        key = SIM_EDGE_FLAGS[flag]
        if key == "initial_window":
            try:
                out[key] = int(value)
            except ValueError:
                raise sc.ScenarioError(
                    str(s.source), f"policies.{p.name}.edge_args", f"--initial-window {value!r}: not an integer"
                ) from None
        else:
            out[key] = value
    return out


def load_settings(s: sc.Scenario, p: sc.Policy) -> dict[str, Any]:
    """The sim config fields of a policy's client flags: on several paths `--scheduler NAME`
    and `--sailfish-model DIR`; a ScenarioError naming any other flag."""
    out: dict[str, Any] = {}
    for flag, value in _flags(p.load_args):
        if s.topology != "multipath" or flag not in SIM_LOAD_FLAGS or value is None:
            raise _refuse(s, f"policies.{p.name}.load_args", f"client flags {' '.join(p.load_args)}")
        out[SIM_LOAD_FLAGS[flag]] = value
    if out.get("path_scheduler") == "sailfish":
        # Resolved as `gearbox load` resolves it: against the working folder.
        out["sailfish_model"] = str(Path(out.get("sailfish_model", SAILFISH_MODEL)).resolve())
    return out


def _dark(policer: dict[str, Any] | None, loss_rate: float | None, loss: dict[str, Any] | None) -> str | None:
    """The key that makes a path drop every QUIC packet, if one does."""
    if policer and policer.get("protocol") == "udp":
        if policer.get("action") == "block" or (policer.get("action") == "drop" and policer.get("drop_rate", 0) >= 1):
            return "policer"
    if loss_rate is not None and loss_rate >= 1:
        return "loss_rate"
    if loss and loss.get("model") == "bernoulli" and loss.get("loss_rate", 0) >= 1:
        return "loss"
    return None


def dark_path(s: sc.Scenario) -> str | None:
    """The field of the first path of `s` that goes dark (drops every QUIC packet, from the
    start or from a scheduled change); None when none does."""
    for i, p in enumerate(s.paths):
        if key := _dark(p.policer, p.loss_rate, p.loss):
            return f"path[{i}].{key}"
        for j, c in enumerate(p.schedule):
            if key := _dark(c.policer, c.loss_rate, c.loss):
                return f"path[{i}].schedule[{j}].{key}"
        for direction in ("downlink", "uplink"):
            raw = getattr(p, direction)
            if key := _dark(raw.get("policer"), None, raw.get("loss")):
                return f"path[{i}].{direction}.{key}"
            for j, c in enumerate(raw.get("schedule", [])):
                if key := _dark(c.get("policer"), None, c.get("loss")):
                    return f"path[{i}].{direction}.schedule[{j}].{key}"
    return None


def page_workload(s: sc.Scenario) -> bool:
    """Whether the scenario's workload is a page workload (`gearbox load` loads its pages)."""
    name = s.workload.name
    if "/" not in name and not name.endswith(".toml"):
        return name == "page"
    try:
        return "page" in tomllib.loads(Path(name).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False  # the run's own error names it


def check(s: sc.Scenario) -> None:
    """Refuses, before any run, a scenario the simulator cannot run as the lab would."""
    if s.topology not in ("single", "multipath", "population"):
        raise _refuse(s, "topology", f"topology {s.topology!r}")
    if s.control is not None:
        raise _refuse(s, "control", "a control plane beside the edge ([control])")
    if s.topology == "multipath" and page_workload(s):
        raise _refuse(
            s,
            "workload.name",
            "page loads on several paths (the simulator loads such pages one at a time: "
            '`gearbox lab sailfish evaluate`, docs/sim.md "Page loads on several paths")',
        )
    if s.topology == "multipath" and (field := dark_path(s)):
        raise _refuse(
            s,
            field,
            "a path that goes dark (the simulated client has no request failure: its requests "
            "would wait for the time limit, where `gearbox load` records them failed)",
        )
    for p in s.policies:
        if p.proto != "quic":
            mptcp = " or MPTCP" if s.topology == "multipath" else ""
            raise _refuse(s, f"policies.{p.name}", f"policy {p.name!r} runs over TCP{mptcp} (proto {p.proto})")
        load_settings(s, p)
        edge_settings(s, p)


def sim_config(s: sc.Scenario, run: Run, emu: dict[str, Any]) -> dict[str, Any]:
    """The `gearbox sim exec` config (docs/sim.md) of one run: the condition's links as the
    emulator gets them (a population's per prefix), the run's seeds, the policy's
    controller and initial window."""
    config: dict[str, Any] = {
        "seed": run.link_seed,
        "workload_seed": run.workload_seed,
        "duration_s": s.duration_s,
        "time_limit_s": s.run_timeout_s,
        "workload": s.workload.name,
        **edge_settings(s, run.policy),
        **load_settings(s, run.policy),
    }
    if s.workload.time_scale != 1.0:
        config["time_scale"] = s.workload.time_scale
    if time_varying(emu):
        # The emulator starts the client at this link time (its links' clock starts with
        # its relay), so the trace is as far along at the first request on both sides.
        config["link_offset_s"] = CLIENT_AT_LINK_S + CLIENT_STARTUP_S
    if emu.get("topology") == "population":
        pop = emu["population"]
        population: dict[str, Any] = {
            "prefixes": pop["prefixes"],
            "hosts_per_prefix": pop["hosts_per_prefix"],
            "down": pop["downlink"],
            "up": pop["uplink"],
        }
        if pop.get("prefix"):
            population["prefix"] = [
                {"index": o["index"], "down": o["downlink"], "up": o["uplink"]} for o in pop["prefix"]
            ]
        config["population"] = population
        return config
    if emu.get("topology") == "multipath":
        config["path"] = [
            {**({"name": p["name"]} if "name" in p else {}), "down": p["downlink"], "up": p["uplink"]}
            for p in emu["path"]
        ]
        return config
    (path,) = emu["path"]
    config["down"] = path["downlink"]
    config["up"] = path["uplink"]
    return config


def run_one(s: sc.Scenario, run: Run, emu: dict[str, Any], gearbox: Path) -> RunResult:
    """One `gearbox sim exec`; never raises for a failed run (the lab's contract)."""
    run.dir.mkdir(parents=True, exist_ok=True)
    config = run.dir / "sim.toml"
    config.write_text(sc.dumps_toml(sim_config(s, run, emu)))
    records = run.dir / "client.jsonl"
    records.unlink(missing_ok=True)
    cmd = [str(gearbox), "sim", "exec", "--config", str(config), "--out", str(records)]
    (run.dir / "command.txt").write_text(" ".join(cmd) + "\n")
    started = time.time()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    (run.dir / "sim.log").write_text(r.stderr)
    status, message = "ok", ""
    if r.returncode != 0:
        status = "failed"
        message = f"gearbox sim exec exited with {r.returncode}: " + " | ".join(r.stderr.strip().splitlines()[-3:])
    return RunResult.of(run, status, r.returncode, started, message, client_records=count_lines(records))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="gearbox sim run",
        description="Run a lab scenario (docs/lab.md) in the simulator: QUIC on one path, several paths or a "
        "population, no root.",
    )
    p.add_argument("scenario", type=Path, help="scenario file (TOML, docs/lab.md)")
    p.add_argument("--out", type=Path, help="output folder (default out/sim/<scenario name>)")
    p.add_argument("--jobs", type=int, default=1, help="simulations at once (they share no clock: any number is fair)")
    p.add_argument("--force", action="store_true", help="replace the results already in --out")
    p.add_argument("--report", action="store_true", help="also write OUT/report.html")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    from gearbox.lab import runner
    from gearbox.lab.summary import format_table

    try:
        s = sc.load(args.scenario)
        out = args.out or Path("out") / "sim" / s.name
        outcome = runner.run_scenario(
            s,
            out,
            jobs=args.jobs,
            gearbox=find_gearbox(),
            force=args.force,
            progress=not args.no_progress,
            backend="sim",
        )
        print(format_table(outcome.summary))
        print(f"\nresults: {out / 'requests.parquet'}; summary: {out / 'summary.json'}")
        if args.report:
            from gearbox.lab.report import write_report

            print(f"report: {write_report(out)}")
    except (sc.ScenarioError, LabError) as e:
        print(f"gearbox sim run: error: {e}", file=sys.stderr)
        return 2
    failed = [r for r in outcome.results if r.status == "failed"]
    for r in failed:
        print(f"gearbox sim run: {r.run_id}: {r.message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
