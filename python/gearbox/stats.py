"""The one percentile of gearbox's Python side (docs/telemetry.md, "Percentiles").

Every median, p90 and p99 the lab and the WiseTrans pipelines report goes through
`percentile`, so that two tables of the same requests agree to the last digit, and
agree with the Rust side (`gearbox load`), which follows the same definition.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def percentile(values: Iterable[float] | np.ndarray, p: float) -> float:
    """The `p`-th percentile (0 <= p <= 100) of `values` by linear interpolation between
    the closest ranks (Hyndman & Fan type 7, numpy's `method="linear"`): for the sorted
    x[0..n), h = (n - 1) * p / 100 and the result is x[floor h] + (h - floor h) *
    (x[floor h + 1] - x[floor h]). One value is every percentile of itself.

    Raises ValueError for no values, a NaN among them, or p outside [0, 100]; callers
    drop missing values (failed requests, NaN) first and say so."""
    x = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    if x.size == 0:
        raise ValueError("the percentile of no values is undefined")
    if np.isnan(x).any():
        raise ValueError("a NaN among the values: drop missing values before taking a percentile")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"a percentile is between 0 and 100, got {p}")
    return float(np.percentile(x, p, method="linear"))
