"""`gearbox sim run`: a lab scenario in the simulator, through the binary's front door,
with the lab's plan, table, summary and report; and the scenarios it refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gearbox.lab import runner
from gearbox.lab import scenario as sc
from gearbox.lab.planning import plan
from gearbox.sim import fidelity
from gearbox.sim import run as sim_run

SMALL = """
name = "sim-small"
duration_s = 6
[workload]
name = "app"
seed = 2
[[path]]
rtt_ms = 40.0
buffer_bdp = 1.0
[grid]
bandwidth_mbps = [5.0, 50.0]
[policies.quic]
baseline = true
[policies.bbr]
proto = "quic"
edge_args = ["--cc", "bbr", "--initial-window", "20", "--tcp-cc", "reno"]
"""


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def _sim_run(gearbox_bin: Path, scenario: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`gearbox sim run SCENARIO --out OUT --no-progress [extra]`, the Python side this
    interpreter; asserts it succeeded."""
    cmd = [str(gearbox_bin), "sim", "run", str(scenario), "--out", str(out), "--no-progress", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(gearbox_bin))
    assert r.returncode == 0, r.stderr
    return r


def _report_again(gearbox_bin: Path, out: Path) -> None:
    """`gearbox lab report OUT` works on a simulator run's folder."""
    again = subprocess.run(
        [sys.executable, "-m", "gearbox.lab", "report", str(out)],
        capture_output=True,
        text=True,
        env=_env(gearbox_bin),
    )
    assert again.returncode == 0, again.stderr


def _env(gearbox_bin: Path) -> dict[str, str]:
    return {**os.environ, "GEARBOX_PYTHON": sys.executable, "GEARBOX_BIN": str(gearbox_bin)}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_quic_scenario_runs_in_the_simulator_with_the_labs_table_and_report(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = _sim_run(gearbox_bin, _scenario(tmp_path, SMALL), out, "--report")
    assert "bbr" in r.stdout and "report:" in r.stdout

    runs = json.loads((out / "runs.json").read_text())
    assert sorted(x["run_id"] for x in runs) == ["c000-bbr-r0", "c000-quic-r0", "c001-bbr-r0", "c001-quic-r0"]
    assert all(x["status"] == "ok" and x["client_records"] > 0 for x in runs)
    for cond in ("c000", "c001"):
        quic = _records(out / "runs" / f"{cond}-quic-r0" / "client.jsonl")
        bbr = _records(out / "runs" / f"{cond}-bbr-r0" / "client.jsonl")
        assert {x["source"] for x in quic + bbr} == {"sim"}
        assert {x["transport"]["cc"] for x in quic} == {"cubic"}  # the edge's default
        assert {x["transport"]["cc"] for x in bbr} == {"bbr"}
        # The lab's contract: every policy of a repetition gets the same requests.
        # (Records come in completion order; `time_unix_ms` is when the request was sent.)
        assert sorted((x["time_unix_ms"], x["url"]) for x in quic) == sorted((x["time_unix_ms"], x["url"]) for x in bbr)
    config = (out / "runs" / "c000-bbr-r0" / "sim.toml").read_text()
    assert 'cc = "bbr"' in config and "initial_window = 20" in config and "rate_bps = 5000000" in config

    # The fidelity comparison's reading of a lab folder: the mean RCT per condition.
    measured = fidelity.measure(out)
    for cond in ("c000", "c001"):
        recs = _records(out / "runs" / f"{cond}-quic-r0" / "client.jsonl") + _records(
            out / "runs" / f"{cond}-bbr-r0" / "client.jsonl"
        )
        assert measured[cond][1] == pytest.approx(sum(x["rct_ms"] for x in recs) / len(recs))
        assert measured[cond][2] == len(recs)

    summary = json.loads((out / "summary.json").read_text())
    assert {p["policy"] for p in summary["policies"]} == {"quic", "bbr"}
    assert (out / "report.html").stat().st_size > 0
    _report_again(gearbox_bin, out)


POPULATION = """
name = "sim-population"
duration_s = 120
topology = "population"
[workload]
name = "search"
seed = 3
time_scale = 0.25
[population]
prefixes = 2
hosts_per_prefix = 2
[[population.prefix]]
index = 1
rtt_ms = 200.0
[[path]]
bandwidth_mbps = 20.0
rtt_ms = 20.0
buffer_bdp = 1.0
[policies.quic]
baseline = true
"""


def test_a_population_scenario_runs_in_the_simulator_with_each_prefix_on_its_own_link(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    scenario = _scenario(tmp_path, POPULATION)
    sim_run.check(sc.load(scenario))
    _sim_run(gearbox_bin, scenario, out)
    config = (out / "runs" / "c000-quic-r0" / "sim.toml").read_text()
    assert "[population]" in config and "time_scale = 0.25" in config
    recs = _records(out / "runs" / "c000-quic-r0" / "client.jsonl")
    # `search` at a quarter of its think times: ~6.6 requests/s for 30 s.
    assert len(recs) > 100
    by_prefix: dict[str, list[float]] = {}
    for x in recs:
        host = x["local_addr"].split(":")[0]
        assert host.startswith("100.64.") and host.rsplit(".", 1)[1] in ("1", "2")
        by_prefix.setdefault(host.rsplit(".", 1)[0], []).append(x["handshake_ms"])
    assert sorted(by_prefix) == ["100.64.0", "100.64.1"]
    # Prefix 1's own link has ten times the RTT: so do its handshakes.
    fast, slow = sorted(by_prefix["100.64.0"]), sorted(by_prefix["100.64.1"])
    assert 20.0 <= fast[len(fast) // 2] < 40.0 and 200.0 <= slow[len(slow) // 2] < 240.0


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda t: t + "[policies.tcp]\nbaseline = false\n", "policies.tcp", "TCP"),
        (
            lambda t: t + '[policies.gear]\nproto = "quic"\nload_args = ["--gear", "x"]\n',
            "policies.gear.load_args",
            "client flags --gear x",
        ),
        (
            lambda t: t.replace('"--cc", "bbr"', '"--gear", "floo"'),
            "policies.bbr.edge_args",
            "edge flag --gear",
        ),
        (
            lambda t: (
                'topology = "multipath"\n'
                + t
                + "[[path]]\nrtt_ms = 80.0\n[[path.schedule]]\nat_s = 3.0\n"
                + 'policer = { action = "block", protocol = "udp" }\n'
            ),
            "path[1].schedule[0].policer",
            "goes dark",
        ),
        (
            lambda t: 'topology = "multipath"\n' + t + "[[path]]\nrtt_ms = 80.0\n[policies.tcp]\n",
            "policies.tcp",
            "TCP or MPTCP",
        ),
        (
            lambda t: (
                'topology = "multipath"\n' + t.replace('name = "app"', 'name = "page"') + "[[path]]\nrtt_ms = 80.0\n"
            ),
            "workload.name",
            "page loads on several paths",
        ),
        (
            lambda t: t + '[policies.mp]\nproto = "quic"\nload_args = ["--scheduler", "minrtt"]\n',
            "policies.mp.load_args",
            "client flags --scheduler minrtt",
        ),
        (lambda t: t + "[control]\npoll_s = 1.0\n", "control", "control plane"),
    ],
)
def test_what_the_simulator_cannot_run_is_refused_by_name(tmp_path: Path, change, field: str, words: str) -> None:
    s = sc.load(_scenario(tmp_path, change(SMALL)))
    with pytest.raises(sc.ScenarioError) as e:
        sim_run.check(s)
    assert field in str(e.value) and words in str(e.value) and "gearbox lab run" in str(e.value)


MULTIPATH = """
name = "sim-multipath"
duration_s = 40
topology = "multipath"
[workload]
name = "search"
seed = 4
time_scale = 0.25
[[path]]
name = "wifi"
bandwidth_mbps = 20.0
rtt_ms = 20.0
buffer_bdp = 1.0
[[path]]
name = "lte"
bandwidth_mbps = 5.0
rtt_ms = 120.0
buffer_bdp = 1.0
[policies.quic]
baseline = true
[policies.minrtt]
proto = "quic"
load_args = ["--scheduler", "minrtt"]
[policies.rr]
proto = "quic"
load_args = ["--scheduler=round-robin"]
"""


def test_a_multipath_scenario_runs_in_the_simulator_with_each_requests_path_in_the_table(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    r = _sim_run(gearbox_bin, _scenario(tmp_path, MULTIPATH), out, "--report")
    config = (out / "runs" / "c000-minrtt-r0" / "sim.toml").read_text()
    assert 'path_scheduler = "minrtt"' in config and config.count("[[path]]") == 2

    import duckdb

    rows = duckdb.sql(
        f"select policy, path_index, path_decision, rct_ms, local_addr from '{out / 'requests.parquet'}' "
        "where side = 'client'"
    ).fetchall()
    by_policy: dict[str, list[tuple]] = {}
    for row in rows:
        by_policy.setdefault(row[0], []).append(row[1:])
    assert set(by_policy) == {"quic", "minrtt", "rr"}
    # Every request names its path, and left from that path's address.
    for policy, reqs in by_policy.items():
        assert all(p in (0, 1) and local.startswith(f"10.0.{p}.2:") for p, _, _, local in reqs), policy
    # `gearbox load`'s rule: search's clients split over the two paths by client index.
    quic = by_policy["quic"]
    assert {p for p, *_ in quic} == {0, 1} and all(d.startswith("client-index:") for _, d, *_ in quic)
    # Round robin alternates; MinRTT sends most requests on the 20 ms path (51 of 65).
    rr = [p for p, *_ in by_policy["rr"]]
    assert abs(rr.count(0) - rr.count(1)) <= 1
    minrtt = [p for p, *_ in by_policy["minrtt"]]
    assert minrtt.count(0) > 2 / 3 * len(minrtt), minrtt
    assert all(d.startswith("minrtt:") for _, d, *_ in by_policy["minrtt"])
    summary = json.loads((out / "summary.json").read_text())
    assert {p["policy"] for p in summary["policies"]} == {"quic", "minrtt", "rr"}
    # The summary's per-path rows count what the table says each path carried.
    by_path = {(x["policy"], x["path_index"]): x for x in summary["by_path"]}
    assert by_path["minrtt", 0]["requests"] == minrtt.count(0)
    assert by_path["minrtt", 0]["share"] == pytest.approx(minrtt.count(0) / len(minrtt))
    assert by_path["rr", 1]["requests"] == rr.count(1)
    assert "by path of the multipath client" in r.stdout + r.stderr
    assert "on each path of the multipath client" in (out / "report.html").read_text()
    _report_again(gearbox_bin, out)


def test_the_shipped_multipath_scenario_is_one_both_sides_run() -> None:
    s = sc.load(Path(__file__).resolve().parents[2] / "scenarios" / "sim" / "multipath-search.toml")
    sim_run.check(s)
    assert s.topology == "multipath" and len(s.paths) == 2
    assert [sim_run.load_settings(s, p).get("path_scheduler") for p in s.policies] == [
        None,
        "minrtt",
        "ecf",
        "round-robin",
    ]


def test_the_fidelity_scenarios_are_ones_both_sides_run(tmp_path: Path) -> None:
    paths = fidelity.write_scenarios(tmp_path, reps=2, duration_s=5.0)
    counts = {}
    for p in paths:
        s = sc.load(p)
        sim_run.check(s)  # nothing the simulator would refuse
        assert s.repetitions == 2 and [x.name for x in s.policies] == ["quic"]
        counts[s.name] = len(sc.conditions(s))
    # The grid of 16 (rate x RTT x loss x buffer) and three traces, each with both workloads.
    assert counts == {
        f"fidelity-{shape}-{kind}": (16 if shape == "grid" else 1)
        for shape in ("grid", *fidelity.TRACES)
        for kind in ("app", "bulk")
    }


def test_a_trace_starts_at_the_same_link_time_in_the_emulator_and_the_simulator(tmp_path: Path) -> None:
    """The emulator's links start with its relay, a second or so before its client; over a
    trace or a schedule the lab starts the client at a fixed link time and the simulator's
    links that far ahead (docs/sim.md "Fidelity"); a constant link needs neither."""
    link = {"delay_ms": 20.0, "base_rtt_ms": 40.0}
    constant = {
        "topology": "single",
        "path": [{"downlink": {**link, "rate_bps": 10_000_000}, "uplink": {**link, "rate_bps": 10_000_000}}],
    }
    trace = {
        "topology": "single",
        "path": [{"downlink": {**link, "trace_file": "w.trace"}, "uplink": {**link, "rate_bps": 10_000_000}}],
    }
    schedule = {
        "topology": "population",
        "population": {
            "prefixes": 1,
            "hosts_per_prefix": 1,
            "downlink": {**link, "rate_bps": 1, "schedule": [{"at_ms": 5.0, "rate_bps": 2}]},
            "uplink": link,
        },
    }
    assert [runner.time_varying(e) for e in (constant, trace, schedule)] == [False, True, True]

    s = sc.load(_scenario(tmp_path, SMALL))
    run = plan(s, tmp_path / "out")[1][0]
    assert "link_offset_s" not in sim_run.sim_config(s, run, constant)
    offset = sim_run.sim_config(s, run, trace)["link_offset_s"]
    assert offset == pytest.approx(runner.CLIENT_AT_LINK_S + runner.CLIENT_STARTUP_S)
