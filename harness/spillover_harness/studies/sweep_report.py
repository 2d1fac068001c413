"""The sweep's report: `sweep.md`, `sweep.json` and `plots/sweep.png` under the results
directory, each written atomically; the full evidence (the evaluator's report of the
sweep's matrix: every criterion, every cell) goes under `evidence/`."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.plan.matrix import Matrix
from spillover_harness.report.report import SIM_DISCLAIMER
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import StageFile
from spillover_harness.results.verdict import CRITERIA, Verdict
from spillover_harness.studies.sweep import (
    ResultSizes,
    SweepPoint,
    SweepResult,
    edge_reasons,
    input_result_sizes,
)

__all__ = ["SweepPaths", "render_sweep", "sweep_figure", "write_sweep_report"]

_MARK = {"pass": ("o", "#2e7d32"), "fail": ("X", "#c62828"), "inconclusive": ("s", "#6d6d6d")}
_STATUS = {"pass": "✅", "fail": "❌", "inconclusive": "❔"}
_LINES = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860")


def _fmt(value: float | None, pattern: str = "{:,.0f}") -> str:
    return "n/a" if value is None else pattern.format(value)


def _bytes(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else str(n)


def sweep_figure(result: SweepResult) -> Figure:
    """Input tokens and success rate against the threshold (log scale), one line per
    budget; each point marked pass / fail / inconclusive; the baseline dashed."""
    fig = Figure(figsize=(8, 6.5))
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    budgets = sorted({p.budget or 0 for p in result.points})
    for i, budget in enumerate(budgets):
        pts = [p for p in result.points if (p.budget or 0) == budget]
        color = _LINES[i % len(_LINES)]
        label = "default budget" if budget == 0 else f"budget {budget}"
        xs = [p.threshold for p in pts]
        for ax, values in (
            (top, [p.input_tokens for p in pts]),
            (bottom, [None if p.success_rate is None else 100 * p.success_rate for p in pts]),
        ):
            shown = [(x, v, p) for x, v, p in zip(xs, values, pts, strict=True) if v is not None]
            ax.plot([x for x, _, _ in shown], [v for _, v, _ in shown], color=color, label=label)
            for x, v, p in shown:
                marker, mark_color = _MARK[p.verdict]
                ax.scatter([x], [v], marker=marker, color=mark_color, zorder=3, s=40)
    if result.baseline_tokens is not None:
        top.axhline(result.baseline_tokens, color="#6d6d6d", linestyle="--", label=result.baseline)
    if result.baseline_success_rate is not None:
        bottom.axhline(
            100 * result.baseline_success_rate,
            color="#6d6d6d",
            linestyle="--",
            label=result.baseline,
        )
    best = result.best
    if best is not None and best.input_tokens is not None:
        top.annotate(
            "lowest passing",
            (best.threshold, best.input_tokens),
            textcoords="offset points",
            xytext=(8, 10),
            fontsize=8,
        )
    top.set_xscale("log", base=2)
    ticks = sorted({p.threshold for p in result.points})
    bottom.set_xticks(ticks, [_bytes(t) for t in ticks])
    bottom.minorticks_off()
    top.set_ylabel("input tokens\n(sum of the cells' medians)")
    bottom.set_ylabel("success rate (%)")
    bottom.set_xlabel("threshold (bytes, log scale)")
    bottom.set_ylim(-5, 105)
    top.legend(fontsize=8, loc="best")
    top.set_title(
        f"threshold sweep (simulator): ● pass  ✖ fail  ■ inconclusive, against {result.baseline}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _point_row(p: SweepPoint, cells: Sequence[str]) -> str:
    crit = " | ".join(_STATUS.get(p.criteria.get(k, ""), "—") for k in CRITERIA)
    ratios = " | ".join(_fmt(p.token_ratios.get(c), "{:.2f}") for c in cells)
    rate = _fmt(None if p.success_rate is None else 100 * p.success_rate, "{:.0f}%")
    return (
        f"| `{p.name}` | {_STATUS[p.verdict]} {p.verdict} | {crit} | "
        f"{_fmt(p.input_tokens)} | {rate} | {ratios} |"
    )


def _edges_section(result: SweepResult, sizes: ResultSizes) -> list[str]:
    reasons = edge_reasons(result, sizes)
    if not reasons:
        return []
    return [
        "**What sets the edges:** the inputs' sizes, not the threshold as such. "
        "A tool result of at least the threshold spills; the range ends where one of "
        "these inputs' results crosses it, so other inputs would move it (sizes are the "
        "results' text; the JSON the threshold sees is slightly larger):",
        "",
        *(f"- {r}" for r in reasons),
        "",
    ]


def render_sweep(
    result: SweepResult,
    matrix: Matrix,
    *,
    plot: str,
    runs: int,
    command: str,
    sizes: ResultSizes | None = None,
) -> str:
    """sweep.md's text; `sizes` ("recipe/input" -> its tool results' sizes) explain the
    passing range's edges."""
    best = result.best
    share = (
        None
        if best is None or best.input_tokens is None or not result.baseline_tokens
        else best.input_tokens / result.baseline_tokens
    )
    lines = [
        f"# Threshold sweep of `{matrix.name.removesuffix('-sweep')}`",
        "",
        f"> {SIM_DISCLAIMER}",
        "",
        f"**Passing range:** {result.passing_range()}",
        "",
        *_edges_section(result, sizes or {}),
        "**Lowest-token passing point:** "
        + (
            f"`{best.name}` ({_fmt(best.input_tokens)} input tokens, "
            f"{_fmt(share, '{:.2f}')} x `{result.baseline}`)"
            if best is not None
            else "none: no point passes every criterion"
        ),
        "",
        f"{len(result.points)} points x {len(result.cells)} cells x "
        f"{matrix.repetitions.sim} repetitions, each judged against `{result.baseline}` "
        f"on the five criteria ({runs} runs). Command: `{command}`",
        "",
        "## Points",
        "",
        "Token ratio = the cell's median input tokens / the baseline's.",
        "",
        "| point | verdict | "
        + " | ".join(CRITERIA)
        + " | input tokens | success | "
        + " | ".join(result.cells)
        + " |",
        "|" + "---|" * (4 + len(CRITERIA) + len(result.cells)),
        f"| `{result.baseline}` (baseline) | — | "
        + " | ".join("—" for _ in CRITERIA)
        + f" | {_fmt(result.baseline_tokens)} | "
        + _fmt(
            None if result.baseline_success_rate is None else 100 * result.baseline_success_rate,
            "{:.0f}%",
        )
        + " | "
        + " | ".join("1.00" for _ in result.cells)
        + " |",
        *(_point_row(p, result.cells) for p in result.points),
        "",
        f"![input tokens and success rate against the threshold]({plot})",
        "",
        "Full evidence (every criterion's reason and cell, per-cell tables): "
        "[evidence/report.md](evidence/report.md).",
        "",
    ]
    return "\n".join(lines)


class SweepPaths:
    def __init__(self, out_dir: Path) -> None:
        self.report_md = out_dir / "sweep.md"
        self.json = out_dir / "sweep.json"
        self.plot = out_dir / "plots" / "sweep.png"
        self.evidence = out_dir / "evidence"


def _as_json(result: SweepResult, sizes: ResultSizes) -> dict[str, Any]:
    best = result.best
    return {
        "baseline": result.baseline,
        "baseline_input_tokens": result.baseline_tokens,
        "baseline_success_rate": result.baseline_success_rate,
        "cells": list(result.cells),
        "passing": [p.name for p in result.passing],
        "passing_range": result.passing_range(),
        "passing_range_edges": edge_reasons(result, sizes),
        "lowest_token_passing": best.name if best is not None else None,
        "points": [asdict(p) for p in result.points],
    }


def write_sweep_report(
    result: SweepResult,
    verdict: Verdict,
    records: Sequence[RunRecord],
    matrix: Matrix,
    out_dir: Path,
    *,
    command: str,
    stage: StageFile | None,
) -> SweepPaths:
    from spillover_harness.report.report import write_report

    paths = SweepPaths(out_dir)
    # the sweep's own stage (sim, never faulted): its disclaimer comes from the stage;
    # the evidence is a copy away from the records, so it names no apply command
    write_report(verdict, records, matrix, paths.evidence, stage=stage, records_dir=out_dir)
    paths.plot.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    sweep_figure(result).savefig(buf, format="png", dpi=100)
    atomic_write_bytes(paths.plot, buf.getvalue())
    sizes = input_result_sizes(matrix)
    atomic_write_bytes(
        paths.json, (json.dumps(_as_json(result, sizes), indent=2) + "\n").encode("utf-8")
    )
    text = render_sweep(
        result,
        matrix,
        plot=paths.plot.relative_to(out_dir).as_posix(),
        runs=len(records),
        command=command,
        sizes=sizes,
    )
    atomic_write_bytes(paths.report_md, text.encode("utf-8"))
    return paths
