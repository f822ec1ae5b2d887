"""`gearbox lab tcpwise evaluate` on a tiny grid (simulator only), and the simulator's per-connection
initial window from a Cwnd Table (`SimSession.set_cwnd_table`) that the evaluation stands on."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gearbox._native import SimSession
from gearbox.stats import percentile
from gearbox.tcpwise import evaluate
from gearbox.tcpwise.evaluate import BASE, Condition, latency_ms, sim_config, write_workload

TABLE = 'version = 4\ncap = 100\n[[cluster]]\nprefix = "10.0.0.0/24"\niw = [{a}, {b}]\n'


def test_each_connection_draws_its_iw_from_the_table_and_the_windows_really_apply(tmp_path: Path) -> None:
    workload = write_workload(tmp_path)
    s = SimSession(sim_config(Condition(10, 40, 0.0), workload, 240.0, seed=3, initial_window=10))
    s.advance(20.0)
    assert all("iw" not in r for r in s.take_records())
    s.set_cwnd_table(TABLE.format(a=4, b=60), seed=9)
    while not s.advance(60.0):
        pass
    recs = [r for r in s.take_records() if "iw" in r]
    assert len(recs) > 100
    by_iw: dict[int, list[float]] = {4: [], 60: []}
    for r in recs:
        assert r["iw"]["cluster"] == "10.0.0.0/24"
        assert r["iw"]["iw_set"] == [4, 60]
        assert r["iw"]["table_version"] == 4
        by_iw[r["iw"]["iw"]].append(latency_ms(r))
    # Both drawn, about half each (a fair coin over >100 connections).
    assert min(len(v) for v in by_iw.values()) > 0.3 * len(recs)
    # 100 KB at 10 Mbit/s, 40 ms: IW 4 needs several more slow-start rounds than IW 60.
    assert percentile(by_iw[4], 80) > percentile(by_iw[60], 80) + 40.0


def test_a_bad_table_is_refused_with_its_name_and_the_field() -> None:
    s = SimSession(sim_config(BASE, Path("search"), 1.0, seed=1))
    with pytest.raises(ValueError, match=r"my\.toml: .*iw\[1\]"):
        s.set_cwnd_table(TABLE.format(a=10, b=500), name="my.toml")
    s.set_cwnd_table(None)  # back to the config's window: allowed


def test_a_tiny_grid_gives_a_ground_truth_and_a_convergence_run(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    code = evaluate.main(
        [
            "--out",
            str(out),
            "--iws",
            "4,12,40",
            "--reps",
            "1",
            "--gt-seconds",
            "30",
            "--conditions",
            "figures",
            "--figures",
            "fig7-bandwidth",
            "--theta",
            "30",
            "--iterations",
            "3,3,2",
            "--s-min",
            "10",
            "--quiet",
        ]
    )
    assert code == 0
    truth = json.loads((out / "ground_truth.json").read_text())
    assert set(truth) == {"20Mbps-20ms-0%", "10Mbps-20ms-0%"}
    for t in truth.values():
        # 100 KB needs ~70 packets: IW 4 is never the best on these paths.
        assert t["best_iw"] in (12, 40)
    with (out / "ground_truth.csv").open() as f:
        gt = list(csv.DictReader(f))
    assert len(gt) == 2 * 3
    with (out / "convergence.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == list(range(1, 9))
    assert [r["condition"] for r in rows] == ["20Mbps-20ms-0%"] * 3 + ["10Mbps-20ms-0%"] * 3 + ["20Mbps-20ms-0%"] * 2
    # The startup set (5, 10) is tested first; the learner moves it after enough samples.
    assert rows[0]["iw_set"] == "[5, 10]"
    assert any(r["iw_set"] != "[5, 10]" for r in rows[1:])
    assert all(int(r["samples"]) > 20 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["figures"]["fig7-bandwidth"]["iterations_within_delta"]) == {
        "to_changed",
        "back_to_base",
        "from_start",
    }
    assert (out / "report.md").read_text().startswith("# TCP WISE evaluation")
    assert (out / "convergence.png").stat().st_size > 1000


def test_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        evaluate.main(["--out", str(tmp_path), "--iws", "0..5"])
    assert "--iws" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--out", str(tmp_path), "--figures", "fig12"])
    assert "unknown figure" in capsys.readouterr().err


def test_the_cli_dispatches_to_the_evaluation(gearbox_bin: Path) -> None:
    env = dict(os.environ, GEARBOX_PYTHON=os.environ.get("GEARBOX_PYTHON", sys.executable))
    p = subprocess.run(
        [str(gearbox_bin), "lab", "tcpwise", "evaluate", "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert "gearbox lab tcpwise evaluate" in p.stdout
    p = subprocess.run(
        [str(gearbox_bin), "lab", "tcpwise", "run"], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 2 and "the subcommand is `evaluate`" in p.stderr
