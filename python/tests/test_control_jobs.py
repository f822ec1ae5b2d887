"""The control plane's scheduled learners ([jobs]) and its dashboard in a real browser."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from control_support import client_record, control_plane, edge_record, store_spec
from control_support import postgres as postgres  # noqa: F401 (fixture)
from test_control import policy_dir

from gearbox.control import policy as pol
from gearbox.control.client import PolicyPoller, Uploader, wait_for

JOBS = """
[jobs.tcpwise]
gear = "tcpwise"
every_s = 1
command = ["{python}", "-m", "gearbox.tcpwise", "learn", "--telemetry", "{telemetry}",
           "--table", "{input}/cwnd.toml", "--out", "{output}/cwnd.toml"]
side = "edge"

[jobs.held]
gear = "held"
every_s = 1
command = ["{python}", "-c", "import shutil, sys; shutil.copy(sys.argv[1] + '/cwnd.toml', sys.argv[2])",
           "{input}", "{output}"]
activate = false

[jobs.broken]
gear = "broken"
every_s = 1
command = ["{python}", "-c", "import sys; print('learner says boom'); sys.exit(3)"]
"""


def iw_record(i: int, iw: int, latency_ms: float) -> dict:
    return edge_record(
        i, server_time_ms=latency_ms, iw={"cluster": "others", "iw_set": [10, 15], "iw": iw, "source": "table"}
    )


@pytest.mark.parametrize("kind", ["embedded", "postgres"])
def test_jobs_learn_from_stored_telemetry_and_push_versions(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    control = control_plane(tmp_path / "control", store_spec(kind, request), extra=JOBS, start=False)
    try:
        for gear in ("tcpwise", "held"):
            r = control.cli("policy", "push", gear, str(policy_dir(tmp_path, gear)), "--token", control.tokens["admin"])
            assert r.returncode != 0  # the service is not up yet: nothing pushed, and it says why
        control.start()
        for gear in ("tcpwise", "held"):
            d = tmp_path / gear
            r = control.cli("policy", "push", gear, str(d), "--activate", "--token", control.tokens["admin"])
            assert r.returncode == 0, r.stderr
        # TCP WISE evidence: β = 15 answers in half the time of α = 10, 150 samples each (S_min 100).
        up = Uploader(control.url, control.tokens["edge"], tmp_path / "spool", control.cert)
        up.add_many(iw_record(i, 10 if i % 2 else 15, 200.0 if i % 2 else 100.0) for i in range(300))
        assert up.flush()
        up.close()

        def active_table() -> str:
            with control.http("edge") as edge:
                want = edge.get("/v1/policies").json()["policies"]["tcpwise"]
                return pol.unpack_files(edge.get(want["url"]).content)["cwnd.toml"].decode()

        assert wait_for(lambda: "iw = [15, 20]" in active_table(), 90, every_s=0.5), active_table()
        with control.http("admin") as admin:

            def runs() -> dict[str, list[dict]]:
                out: dict[str, list[dict]] = {}
                for r in admin.get("/v1/jobs").json()["runs"]:
                    out.setdefault(r["job"], []).append(r)
                return out

            assert wait_for(lambda: any(r["outcome"] == "held" for r in runs().get("held", [])), 60)
            by_job = runs()
            moved = [r for r in by_job["tcpwise"] if r["outcome"] == "activated" and "1 moved" in r["log"]]
            assert moved and "(300 records)" in moved[0]["log"], by_job["tcpwise"]
            v = admin.get("/v1/policies/tcpwise/versions").json()
            learned = [x for x in v["versions"] if x["who"] == "job:tcpwise"]
            assert learned and all(len(x["training_digest"]) == 64 for x in learned)
            held = admin.get("/v1/policies/held/versions").json()
            assert held["active"] == {"global": 1} and len(held["versions"]) >= 2
            broken = by_job["broken"][0]
            assert broken["outcome"] == "failed" and "learner says boom" in broken["log"]
            assert "exit status 3" in broken["log"]
            # A held version waits for an admin, then runs like any other.
            r = admin.post("/v1/policies/held/activate", json={"version": held["versions"][-1]["version"]})
            assert r.status_code == 200
    finally:
        control.stop()


# --- the dashboard --------------------------------------------------------------------------------


def _chromium() -> str:
    for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(p).exists():
            return p
    pytest.fail("chromium is not installed; run scripts/setup.sh (it installs the test peers)")


def test_dashboard_in_headless_chromium_shows_the_edges_with_no_console_error(tmp_path: Path) -> None:
    control = control_plane(tmp_path / "control", "store")
    try:
        r = control.cli(
            "policy",
            "push",
            "tcpwise",
            str(policy_dir(tmp_path, "t")),
            "--activate",
            "--token",
            control.tokens["admin"],
        )
        assert r.returncode == 0, r.stderr
        for name in ("edge-lab-a", "edge-lab-b"):
            token = control.token("edge", name)
            up = Uploader(control.url, token, tmp_path / f"spool-{name}", control.cert)
            up.add_many(edge_record(i) for i in range(20))
            assert up.flush()
            up.close()
            poller = PolicyPoller(control.url, token, tmp_path / f"pol-{name}", control.cert)
            assert [a.version for a in poller.poll_once()] == [1]
            poller.poll_once()  # reports the version it now runs
            poller.close()
        up = Uploader(control.url, control.tokens["client"], tmp_path / "spool-client", control.cert)
        up.add_many(client_record(i, decision="wisetrans;score=0.7" if i % 2 else None) for i in range(40))
        assert up.flush()
        up.close()
        with tempfile.TemporaryDirectory(prefix="gearbox-chromium-") as profile:
            proc = subprocess.run(
                [
                    _chromium(),
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--ignore-certificate-errors",
                    "--enable-logging=stderr",
                    "--v=0",
                    f"--user-data-dir={profile}",
                    "--virtual-time-budget=10000",
                    "--dump-dom",
                    f"{control.url}/dashboard#token={control.tokens['admin']}",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
        dom, log = proc.stdout, proc.stderr
        assert proc.returncode == 0, log
        # Chromium logs every console message and uncaught error as a `CONSOLE` line.
        console = [line for line in log.splitlines() if "CONSOLE" in line]
        assert console == [], "console messages:\n" + "\n".join(console)
        assert "edge-lab-a" in dom and "edge-lab-b" in dom, dom
        assert "tcpwise v1" in dom  # the policy version each edge runs
        assert "<polyline" in dom and "wisetrans" in dom and "baseline" in dom  # the RCT plot
        assert '<p id="error"></p>' in dom  # the page's own fetch went through
        assert "3 peers, 80 records stored" in dom  # two edges and the client
    finally:
        control.stop()
