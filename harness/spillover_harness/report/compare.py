"""Two stages side by side (`spillover-harness report --compare A B`, `make
compare-stages`): each one's decision, reproducibility, per-criterion status and key
figures per configuration, read from the `stage.json` and `verdict.json` each stage
wrote. Typically Stage 1 (`results/minikube`) against Stage 2 (`results/dev`).

Nothing is judged again: the comparison shows what each stage decided. A figure says
whether it was measured or modelled (stage sim: the simulator's model), and a
decision says how stable it was, as in each stage's report.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spillover_harness.results.results_dir import (
    ResultFileMissing,
    StageDir,
    StageFile,
)

__all__ = ["ComparedStage", "read_compared", "render_comparison"]

_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "❔ inconclusive"}


@dataclass(frozen=True)
class ComparedStage:
    """One stage directory as the comparison reads it: its stage.json and the header of
    its verdict.json (`results_dir.VerdictHeader`, a view of `results.verdict.Verdict`)."""

    path: Path
    stage: StageFile
    verdict: Any


def read_compared(directory: Path) -> ComparedStage:
    """The stage in `directory`; ReadBackError (a subclass naming the file and what is
    wrong) when it is no stage directory or holds no verdict."""
    if not directory.is_dir():
        raise ResultFileMissing(directory, "NotADirectoryError", "not a directory")
    stage_dir = StageDir(directory)
    stage = stage_dir.read_stage()
    if stage is None:
        raise ResultFileMissing(
            stage_dir.stage_file, "FileNotFoundError", "no such file: not a stage directory"
        )
    return ComparedStage(directory, stage, stage_dir.read_verdict_header())


# -- rendering --------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _modelled(side: ComparedStage) -> bool:
    """Its figures are the simulator's: stage sim, or a cluster stage on a simulated
    platform (durations)."""
    return side.verdict.stage == "sim" or side.stage.simulated_platform


def _stability(side: ComparedStage) -> str:
    s = side.verdict.stability
    if s is None or s.decision is None or s.resamples is None:
        return "not computed"
    return f"`{side.verdict.decision}` in {s.decision:.1%} of {s.resamples:,} resamples"


def _reproducibility(side: ComparedStage) -> str:
    r = side.verdict.reproducibility
    if r is None or r.decision is None:
        return "not computed"
    return f"`{side.verdict.decision}` with probability {r.decision:.2f}"


def _provenance(side: ComparedStage) -> str:
    p = side.stage.provenance
    if p is None:
        return "not recorded"
    commit = p.harness_commit[:12] if p.harness_commit else "commit unknown"
    text = f"spillover-harness {p.harness_version or 'unknown'} ({commit})"
    if p.profile:
        text += f", profile `{p.profile}`"
    if p.stage1_gate is not None and p.stage1_gate.status == "overridden":
        text += f", Stage 1 gate overridden ({p.stage1_gate.flag})"
    return text


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _figures(side: ComparedStage, config: str) -> dict[str, str]:
    cells = [c for c in side.verdict.cells or () if c.config == config]
    if not cells:
        return {}
    kind = " (modelled)" if _modelled(side) else ""
    valid = sum(c.valid or 0 for c in cells)
    ok = sum(c.succeeded or 0 for c in cells)
    return {
        "runs (valid)": f"{sum(c.runs or 0 for c in cells)} ({valid})",
        "succeeded": f"{ok}/{valid}" + (f" ({ok / valid:.0%})" if valid else ""),
        "iteration-limit hits": str(sum(c.limit_hits or 0 for c in cells)),
        "median input tokens": _number(_median([c.median_input_tokens for c in cells])),
        "median duration (s)": _number(_median([c.median_duration_s for c in cells])) + kind,
        "median status report (bytes)": _number(
            _median([c.median_status_report_bytes for c in cells])
        )
        + kind,
    }


def render_comparison(a: ComparedStage, b: ComparedStage) -> str:
    """The comparison as Markdown (ready to paste into a pull request)."""
    va, vb = a.verdict, b.verdict
    label_a, label_b = f"A: `{a.path}`", f"B: `{b.path}`"
    lines = [
        f"# Stage comparison: `{va.stage}` vs `{vb.stage}`",
        "",
        (
            f"**Both decide `{va.decision}`.**"
            if va.decision == vb.decision
            else f"**The stages decide differently:** A `{va.decision}`, B `{vb.decision}`."
        ),
        "",
    ]
    if va.matrix_name != vb.matrix_name:
        lines.extend(
            [
                f"**Different matrices** (`{va.matrix_name}` vs `{vb.matrix_name}`): the decisions "
                "answer different questions.",
                "",
            ]
        )
    if _modelled(a) or _modelled(b):
        lines.extend(
            [
                "_A side that ran on the simulator shows modelled figures (the simulator's "
                "model), not the platform's._",
                "",
            ]
        )
    lines.extend(
        [
            _row("", label_a, label_b),
            "|---|---|---|",
            _row("stage", f"`{va.stage}`", f"`{vb.stage}`"),
            _row("matrix", f"`{va.matrix_name or ''}`", f"`{vb.matrix_name or ''}`"),
            _row("decision", f"`{va.decision}`", f"`{vb.decision}`"),
            _row("why", va.decision_reason or "—", vb.decision_reason or "—"),
            _row("reproducibility", _reproducibility(a), _reproducibility(b)),
            _row("stability", _stability(a), _stability(b)),
            _row(
                "figures",
                "modelled" if _modelled(a) else "measured",
                "modelled" if _modelled(b) else "measured",
            ),
            _row("provenance", _provenance(a), _provenance(b)),
            "",
        ]
    )
    configs_a, configs_b = va.configs or {}, vb.configs or {}
    configs = list(dict.fromkeys([*configs_a, *configs_b]))
    lines.extend(["## Per-criterion status", "", _row("configuration", "criterion", "A", "B")])
    lines.append("|---|---|---|---|")
    for name in configs:
        ca, cb = configs_a.get(name), configs_b.get(name)
        lines.append(
            _row(
                f"`{name}`",
                "**verdict**",
                _STATUS.get(ca.verdict, ca.verdict) if ca else "not judged",
                _STATUS.get(cb.verdict, cb.verdict) if cb else "not judged",
            )
        )
        criteria_a = (ca.criteria if ca else None) or {}
        criteria_b = (cb.criteria if cb else None) or {}
        keys = list(dict.fromkeys([*criteria_a, *criteria_b]))
        for key in keys:
            sa, sb = criteria_a.get(key), criteria_b.get(key)
            mark = "" if (sa and sb and sa.status == sb.status) else " ≠"
            lines.append(
                _row(
                    f"`{name}`",
                    f"{key}{mark}",
                    _STATUS.get(sa.status, sa.status) if sa else "—",
                    _STATUS.get(sb.status, sb.status) if sb else "—",
                )
            )
    lines.extend(["", "## Key figures per configuration", ""])
    lines.append(
        "Sums over the configuration's cells; medians are the median of its cells' medians."
    )
    lines.extend(["", _row("configuration", "figure", "A", "B"), "|---|---|---|---|"])
    every = list(dict.fromkeys([*(c.config for c in va.cells), *(c.config for c in vb.cells)]))
    for name in every:
        fa, fb = _figures(a, name), _figures(b, name)
        for figure in dict.fromkeys([*fa, *fb]):
            lines.append(_row(f"`{name}`", figure, fa.get(figure, "—"), fb.get(figure, "—")))
    return "\n".join(lines).rstrip("\n") + "\n"
