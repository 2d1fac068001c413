"""The probability that a fresh stage of the same design reaches the same decision. Pure.

"The same design": the same matrix, stage, repetitions per cell and rule; "fresh": new
runs, on the same platform. What a fresh stage would record is drawn from a posterior
predictive model of each cell, not by resampling the runs a cell happened to show (a
bootstrap of 5/5 draws 5/5 every time, so small cells look certain):

It shares strength the way an empirical-Bayes model does: a configuration's 5 runs of a
cell say little on their own, and what the other configurations and cells show is most
of what is known.

- **Rates** (success, iteration-limit hits, summary quality) of a configuration in a
  cell: a Beta posterior whose prior is centred on the cell's rate plus the
  configuration's distance. The cell's rate (over every configuration) is drawn once
  per fresh stage from its own posterior, whose prior is the stage's rate worth
  `CELL_PRIOR_RUNS` run. The configuration's distance from the stage's rate (over every
  cell) is shrunk toward 0 by the share of the configurations' spread that binomial
  noise explains. The prior's weight, in runs, is what the stage's rates straying from
  those centres beyond noise leaves (method of moments), between `MIN_WEIGHT` and
  `MAX_WEIGHT`. A fresh stage draws each rate, then as many runs as the stage had.
- **Input tokens** of a configuration in a cell: log tokens are normal, with a spread
  pooled over the cell's configurations (drawn from its posterior, scaled inverse
  chi-square) and a mean per configuration drawn toward the cell's mean by how little
  the configurations' means spread beyond what the spread explains; the fresh runs are
  drawn, and their median taken.
- **The baseline is drawn once per fresh stage** and serves every comparison, as one set
  of `off` runs does.
- **Paired runs.** On the simulator, runs of one (recipe, input, repetition) meet the
  same seeded agent in every configuration. Where a configuration's every run of a cell
  equals the baseline's run of the same seed on every figure the criteria read, the
  configuration did not act on that cell (spillover stored nothing there), and a fresh
  stage's seeds would meet the same fate: its figures are the baseline's. The other
  rates of a cell every configuration ran with the same seeds are drawn jointly: each
  seed's outcomes in all the configurations form one of 2^C patterns, whose shares
  have a Dirichlet posterior (its prior: the unpaired model's rates, worth
  `PAIRED_PRIOR` seed), so a configuration that never did worse than `off` on the same
  seed is not drawn doing worse by chance. A cluster stage's runs meet a real model
  that no seed steers: nothing is paired there.

What is held at its observed status (inconclusive cells, `no_leak`, ...) is
`evaluate.rule_draws`'. The weights were chosen by measurement: `make calibrate` judges
the figure against how often fresh stages really agree, in scenarios whose truth is
known (docs/benchmarks.md, docs/reference.md §5.2).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.special import ndtri

from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.rule_draws import (
    FloatArray,
    Inputs,
    IntArray,
    Quantity,
    counts,
    draw_stage,
)
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import ConfigVerdict, Reproducibility

DRAWS = 2000
# The priors' weights (chosen by `make calibrate`; module doc): of the centre in a
# configuration's rate, in runs, at least and at most; of the stage's rate in a cell's;
# of the unpaired rates in a paired cell's patterns, in seeds.
MIN_WEIGHT = 1.0
MAX_WEIGHT = 50.0
CELL_PRIOR_RUNS = 1.0
PAIRED_PRIOR = 1.0
_FIELD: dict[Quantity, int] = {"succeeded": 0, "hits": 1, "quality": 2}  # in rep_values
FLIPPING_CELLS = 5
METHOD = (
    "posterior predictive, empirical Bayes: each configuration's rate in a cell drawn from "
    "a Beta posterior centred on the cell's rate plus the configuration's shrunk distance; "
    "log input tokens normal, each configuration's mean drawn toward the cell's; the "
    "baseline drawn once per fresh stage; paired cells of the simulator drawn seed by seed; "
    "the literal rule and the decision chain applied to every draw"
)


def _paired_identical(c: CellData, b: CellData) -> bool:
    """Every run of the configuration equals the baseline's run of the same seed on every
    figure the criteria read (the outcome, the limit, the quality, the input tokens), and
    there is at least one: the configuration did not act on this cell."""
    return bool(c.rep_values) and c.rep_values == b.rep_values


class Predictive:
    """A fresh stage of the same design, drawn `size` times (module doc)."""

    def __init__(
        self, ctx: Context, size: int, rng: np.random.Generator, *, paired: bool,
        max_weight: float = MAX_WEIGHT, cell_prior_runs: float = CELL_PRIOR_RUNS,
    ) -> None:  # fmt: skip
        if not max_weight >= MIN_WEIGHT or cell_prior_runs <= 0:
            raise ValueError(f"max_weight must be >= {MIN_WEIGHT} and cell_prior_runs > 0")
        self.ctx, self.size, self.rng = ctx, size, rng
        self.cell_prior_runs, self.paired = cell_prior_runs, paired
        self.min_weight, self.max_weight = MIN_WEIGHT, max_weight
        self._joint: dict[tuple[str, str, Quantity], dict[str, IntArray] | None] = {}
        self._cell_rates: dict[tuple[str, str, Quantity], FloatArray] = {}
        self._config_effects: dict[Quantity, dict[str, float]] = {}
        self._weights: dict[Quantity, float] = {}
        self._token_cells: dict[tuple[str, str], tuple[FloatArray, FloatArray, float] | None] = {}
        self.configs = sorted({c for c, _, _ in ctx.data})
        self._counts: dict[tuple[str, str, str, Quantity], IntArray] = {}
        self._medians: dict[tuple[str, str, str], FloatArray] = {}
        self.locked: set[tuple[str, str, str]] = set()

    def _locked(self, config: str, recipe: str, inp: str) -> bool:
        base = self.ctx.baseline
        if not self.paired or config == base:
            return False
        c, b = self.ctx.get(config, recipe, inp), self.ctx.get(base, recipe, inp)
        if _paired_identical(c, b):
            self.locked.add((config, recipe, inp))
            return True
        return False

    def count(self, config: str, recipe: str, inputs: Inputs, quantity: Quantity) -> IntArray:
        total = np.zeros(self.size, dtype=np.int64)
        for inp, _ in inputs:
            total += self._count(config, recipe, inp, quantity)
        return total

    def _count(self, config: str, recipe: str, inp: str, quantity: Quantity) -> IntArray:
        key = (config, recipe, inp, quantity)
        if key not in self._counts:
            if self._locked(config, recipe, inp):
                drawn = self._count(self.ctx.baseline, recipe, inp, quantity)
            elif (joint := self._paired_counts(recipe, inp, quantity)) is not None:
                drawn = joint[config]
            else:
                drawn = self._draw_count(config, recipe, inp, quantity)
            self._counts[key] = drawn
        return self._counts[key]

    def _paired_counts(
        self, recipe: str, inp: str, quantity: Quantity
    ) -> dict[str, IntArray] | None:
        """Where every configuration ran the same seeds of the cell and the figure is known
        on each: the seeds' joint outcomes (one of 2^C patterns per seed) have a Dirichlet
        posterior (its prior worth `PAIRED_PRIOR` seeds, spread over the patterns as the
        unpaired model's rates would be if the configurations were independent); a fresh
        stage draws the patterns' shares, then as many seeds as the stage ran. None where
        the runs do not pair."""
        key = (recipe, inp, quantity)
        if key in self._joint:
            return self._joint[key]
        self._joint[key] = None
        if not self.paired:
            return None
        at = _FIELD[quantity]
        values = [self.ctx.get(c, recipe, inp).rep_values for c in self.configs]
        seeds = values[0].keys()
        if not seeds or any(v.keys() != seeds for v in values):
            return None
        patterns = np.zeros(2 ** len(self.configs))
        for seed in seeds:
            bits = [v[seed][at] for v in values]
            if any(b is None for b in bits):
                return None
            patterns[sum(1 << n for n, b in enumerate(bits) if b)] += 1
        # the prior: the unpaired model's rates, as if the configurations were independent
        cell = self._rate(*self._pooled(quantity, cell=(recipe, inp)))
        effects = self._effects(quantity)
        rates = [min(max(cell + effects[c], 1e-3), 1 - 1e-3) for c in self.configs]
        index = np.arange(len(patterns))
        prior = np.full(len(patterns), PAIRED_PRIOR)
        for n, rate in enumerate(rates):
            prior *= np.where((index >> n) & 1 == 1, rate, 1 - rate)
        shares = self.rng.dirichlet(prior + patterns, size=self.size)
        drawn = self.rng.multinomial(len(seeds), shares)
        self._joint[key] = {
            c: drawn[:, (index >> n) & 1 == 1].sum(axis=1).astype(np.int64)
            for n, c in enumerate(self.configs)
        }
        return self._joint[key]

    def _draw_count(self, config: str, recipe: str, inp: str, quantity: Quantity) -> IntArray:
        k, n = counts(self.ctx.get(config, recipe, inp), quantity)
        if n == 0:
            return np.zeros(self.size, dtype=np.int64)
        centre = np.clip(self._cell_rate(recipe, inp, quantity)
                         + self._effects(quantity)[config], 1e-3, 1 - 1e-3)  # fmt: skip
        weight = self._weight(quantity)
        rate = self.rng.beta(weight * centre + k, weight * (1 - centre) + n - k)
        return self.rng.binomial(n, rate).astype(np.int64)

    def _pooled(self, quantity: Quantity, config: str | None = None,
                cell: tuple[str, str] | None = None) -> tuple[int, int]:  # fmt: skip
        """(k, n) over the stage's data: one configuration's, one cell's, or all of it."""
        k_all = n_all = 0
        for (c, recipe, inp), d in self.ctx.data.items():
            if (config is None or c == config) and (cell is None or (recipe, inp) == cell):
                k, n = counts(d, quantity)
                k_all, n_all = k_all + k, n_all + n
        return k_all, n_all

    @staticmethod
    def _rate(k: int, n: int) -> float:
        return (k + 0.5) / (n + 1)

    def _cell_rate(self, recipe: str, inp: str, quantity: Quantity) -> FloatArray:
        """The cell's rate over every configuration, drawn once per fresh stage from its
        posterior; its prior is the stage's rate, worth `cell_prior_runs` runs."""
        key = (recipe, inp, quantity)
        if key not in self._cell_rates:
            k, n = self._pooled(quantity, cell=(recipe, inp))
            stage, m2 = self._rate(*self._pooled(quantity)), self.cell_prior_runs
            self._cell_rates[key] = self.rng.beta(m2 * stage + k, m2 * (1 - stage) + n - k,
                                                  size=self.size)  # fmt: skip
        return self._cell_rates[key]

    def _effects(self, quantity: Quantity) -> dict[str, float]:
        """Each configuration's distance from the stage's rate over every cell, shrunk
        toward 0 by the share of the configurations' spread that noise explains."""
        if quantity not in self._config_effects:
            stage = self._rate(*self._pooled(quantity))
            raw, noise = {}, {}
            for c in self.configs:
                k, n = self._pooled(quantity, config=c)
                raw[c] = self._rate(k, n) - stage
                noise[c] = stage * (1 - stage) / max(n, 1)
            values = np.array(list(raw.values()))
            between = 0.0
            if len(values) > 1:
                between = max(0.0, float(values.var(ddof=1)) - float(np.mean(list(noise.values()))))
            self._config_effects[quantity] = {
                c: raw[c] * between / (between + noise[c]) if between > 0 else 0.0
                for c in self.configs
            }
        return self._config_effects[quantity]

    def _weight(self, quantity: Quantity) -> float:
        """The prior's weight in a configuration's rate in a cell, in runs: large where the
        stage's rates stray from cell rate + configuration distance no more than binomial
        noise explains."""
        if quantity not in self._weights:
            effects = self._effects(quantity)
            residuals, noise = [], []
            for (c, recipe, inp), d in self.ctx.data.items():
                k, n = counts(d, quantity)
                if n == 0:
                    continue
                cell = self._rate(*self._pooled(quantity, cell=(recipe, inp)))
                centre = min(max(cell + effects[c], 1e-3), 1 - 1e-3)
                residuals.append(k / n - centre)
                noise.append(centre * (1 - centre) / n)
            between = 0.0
            if len(residuals) > 1:
                between = max(0.0, float(np.mean(np.square(residuals)) - np.mean(noise)))
            stage = self._rate(*self._pooled(quantity))
            weight = stage * (1 - stage) / between - 1 if between > 0 else self.max_weight
            self._weights[quantity] = float(np.clip(weight, self.min_weight, self.max_weight))
        return self._weights[quantity]

    def median(self, config: str, recipe: str, inputs: Inputs) -> FloatArray:
        if len(inputs) != 1:  # criterion 3 judges one input at a time
            raise ValueError("input tokens are drawn per input")
        inp = inputs[0][0]
        key = (config, recipe, inp)
        if key not in self._medians:
            if self._locked(config, recipe, inp):
                drawn = self.median(self.ctx.baseline, recipe, inputs)
            else:
                drawn = self._draw_median(config, recipe, inp)
            self._medians[key] = drawn
        return self._medians[key]

    def _draw_median(self, config: str, recipe: str, inp: str) -> FloatArray:
        own = np.log(np.asarray(self.ctx.get(config, recipe, inp).tokens, dtype=np.float64))
        n = len(own)
        cell = self._token_cell(recipe, inp)
        if cell is None:  # no spread seen: the fresh runs repeat the seen ones
            ordered = np.sort(np.exp(own))
            return np.full(self.size, (ordered[(n - 1) // 2] + ordered[n // 2]) / 2.0)
        variance, grand, between = cell
        own_noise = variance / n
        kept = between / (between + own_noise)  # how much of its own mean's distance stays
        centre = grand + kept * (own.mean() - grand)
        mean = centre + np.sqrt(kept * own_noise) * self.rng.standard_normal(self.size)
        return self._fresh_medians(mean, np.sqrt(variance), n)

    def _fresh_medians(self, mean: FloatArray, sd: FloatArray, n: int) -> FloatArray:
        """The median of n fresh log-normal runs per draw, from the order statistics of n
        uniforms (the k-th is Beta(k, n - k + 1), the next U + (1 - U) Beta(1, n - k)):
        exact in distribution, at a cost that does not grow with n."""
        k = (n + 1) // 2
        low = self.rng.beta(k, n - k + 1, size=self.size)

        def value(u: FloatArray) -> FloatArray:
            # a spread drawn from few degrees of freedom can be huge: inf is its limit
            with np.errstate(over="ignore"):
                out: FloatArray = np.exp(mean + sd * ndtri(np.clip(u, 1e-300, 1 - 1e-16)))
            return out

        if n % 2 == 1:
            return value(low)
        high = low + (1 - low) * self.rng.beta(1, n - k, size=self.size)
        return (value(low) + value(high)) / 2

    def _token_cell(self, recipe: str, inp: str) -> tuple[FloatArray, FloatArray, float] | None:
        """Per fresh stage, drawn once for the cell: the spread of log tokens (pooled over
        the configurations), the mean the configurations share; and the variance of the
        configurations' means beyond what the spread explains. None: no spread seen."""
        key = (recipe, inp)
        if key not in self._token_cells:
            groups = [
                np.log(np.asarray(values, dtype=np.float64))
                for c in self.configs
                if (values := self.ctx.get(c, recipe, inp).tokens) and min(values) > 0
            ]
            squares = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
            df = sum(len(g) - 1 for g in groups)
            if df == 0 or squares == 0.0:
                self._token_cells[key] = None
                return None
            s2 = squares / df
            means = np.array([g.mean() for g in groups])
            noise = s2 * float(np.mean([1 / len(g) for g in groups]))
            between = max(0.0, float(means.var(ddof=1)) - noise) if len(groups) > 1 else 0.0
            variance = squares / self.rng.chisquare(df, size=self.size)
            total = sum(len(g) for g in groups)
            grand = means.mean() + np.sqrt(variance / total) * self.rng.standard_normal(self.size)
            self._token_cells[key] = (variance, grand, between)
        return self._token_cells[key]


def paired_why(ctx: Context) -> tuple[bool, str]:
    """Whether the stage pairs its runs across configurations, and why (or why not)."""
    if ctx.seeded:
        return True, (
            "stage sim: runs of one (recipe, input, repetition) meet the same seeded agent "
            "in every configuration; a cell where a configuration's runs equal the "
            "baseline's seed for seed is drawn as the baseline's"
        )
    return False, "a cluster stage's runs meet a real model that no seed steers"


def reproducibility(
    ctx: Context,
    matrix: Matrix,
    configs: Mapping[str, ConfigVerdict],
    decision: str,
    *,
    draws: int = DRAWS,
    seed: int = 0,
    max_weight: float = MAX_WEIGHT,
    cell_prior_runs: float = CELL_PRIOR_RUNS,
) -> Reproducibility:
    """The probability that a fresh stage of this design decides `decision`, every
    decision's probability, and the cells whose fresh runs most often go with another
    decision (where more runs would most change the figure)."""
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    paired, why = paired_why(ctx)
    if not configs:
        return Reproducibility(
            decision=None, distribution={}, method="not drawn: no configuration was judged",
            paired=paired, paired_why=why, draws=0, seed=seed, cells=(), paired_cells=(),
        )  # fmt: skip
    source = Predictive(
        ctx, draws, np.random.default_rng(seed), paired=paired, max_weight=max_weight,
        cell_prior_runs=cell_prior_runs,
    )  # fmt: skip
    drawn = draw_stage(ctx, matrix, configs, source)
    return Reproducibility(
        decision=drawn.share(decision),
        distribution=drawn.distribution(),
        method=METHOD,
        paired=paired,
        paired_why=why,
        draws=draws,
        seed=seed,
        cells=drawn.flipping(decision, FLIPPING_CELLS),
        paired_cells=tuple(sorted(f"{c} {r}/{i}" for c, r, i in source.locked)),
    )


def describe(
    decision: str, stage: str | None, fresh: Reproducibility | None, *, cells: bool = True
) -> str:
    """One sentence a reviewer cannot misread: `131072; a fresh sim stage of this design
    would decide the same with probability 0.93 (false 0.05, 32768 0.02)`, and (`cells`)
    where more runs would most change it."""
    if fresh is None or fresh.decision is None:
        why = "" if fresh is None else f" ({fresh.method})"
        return f"{decision}; the probability that a fresh stage decides the same: not computed{why}"
    where = f"a fresh {stage} stage" if stage else "a fresh stage"
    others = ", ".join(
        f"{value} {_probability(share)}"
        for value, share in fresh.distribution.items()
        if value != decision
    )
    text = (
        f"{decision}; {where} of this design would decide the same with probability "
        f"{_probability(fresh.decision)}"
    )
    if others:
        text += f" (otherwise: {others})"
    if cells and fresh.cells:
        text += "; more runs would most change this in: " + "; ".join(c.label for c in fresh.cells)
    return text


def _probability(p: float) -> str:
    """Two decimals that never round to a certainty that was not drawn."""
    if 0.995 <= p < 1.0:
        return "> 0.99"
    if 0.0 < p < 0.005:
        return "< 0.01"
    return f"{p:.2f}"
