"""The opt-in non-inferiority rule (docs/reference.md §5.4). Pure.

A cell passes only when the data show, at the rule's confidence (one-sided), that the
configuration is no worse than the baseline by more than the rule's margin:

- rates (success_rate, summary_quality): the lower bound of rate(config) - rate(base),
  Newcombe's hybrid score interval (each side's Wilson interval at the two-sided level
  2 x confidence - 1), must be above -margin;
- input_tokens: the upper bound of median(config) / median(base) (a seeded percentile
  bootstrap) must be at most 1 + margin on small and medium inputs, and below 1 on
  large ones (fewer tokens, shown). Fewer values than `advisory.min_runs_for(confidence)`
  on a side give no interval: not shown, so the cell fails.

Unlike the literal rule, more runs make a configuration as good as the baseline pass
more often (`spillover-harness plan` gives the figures by n).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from spillover_harness import stats
from spillover_harness.evaluate.advisory import min_runs_for
from spillover_harness.plan.matrix import Rule

FloatArray = npt.NDArray[np.float64]
TOKEN_RESAMPLES = 2000


def _z(confidence: float) -> float:
    """The normal quantile of a one-sided bound at `confidence`."""
    return float(sps.norm.ppf(confidence))


def wilson(k: npt.ArrayLike, n: npt.ArrayLike, z: float) -> tuple[FloatArray, FloatArray]:
    """Wilson score interval of k successes in n trials (vectorized; n > 0)."""
    k_ = np.asarray(k, dtype=np.float64)
    n_ = np.asarray(n, dtype=np.float64)
    p = k_ / n_
    denominator = 1 + z * z / n_
    centre = (p + z * z / (2 * n_)) / denominator
    half = z * np.sqrt(p * (1 - p) / n_ + z * z / (4 * n_ * n_)) / denominator
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def difference_lower(
    k_config: npt.ArrayLike, n_config: int, k_base: npt.ArrayLike, n_base: int, confidence: float
) -> FloatArray:
    """Newcombe's hybrid score lower bound of rate(config) - rate(base), one-sided."""
    z = _z(confidence)
    p1 = np.asarray(k_config, dtype=np.float64) / n_config
    p2 = np.asarray(k_base, dtype=np.float64) / n_base
    low1, _ = wilson(k_config, n_config, z)
    _, high2 = wilson(k_base, n_base, z)
    bound: FloatArray = (p1 - p2) - np.sqrt((p1 - low1) ** 2 + (high2 - p2) ** 2)
    return bound


def rate_non_inferior(
    k_config: npt.ArrayLike, n_config: int, k_base: npt.ArrayLike, n_base: int, rule: Rule
) -> npt.NDArray[np.bool_]:
    return np.asarray(
        difference_lower(k_config, n_config, k_base, n_base, rule.confidence) > -rule.margin
    )


def token_ratio_upper(
    config: Sequence[int], base: Sequence[int], confidence: float, *, seed: int = 0
) -> float | None:
    """The one-sided upper bound of median(config) / median(base), None when a side has
    too few values for any interval of a median at `confidence`. At a confidence of 0.5
    (which the matrix allows) the bound is the bootstrap distribution's median: a
    two-sided level of 0, which the percentile interval has no other form for."""
    least = min_runs_for(2 * confidence - 1)
    if len(config) < least or len(base) < least:
        return None
    if 2 * confidence - 1 <= 0.0:
        mid = stats.bootstrap_median_ratio_ci(
            config, base, confidence=0.01, resamples=TOKEN_RESAMPLES, seed=seed
        )
        return None if mid is None else (mid[0] + mid[1]) / 2
    ci = stats.bootstrap_median_ratio_ci(
        config, base, confidence=2 * confidence - 1, resamples=TOKEN_RESAMPLES, seed=seed
    )
    return None if ci is None else ci[1]


def tokens_non_inferior(
    config: Sequence[int], base: Sequence[int], *, large: bool, rule: Rule
) -> tuple[bool, str]:
    """Whether the cell passes, and the figure that says why."""
    upper = token_ratio_upper(config, base, rule.confidence)
    if upper is None:
        least = min_runs_for(2 * rule.confidence - 1)
        return False, (
            f"not shown: fewer than {least} known values on a side give no "
            f"{rule.confidence:.0%} bound of the median ratio"
        )
    limit = 1.0 if large else 1.0 + rule.margin
    ok = upper < limit if large else upper <= limit
    sign = ("<" if ok else ">=") if large else ("<=" if ok else ">")
    return (
        ok,
        f"{rule.confidence:.0%} upper bound of the median ratio {upper:.3f} {sign} {limit:.2f}",
    )
