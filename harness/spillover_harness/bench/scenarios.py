"""Synthetic stages whose truth is known: the scenarios of `make calibrate` and of the
adaptive-repetitions benchmark.

A scenario gives, per configuration and cell of the default matrix, the true success
rate, the true median input tokens (as a factor of the baseline's) and the true
summary-quality rate; the runs of a stage are drawn from them. Every run is seeded by
(stage seed, configuration, cell, repetition), so the first r repetitions of a stage at
R are exactly the stage at r (what the uniform design of the adaptive benchmark needs).
The stages are `dev` stages: like a cluster's, their configurations' runs are drawn
independently (nothing pairs them seed for seed, as the simulator does).

`TrueSource` draws fresh stages from the same truth, for `evaluate.rule_draws`: the
share of its draws that reach a decision is that decision's exact reproduction
probability (up to its Monte Carlo error, about 0.002 at 100,000 draws).

Fixed in every scenario, so that each isolates what it names: no run hits the
iteration limit, nothing leaks, and on the large input every non-baseline
configuration spends 30% fewer tokens than `off` (what spillover is for; criterion 3
asks for fewer there). Log input tokens are normal with a spread of `token_sd`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from spillover_harness.evaluate.rule_draws import FloatArray, Inputs, IntArray, Quantity
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.results.records import RunKey, RunRecord, run_id_for

MATRIX = load_matrix(None)
BASELINE = MATRIX.acceptance.baseline
CONFIGS = tuple(c.name for c in MATRIX.configurations)
CELLS = tuple((r.name, i.name, i.size_class) for r, i in MATRIX.cells())
BASE_TOKENS = {"small": 20_000.0, "medium": 40_000.0, "large": 120_000.0}
LARGE_DROP = 0.7
STAGE: Final = "dev"

PerCell = tuple[float, float, float, float]  # in CELLS order


def _every(value: float) -> PerCell:
    return (value, value, value, value)


@dataclass(frozen=True)
class Scenario:
    """The truth of a synthetic stage (module doc). Configurations not named in
    `success` or `tokens` are like the baseline."""

    name: str
    description: str
    success: Mapping[str, PerCell]
    tokens: Mapping[str, PerCell] = field(default_factory=dict)  # factor of off's median
    quality: Mapping[str, float] = field(default_factory=dict)
    token_sd: float = 0.10

    def success_rate(self, config: str, cell: int) -> float:
        return self.success.get(config, self.success[BASELINE])[cell]

    def token_median(self, config: str, cell: int) -> float:
        _, _, size = CELLS[cell]
        factor = self.tokens.get(config, _every(1.0))[cell]
        if config != BASELINE and size == "large":
            factor *= LARGE_DROP
        return BASE_TOKENS[size] * factor

    def quality_rate(self, config: str) -> float:
        return self.quality.get(config, self.quality.get(BASELINE, 1.0))


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "identical-0.9",
        "every configuration as good as off: success 0.9 in every cell",
        {BASELINE: _every(0.9)},
    ),
    Scenario(
        "identical-mixed",
        "every configuration as good as off, success 0.95, 0.9, 0.8, 0.7 by cell",
        {BASELINE: (0.95, 0.9, 0.8, 0.7)},
    ),
    Scenario(
        "marginal-worse",
        "128KiB succeeds at 0.8 where off and 32KiB succeed at 0.9",
        {BASELINE: _every(0.9), "128KiB": _every(0.8)},
    ),
    Scenario(
        "clearly-better",
        "128KiB and 32KiB succeed at 0.99 where off succeeds at 0.5",
        {BASELINE: _every(0.5), "128KiB": _every(0.99), "32KiB": _every(0.99)},
    ),
    Scenario(
        "tokens-12pct-worse",
        "128KiB spends 12% more tokens than off on the small and medium inputs; success "
        "0.97 everywhere",
        {BASELINE: _every(0.97)},
        tokens={"128KiB": (1.12, 1.12, 1.0, 1.12)},
    ),
)
# Spillover (either threshold) marginally worse on one cell: the decision is `false`, and
# one cell holds it.
MARGINAL: tuple[Scenario, ...] = (
    Scenario(
        "tokens-over-limit",
        "128KiB and 32KiB spend 16% more tokens than off on the medium code review (the "
        "limit is 10%); no run fails",
        {BASELINE: _every(1.0)},
        tokens={"128KiB": (1.0, 1.16, 1.0, 1.0), "32KiB": (1.0, 1.16, 1.0, 1.0)},
        token_sd=0.06,
    ),
    Scenario(
        "success-worse",
        "128KiB and 32KiB succeed at 0.75 on the large code review where off never fails; "
        "no other run fails",
        {BASELINE: _every(1.0), "128KiB": (1.0, 1.0, 0.75, 1.0), "32KiB": (1.0, 1.0, 0.75, 1.0)},
        token_sd=0.06,
    ),
)
# For the error rates of `--until-stable` (bench.adaptive): acceptable configurations.
ACCEPTABLE: tuple[Scenario, ...] = (
    Scenario(
        "identical",
        "every configuration as good as off; no run fails, token spread 0.06",
        {BASELINE: _every(1.0)},
        token_sd=0.06,
    ),
    Scenario(
        "tokens-under-limit",
        "128KiB spends 4% more tokens than off on the small code review (under the 10% "
        "limit); no run fails",
        {BASELINE: _every(1.0)},
        tokens={"128KiB": (1.04, 1.0, 1.0, 1.0)},
        token_sd=0.06,
    ),
)


def by_name(name: str) -> Scenario:
    for s in (*SCENARIOS, *MARGINAL, *ACCEPTABLE):
        if s.name == name:
            return s
    raise KeyError(name)


def _run(scenario: Scenario, stage_seed: int, config: str, cell: int, rep: int) -> RunRecord:
    recipe, inp, size = CELLS[cell]
    rng = np.random.default_rng([stage_seed, CONFIGS.index(config), cell, rep])
    ok = bool(rng.random() < scenario.success_rate(config, cell))
    tokens = scenario.token_median(config, cell) * float(np.exp(scenario.token_sd * rng.normal()))
    quality = bool(rng.random() < scenario.quality_rate(config)) if ok else False
    return RunRecord(
        run_id=run_id_for(RunKey(STAGE, config, recipe, inp, rep)),
        stage=STAGE,
        config=config,
        recipe=recipe,
        input=inp,
        size_class=size,
        repetition=rep,
        outcome="succeeded" if ok else "failed",
        hit_iteration_limit=False,
        iterations=6,
        input_tokens=round(tokens),
        output_tokens=400,
        duration_s=1.0,
        spillover_persisted=0 if config == BASELINE else 1,
        spillover_reads=0 if config == BASELINE else 1,
        status_report_bytes=1000,
        quality_ok=quality if recipe in MATRIX.acceptance.quality_recipes else None,
        disk_clean=True,
        logs_clean=True,
        started_at="2026-12-01T00:00:00+00:00",
        finished_at="2026-12-01T00:00:01+00:00",
    )


def stage_records(
    scenario: Scenario, stage_seed: int, repetitions: Mapping[int, int] | int
) -> list[RunRecord]:
    """Every configuration x cell of a stage, `repetitions` per cell (by cell index)."""
    out: list[RunRecord] = []
    for cell in range(len(CELLS)):
        reps = repetitions if isinstance(repetitions, int) else repetitions[cell]
        for config in CONFIGS:
            out.extend(_run(scenario, stage_seed, config, cell, rep) for rep in range(1, reps + 1))
    return out


def matrix_at(repetitions: Mapping[str, int] | int) -> Matrix:
    """The default matrix with its `STAGE` at `repetitions` (an int for every cell, or
    "recipe/input" -> repetitions as an extension)."""
    data = MATRIX.model_dump(mode="json")
    if isinstance(repetitions, int):
        data["repetitions"][STAGE] = repetitions
    else:
        data["extension"] = dict(repetitions)
    return Matrix.model_validate(data)


class TrueSource:
    """Fresh stages drawn from the scenario's truth (`evaluate.rule_draws.Source`); the
    baseline drawn once per fresh stage, as one set of `off` runs serves every
    comparison. `sizes` gives each cell's valid runs (cell index -> n)."""

    def __init__(
        self, scenario: Scenario, sizes: Mapping[int, int], size: int, rng: np.random.Generator
    ) -> None:
        self.scenario, self.sizes, self.size, self.rng = scenario, sizes, size, rng
        self._counts: dict[tuple[str, int, str], IntArray] = {}
        self._medians: dict[tuple[str, int], FloatArray] = {}
        self._success: dict[tuple[str, int], IntArray] = {}

    @staticmethod
    def _cell(recipe: str, inp: str) -> int:
        return next(n for n, (r, i, _) in enumerate(CELLS) if (r, i) == (recipe, inp))

    def _succeeded(self, config: str, cell: int) -> IntArray:
        key = (config, cell)
        if key not in self._success:
            p = self.scenario.success_rate(config, cell)
            self._success[key] = self.rng.binomial(self.sizes[cell], p, self.size)
        return self._success[key]

    def count(self, config: str, recipe: str, inputs: Inputs, quantity: Quantity) -> IntArray:
        total = np.zeros(self.size, dtype=np.int64)
        for inp, _ in inputs:
            cell = self._cell(recipe, inp)
            key = (config, cell, quantity)
            if key not in self._counts:
                if quantity == "succeeded":
                    drawn = self._succeeded(config, cell)
                elif quantity == "hits":
                    drawn = np.zeros(self.size, dtype=np.int64)
                else:  # quality is judged on every valid run; a failed run's is false
                    ok = self._succeeded(config, cell)
                    drawn = self.rng.binomial(ok, self.scenario.quality_rate(config))
                self._counts[key] = drawn.astype(np.int64)
            total += self._counts[key]
        return total

    def median(self, config: str, recipe: str, inputs: Inputs) -> FloatArray:
        cell = self._cell(recipe, inputs[0][0])
        key = (config, cell)
        if key not in self._medians:
            # the completed runs' tokens are compared (as many as succeeded)
            n = self.sizes[cell]
            logs = self.scenario.token_sd * self.rng.standard_normal((self.size, n))
            values = self.scenario.token_median(config, cell) * np.exp(logs)
            ok = self._succeeded(config, cell)
            compared = np.where(ok > 0, ok, n)  # none completed: the early ones (context)
            mask = np.arange(n)[None, :] < compared[:, None]
            values = np.where(mask, values, np.nan)
            self._medians[key] = np.nanmedian(values, axis=1)
        return self._medians[key]
