"""PNG plots for the report: input tokens, iterations and durations per
configuration, one panel per (recipe, input).

matplotlib's object API only (a `Figure` rendered by the Agg canvas): no
pyplot, no display, no global state, safe in a thread. Files are written
atomically (temporary file + rename).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spillover_harness.matrix import Matrix
from spillover_harness.records import RunRecord

# At most this many points are drawn per box (chosen deterministically); the box itself
# always uses every value.
MAX_POINTS_PER_BOX = 400

_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


Metric = tuple[str, str, str, Callable[[RunRecord], float | None]]

METRICS: tuple[Metric, ...] = (
    ("input_tokens", "input_tokens.png", "input tokens per run", lambda r: r.input_tokens),
    ("iterations", "iterations.png", "iterations per run", lambda r: r.iterations),
    ("duration_s", "durations.png", "step duration (s)", lambda r: r.duration_s),
)


def _values(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    get: Callable[[RunRecord], float | None],
) -> dict[tuple[str, str, str], list[float]]:
    configs = {c.name for c in matrix.configurations}
    cells = {(r.name, i.name) for r, i in matrix.cells()}
    out: dict[tuple[str, str, str], list[float]] = {}
    for r in records:
        if r.stage != stage or r.outcome == "harness_error":
            continue
        if r.config not in configs or (r.recipe, r.input) not in cells:
            continue
        value = get(r)
        if value is None:
            continue
        out.setdefault((r.config, r.recipe, r.input), []).append(float(value))
    return out


def _figure(
    matrix: Matrix,
    values: dict[tuple[str, str, str], list[float]],
    ylabel: str,
    title: str,
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
        data = [values.get((cfg, recipe, inp), []) for cfg in configs]
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
        for pos, vals in zip(positions, data, strict=True):
            if not vals:
                continue
            arr = np.asarray(vals, dtype=np.float64)
            if len(arr) > MAX_POINTS_PER_BOX:
                arr = rng.choice(arr, size=MAX_POINTS_PER_BOX, replace=False)
            jitter = rng.uniform(-0.12, 0.12, size=len(arr))
            ax.scatter(
                pos + jitter,
                arr,
                s=10,
                alpha=0.6,
                color=_COLORS[(pos - 1) % len(_COLORS)],
                zorder=3,
            )
        ax.set_xticks(positions)
        ax.set_xticklabels(configs, fontsize=8)
        ax.set_xlim(0.4, len(configs) + 0.6)
        ax.tick_params(axis="y", labelsize=8)
        if idx % ncols == 0:
            ax.set_ylabel(ylabel, fontsize=9)
    for idx in range(len(cells), nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig


def write_plots(
    records: Sequence[RunRecord], matrix: Matrix, stage: str | None, plot_dir: Path
) -> list[Path]:
    """One PNG per metric (input tokens, iterations, durations); returns their paths."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    source = "simulator" if stage == "sim" else (stage or "no stage")
    paths: list[Path] = []
    for _, filename, ylabel, get in METRICS:
        values = _values(records, matrix, stage, get)
        title = f"{ylabel}: stage {stage or 'n/a'} ({source}), harness_error runs left out"
        fig = _figure(matrix, values, ylabel, title)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        path = plot_dir / filename
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
