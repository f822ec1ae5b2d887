"""The WSP space-filling sampler (Floo §4.3.1)."""

from __future__ import annotations

import numpy as np
import pytest

from gearbox.lab.sampling import min_pairwise_distance, sample_conditions, scale, wsp
from gearbox.lab.scenario import SampleSpec


@pytest.mark.parametrize(("n", "dims"), [(1, 3), (5, 2), (20, 4), (60, 5)])
def test_wsp_gives_exactly_n_points_inside_the_unit_cube(n: int, dims: int) -> None:
    p = wsp(n, dims, seed=1)
    assert p.shape == (n, dims)
    assert np.all((p >= 0) & (p <= 1))


def test_wsp_is_deterministic_for_a_seed_and_changes_with_it() -> None:
    assert np.array_equal(wsp(20, 4, seed=7), wsp(20, 4, seed=7))
    assert not np.array_equal(wsp(20, 4, seed=7), wsp(20, 4, seed=8))


@pytest.mark.parametrize(("n", "dims", "floor"), [(20, 4, 0.45), (60, 5, 0.42), (10, 2, 0.2)])
def test_wsp_points_are_spread_far_better_than_random_ones(n: int, dims: int, floor: float) -> None:
    spread = min_pairwise_distance(wsp(n, dims, seed=1))
    rng = np.random.default_rng(0)
    best_random = max(min_pairwise_distance(rng.random((n, dims))) for _ in range(50))
    assert spread > floor
    assert spread > 1.5 * best_random


def test_wsp_spreads_well_for_every_seed() -> None:
    assert min(min_pairwise_distance(wsp(20, 4, seed=s)) for s in range(10)) > 0.4


def test_wsp_refuses_impossible_requests() -> None:
    with pytest.raises(ValueError):
        wsp(0, 2, seed=1)
    with pytest.raises(ValueError):
        wsp(10, 2, seed=1, candidates=5)


def test_scaling_maps_the_cube_onto_the_ranges_linearly_or_geometrically() -> None:
    unit = np.array([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]])
    out = scale(unit, [(10.0, 200.0), (1.0, 100.0)], [False, True])
    assert out[:, 0] == pytest.approx([10.0, 105.0, 200.0])
    assert out[:, 1] == pytest.approx([1.0, 10.0, 100.0])


def test_sampled_conditions_stay_inside_their_ranges() -> None:
    ranges = {
        "bandwidth_mbps": (1.0, 100.0),
        "rtt_ms": (10.0, 200.0),
        "loss_rate": (0.0, 0.05),
        "buffer_bdp": (0.3, 1.5),
    }
    points = sample_conditions(SampleSpec(method="wsp", n=20, seed=1, ranges=ranges, log_scale=["bandwidth_mbps"]))
    assert len(points) == 20
    for p in points:
        assert set(p) == set(ranges)
        for k, (lo, hi) in ranges.items():
            assert lo <= p[k] <= hi
    assert len({p["rtt_ms"] for p in points}) == 20
