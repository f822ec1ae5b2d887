"""TCP WISE's population evaluation in the emulator (python/gearbox/tcpwise/popemu.py): the lab
scenarios it writes are the simulator's draw of /24s and ones the lab accepts (fixed tables, and
the unattended loop with its learner job carrying samples); its figures from invented run
records (Table I, the oracle, Riptide-style windows, Table II, the final IW per /24, the
emulator's fidelity). The runs themselves are in the emulator: docs/tcpwise.md."""

from __future__ import annotations

import json
from pathlib import Path

from gearbox.lab import scenario as sc
from gearbox.tcpwise import popemu
from gearbox.tcpwise.__main__ import main as learn_main
from gearbox.tcpwise.population import draw_paths
from gearbox.tcpwise.table import read_table

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "100.64.3.0/24"


def plan(prefixes: int = 32) -> popemu.Plan:
    paths = tuple(draw_paths(prefixes, 1))
    return popemu.Plan(paths, 90.0, 0.5, 1, 6.0, REPO / "scenarios/control/tcpwise-learn.toml")


def test_the_scenarios_carry_the_simulators_draw_and_the_lab_accepts_them(tmp_path: Path) -> None:
    p = plan()
    table = tmp_path / "iw40.toml"
    table.write_text(popemu.table_text({"others": 40}))
    fixed = tmp_path / "fixed.toml"
    policies = [("tcp-iw40", "tcp", table), ("quic-iw10", "quic", None)]
    fixed.write_text(popemu.scenario_text(p, "oracle", policies, False))
    s = sc.load(fixed)
    assert s.topology == "population" and s.population.prefixes == 32
    assert {q.name: (q.proto, q.edge_args) for q in s.policies} == {
        "tcp-iw40": ("tcp", ["--cwnd-table", str(table)]),
        "quic-iw10": ("quic", []),
    }
    # The same /24s as the simulator's population of the same seed: rate, RTT, buffer, loss.
    for path in p.paths:
        o = s.population.overrides[path.index]
        assert (o["bandwidth_mbps"], o["rtt_ms"], o["buffer_packets"]) == (
            path.rate_mbps,
            path.rtt_ms,
            path.buffer_packets,
        )
        assert o.get("loss_rate", 0.0) == path.loss
    # 0.5 requests/s per /24: 90 real s are 90 / time_scale seconds of the workload.
    assert abs(s.duration_s * s.workload.time_scale - 90.0) < 0.01
    assert abs(1.0 / (0.610 * s.workload.time_scale) - 16.0) < 0.01

    popemu.write_empty_policy(tmp_path / "tcpwise-empty")
    loop = tmp_path / "loop.toml"
    loop.write_text(popemu.scenario_text(p, "tcpwise", [("tcp", "tcp", None), ("quic", "quic", None)], True))
    s = sc.load(loop)
    assert [q.name for q in s.policies] == ["tcp", "quic"]
    job = s.control.jobs["tcpwise"]
    assert job["every_s"] == 6.0 and "--carry" in job["command"] and "--carry-out" in job["command"]
    assert read_table(tmp_path / "tcpwise-empty/cwnd.toml").entries == []


def test_the_job_carries_kept_samples_to_its_next_run(tmp_path: Path) -> None:
    """Two windows of too few samples each decide together when the first's are carried."""

    def window(n: int, t: float) -> Path:
        rec = []
        for iw, ms in ((10, 100.0), (15, 80.0)):
            for i in range(n):
                rec.append(
                    {
                        "side": "edge",
                        "time_unix_ms": t + i,
                        "client_addr": "100.64.3.1:4000",
                        "server_time_ms": ms,
                        "transport": {"rtt_ms": 50.0, "lost_packets": 0},
                        "error": None,
                        "iw": {"cluster": CLUSTER, "hour": None, "iw_set": [10, 15], "iw": iw, "source": "kernel"},
                    }
                )
        f = tmp_path / f"w{t:.0f}.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in rec))
        return f

    cfg = tmp_path / "learn.toml"
    cfg.write_text("[tcpwise]\ns_min = 10\nper_hour = false\n")
    table = tmp_path / "in.toml"
    table.write_text('version = 1\ncap = 100\n[[cluster]]\nprefix = "100.64.3.0/24"\niw = [10, 15]\n')
    args = ["learn", "--table", str(table), "--config", str(cfg)]
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    carry = tmp_path / "carry.jsonl"
    assert learn_main([*args, "--telemetry", str(window(6, 1e12)), "--out", str(one), "--carry-out", str(carry)]) == 0
    assert read_table(one).entries[0].iw == (10, 15) and len(carry.read_text().splitlines()) == 12
    args[2] = str(one)
    w2 = window(6, 2e12)
    assert learn_main([*args, "--telemetry", str(w2), "--out", str(two), "--carry", str(carry)]) == 0
    assert read_table(two).entries[0].iw == (15, 20)  # 12 of each IW: β better, up by Δ
    # Without the carry the second window alone keeps the set.
    assert learn_main([*args, "--telemetry", str(w2), "--out", str(two)]) == 0
    assert read_table(two).entries[0].iw == (10, 15)
    carry.write_text("{not json\n")
    assert learn_main([*args, "--telemetry", str(w2), "--out", str(two), "--carry", str(carry)]) == 2


def client(prefix: int, latency: float, t: float) -> dict:
    return {
        "side": "client",
        "time_unix_ms": t,
        "local_addr": f"100.64.{prefix}.1:5000",
        "rct_ms": latency + 10.0,
        "handshake_ms": 10.0,
        "error": None,
    }


def edge(prefix: int, cwnd_pkts: float, lost: int, iw_set: list[int] | None = None, t: float = 0.0) -> dict:
    r = {
        "side": "edge",
        "time_unix_ms": t,
        "client_addr": f"100.64.{prefix}.1:5000",
        "protocol": "h2",
        "server_time_ms": 50.0,
        "transport": {
            "cwnd_bytes": cwnd_pkts * 1448,
            "sent_packets": 20,
            "lost_packets": lost,
            "min_rtt_ms": 0.0,
            "timeouts": 1 if lost > 1 else 0,
        },
        "error": None,
    }
    if iw_set:
        r["iw"] = {"cluster": "others", "iw_set": iw_set, "iw": iw_set[0], "source": "kernel"}
    return r


def run_of(
    lat: dict[int, float], cwnd: float = 20.0, lost: int = 0, iw_set: list[int] | None = None
) -> popemu.RunRecords:
    """Ten responses per /24 at latencies lat[p] .. lat[p] + 9 ms, sent at t = 0..9."""
    c = [client(p, ms + i, float(i)) for p, ms in lat.items() for i in range(10)]
    e = [edge(p, cwnd, lost, iw_set, float(i)) for p in lat for i in range(10)]
    return popemu.RunRecords(c, e)


def test_the_figures_from_invented_runs() -> None:
    paths = draw_paths(2, 1)
    runs = {
        "iw10": run_of({0: 100.0, 1: 200.0}, cwnd=31.4),
        "iw40": run_of({0: 300.0, 1: 100.0}, lost=2),
        "riptide": run_of({0: 90.0, 1: 150.0}),
        "tcpwise": run_of({0: 120.0, 1: 110.0}, lost=1, iw_set=[30, 35]),
    }
    s = popemu.summarize(paths, runs, (10, 40))
    # The oracle: prefix 0 at IW 10 (p80 107.2), prefix 1 at IW 40 (107.2 against 207.2).
    assert s["iw_per_prefix"]["oracle"] == {0: 10, 1: 40}
    assert s["overall"]["oracle"]["p80_ms"] == 107.2 and s["overall"]["iw10"]["responses"] == 20
    # Riptide-style: the mean end-of-connection window of the IW 10 run, in 1,448-byte segments.
    assert s["iw_per_prefix"]["riptide"] == {0: 31, 1: 31}
    assert s["iw_per_prefix"]["tcpwise"] == {0: 30, 1: 30}
    assert s["overall"]["tcpwise"]["retransmission_rate"] == 0.05
    assert s["overall"]["oracle"]["retransmission_rate"] == 0.05  # half its responses from the IW 40 run
    assert s["overall"]["iw10"]["lossy_response_share"] == 0.0
    assert s["overall"]["oracle"]["timeout_response_share"] == 0.5  # prefix 1's IW 40 responses
    assert s["overall"]["tcpwise"]["timeouts_per_response"] == 0.0
    base = s["overall"]["iw10"]["p80_ms"]
    assert s["vs_iw10"]["tcpwise"]["p80_ms"] == round(100 * (s["overall"]["tcpwise"]["p80_ms"] / base - 1), 1)
    half = s["tcpwise_second_half"]
    assert half["tcpwise"]["responses"] == 10  # sent at t >= 4.5
    text = popemu.report({"transports": {"tcp": s}, "fidelity": {}}, {"prefixes": 2})
    assert "| oracle | 20 |" in text and "| tcpwise | 30: 2 |" in text


def test_fidelity_reads_the_least_rtt_and_the_relays_summary() -> None:
    paths = draw_paths(2, 1)
    run = run_of({0: 100.0, 1: 100.0})
    for r in run.edge:
        r["transport"]["min_rtt_ms"] = paths[popemu.prefix_of(r["client_addr"])].rtt_ms + 0.5
    log = (
        '\x1b[2mx\x1b[0m link summary link=prefix0 dir="down" arrived=10 delivered=8 policer_drops=0 '
        "loss_drops=1 queue_drops=1\n"
        "relay summary name=gbx unroutable=0 tun_write_errors=0 relay_cpu_s=2.0 wall_s=40.0\n"
    )
    f = popemu.fidelity(paths, run, log)
    assert f["min_rtt_excess_ms"] == {"min": 0.5, "median": 0.5, "max": 0.5}
    assert f["relay_cpu_share"] == 0.05 and f["links"] == {"queue_drops": 1, "loss_drops": 1, "delivered": 8}
