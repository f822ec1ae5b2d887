"""Space-filling samples of network conditions: the WSP algorithm.

Floo (Floo §4.3.1, docs/papers.md) picks its RTT, jitter, loss and buffer values "using the
space-filling WSP algorithm [17, 44] over the ranges listed in Tab. 4". WSP (Wootton,
Sergent, Phan-Tan-Luu; in the form of Santiago, Claeys-Bruno and Sergent, Chemometrics
and Intelligent Laboratory Systems 113:26-31, 2012, Floo's ref. [44]) thins a large
random candidate set into points that are at least `d_min` apart:

1. draw `m` candidate points uniformly in the unit cube;
2. start at the candidate nearest the centre;
3. remove every candidate closer than `d_min` to the current point;
4. move to the nearest remaining candidate, select it, and repeat from 3 until none is left.

The number of points selected falls as `d_min` grows; to return exactly `n` points we
bisect on `d_min` for the largest value that still selects at least `n`, and keep the
first `n` selected (every pair of them is at least `d_min` apart, since each selection
removed its whole `d_min` neighbourhood). Everything is seeded, so the same
`(n, dims, seed, candidates)` gives the same points on every machine.

Why our own: no well-kept Python library implements WSP. `scipy.stats.qmc` has Sobol,
Halton, Latin hypercube and Poisson-disk sampling, but not WSP (and Poisson-disk
cannot be asked for exactly `n` points); pyDOE and its forks offer factorial and
Latin-hypercube designs. The algorithm is the thirty lines below.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gearbox.lab.scenario import SampleSpec


def _select(points: np.ndarray, start: int, d_min: float) -> list[int]:
    """One WSP pass: indices of the selected candidates, in the order selected. Works on
    the shrinking set of candidates still in play, so a pass costs about m x n / 2."""
    ids = np.arange(len(points))
    left = points
    j = start  # position of the current point in `left`
    selected = [start]
    while True:
        d = np.sqrt(((left - left[j]) ** 2).sum(axis=1))
        keep = d >= d_min
        keep[j] = False
        ids, left, d = ids[keep], left[keep], d[keep]
        if not len(ids):
            return selected
        j = int(np.argmin(d))
        selected.append(int(ids[j]))


def wsp(n: int, dims: int, seed: int, candidates: int | None = None) -> np.ndarray:
    """`n` space-filling points in the unit cube `[0, 1]^dims`, as an `(n, dims)` array.

    `candidates` (default `max(1000, 50 n)`) is the size of the random set WSP thins;
    more candidates give slightly better spacing for more time (each pass is
    O(candidates x selected)).
    """
    if n < 1 or dims < 1:
        raise ValueError(f"wsp needs n >= 1 and dims >= 1, got n={n}, dims={dims}")
    m = candidates if candidates is not None else max(1000, 50 * n)
    if m < n:
        raise ValueError(f"wsp needs at least n={n} candidates, got {m}")
    rng = np.random.default_rng(seed)
    points = rng.random((m, dims))
    start = int(np.argmin(((points - 0.5) ** 2).sum(axis=1)))
    lo, hi = 0.0, math.sqrt(dims)  # d_min = 0 keeps all m; sqrt(dims) keeps only the start
    best: list[int] | None = None  # d_min = lo = 0 would select all m: computed only if needed
    for _ in range(40):
        mid = (lo + hi) / 2.0
        chosen = _select(points, start, mid)
        if len(chosen) == n:
            best = chosen
            break
        if len(chosen) > n:
            lo, best = mid, chosen
        else:
            hi = mid
        if hi - lo < 1e-6:
            break
    if best is None:
        best = _select(points, start, 0.0)
    return points[best[:n]]


def min_pairwise_distance(points: np.ndarray) -> float:
    """The smallest distance between two of the points (inf for fewer than two)."""
    if len(points) < 2:
        return math.inf
    diff = points[:, None, :] - points[None, :, :]
    d = np.sqrt((diff**2).sum(axis=2))
    d[np.diag_indices(len(points))] = np.inf
    return float(d.min())


def scale(unit: np.ndarray, ranges: list[tuple[float, float]], log_scale: list[bool]) -> np.ndarray:
    """Maps unit-cube points onto `ranges`, linearly or (where `log_scale`) geometrically."""
    out = np.empty_like(unit)
    for j, ((lo, hi), log) in enumerate(zip(ranges, log_scale, strict=True)):
        if log:
            out[:, j] = np.exp(np.log(lo) + unit[:, j] * (np.log(hi) - np.log(lo)))
        else:
            out[:, j] = lo + unit[:, j] * (hi - lo)
    return out


def sample_conditions(spec: SampleSpec) -> list[dict[str, float | int]]:
    """The sampled values of a scenario's `[sample]`, one dict per point (in WSP order)."""
    keys = list(spec.ranges)
    unit = wsp(spec.n, len(keys), spec.seed, spec.candidates)
    values = scale(unit, [spec.ranges[k] for k in keys], [k in spec.log_scale for k in keys])
    from gearbox.lab.scenario import KNOBS

    out: list[dict[str, float | int]] = []
    for row in values:
        point: dict[str, float | int] = {}
        for k, v in zip(keys, row, strict=True):
            # Six significant digits: readable in tables, far below what a link resolves.
            point[k] = int(round(v)) if KNOBS[k][0] == "int" else float(f"{v:.6g}")
        out.append(point)
    return out
