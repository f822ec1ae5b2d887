"""TCP WISE's Performance Oriented Learning (python/gearbox/tcpwise, seed §IV-C, Algorithm 1):
every branch of DecisionMaking on invented latencies, the Cwnd Table's validation and atomic
writing, the telemetry reader, the command, and convergence on a latency model whose best IW
per cluster is known."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gearbox.tcpwise import (
    ClusterEntry,
    CwndTable,
    LearnConfig,
    RecordError,
    TableError,
    decision_making,
    learn,
    load_config,
    read_samples,
    read_table,
    write_table,
)
from gearbox.tcpwise.__main__ import main, run_learn
from gearbox.tcpwise.config import ConfigError
from gearbox.tcpwise.records import TelemetryReader

CFG = LearnConfig()
T0 = 1_764_000_000_000  # ms, a UTC time at hour 16


def record(cluster: str, iw_set: list[int], iw: int, latency: float | None, **kw: object) -> dict:
    hour = kw.pop("hour", 13)
    rec = {
        "side": "edge",
        "schema": 1,
        "time_unix_ms": kw.pop("time_ms", T0),
        "conn_id": 1,
        "protocol": "h2",
        "method": "GET",
        "status": 200,
        "bytes": 100_000,
        "client_addr": kw.pop("client", "10.1.2.7:50000"),
        "path": "/bytes/100000",
        "server_time_ms": latency,
        "server_time_source": "tcp_unacked_zero",
        "transport": {"rtt_ms": 20.0, "retransmits": 0},
        "error": None,
        "iw": {"cluster": cluster, "hour": hour, "iw_set": iw_set, "iw": iw, "source": "table"},
    }
    rec.update(kw)
    return rec


def write_jsonl(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def samples_for(tmp_path: Path, records: list[dict]):
    samples, _ = read_samples(write_jsonl(tmp_path / f"r{len(list(tmp_path.iterdir()))}.jsonl", records))
    return samples


def ab_records(cluster: str, iw_set: list[int], lat: dict[int, float], n: int, **kw: object) -> list[dict]:
    """n records per IW, latencies spread ±10% around lat[iw] (same spread for every IW)."""
    out = []
    for iw in iw_set:
        for i in range(n):
            out.append(record(cluster, iw_set, iw, lat[iw] * (0.9 + 0.2 * i / max(1, n - 1)), **kw))
    return out


# --- DecisionMaking (Algorithm 1), one branch per test -------------------------------------------


def lat(values: dict[int, float], n: int = 100) -> dict[int, list[float]]:
    return {iw: [v * (0.9 + 0.2 * i / (n - 1)) for i in range(n)] for iw, v in values.items()}


def test_too_few_samples_of_either_iw_keeps_the_set():
    d = decision_making((10, 15), {10: [1.0] * 100, 15: [2.0] * 99}, CFG)
    assert not d.moved and d.iw_set == (10, 15) and d.best is None
    assert "IW 15 has 99 < S_min 100" in d.reason


def test_alpha_better_moves_the_set_down_by_delta():
    d = decision_making((10, 15), lat({10: 200.0, 15: 230.0}), CFG)
    assert d.moved and d.iw_set == (10, 5) and d.best == 10
    assert "move down by 5" in d.reason


def test_beta_better_moves_the_set_up_by_delta():
    d = decision_making((10, 15), lat({10: 200.0, 15: 150.0}), CFG)
    assert d.iw_set == (15, 20) and d.best == 15 and "move up by 5" in d.reason


def test_a_tie_goes_to_the_smaller_iw():
    d = decision_making((10, 15), lat({10: 200.0, 15: 200.0}), CFG)
    assert d.best == 10 and d.iw_set == (10, 5) and "smallest of a tie" in d.reason


def test_the_objective_is_the_80th_percentile_not_the_mean():
    # IW 10: mostly fast with a slow fifth; IW 15: all at 150 ms. Mean prefers 10, p80 prefers 15.
    ten = [50.0] * 75 + [400.0] * 25
    d = decision_making((10, 15), {10: ten, 15: [150.0] * 100}, CFG)
    assert sum(ten) / 100 < 150.0 and d.best == 15


def test_the_probe_stops_at_the_cap_and_turns_back_on_it():
    cfg = LearnConfig(cap=97)
    d = decision_making((90, 95), lat({90: 200.0, 95: 100.0}), cfg)
    assert d.iw_set == (95, 97)
    d = decision_making((92, 97), lat({92: 200.0, 97: 100.0}), cfg)
    assert d.iw_set == (97, 92) and "at the cap" in d.reason


def test_the_floor_is_three_and_a_winner_on_it_probes_upward():
    d = decision_making((5, 10), lat({5: 100.0, 10: 200.0}), CFG)
    assert d.iw_set == (5, 3)
    d = decision_making((3, 8), lat({3: 100.0, 8: 200.0}), CFG)
    assert d.iw_set == (3, 8) and d.best == 3 and "set kept" in d.reason


def test_a_single_iw_is_pinned():
    d = decision_making((12, 12), lat({12: 100.0}), CFG)
    assert not d.moved and d.iw_set == (12, 12)


def test_fast_start_set_picks_the_best_of_five_and_probes_beside_it():
    d = decision_making((10, 15, 20, 25, 30), lat({10: 300.0, 15: 250.0, 20: 200.0, 25: 210.0, 30: 260.0}), CFG)
    assert d.iw_set == (20, 15)
    d = decision_making((10, 15, 20, 25, 30), lat({10: 300.0, 15: 250.0, 20: 220.0, 25: 210.0, 30: 200.0}), CFG)
    assert d.iw_set == (30, 35)
    d = decision_making((10, 15, 20, 25, 30), {**lat({iw: 100.0 for iw in (10, 15, 20, 25)}), 30: [1.0] * 5}, CFG)
    assert not d.moved


GUARD = LearnConfig(loss_guard=True)


def losses(values: dict[int, float], n: int = 100) -> dict[int, list[int]]:
    """n responses per IW whose lost packets average values[iw] (whole numbers, spread 0..2x)."""
    return {iw: [round(v * 2 * i / (n - 1)) for i in range(n)] for iw, v in values.items()}


def test_the_loss_guard_keeps_a_larger_iw_whose_extra_packets_are_lost_from_winning():
    # IW 15 is faster by p80 but loses 4 more packets per response than IW 10: more than half of
    # its 5 extra packets. IW 10 wins and the set moves down.
    d = decision_making((10, 15), lat({10: 200.0, 15: 150.0}), GUARD, losses({10: 1.0, 15: 5.0}))
    assert d.best == 10 and d.iw_set == (10, 5), d.reason
    assert "loss guard: IW 15 lost 5.0 packets per response against IW 10's 1.0" in d.reason
    # 2 more per response (< 0.5 x 5): the seed's rule stands.
    d = decision_making((10, 15), lat({10: 200.0, 15: 150.0}), GUARD, losses({10: 1.0, 15: 3.0}))
    assert d.best == 15 and d.iw_set == (15, 20) and "guard" not in d.reason
    # Off (the default: Algorithm 1 exactly), or without loss reports (or too few): the seed's rule.
    assert decision_making((10, 15), lat({10: 200.0, 15: 150.0}), CFG, losses({10: 1.0, 15: 5.0})).best == 15
    assert decision_making((10, 15), lat({10: 200.0, 15: 150.0}), GUARD).best == 15
    few = {10: [0] * 100, 15: [9] * 99}
    assert decision_making((10, 15), lat({10: 200.0, 15: 150.0}), GUARD, few).best == 15


def test_the_loss_guard_in_a_larger_set_passes_the_win_to_the_best_iw_it_allows():
    p80 = lat({10: 300.0, 15: 250.0, 20: 220.0, 25: 210.0, 30: 200.0})
    # 30 and 25 lose their extra packets against 20 (and 10); 20 loses 1.0 more than 10 (< 0.5 x 10).
    d = decision_making((10, 15, 20, 25, 30), p80, GUARD, losses({10: 0.0, 15: 0.5, 20: 1.0, 25: 6.0, 30: 12.0}))
    assert d.best == 20 and d.iw_set == (20, 15), d.reason
    assert "loss guard: IW 30" in d.reason


def test_the_learner_feeds_the_reported_losses_to_the_guard(tmp_path: Path):
    recs = []
    for iw, latency, lost in [(10, 200.0, 0), (15, 150.0, 6)]:
        for r in ab_records("10.1.2.0/24", [10, 15], {10: latency, 15: latency}, 100):
            if r["iw"]["iw"] == iw:
                r["transport"] = {"rtt_ms": 20.0, "retransmits": lost}
                recs.append(r)
    start = table(ClusterEntry("10.1.2.0/24", (10, 15), hour=13))
    result = learn(start, samples_for(tmp_path, recs), GUARD, T0)
    entry = next(e for e in result.table.entries if e.prefix == "10.1.2.0/24")
    assert entry.iw == (10, 5) and "loss guard" in entry.reason, entry.reason
    result = learn(start, samples_for(tmp_path, recs), CFG, T0)
    assert next(e for e in result.table.entries if e.prefix == "10.1.2.0/24").iw == (15, 20)


# --- The learner over tables and records ------------------------------------------------------------


def table(*entries: ClusterEntry, version: int = 7) -> CwndTable:
    return CwndTable(version=version, cap=100, created_unix_ms=None, entries=list(entries))


def test_learn_writes_version_plus_one_with_a_reason_per_entry(tmp_path: Path):
    t = table(ClusterEntry("10.1.2.0/24", (10, 15), 13), ClusterEntry("others", (10, 15)))
    s = samples_for(tmp_path, ab_records("10.1.2.0/24", [10, 15], {10: 200.0, 15: 150.0}, 120))
    r = learn(t, s, CFG, T0)
    assert r.table.version == 8 and r.table.created_unix_ms == T0
    e = r.table.index()[("10.1.2.0/24", 13)]
    assert e.iw == (15, 20) and e.best == 15 and "move up by 5" in (e.reason or "")
    assert "S_min" in (r.table.index()[("others", None)].reason or "")


def test_others_is_split_by_slash_24_and_clusters_below_s_min_stay_pooled(tmp_path: Path):
    t = table(ClusterEntry("others", (10, 15)))
    big = ab_records("others", [10, 15], {10: 100.0, 15: 80.0}, 100, client="192.0.2.9:4000")
    small = ab_records("others", [10, 15], {10: 100.0, 15: 120.0}, 60, client="198.51.100.3:4000")
    v6 = ab_records("others", [10, 15], {10: 100.0, 15: 120.0}, 40, client="[2001:db8:1:2::5]:443")
    r = learn(t, samples_for(tmp_path, big + small + v6), CFG, T0)
    idx = r.table.index()
    assert idx[("192.0.2.0/24", 13)].iw == (15, 20)
    assert "new cluster" in (idx[("192.0.2.0/24", 13)].reason or "")
    assert ("198.51.100.0/24", 13) not in idx and ("2001:db8:1::/48", 13) not in idx
    # others decides on the pool of the small clusters: 100 samples per IW, IW 10 better.
    assert idx[("others", None)].iw == (10, 5) and "went to entries of their own" in (
        idx[("others", None)].reason or ""
    )


def test_pooled_clusters_too_few_together_keep_others_set(tmp_path: Path):
    t = table(ClusterEntry("others", (10, 15)))
    small = ab_records("others", [10, 15], {10: 100.0, 15: 120.0}, 60, client="198.51.100.3:4000")
    r = learn(t, samples_for(tmp_path, small), CFG, T0)
    assert r.table.index()[("others", None)].iw == (10, 15) and len(r.table.entries) == 1


def test_a_pooled_entry_compared_per_cluster_is_not_swayed_by_which_slash_24s_drew_an_iw(tmp_path: Path):
    # In each /24 IW 15 is 5% faster than IW 10, but the slow /24 drew IW 15 three times as
    # often, so IW 15's pooled p80 is the slow /24's and Algorithm 1 on the raw pool picks 10.
    t = table(ClusterEntry("others", (10, 15)))

    def drawn(client: str, lat: dict[int, float], counts: dict[int, int]) -> list[dict]:
        """The records of one /24 under `others`' set (10, 15) that drew each IW `counts[iw]` times."""
        return [
            r
            for iw, n in counts.items()
            for r in ab_records("others", [10, 15], lat, n, client=client)
            if r["iw"]["iw"] == iw
        ]

    fast = drawn("192.0.2.9:4000", {10: 100.0, 15: 95.0}, {10: 150, 15: 50})
    slow = drawn("198.51.100.3:4000", {10: 1000.0, 15: 950.0}, {10: 50, 15: 150})
    # A /24 that drew only IW 15 says nothing about IW 10 and is left out of the comparison.
    lone = drawn("203.0.113.7:4000", {10: 5000.0, 15: 5000.0}, {15: 20})
    samples = samples_for(tmp_path, fast + slow + lone)
    raw = learn(t, samples, CFG, T0).table.index()[("others", None)]
    assert raw.iw == (10, 5), raw.reason
    per = learn(t, samples, LearnConfig(pooled_by_cluster=True), T0).table.index()[("others", None)]
    assert per.iw == (15, 20), per.reason
    assert "per-/24 normalised latencies of 2 /24s" in (per.reason or "")


def test_an_hourless_entry_is_learned_per_hour(tmp_path: Path):
    t = table(
        ClusterEntry("10.1.2.0/24", (10, 15)),
        ClusterEntry("10.1.2.0/24", (20, 25), 14),
        ClusterEntry("others", (10, 15)),
    )
    h13 = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100, hour=13)
    h9 = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 30, hour=9)
    h14 = ab_records("10.1.2.0/24", [20, 25], {20: 100.0, 25: 120.0}, 100, hour=14)
    r = learn(t, samples_for(tmp_path, h13 + h9 + h14), CFG, T0)
    idx = r.table.index()
    assert idx[("10.1.2.0/24", 13)].iw == (15, 20) and "new hour" in (idx[("10.1.2.0/24", 13)].reason or "")
    assert idx[("10.1.2.0/24", 14)].iw == (20, 15)  # its own entry, its own records
    assert idx[("10.1.2.0/24", None)].iw == (10, 15)  # hour 9's 30 samples: too few, kept
    assert ("10.1.2.0/24", 9) not in idx


def test_the_hour_comes_from_the_record_time_when_iw_hour_is_null(tmp_path: Path):
    t = table(ClusterEntry("10.1.2.0/24", (10, 15)), ClusterEntry("others", (10, 15)))
    recs = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100, hour=None)
    r = learn(t, samples_for(tmp_path, recs), CFG, T0)
    assert r.table.index()[("10.1.2.0/24", 16)].iw == (15, 20)  # T0 is 16:00 UTC


def test_per_hour_off_keeps_hourless_entries_hourless(tmp_path: Path):
    t = table(ClusterEntry("10.1.2.0/24", (10, 15)), ClusterEntry("others", (10, 15)))
    recs = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100)
    r = learn(t, samples_for(tmp_path, recs), LearnConfig(per_hour=False), T0)
    assert r.table.index()[("10.1.2.0/24", None)].iw == (15, 20) and len(r.table.entries) == 2


def test_records_of_an_older_set_or_unknown_cluster_are_stale(tmp_path: Path):
    t = table(ClusterEntry("10.1.2.0/24", (15, 20), 13), ClusterEntry("others", (10, 15)))
    old = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100)
    gone = ab_records("10.9.9.0/24", [15, 20], {15: 100.0, 20: 80.0}, 100)
    r = learn(t, samples_for(tmp_path, old + gone), CFG, T0)
    assert r.stale == 400 and r.table.index()[("10.1.2.0/24", 13)].iw == (15, 20)


def test_only_the_latest_run_of_a_set_counts(tmp_path: Path):
    # (10, 15) earlier, then (15, 20), then (10, 15) again: only the last run is evidence.
    first = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 50.0}, 100, time_ms=T0)
    between = [record("10.1.2.0/24", [15, 20], 15, 10.0, time_ms=T0 + 1)]
    last = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 120.0}, 100, time_ms=T0 + 2)
    t = table(ClusterEntry("10.1.2.0/24", (10, 15), 13), ClusterEntry("others", (10, 15)))
    r = learn(t, samples_for(tmp_path, first + between + last), CFG, T0)
    assert r.table.index()[("10.1.2.0/24", 13)].iw == (10, 5) and r.stale == 201


def test_a_table_without_others_gets_the_startup_or_fast_start_set(tmp_path: Path):
    r = learn(table(), [], CFG, T0)
    assert [(e.prefix, e.iw) for e in r.table.entries] == [("others", (10, 15))]
    r = learn(table(), [], LearnConfig(fast_start=True), T0)
    (e,) = r.table.entries
    assert e.iw == (10, 15, 20, 25, 30) and e.chance_alpha == pytest.approx(0.2)
    with pytest.raises(TableError, match="two whole numbers"):  # the edge takes two IWs
        write_table(r.table, tmp_path / "t.toml")
    write_table(r.table, tmp_path / "t.toml", LearnConfig(fast_start=True).max_set)


def test_a_kept_entry_keeps_collecting_and_a_moved_one_starts_afresh(tmp_path: Path):
    t = table(ClusterEntry("10.1.2.0/24", (10, 15), 13), ClusterEntry("others", (10, 15)))
    half = ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 60)
    r = learn(t, samples_for(tmp_path, half), CFG, T0)
    assert r.table.index()[("10.1.2.0/24", 13)].iw == (10, 15) and len(r.carry) == 120
    r2 = learn(r.table, r.carry + samples_for(tmp_path, half), CFG, T0 + 60_000)
    assert r2.table.index()[("10.1.2.0/24", 13)].iw == (15, 20) and r2.carry == []


def test_sets_of_a_table_with_a_larger_cap_are_brought_under_the_learners_cap():
    t = CwndTable(3, 300, None, [ClusterEntry("others", (200, 205))])
    r = learn(t, [], CFG, T0)
    assert r.table.cap == 100 and r.table.entries[0].iw == (100, 100)
    assert "brought into [3, cap 100]" in (r.table.entries[0].reason or "")


# --- The Cwnd Table file ----------------------------------------------------------------------------

GOOD = """version = 7
cap = 100
created_unix_ms = 1764000000000

[[cluster]]
prefix = "10.1.2.0/24"
hour = 13
iw = [10, 15]
chance_alpha = 0.5
best = 10
reason = "x"

[[cluster]]
prefix = "others"
iw = [10, 15]
"""


def test_a_table_round_trips(tmp_path: Path):
    path = tmp_path / "t.toml"
    path.write_text(GOOD)
    t = read_table(path)
    assert t.version == 7 and t.entries[0].hour == 13 and t.entries[1].chance_alpha == 0.5
    write_table(t, tmp_path / "u.toml")
    assert read_table(tmp_path / "u.toml") == t
    assert "iw = [10, 15]\n" in (tmp_path / "u.toml").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("cap = 100", "cap = 1001"), "field `cap`"),
        (GOOD.replace("iw = [10, 15]\nchance", "iw = [2, 15]\nchance"), "line 5 cluster[0]: field `iw` value 2"),
        (GOOD + 'prefix = "10.1.3.0/24"\n', "not valid TOML"),
        (
            GOOD.replace('prefix = "others"\niw = [10, 15]', 'prefix = "others"\niw = [10, 150]'),
            "line 13 cluster[1]: field `iw` value 150 is outside [3, cap 100]",
        ),
        (GOOD.replace("chance_alpha = 0.5", "chance_alpha = 1.5"), "field `chance_alpha`"),
        (GOOD.replace("best = 10", "colour = 1"), "line 5 cluster[0]: unknown field `colour`"),
        (GOOD.replace("version = 7", "version = 7\nowner = 1"), "unknown field `owner`"),
        (GOOD.replace('"others"', '"10.1.2.0/24"\nhour = 13'), "duplicate of cluster[0]"),
        (GOOD.replace('"10.1.2.0/24"', '"10.1.2.300/24"'), "field `prefix`"),
        (GOOD.replace("hour = 13", "hour = 24"), "field `hour`"),
        (
            GOOD.replace("iw = [10, 15]\nchance", "iw = [10, 15, 20]\nchance"),
            "line 5 cluster[0]: field `iw` must be a list of two",
        ),
    ],
)
def test_a_bad_table_is_refused_naming_file_and_field(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TableError) as e:
        read_table(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_writing_is_atomic_and_a_refused_table_leaves_the_old_file(tmp_path: Path):
    path = tmp_path / "t.toml"
    path.write_text(GOOD)
    good = read_table(path)
    inode = path.stat().st_ino
    bad = CwndTable(8, 100, None, [ClusterEntry("others", (1, 15))])
    with pytest.raises(TableError):
        write_table(bad, path)
    assert path.read_text() == GOOD and os.listdir(tmp_path) == ["t.toml"]
    write_table(CwndTable(8, 100, None, good.entries), path)
    assert path.stat().st_ino != inode and read_table(path).version == 8  # a new file renamed over
    assert os.listdir(tmp_path) == ["t.toml"]


def test_a_reader_polling_the_file_never_sees_half_a_table(tmp_path: Path):
    path = tmp_path / "t.toml"
    entries = [ClusterEntry(f"10.{i // 256}.{i % 256}.0/24", (10, 15), i % 24, reason="r" * 200) for i in range(500)]
    write_table(CwndTable(0, 100, None, entries), path)
    errors: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                assert len(read_table(path).entries) == 500
            except (TableError, AssertionError) as e:
                errors.append(str(e)[:200])

    reader = threading.Thread(target=poll)
    reader.start()
    for v in range(1, 20):
        write_table(CwndTable(v, 100, None, entries), path)
    stop.set()
    reader.join()
    assert errors == []


# --- Telemetry records ------------------------------------------------------------------------------


def test_reader_skips_client_event_and_iwless_records_and_failed_responses(tmp_path: Path):
    recs = [
        record("others", [10, 15], 10, 50.0),
        {**record("others", [10, 15], 10, 50.0), "side": "client"},
        {"side": "edge", "event": "cc_switch", "time_unix_ms": T0},
        {**record("others", [10, 15], 10, 50.0), "iw": None},
        {k: v for k, v in record("others", [10, 15], 10, 50.0).items() if k != "iw"},
        record("others", [10, 15], 10, None),
        {**record("others", [10, 15], 10, 50.0), "error": "reset"},
        {**record("others", [10, 15], 10, 50.0), "iw": {"iw": 10, "source": "static"}},
    ]
    samples, stats = read_samples(write_jsonl(tmp_path / "a.jsonl", recs))
    assert len(samples) == 1 and samples[0].rtt_ms == 20.0 and samples[0].retransmits == 0
    assert (stats.not_edge, stats.no_iw, stats.no_latency) == (2, 3, 2)


def test_a_malformed_line_names_file_and_line(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    path.write_text(
        json.dumps(record("others", [10, 15], 10, 5.0))
        + "\n{oops\n"
        + json.dumps(record("others", [10, 15], 10, 5.0))
        + "\n"
    )
    with pytest.raises(RecordError, match=rf"{path}:2: not a JSON record"):
        read_samples(tmp_path)
    path.write_text(json.dumps(record("others", [10, 15], 12, 5.0)) + "\n")
    with pytest.raises(RecordError, match=rf"{path}:1: field `iw.iw` must be one of"):
        read_samples(path)


def test_a_torn_last_line_is_read_once_it_is_complete(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    full = json.dumps(record("others", [10, 15], 15, 7.0, time_ms=T0 + 1))
    write_jsonl(path, [record("others", [10, 15], 10, 5.0)], tail=full[:40])
    reader = TelemetryReader(tmp_path)
    samples, stats = reader.read_new()
    assert [s.iw for s in samples] == [10] and stats.torn == 1
    with path.open("a") as f:
        f.write(full[40:] + "\n{bad\n")
    with pytest.raises(RecordError, match=rf"{path}:3:"):
        reader.read_new()
    path.write_text(json.dumps(record("others", [10, 15], 10, 5.0)) + "\n" + full + "\n")
    assert [s.iw for s in TelemetryReader(tmp_path).read_new()[0]] == [10, 15]


def test_since_ms_drops_older_records(tmp_path: Path):
    recs = [record("others", [10, 15], 10, 5.0, time_ms=T0 + i) for i in range(10)]
    samples, stats = read_samples(write_jsonl(tmp_path / "a.jsonl", recs), since_ms=T0 + 6)
    assert len(samples) == 3 and stats.before_since == 7


# --- Config and command -------------------------------------------------------------------------


def test_config_comes_from_a_tcpwise_table_and_refuses_unknown_keys(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text("[tcpwise]\ndelta = 3\ns_min = 50\nfast_start = true\n")
    cfg = load_config(path)
    assert (cfg.delta, cfg.s_min, cfg.fast_start, cfg.percentile, cfg.cap) == (3, 50, True, 80.0, 100)
    path.write_text("[tcpwise]\nstep = 3\n")
    with pytest.raises(ConfigError, match=r"c.toml \[tcpwise\]: unknown key `step`"):
        load_config(path)
    path.write_text("[tcpwise]\ncap = 2000\n")
    with pytest.raises(ConfigError, match="cap 2000"):
        load_config(path)
    assert (CFG.loss_guard, CFG.loss_guard_share) == (False, 0.5)
    path.write_text("[tcpwise]\nloss_guard = true\nloss_guard_share = 0.25\n")
    assert (load_config(path).loss_guard, load_config(path).loss_guard_share) == (True, 0.25)
    path.write_text("[tcpwise]\nloss_guard_share = 0\n")
    with pytest.raises(ConfigError, match="loss_guard_share 0.0 is outside"):
        load_config(path)


def test_the_command_writes_the_next_table_and_the_loop_reads_only_new_records(tmp_path: Path, capsys):
    tel = tmp_path / "tel"
    tel.mkdir()
    (tmp_path / "in.toml").write_text(GOOD)
    write_jsonl(tel / "edge.jsonl", ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100))
    out = tmp_path / "out.toml"
    rc = main(["learn", "--telemetry", str(tel), "--table", str(tmp_path / "in.toml"), "--out", str(out)])
    assert rc == 0 and read_table(out).version == 8
    assert read_table(out).index()[("10.1.2.0/24", 13)].iw == (15, 20)
    assert "200 samples read" in capsys.readouterr().out

    sleeps: list[float] = []

    def sleep(s: float) -> None:  # the second interval's records arrive while the loop waits
        sleeps.append(s)
        if len(sleeps) == 2:
            with (tel / "edge.jsonl").open("a") as f:
                for r in ab_records("10.1.2.0/24", [15, 20], {15: 100.0, 20: 80.0}, 100, time_ms=T0 + 1):
                    f.write(json.dumps(r) + "\n")

    last = run_learn(tel, tmp_path / "in.toml", out, CFG, every_s=60.0, iterations=2, sleep=sleep, log=lambda _: None)
    assert sleeps == [60.0, 60.0] and last.version == 9 and last.index()[("10.1.2.0/24", 13)].iw == (20, 25)


def test_the_command_reports_a_bad_table_and_exits_2(tmp_path: Path, capsys):
    (tmp_path / "in.toml").write_text("version = 1\ncap = 5000\n")
    rc = main(
        ["learn", "--telemetry", str(tmp_path), "--table", str(tmp_path / "in.toml"), "--out", str(tmp_path / "o.toml")]
    )
    assert rc == 2 and "in.toml: field `cap`" in capsys.readouterr().err
    assert not (tmp_path / "o.toml").exists()


# --- Convergence on a latency model with a known best IW per cluster --------------------------------


def model_latency_ms(iw: int, bdp: int, rtt_ms: float, size_pkts: int = 70) -> float:
    """Latency of a response of `size_pkts` packets: slow start from `iw` takes about
    log2(1 + size/iw) round trips, fewer as the IW grows; an IW above the path's BDP (`bdp`
    packets) overfills the pipe and every extra packet costs loss recovery (0.2 RTT each)."""
    return rtt_ms * (math.log2(1 + size_pkts / min(iw, bdp)) + 1 + 0.2 * max(0, iw - bdp))


def known_best(bdp: int, rtt_ms: float, cfg: LearnConfig) -> int:
    """The smallest IW of least latency, by brute force over [min_iw, cap] (the seed's ground truth, §V-A)."""
    return min(range(cfg.min_iw, cfg.cap + 1), key=lambda iw: (model_latency_ms(iw, bdp, rtt_ms), iw))


@pytest.mark.parametrize("fast_start", [False, True])
def test_the_learner_converges_within_delta_of_the_known_best_in_ten_iterations(tmp_path: Path, fast_start: bool):
    cfg = LearnConfig(fast_start=fast_start)
    paths = {  # /24 -> (BDP packets, RTT ms): best IWs from the floor up to past the fast start set
        "192.0.2": (4, 30.0),
        "198.51.100": (22, 20.0),
        "203.0.113": (38, 50.0),
        "10.7.7": (48 if not fast_start else 62, 80.0),
    }
    best = {c: known_best(b, r, cfg) for c, (b, r) in paths.items()}
    assert best == {c: b for c, (b, _) in paths.items()}  # the model's minimum is the BDP
    rng = random.Random(14)
    (tmp_path / "in.toml").write_text("version = 0\ncap = 100\n")
    tel = tmp_path / "tel"
    tel.mkdir()
    current = tmp_path / "t-startup.toml"
    run_learn(tel, tmp_path / "in.toml", current, cfg, log=lambda _: None)  # no records yet: the startup table
    history: dict[str, list[int]] = {c: [] for c in paths}
    for it in range(12):
        t = read_table(current, cfg.max_set)
        idx = t.index()
        recs = []
        for c, (bdp, rtt) in paths.items():
            entry = idx.get((f"{c}.0/24", 16)) or idx[("others", None)]
            cluster = entry.prefix
            for iw in entry.iw:
                for i in range(110):
                    noisy = model_latency_ms(iw, bdp, rtt) * rng.uniform(0.95, 1.05)
                    recs.append(
                        record(
                            cluster,
                            list(entry.iw),
                            iw,
                            noisy,
                            time_ms=T0 + it * 60_000 + i,
                            hour=16,
                            client=f"{c}.{1 + i % 200}:443",
                        )
                    )
        write_jsonl(tel / f"edge-{it:02d}.jsonl", recs)
        out = tmp_path / f"t{it:02d}.toml"
        run_learn(tel, current, out, cfg, since_ms=T0 + it * 60_000 - 1, log=lambda _: None)
        current = out
        nxt = read_table(out, cfg.max_set).index()
        for c in paths:
            e = nxt.get((f"{c}.0/24", 16))
            history[c].append(e.iw[0] if e else -1)
    for c, b in best.items():
        # alpha is the IW of least p80 of the last interval; from iteration 10 on, within ±Δ.
        assert all(abs(a - b) <= cfg.delta for a in history[c][9:]), (c, b, history[c])


def test_gearbox_learn_tcpwise_runs_the_learner(gearbox_bin: Path, tmp_path: Path):
    (tmp_path / "in.toml").write_text(GOOD)
    write_jsonl(tmp_path / "edge.jsonl", ab_records("10.1.2.0/24", [10, 15], {10: 100.0, 15: 80.0}, 100))
    env = {**os.environ, "GEARBOX_PYTHON": sys.executable}
    out = tmp_path / "out.toml"
    args = ["--telemetry", str(tmp_path / "edge.jsonl"), "--table", str(tmp_path / "in.toml"), "--out", str(out)]
    done = subprocess.run([str(gearbox_bin), "learn", "tcpwise", *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert read_table(out).index()[("10.1.2.0/24", 13)].iw == (15, 20)
    shown = subprocess.run([str(gearbox_bin), "learn", "tcpwise", "--help"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: gearbox learn tcpwise")
    (tmp_path / "in.toml").write_text("version = 1\ncap = 5000\n")
    bad = subprocess.run([str(gearbox_bin), "learn", "tcpwise", *args], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "in.toml: field `cap`" in bad.stderr
