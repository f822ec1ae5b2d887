"""require_all.py: under GEARBOX_REQUIRE_ALL=1 (make test) a skip fails; without it, a skip
is a skip and its reason is printed."""

from __future__ import annotations

import pytest

CONFTEST = "from require_all import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n"
TESTS = """
import pytest

@pytest.fixture
def missing_binary():
    pytest.skip("no frobnicator binary")

def test_skips_itself():
    pytest.skip("no widget module")

def test_skips_in_a_fixture(missing_binary):
    pass

@pytest.mark.skipif(True, reason="not on this machine")
def test_marked():
    pass

def test_runs():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
"""
SKIPPED_MODULE = 'import pytest\npytest.importorskip("no_such_module_gearbox")\n\ndef test_never():\n    pass\n'


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_things=TESTS, test_skipped_module=SKIPPED_MODULE)
    return pytester


def test_without_the_variable_skips_are_skips_with_their_reasons(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEARBOX_REQUIRE_ALL", raising=False)
    result = project.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no widget module*", "*SKIPPED*no frobnicator binary*"])
    assert result.ret == pytest.ExitCode.OK


def test_under_make_test_every_skip_fails_naming_its_reason(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEARBOX_REQUIRE_ALL", "1")
    result = project.runpytest("--continue-on-collection-errors")
    # The test's skip fails it; a fixture's or a mark's skip (setup) errors it; the
    # skipped module is a collection error; a passing test and an xfail are untouched.
    result.assert_outcomes(passed=1, failed=1, errors=3, xfailed=1)
    result.stdout.fnmatch_lines_random(
        [
            "*GEARBOX_REQUIRE_ALL=1 (make test) turns every skip into a failure: Skipped: no widget module*",
            "*turns every skip into a failure: Skipped: no frobnicator binary*",
            "*turns every skip into a failure: Skipped: not on this machine*",
            "*turns every skip into a failure*could not import 'no_such_module_gearbox'*",
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # Without --continue-on-collection-errors, the skipped module alone stops the session.
    assert project.runpytest().ret == pytest.ExitCode.INTERRUPTED
