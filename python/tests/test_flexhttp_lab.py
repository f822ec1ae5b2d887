"""`gearbox lab flexhttp` (docs/flexhttp.md "Dataset and classifiers"): the WSP sample of Table 1's grid,
reading the exported forest back, and a small grid measured through the real emulator, trained and
evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gearbox.flexhttp.features import FEATURES, PAGE_FEATURES
from gearbox.flexhttp.lab import (
    TABLE1,
    Condition,
    FlexLabError,
    condition_id,
    dataset,
    evaluate,
    evaluate_si,
    forest_predict,
    read_dataset,
    sample_conditions,
    si_noise_floor,
    train,
)


def test_a_wsp_sample_spreads_over_table_1s_grid() -> None:
    conds = sample_conditions(30, seed=1)
    cells = {(c.rtt_ms, c.loss_rate, c.rate_mbps) for c in conds}
    assert len(cells) == 30
    assert sample_conditions(30, seed=1) == conds
    for attr, key in (("rtt_ms", "rtt_ms"), ("loss_rate", "loss_rate"), ("rate_mbps", "rate_mbps")):
        seen = {getattr(c, attr) for c in conds}
        assert seen <= set(TABLE1[key])
        # 30 space-filling points over 7 levels reach nearly every level of every axis.
        assert len(seen) >= 6, (attr, sorted(seen))


def test_the_exported_forest_reads_back_as_scikit_learn_predicts(tmp_path: Path) -> None:
    from sklearn.ensemble import RandomForestClassifier

    from gearbox.models.sklearn_to_json import save_forest

    rng = np.random.default_rng(0)
    x = rng.lognormal(3, 2, (400, len(FEATURES)))
    y = (x[:, 0] * x[:, 1] > x[:, 3]).astype(int)
    model = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0).fit(x, y)
    save_forest(model, tmp_path / "forest.json", list(FEATURES))
    probe = rng.lognormal(3, 2, (200, len(FEATURES)))
    assert np.allclose(forest_predict(tmp_path, probe), model.predict_proba(probe)[:, 1], atol=1e-6)


def test_speed_index_rows_are_judged_per_pair_against_the_forced_versions_chromium_and_our_loader(
    tmp_path: Path,
) -> None:
    """`evaluate --si` on invented Speed Index rows: per (condition, page) the median SI of each version,
    the forest's choice, the oracle, Chromium's own choice by visit, and whether our loader's PLT
    ordering agrees with Chromium's SI ordering."""
    from sklearn.ensemble import RandomForestClassifier

    from gearbox.models.sklearn_to_json import save_forest

    # A forest that says h3 exactly when the RTT (feature 0) is above 100 ms.
    rng = np.random.default_rng(1)
    x = rng.uniform(10, 400, (300, len(FEATURES)))
    model = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0).fit(x, (x[:, 0] > 100).astype(int))
    save_forest(model, tmp_path / "forest.json", list(FEATURES))
    conds = {"near": (30, 0.0001, 10), "far": (300, 0.03, 1)}
    # SI ms per (condition, page): h2 runs, h3 runs, chromium (first, later) visits.
    si = {
        ("near", "a"): ([500, 520, 700], [600, 610, 590], [510], [640]),
        ("near", "b"): ([900, 800, 850], [700, 750, 720], [860], [730]),
        ("far", "a"): ([4000, 4200, 3900], [3000, 3100, 2900], [4100], [3050]),
        ("far", "b"): ([2000, 2100, 2050], [2500, 2600, 2400], [2080], [2550]),
    }
    ds = tmp_path / "ds"
    (ds / "sites").mkdir(parents=True)
    (ds / "sites" / "pages.json").write_text(
        json.dumps({"pages": [{"name": p, "features": {f: 10.0 for f in PAGE_FEATURES}} for p in ("a", "b")]})
    )
    # Our loader's PLTs order three of the four pairs as Chromium does; at (far, b) it finds h3 faster.
    loader_h3_faster = {("near", "a"): False, ("near", "b"): True, ("far", "a"): True, ("far", "b"): True}
    # By their load-event times all four agree (the data fetched last made h3 look faster at (far, b)).
    with open(ds / "loads.jsonl", "w") as f:
        for (c, page), h3_faster in loader_h3_faster.items():
            rtt, loss, rate = conds[c]
            cond = {"rtt_ms": rtt, "loss_rate": loss, "rate_mbps": rate}
            cond["id"] = condition_id(Condition(rtt, loss, rate))
            for version, plt in (("h2", 1000), ("h3", 900 if h3_faster else 1100)):
                load_event = 500 if version == "h2" else (450 if h3_faster and (c, page) != ("far", "b") else 550)
                row = {"condition": cond, "page": page, "http_version": version, "page_load_ms": plt}
                f.write(json.dumps(row | {"load_event_ms": load_event}) + "\n")
    rows = tmp_path / "si.jsonl"
    with open(rows, "w") as f:
        for (c, page), (h2, h3, first, later) in si.items():
            rtt, loss, rate = conds[c]
            cond = {"rtt_ms": float(rtt), "loss_rate": loss, "rate_mbps": float(rate)}
            for version, values in (("h2", h2), ("h3", h3), ("chromium", first), ("chromium", later)):
                for v in values:
                    visit = 1 if values is later else 0
                    row = {"condition": cond, "page": page, "http_version": version, "visit": visit}
                    f.write(json.dumps(row | {"speed_index_ms": v}) + "\n")
        # A failed load is counted and left out.
        f.write(json.dumps({"condition": cond, "page": "a", "http_version": "h3", "error": "timed out"}) + "\n")
    r = evaluate_si(tmp_path, ds, [rows])
    assert (r["groups"], r["chromium_groups"], r["failed_loads"]) == (4, 4, 1)
    o = r["overall"]
    assert o["h2-only"]["mean_ms"] == pytest.approx((520 + 850 + 4000 + 2050) / 4)
    assert o["h3-only"]["mean_ms"] == pytest.approx((600 + 720 + 3000 + 2500) / 4)
    assert o["oracle"]["mean_ms"] == pytest.approx((520 + 720 + 3000 + 2050) / 4)
    # The forest picks h2 on the 30 ms path and h3 on the 300 ms one: right for page a on both paths
    # and wrong for page b on both.
    assert o["flexhttp"]["mean_ms"] == pytest.approx((520 + 850 + 3000 + 2500) / 4)
    assert r["accuracy"] == pytest.approx(0.5)
    assert o["chromium-first"]["mean_ms"] == pytest.approx((510 + 860 + 4100 + 2080) / 4)
    assert o["chromium-later"]["mean_ms"] == pytest.approx((640 + 730 + 3050 + 2550) / 4)
    assert r["h3_faster_share"] == pytest.approx(0.5)
    assert (r["loader_agreement"], r["loader_pairs"]) == (pytest.approx(0.75), 4)
    # The noise floor from each version's first two loads: here the faster version never changes.
    n = r["noise_floor"]
    assert (n["pairs"], n["winner_agreement"]) == (4, 1.0)
    assert n["same_version_gain"]["h3"] == pytest.approx(6930 / 6800 - 1)
    assert n["same_version_gain"]["h2"] == pytest.approx(7510 / 7300 - 1)
    assert n["between_versions_gain"] == pytest.approx((6800 / 6200 + 7060 / 6470) / 2 - 1)
    by_load_event = evaluate_si(tmp_path, ds, [rows], metric="load-event")
    assert (by_load_event["loader_agreement"], by_load_event["loader_metric"]) == (pytest.approx(1.0), "load-event")
    assert by_load_event["overall"] == o
    assert r["per_condition"]["rtt300-loss3-rate1"]["flexhttp"] == pytest.approx((3000 + 2500) / 2)
    # Training by SI reads the h2 and h3 loads as a dataset whose load time is the SI.
    as_loads, _ = read_dataset(ds, [rows])
    assert len(as_loads) == 4 * 6 and {r["http_version"] for r in as_loads} == {"h2", "h3"}
    assert sorted(r["page_load_ms"] for r in as_loads if r["condition"]["id"] == "rtt30-loss0.01-rate10")[:2] == [
        500,
        520,
    ]
    # A row without its SI names the file and line.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"condition": cond, "page": "a", "http_version": "h2"}) + "\n")
    with pytest.raises(FlexLabError, match="bad.jsonl:1: speed_index_ms: missing"):
        evaluate_si(tmp_path, ds, [bad])
    # A dataset of loads without their load-event time (made before it was recorded) says so.
    old = tmp_path / "old"
    (old / "sites").mkdir(parents=True)
    (old / "sites" / "pages.json").write_text((ds / "sites" / "pages.json").read_text())
    (old / "loads.jsonl").write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(x).items() if k != "load_event_ms"}) + "\n"
            for x in (ds / "loads.jsonl").read_text().splitlines()
        )
    )
    with pytest.raises(FlexLabError, match="loads.jsonl:1: load_event_ms: missing"):
        read_dataset(old, metric="load-event")


def test_a_small_grid_is_measured_trained_and_evaluated(gearbox_bin: Path, tmp_path: Path) -> None:
    """Three conditions x two light pages x h2, h3 through `gearbox emu` (about a minute)."""
    from gearbox.lab import environment

    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    conds = [Condition(30, 0.0001, 25), Condition(200, 0.03, 10), Condition(80, 0.01, 25)]
    out = tmp_path / "ds"
    dataset(
        out,
        conds,
        pages=2,
        pages_seed=17,
        reps=1,
        jobs=3,
        seed=1,
        request_timeout_s=60,
        max_page_bytes=2e5,
        gearbox=gearbox_bin,
    )
    rows = [json.loads(line) for line in (out / "loads.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2
    ok = [r for r in rows if "error" not in r]
    assert len(ok) >= 10, [r.get("error") for r in rows]
    # Every load went over the version asked for, and fetched the whole page.
    assert all(r["protocol"] == r["http_version"] for r in ok)
    assert {r["objects"] for r in ok if r["page"] == ok[0]["page"]} == {ok[0]["objects"]}
    assert all(0 < r["load_event_ms"] <= r["page_load_ms"] for r in ok)
    # A round trip per dependency level at least: the 200 ms path is slower than the 30 ms one.
    slow = [r["page_load_ms"] for r in ok if r["condition"]["rtt_ms"] == 200]
    fast = [r["page_load_ms"] for r in ok if r["condition"]["rtt_ms"] == 30]
    assert min(slow) > max(fast)
    report = train(out, tmp_path / "train", folds=3, seed=0, ks=[2])
    assert report["folds"] == 3 and report["conditions"] == 3
    for c in report["classifiers"].values():
        assert 0.0 <= c["accuracy"] <= 1.0
    assert set(report["kmeans"]) >= {"2"}
    for c in report["kmeans"].values():
        assert 0.0 <= c["forest_against_kmeans_labels_accuracy"] <= 1.0
        assert 0.5 <= c["kmeans_labels_majority"] <= 1.0
    assert (tmp_path / "train" / "train.json").is_file()
    # Labelled by the load event instead, the report says so.
    by_load_event = train(out, tmp_path / "train-le", folds=3, seed=0, ks=[2], metric="load-event")
    assert (report["metric"], by_load_event["metric"]) == ("page load time (our loader)", "load event (our loader)")
    if "error" not in report["model"]:
        ev = evaluate(tmp_path / "train" / "model", out)
        o = ev["overall"]
        assert o["oracle"]["mean_ms"] <= min(o["h2-only"]["mean_ms"], o["h3-only"]["mean_ms"])
        assert o["flexhttp"]["mean_ms"] >= o["oracle"]["mean_ms"]


def _load(gearbox_bin: Path, edge, tmp_path: Path, *extra: str) -> list[dict]:  # noqa: ANN001
    import subprocess

    tele = tmp_path / f"client-{len(list(tmp_path.iterdir()))}.jsonl"
    r = subprocess.run(
        [str(gearbox_bin), "load", "--workload", "page", "--requests", "60", "--time-scale", "0.01"]
        + ["--target", edge.origin, "--ca", str(edge.cert), "--telemetry", str(tele), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in tele.read_text().splitlines()]


def test_load_chooses_the_http_version_per_page_and_records_why(gearbox_bin: Path, edge, tmp_path: Path) -> None:  # noqa: ANN001
    """`gearbox load --http-version auto` with the agent's forest (the gear's test vectors) and a long
    lossy path measured by the agent: a page load that misses the cache takes a random version and the
    forest fills the cache; every object of a page travels on the version chosen for it, and its
    record says why."""
    forest = Path(__file__).resolve().parents[2] / "crates/gearbox-gears/tests/data/flexhttp/forest.json"
    net = tmp_path / "network.json"
    net.write_text(json.dumps({"rtt_ms": 480.0, "loss_rate": 0.03, "capacity_mbps": 1.0, "measurements": 3}))
    records = _load(
        gearbox_bin,
        edge,
        tmp_path,
        "--http-version",
        "auto",
        "--flexhttp-model",
        str(forest),
        "--agent-network",
        str(net),
    )
    decisions = [r["decision"] for r in records]
    assert all(d.startswith("flexhttp: ") for d in decisions), decisions[:3]
    # One decision per page load: every object of a load shares it, and its protocol.
    by_click: dict[int, set] = {}
    for r in records:
        by_click.setdefault(r["click"], set()).add((r["decision"], r["protocol"]))
    assert all(len(v) == 1 for v in by_click.values()), by_click
    for ((decision, protocol),) in by_click.values():
        if "cache hit" in decision:  # the version the forest chose when the entry was made
            p_h3 = float(decision.split("forest p_h3 ")[1].split(",")[0])
            assert protocol == ("h3" if p_h3 >= 0.5 else "h2"), decision
        else:
            # The forest's answer fills the cache (the workload's pages are small ones, so it is
            # not always h3 even on this path); this load took the random version.
            assert "forest p_h3" in decision and " caches h" in decision, decision
            assert protocol == ("h3" if "random h3" in decision else "h2"), decision
    # Fixed versions say so.
    fixed = _load(gearbox_bin, edge, tmp_path, "--http-version", "h2")
    assert {r["decision"] for r in fixed} == {"flexhttp: fixed h2"} and {r["protocol"] for r in fixed} == {"h2"}


def test_the_si_noise_floor_counts_a_winner_that_changes_between_loads():
    pairs = [
        {"h2": [100.0, 300.0], "h3": [200.0, 200.0]},  # h2 faster, then h3: the winner changes
        {"h2": [500.0, 500.0], "h3": [400.0, 400.0, 900.0]},  # h3 both times; a third load is not used
        {"h2": [100.0], "h3": [50.0, 60.0]},  # one h2 load: left out
    ]
    n = si_noise_floor(pairs)
    assert (n["pairs"], n["winner_agreement"]) == (2, 0.5)
    # h2's first loads (100, 500) and second (300, 500); the faster of each pair's two: 100 and 500,
    # mean 300: the first loads' mean lies 0% above it, the second's 400 / 300 - 1.
    assert n["same_version_gain"]["h2"] == pytest.approx((0 + 400 / 300 - 1) / 2)
    assert n["same_version_gain"]["h3"] == pytest.approx(0.0)
    assert n["between_versions_gain"] == pytest.approx(((300 / 250) + (300 / 300)) / 2 - 1)
    assert si_noise_floor([{"h2": [1.0], "h3": [1.0, 2.0]}]) is None
