"""`gearbox lab floo switches`: the report of the gear's own switches from the edge's
`cc_switch_effect` records (docs/floo.md "Switching with the gear in the loop"), on
invented records with known figures. The emulator runs themselves are `emulate.run`'s,
covered by test_floo.py's scenario test and the lab's emulator tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gearbox.floo import switches


def effect(frm: str, to: str, mode: str, before: tuple, after: tuple) -> dict:
    """A `cc_switch_effect` record; each side (sent, lost, sRTT ms, cwnd bytes)."""

    def side(v: tuple) -> dict:
        sent, lost, srtt, cwnd = v
        return {
            "span_s": 1.0,
            "sent_bytes": sent,
            "lost_bytes": lost,
            "loss_rate": lost / sent if sent else None,
            "srtt_ms": srtt,
            "min_rtt_ms": 40.0,
            "cwnd_bytes": cwnd,
        }

    return {
        "side": "edge",
        "event": "cc_switch_effect",
        "conn_id": 1,
        "at_s": 12.0,
        "from": frm,
        "to": to,
        "mode": mode,
        "before": side(before),
        "after": side(after),
    }


FULL = [
    effect("cubic", "copa", "full", (100_000, 1_000, 50.0, 40_000), (100_000, 0, 40.0, 30_000)),
    effect("cubic", "copa", "full", (100_000, 0, 70.0, 60_000), (50_000, 2_000, 60.0, 50_000)),
    effect("copa", "bbr", "full", (0, 0, 45.0, 20_000), (10_000, 0, 44.0, 10_000)),
]
PART = [effect("cubic", "copa", "part", (200_000, 2_000, 60.0, 40_000), (100_000, 10_000, 90.0, 12_000))]


def test_the_table_is_each_pair_and_modes_switches_loss_and_rtt_before_and_after() -> None:
    rows = switches.summarise_effects(FULL + PART)
    got = [(r["from"], r["to"], r["mode"], r["switches"], r["traffic_before"], r["traffic_after"]) for r in rows]
    assert got == [
        ("copa", "bbr", "full", 1, 0, 1),
        ("cubic", "copa", "full", 2, 2, 2),
        ("cubic", "copa", "part", 1, 1, 1),
        ("all", "all", "full", 3, 2, 3),
        ("all", "all", "part", 1, 1, 1),
    ]
    cc_full = rows[1]
    assert cc_full["loss_before"] == pytest.approx(0.005)  # (1% + 0%) / 2
    assert cc_full["loss_after"] == pytest.approx(0.02)  # (0% + 4%) / 2
    assert cc_full["pooled_loss_before"] == pytest.approx(0.005)  # 1 kB of 200 kB
    assert cc_full["pooled_loss_after"] == pytest.approx(2 / 150)  # 2 kB of 150 kB
    assert (cc_full["sent_before_kb"], cc_full["sent_after_kb"]) == (100.0, 75.0)
    assert (cc_full["srtt_before_ms"], cc_full["srtt_after_ms"]) == (60.0, 50.0)
    assert (cc_full["cwnd_before_kb"], cc_full["cwnd_after_kb"]) == (50.0, 40.0)
    # A window without traffic has no loss rate; its sRTT still counts.
    assert rows[0]["loss_before"] is None and rows[0]["loss_after"] == 0.0
    assert rows[0]["pooled_loss_before"] is None
    full = rows[3]
    assert full["loss_before"] == pytest.approx(0.005) and full["loss_after"] == pytest.approx(0.04 / 3)
    assert full["srtt_before_ms"] == pytest.approx(55.0) and full["srtt_after_ms"] == pytest.approx(48.0)
    assert (rows[4]["loss_before"], rows[4]["loss_after"]) == (0.01, 0.1)


def test_the_report_is_rebuilt_from_the_runs_edge_records_with_each_schemes_rct(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    for scenario, schemes in (("00-wifi-a", {"floo": FULL[:2], "p-floo": PART}), ("00-mobile-b", {"floo": FULL[2:]})):
        for scheme, effects in schemes.items():
            run = out / "emulator-quic" / scenario / "lab" / "runs" / f"c000-{scheme}-r0"
            run.mkdir(parents=True)
            lines = [json.dumps({"event": "cc_decision", "choice": "copa"}), *map(json.dumps, effects)]
            lines.append(json.dumps({"side": "edge", "status": 200}))
            (run / "edge.jsonl").write_text("\n".join(lines) + "\n")
    rows = [
        {"scenario": "wifi-a", "scheme": "floo", "requests": 100, "errors": 0, "mean_rct_ms": 200.0},
        {"scenario": "wifi-a", "scheme": "p-floo", "requests": 100, "errors": 1, "mean_rct_ms": 250.0},
        {"scenario": "mobile-b", "scheme": "floo", "requests": 300, "errors": 0, "mean_rct_ms": 400.0},
        {"scenario": "mobile-b", "scheme": "p-floo", "requests": 300, "errors": 0, "mean_rct_ms": 450.0},
    ]
    with (out / "emulator-quic.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert switches.main(["--out", str(out), "--report-only"]) == 0
    text = (out / "switches.md").read_text()
    assert (
        "| cubic → copa | full | 2 | 2 / 2 | 0.50% | 2.00% | 0.50% / 1.33% | 100.0 / 75.0 | 60.0 | 50.0 | 50.0 | 40.0 |"
    ) in text
    assert (
        "| cubic → copa | part | 1 | 1 / 1 | 1.00% | 10.00% | 1.00% / 10.00% | 200.0 / 100.0 | "
        "60.0 | 90.0 | 40.0 | 12.0 |"
    ) in text
    assert (
        "| all | full | 3 | 2 / 3 | 0.50% | 1.33% | 0.50% / 1.25% | 66.7 / 53.3 | 55.0 | 48.0 | 40.0 | 30.0 |"
    ) in text
    # Floo: (100 x 200 + 300 x 400) / 400 = 350 ms; P-Floo 400 ms: -12.50%.
    assert "| floo | 2 | 400 | 0 | 350.0 | 300.0 | 3 |" in text
    assert "| p-floo | 2 | 400 | 1 | 400.0 | 350.0 | 1 |" in text
    assert "Floo's mean RCT is -12.50% against P-Floo's" in text
    with (out / "switches.csv").open() as f:
        per_switch = list(csv.DictReader(f))
    assert [(r["scheme"], r["scenario"], r["mode"]) for r in per_switch] == [
        ("floo", "00-mobile-b", "full"),
        ("floo", "00-wifi-a", "full"),
        ("floo", "00-wifi-a", "full"),
        ("p-floo", "00-wifi-a", "part"),
    ]
    assert per_switch[3]["after_loss_rate"] == "0.1"
    pytest.importorskip("matplotlib")
    assert (out / "switch-loss.png").stat().st_size > 0


def test_bad_schemes_and_a_missing_earlier_run_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        switches.main(["--out", str(tmp_path), "--schemes", "floo,vegas"])
    assert "unknown ['vegas']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        switches.main(["--out", str(tmp_path), "--report-only"])
    assert "emulator-quic.csv does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        switches.main(["--out", str(tmp_path), "--model-dir", str(tmp_path / "none")])
    assert "no policy.json" in capsys.readouterr().err


def test_the_switching_pick_takes_the_scenarios_where_floo_switches_in_the_simulator(tmp_path: Path) -> None:
    from gearbox.floo import evaluate

    pool = evaluate.held_apart(60)
    model = Path(__file__).resolve().parents[2] / "models" / "floo"
    found = switches.switching_scenarios(pool, 3, 60.0, 12.0, 7, model, tmp_path / "traces")
    assert 0 < len(found) <= 3
    assert [i for i, _, _ in found] == sorted(i for i, _, _ in found)
    assert all(n > 0 and pool[i] is scn for i, scn, n in found)
