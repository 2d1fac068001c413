"""Advisory statistics: how solid each token comparison looks, and hints.

They are attached to the verdict but never change a status or the decision.

Pairing: the runner seeds a run from the matrix seed, the cell and the
repetition, not from the configuration (`runner.seed_for`), so the runs of
two configurations with the same (recipe, input, repetition) met the same
scripted agent: they pair. Where runs pair (at least 2 pairs, covering at
least half of the smaller side), the paired bootstrap is used (the median of
the per-pair ratios); otherwise the two sides are resampled independently.
The advisory says which (`method`). A cell whose pairs all have the same
figure on both sides (`identical`) gets no runs-needed hint: more runs of the
same seeds cannot change anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from spillover_harness import stats
from spillover_harness.evaluate.context import CellData, Context
from spillover_harness.evaluate.schema import Advisory, Method, TokenRatio


def token_pairs(c: CellData, b: CellData) -> list[tuple[int, int]]:
    """(config, baseline) input tokens of the runs that share a repetition (and so a seed)."""
    base_by_rep: dict[int, int] = {}
    for rep, value in zip(b.token_reps, b.tokens, strict=True):
        base_by_rep.setdefault(rep, value)
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for rep, value in zip(c.token_reps, c.tokens, strict=True):
        if rep in base_by_rep and rep not in used:
            used.add(rep)
            pairs.append((value, base_by_rep[rep]))
    return pairs


def _pairs_usable(pairs: Sequence[tuple[int, int]], n: int, n_base: int) -> bool:
    return (
        len(pairs) >= 2 and 2 * len(pairs) >= min(n, n_base) and all(base > 0 for _, base in pairs)
    )


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
    pairs = token_pairs(c, b)
    method: Method
    paired_ratio: float | None = None
    identical = False
    if _pairs_usable(pairs, n, n_base):
        method = "paired"
        c_vals = [float(x) for x, _ in pairs]
        b_vals = [float(y) for _, y in pairs]
        ci = stats.bootstrap_paired_median_ratio_ci(
            c_vals, b_vals, confidence=confidence, resamples=resamples, seed=seed
        )
        paired_ratio = stats.median_float([x / y for x, y in zip(c_vals, b_vals, strict=True)])
        identical = all(x == y for x, y in pairs)
        point, sample = paired_ratio, len(pairs)
    else:
        method = "independent"
        ci = stats.bootstrap_median_ratio_ci(
            c.tokens, b.tokens, confidence=confidence, resamples=resamples, seed=seed
        )
        point, sample = ratio, max(1, min(n, n_base))
    runs: int | None = None
    label = f"{cfg} {recipe}/{inp}"
    if ratio is None or point is None or ci is None:
        reading, hint = "no data", ""
    else:
        low, high = ci
        clears = high < limit if strict else high <= limit
        breaks = low >= limit if strict else low > limit
        if clears:
            reading, hint = "clear pass", ""
        elif breaks:
            reading, hint = "clear fail", ""
        else:
            reading = "close call"
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
            if identical:
                hint = ""  # every pair equal: no number of runs would move it
            else:
                runs = stats.estimated_runs_to_resolve(point, ci, limit, sample)
                if runs is None:
                    hint = (
                        f"{label}: {how} {ci_text} straddles the limit {limit:.2f}; more runs "
                        "would not settle it"
                    )
                else:
                    hint = (
                        f"{label}: {how} {ci_text} straddles the limit {limit:.2f}; about "
                        f"{runs} {unit} would likely settle it"
                    )
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
        pairs=len(pairs) if method == "paired" else 0,
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
