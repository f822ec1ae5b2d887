"""The emulator half of SAILfish's evaluation (`gearbox lab sailfish evaluate --emulator`):
the plan of loads and each scheme's `gearbox load` flags, and one tiny grid through the
real `gearbox emu` (root), edge and multipath client."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from gearbox._native import generate_page
from gearbox.lab import environment
from gearbox.sailfish import emulate
from gearbox.sailfish.evaluate import main as evaluate
from gearbox.sailfish.scenarios import TABLE_5_2, evaluation_page_seeds

REPO = Path(__file__).resolve().parents[2]


def test_every_scheme_loads_every_page_and_repetition_and_no_scheme_always_goes_first() -> None:
    schemes = ["sailfish", "minrtt", "mptcp"]
    pages = [(0, 11), (6, 17)]
    loads = emulate.plan(schemes, pages, reps=2)
    assert len(loads) == 3 * 2 * 2
    assert {(x.scheme, x.page_seed, x.rep) for x in loads} == {
        (s, p, r) for s in schemes for _, p in pages for r in range(2)
    }
    assert len({x.name for x in loads}) == len(loads)
    firsts = {loads[i].scheme for i in range(0, len(loads), len(schemes))}
    assert firsts == set(schemes)


def test_each_scheme_is_the_client_flags_a_user_would_give(tmp_path: Path) -> None:
    model = tmp_path / "my model"
    assert emulate.load_args("minrtt", model) == ["--paths", "$PATHS", "--scheduler", "minrtt"]
    assert emulate.load_args("sailfish", model)[-2:] == ["--sailfish-model", f"'{model}'"]
    assert emulate.load_args("mptcp", model) == ["--proto", "tcp", "--mptcp", "--local-addr", "$A0"]
    assert emulate.load_args("path1", model) == ["--proto", "quic", "--local-addr", "$A1"]
    with pytest.raises(ValueError, match="valid: sailfish"):
        emulate.load_args("fastest", model)
    script = emulate.client_script(emulate.plan(["mptcp"], [(0, 5)], 1), Path("/bin/gearbox"), model, tmp_path)
    # The kernel joins a second subflow over path 1 to every MPTCP connection from path 0.
    assert 'ip mptcp endpoint add "$A1" dev gbx0 subflow' in script
    assert "one mptcp-p5-r0 --page-seed 5 --proto tcp --mptcp --local-addr $A0" in script


def test_the_emulator_pair_is_the_simulators_paths_on_a_multipath_topology() -> None:
    pair = TABLE_5_2[1]  # 38 Mbit/s beside 3 Mbit/s
    cfg = emulate.emu_config(pair)
    assert cfg["topology"] == "multipath"
    assert [p["downlink"]["rate_bps"] for p in cfg["path"]] == [38_000_000, 3_000_000]
    assert [p["uplink"]["delay_ms"] for p in cfg["path"]] == [17.0, 9.0]
    assert cfg["path"][0]["downlink"]["loss"] == {"model": "bernoulli", "loss_rate": 0.0191}


def test_mptcp_is_an_emulator_scheme_and_bad_pages_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        evaluate(["--schemes", "minrtt,mptcp", "--pairs", "t52-homogeneous"])
    assert "--emulator" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate(["--pages", "0,9"])
    assert "--pages" in capsys.readouterr().err


def test_every_scheme_loads_every_object_of_a_page_over_two_emulated_paths(
    gearbox_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Table 5.2 pair, the smallest test page, every scheme once: the real edge and
    client in `gearbox emu` (root). Every load completes with every object, no request is
    lost or fails, and the times are those of a page crossing the paths."""
    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("GEARBOX_BIN", str(gearbox_bin))
    pair = TABLE_5_2[0]  # 15 Mbit/s, 7 ms RTT beside 5 Mbit/s, 25 ms RTT
    out = tmp_path / "eval"
    args = ["--emulator", "--pairs", pair.name, "--pages", "0", "--reps", "1"]
    args += ["--model-dir", str(REPO / "models/sailfish"), "--out", str(out)]
    assert evaluate(args) == 0
    with (out / "loads.csv").open() as f:
        rows = list(csv.DictReader(f))
    schemes = list(emulate.SCHEMES)
    assert sorted(r["scheme"] for r in rows) == sorted(schemes)
    objects = len(generate_page(evaluation_page_seeds()[0])["objects"])
    min_rtt_ms = min(2 * p.latency_ms for p in pair.paths)
    for r in rows:
        s = r["scheme"]
        assert r["exit"] == "0", f"{s}: gearbox load exited with {r['exit']}"
        assert int(r["objects"]) == objects
        assert int(r["objects_done"]) == objects and r["complete"] == "True", f"{s}: {r}"
        assert int(r["failed_attempts"]) == 0, f"{s}: a request failed: {r}"
        mean, page = float(r["mean_stream_ms"]), float(r["page_load_ms"])
        assert mean >= min_rtt_ms, f"{s}: a mean stream of {mean} ms is under the paths' RTT"
        assert page >= mean, f"{s}: page load {page} ms before its mean stream {mean} ms"
        if s == "mptcp":
            assert r["streams_on_path0"] == ""  # one connection; the kernel spreads its packets
        else:
            assert 0 <= int(r["streams_on_path0"]) <= objects
    # Each multipath load's records name the scheduler that placed every object.
    folder = out / "emulator" / pair.name / "loads"
    for s in emulate.SCHEDULERS:
        (telemetry,) = folder.glob(f"{s}-p*-r0.jsonl")
        records = [json.loads(line) for line in telemetry.read_text().splitlines() if line.strip()]
        assert len(records) == objects
        for rec in records:
            assert rec["protocol"] == "h3" and re.match(rf"{s}:", rec["path_decision"]), rec
    mptcp = [json.loads(line) for line in next(folder.glob("mptcp-*.jsonl")).read_text().splitlines()]
    assert {rec["protocol"] for rec in mptcp} == {"h2"}
    summary = json.loads((out / "summary.json").read_text())
    assert {s: v["timed_out"] for s, v in summary["schemes"].items()} == dict.fromkeys(schemes, 0)
    report = (out / "report.md").read_text()
    assert "in the emulator" in report and all(f"| {s} | 1 |" in report for s in schemes)


def test_ctrl_c_stops_the_emulation_and_removes_its_namespaces(gearbox_bin: Path, tmp_path: Path) -> None:
    """SIGINT once the first load has finished: the evaluation exits 130 without a
    traceback, and the namespaces its `gearbox emu` made are gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "gearbox.sailfish.evaluate", "--emulator", "--pairs", TABLE_5_2[0].name]
    cmd += ["--schemes", "minrtt,round-robin", "--reps", "5", "--out", str(out)]
    proc = subprocess.Popen(cmd, env={**os.environ, "GEARBOX_BIN": str(gearbox_bin)}, stderr=subprocess.PIPE, text=True)
    progress = out / "emulator" / TABLE_5_2[0].name / "progress"
    emu_pids: set[int] = set()
    while proc.poll() is None and not (progress.exists() and progress.read_text().strip()):
        emu_pids |= {c.pid for c in psutil.Process(proc.pid).children() if "emu" in c.cmdline()}
        time.sleep(0.2)
    assert proc.poll() is None, f"the evaluation ended before its first load: {proc.stderr.read()}"
    assert emu_pids, "no gearbox emu was running"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    left = [n for n in names.split() if any(n.startswith(f"gbx{pid}x") for pid in emu_pids)]
    assert not left, f"namespaces left behind: {left}"
    assert all(not psutil.pid_exists(pid) for pid in emu_pids)
