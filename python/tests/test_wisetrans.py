"""WiseTrans data, training and evaluation pipelines (python/gearbox/wisetrans): labels,
features from the Rust extractor, exported models, Ideal, decision deep dive. No emulation."""

from __future__ import annotations

import json
import math
import random
import warnings
from pathlib import Path

import pytest

from gearbox.wisetrans import dataset as ds
from gearbox.wisetrans import evaluate as ev
from gearbox.wisetrans import features as wt_features

pytest.importorskip("pyarrow")


def rec(
    proto: str,
    click: int,
    url: str,
    send_ms: float,
    rct_ms: float | None,
    *,
    error: str | None = None,
    ttfb_ms: float | None = None,
    size: int = 10_000,
    conn: int = 1,
    rtt_ms: float = 40.0,
    sent: int = 0,
    lost: int = 0,
    decision: str | None = None,
) -> dict:
    """A client record as `gearbox load` writes it (docs/telemetry.md)."""
    return {
        "side": "client",
        "schema": 1,
        "time_unix_ms": send_ms,
        "conn_id": conn,
        "server_addr": "10.0.0.1:4433",
        "local_addr": "100.64.0.1:5000",
        "protocol": proto,
        "method": "GET",
        "url": f"https://10.0.0.1:4433{url}",
        "status": None if error else 200,
        "bytes": 0 if error else size,
        "rct_ms": None if error else rct_ms,
        "ttfb_ms": None if error else (ttfb_ms if ttfb_ms is not None else (rct_ms or 0) / 2),
        "new_connection": False,
        "handshake_ms": None,
        "transport": {
            "cc": "cubic",
            "rtt_ms": rtt_ms,
            "min_rtt_ms": rtt_ms,
            "rttvar_ms": 1.0,
            "cwnd_bytes": 14600,
            "sent_packets": sent,
            "lost_packets": lost,
            "congestion_events": None,
            "unacked_bytes": 0,
            "delivery_rate_bps": None,
        },
        "decision": decision,
        "click": click,
        "error": error,
    }


# Paired runs by hand: TCP and QUIC replay the same four requests (send times 0, 0, 5 s, 12 s).
TCP_RUN = [
    rec("h2", 0, "/a", 0, 100),
    rec("h2", 0, "/b", 0, 300),
    rec("h2", 1, "/a", 5000, 200),
    rec("h2", 2, "/a", 12000, 1000),
]
QUIC_RUN = [
    rec("h3", 0, "/a", 0, 150),
    rec("h3", 0, "/b", 0, 200),
    rec("h3", 1, "/a", 5000, 100),
    rec("h3", 2, "/a", 12000, None, error="timeout"),
    rec("h3", 3, "/z", 13000, 50),
]


def test_tcp_rows_are_labelled_switch_when_quic_served_the_same_window_faster() -> None:
    rows = ds.label_rows(TCP_RUN, QUIC_RUN, "tcp")
    # t=100 and t=300: {a, b}: TCP 400 vs QUIC 350 -> switch; t=5200: {a, b, 1/a}: 600 vs 450 -> switch;
    # t=13000: window (3 s, 13 s] = {1/a, 2/a}: TCP 1200 vs QUIC 100 + 10 000 (failed) -> stay.
    assert [r["label"] for r in rows] == [1, 1, 1, 0]
    assert [(r["cost_self_ms"], r["cost_other_ms"]) for r in rows] == [
        (400, 350),
        (400, 350),
        (600, 450),
        (1200, 10100),
    ]
    assert [r["window_requests"] for r in rows] == [2, 2, 3, 2]


def test_quic_rows_use_the_quic_runs_completion_times_and_ignore_unmatched_requests() -> None:
    rows = ds.label_rows(QUIC_RUN, TCP_RUN, "quic")
    # Completions 150, 200, 5100, 12000 (failed: its send time), 13050 (3//z exists only in QUIC).
    assert [r["label"] for r in rows] == [0, 0, 0, 1, 1]
    assert rows[3]["cost_self_ms"] == 10_100 and rows[3]["cost_other_ms"] == 1200
    assert rows[4]["window_requests"] == 2  # 1/a and 2/a; 3//z has no TCP twin


def test_repeated_click_and_url_pairs_match_by_occurrence() -> None:
    p = [rec("h2", 0, "/a", 0, 100), rec("h2", 0, "/a", 10, 500)]
    q = [rec("h3", 0, "/a", 10, 50), rec("h3", 0, "/a", 0, 400)]  # listed out of send order
    assert ds.match_keys(q) == [(0, "https://10.0.0.1:4433/a", 1), (0, "https://10.0.0.1:4433/a", 0)]
    ideal = ds.ideal_choice(p, q)
    assert [(x["tcp_ms"], x["quic_ms"]) for x in ideal] == [(100, 400), (500, 50)]


def test_ideal_takes_the_cheaper_protocol_per_ten_second_window() -> None:
    tcp = [
        rec("h2", 0, "/a", 0, 100),
        rec("h2", 0, "/b", 1000, 100),
        rec("h2", 1, "/a", 10_500, 900),
        rec("h2", 1, "/b", 19_000, 900),
    ]
    quic = [
        rec("h3", 0, "/a", 0, 150),
        rec("h3", 0, "/b", 1000, 150),
        rec("h3", 1, "/a", 10_500, 200),
        rec("h3", 1, "/b", 19_000, 300),
    ]
    ideal = ds.ideal_choice(tcp, quic)
    assert [(x["window"], x["choice"], x["rct_ms"]) for x in ideal] == [
        (0, "tcp", 100),
        (0, "tcp", 100),
        (1, "quic", 200),
        (1, "quic", 300),
    ]


NAN = float("nan")


def _reference_features(records: list[dict], window_ms: float = 10_000.0) -> list[dict]:
    """The Python transcription of the extractor (gearbox.wisetrans.features), replayed as the
    native binding replays: every record in completion order, QUIC's window."""
    return wt_features.replay("quic", records, window_ms)


def _vector_doc() -> dict:
    return json.loads(wt_features.VECTORS.read_text())


def test_the_python_extractor_reproduces_the_shared_vectors() -> None:
    """The file the Rust test (crates/gearbox-gears/tests/feature_vectors.rs) reads too."""
    doc = _vector_doc()
    assert doc["feature_names"] == list(wt_features.FEATURE_NAMES) == list(ds.FEATURES)
    fx = wt_features.FeatureExtractor(doc["window_ms"], doc["max_requests"])
    for k, step in enumerate(doc["steps"]):
        fx.observe(step["record"], step["at_ms"])
        got = fx.features(step["query"], step["at_ms"])
        for name, want in step["expect"].items():
            if want is None:
                assert math.isnan(got[name]), (k, name)
            else:
                assert got[name] == pytest.approx(want, rel=1e-12), (k, name)


def test_the_new_features_in_the_vectors_are_the_hand_computed_values() -> None:
    """gearbox's four additions, worked out by hand from the steps' records, so the vector file
    does not merely repeat what the Python code computes."""
    steps = _vector_doc()["steps"]
    first = steps[0]["expect"]  # TCP: rct 120 ms, ttfb 60, 20 000 bytes, SRTT 40, 2 of 100 lost
    assert first["ttfb_rtt_ratio"] == pytest.approx(60 / 40)
    assert first["cost_rtt_ratio"] == pytest.approx(120 / (1 + 20_000 / 14_600) / 40)
    assert (first["fail_rate"], first["loss_streak"]) == (0.0, 1.0)
    assert steps[2]["expect"]["loss_streak"] == 0.0  # the third TCP request lost nothing new
    failed = steps[6]["expect"]  # QUIC: three requests with growing losses, then one failed
    assert failed["fail_rate"] == pytest.approx(1 / 4)
    assert failed["loss_streak"] == 3.0  # the second, third (lost packets) and fourth (failed)
    # The ratio uses the mean TTFB of the three ok requests and the mean SRTT of all four.
    assert failed["ttfb_rtt_ratio"] == pytest.approx(((30 + 700 + 1200) / 3) / ((30 + 35 + 38 + 38) / 4))
    no_snapshot = steps[7]["expect"]  # a record without a transport snapshot ends the streak
    assert (no_snapshot["loss_streak"], no_snapshot["fail_rate"]) == (0.0, pytest.approx(1 / 5))
    assert steps[12]["expect"]["requests"] == 1  # 14 s later QUIC's window holds only the new one


def test_the_native_extractor_reproduces_the_shared_vectors() -> None:
    native = pytest.importorskip("gearbox._native")
    doc = _vector_doc()
    records = []
    for step in doc["steps"]:
        r = dict(step["record"])
        r["time_unix_ms"] = step["at_ms"] - (r["rct_ms"] if r["error"] is None else 0.0)  # completes at at_ms
        records.append(r)
    got = {p: native.wisetrans_features(p, records, window_ms=doc["window_ms"]) for p in ("tcp", "quic")}
    for k, step in enumerate(doc["steps"]):
        row = got[step["query"]][k]
        for name in wt_features.FEATURE_NAMES:
            want = step["expect"][name]
            if want is None:
                assert math.isnan(row[name]), (k, name)
            else:
                assert row[name] == pytest.approx(want, rel=1e-9), (k, name)


def test_python_features_are_the_rust_extractors_features() -> None:
    native = pytest.importorskip("gearbox._native")
    if not hasattr(native, "wisetrans_features"):
        pytest.skip("gearbox._native predates wisetrans_features: run scripts/python-setup.sh")
    rng = random.Random(7)
    records, counters = [], {1: [0, 0], 2: [0, 0]}
    for k in range(60):
        conn = 1 if k < 35 else 2  # a second connection: its counters start again
        counters[conn][0] += rng.randint(5, 40)
        counters[conn][1] += rng.randint(0, 2)
        rct = rng.uniform(20, 2000)
        failed = k % 13 == 5
        records.append(
            rec(
                "h3",
                k // 5,
                f"/{k}",
                k * 400.0 + rng.uniform(0, 50),
                rct,
                error="reset" if failed else None,
                ttfb_ms=rct * rng.uniform(0.2, 0.9),
                size=rng.randint(500, 50_000),
                conn=conn,
                rtt_ms=rng.uniform(20, 200),
                sent=counters[conn][0],
                lost=counters[conn][1],
            )
        )
    rng.shuffle(records)
    got = native.wisetrans_features("quic", records)
    want = _reference_features(records)
    assert len(got) == len(records)
    for g, w in zip(got, want, strict=True):
        for name in ds.FEATURES:
            a, b = g[name], w[name]
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12), name
    # One JSONL string gives the same as dicts.
    again = native.wisetrans_features("quic", "\n".join(json.dumps(r) for r in records))
    assert [x["ttfb_avg_ms"] for x in again] == [x["ttfb_avg_ms"] for x in got]
    with pytest.raises(ValueError):
        native.wisetrans_features("sctp", records)


def test_train_exports_models_the_gear_can_load(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")
    pytest.importorskip("sklearn")
    import numpy as np
    import xgboost

    from gearbox.wisetrans import train

    rng = np.random.default_rng(1)
    rows = []
    for proto in ("tcp", "quic"):
        for k in range(120):
            f = {n: float(rng.uniform(0, 1)) for n in ds.FEATURES}
            f["rtt_avg_ms"] *= 200
            if k % 10 == 0:
                f["ttfb_ms"] = float("nan")
            rows.append(
                {
                    "part": "synthetic",
                    "condition_id": f"c{k % 6:03d}",
                    "condition": "x",
                    "run": "r",
                    **f,
                    "protocol": proto,
                    "t_ms": 0.0,
                    "window_requests": 3,
                    "cost_self_ms": 1.0,
                    "cost_other_ms": 1.0,
                    "label": int(f["retran_rate"] + 0.002 * f["rtt_avg_ms"] > 0.8),
                }
            )
    data = tmp_path / "data.parquet"
    ds.write_parquet(rows, data)
    code = train.main(
        ["--dataset", str(data), "--model-dir", str(tmp_path / "m"), "--results-dir", str(tmp_path / "r"), "--quick"]
    )
    assert code == 0
    summary = json.loads((tmp_path / "r" / "train.json").read_text())
    for proto in ("tcp", "quic"):
        got = summary["protocols"][proto]
        names = train.Args().select_feature_sets[got["selected"]["features"]]
        assert got["features"] == names
        assert 0.0 <= got["nested_grouped_accuracy"] <= 1.0 and 0.0 <= got["nested_majority_floor"] <= 1.0
        k = len(names)
        model = json.loads((tmp_path / "m" / f"{proto}.json").read_text())
        assert model["learner"]["objective"]["name"] == "binary:logistic"
        meta = json.loads((tmp_path / "m" / f"{proto}.meta.json").read_text())
        assert meta["class_labels"] == ["stay", "switch"]
        assert meta["objective"] == "binary:logistic"
        assert [f["name"] for f in meta["features"]] == names
        assert meta["training_data"]["sha256"] == ds.sha256_of(data)
        assert int(model["learner"]["learner_model_param"]["num_feature"]) == k
        booster = xgboost.Booster(model_file=str(tmp_path / "m" / f"{proto}.json"))
        p = booster.inplace_predict(np.full((1, k), np.nan))
        assert 0.0 <= float(p[0]) <= 1.0
    # Table II's MLP, on the same features as each XGBoost model, in the gearbox-mlp format;
    # refitting the same pipeline gives the same network, whose exported file reproduces it.
    from gearbox.models.mlp_to_json import predict_json
    from gearbox.models.sidecar import Feature

    a = train.Args(dataset=str(data), mlp_max_iter=50)  # what --quick sets
    table = train.load_rows(a)
    for proto in ("tcp", "quic"):
        xgb_meta = json.loads((tmp_path / "m" / f"{proto}.meta.json").read_text())
        doc = json.loads((tmp_path / "m" / f"mlp-{proto}.json").read_text())
        meta = json.loads((tmp_path / "m" / f"mlp-{proto}.meta.json").read_text())
        names = [f["name"] for f in xgb_meta["features"]]
        assert [f["name"] for f in meta["features"]] == names == doc["feature_names"]
        assert meta["objective"] == "binary:logistic" and meta["class_labels"] == ["stay", "switch"]
        assert meta["training_data"]["sha256"] == ds.sha256_of(data)
        assert doc["format"] == "gearbox-mlp" and doc["activation"] == "relu"
        assert [len(layer["bias"]) for layer in doc["layers"]] == [128, 64, 1]
        mine = [r for r in table if r["protocol"] == proto]
        x, y = train.matrix(mine, names), np.array([r["label"] for r in mine], dtype=int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 50 epochs do not converge
            refit = train.mlp(a).fit(x, y)
        features = [Feature(f["name"], f.get("mean"), f.get("std")) for f in meta["features"]]
        proba, _ = predict_json(doc, features, x)
        np.testing.assert_allclose(proba, refit.predict_proba(x)[:, 1], rtol=1e-9, atol=1e-12)
    straw = json.loads((tmp_path / "m" / "strawman.json").read_text())
    assert set(straw) == {"intercept", "rtt_ms", "btlbw_mbps", "loss_rate"}
    table2 = (tmp_path / "r" / "table2.csv").read_text()
    for name in ("SVM", "Decision Tree", "Random Forest", "XGBoost", "Neural network"):
        assert name in table2


def test_deep_dive_counts_explorations_switches_and_rollbacks() -> None:
    def d(phase: str, choice: str, extra: str = "") -> str:
        why = "probe-1of6" if phase == "probe" else "stay"
        return f"wisetrans-v2;phase={phase};score=0.5;choice={choice};why={why}{extra}"

    run = [
        rec("h2", 0, "/0", 0, 500, decision=d("exploit", "tcp")),
        rec("h2", 0, "/1", 1000, 500, decision=d("probe", "tcp")),
        rec("h3", 0, "/2", 2000, 100, decision=d("probe", "quic")),
        rec("h3", 0, "/3", 3000, 100, decision=d("exploit", "quic")),  # switch, helped (500 -> 100)
        rec("h2", 0, "/4", 4000, 300, decision=d("exploit", "tcp", ";rollback=1->2")),  # switch back
        rec("h3", 0, "/5", 5000, 100, decision=d("probe", "quic", ";ex=1;suspect=1->2")),
    ]
    dive = ev.deep_dive(run, 10_000.0, 10_000.0)
    assert dive["exploration_freq"] == pytest.approx(3 / 6)
    assert dive["switches"] == 2
    assert dive["rollbacks"] == 1 and dive["rollback_rate"] == pytest.approx(0.5)
    assert dive["verifications"] == 1
    assert ev.is_exploration(ev.parse_decision("wisetrans-v1;phase=probe;score=-;choice=tcp;why=verify-2of6;ex=1"))
    assert not ev.is_exploration(ev.parse_decision("wisetrans-v2;phase=probe;score=-;choice=tcp;why=probe-wait"))
    assert dive["quic_share"] == pytest.approx(3 / 6)
    assert ev.parse_decision("race;phase=race;score=-;choice=race;why=chromium-race;race=quic")["race"] == "quic"


def test_deep_dive_counts_the_clients_hedges_and_which_copy_answered() -> None:
    why = "wisetrans-v2;phase=exploit;score=0.5;choice=quic;why=stay"
    tcp_won = rec("h2", 0, "/0", 0, 700, decision=why + ";hedge=tcp-won") | {"hedged": "h2", "hedge_at_ms": 400.0}
    quic_won = rec("h3", 0, "/1", 10, 450, decision=why + ";hedge=quic-won") | {"hedged": "h2", "hedge_at_ms": 400.0}
    run = [tcp_won, quic_won, rec("h3", 0, "/2", 20, 100, decision=why), rec("h3", 0, "/3", 30, 100, decision=why)]
    dive = ev.deep_dive(run, 10_000.0, 10_000.0)
    assert (dive["hedged"], dive["hedge_tcp_won"]) == (2, 1)
    assert ev.deep_dive(run[2:], 10_000.0, 10_000.0)["hedged"] == 0


def test_edge_bytes_sums_what_the_edge_wrote_for_the_duplication_of_hedges(tmp_path: Path) -> None:
    assert ev.edge_bytes(tmp_path) is None
    lines = [
        {"side": "edge", "protocol": "h3", "bytes": 30_000},
        {"side": "edge", "protocol": "h2", "bytes": 50_000},
        {"side": "edge", "event": "start", "bytes": 7},
    ]
    (tmp_path / "edge.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"side": "ed')
    assert ev.edge_bytes(tmp_path) == 80_000


def test_selection_accuracy_compares_each_request_with_ideals_window_choice() -> None:
    run = [
        rec("h3", 0, "/0", 1_000_000, 100),  # window 0, Ideal quic: right
        rec("h2", 0, "/1", 1_005_000, 100),  # window 0: wrong
        rec("h2", 1, "/2", 1_012_000, 100),  # window 1, Ideal tcp: right
        rec("h1", 1, "/3", 1_019_000, 100),  # window 1 (h1 is TCP): right
        rec("h3", 2, "/4", 1_021_000, 100),  # window 2: Ideal has no choice, not judged
    ]
    got = ev.selection_accuracy(run, {0: "quic", 1: "tcp"}, 10_000.0)
    assert got == {"judged": 4, "correct": 3}
    assert ev.selection_accuracy([], {0: "tcp"}, 10_000.0) == {"judged": 0, "correct": 0}


def test_gap_attribution_splits_the_gap_between_exploration_and_the_rest() -> None:
    tcp = [rec("h2", 0, "/a", 0, 100), rec("h2", 0, "/b", 0, 100)]
    quic = [rec("h3", 0, "/a", 0, 50), rec("h3", 0, "/b", 0, 50)]  # Ideal: QUIC, 50 + 50
    probe = "wisetrans-v2;phase=probe;score=-;choice=tcp;why=probe-1of6;ex=1"
    stay = "wisetrans-v2;phase=exploit;score=0.1;choice=tcp;why=stay"
    mode = [rec("h2", 0, "/a", 0, 80, decision=probe), rec("h2", 0, "/b", 0, 130, decision=stay)]
    got = ev.gap_attribution(mode, ds.ideal_choice(tcp, quic), 10_000.0)
    assert got == {"explore_gap_ms": 30.0, "other_gap_ms": 80.0, "ideal_ms": 100.0}


def test_grouped_selection_prefers_features_that_carry_to_unseen_conditions() -> None:
    """Invented rows: in every condition the label follows `ttfb_rtt_ratio > 3` (a rule that
    carries), while `rtt_avg_ms` is one value per condition whose label share is random (it
    identifies the condition: shuffled folds would love it). Selection by grouped folds must
    pick a feature set with `ttfb_rtt_ratio` and beat the majority floor on unseen conditions."""
    pytest.importorskip("xgboost")
    pytest.importorskip("sklearn")
    import numpy as np

    from gearbox.wisetrans import train

    rng = np.random.default_rng(3)
    rows = []
    for c in range(12):
        rtt = float(rng.uniform(10, 300))
        for _ in range(40):
            ratio = float(rng.uniform(1, 6))
            f = {n: float("nan") for n in ds.FEATURES}
            f.update(rtt_avg_ms=rtt, ttfb_rtt_ratio=ratio, retran_rate=float(rng.uniform(0, 0.05)))
            label = int(ratio > 3)
            rows.append(
                {
                    "group": f"g/c{c}",
                    "part": "g",
                    "condition_id": f"c{c}",
                    **f,
                    "label": label,
                    "cost_self_ms": 100.0,
                    "cost_other_ms": 50.0 if label else 200.0,
                }
            )
    a = train.Args()
    a.select_max_depth, a.select_min_child_weight, a.select_margin = [2], [1.0], [0.0]
    a.select_boosting = [(100, 0.3)]
    a.select_feature_sets = {"rtt-only": ["rtt_avg_ms", "retran_rate"], "with-ratio": ["rtt_avg_ms", "ttfb_rtt_ratio"]}
    X = {k: train.matrix(rows, v) for k, v in a.select_feature_sets.items()}
    y = np.array([r["label"] for r in rows])
    groups = train.group_ids(rows)
    gap = train.cost_gap(rows)
    cfg, scored = train.select(np.arange(len(y)), X, y, gap, groups, a, 4)
    assert cfg["features"] == "with-ratio"
    assert {s["features"]: s["grouped_accuracy"] for s in scored}["with-ratio"] > 0.95
    honest = train.nested(X, y, gap, groups, a)
    assert honest["accuracy"] > 0.95 > honest["majority_floor"] + 0.2


def test_evaluating_some_regions_does_not_replace_the_committed_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    committed = ev.REPO_ROOT / ev.Args().results
    before = committed.read_bytes()
    with pytest.raises(SystemExit) as e:
        ev.main(["--no-run", "--region", "block", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--results" in capsys.readouterr().err
    assert committed.read_bytes() == before
