"""Advisory statistics: the bootstrap CI of a median ratio and the runs-to-resolve hint."""

from __future__ import annotations

import numpy as np
import pytest
from spillover_harness.stats import bootstrap_median_ratio_ci, estimated_runs_to_resolve

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
