"""The emulator half of `gearbox lab sailfish evaluate` (`--emulator`): the real `gearbox
edge` and multipath `gearbox load` over two emulated paths (SAILfish §5.2-5.3, on the
real stack instead of the simulator).

**One emulation per path pair.** Each pair becomes a `gearbox emu` run with the
`multipath` topology (docs/emu.md: two pairs of links, the client namespace holding one
address per path) whose server namespace runs one edge and whose client namespace runs a
shell script of page loads, one `gearbox load --page-seed P` process per scheme x page x
repetition, one after another, each on fresh connections. Rejected: one emulation per
load, as `gearbox lab run` does per run; namespace and relay set-up would cost more than
the loads themselves (a load takes 1-3 s), and the loads of one pair share nothing but the
idle links.

**Schemes.** The heuristics and SAILfish are `gearbox load --paths A,B --scheduler NAME`
(HTTP/3 on one QUIC connection per path, each request on the path the scheduler picks;
`sailfish` with `--sailfish-model DIR`). `mptcp` is the real peer a user would pick
instead: HTTP/2 over the kernel's Multipath TCP with its default scheduler, the lab set-up
of `crates/gearbox-emu/tests/multipath.rs` (the edge's listener is an MPTCP socket
(`--mptcp`; plain TCP and QUIC are served as before), the client namespace has path 1's
address as a subflow endpoint, so the kernel joins a second subflow over path 1 to the
connection opened from path 0). `path0` / `path1`: HTTP/3 on one path only.

**What is measured.** From each load's client records (docs/telemetry.md): a stream's
completion time is its `rct_ms` less the handshake it waited for (`handshake_ms` when
the request opened its connection: HTTP/2's first request; the multipath loads open
their QUIC connections before the first request), so every scheme's streams start on an
open connection, as in the simulator; the page load time is the client's (`gearbox load
--json`, from the start of the load to its last object, connection set-up included).
A load is complete when every object of the page has a successful response; a failed
attempt (a record with an error) is reported beside it.

With `realtime_endpoints` the edge and the loads run under SCHED_FIFO below the relay
(`gearbox emu --realtime-endpoints`, docs/emu.md): on a busy machine a user-space QUIC
client waiting for a CPU would otherwise be timed against a kernel TCP one that does not.

Namespaces are named per run by `gearbox emu` (unique) and removed when it exits, fails
or is interrupted: on Ctrl-C or SIGTERM this module stops the emulation with SIGTERM and
waits for its clean-up (its watchdog removes the namespaces even if it is killed).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gearbox._native import generate_page
from gearbox.lab.environment import check_emulator, find_gearbox
from gearbox.lab.scenario.emu import compile_path, dumps_toml
from gearbox.sailfish.scenarios import PAGE_SIZES, PathPair

PORT = 4433
SCHEDULERS = ("sailfish", "minrtt", "ecf", "blest", "round-robin", "single-best")
SCHEMES = (*SCHEDULERS, "mptcp")
SINGLE = ("path0", "path1")
# A load that has not finished in this long is stopped and counted incomplete.
LOAD_LIMIT_S = 120
_OBJECT = re.compile(r"[?&]object=(\d+)\.")


@dataclass(frozen=True)
class Load:
    """One page load of the plan: its name (files under the pair's `loads/`)."""

    scheme: str
    page_index: int
    page_seed: int
    rep: int

    @property
    def name(self) -> str:
        return f"{self.scheme}-p{self.page_seed}-r{self.rep}"


def emu_config(pair: PathPair) -> dict:
    """The `gearbox emu` config (docs/emu.md) of a pair: topology `multipath`, path i's
    links compiled from the pair's path i as in the simulator's config."""

    def no_trace(_ref, _where):
        raise ValueError("SAILfish's paths have fixed rates, not traces")

    paths = []
    for i, p in enumerate(pair.paths):
        links = compile_path(p.spec(f"path{i}"), no_trace, ("path", i))
        paths.append({"name": f"path{i}", "uplink": links["uplink"], "downlink": links["downlink"]})
    return {"topology": "multipath", "path": paths}


def load_args(scheme: str, model_dir: Path) -> list[str]:
    """The `gearbox load` flags of a scheme; `$A0` and `$A1` are the client's path
    addresses and `$PATHS` both, set by the client script."""
    if scheme == "sailfish":
        return ["--paths", "$PATHS", "--scheduler", "sailfish", "--sailfish-model", shlex.quote(str(model_dir))]
    if scheme in SCHEDULERS:
        return ["--paths", "$PATHS", "--scheduler", scheme]
    if scheme == "mptcp":
        return ["--proto", "tcp", "--mptcp", "--local-addr", "$A0"]
    if scheme in SINGLE:
        return ["--proto", "quic", "--local-addr", f"$A{SINGLE.index(scheme)}"]
    raise ValueError(f"unknown scheme {scheme!r}; valid: {', '.join((*SCHEMES, *SINGLE))}")


def plan(schemes: list[str], pages: list[tuple[int, int]], reps: int) -> list[Load]:
    """Every scheme x page x repetition; within a page and repetition the schemes take
    turns going first, so no scheme always runs right after the same one."""
    loads = []
    n = 0
    for rep in range(reps):
        for page_index, seed in pages:
            order = schemes[n % len(schemes) :] + schemes[: n % len(schemes)]
            loads += [Load(s, page_index, seed, rep) for s in order]
            n += 1
    return loads


MPTCP_LIMITS = "ip mptcp limits set subflow 2 add_addr_accepted 2"


def client_script(loads: list[Load], gearbox: Path, model_dir: Path, folder: Path) -> str:
    """The shell script of the client namespace: the MPTCP endpoint, then every load."""
    q = shlex.quote
    gb = q(str(gearbox))
    d = folder / "loads"
    lines = [
        "set -u",
        'PATHS="$GEARBOX_CLIENT_ADDRS"',
        'A0="${PATHS%%,*}"',
        'A1="${PATHS#*,}"',
        f"{MPTCP_LIMITS}",
        'ip mptcp endpoint add "$A1" dev gbx0 subflow',
        "one() {",
        "  name=$1; shift",
        f"  timeout {LOAD_LIMIT_S} {gb} load --workload page --target https://$GEARBOX_SERVER_ADDR:{PORT} --insecure "
        f'--json --telemetry {q(str(d))}/"$name".jsonl "$@" > {q(str(d))}/"$name".json 2> {q(str(d))}/"$name".log',
        f'  echo "$name $?" >> {q(str(folder / "progress"))}',
        "}",
    ]
    for load in loads:
        args = " ".join(load_args(load.scheme, model_dir))
        lines.append(f"one {load.name} --page-seed {load.page_seed} {args}")
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


class Interrupted(Exception):
    """SIGTERM while an emulation ran (SIGINT is KeyboardInterrupt)."""


def run_pair(
    pair: PathPair,
    loads: list[Load],
    model_dir: Path,
    folder: Path,
    gearbox: Path,
    log=lambda m: print(m, file=sys.stderr),
    realtime_endpoints: bool = False,
) -> dict[str, int]:
    """Runs every load of `pair` in one emulation; returns each load's exit status (the
    `timeout` wrapper's 124 when it hung), missing for loads that never ran.
    `realtime_endpoints`: `gearbox emu --realtime-endpoints` (docs/emu.md)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "loads").mkdir(exist_ok=True)
    for old in [*(folder / "loads").glob("*"), folder / "progress"]:
        old.unlink(missing_ok=True)  # gearbox load appends to its telemetry
    cert, key = folder / "cert.pem", folder / "key.pem"
    if not (cert.exists() and key.exists()):
        r = subprocess.run(
            [str(gearbox), "cert", "--name", "10.0.0.1", "--cert", str(cert), "--key", str(key)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"gearbox cert failed: {r.stderr.strip()}")
    (folder / "emu.toml").write_text(dumps_toml(emu_config(pair)))
    (folder / "client.sh").write_text(client_script(loads, gearbox, model_dir, folder))
    q = shlex.quote
    server = (
        f"{MPTCP_LIMITS} && exec {q(str(gearbox))} edge --mptcp --listen $GEARBOX_SERVER_ADDR:{PORT} "
        f"--cert {q(str(cert))} --key {q(str(key))}"
    )
    limit = len(loads) * (LOAD_LIMIT_S + 5) + 60
    cmd = [str(gearbox), "emu", "--config", str(folder / "emu.toml"), "--server", server]
    cmd += ["--client", f"sh {q(str(folder / 'client.sh'))}", "--duration-s", str(limit)]
    cmd += ["--ready-ports", f"{PORT}/tcp,{PORT}/udp"]
    if realtime_endpoints:
        cmd.append("--realtime-endpoints")
    (folder / "command.txt").write_text(shlex.join(cmd) + "\n")

    def on_term(_signum, _frame):
        raise Interrupted()

    def on_int(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    # Python raises KeyboardInterrupt on SIGINT only when SIGINT was not ignored at its
    # start, and a shell ignores it for the commands it starts in the background (`cmd &`
    # without job control, as CI scripts and nohup do): Ctrl-C and `kill -INT` must stop
    # the emulation there too.
    previous_int = signal.signal(signal.SIGINT, on_int) if _main_thread() else None
    progress = folder / "progress"
    shown = 0
    with (folder / "emu.log").open("wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                done = _count(progress)
                if done >= shown + max(1, len(loads) // 10):
                    shown = done
                    log(f"sailfish evaluate: emulator {pair.name}: {done}/{len(loads)} loads")
        except (KeyboardInterrupt, Interrupted):
            log(f"sailfish evaluate: interrupted; stopping the emulation of {pair.name} (its namespaces go too)")
            _stop(proc)
            raise
        finally:
            if proc.poll() is None:
                _stop(proc)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if previous_int is not None:
                signal.signal(signal.SIGINT, previous_int)
    if proc.returncode != 0:
        tail = (folder / "emu.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"gearbox emu for {pair.name} exited with {proc.returncode}: " + " | ".join(tail))
    status = {}
    for line in progress.read_text().splitlines() if progress.exists() else []:
        name, _, code = line.partition(" ")
        status[name] = int(code) if code.strip().lstrip("-").isdigit() else -1
    return status


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _count(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to `gearbox emu` (it kills what runs in its namespaces and deletes them),
    then SIGKILL if it has not gone in 30 s (its watchdog then cleans up)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(load: Load, folder: Path, status: int | None) -> dict:
    """One load's row: stream completion times and page load time from its records, and
    whether every object of the page arrived."""
    loads = folder / "loads"
    objects = len(generate_page(load.page_seed)["objects"])
    records = []
    telemetry = loads / f"{load.name}.jsonl"
    if telemetry.exists():
        for line in telemetry.read_text().splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    streams: dict[int, float] = {}
    failed, on_path0, placed = 0, 0, 0
    for r in records:
        m = _OBJECT.search(r.get("url") or "")
        if r.get("error") is not None or r.get("status") != 200 or m is None or r.get("rct_ms") is None:
            failed += 1
            continue
        wait = r.get("handshake_ms") if r.get("new_connection") else None
        streams[int(m.group(1))] = float(r["rct_ms"]) - float(wait or 0.0)
        if r.get("path_index") is not None:
            placed += 1
            on_path0 += int(r["path_index"] == 0)
    page_load = math.nan
    try:
        summary = json.loads((loads / f"{load.name}.json").read_text())
        if summary.get("page_load", {}).get("loads") == 1:
            page_load = float(summary["page_load"]["mean_ms"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        pass
    values = list(streams.values())
    return {
        "scheme": load.scheme,
        "page": load.page_seed,
        "rep": load.rep,
        "exit": status,
        "objects": objects,
        "objects_done": len(streams),
        "complete": len(streams) == objects and math.isfinite(page_load),
        "failed_attempts": failed,
        "mean_stream_ms": sum(values) / len(values) if values else math.nan,
        "page_load_ms": page_load,
        "streams_on_path0": on_path0 if placed else None,
        "streams_ms": values,
    }


def evaluate(
    pairs: list[PathPair],
    schemes: list[str],
    pages: list[tuple[int, int]],
    reps: int,
    model_dir: Path,
    out: Path,
    gearbox: Path | None = None,
    log=lambda m: print(m, file=sys.stderr),
    realtime_endpoints: bool = False,
) -> list[dict]:
    """Every scheme on every pair x page x repetition in the emulator (module doc); one
    row per load with the pair's name and class added (`streams_ms` holds every stream's
    completion time). `realtime_endpoints`: the edge and the loads under SCHED_FIFO
    below the relay (`gearbox emu --realtime-endpoints`), so that a busy machine adds no
    scheduling delay to what they measure."""
    check_emulator()
    unknown = [s for s in schemes if s not in (*SCHEMES, *SINGLE)]
    if unknown:
        raise ValueError(f"unknown emulator schemes {unknown}; valid: {', '.join((*SCHEMES, *SINGLE))}")
    enabled = Path("/proc/sys/net/mptcp/enabled")
    if "mptcp" in schemes and (not enabled.exists() or enabled.read_text().strip() != "1"):
        raise RuntimeError("the mptcp scheme needs the kernel's MPTCP: `sysctl -w net.mptcp.enabled=1`")
    gearbox = (gearbox or find_gearbox()).resolve()
    if "/target/debug/" in str(gearbox):
        log(
            f"sailfish evaluate: using the debug build {gearbox}; its edge and client are slow, so the times "
            "are inflated: `cargo build --release -p gearbox-cli` for numbers to report"
        )
    model_dir = model_dir.resolve()
    rows = []
    loads = plan(schemes, pages, reps)
    for i, pair in enumerate(pairs):
        folder = (out / "emulator" / pair.name).resolve()
        log(f"sailfish evaluate: emulator {i + 1}/{len(pairs)}: {pair.name}, {len(loads)} page loads")
        status = run_pair(pair, loads, model_dir, folder, gearbox, log, realtime_endpoints)
        for load in loads:
            row = measure(load, folder, status.get(load.name))
            rows.append(
                {
                    "pair": pair.name,
                    "class": pair.cls,
                    "page_files": row["objects"],
                    "size": PAGE_SIZES[load.page_index],
                    **row,
                }
            )
    return rows
