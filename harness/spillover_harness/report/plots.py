"""PNG plots for the report: input tokens, iterations and durations per
configuration, one panel per (recipe, input).

The input-token plot also shows the rule of criterion 3: each panel draws
the limit the cell is judged against (a dashed line at (1 + tolerance) x the
baseline's median for small and medium inputs, at the baseline's median for
large ones, where the median must stay strictly below) and marks each
configuration's cell pass / fail / inconclusive, taken from the verdict, so
a reviewer sees the verdict at a glance.

matplotlib's object API only (a `Figure` rendered by the Agg canvas): no
pyplot, no display, no global state, safe in a thread. Files are written
atomically (temporary file + rename) with the umask's permissions.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import Status, Verdict

# At most this many points are drawn per box (chosen deterministically); the box itself
# always uses every value.
MAX_POINTS_PER_BOX = 400

_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
_STATUS_MARK: dict[str, tuple[str, str]] = {
    "pass": ("pass", "#2e7d32"),
    "fail": ("FAIL", "#c62828"),
    "inconclusive": ("?", "#6d6d6d"),
}
LIMIT_COLOR = "#c62828"
FAILED_COLOR = "#111111"  # the x of a run that did not succeed

Metric = tuple[str, str, str, Callable[[RunRecord], float | None]]

METRICS: tuple[Metric, ...] = (
    ("input_tokens", "input_tokens.png", "input tokens per run", lambda r: r.input_tokens),
    ("iterations", "iterations.png", "iterations per run", lambda r: r.iterations),
    ("duration_s", "durations.png", "step duration (s)", lambda r: r.duration_s),
)


@dataclass(frozen=True)
class TokenMarks:
    """What the input-token panel of one cell shows besides the runs."""

    limit: float | None  # None: no baseline median, no limit
    strict: bool  # large input: the median must be strictly below the limit
    statuses: Mapping[str, Status]  # configuration -> criterion 3's status in this cell


def token_marks(verdict: Verdict) -> dict[tuple[str, str], TokenMarks]:
    """Per (recipe, input): criterion 3's limit and each configuration's status.

    Taken from the verdict's evidence, so the plot shows exactly what was
    judged. Empty when no configuration was judged (an incomplete stage).
    """
    limits: dict[tuple[str, str], float | None] = {}
    strict: dict[tuple[str, str], bool] = {}
    statuses: dict[tuple[str, str], dict[str, Status]] = {}
    for name, cv in verdict.configs.items():
        for ev in cv.criteria["input_tokens"].cells:
            if ev.input is None:
                continue
            key = (ev.recipe, ev.input)
            limits[key] = None if ev.limit is None else float(ev.limit)
            strict[key] = ev.size_class == "large"
            statuses.setdefault(key, {})[name] = ev.status
    return {key: TokenMarks(limits[key], strict[key], statuses[key]) for key in limits}


def _values(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    get: Callable[[RunRecord], float | None],
) -> dict[tuple[str, str, str], list[tuple[float, bool]]]:
    """Per (configuration, recipe, input): (value, whether the run succeeded)."""
    configs = {c.name for c in matrix.configurations}
    cells = {(r.name, i.name) for r, i in matrix.cells()}
    out: dict[tuple[str, str, str], list[tuple[float, bool]]] = {}
    for r in records:
        if r.stage != stage or r.outcome == "harness_error":
            continue
        if r.config not in configs or (r.recipe, r.input) not in cells:
            continue
        value = get(r)
        if value is None:
            continue
        out.setdefault((r.config, r.recipe, r.input), []).append(
            (float(value), r.outcome == "succeeded")
        )
    return out


def _draw_marks(ax: Axes, configs: Sequence[str], marks: TokenMarks, baseline: str) -> None:
    if marks.limit is not None:
        op = "<" if marks.strict else "≤"
        line = ax.axhline(
            marks.limit,
            color=LIMIT_COLOR,
            linestyle="--",
            linewidth=1.2,
            zorder=4,
        )
        line.set_gid("limit")
        # In the title, not a legend box: a legend inside the axes hid runs.
        ax.set_title(f"{ax.get_title()}\nlimit: median {op} {marks.limit:,.0f}", fontsize=9)
    low, high = ax.get_ylim()
    if marks.limit is not None:
        low, high = min(low, marks.limit), max(high, marks.limit)
    ax.set_ylim(low, high + 0.15 * max(high - low, 1.0))  # a band on top for the marks
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for pos, cfg in enumerate(configs, start=1):
        if cfg == baseline:
            text, color = "baseline", "#444444"
        elif cfg in marks.statuses:
            text, color = _STATUS_MARK[marks.statuses[cfg]]
        else:
            continue
        artist = ax.text(
            pos,
            0.98,
            text,
            transform=top,
            ha="center",
            va="top",
            fontsize=8,
            fontweight="bold",
            color=color,
        )
        artist.set_gid(f"status:{cfg}")


def _figure(
    matrix: Matrix,
    values: dict[tuple[str, str, str], list[tuple[float, bool]]],
    ylabel: str,
    title: str,
    marks: Mapping[tuple[str, str], TokenMarks] | None = None,
) -> Figure:
    configs = [c.name for c in matrix.configurations]
    cells = [(r.name, i.name, i.size_class) for r, i in matrix.cells()]
    ncols = min(len(cells), 4)
    nrows = (len(cells) + ncols - 1) // ncols
    fig = Figure(figsize=(3.6 * ncols, 3.4 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    rng = np.random.default_rng(0)
    for idx, (recipe, inp, size) in enumerate(cells):
        ax = axes[idx // ncols][idx % ncols]
        ax.set_title(f"{recipe}/{inp} ({size})", fontsize=9)
        ax.set_gid(f"cell:{recipe}/{inp}")
        runs = [values.get((cfg, recipe, inp), []) for cfg in configs]
        data = [[v for v, _ in cell] for cell in runs]
        if not any(data):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        positions = list(range(1, len(configs) + 1))
        present = [(p, d) for p, d in zip(positions, data, strict=True) if d]
        if present:
            ax.boxplot(
                [d for _, d in present],
                positions=[p for p, _ in present],
                widths=0.5,
                showfliers=False,
            )
        for pos, cell in zip(positions, runs, strict=True):
            if not cell:
                continue
            arr = np.asarray(cell, dtype=np.float64)  # (value, succeeded) rows
            if len(arr) > MAX_POINTS_PER_BOX:
                arr = arr[rng.choice(len(arr), size=MAX_POINTS_PER_BOX, replace=False)]
            jitter = rng.uniform(-0.12, 0.12, size=len(arr))
            ok = arr[:, 1] > 0
            ax.scatter(
                pos + jitter[ok],
                arr[ok, 0],
                s=10,
                alpha=0.6,
                color=_COLORS[(pos - 1) % len(_COLORS)],
                zorder=3,
            )
            if (~ok).any():  # runs that did not succeed: marked, never hidden in the box
                failed = ax.scatter(
                    pos + jitter[~ok],
                    arr[~ok, 0],
                    s=36,
                    marker="x",
                    color=FAILED_COLOR,
                    zorder=5,
                )
                failed.set_gid(f"failed:{configs[pos - 1]}")
        ax.set_xticks(positions)
        ax.set_xticklabels(configs, fontsize=8)
        ax.set_xlim(0.4, len(configs) + 0.6)
        ax.tick_params(axis="y", labelsize=8)
        if marks is not None and (recipe, inp) in marks:
            _draw_marks(ax, configs, marks[(recipe, inp)], matrix.acceptance.baseline)
        if idx % ncols == 0:
            ax.set_ylabel(ylabel, fontsize=9)
    for idx in range(len(cells), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig


def build_figures(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    verdict: Verdict | None = None,
) -> dict[str, Figure]:
    """The figures by file name; the input-token one shows the verdict's limits and marks."""
    source = "simulator, modelled" if stage == "sim" else (stage or "no stage")
    base = matrix.acceptance.baseline
    tolerance = f"{1 + matrix.acceptance.token_tolerance:.2f}"
    figures: dict[str, Figure] = {}
    for key, filename, ylabel, get in METRICS:
        values = _values(records, matrix, stage, get)
        title = (
            f"{ylabel}: stage {stage or 'n/a'} ({source}), harness_error runs left out; "
            "x: a run that did not succeed"
        )
        marks = None
        if key == "input_tokens" and verdict is not None:
            marks = token_marks(verdict)
            if marks:
                title += (
                    f"\ndashed: the limit (median ≤ {tolerance} x {base}'s median for small "
                    f"and medium inputs, < {base}'s median for large); marks: criterion 3"
                )
        figures[filename] = _figure(matrix, values, ylabel, title, marks)
    return figures


def write_plots(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    plot_dir: Path,
    *,
    verdict: Verdict | None = None,
) -> list[Path]:
    """One PNG per metric (input tokens, iterations, durations); returns their paths."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for filename, fig in build_figures(records, matrix, stage, verdict).items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        path = plot_dir / filename
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
