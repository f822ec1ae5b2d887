"""`gearbox lab` end to end: the front door, setup errors, and one real run through
`gearbox emu` (root only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gearbox.lab import environment, runner
from gearbox.lab import scenario as sc
from gearbox.lab.__main__ import main

REPO = Path(__file__).resolve().parents[2]

TINY = """
name = "tiny"
description = "two policies on a 20 Mbit/s, 40 ms path"
duration_s = 8
timeout_s = 40
policies = ["tcp", "quic"]
[workload]
name = "app"
seed = 1
[[path]]
bandwidth_mbps = 20
rtt_ms = 40
buffer_bdp = 1.0
"""


def test_not_being_root_is_explained_and_points_to_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(environment.LabError, match="needs root.*gearbox sim"):
        environment.check_emulator()


def test_a_missing_binary_is_explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GEARBOX_BIN", str(tmp_path / "nope"))
    with pytest.raises(environment.LabError, match="GEARBOX_BIN"):
        environment.find_gearbox()
    monkeypatch.delenv("GEARBOX_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(environment, "REPO_ROOT", tmp_path)
    with pytest.raises(environment.LabError, match="cargo build --release -p gearbox-cli"):
        environment.find_gearbox()


def test_plan_lists_conditions_and_runs_without_root(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["plan", str(REPO / "scenarios" / "grid-small.toml"), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 condition(s)" in out and "12 runs" in out and "bandwidth_mbps=50 loss_rate=0.02" in out
    assert sorted(p.name for p in (tmp_path / "conditions").iterdir()) == [f"c00{i}.emu.toml" for i in range(4)]


def test_a_bad_scenario_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("rtt_ms = 40", "rtt_ms = 40\nrtt_jitter = 3"))
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"gearbox lab: error: {bad}: path[0].rtt_jitter: unknown field `rtt_jitter` " + (
        "(expected one of: bandwidth_mbps, buffer_bdp, buffer_packets, downlink, jitter_max_ms, jitter_ms, "
        "jitter_ratio, loss, loss_rate, name, policer, queue_discipline, rtt_ms, schedule, trace, uplink, "
        "uplink_bandwidth_mbps)"
    )


def test_python_dash_m_gearbox_lab_has_help() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gearbox.lab", "--help"], capture_output=True, text=True, cwd=REPO / "python"
    )
    assert r.returncode == 0 and "usage: gearbox lab" in r.stdout and "demo" in r.stdout


def _has_subcommand(gearbox_bin: Path, name: str) -> bool:
    r = subprocess.run([str(gearbox_bin), "--help"], capture_output=True, text=True)
    return any(line.split()[:1] == [name] for line in r.stdout.splitlines())


def test_the_gearbox_binary_runs_the_python_lab(gearbox_bin: Path) -> None:
    if not _has_subcommand(gearbox_bin, "lab"):
        pytest.skip(f"{gearbox_bin} predates `gearbox lab`: rebuild with `cargo build -p gearbox-cli`")
    r = subprocess.run([str(gearbox_bin), "lab", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: gearbox lab" in r.stdout
    r = subprocess.run(
        [str(gearbox_bin), "lab", "plan", str(REPO / "scenarios" / "demo.toml")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "3 runs" in r.stdout
    env = {**os.environ, "GEARBOX_PYTHON": "/nonexistent/python"}
    r = subprocess.run([str(gearbox_bin), "lab", "--help"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "scripts/setup.sh" in r.stderr


def test_a_tiny_scenario_runs_every_policy_through_the_emulator(gearbox_bin: Path, tmp_path: Path) -> None:
    """2 policies x 1 repetition x 8 s on a 20 Mbit/s, 40 ms path, through the real
    `gearbox emu` (about 20 s). Every request needs at least one round trip."""
    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    if not _has_subcommand(gearbox_bin, "emu"):
        pytest.skip(f"{gearbox_bin} has no `gearbox emu` yet")
    (tmp_path / "tiny.toml").write_text(TINY)
    s = sc.load(tmp_path / "tiny.toml")
    out = tmp_path / "out"
    outcome = runner.run_scenario(s, out, gearbox=gearbox_bin, progress=False, log=lambda m: None)
    assert [r.status for r in outcome.results] == ["ok", "ok"], [r.message for r in outcome.results]

    import duckdb

    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "select policy, side, count(*), min(rct_ms), count(error), string_agg(distinct protocol, ',') "
            "from requests group by 1, 2 order by 1, 2"
        ).fetchall()
    finally:
        con.close()
    by = {(p, side): (n, min_rct, errors, protocols) for p, side, n, min_rct, errors, protocols in rows}
    for policy, protocol in (("quic", "h3"), ("tcp", "h2")):
        n, min_rct, errors, protocols = by[policy, "client"]
        assert n >= 20 and errors == 0 and protocols == protocol
        assert min_rct > 0.95 * 40.0, f"{policy}: a request finished in {min_rct} ms, under the 40 ms RTT"
        assert by[policy, "edge"][0] > 0
    tcp, quic = outcome.summary["policies"]
    assert tcp["requests"] == quic["requests"]  # the same workload seed: the same requests
    assert {(r["policy"], r["baseline"]) for r in outcome.summary["reductions"]} == {("tcp", "quic"), ("quic", "tcp")}
    from gearbox.lab.report import write_report

    assert "data:image/png;base64," in write_report(out).read_text()


ORACLE = """
name = "oracle"
description = "the live oracle after tcp and quic: UDP blocked from 4 s"
duration_s = 8
timeout_s = 60
[workload]
name = "app"
seed = 1
[policies.tcp]
[policies.quic]
[policies.oracle]
proto = "auto"
load_args = ["--gear", "oracle"]
[[path]]
bandwidth_mbps = 20
rtt_ms = 40
buffer_bdp = 1.0
[[path.schedule]]
at_s = 4.0
policer = { action = "block", protocol = "udp" }
"""


def test_the_live_oracle_runs_the_schedule_its_static_runs_give_it(gearbox_bin: Path, tmp_path: Path) -> None:
    """tcp, quic, then the oracle through the real `gearbox emu` (about 30 s): QUIC's requests
    fail once UDP is blocked, so the schedule says TCP from then on, and the oracle's run follows
    it (docs/wisetrans.md, `oracle.rs`)."""
    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    (tmp_path / "oracle.toml").write_text(ORACLE)
    out = tmp_path / "out"
    outcome = runner.run_scenario(sc.load(tmp_path / "oracle.toml"), out, gearbox=gearbox_bin, progress=False)
    assert [r.status for r in outcome.results] == ["ok", "ok", "ok"], [r.message for r in outcome.results]
    import json
    import tomllib

    run = out / "runs" / "c000-oracle-r0"
    schedule = tomllib.loads((run / "oracle.toml").read_text())["oracle_schedule"]
    assert schedule[-1]["choice"] == "tcp" and schedule[-1]["from_ms"] <= 4000
    assert "--gear-config" in (run / "command.txt").read_text()
    quic = [json.loads(line) for line in (out / "runs" / "c000-quic-r0" / "client.jsonl").read_text().splitlines()]
    assert any(r["error"] for r in quic), "QUIC-only's requests fail once UDP is blocked"
    recs = [json.loads(line) for line in (run / "client.jsonl").read_text().splitlines()]
    started = outcome.results[2].started_unix_ms
    assert recs and all(r["decision"].startswith("oracle;phase=static;") for r in recs)
    assert not any(r["error"] for r in recs)
    late = [r for r in recs if (r["time_unix_ms"] - started) / 1000.0 > 4.5]
    assert late and all(r["protocol"] in ("h1", "h2") for r in late)


def test_the_control_loop_scenario_uploads_every_record_once_and_both_ends_take_the_policies_pushed_mid_run(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """scenarios/control-loop.toml as shipped (docs/control.md, "A lab scenario"): per run a
    `gearbox control serve` in the server namespace, the edge and the client uploading to it
    (the client over the emulated link), a Cwnd Table and WiseTrans models pushed before the
    run and again 8 s after the links start. About 1.5 min."""
    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    import json

    import duckdb

    s = sc.load(REPO / "scenarios" / "control-loop.toml")
    out = tmp_path / "out"
    outcome = runner.run_scenario(s, out, gearbox=gearbox_bin, progress=False, log=lambda m: None)
    assert [r.status for r in outcome.results] == ["ok", "ok", "ok"], [r.message for r in outcome.results]
    for r in outcome.results:
        run = Path(r.dir)
        c = json.loads((run / "control.json").read_text())
        for side in ("edge", "client"):
            v = c["sides"][side]
            assert v["written"] > 0 and v["stored"] == v["written"] and v["missing"] == v["twice"] == 0, (side, v)
        pushed = c["pushed"]
        assert [p["gear"] for p in pushed] == ["tcpwise", "wisetrans", "tcpwise", "wisetrans"]
        assert all(p["ok"] for p in pushed) and all(p["after_s"] >= 8.0 for p in pushed[2:])
        # The edge took version 2 of its Cwnd Table while it ran, and (over QUIC, where the edge
        # applies the table itself) served new connections from it.
        assert os.readlink(run / "edge-policies" / "tcpwise" / "current") == "v2"
        assert c["peers"]["edge"] == {"tcpwise": 2}
        if r.policy == "quic":
            assert "2" in c["edge_records_by_table_version"], c["edge_records_by_table_version"]
        if r.policy == "wisetrans-v2":
            # The client's WiseTrans ran version 1, then version 2, with no restart.
            assert os.readlink(run / "client-policies" / "wisetrans" / "current") == "v2"
            by = c["client_requests_by_policy_version"]
            assert by.get("1", 0) > 0 and by.get("2", 0) > 0, by
        else:
            assert c["client_requests_by_policy_version"] == {"none": c["sides"]["client"]["written"]}
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        versions = con.execute(
            "select policy_version, count(*) from requests where policy = 'wisetrans-v2' and side = 'client' "
            "and policy_version is not null "
            "group by 1 order by 1"
        ).fetchall()
    finally:
        con.close()
    assert [v for v, _ in versions] == [1, 2], versions
    from gearbox.lab.report import write_report

    assert "Control plane" in write_report(out).read_text()
