"""How far a cell's difference from the baseline could be noise. Pure, exact where it can be.

The acceptance rule is applied literally (`walker`); these figures never change a status.
They say, cell by cell, how surprised one should be by what the rule saw:

- `p_value`: the one-sided probability that a configuration no worse than the baseline
  would show a difference at least this adverse.
  - rates (success, summary quality): Fisher's exact test, conditional on both sides'
    totals, alternative "the configuration's rate is lower";
  - counts of iteration-limit hits: the same test, alternative "more hits";
  - medians of input tokens: a permutation test of median(config) - median(baseline),
    alternative "higher", the configuration's values first divided by 1 + the tolerance
    on small and medium inputs (the null: exactly at the limit the criterion allows);
    exact (every relabelling) when there are at most
    `PERMUTATIONS` of them, else that many seeded random relabellings, fewer for very
    large cells (`PERMUTATION_VALUES` values relabelled in all, never fewer than
    `MIN_PERMUTATIONS`: a p-value resolution of 0.01, enough to tell it from 0.05).
- `interval`: for rates, the exact (Clopper-Pearson) 95% interval of the configuration's
  own rate.

A failing cell with `p_value >= NOISE_LEVEL` is *within noise*: a configuration exactly as
good as the criterion allows shows such a difference often. A passing rate cell whose
difference from the baseline's rate has a lower 95% bound (Newcombe's hybrid score
interval) more than `LARGE_DROP` below 0 is a *weak pass*: the runs of both sides cannot
rule out a large drop. docs/reference.md ("How sure the verdict is") names the methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

NOISE_LEVEL = 0.05
LARGE_DROP = 0.10
CONFIDENCE = 0.95
PERMUTATIONS = 2000
MIN_PERMUTATIONS = 100
PERMUTATION_VALUES = 1_000_000


@dataclass(frozen=True)
class Noise:
    """A cell's p-value and, for a rate, the configuration's exact interval."""

    p_value: float | None
    interval: tuple[float, float] | None = None


def rate_lower_p(k_config: int, n_config: int, k_base: int, n_base: int) -> float:
    """P(a configuration no worse than the baseline shows a rate this low or lower),
    Fisher's exact test, one-sided."""
    table = np.array([[k_config, n_config - k_config], [k_base, n_base - k_base]])
    return float(stats.fisher_exact(table, alternative="less").pvalue)


def count_higher_p(k_config: int, n_config: int, k_base: int, n_base: int) -> float:
    """P(a configuration no worse than the baseline shows this many events or more)."""
    table = np.array([[k_config, n_config - k_config], [k_base, n_base - k_base]])
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def exact_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Clopper-Pearson interval of k successes in n trials."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def rate_noise(k_config: int, n_config: int, k_base: int, n_base: int) -> Noise:
    return Noise(
        rate_lower_p(k_config, n_config, k_base, n_base), exact_interval(k_config, n_config)
    )


def median_higher_p(config: Sequence[float], baseline: Sequence[float], *, seed: int = 0) -> float:
    """P(median(config) - median(baseline) at least this high when the labels are
    exchangeable): a permutation test, exact (every relabelling) when small."""
    pooled = np.asarray([*config, *baseline], dtype=float)
    n, total = len(config), len(pooled)
    observed = float(np.median(pooled[:n]) - np.median(pooled[n:]))
    relabellings = _relabellings_up_to(total, n, PERMUTATIONS + 1)
    if relabellings <= PERMUTATIONS:
        picks = np.array(list(itertools.combinations(range(total), n)), dtype=np.intp)
        mask = np.zeros((len(picks), total), dtype=bool)
        np.put_along_axis(mask, picks, True, axis=1)
        extreme = _differences(pooled, mask) >= observed - _EPSILON
        return float(extreme.mean())
    budget = max(MIN_PERMUTATIONS, min(PERMUTATIONS, PERMUTATION_VALUES // total))
    rng = np.random.default_rng(seed)
    differences = _random_differences(np.sort(pooled), n, budget, rng)
    count = int((differences >= observed - _EPSILON).sum())
    return (count + 1) / (budget + 1)  # the observed labelling counts as one


_EPSILON = 1e-9
WINDOW_SPREAD = 4  # half the central window, in standard deviations of a median's position


def _random_differences(
    ordered: np.ndarray, n: int, budget: int, rng: np.random.Generator
) -> np.ndarray:
    """median(chosen) - median(the rest) for `budget` uniform random n-subsets of the
    sorted pool, exact in distribution, at a cost that grows with sqrt(len) only.

    Both medians lie near the middle of the pooled order, so a relabelling is drawn in
    steps: how many chosen values fall before the central window and inside it (exact
    hypergeometric draws), then which positions of the window they take (uniform). Only
    a row whose median falls outside the window (rare at WINDOW_SPREAD) has its
    positions before and after the window drawn too (uniform, given those counts)."""
    total = len(ordered)
    rest = total - n
    spread = 0.5 * np.sqrt(total * total / min(n, rest))  # a median's position, roughly
    half = int(WINDOW_SPREAD * spread) + 50
    lo, hi = max(0, total // 2 - half), min(total, total // 2 + half)
    width = hi - lo
    before = rng.hypergeometric(n, rest, lo, size=budget) if lo else np.zeros(budget, int)
    after_lo = total - lo
    inside = (
        rng.hypergeometric(n - before, rest - (lo - before), width)
        if width < after_lo
        else n - before
    )
    keys = rng.random((budget, width))
    threshold = np.sort(keys, axis=1)[np.arange(budget), np.maximum(inside, 1) - 1]
    window = (keys <= threshold[:, None]) & (inside > 0)[:, None]
    medians = []
    valid = np.ones(budget, dtype=bool)
    for mask, size, skipped in ((window, n, before), (~window, rest, lo - before)):
        counts = np.cumsum(mask, axis=1, dtype=np.int32)
        picks = []
        for rank in ((size + 1) // 2, size // 2 + 1):
            local = rank - skipped
            valid &= (local >= 1) & (local <= counts[:, -1])
            picks.append(ordered[lo + np.argmax(counts >= local[:, None], axis=1)])
        medians.append((picks[0] + picks[1]) / 2)
    differences: np.ndarray = medians[0] - medians[1]
    for row in np.flatnonzero(~valid):
        full = np.zeros(total, dtype=bool)
        full[lo:hi] = window[row]
        full[rng.choice(lo, size=int(before[row]), replace=False)] = True
        tail = n - int(before[row]) - int(window[row].sum())
        full[hi + rng.choice(total - hi, size=tail, replace=False)] = True
        differences[row] = _differences(ordered, full[None, :])[0]
    return differences


def _relabellings_up_to(total: int, n: int, cap: int) -> int:
    """C(total, n), or `cap` once it reaches it (the exact figure of a large cell is a
    number of thousands of digits, costly for nothing)."""
    count = 1
    for i in range(min(n, total - n)):
        count = count * (total - i) // (i + 1)
        if count >= cap:
            return cap
    return count


def _differences(pooled: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """median(chosen) - median(the rest), one row of `mask` per relabelling. The masks
    are uniform over relabellings, so they may be laid over the sorted values: each
    side's median is then found by rank (a running count), without sorting per row."""
    ordered = np.sort(pooled)
    difference: np.ndarray = _ranked_median(ordered, mask) - _ranked_median(ordered, ~mask)
    return difference


def _ranked_median(ordered: np.ndarray, mask: np.ndarray) -> np.ndarray:
    counts = np.cumsum(mask, axis=1, dtype=np.int32)
    size = int(counts[0, -1])
    low = np.argmax(counts >= (size + 1) // 2, axis=1)
    high = np.argmax(counts >= size // 2 + 1, axis=1)
    medians: np.ndarray = (ordered[low] + ordered[high]) / 2
    return medians


def within_noise(p_value: float | None) -> bool:
    """A difference a configuration exactly as good as the baseline shows often."""
    return p_value is not None and p_value >= NOISE_LEVEL


def drop_bound(k_config: int, n_config: int, k_base: int, n_base: int) -> float:
    """How far below the baseline's rate the configuration's may be, at 95% one-sided:
    minus Newcombe's lower bound of rate(config) - rate(base) (both sides' uncertainty)."""
    from spillover_harness.evaluate.rules import difference_lower

    return -float(difference_lower(k_config, n_config, k_base, n_base, CONFIDENCE))


def weak_pass(k_config: int, n_config: int, k_base: int, n_base: int) -> bool:
    """A pass whose difference from the baseline admits a drop of more than LARGE_DROP."""
    if n_config == 0 or n_base == 0:
        return False
    return drop_bound(k_config, n_config, k_base, n_base) > LARGE_DROP
