"""TCP WISE's Connection Manager inside network namespaces and its closed loop in the lab
(docs/tcpwise.md, "TCP in the lab's namespaces" and "The loop in the lab").

Both need root (namespaces, BPF); `make test` runs as root. Each namespace this file makes has a
name unique to the test run and is removed on success, failure and Ctrl-C (a `finally`); the
lab's runs clean up their own (gearbox emu's watchdog).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from support import REPO, make_cert

from gearbox.lab import collect, environment, runner
from gearbox.lab import scenario as sc


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _segments(cwnd_bytes: int) -> int:
    """TCP_INFO's congestion window in segments: `cwnd_bytes` is tcpi_snd_cwnd x tcpi_snd_mss,
    and the MSS of a 1,500-byte MTU is 1,448 (timestamps) or 1,460."""
    for mss in (1448, 1460):
        if cwnd_bytes % mss == 0:
            return cwnd_bytes // mss
    raise AssertionError(f"cwnd {cwnd_bytes} B is no whole number of 1,448- or 1,460-byte segments")


def _starts_at(cwnd_bytes: int, iw: int) -> bool:
    """Whether a window read at the end of a tiny response began at `iw` segments: it grows by
    at most a segment per segment acknowledged (slow start), a handful for a TLS handshake and
    a small response, so it is at least `iw` and far from the default 10's."""
    return iw <= _segments(cwnd_bytes) <= iw + 8


def _wait_ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the edge says it serves (it listens a moment before its table is in place)."""
    deadline = time.monotonic() + 30
    while "gearbox edge: https://" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def _records(path: Path) -> list[dict]:
    """The edge's request records so far (the lab's reader: a line the edge is still writing
    is left for the next read)."""
    return collect.read_records(path)


def _start_edge(
    gearbox_bin: Path, ns: str, listen: str, cert: Path, key: Path, telemetry: Path, table: Path, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """`gearbox edge` with the Cwnd Table `table` in namespace `ns` (as `gearbox emu` starts it:
    `ip netns exec`), its log in `log`; returns once it is ready (killed if it never is)."""
    with log.open("wb") as f:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, str(gearbox_bin), "edge", "--listen", listen]
            + ["--cert", str(cert), "--key", str(key), "--telemetry", str(telemetry)]
            + ["--cwnd-table", str(table), *extra, "--log", "info"],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(proc, log)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _record_of(telemetry: Path, path: str, log: Path) -> dict:
    """The edge's latest record for `path` (it is written once the response is acknowledged)."""
    for _ in range(100):
        found = [r for r in _records(telemetry) if r.get("path") == path]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no record for {path}:\n{log.read_text()}")


def _curl_until_served(ns: str, url: str, proc: subprocess.Popen[bytes] | None, log: Path) -> None:
    """GETs `url` with curl (HTTP/2) from namespace `ns` until it succeeds; fails with the edge's
    log if the edge exits or 30 s pass."""
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run(
            ["ip", "netns", "exec", ns, "curl", "-sk", "--http2", "-o", "/dev/null"] + ["--connect-timeout", "2", url],
            capture_output=True,
            timeout=30,
        )
        if r.returncode == 0:
            return
        assert proc is not None and proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"curl {url}: {r.stderr!r}\n{log.read_text()}"
        time.sleep(0.2)


def test_an_edge_started_by_ip_netns_exec_attaches_the_tcp_program_and_tcp_gets_the_tables_window(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """`ip netns exec` (how gearbox emu starts the edge) gives the edge a mount namespace with a
    fresh /sys and no cgroup2 mount; the edge mounts the hierarchy detached to find its cgroup,
    so its sock_ops program attaches there and TCP connections get the table's IW: the record
    says `kernel` and TCP_INFO's congestion window (`transport.cwnd_bytes` = cwnd x MSS, read at
    the end of a tiny response) started at 37 segments. A five-IW set (the fast start's) is drawn from
    too."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces and BPF); make test runs as root")
    ns = f"gbx-tw-{os.getpid()}-{secrets.token_hex(3)}"
    cert, key = make_cert(gearbox_bin, tmp_path, "edge")
    table = tmp_path / "cwnd.toml"
    table.write_text('version = 1\ncap = 100\n[[cluster]]\nprefix = "127.0.0.0/8"\niw = [37, 37]\n')
    telemetry, log = tmp_path / "edge.jsonl", tmp_path / "edge.log"
    proc = None
    _ip("netns", "add", ns)
    try:
        _ip("-n", ns, "link", "set", "lo", "mtu", "1500")
        _ip("-n", ns, "link", "set", "lo", "up")
        proc = _start_edge(gearbox_bin, ns, "127.0.0.1:4433", cert, key, telemetry, table, log)

        def get(path: str) -> None:
            _curl_until_served(ns, f"https://127.0.0.1:4433{path}", proc, log)

        def record(path: str) -> dict:
            return _record_of(telemetry, path, log)

        get("/bytes/100")
        text = log.read_text()
        assert "TCP WISE sock_ops program attached" in text and "detached cgroup2 mount" in text, text
        r = record("/bytes/100")
        assert r["iw"]["source"] == "kernel" and r["iw"]["iw"] == 37 and r["iw"]["iw_set"] == [37, 37], r
        assert _starts_at(r["transport"]["cwnd_bytes"], 37), r["transport"]

        # The fast start's set of five: each drawn, the kernel's window in every record.
        table.with_name("next.toml").write_text(
            'version = 2\ncap = 100\n[[cluster]]\nprefix = "others"\niw = [10, 15, 20, 25, 30]\nchance_alpha = 0.2\n'
        )
        table.with_name("next.toml").rename(table)
        # The edge polls the file every second: count only records of the new table, 60 of them
        # (each of the five IWs is missed by all 60 with probability 0.8^60), for at most 60 s.
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 60
        i = 0
        while sum(seen.values()) < 60:
            assert time.monotonic() < deadline, f"60 s and {sum(seen.values())} records of table 2"
            path = f"/bytes/{200 + i}"
            i += 1
            get(path)
            iw = record(path)["iw"]
            if iw.get("table_version") != 2:
                continue
            assert iw["source"] == "kernel" and iw["iw_set"] == [10, 15, 20, 25, 30], iw
            seen[iw["iw"]] = seen.get(iw["iw"], 0) + 1
        assert sorted(seen) == [10, 15, 20, 25, 30], seen
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    assert ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_the_tcpwise_loop_scenario_runs_unattended_and_the_edge_serves_the_tables_the_learner_writes(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """scenarios/tcpwise-loop.toml as shipped: per run (TCP, QUIC) a control plane beside the
    edge, an empty table pushed before the start, and the control plane's `tcpwise` job (the
    learner) every 6 s over the records the edge uploaded. The edge must serve the fast start
    set the learner's first run writes (five IWs), then later tables with moved sets, on TCP
    through its BPF program and on QUIC through its gear. About 2 min."""
    try:
        environment.check_emulator()
    except environment.LabError as e:
        pytest.skip(str(e))
    s = sc.load(REPO / "scenarios" / "tcpwise-loop.toml")
    out = tmp_path / "out"
    outcome = runner.run_scenario(s, out, gearbox=gearbox_bin, progress=False, log=lambda m: None)
    assert [r.status for r in outcome.results] == ["ok", "ok"], [r.message for r in outcome.results]
    for r in outcome.results:
        run = Path(r.dir)
        c = json.loads((run / "control.json").read_text())
        for side in ("edge", "client"):
            v = c["sides"][side]
            assert v["written"] > 0 and v["stored"] == v["written"] and v["missing"] == v["twice"] == 0, (side, v)
        # Every job run the service finished activated its table (the last may be cut short
        # when the run ends and the service stops: it has no `finished_ms`).
        runs = [j for j in c["jobs"]["tcpwise"] if j["finished_ms"] is not None]
        assert len(runs) >= 3 and all(j["outcome"] == "activated" for j in runs), c["jobs"]
        loop = c["tcpwise_loop"]
        assert loop["advanced"] and loop["moved"], loop
        versions = [int(v) for v in loop["versions"]]
        assert len(versions) >= 3 and versions == sorted(versions), loop
        source = "kernel" if r.policy == "tcp" else "table"
        edge = [x for x in _records(run / "edge.jsonl") if x.get("iw")]
        assert edge and all(x["iw"]["source"] == source for x in edge), r.policy
        # The learner's first table: `others` with the fast start set, which the edge drew from.
        fast = [x for x in edge if x["iw"]["iw_set"] == [10, 15, 20, 25, 30]]
        assert sorted({x["iw"]["iw"] for x in fast}) == [10, 15, 20, 25, 30], (r.policy, len(fast))
        # Later tables: two-IW sets the learner moved to, the last one served last.
        last = max(edge, key=lambda x: x["time_unix_ms"])
        assert last["iw"]["table_version"] == versions[-1] and len(last["iw"]["iw_set"]) == 2, last["iw"]


def test_the_route_fallback_sets_initcwnd_per_prefix_one_iw_per_interval_and_restores_the_routes(
    gearbox_bin: Path, tmp_path: Path
) -> None:
    """`--cwnd-routes` (what the edge falls back to without BPF): two namespaces of this test's
    own joined by a veth pair, the edge in one and curl in the other. The edge replaces the
    route to the client's /24 with one carrying `initcwnd`; the client's connections get that
    window (the record says `route`, and TCP_INFO's window started at 37 segments); a new table draws
    one IW of its set for the whole interval; at shutdown the route is back as it was."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces and routes); make test runs as root")
    tag = secrets.token_hex(3)
    server, client = f"gbx-tw-s-{os.getpid()}-{tag}", f"gbx-tw-c-{os.getpid()}-{tag}"
    cert, key = make_cert(gearbox_bin, tmp_path, "edge")
    table = tmp_path / "cwnd.toml"
    table.write_text('version = 1\ncap = 100\n[[cluster]]\nprefix = "10.77.0.0/24"\niw = [37, 37]\n')
    telemetry, log = tmp_path / "edge.jsonl", tmp_path / "edge.log"
    proc = None
    made: list[str] = []
    try:
        for ns in (server, client):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"tw{tag}s", "netns", server, "type", "veth", "peer", "name", f"tw{tag}c", "netns", client)
        for ns, dev, addr in ((server, f"tw{tag}s", "10.77.0.1/24"), (client, f"tw{tag}c", "10.77.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")

        def route() -> str:
            return subprocess.run(
                ["ip", "-n", server, "-o", "route", "show", "exact", "10.77.0.0/24"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()

        before = route()
        assert before and "initcwnd" not in before, before
        proc = _start_edge(gearbox_bin, server, "10.77.0.1:4433", cert, key, telemetry, table, log, "--cwnd-routes")

        def get(path: str) -> dict:
            _curl_until_served(client, f"https://10.77.0.1:4433{path}", proc, log)
            return _record_of(telemetry, path, log)

        r = get("/bytes/100")
        assert "initcwnd 37" in route(), route()
        text = log.read_text()
        assert "per-prefix routes with initcwnd" in text and "not per connection" in text, text
        assert r["iw"] == {
            "cluster": "10.77.0.0/24",
            "hour": r["iw"]["hour"],
            "iw_set": [37, 37],
            "iw": 37,
            "table_version": 1,
            "source": "route",
        }, r["iw"]
        assert _starts_at(r["transport"]["cwnd_bytes"], 37), r["transport"]

        # A new table (a new learning interval): one IW of [20, 30] for every connection of it.
        table.with_name("next.toml").write_text(
            'version = 2\ncap = 100\n[[cluster]]\nprefix = "10.77.0.0/24"\niw = [20, 30]\n'
        )
        table.with_name("next.toml").rename(table)
        # The edge polls the file every second: 20 records of the new table, for at most 60 s.
        drawn = set()
        newer = 0
        deadline = time.monotonic() + 60
        i = 0
        while newer < 20:
            assert time.monotonic() < deadline, f"60 s and {newer} records of table 2"
            x = get(f"/bytes/{300 + i}")
            i += 1
            if x["iw"]["table_version"] == 2:
                newer += 1
                drawn.add(x["iw"]["iw"])
                assert _starts_at(x["transport"]["cwnd_bytes"], x["iw"]["iw"]), x
        assert len(drawn) == 1 and drawn <= {20, 30}, drawn
        assert f"initcwnd {drawn.pop()}" in route(), route()
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()
        assert route() == before, (route(), before)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert server not in listed and client not in listed
