"""TCP WISE's ground truth on kernel TCP in the emulator (python/gearbox/tcpwise/emulate.py):
the lab scenario it writes is one the lab accepts, with one HTTP/2 policy per IW pinned by
its own Cwnd Table, loss on the response direction only; a sweep refuses runs in which the
kernel applied another IW. (The sweep itself runs in the emulator: docs/tcpwise.md.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gearbox.lab import scenario as sc
from gearbox.tcpwise import emulate
from gearbox.tcpwise.evaluate import Condition, write_workload


def test_the_scenario_pins_one_iw_per_http2_policy_and_loses_only_responses(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    for iw in (10, 40):
        (tables / f"iw{iw}.toml").write_text(emulate.table_text(iw))
    write_workload(tmp_path)
    file = tmp_path / "scenario.toml"
    file.write_text(emulate.lab_scenario(Condition(20, 20, 0.1), (10, 40), tables, 30.0, 3))
    s = sc.load(file)
    policies = {p.name: p for p in s.policies}
    assert set(policies) == {"iw10", "iw40"}
    assert all(p.proto == "tcp" for p in policies.values())
    assert policies["iw40"].edge_args == ["--cwnd-table", str(tables / "iw40.toml")]
    assert policies["iw10"].baseline and not policies["iw40"].baseline
    text = file.read_text()
    assert (
        "[path.downlink]" in text
        and "loss_rate = 0.1" in text
        and "loss_rate = 0.1\n" not in text.split("[path.downlink]")[0]
    )
    assert "iw = [40, 40]" in (tables / "iw40.toml").read_text()


def test_a_run_where_the_kernel_applied_another_iw_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "c000-iw20-r0"
    run.mkdir()
    ok = {"rct_ms": 80.0, "handshake_ms": 20.0, "error": None}
    (run / "client.jsonl").write_text(json.dumps(ok) + "\n")
    edge = {"side": "edge", "server_time_ms": 50.0, "iw": {"source": "kernel", "iw": 20}}
    (run / "edge.jsonl").write_text(json.dumps(edge) + "\n")
    m = emulate.measure_iw(tmp_path, 20)
    assert (m["responses"], m["p80_ms"], m["server_p80_ms"]) == (1, 60.0, 50.0)
    edge["iw"] = {"source": "route", "iw": 20}
    (run / "edge.jsonl").write_text(json.dumps(edge) + "\n")
    with pytest.raises(RuntimeError, match="did not apply it"):
        emulate.measure_iw(tmp_path, 20)
