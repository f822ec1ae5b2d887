"""With GEARBOX_REQUIRE_ALL=1 (set by scripts/test.sh, i.e. `make test`), a skipped test
is a failed one: the set-up installs everything the tests need, and the emulator tests
need root as `make test` as a whole does, so a skip there is a test that should have run
and did not.

A skip in a test or its fixtures becomes a failure of that test; a skip while collecting
a module (`pytest.importorskip` at module level) becomes an error of that module. The
reason the test gave is kept in the report. Without the variable, skips stay skips and
`-rs` (pyproject.toml) prints their reasons. conftest.py imports these hooks.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

ENV = "GEARBOX_REQUIRE_ALL"


def required() -> bool:
    return os.environ.get(ENV) == "1"


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: reason")
        return f"{longrepr[2]} ({longrepr[0]}:{longrepr[1]})"
    return str(longrepr)


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    report.longrepr = f"skipped, and {ENV}=1 (make test) turns every skip into a failure: {_reason(report)}"
    report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if required() and report.skipped and not hasattr(report, "wasxfail"):
        _as_failure(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if required() and report.skipped:
        _as_failure(report)
