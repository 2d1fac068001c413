"""How often the acceptance rule fails a configuration that is as good as the baseline,
before any cluster time is spent (`spillover-harness plan`). Pure.

The model (stated in every plan, and in docs/reference.md "How sure the verdict is"):
a configuration *as good as the baseline* has, in every cell, the baseline's success
rate, iteration-limit rate and quality rate, and the same input-token distribution
(log-normal, with the given spread) on small and medium inputs; on large inputs its
median is `large_drop` lower (criterion 3 asks for fewer tokens there, so a
configuration that changed nothing must fail it). It never leaks.

- rates (criteria 1, 2, 4): exact binomial sums, P(X_config >= X_base) (or <= for limit
  hits) with both sides Binomial(n, p) and independent;
- medians (criterion 3): Monte Carlo (seeded) of the two sample medians;
- criteria and cells are taken as independent; the chain's false fail is the
  probability that its first configuration fails any criterion (the decision then is
  not the first step's default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy import stats

from spillover_harness.evaluate.rules import rate_non_inferior
from spillover_harness.plan.matrix import Matrix, Rule

MAX_REPETITIONS = 1000  # what `plan` searches and accepts, per cell
TOKEN_DRAWS = 20_000
SEARCH_DRAWS = 4_000  # Monte Carlo draws per step of the repetitions search
CHAIN_SCAN = 200  # repetitions tried above the slowest criterion's for the whole chain
RATE_GRID = 32  # quantiles a measured rate's posterior is averaged over
CONFIRM_SCAN = 50  # repetitions tried above the search's answer, with every draw
EXACT = "exact binomial"
MONTE_CARLO = f"Monte Carlo of the two medians ({TOKEN_DRAWS} draws, seeded)"

Cell = tuple[str, str]  # recipe, input
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Assumptions:
    """Per cell (recipe, input): the rates of a configuration as good as the baseline."""

    success: Mapping[Cell, float]
    limit: Mapping[Cell, float]
    quality: Mapping[Cell, float]
    token_spread: Mapping[Cell, float]  # coefficient of variation of input tokens
    large_drop: float
    source: str  # "assumed (--success-rate ...)" or "measured in DIR"
    # Rates measured in an earlier stage: kind ("success", "limit", "quality") -> cell ->
    # (k, n). A measured rate is uncertain (5/5 is not a rate of 1): the false fail is
    # averaged over its posterior, Beta(k + 1/2, n - k + 1/2) (`rates`).
    measured: Mapping[str, Mapping[Cell, tuple[int, int]]] = field(default_factory=dict)

    def rates(self, kind: str, cell: Cell) -> FloatArray:
        """The rate's values to average over, equally weighted: the assumed value, or
        RATE_GRID quantiles of a measured rate's posterior."""
        counts = self.measured.get(kind, {}).get(cell)
        if counts is None:
            value: float = getattr(self, kind)[cell]
            return np.array([value])
        return self.uniform_grid(*counts)

    @staticmethod
    def uniform_grid(k: int, n: int) -> FloatArray:
        """RATE_GRID equally weighted quantiles of Beta(k + 1/2, n - k + 1/2)."""
        quantiles = (np.arange(RATE_GRID) + 0.5) / RATE_GRID
        grid: FloatArray = stats.beta.ppf(quantiles, k + 0.5, n - k + 0.5)
        return grid

    @classmethod
    def uniform(
        cls,
        matrix: Matrix,
        *,
        success: float,
        limit: float,
        quality: float,
        token_spread: float,
        large_drop: float,
        source: str,
    ) -> Assumptions:
        cells = [(r.name, i.name) for r, i in matrix.cells()]
        return cls(
            success=dict.fromkeys(cells, success),
            limit=dict.fromkeys(cells, limit),
            quality=dict.fromkeys(cells, quality),
            token_spread=dict.fromkeys(cells, token_spread),
            large_drop=large_drop,
            source=source,
        )


@dataclass(frozen=True)
class CriterionPlan:
    key: str
    false_fail: float | None  # None: not modelled (see criterion_false_fail)
    method: str
    repetitions_for_target: int | None  # None: no number up to MAX_REPETITIONS reaches it
    note: str = ""


@dataclass(frozen=True)
class Plan:
    stage: str
    repetitions: int
    target: float
    assumptions: Assumptions
    criteria: dict[str, CriterionPlan]
    chain_false_fail: float | None  # None: a criterion is not modelled
    chain_repetitions_for_target: int | None
    chain_config: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        a = self.assumptions
        return {
            "stage": self.stage,
            "repetitions": self.repetitions,
            "target": self.target,
            "model": "a configuration as good as the baseline (docs/reference.md)",
            "assumptions": {
                "source": a.source,
                "large_drop": a.large_drop,
                "cells": [
                    {
                        "recipe": recipe,
                        "input": inp,
                        "success_rate": a.success[(recipe, inp)],
                        "limit_rate": a.limit[(recipe, inp)],
                        "quality_rate": a.quality[(recipe, inp)],
                        "token_spread": a.token_spread[(recipe, inp)],
                    }
                    for recipe, inp in a.success
                ],
            },
            "criteria": {
                key: {
                    "false_fail": c.false_fail,
                    "method": c.method,
                    "repetitions_for_target": c.repetitions_for_target,
                    "note": c.note,
                }
                for key, c in self.criteria.items()
            },
            "chain": {
                "config": self.chain_config,
                "false_fail": self.chain_false_fail,
                "repetitions_for_target": self.chain_repetitions_for_target,
            },
            "notes": list(self.notes),
        }


def p_not_lower(n: int, p: float) -> float:
    """P(X >= Y), X and Y independent Binomial(n, p): a rate cell passes literally."""
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, p)
    at_least = stats.binom.sf(k - 1, n, p)  # P(X >= k)
    return float(np.clip((pmf * at_least).sum(), 0.0, 1.0))


def p_not_higher(n: int, p: float) -> float:
    """P(X <= Y), X and Y independent Binomial(n, p): a limit-hit cell passes."""
    return p_not_lower(n, p)  # the same by symmetry: P(X <= Y) = P(Y >= X)


def p_non_inferior(n: int, p: float, rule: Rule) -> float:
    """P(a rate cell passes the non-inferiority rule), both sides Binomial(n, p): every
    pair of outcomes, exactly."""
    k = np.arange(n + 1)
    pmf = stats.binom.pmf(k, n, p)
    passes = rate_non_inferior(k[:, None], n, k[None, :], n, rule)
    return float(np.clip((pmf[:, None] * pmf[None, :] * passes).sum(), 0.0, 1.0))


def _rates_false_fail(n: int, rates: Sequence[FloatArray], rule: Rule | None = None) -> float:
    """1 - the product over the cells of each cell's pass probability, averaged over the
    cell's rate values (one value: an assumed rate)."""
    passes = 1.0
    for grid in rates:
        cell = [p_not_lower(n, p) if rule is None else p_non_inferior(n, p, rule) for p in grid]
        passes *= float(np.mean(cell))
    return 1.0 - passes


def _token_cell_pass(
    n: int, spread: float, large: bool, drop: float, tolerance: float, draws: int, seed: int
) -> float:
    """P(the cell passes criterion 3) for log-normal tokens of coefficient of variation
    `spread`, by Monte Carlo of the two medians."""
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(np.log1p(spread * spread)))
    base = np.median(rng.lognormal(0.0, sigma, size=(draws, n)), axis=1)
    shift = np.log1p(-drop) if large else 0.0
    config = np.median(rng.lognormal(shift, sigma, size=(draws, n)), axis=1)
    ok = config < base if large else config <= (1.0 + tolerance) * base
    return float(ok.mean())


def _tokens_false_fail(matrix: Matrix, a: Assumptions, n: int, draws: int, seed: int = 0) -> float:
    passes = 1.0
    tolerance = matrix.acceptance.token_tolerance
    for index, (recipe, inp) in enumerate((r.name, i.name) for r, i in matrix.cells()):
        large = matrix.size_class(recipe, inp) == "large"
        passes *= _token_cell_pass(
            n, a.token_spread[(recipe, inp)], large, a.large_drop, tolerance, draws, seed + index
        )
    return 1.0 - passes


def _quality_false_fail(matrix: Matrix, a: Assumptions, n: int) -> float:
    """Criterion 4 judges a quality recipe's inputs together: n runs per input."""
    passes = 1.0
    for recipe in matrix.acceptance.quality_recipes:
        inputs = [i.name for r, i in matrix.cells() if r.name == recipe]
        measured = [a.measured.get("quality", {}).get((recipe, i)) for i in inputs]
        if all(m is not None for m in measured):  # the inputs' runs together
            k = sum(m[0] for m in measured if m is not None)
            total = sum(m[1] for m in measured if m is not None)
            grid = Assumptions.uniform_grid(k, total)
        else:
            grid = np.array([float(np.mean([a.quality[(recipe, i)] for i in inputs]))])
        rule = matrix.acceptance.rule_for("summary_quality")
        runs = n * len(inputs)
        cell = [p_not_lower(runs, p) if rule is None else p_non_inferior(runs, p, rule)
                for p in grid]  # fmt: skip
        passes *= float(np.mean(cell))
    return 1.0 - passes


def criterion_false_fail(
    key: str, matrix: Matrix, a: Assumptions, n: int, *, draws: int = TOKEN_DRAWS
) -> float | None:
    """None: not modelled (input_tokens under the non-inferiority rule, whose bound is a
    bootstrap of its own)."""
    cells = [(r.name, i.name) for r, i in matrix.cells()]
    if key == "success_rate":
        return _rates_false_fail(
            n, [a.rates("success", c) for c in cells], matrix.acceptance.rule_for("success_rate")
        )
    if key == "iteration_limit":
        return _rates_false_fail(n, [a.rates("limit", c) for c in cells])
    if key == "input_tokens":
        if matrix.acceptance.rule_for("input_tokens") is not None:
            return None
        return _tokens_false_fail(matrix, a, n, draws)
    if key == "summary_quality":
        return _quality_false_fail(matrix, a, n)
    if key == "no_leak":
        return 0.0
    raise ValueError(f"unknown criterion {key!r}")


KEYS = ("success_rate", "iteration_limit", "input_tokens", "summary_quality", "no_leak")


def _chain(values: Mapping[str, float | None]) -> float | None:
    passes = 1.0
    for value in values.values():
        if value is None:
            return None
        passes *= 1.0 - value
    return 1.0 - passes


def _smallest(reaches: Callable[[int], bool], exact: bool) -> int | None:
    """The smallest n from which on (up to MAX_REPETITIONS) reaches(n) holds: a scan of
    every n for the exact figures (under the literal rule they rise with n), a bisection
    for the Monte Carlo one (it falls with n)."""
    if exact:
        found: int | None = None
        for n in range(MAX_REPETITIONS, 0, -1):
            if not reaches(n):
                break
            found = n
        return found
    if not reaches(MAX_REPETITIONS):
        return None
    low, high = 1, MAX_REPETITIONS
    while low < high:
        mid = (low + high) // 2
        if reaches(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _at_most(value: float | None, target: float) -> bool:
    return value is not None and value <= target


def _confirmed(n: int, holds: Callable[[int], bool]) -> int | None:
    """The first n' >= n (up to CONFIRM_SCAN more) where `holds`, computed as the figure
    `plan` prints is (every Monte Carlo draw): the search's smaller draws can put a
    Monte Carlo figure just under the target where the full one is just over it."""
    for more in range(n, min(MAX_REPETITIONS, n + CONFIRM_SCAN) + 1):
        if holds(more):
            return more
    return None


def _holds(key: str, matrix: Matrix, a: Assumptions, target: float) -> Callable[[int], bool]:
    return lambda n: _at_most(criterion_false_fail(key, matrix, a, n), target)


def _reaches(key: str, matrix: Matrix, a: Assumptions, target: float) -> Callable[[int], bool]:
    def reaches(n: int) -> bool:
        value = criterion_false_fail(key, matrix, a, n, draws=SEARCH_DRAWS)
        return value is not None and value <= target

    return reaches


def plan(matrix: Matrix, stage: str, repetitions: int, target: float, a: Assumptions) -> Plan:
    """Every criterion's and the chain's false fail at `repetitions` per cell, and the
    repetitions that bring each under `target`."""
    criteria: dict[str, CriterionPlan] = {}
    for key in KEYS:
        rule = matrix.acceptance.rule_for(key)
        # Under the literal rule rates rise with n (scan every n); the Monte Carlo
        # figure and the non-inferiority rule fall with n (bisection).
        exact = key != "input_tokens" and rule is None
        value = criterion_false_fail(key, matrix, a, repetitions)
        needed = _smallest(_reaches(key, matrix, a, target), exact) if value is not None else None
        if needed is not None and not exact:  # said as it is computed: with every draw
            needed = _confirmed(needed, _holds(key, matrix, a, target))
        note = ""
        if rule is not None:
            note = (
                f"judged by the {rule.rule.replace('_', '-')} rule (margin {rule.margin:g}, "
                f"confidence {rule.confidence:g})"
            )
        if value is None:
            note = (
                "not modelled: the non-inferiority bound of the token ratio is a bootstrap of "
                "its own; run the stage and read its reproducibility instead"
            )
        elif rule is not None:
            pass
        elif key in ("success_rate", "summary_quality") and needed is None:
            note = (
                "no number of repetitions keeps it under the target under the literal rule: "
                "a tie is its only pass, and ties get rarer as runs are added"
            )
        elif key == "input_tokens":
            note = (
                f"large inputs: the configuration's median taken {a.large_drop:.0%} lower "
                "(the criterion asks for fewer tokens there)"
            )
        criteria[key] = CriterionPlan(key, value, MONTE_CARLO if not exact else EXACT, needed, note)
    chain_value = _chain({k: c.false_fail for k, c in criteria.items()})

    def chain_reaches(n: int) -> bool:
        values = {k: criterion_false_fail(k, matrix, a, n, draws=SEARCH_DRAWS) for k in KEYS}
        chained = _chain(values)
        return chained is not None and chained <= target

    # The chain needs every criterion under the target: none if one never gets there.
    if any(c.repetitions_for_target is None for c in criteria.values()):
        chain_needed = None
    else:
        start = max(c.repetitions_for_target or 1 for c in criteria.values())
        stop = min(MAX_REPETITIONS, start + CHAIN_SCAN)
        chain_needed = next((n for n in range(start, stop + 1) if chain_reaches(n)), None)
        if chain_needed is not None:
            chain_needed = _confirmed(
                chain_needed,
                lambda n: _at_most(
                    _chain({k: criterion_false_fail(k, matrix, a, n) for k in KEYS}), target
                ),
            )
    return Plan(
        stage=stage,
        repetitions=repetitions,
        target=target,
        assumptions=a,
        criteria=criteria,
        chain_false_fail=chain_value,
        chain_repetitions_for_target=chain_needed,
        chain_config=matrix.decision.chain[0].config,
    )
