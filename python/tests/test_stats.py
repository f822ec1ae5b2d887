"""gearbox.stats.percentile: the one definition (docs/telemetry.md, "Percentiles")."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gearbox.lab.summary import rct_stats
from gearbox.stats import percentile


def by_the_definition(values: list[float], p: float) -> float:
    """docs/telemetry.md, written out: h = (n-1) p / 100, interpolate x[floor h] .. x[floor h + 1]."""
    x = sorted(values)
    h = (len(x) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (h - lo) * (x[hi] - x[lo])


def test_the_documented_examples() -> None:
    x = [40.0, 10.0, 30.0, 20.0]  # sorted: 10 20 30 40
    assert percentile(x, 0) == 10.0 and percentile(x, 100) == 40.0
    assert percentile(x, 50) == pytest.approx(25.0)  # h = 1.5
    assert percentile(x, 90) == pytest.approx(37.0)  # h = 2.7: 30 + 0.7 * 10
    assert percentile([7.0], 99) == 7.0
    # p99 of 1..100 is 99.01 (h = 98.01), where nearest rank would say 99.
    assert percentile([float(v) for v in range(1, 101)], 99) == pytest.approx(99.01)


def test_it_agrees_with_the_written_definition_on_random_samples() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.lognormvariate(4, 1) for _ in range(n)]
        for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert percentile(values, p) == pytest.approx(by_the_definition(values, p), rel=1e-12), (n, p)
    assert percentile(np.array([3.0, 1.0, 2.0]), 50) == 2.0


@pytest.mark.parametrize(
    ("values", "p", "message"),
    [([], 50, "no values"), ([1.0, float("nan")], 50, "NaN"), ([1.0], 101, "between 0 and 100"), ([1.0], -1, "0")],
)
def test_undefined_percentiles_are_refused(values: list[float], p: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        percentile(values, p)


def test_the_lab_statistics_use_it() -> None:
    values = [5.0, 1.0, 9.0, 2.0, 7.0, None, float("inf")]  # missing and infinite values are dropped
    kept = [5.0, 1.0, 9.0, 2.0, 7.0]
    s = rct_stats(values)  # type: ignore[arg-type]
    assert s["median_ms"] == percentile(kept, 50)
    assert s["p90_ms"] == percentile(kept, 90) == pytest.approx(8.2)
    assert s["p99_ms"] == percentile(kept, 99)
