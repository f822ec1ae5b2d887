"""TCP WISE's population evaluation (§V-B) in the simulator: the prefixes' paths, the
Riptide-style baseline, and a tiny end-to-end run of the four policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gearbox.tcpwise import evaluate, population
from gearbox.tcpwise.config import LearnConfig
from gearbox.tcpwise.population import PrefixPath, Setup, draw_paths


def test_paths_are_drawn_from_the_documented_ranges_and_the_seed_repeats_them() -> None:
    a, b, c = draw_paths(300, 1), draw_paths(300, 1), draw_paths(300, 2)
    assert a == b and a != c
    assert all(0.3 <= p.rate_mbps <= 50 and 10 <= p.rtt_ms <= 500 and 0 <= p.loss <= 0.03 for p in a)
    assert 0.45 < sum(p.loss == 0 for p in a) / len(a) < 0.75
    assert {p.cls for p in a} == {"small", "medium", "large"}
    assert all(p.buffer_packets >= 4 for p in a)
    assert [p.prefix for p in a[255:258]] == ["100.64.255.0/24", "100.65.0.0/24", "100.65.1.0/24"]


def _setup(paths: list[PrefixPath], intervals: int = 2) -> Setup:
    learn = LearnConfig(delta=5, s_min=5, theta_s=30.0, fast_start=True, per_hour=False)
    return Setup(tuple(paths), 30.0, 2.0, intervals, 1, 3, learn)


def test_riptide_gives_a_fat_long_path_a_larger_window_than_a_thin_one() -> None:
    paths = [PrefixPath(0, 0.5, 40.0, 0.0, 2.0), PrefixPath(1, 50.0, 200.0, 0.0, 2.0)]
    measured, iws = population.run_riptide(_setup(paths))
    responses = measured.responses
    assert responses and {r.prefix for r in responses} == {0, 1}
    # The second interval ran on the windows the first one's connections ended with.
    assert set(iws) == {0, 1}
    assert iws[1] > iws[0], iws
    assert {r.iw for r in responses if r.prefix == 0} != {10} or iws[0] == 10


def test_a_tiny_population_evaluation_compares_the_five_policies(tmp_path: Path) -> None:
    out = tmp_path / "pop"
    code = evaluate.main(
        [
            "--population",
            "--out",
            str(out),
            "--prefixes",
            "4",
            "--rate",
            "2",
            "--theta",
            "30",
            "--intervals",
            "3",
            "--eval-intervals",
            "1",
            "--s-min",
            "5",
            "--oracle-iws",
            "5,10,40",
            "--quiet",
        ]
    )
    assert code == 0
    summary = json.loads((out / "population.json").read_text())
    assert set(summary["overall"]) == {"iw10", "riptide", "tcpwise", "tcpwise_guard", "oracle"}
    # The same requests under every policy in the measured interval: answered, or cut off by
    # the time limit (a thin prefix at 2 requests/s can queue past it).
    counts = {name: s["responses"] + (s["unfinished"] or 0) for name, s in summary["overall"].items()}
    learned = {c for name, c in counts.items() if name != "oracle"}
    assert counts["iw10"] > 20 and len(learned) == 1 and counts["oracle"] <= counts["iw10"], counts
    rows = summary["per_prefix"]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        # The hindsight oracle is never worse on a prefix than IW 10, which it could choose.
        assert r["oracle_p80_ms"] <= r["iw10_p80_ms"]
        assert r["oracle_iw"] in (5, 10, 40) and r["iw10_iw"] == 10
    assert sum(summary["iw_distribution"]["tcpwise"].values()) == 4
    # TCP WISE decided at least once: its table grew past the startup's `others`, or moved it.
    assert summary["tcpwise_intervals"][-1]["responses"] > 0
    text = (out / "population.md").read_text()
    assert "| tcpwise |" in text and "retransmission rate" in text


def test_bad_population_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        evaluate.main(["--population", "--intervals", "2", "--eval-intervals", "3"])
    assert "--eval-intervals" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--population", "--oracle-iws", "2,10"])
    assert "at least 3" in capsys.readouterr().err
