"""The sensitivity study's report: `sensitivity.md`, `sensitivity.json` and
`plots/tornado.png` under the results directory, each written atomically."""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.plan.matrix import Matrix
from spillover_harness.report.report import SIM_DISCLAIMER
from spillover_harness.studies.sensitivity import (
    Margin,
    ParameterStudy,
    SensitivityPoint,
    SensitivityResult,
)

__all__ = ["SensitivityPaths", "render_sensitivity", "tornado_figure", "write_sensitivity_report"]

SAME = "#9e9e9e"
FLIP = "#c62828"


def _v(value: float) -> str:
    return f"{value:g}"


def tornado_figure(result: SensitivityResult) -> Figure:
    """One row per parameter, the most sensitive on top. Each tested value sits at its
    rank from the reference value (left: lower, right: higher); a red box is a value
    that flips the decision (labelled with the decision it gives), grey keeps it."""
    ranked = result.ranked()
    fig = Figure(figsize=(10, 0.7 * len(ranked) + 1.6))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    span = 1
    for row, study in enumerate(reversed(ranked)):
        ref_index = next(i for i, p in enumerate(study.points) if p.value == study.reference_value)
        offsets = [i - ref_index for i in range(len(study.points))]
        span = max(span, *(abs(o) for o in offsets))
        ax.plot([min(offsets), max(offsets)], [row, row], color="#e0e0e0", linewidth=8, zorder=1)
        for offset, point in zip(offsets, study.points, strict=True):
            flipped = point.decision != study.reference_decision
            ax.barh(
                row,
                0.8,
                left=offset - 0.4,
                height=0.5,
                color=FLIP if flipped else SAME,
                zorder=2,
                edgecolor="black" if offset == 0 else "none",
            )
            ax.text(offset, row + 0.33, _v(point.value), ha="center", fontsize=7)
            if flipped:
                ax.text(offset, row - 0.45, point.decision, ha="center", fontsize=7, color=FLIP)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(ranked)), [s.parameter.name for s in reversed(ranked)])
    ax.set_xlim(-span - 0.7, span + 0.7)
    ax.set_xticks([-span, 0, span], ["lower values", "reference", "higher values"])
    ax.set_ylim(-0.8, len(ranked) - 0.3)
    ax.set_title(
        f"sensitivity of the simulated decision ({result.reference.decision}) to the model:"
        "\nred = the value flips the decision (label: the decision it gives)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _why(point: SensitivityPoint, reference: SensitivityPoint) -> str:
    """The chain configurations whose failed criteria changed, e.g. `128KiB: input_tokens`."""
    changed = [
        f"{config}: {', '.join(failed)}"
        for config, failed in point.failed.items()
        if failed and failed != reference.failed.get(config)
    ]
    return f" ({'; '.join(changed[:1])})" if changed else ""


def _flip_text(study: ParameterStudy, reference: SensitivityPoint | None = None) -> str:
    parts = []
    below, above = study.flip_below(), study.flip_above()
    for side, point in (("below", below), ("above", above)):
        if point is not None:
            why = _why(point, reference) if reference is not None else ""
            parts.append(f"{side}: nearest at {_v(point.value)} → `{point.decision}`{why}")
    return "; ".join(parts) if parts else "no flip in the tested range"


def _values_text(study: ParameterStudy) -> str:
    cells = []
    for p in study.points:
        text = f"{_v(p.value)}: `{p.decision}`"
        if p.value == study.reference_value:
            text = f"**{text}**"
        elif p.decision != study.reference_decision:
            text = f"⚠ {text}"
        cells.append(text)
    return ", ".join(cells)


_OPERATORS = {"iteration_limit": "<=", "no_leak": ">="}


def margin_text(margin: Margin) -> str:
    """`input_tokens 1 <= 1.1 (+0.1); other cells: code-review/large +0.407`: the
    tightest cell's figure, its limit and signed margin (negative: failing, then
    marked ❌), then the margins of the cells with another one."""
    assert margin.value is not None and margin.limit is not None and margin.margin is not None
    if margin.criterion == "input_tokens":
        op = "<" if margin.strict else "<="
    else:
        op = _OPERATORS.get(margin.criterion, ">=")
    passes = margin.margin > 0 or (margin.margin == 0 and not margin.strict)
    others = [
        f"{cell} {m:+.3g}"
        for cell, m in margin.cells.items()
        if cell != margin.cell and f"{m:+.3g}" != f"{margin.margin:+.3g}"
    ]
    return (
        f"{'' if passes else '❌ '}{margin.criterion} {margin.value:.3g} {op} "
        f"{margin.limit:.3g} ({margin.margin:+.3g})"
        + (f"; other cells: {', '.join(others)}" if others else "")
    )


def _config_margins(point: SensitivityPoint, config: str) -> str:
    shown = [margin_text(m) for m in point.margins.get(config, {}).values() if m.margin is not None]
    return "<br>".join(shown) or "no figure"


def _bold_if(text: str, bold: bool) -> str:
    return f"**{text}**" if bold else text


def _margins_section(result: SensitivityResult, matrix: Matrix) -> list[str]:
    chain = [step.config for step in matrix.decision.chain]
    rows = [
        f"| `{s.parameter.name}` | {_bold_if(_v(p.value), p.value == s.reference_value)} "
        f"| `{p.decision}` | " + " | ".join(_config_margins(p, config) for config in chain) + " |"
        for s in result.ranked()
        for p in s.points
    ]
    return [
        "## Margins: how close each value is to flipping",
        "",
        "For each tested value (the reference in bold) and each configuration of the "
        "decision chain, every criterion's figure in its tightest cell against its "
        "limit, and the margin in brackets: positive, it passes with that much to "
        "spare; negative (❌), it fails by that much; 0 passes unless the limit is "
        "strict (`<`). `input_tokens` is the median's ratio to the baseline's median "
        "(limit 1 + tolerance, or strictly 1 for large inputs), its margin a share of "
        "the baseline's median; `success_rate` and `summary_quality` are rates, their "
        "margins rate differences; `iteration_limit` counts limit hits against the "
        "baseline's; `no_leak` counts clean runs against the valid ones. A criterion "
        "without a figure (not applicable, inconclusive) is left out; the cells whose "
        "margin differs from the tightest one follow it (`other cells`). "
        "`sensitivity.json` holds the same per criterion, with every cell's margin "
        "(`points[].margins`). Margins are of the literal comparison (docs/reference.md "
        "§3); the decision column is the evaluator's. Simulator figures: modelled, "
        f"{matrix.repetitions.sim} repetitions per cell.",
        "",
        "| parameter | value | decision | " + " | ".join(f"`{c}`" for c in chain) + " |",
        "|---|---|---|" + "---|" * len(chain),
        *rows,
        "",
    ]


def render_sensitivity(
    result: SensitivityResult, matrix: Matrix, *, plot: str, command: str
) -> str:
    ref = result.reference
    flipping = result.flipping
    lines = [
        f"# Sensitivity of the simulated decision: `{matrix.name}`",
        "",
        f"**Decision with the matrix's model:** `{ref.decision}`",
        "",
        "**Parameters that flip it:** "
        + (", ".join(f"`{s.parameter.name}` ({_flip_text(s, ref)})" for s in flipping) or "none"),
        "",
        SIM_DISCLAIMER,
        "",
        "Each parameter of the simulator's model (docs/simulator.md §1.5) is varied on its "
        "own across the values below, the others kept at the matrix's model; the whole "
        f"matrix runs at each value ({matrix.repetitions.sim} repetitions per cell) and is "
        f"judged as `run` judges it. Command: `{command}`",
        "",
        "| parameter | reference | flips the decision | "
        "decision at each value (reference in bold) |",
        "|---|---|---|---|",
        *(
            f"| `{s.parameter.name}` ({s.parameter.unit}) | {_v(s.reference_value)} | "
            f"{_flip_text(s, ref)} | {_values_text(s)} |"
            for s in result.ranked()
        ),
        "",
        f"![tornado: which parameters flip the decision]({plot})",
        "",
        *_margins_section(result, matrix),
        "## What each parameter models",
        "",
        *(f"- `{s.parameter.name}`: {s.parameter.meaning}." for s in result.studies),
        "",
        "The per-value results directories (records, stage.json) are under `points/`.",
        "",
    ]
    return "\n".join(lines)


class SensitivityPaths:
    def __init__(self, out_dir: Path) -> None:
        self.report_md = out_dir / "sensitivity.md"
        self.json = out_dir / "sensitivity.json"
        self.plot = out_dir / "plots" / "tornado.png"


def _point_json(p: SensitivityPoint) -> dict[str, Any]:
    return asdict(p)


def _value_of(point: SensitivityPoint | None) -> float | None:
    return None if point is None else point.value


def _as_json(result: SensitivityResult) -> dict[str, Any]:
    return {
        "reference": _point_json(result.reference),
        "flipping": [s.parameter.name for s in result.flipping],
        "parameters": {
            s.parameter.name: {
                "reference_value": s.reference_value,
                "flip_below": _value_of(s.flip_below()),
                "flip_above": _value_of(s.flip_above()),
                "points": [_point_json(p) for p in s.points],
            }
            for s in result.studies
        },
    }


def write_sensitivity_report(
    result: SensitivityResult, matrix: Matrix, out_dir: Path, *, command: str
) -> SensitivityPaths:
    paths = SensitivityPaths(out_dir)
    paths.plot.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    tornado_figure(result).savefig(buf, format="png", dpi=100)
    atomic_write_bytes(paths.plot, buf.getvalue())
    atomic_write_bytes(paths.json, (json.dumps(_as_json(result), indent=2) + "\n").encode("utf-8"))
    text = render_sensitivity(
        result, matrix, plot=paths.plot.relative_to(out_dir).as_posix(), command=command
    )
    atomic_write_bytes(paths.report_md, text.encode("utf-8"))
    return paths
