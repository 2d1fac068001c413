"""The one median, and the advisory statistics of the evaluator and the report.

`median` is the exact median every part of the harness uses (the criteria,
the per-cell tables, the plots): a Fraction, so that comparisons such as
`110 <= 1.10 x 100` hold exactly.

Nothing else here changes a status or the decision: the verdict follows the
reference's rules on the raw figures. The bootstrap figures only tell a reader
how solid a comparison looks and roughly how many more runs would settle a
close one. Two bootstraps:

- independent (`bootstrap_median_ratio_ci`): each side resampled on its own,
  the statistic is median(config) / median(baseline);
- paired (`bootstrap_paired_median_ratio_ci`): for runs that pair (the same
  seed and input on both sides), the per-pair ratios config_i / baseline_i
  (the paired differences on the log scale) are resampled and the statistic
  is their median. The seed's share of the variation cancels out, so a
  configuration that does exactly what the baseline does gets a zero-width
  interval instead of an interval as wide as the seeds' spread.

The bootstrap draws each resample's median straight from its order
statistics instead of materialising `n` indices per resample. For a sample
of size `n` resampled with replacement, the k-th smallest resampled value is
`sorted[floor(n * U)]` where `U` is the k-th order statistic of `n` uniforms,
`U ~ Beta(k, n - k + 1)`; the next one is `U + (1 - U) * Beta(1, n - k)`.
That is the ordinary percentile bootstrap of the median, exact in
distribution, at a cost of O(resamples) whatever the sample size, so it stays
cheap on 100,000 records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def median(values: Sequence[float | Fraction]) -> Fraction | None:
    """The usual median, exact: the mean of the two middle values for an even count.

    None for no value. Floats are taken at their exact binary value.
    """
    if not values:
        return None
    ordered: list[float | Fraction] = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return Fraction(ordered[mid])
    return (Fraction(ordered[mid - 1]) + Fraction(ordered[mid])) / 2


def median_float(values: Sequence[float]) -> float | None:
    """`median` as a float (for tables and JSON figures that are not compared)."""
    m = median(values)
    return None if m is None else float(m)


def bootstrap_medians(
    sorted_values: FloatArray, resamples: int, rng: np.random.Generator
) -> FloatArray:
    """`resamples` medians of resamples (with replacement) of `sorted_values`."""
    n = len(sorted_values)
    if n % 2 == 1:
        k = (n + 1) // 2
        u = rng.beta(k, n - k + 1, size=resamples)
        idx = np.minimum((u * n).astype(np.int64), n - 1)
        result: FloatArray = sorted_values[idx]
        return result
    k = n // 2
    u_low = rng.beta(k, n - k + 1, size=resamples)
    u_high = u_low + (1.0 - u_low) * rng.beta(1, n - k, size=resamples)
    low = np.minimum((u_low * n).astype(np.int64), n - 1)
    high = np.minimum((u_high * n).astype(np.int64), n - 1)
    medians: FloatArray = (sorted_values[low] + sorted_values[high]) / 2.0
    return medians


def bootstrap_median_ratio_ci(
    config_values: Sequence[float],
    baseline_values: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of median(config) / median(baseline).

    Both sides are resampled independently. Deterministic for a given seed.
    Returns None when either side is empty or when a resampled baseline
    median is not positive (the ratio is then undefined).
    """
    _check_settings(confidence, resamples)
    if len(config_values) == 0 or len(baseline_values) == 0:
        return None
    config_sorted = np.sort(np.asarray(config_values, dtype=np.float64))
    baseline_sorted = np.sort(np.asarray(baseline_values, dtype=np.float64))
    rng = np.random.default_rng(seed)
    config_medians = bootstrap_medians(config_sorted, resamples, rng)
    baseline_medians = bootstrap_medians(baseline_sorted, resamples, rng)
    if bool(np.any(baseline_medians <= 0.0)):
        return None
    ratios = config_medians / baseline_medians
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def _check_settings(confidence: float, resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def bootstrap_paired_median_ratio_ci(
    config_values: Sequence[float] | FloatArray,
    baseline_values: Sequence[float] | FloatArray,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the median of the per-pair ratios config_i / baseline_i.

    `config_values[i]` and `baseline_values[i]` are one pair (runs of the same
    seed and input). The pairs are resampled together, i.e. the one sample of
    per-pair ratios is. Deterministic for a given seed. Returns None without a
    pair or when a baseline value is not positive (a ratio is then undefined).
    """
    _check_settings(confidence, resamples)
    if len(config_values) != len(baseline_values):
        raise ValueError(
            f"paired samples must have the same length ({len(config_values)} vs "
            f"{len(baseline_values)})"
        )
    if len(config_values) == 0:
        return None
    base = np.asarray(baseline_values, dtype=np.float64)
    if bool(np.any(base <= 0.0)):
        return None
    ratios = np.sort(np.asarray(config_values, dtype=np.float64) / base)
    medians = bootstrap_medians(ratios, resamples, np.random.default_rng(seed))
    alpha = 1.0 - confidence
    low, high = np.quantile(medians, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(low), float(high)


def estimated_runs_to_resolve(
    point: float,
    ci: tuple[float, float],
    limit: float,
    n: int,
    *,
    max_runs: int = 10_000,
) -> int | None:
    """Roughly how many runs per side (or pairs) would make the CI clear `limit`.

    Assumes the CI's half-width on the side facing the limit shrinks as
    1/sqrt(n) and the point estimate stays where it is: a rough planning
    figure, not a promise. Returns `n` when the CI already clears the limit,
    None when no realistic number of runs would (the point sits on the
    limit, or it would take more than `max_runs`).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    low, high = ci
    if not low <= limit <= high:
        return n
    gap = abs(point - limit)
    if gap == 0.0:
        return None
    half = (high - point) if limit >= point else (point - low)
    needed = max(math.ceil(n * (half / gap) ** 2), n + 1)
    if needed > max_runs:
        return None
    return needed
