"""Advisory statistics: how solid each token comparison looks, and hints.

They are attached to the verdict but never change a status or the decision.

Pairing: on stage sim the runner seeds a run from the matrix seed, the cell
and the repetition, not from the configuration (`runner.seed_for`), so the
runs of two configurations with the same (recipe, input, repetition) met the
same scripted agent: they pair. On a cluster stage the agent is a real model
that no seed steers, so a repetition number pairs nothing: those runs are
always resampled independently (`Context.seeded`). Where runs pair (at least 2 pairs, covering at
least half of the smaller side), the paired bootstrap is used (the median of
the per-pair ratios); otherwise the two sides are resampled independently.
The advisory says which (`method`). A cell whose pairs all have the same
figure on both sides (`identical`) gets no runs-needed hint: more runs of the
same seeds cannot change anything.

Wording, from the numbers (stated in the report): the CI wholly on one side of
the limit reads `clear pass` / `clear fail`. A CI across the limit reads
`close call` only when the point ratio is within `CLOSE_CALL_BAND` (10%) of the
limit; farther out it reads `leans pass` / `leans fail` (the point is far from
the limit but the runs are too few or too spread for the CI to clear it), so
a 3.14x ratio is never called close.

Too few runs to tell: no interval of a median reaches the confidence asked for with
fewer than `min_runs_for(confidence)` values (6 at 95%: even the widest one, from the
smallest to the largest value, misses the median with probability 2 x 0.5^n). Below
that a cell reads `too few runs to tell`, never `clear pass`, and its hint asks for that
many. That holds for a cell whose pairs are all identical (the same seeded figures on
both sides) too: it is exact for those seeds, but new repetitions are new seeds, so a
handful of equal pairs says nothing about the next ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spillover_harness import stats
from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.results.verdict import Advisory, Method, TokenRatio
from spillover_harness.stats import FloatArray

# A CI across the limit is a "close call" only when the point ratio lies within this
# fraction of the limit (0.90x .. 1.10x of it); farther out it "leans" one way.
CLOSE_CALL_BAND = 0.10


TOO_FEW = "too few runs to tell"


def min_runs_for(confidence: float) -> int:
    """The fewest values for which an interval of a median can have `confidence`:
    the smallest n with 1 - 2 x 0.5^n >= confidence (order statistics, exact)."""
    n = 1
    while 1 - 2 * 0.5**n < confidence:
        n += 1
    return n


def reading_for(point: float, ci: tuple[float, float], limit: float, *, strict: bool) -> str:
    """The advisory's word for a ratio against its limit (see the module doc)."""
    low, high = ci
    if high < limit if strict else high <= limit:
        return "clear pass"
    if low >= limit if strict else low > limit:
        return "clear fail"
    if abs(point / limit - 1) <= CLOSE_CALL_BAND:
        return "close call"
    return "leans fail" if point > limit else "leans pass"


def token_pairs(c: CellData, b: CellData) -> tuple[FloatArray, FloatArray]:
    """(config, baseline) input tokens of the runs that share a repetition (and so a seed).

    Two arrays, one pair per index; a repetition recorded twice on a side pairs
    its first record.
    """
    _, c_idx, b_idx = np.intersect1d(
        np.asarray(c.token_reps, dtype=np.int64),
        np.asarray(b.token_reps, dtype=np.int64),
        return_indices=True,
    )
    c_vals: FloatArray = np.asarray(c.tokens, dtype=np.float64)[c_idx]
    b_vals: FloatArray = np.asarray(b.tokens, dtype=np.float64)[b_idx]
    return c_vals, b_vals


def _pairs_usable(b_vals: FloatArray, n: int, n_base: int) -> bool:
    pairs = len(b_vals)
    return pairs >= 2 and 2 * pairs >= min(n, n_base) and bool(np.all(b_vals > 0))


def _token_ratio(
    ctx: Context,
    cfg: str,
    cell: tuple[str, str, str],
    confidence: float,
    resamples: int,
    seed: int,
) -> TokenRatio:
    recipe, inp, size = cell
    c, b = ctx.get(cfg, recipe, inp), ctx.get(ctx.baseline, recipe, inp)
    strict = size == "large"
    limit = 1.0 if strict else float(1 + ctx.tolerance)
    c_med, b_med = stats.median(c.tokens), stats.median(b.tokens)
    ratio = float(c_med / b_med) if c_med is not None and b_med else None
    n, n_base = len(c.tokens), len(b.tokens)
    c_vals, b_vals = token_pairs(c, b)
    method: Method
    paired_ratio: float | None = None
    identical = False
    if ctx.seeded and _pairs_usable(b_vals, n, n_base):
        method = "paired"
        ci = stats.bootstrap_paired_median_ratio_ci(
            c_vals, b_vals, confidence=confidence, resamples=resamples, seed=seed
        )
        paired_ratio = stats.median_float((c_vals / b_vals).tolist())
        identical = bool(np.array_equal(c_vals, b_vals))
        point, sample = paired_ratio, len(b_vals)
    else:
        method = "independent"
        ci = stats.bootstrap_median_ratio_ci(
            c.tokens, b.tokens, confidence=confidence, resamples=resamples, seed=seed
        )
        point, sample = ratio, max(1, min(n, n_base))
    runs: int | None = None
    label = f"{cfg} {recipe}/{inp}"
    least = min_runs_for(confidence)
    if ratio is None or point is None or ci is None:
        reading, hint = "no data", ""
    elif sample < least:
        reading, runs = TOO_FEW, least
        what = "pair(s) of runs with the same seed" if method == "paired" else "run(s) per side"
        equal = ", every pair equal for these seeds" if identical else ""
        hint = (
            f"{label} ({TOO_FEW}): {sample} {what}{equal}; no {confidence:.0%} interval of a "
            f"median exists below {least} values, so nothing is read into this ratio; {least} "
            f"{'pairs' if method == 'paired' else 'runs per side'} would allow one"
        )
    else:
        low, high = ci
        reading = reading_for(point, ci, limit, strict=strict)
        hint = ""
        if reading not in ("clear pass", "clear fail"):
            if method == "paired":
                how = (
                    f"median per-pair ratio {point:.3f} over {sample} pair(s) of runs with the "
                    f"same seed, paired {confidence:.0%} CI"
                )
                unit = f"run(s) per configuration (now {sample} pair(s))"
            else:
                how = f"median ratio {ratio:.3f}, {confidence:.0%} CI"
                unit = f"run(s) per side (now {min(n, n_base)})"
            ci_text = f"[{low:.3f}, {high:.3f}]"
            said = f"{label} ({reading}): {how} {ci_text} straddles the limit {limit:.2f}"
            if not identical:  # every pair equal: no number of runs would move it
                runs = stats.estimated_runs_to_resolve(point, ci, limit, sample)
                if runs is None:
                    hint = f"{said}; more runs would not settle it"
                else:
                    hint = f"{said}; about {runs} {unit} would likely settle it"
    return TokenRatio(
        config=cfg,
        recipe=recipe,
        input=inp,
        size_class=size,
        ratio=ratio,
        ci=ci,
        limit=limit,
        strict=strict,
        n=n,
        n_baseline=n_base,
        reading=reading,
        runs_to_resolve=runs,
        hint=hint,
        method=method,
        pairs=len(b_vals) if method == "paired" else 0,
        paired_ratio=paired_ratio,
        identical=identical,
    )


def advisory(
    ctx: Context,
    cfg_names: Sequence[str],
    confidence: float,
    resamples: int,
    seed: int,
) -> Advisory:
    base = ctx.baseline
    ratios = [
        _token_ratio(ctx, cfg, cell, confidence, resamples, seed)
        for cfg in cfg_names
        for cell in ctx.cells
    ]
    hints = [t.hint for t in ratios if t.hint]
    for cfg in (base, *cfg_names):
        for recipe, inp, _ in ctx.cells:
            d = ctx.get(cfg, recipe, inp)
            if 0 < d.valid < ctx.target:
                hints.append(
                    f"{cfg} {recipe}/{inp}: {d.valid} valid run(s) of the {ctx.target} planned "
                    f"({d.harness_errors} harness_error); the comparison rests on few runs"
                )
    base_leaks = sum(len(ctx.get(base, r, i).leak_ids) for r, i, _ in ctx.cells)
    if base_leaks:
        hints.append(
            f"{base} (the baseline) shows {base_leaks} run(s) with a disk or log leak: "
            "either the leak checks misfire or something leaks without spillover"
        )
    return Advisory(
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        token_ratios=tuple(ratios),
        hints=tuple(hints),
    )
