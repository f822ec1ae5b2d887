"""`gearbox learn tcpwise` (also `python -m gearbox.tcpwise learn`): TCP WISE's Performance
Oriented Learning (§IV-C, Algorithm 1) over the edge's telemetry, writing the next Cwnd Table.

    gearbox learn tcpwise --telemetry DIR --table IN.toml --out OUT.toml   # the same, from the Rust binary
    python -m gearbox.tcpwise learn --telemetry DIR --table IN.toml --out OUT.toml [--since-ms T]
    python -m gearbox.tcpwise learn ... --every 60 [--iterations N]   # the loop, one decision per θ

One-shot (the default): one decision over the samples in DIR (every `*.jsonl`, or one file)
newer than `--since-ms`, plus those of `--carry FILE`; `--carry-out FILE` keeps the samples of
entries kept for too few samples for the next run, as the loop carries them (a scheduled job
whose windows do not overlap passes them on this way, through the table's policy folder).
`--every θ`: waits θ seconds (the online testing of Algorithm 1), reads
the records written since the last pass, decides, writes OUT, and goes on from the table it
wrote. Parameters: `--config FILE` (its `[tcpwise]` table, docs/tcpwise.md), `--fast-start`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gearbox.tcpwise.config import ConfigError, LearnConfig, load_config
from gearbox.tcpwise.learner import LearnResult, learn
from gearbox.tcpwise.records import IwSample, ReadStats, RecordError, TelemetryReader
from gearbox.tcpwise.table import CwndTable, TableError, read_table, write_table

LEARN_PROG = "gearbox learn tcpwise"


def _add_learn_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--telemetry", type=Path, required=True, help="folder of edge *.jsonl files, or one file")
    p.add_argument("--table", type=Path, required=True, help="the current Cwnd Table (TOML)")
    p.add_argument("--out", type=Path, required=True, help="where to write the next table (atomically)")
    p.add_argument("--since-ms", type=float, default=None, help="only records with time_unix_ms after this")
    p.add_argument(
        "--every",
        type=float,
        nargs="?",
        const=0.0,
        default=None,
        metavar="SECONDS",
        help="loop: one decision per θ seconds (alone: the config's theta_s, 60 s)",
    )
    p.add_argument("--iterations", type=int, default=None, help="with --every: stop after this many decisions")
    p.add_argument("--config", type=Path, default=None, help="TOML file whose [tcpwise] table sets the parameters")
    p.add_argument("--fast-start", action="store_true", help="start `others` from the fast start set (§IV-C3)")
    p.add_argument(
        "--carry",
        type=Path,
        default=None,
        help="samples a previous one-shot run kept (its --carry-out); absent file: none",
    )
    p.add_argument(
        "--carry-out",
        type=Path,
        default=None,
        help="write the samples of entries kept for too few samples here (JSON Lines), for the next run's --carry",
    )


def _parser(prog: str) -> argparse.ArgumentParser:
    """`python -m gearbox.tcpwise learn ...`; as `gearbox learn tcpwise ...` (prog), the learn
    command's options directly, since the Rust front door has already named the command."""
    fmt = argparse.RawTextHelpFormatter
    if prog == LEARN_PROG:
        parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=fmt)
        _add_learn_args(parser)
        parser.set_defaults(command="learn")
        return parser
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_learn_args(sub.add_parser("learn", help="write the next Cwnd Table from the edge's telemetry (Algorithm 1)"))
    return parser


def summary(result: LearnResult, stats: ReadStats) -> str:
    """One line per iteration: what was read, and what moved."""
    moved = sum(1 for d in result.decisions.values() if d.moved)
    return (
        f"table v{result.table.version}: {len(result.table.entries)} entries, {moved} moved; "
        f"{stats.samples} samples read ({stats.no_iw} without iw, {stats.not_edge} not edge requests, "
        f"{stats.no_latency} without latency, {stats.before_since} before --since-ms, {stats.torn} torn), "
        f"{result.stale} stale"
    )


def write_carry(samples: Sequence[IwSample], path: Path) -> None:
    """Carried samples as JSON Lines (one `IwSample` a line), written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(dataclasses.asdict(s), separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_carry(path: Path) -> list[IwSample]:
    """`write_carry`'s file (none if it does not exist); a bad line is a RecordError naming it."""
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            d["iw_set"] = tuple(int(x) for x in d["iw_set"])
            out.append(IwSample(**d))
        except (ValueError, TypeError, KeyError) as e:
            raise RecordError(f"{path}:{n}: not a carried sample ({e})") from e
    return out


def run_learn(
    telemetry: Path,
    table_path: Path,
    out: Path,
    config: LearnConfig,
    since_ms: float | None = None,
    every_s: float | None = None,
    iterations: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
    carry: Path | None = None,
    carry_out: Path | None = None,
) -> CwndTable:
    """The command: one decision, or one per θ with `every_s`; returns the last table written."""
    table = read_table(table_path, config.max_set)
    reader = TelemetryReader(telemetry, since_ms)
    carried: list[IwSample] = read_carry(carry) if carry is not None else []
    done = 0
    while True:
        if every_s is not None:
            sleep(every_s)
        samples, stats = reader.read_new()
        result = learn(table, carried + samples, config, int(time.time() * 1000))
        write_table(result.table, out, config.max_set)
        for key, d in result.decisions.items():
            if d.moved:
                log(f"  {key[0]} hour {'*' if key[1] is None else key[1]}: {d.reason}")
        log(f"{out}: {summary(result, stats)}")
        table, carried = result.table, result.carry
        if carry_out is not None:
            write_carry(carried, carry_out)
        done += 1
        if every_s is None or (iterations is not None and done >= iterations):
            return table


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    args = _parser(prog or "python -m gearbox.tcpwise").parse_args(argv)
    try:
        config = load_config(args.config) if args.config else LearnConfig()
        if args.fast_start:
            config = dataclasses.replace(config, fast_start=True)
        every = config.theta_s if args.every == 0.0 else args.every
        if every is not None and not every > 0:
            raise ConfigError(f"--every {every}: θ must be positive seconds")
        if args.iterations is not None and args.iterations < 1:
            raise ConfigError(f"--iterations {args.iterations}: at least 1")
        run_learn(
            args.telemetry,
            args.table,
            args.out,
            config,
            args.since_ms,
            every,
            args.iterations,
            carry=args.carry,
            carry_out=args.carry_out,
        )
    except (ConfigError, TableError, RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    # `gearbox learn tcpwise` (crates/gearbox-cli/src/learn_cmd.rs) says so in the environment.
    sys.exit(main(prog=LEARN_PROG if os.environ.get("GEARBOX_LEARN_PROG") == LEARN_PROG else None))
