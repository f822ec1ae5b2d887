"""The runner's table, statistics and reductions, and the report, from a synthetic lab folder
(the runner's own output format, written here without running an emulator)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gearbox.lab import runner
from gearbox.lab import scenario as sc
from gearbox.lab.collect import collect, flatten
from gearbox.lab.environment import LabError
from gearbox.lab.planning import prepare
from gearbox.lab.report import link_timeline, write_report
from gearbox.lab.summary import STATISTICS, format_table, rct_stats, reduction, reductions, summarize

SCENARIO = """
name = "synthetic"
duration_s = 10
policies = ["tcp", "quic"]
[workload]
name = "app"
seed = 1
[[path]]
bandwidth_mbps = 20
rtt_ms = 40
[[path.schedule]]
at_s = 5
bandwidth_mbps = 5
policer = { action = "rate_limit", protocol = "udp", rate_bps = 1_000_000, burst_bytes = 15_000 }
[grid]
loss_rate = [0, 0.01]
"""


def client_record(t_ms: float, rct: float | None, protocol: str, error: str | None = None) -> dict:
    return {
        "side": "client",
        "schema": 1,
        "time_unix_ms": t_ms,
        "conn_id": 1,
        "protocol": protocol,
        "method": "GET",
        "status": None if error else 200,
        "bytes": 0 if error else 10_000,
        "transport": {"cc": "cubic", "rtt_ms": 40.0, "cwnd_bytes": 14_600, "rttvar_ms": None},
        "error": error,
        "server_addr": "10.0.0.1:4433",
        "local_addr": "100.64.0.1:5000",
        "url": "https://10.0.0.1:4433/bytes/10000",
        "rct_ms": rct,
        "ttfb_ms": None if rct is None else rct / 2,
        "new_connection": False,
        "handshake_ms": None,
        "decision": f"fixed:{'quic' if protocol == 'h3' else 'tcp'}",
        "click": 0,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lab folder as `gearbox lab run` leaves it: tcp RCTs 100..190 ms, quic 50..95 ms
    (half), one failed quic request per run."""
    d = tmp_path_factory.mktemp("lab")
    (d / "s.toml").write_text(SCENARIO)
    s = sc.load(d / "s.toml")
    out = d / "out"
    _, runs, _ = prepare(s, out, gearbox=None)
    start = 1_700_000_000_000.0
    results = []
    for run in runs:
        run.dir.mkdir(parents=True)
        quic = run.policy.name == "quic"
        records = [
            client_record(start + 1000 * i, (50 + 5 * i) if quic else (100 + 10 * i), "h3" if quic else "h2")
            for i in range(10)
        ]
        if quic:
            records.append(client_record(start + 500, None, "h3", error="timeout"))
        (run.dir / "client.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
        edge = {
            "side": "edge",
            "schema": 1,
            "time_unix_ms": start,
            "protocol": "h2",
            "path": "/bytes/1",
            "bytes": 1,
            "server_time_ms": 3.0,
            "transport": None,
            "error": None,
        }
        (run.dir / "edge.jsonl").write_text(json.dumps(edge) + "\n")
        results.append(
            runner.RunResult(
                run.run_id,
                run.condition.id,
                run.policy.name,
                run.policy.proto,
                run.repetition,
                run.link_seed,
                run.workload_seed,
                "ok",
                0,
                start,
                10.0,
                10,
                1,
                "",
                str(run.dir),
            ).__dict__
        )
    (out / "runs.json").write_text(json.dumps(results))
    return out


def test_reduction_is_one_minus_policy_over_baseline() -> None:
    assert reduction(75.0, 100.0) == pytest.approx(0.25)
    assert reduction(150.0, 100.0) == pytest.approx(-0.5)
    assert reduction(None, 100.0) is None
    assert reduction(10.0, 0.0) is None


def test_reductions_pair_every_policy_with_every_other_baseline() -> None:
    stats = [
        {"policy": "tcp", "mean_ms": 100.0, "median_ms": 80.0, "p90_ms": 200.0, "p99_ms": 400.0},
        {"policy": "quic", "mean_ms": 50.0, "median_ms": 80.0, "p90_ms": 300.0, "p99_ms": 100.0},
        {"policy": "gear", "mean_ms": 25.0, "median_ms": 40.0, "p90_ms": 100.0, "p99_ms": None},
    ]
    reds = reductions(stats, ["tcp", "quic"])
    pairs = {(r["policy"], r["baseline"]) for r in reds}
    assert pairs == {("tcp", "quic"), ("quic", "tcp"), ("gear", "tcp"), ("gear", "quic")}
    got = {(r["policy"], r["baseline"], r["statistic"]): r["reduction"] for r in reds}
    assert got["gear", "tcp", "mean"] == pytest.approx(0.75)
    assert got["quic", "tcp", "median"] == pytest.approx(0.0)
    assert got["quic", "tcp", "p90"] == pytest.approx(-0.5)
    assert got["gear", "quic", "p99"] is None


def test_rct_statistics() -> None:
    s = rct_stats([float(x) for x in range(1, 101)])
    assert s["mean_ms"] == pytest.approx(50.5)
    assert s["median_ms"] == pytest.approx(50.5)
    assert s["p90_ms"] == pytest.approx(90.1)
    assert s["p99_ms"] == pytest.approx(99.01)
    assert rct_stats([])["mean_ms"] is None


def test_records_are_flattened_with_underscores() -> None:
    assert flatten({"a": 1, "transport": {"cc": "bbr", "x": {"y": 2}}}) == {
        "a": 1,
        "transport_cc": "bbr",
        "transport_x_y": 2,
    }


def test_the_results_table_has_both_ends_records_tagged_with_run_condition_and_policy(lab: Path) -> None:
    import duckdb
    import pyarrow.parquet as pq

    table = collect(lab)
    cols = set(table.column_names)
    assert {"run_id", "condition_id", "condition", "policy", "proto", "repetition", "t_s", "side", "rct_ms"} <= cols
    assert {
        "transport_cc",
        "transport_rtt_ms",
        "transport_rttvar_ms",
        "cond_loss_rate",
        "cond_rtt_ms",
        "cond_bandwidth_mbps",
    } <= cols
    assert "transport" not in cols
    assert pq.read_table(lab / "requests.parquet").num_rows == table.num_rows == 2 * (10 + 1) + 2 * (11 + 1)
    con = duckdb.connect(str(lab / "results.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "select policy, side, count(*), min(t_s), max(cond_loss_rate) from requests group by 1, 2 order by 1, 2"
        ).fetchall()
        assert [(p, s, n) for p, s, n, *_ in rows] == [
            ("quic", "client", 22),
            ("quic", "edge", 2),
            ("tcp", "client", 20),
            ("tcp", "edge", 2),
        ]
        assert rows[0][3] == pytest.approx(0.0) and rows[0][4] == pytest.approx(0.01)
        assert con.execute("select count(*) from runs").fetchone() == (4,)
        assert con.execute("select count(*) from conditions").fetchone() == (2,)
    finally:
        con.close()


def test_the_summary_has_per_policy_statistics_and_reductions(lab: Path) -> None:
    collect(lab)
    summary = summarize(lab)
    tcp, quic = summary["policies"]
    assert (tcp["policy"], tcp["requests"], tcp["errors"]) == ("tcp", 20, 0)
    assert (quic["policy"], quic["requests"], quic["errors"]) == ("quic", 22, 2)
    assert tcp["mean_ms"] == pytest.approx(145.0) and quic["mean_ms"] == pytest.approx(72.5)
    red = {(r["policy"], r["baseline"], r["statistic"]): r["reduction"] for r in summary["reductions"]}
    for stat in STATISTICS:
        assert red["quic", "tcp", stat] == pytest.approx(0.5)
        assert red["tcp", "quic", stat] == pytest.approx(-1.0)
    assert len(summary["by_condition"]) == 4
    # The schedule changes the path at 5 s: records sent at 0-4 s and 5-9 s.
    phases = {(x["policy"], x["start_s"]): x for x in summary["by_phase"]}
    assert phases["tcp", 0.0]["phase"] == "20 Mbit/s, 40 ms" and phases["tcp", 0.0]["mean_ms"] == pytest.approx(120.0)
    assert phases["tcp", 5.0]["phase"] == "5 Mbit/s, UDP limited to 1 Mbit/s"
    assert phases["tcp", 5.0]["mean_ms"] == pytest.approx(170.0) and phases["quic", 0.0]["errors"] == 2
    assert (
        (lab / "summary.csv")
        .read_text()
        .splitlines()[0]
        .startswith("policy,label,proto,baseline,requests,errors,mean_ms")
    )
    assert "reduction_vs_tcp_p90" in (lab / "summary.csv").read_text()
    text = format_table(summary)
    assert "quic" in text and "+50.0%" in text and "-100.0%" in text


def test_the_configured_link_follows_its_schedule_and_policer() -> None:
    link = {
        "rate_bps": 20_000_000,
        "delay_ms": 20.0,
        "schedule": [
            {
                "at_ms": 5000.0,
                "rate_bps": 5_000_000,
                "policer": {"action": "rate_limit", "protocol": "udp", "rate_bps": 1_000_000, "burst_bytes": 1},
            },
            {
                "at_ms": 8000.0,
                "loss": {"model": "bernoulli", "loss_rate": 0.02},
                "policer": {"action": "block", "protocol": "udp"},
            },
        ],
    }
    tl = link_timeline(link, 10.0, step_s=1.0)
    assert list(tl.rate_bps) == [20e6] * 5 + [5e6] * 5
    assert list(tl.udp_bps) == [20e6] * 5 + [1e6] * 3 + [0.0] * 2
    assert list(tl.tcp_bps) == list(tl.rate_bps)
    assert list(tl.loss_rate) == [0.0] * 8 + [0.02] * 2


def test_a_trace_gives_its_rate_and_repeats(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    # 1 opportunity per ms for 1 s (12 Mbit/s), then none for 1 s; period 2 s.
    trace.write_text("".join(f"{ms}\n" for ms in range(1000)) + "2000\n")
    tl = link_timeline({"trace_file": str(trace)}, 4.0, step_s=1.0)
    assert tl.rate_bps == pytest.approx([12e6, 0.012e6, 12e6, 0.012e6], rel=0.01)


def test_the_report_is_one_html_file_with_tables_and_figures(lab: Path) -> None:
    collect(lab)
    summarize(lab)
    path = write_report(lab)
    text = path.read_text()
    assert path == lab / "report.html"
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    assert text.count("data:image/png;base64,") == 1 + 1 + 2  # CDF, per condition, two timelines
    assert 'src="http' not in text  # nothing to fetch
    for words in (
        "synthetic",
        "HTTP/2 over TCP",
        "+50.0%",
        "c001",
        "loss_rate=0.01",
        "fixed:quic: 22",
        "fixed:tcp: 20",
        "rate_limit",
        "UDP limited to 1 Mbit/s",
    ):
        assert words in text


def test_report_says_what_is_missing_in_a_folder_that_is_not_a_lab_run(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="plan.json"):
        write_report(tmp_path)


def test_a_run_whose_every_run_failed_still_gets_a_table_summary_and_report(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(SCENARIO)
    s = sc.load(tmp_path / "s.toml")
    out = tmp_path / "out"
    _, runs, _ = prepare(s, out, gearbox=None)
    failed = [
        runner.RunResult(r.run_id, r.condition.id, r.policy.name, r.policy.proto, r.repetition, r.link_seed,
                         r.workload_seed, "failed", 1, 0.0, 0.1, message="gearbox emu exited with 1", dir=str(r.dir))
        for r in runs
    ]  # fmt: skip
    (out / "runs.json").write_text(json.dumps([f.__dict__ for f in failed]))
    collect(out)
    summary = summarize(out)
    assert summary["runs"]["failed"] == 4 and all(
        p["requests"] == 0 and p["mean_ms"] is None for p in summary["policies"]
    )
    assert "4 failed" in format_table(summary)
    assert "no successful requests" not in write_report(out).read_text()  # drawn into the figures, not the text


def test_a_relative_output_folder_becomes_absolute_in_the_emu_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "s.toml").write_text(SCENARIO.replace("bandwidth_mbps = 20", 'trace = { preset = "wifi" }').replace(
        "bandwidth_mbps = 5\n", ""))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    prepare(sc.load(Path("s.toml")), Path("rel"), gearbox=None)
    trace_file = json.loads((tmp_path / "rel" / "conditions.json").read_text())[0]["emu"]["path"][0]["downlink"][
        "trace_file"
    ]
    assert Path(trace_file).is_absolute() and trace_file.startswith(str(tmp_path))


def _collect_cli(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from gearbox.lab.__main__ import main

    code = main(["collect", str(out)])
    return code, capsys.readouterr().err.strip()


def test_collect_on_a_folder_that_is_not_a_lab_run_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a lab run")
    assert _collect_cli(tmp_path, capsys) == (
        2,
        f"gearbox lab: error: {tmp_path} is not a lab run folder: plan.json, conditions.json, runs.json are "
        "missing (`gearbox lab run` writes plan.json, conditions.json and runs.json)",
    )
    code, err = _collect_cli(tmp_path / "nowhere", capsys)
    assert code == 2 and err.startswith(f"gearbox lab: error: {tmp_path / 'nowhere'} is not a folder")


def _corrupt_copy(lab: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(lab, out)
    return out


@pytest.mark.parametrize(
    ("file", "damage", "message"),
    [
        ("runs.json", lambda t: t[: len(t) // 2], "runs.json:"),  # cut short: line and column of the end
        ("runs.json", lambda t: "{}", "runs.json: must be an array, got an object"),
        ("runs.json", lambda t: t.replace('"status": "ok"', '"status": 3', 1),
         "runs.json: [0].status: must be a string, got an integer"),
        ("runs.json", lambda t: t.replace('"condition_id": "c000"', '"condition_id": "c9"', 1),
         "runs.json: [0].condition_id: 'c9' is not in conditions.json"),
        ("plan.json", lambda t: t.replace('"policies"', '"policy_list"', 1), "plan.json: policies: missing"),
        ("conditions.json", lambda t: "[1, 2]", "conditions.json: [0]: must be an object, got an integer"),
    ],
)  # fmt: skip
def test_collect_names_the_corrupt_file_and_field(
    lab: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    file: str,
    damage: Callable[[str], str],
    message: str,
) -> None:
    out = _corrupt_copy(lab, tmp_path)
    (out / file).write_text(damage((out / file).read_text()))
    code, err = _collect_cli(out, capsys)
    assert code == 2
    assert err.startswith(f"gearbox lab: error: {out / file}") and message in err, err
    if message == "runs.json:":
        assert "not valid JSON" in err


def test_a_corrupt_telemetry_line_is_an_error_but_a_torn_last_line_is_not(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _corrupt_copy(lab, tmp_path)
    client = sorted((out / "runs").iterdir())[0] / "client.jsonl"
    assert client.read_text().endswith('{"torn')  # the fixture's torn last line is skipped
    assert _collect_cli(out, capsys)[0] == 0
    lines = client.read_text().split("\n")
    client.write_text("\n".join([lines[0], "<html>oops</html>", *lines[1:]]))
    assert _collect_cli(out, capsys) == (
        2,
        f"gearbox lab: error: {client}:2: not a telemetry record (invalid JSON: Expecting value)",
    )
    client.write_text("\n".join([lines[0], "[1, 2]", *lines[1:]]))
    assert _collect_cli(out, capsys)[1].endswith(f"{client}:2: not a telemetry record (a JSON list, not an object)")


def test_report_on_a_corrupt_results_table_names_it(lab: Path, tmp_path: Path) -> None:
    out = _corrupt_copy(lab, tmp_path)
    (out / "requests.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(LabError, match=r"requests\.parquet: not a readable Parquet file .*gearbox lab collect"):
        write_report(out)


NO_MODEL = "wisetrans-v2;phase=fallback;score=-;choice=tcp;why=no-model;detail=no tcp.json in /m"
GEAR_POLICY = '[policies.v2]\nproto = "auto"\nload_args = ["--gear", "wisetrans-v2", "--model-dir", "../models"]\n'


def test_a_run_with_a_missing_model_folder_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gearbox.lab.__main__ import main

    (tmp_path / "exp").mkdir()
    scenario = tmp_path / "exp" / "s.toml"
    scenario.write_text(SCENARIO.replace('policies = ["tcp", "quic"]\n', "") + "[policies.tcp]\n" + GEAR_POLICY)
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gearbox lab: error: {scenario}: policies.v2.load_args: --model-dir {tmp_path / 'models'}: no such folder, "
        "so the gear would run without its model (as its fallback) under the name of the policy; train the model "
        "(docs/wisetrans.md) or fix the path (relative to the scenario file's folder)"
    )
    assert not (tmp_path / "out").exists()


def test_a_run_whose_records_say_no_model_fails(tmp_path: Path) -> None:
    """run_one through a stand-in `gearbox emu` that writes what a gear without its model
    writes (the decision strings of docs/wisetrans.md), so no root is needed."""
    (tmp_path / "models").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "s.toml").write_text(
        SCENARIO.replace('policies = ["tcp", "quic"]\n', "") + "[policies.tcp]\n" + GEAR_POLICY
    )
    s = sc.load(tmp_path / "exp" / "s.toml")
    _, runs, emu = prepare(s, tmp_path / "out", gearbox=None)
    fake = tmp_path / "gearbox"
    record = json.dumps(client_record(1.0, 80.0, "h2") | {"decision": NO_MODEL})
    fake.write_text(
        "#!/bin/sh\n"
        '# gearbox emu --config RUN_DIR/emu.toml ...: write the client telemetry next to the config\n'
        f"printf '%s\\n' '{record}' '{record}' > \"$(dirname \"$3\")/client.jsonl\"\n"
    )  # fmt: skip
    fake.chmod(0o755)
    gear_run = next(r for r in runs if r.policy.name == "v2")
    res = runner.run_one(s, gear_run, emu[gear_run.condition.id], fake, tmp_path / "c.pem", tmp_path / "k.pem")
    assert res.status == "failed" and res.exit_code == 0
    assert res.message == f"the gear ran without its model (2 decisions say why=no-model, first: {NO_MODEL!r})"


def test_collect_refuses_a_run_whose_records_say_no_model(lab: Path, tmp_path: Path) -> None:
    out = _corrupt_copy(lab, tmp_path)
    runs = json.loads((out / "runs.json").read_text())
    quic = next(r for r in runs if r["policy"] == "quic")
    client = out / "runs" / quic["run_id"] / "client.jsonl"
    lines = client.read_text().split("\n")
    fallback = json.dumps(client_record(1.0, 80.0, "h2") | {"decision": NO_MODEL})
    client.write_text("\n".join([lines[0], fallback, *lines[1:]]))
    with pytest.raises(LabError) as e:
        collect(out)
    assert str(e.value) == (
        f"{client}: 1 of 12 records say `why=no-model` (first: {NO_MODEL!r}): policy 'quic' ran without its "
        f"gear's model, so the gear did not run; check the --model-dir of policies.quic.load_args in "
        f"{json.loads((out / 'plan.json').read_text())['source']}"
    )
