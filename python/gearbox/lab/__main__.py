"""`gearbox lab` (also `python -m gearbox.lab`): scenarios, experiment runs, reports.

    gearbox lab run SCENARIO [--out DIR] [--jobs N] [--force] [--report] [--realtime-endpoints]
    gearbox lab plan SCENARIO [--out DIR]
    gearbox lab report OUT_DIR
    gearbox lab collect OUT_DIR
    gearbox lab demo [--out out/lab-demo]
    gearbox lab wisetrans dataset|train|evaluate|all|demo   (python/gearbox/wisetrans)
    gearbox lab floo evaluate|seeds|switches                (python/gearbox/floo)
    gearbox lab sailfish evaluate                           (python/gearbox/sailfish)
    gearbox lab tcpwise evaluate                            (python/gearbox/tcpwise/evaluate.py)
    gearbox lab flexhttp dataset|train|evaluate             (python/gearbox/flexhttp/lab.py)

The schema of scenario files and the layout of OUT_DIR are in docs/lab.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gearbox.lab import scenario as sc
from gearbox.lab.environment import REPO_ROOT, LabError

DESCRIPTION = """\
The gearbox lab: run every policy of a scenario on identical emulated network
conditions (gearbox emu; needs root), collect both ends' telemetry into one table,
and compare request completion times against the baselines. Schema: docs/lab.md."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gearbox lab", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    r = sub.add_parser("run", help="run a scenario (needs root) and print the per-policy RCT table")
    r.add_argument("scenario", type=Path, help="scenario file (TOML, docs/lab.md)")
    r.add_argument("--out", type=Path, help="output folder (default out/lab/<scenario name>)")
    r.add_argument(
        "--jobs", type=int, default=1, help="emulations at once (default 1; more shares the CPUs between runs)"
    )
    r.add_argument("--force", action="store_true", help="replace the results already in --out")
    r.add_argument("--report", action="store_true", help="also write OUT/report.html")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument(
        "--realtime-endpoints",
        action="store_true",
        help="run each edge and client under SCHED_FIFO so a busy machine adds no delay (gearbox emu, docs/emu.md)",
    )

    pl = sub.add_parser("plan", help="check a scenario and list its conditions and runs (no root needed)")
    pl.add_argument("scenario", type=Path)
    pl.add_argument("--out", type=Path, help="also write the plan and each condition's EMU.toml here")

    rep = sub.add_parser("report", help="write OUT_DIR/report.html from a finished run")
    rep.add_argument("out", type=Path, metavar="OUT_DIR")

    c = sub.add_parser("collect", help="rebuild the results table and summary of OUT_DIR from its runs' telemetry")
    c.add_argument("out", type=Path, metavar="OUT_DIR")

    d = sub.add_parser("demo", help="run scenarios/demo.toml (needs root), print the table, write the report")
    d.add_argument("--out", type=Path, default=Path("out/lab-demo"), help="output folder (default out/lab-demo)")
    d.add_argument("--scenario", type=Path, help="another scenario instead of scenarios/demo.toml")
    d.add_argument("--jobs", type=int, default=1)
    d.add_argument("--no-progress", action="store_true")

    sub.add_parser("wisetrans", help="WiseTrans data, training, evaluation, demo (gearbox lab wisetrans --help)")
    sub.add_parser("floo", help="Floo's evaluation (gearbox lab floo evaluate|seeds|switches --help)")
    sub.add_parser("flexhttp", help="FlexHTTP data, classifiers, evaluation (gearbox lab flexhttp --help)")
    sub.add_parser("sailfish", help="SAILfish's evaluation, simulated or emulated (lab sailfish evaluate --help)")
    sub.add_parser("tcpwise", help="TCP WISE: ground truth, convergence, population (lab tcpwise evaluate --help)")
    return p


def _run(
    scenario_path: Path,
    out: Path | None,
    jobs: int,
    force: bool,
    report: bool,
    progress: bool,
    realtime_endpoints: bool = False,
) -> int:
    from gearbox.lab import runner
    from gearbox.lab.summary import format_table

    s = sc.load(scenario_path)
    out = out or Path("out") / "lab" / s.name
    outcome = runner.run_scenario(
        s, out, jobs=jobs, force=force, progress=progress, realtime_endpoints=realtime_endpoints
    )
    print(format_table(outcome.summary))
    print(
        f"\nresults: {out / 'requests.parquet'}, {out / 'results.duckdb'}; "
        f"summary: {out / 'summary.csv'}, {out / 'summary.json'}"
    )
    if report:
        from gearbox.lab.report import write_report

        print(f"report: {write_report(out)}")
    failed = [r for r in outcome.results if r.status == "failed"]
    return 1 if failed else 0


def _plan(scenario_path: Path, out: Path | None) -> int:
    from gearbox.lab import planning

    s = sc.load(scenario_path)
    if out is not None:
        conds, runs, _ = planning.prepare(s, out, gearbox=None)
    else:
        conds, runs = planning.plan(s, Path("out") / "lab" / s.name)
    print(
        f"{s.name}: topology {s.topology}, workload {Path(s.workload.name).name}, {s.duration_s:g} s per run "
        f"(limit {s.run_timeout_s:g} s), {s.repetitions} repetition(s), seed {s.seed}"
    )
    print("policies: " + ", ".join(f"{p.name} ({p.proto}{', baseline' if p.baseline else ''})" for p in s.policies))
    print(f"{len(conds)} condition(s):")
    for c in conds:
        print(f"  {c.id}  {c.label}")
    est = len(runs) * (s.duration_s + 3.0)
    print(f"{len(runs)} runs, about {est / 60:.1f} min with --jobs 1")
    if out is not None:
        print(
            f"wrote {out / 'plan.json'}, {out / 'conditions.json'} and {out / 'conditions'}/*.emu.toml "
            "(preset traces are generated by `run`)"
        )
    return 0


def _demo(args: argparse.Namespace) -> int:
    path = args.scenario or REPO_ROOT / "scenarios" / "demo.toml"
    if not path.is_file():
        raise LabError(f"the demo scenario {path} is missing (it ships in the repository's scenarios/)")
    code = _run(path, args.out, args.jobs, force=True, report=True, progress=not args.no_progress)
    return code


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["floo"]:  # Floo's evaluation parses its own arguments
        if raw[1:2] == ["seeds"]:
            from gearbox.floo.seeds import main as floo_seeds

            return floo_seeds(raw[2:])
        if raw[1:2] == ["switches"]:
            from gearbox.floo.switches import main as floo_switches

            return floo_switches(raw[2:])
        if raw[1:2] != ["evaluate"]:
            print(
                "gearbox lab floo: the subcommands are `evaluate`, `seeds` and `switches` "
                "(gearbox lab floo evaluate --help)",
                file=sys.stderr,
            )
            return 2
        from gearbox.floo.evaluate import main as floo_evaluate

        return floo_evaluate(raw[2:])
    if raw[:1] == ["flexhttp"]:  # FlexHTTP's lab parses its own arguments
        from gearbox.flexhttp.lab import main as flexhttp_main

        return flexhttp_main(raw[1:])
    if raw[:1] == ["sailfish"]:  # SAILfish's evaluation parses its own arguments
        if raw[1:2] != ["evaluate"]:
            print(
                "gearbox lab sailfish: the subcommand is `evaluate` (gearbox lab sailfish evaluate --help)",
                file=sys.stderr,
            )
            return 2
        from gearbox.sailfish.evaluate import main as sailfish_evaluate

        return sailfish_evaluate(raw[2:])
    if raw[:1] == ["tcpwise"]:  # TCP WISE's evaluation parses its own arguments
        if raw[1:2] != ["evaluate"]:
            print(
                "gearbox lab tcpwise: the subcommand is `evaluate` (gearbox lab tcpwise evaluate --help)",
                file=sys.stderr,
            )
            return 2
        from gearbox.tcpwise.evaluate import main as tcpwise_evaluate

        return tcpwise_evaluate(raw[2:])
    if raw[:1] == ["wisetrans"]:  # the WiseTrans pipelines parse their own arguments
        from gearbox.wisetrans.__main__ import main as wisetrans_main

        return wisetrans_main(raw[1:])
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(
                args.scenario,
                args.out,
                args.jobs,
                args.force,
                args.report,
                not args.no_progress,
                args.realtime_endpoints,
            )
        if args.command == "plan":
            return _plan(args.scenario, args.out)
        if args.command == "collect":
            from gearbox.lab.collect import collect
            from gearbox.lab.summary import format_table, summarize

            collect(args.out)
            print(format_table(summarize(args.out)))
            return 0
        if args.command == "report":
            from gearbox.lab.report import write_report

            print(f"report: {write_report(args.out)}")
            return 0
        if args.command == "demo":
            return _demo(args)
    except (sc.ScenarioError, LabError) as e:
        print(f"gearbox lab: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(
            f"gearbox lab: a lab dependency is missing ({e}): run scripts/setup.sh "
            "(or .venv/bin/pip install duckdb pyarrow numpy matplotlib tqdm)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # e.g. `gearbox lab plan x.toml | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(
            "gearbox lab: interrupted; finished runs are in the output folder (`gearbox lab collect OUT`)",
            file=sys.stderr,
        )
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
