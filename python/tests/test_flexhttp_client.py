"""The client asking the agent itself (docs/flexhttp.md "The client and its agent"): `gearbox get --page URL
--http-version auto --agent URL` against a real `gearbox agent serve` and a real edge serving generated
pages, on loopback: it measures itself against the agent, downloads the versioned global forest, keeps
its cache and local trace pool, uploads its entries; with the agent down it keeps the forest, the cache
and the last measurement, spools its entries, and sends them once the agent is back."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from support import running_edge
from test_flexhttp_agent import entries

from gearbox.pages.generate import generate


def _pool_size(agent) -> int:  # noqa: ANN001
    with agent.http("learner") as http:
        return http.get("/v1/flexhttp/pool").json()["entries"]


def test_get_page_measures_downloads_keeps_its_state_and_survives_the_agent_going_away(
    gearbox_bin: Path,
    agent,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    sites = tmp_path / "sites"
    manifest = generate(sites, 4, 17)
    light = min(manifest, key=lambda p: p["features"]["all_bytes"])["name"]
    # A global pool from many clients and its forest, version 1.
    seeded = entries(100, 3) + entries(50, 4, region="bad")
    with agent.http("client") as http:
        assert http.post("/v1/flexhttp/traces", json={"records": seeded}, headers={"Idempotency-Key": "s"}).is_success
    with agent.http("learner") as http:
        assert http.post("/v1/flexhttp/train", json={}, timeout=300).json()["version"] == 1
    state = tmp_path / "state"
    with running_edge(gearbox_bin, tmp_path / "edge", ["--static-dir", str(sites)], host="localhost") as edge:
        url = f"{edge.origin}/{light}/index.html"

        def get() -> tuple[dict, str]:
            r = subprocess.run(
                [str(gearbox_bin), "get", "--page", url, "--http-version", "auto", "--ca", str(edge.cert)]
                + ["--agent", agent.url, "--agent-token", agent.tokens["client"], "--agent-ca", str(agent.cert)]
                + ["--flexhttp-state", str(state), "--measure-every-s", "0"],
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr

        first, err = get()
        assert "downloaded the global forest v1" in err, err
        assert "measured against the agent: rtt" in err, err
        assert first["forest_version"] == 1 and first["page_load_ms"] > 0
        assert first["protocol"] == first["http_version"], first
        assert first["reason"].startswith("flexhttp: cache miss, random") and "[forest v1]" in first["reason"]
        assert f"{url}: {first['http_version']} (flexhttp: cache miss" in err, err
        assert "uploaded 1 trace entries" in err, err
        assert (state / "policies" / "flexhttp" / "current").is_symlink()
        assert _pool_size(agent) == len(seeded) + 1
        pool = [json.loads(line) for line in (state / "local-pool.jsonl").read_text().splitlines()]
        assert len(pool) == 1 and pool[0]["http_version"] == first["http_version"]
        assert pool[0]["network"]["rtt_ms"] < 50 and pool[0]["page"]["all_files"] == first["objects"]

        hour = time.gmtime().tm_hour
        second, err = get()
        assert "refused" not in err and "downloaded" not in err, err  # v1 from disk, not fetched again
        if time.gmtime().tm_hour == hour:  # the same hour of the week: the cache answers
            assert second["reason"].startswith("flexhttp: cache hit"), second["reason"]
        assert "fine-tuned the forest with 1 labelled local entries" in err, err

        # The agent goes away: the forest, the cache and the last measurement stay; entries are spooled.
        agent.kill()
        third, err = get()
        assert "agent unreachable for the forest" in err and "forest v1" in err, err
        assert "measurement failed" in err and "using the last one" in err, err
        assert "batches kept in the spool" in err, err
        assert third["forest_version"] == 1 and third["page_load_ms"] > 0
        if time.gmtime().tm_hour == hour:
            assert third["reason"].startswith("flexhttp: cache hit"), third["reason"]
        assert len((state / "local-pool.jsonl").read_text().splitlines()) == 3

        # Back: the spooled entry goes up with the next run's, nothing lost.
        agent.start()
        fourth, err = get()
        assert "uploaded 2 trace entries" in err, err
        assert _pool_size(agent) == len(seeded) + 4
        # A new version is downloaded by the next run.
        with agent.http("learner") as http:
            assert http.post("/v1/flexhttp/train", json={}, timeout=300).json()["version"] == 2
        fifth, err = get()
        assert "downloaded the global forest v2" in err and fifth["forest_version"] == 2, err


def test_get_page_says_what_is_wrong_with_its_flags(gearbox_bin: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [str(gearbox_bin), "get", "--page", "https://localhost:1/page-0000/index.html"]
        + ["--agent", "https://localhost:2", "--agent-token", "t", "--agent-ca", str(tmp_path / "ca.pem")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "--agent needs --flexhttp-state DIR" in r.stderr, r.stderr


def test_the_whole_loop_runs_on_two_emulated_paths(gearbox_bin: Path, tmp_path: Path) -> None:
    """`gearbox lab flexhttp demo` at its smallest (one page, one warm-up load per version and path, about
    a minute): clients on a clean short and a long lossy path measure themselves against one agent,
    upload their loads, the agent labels its pool and trains, and each client downloads the forest,
    fine-tunes it with its local entries and chooses; the second load of a page is the cache's answer."""
    from gearbox.flexhttp import demo
    from gearbox.lab import environment

    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    r = demo.run(tmp_path / "demo", pages=1, reps=1)
    log = {p: (tmp_path / "demo" / p / "client.log").read_text() for p in demo.PATHS}
    for p, d in r["paths"].items():
        assert [w["http_version"] for w in d["warmup"]] == ["h2", "h3"], (p, log[p])
        assert all(w.get("protocol") == w["http_version"] and w["page_load_ms"] > 0 for w in d["warmup"]), log[p]
        assert len(d["auto"]) == 2, (p, log[p])
        first, second = d["auto"]
        assert first["reason"].startswith("flexhttp: cache miss, random"), first["reason"]
        if second["reason"].startswith("flexhttp: cache hit"):  # not across an hour boundary
            assert second["url"] == first["url"]
        # Each completed load is a local entry (a failed one has no load time to keep).
        done = [x for x in d["warmup"] + d["auto"] if "page_load_ms" in x]
        assert len(done) >= 3 and d["local_pool_entries"] == len(done), (p, log[p])
        # The client measured its own path against the agent: RTT within 20% of the emulated one.
        rtt = [float(m) for m in re.findall(r"measured against the agent: rtt (\d+) ms", log[p])]
        assert rtt and all(abs(x - demo.PATHS[p].rtt_ms) <= 0.2 * demo.PATHS[p].rtt_ms for x in rtt), (p, rtt)
    # The agent's pool holds both clients' warm-up loads when it trains.
    t = r["train"]
    if "version" in t:
        assert t["version"] == 1 and t["entries"] == 4 and t["k"] == 2
        for p, d in r["paths"].items():
            assert all("[forest v1]" in a["reason"] for a in d["auto"]), d["auto"]
            assert "downloaded the global forest v1" in log[p], log[p]
            assert "fine-tuned the forest with" in log[p], log[p]
    else:
        # Both paths' loads said the same version: no two-class forest to train, and the agent says so.
        assert "nothing to classify yet" in t["error"], t
        for d in r["paths"].values():
            assert all("no usable model" in a["reason"] or "cache hit" in a["reason"] for a in d["auto"])


def test_load_with_an_agent_keeps_and_uploads_every_page_load(gearbox_bin: Path, edge, agent, tmp_path: Path) -> None:  # noqa: ANN001
    """`gearbox load --workload page --http-version auto --agent ...`: before the agent has a forest the
    misses stay random (and say so); every completed page load becomes a local entry and reaches the
    agent's pool."""
    state = tmp_path / "state"
    tele = tmp_path / "client.jsonl"
    r = subprocess.run(
        [str(gearbox_bin), "load", "--workload", "page", "--requests", "40", "--time-scale", "0.01"]
        + ["--target", edge.origin, "--ca", str(edge.cert), "--telemetry", str(tele), "--http-version", "auto"]
        + ["--agent", agent.url, "--agent-token", agent.tokens["client"], "--agent-ca", str(agent.cert)]
        + ["--flexhttp-state", str(state)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "no forest from the agent yet" in r.stderr and "measured against the agent" in r.stderr, r.stderr
    records = [json.loads(line) for line in tele.read_text().splitlines()]
    loads = {rec["click"] for rec in records}
    assert all("no usable model" in rec["decision"] for rec in records), records[0]["decision"]
    pool = (state / "local-pool.jsonl").read_text().splitlines()
    assert len(loads) >= 2 and len(pool) == len(loads), (len(loads), len(pool))
    assert f"uploaded {len(pool)} trace entries" in r.stderr, r.stderr
    assert _pool_size(agent) == len(pool)
