"""Fixtures: a real `gearbox edge` in a subprocess, with its own certificate.

The binary is $GEARBOX_BIN, else target/release/gearbox or target/debug/gearbox (the newer
one); build it with `cargo build -p gearbox-cli`. Tests that need it are skipped, saying so,
when none is found and GEARBOX_BIN is unset; under `make test` (GEARBOX_REQUIRE_ALL=1) every
skip is a failure (require_all.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from require_all import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (hooks)
from support import Edge, find_gearbox_bin, running_edge


@pytest.fixture(scope="session")
def gearbox_bin() -> Path:
    path = find_gearbox_bin()
    if path is None:
        pytest.skip("no gearbox binary: run `cargo build -p gearbox-cli` or set GEARBOX_BIN")
    if not os.access(path, os.X_OK):
        pytest.fail(f"GEARBOX_BIN={path} is not an executable file")
    return path


@pytest.fixture(scope="module")
def edge(gearbox_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    with running_edge(gearbox_bin, tmp_path_factory.mktemp("edge")) as edge:
        yield edge


@pytest.fixture(scope="session")
def other_cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A certificate the edge was not given: trusting only it must fail the handshake."""
    import gearbox

    directory = tmp_path_factory.mktemp("other")
    cert, key = directory / "other.pem", directory / "other-key.pem"
    gearbox.make_cert(["localhost", "127.0.0.1"], cert, key)
    return cert


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[object]:
    """A FlexHTTP agent (`gearbox agent serve`, the control plane's app with its routes) on
    loopback with its probe port, stopped after the test (test_flexhttp_agent, _client)."""
    from control_support import control_plane
    from support import free_port

    probe_port = free_port()
    extra = f'\n[agent]\nprobe_listen = "127.0.0.1:{probe_port}"\nwindow_s = 60\nk = 12\n'
    a = control_plane(tmp_path / "agent", "store", extra=extra, start=False)
    a.module = "gearbox.flexhttp"
    a.start()
    try:
        yield a
    finally:
        a.stop()
