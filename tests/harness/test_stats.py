"""The one median; advisory statistics: the bootstrap CIs of a median ratio (independent
and paired) and the runs-to-resolve hint."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from spillover_harness.stats import (
    bootstrap_median_ratio_ci,
    bootstrap_paired_median_ratio_ci,
    estimated_runs_to_resolve,
    median,
    median_float,
)

CONFIG = [930.0, 1010.0, 870.0, 1200.0, 990.0, 1040.0, 905.0]
BASELINE = [1000.0, 1100.0, 1050.0, 980.0, 1020.0, 1500.0]


def test_deterministic_by_seed() -> None:
    a = bootstrap_median_ratio_ci(CONFIG, BASELINE, seed=7)
    b = bootstrap_median_ratio_ci(CONFIG, BASELINE, seed=7)
    c = bootstrap_median_ratio_ci(CONFIG, BASELINE, seed=8)
    assert a is not None and c is not None
    assert a == b
    assert a != c


def test_ci_brackets_the_point_ratio() -> None:
    ci = bootstrap_median_ratio_ci(CONFIG, BASELINE)
    assert ci is not None
    point = float(np.median(CONFIG) / np.median(BASELINE))
    low, high = ci
    assert low <= point <= high
    assert low < high


def test_constant_samples_give_a_degenerate_ci() -> None:
    assert bootstrap_median_ratio_ci([110.0] * 4, [100.0] * 5) == pytest.approx((1.1, 1.1))


def test_single_values() -> None:
    assert bootstrap_median_ratio_ci([50.0], [100.0]) == pytest.approx((0.5, 0.5))


def test_none_without_data_or_with_a_zero_baseline() -> None:
    assert bootstrap_median_ratio_ci([], BASELINE) is None
    assert bootstrap_median_ratio_ci(CONFIG, []) is None
    assert bootstrap_median_ratio_ci(CONFIG, [0.0, 0.0, 0.0]) is None


def test_wider_confidence_gives_a_wider_interval() -> None:
    narrow = bootstrap_median_ratio_ci(CONFIG, BASELINE, confidence=0.5, seed=3)
    wide = bootstrap_median_ratio_ci(CONFIG, BASELINE, confidence=0.99, seed=3)
    assert narrow is not None and wide is not None
    assert wide[0] <= narrow[0] and narrow[1] <= wide[1]
    assert wide[1] - wide[0] > narrow[1] - narrow[0]


@pytest.mark.parametrize("n_config,n_base", [(5, 5), (6, 4), (41, 40)])
def test_matches_the_naive_resampling_bootstrap(n_config: int, n_base: int) -> None:
    """The order-statistic shortcut and plain resampling agree (both with many resamples)."""
    data_rng = np.random.default_rng(123)
    config = data_rng.lognormal(7.0, 0.3, size=n_config)
    base = data_rng.lognormal(7.1, 0.3, size=n_base)
    resamples = 40_000
    rng = np.random.default_rng(5)
    c_idx = rng.integers(0, n_config, size=(resamples, n_config))
    b_idx = rng.integers(0, n_base, size=(resamples, n_base))
    ratios = np.median(config[c_idx], axis=1) / np.median(base[b_idx], axis=1)
    naive_low, naive_high = np.quantile(ratios, [0.025, 0.975])
    ci = bootstrap_median_ratio_ci(list(config), list(base), resamples=resamples, seed=11)
    assert ci is not None
    assert ci[0] == pytest.approx(naive_low, rel=0.03)
    assert ci[1] == pytest.approx(naive_high, rel=0.03)


def test_large_samples_stay_cheap_and_bounded() -> None:
    rng = np.random.default_rng(0)
    config = list(rng.normal(1000.0, 50.0, size=50_000))
    base = list(rng.normal(1000.0, 50.0, size=50_000))
    ci = bootstrap_median_ratio_ci(config, base, resamples=500)
    assert ci is not None
    assert 0.99 < ci[0] <= ci[1] < 1.01


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_median_ratio_ci(CONFIG, BASELINE, confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_median_ratio_ci(CONFIG, BASELINE, resamples=0)


# -- the median ------------------------------------------------------------------------


def test_median_is_exact() -> None:
    assert median([4, 1, 3, 2]) == Fraction(5, 2)
    assert median([7]) == 7 and isinstance(median([7]), Fraction)
    assert median([]) is None
    assert median([1, 2]) == Fraction(3, 2)
    assert median([0.1, 0.2]) == (Fraction(0.1) + Fraction(0.2)) / 2  # the floats' exact values
    assert median_float([10.0, 11.0, 13.0, 17.0]) == 12.0
    assert median_float([]) is None


# -- the paired bootstrap ----------------------------------------------------------------

SEEDED = [600.0, 900.0, 1200.0, 1500.0, 2000.0, 2600.0]


def test_paired_identical_samples_give_a_zero_width_ci_where_unpaired_do_not() -> None:
    assert bootstrap_paired_median_ratio_ci(SEEDED, SEEDED) == (1.0, 1.0)
    unpaired = bootstrap_median_ratio_ci(SEEDED, SEEDED)
    assert unpaired is not None and unpaired[0] < 0.9 and unpaired[1] > 1.1


def test_paired_ci_follows_a_consistent_ratio_whatever_the_seed_spread() -> None:
    ci = bootstrap_paired_median_ratio_ci([x * 0.9 for x in SEEDED], SEEDED)
    assert ci == pytest.approx((0.9, 0.9))


def test_paired_ci_brackets_the_median_per_pair_ratio_and_is_deterministic() -> None:
    config = [x * f for x, f in zip(SEEDED, (0.8, 1.1, 0.95, 1.0, 0.9, 1.2), strict=True)]
    a = bootstrap_paired_median_ratio_ci(config, SEEDED, seed=3)
    assert a is not None and a == bootstrap_paired_median_ratio_ci(config, SEEDED, seed=3)
    point = float(np.median(np.asarray(config) / np.asarray(SEEDED)))
    assert a[0] <= point <= a[1] and a[0] < a[1]


def test_paired_matches_naive_resampling_of_pairs() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(7.0, 0.5, size=15)
    config = base * rng.lognormal(-0.05, 0.1, size=15)
    resamples = 40_000
    idx = np.random.default_rng(2).integers(0, 15, size=(resamples, 15))
    medians = np.median((config / base)[idx], axis=1)
    naive = np.quantile(medians, [0.025, 0.975])
    ci = bootstrap_paired_median_ratio_ci(list(config), list(base), resamples=resamples, seed=4)
    assert ci is not None
    assert ci[0] == pytest.approx(naive[0], rel=0.02)
    assert ci[1] == pytest.approx(naive[1], rel=0.02)


def test_paired_refuses_unequal_lengths_and_has_no_ci_without_pairs() -> None:
    with pytest.raises(ValueError, match="same length"):
        bootstrap_paired_median_ratio_ci([1.0], [1.0, 2.0])
    assert bootstrap_paired_median_ratio_ci([], []) is None
    assert bootstrap_paired_median_ratio_ci([1.0, 2.0], [1.0, 0.0]) is None
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_paired_median_ratio_ci([1.0], [1.0], confidence=0.0)


# -- runs to resolve a close call --------------------------------------------------------


def test_runs_to_resolve_scales_with_the_square_of_the_width_over_the_gap() -> None:
    # half-width 0.25 towards the limit, gap 0.1: 5 * (0.25 / 0.1)^2 = 31.25 -> 32
    assert estimated_runs_to_resolve(1.0, (0.9, 1.25), 1.1, 5) == 32


def test_runs_to_resolve_uses_the_side_facing_the_limit() -> None:
    # limit below the point: the lower half-width (0.12) faces it; gap 0.05 -> 28.8 -> 29
    assert estimated_runs_to_resolve(1.0, (0.88, 1.5), 0.95, 5) == 29


def test_runs_to_resolve_when_already_clear_or_hopeless() -> None:
    assert estimated_runs_to_resolve(0.8, (0.7, 0.9), 1.1, 5) == 5
    assert estimated_runs_to_resolve(1.1, (1.0, 1.2), 1.1, 5) is None
    assert estimated_runs_to_resolve(1.0, (0.5, 1.5), 1.001, 5, max_runs=1000) is None
    with pytest.raises(ValueError):
        estimated_runs_to_resolve(1.0, (0.9, 1.2), 1.1, 0)
