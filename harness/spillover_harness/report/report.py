"""The report of a stage: `report.md` (ready to paste into a pull request),
`verdict.json` (= `Verdict.to_json()`) and PNG plots.

Order of report.md: the decision and its reason first (the first line says
when the stage is incomplete, judged anyway or not), the stage (with the
simulator disclaimer for `sim`), the missing runs of an incomplete stage, the
runs needed when the decision is inconclusive, a table per criterion,
per-cell tables, the advisory statistics, then warnings, ignored records, the
runs' notes and the plots.

Every file is written atomically and with the umask's permissions, like
`runs.jsonl` (`atomic_file.atomic_write_bytes`).

Records hold no tool-result content; the runs' `notes` are printed as given
(verbatim, in code blocks), so the report never rewrites what the harness
recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spillover_harness.apply.decision import apply_command
from spillover_harness.atomic_file import atomic_write_bytes
from spillover_harness.evaluate import ALL_CRITERIA
from spillover_harness.evaluate.advisory import CLOSE_CALL_BAND, TOO_FEW, min_runs_for
from spillover_harness.evaluate.noise import drop_bound, rate_lower_p, weak_pass, within_noise
from spillover_harness.evaluate.render import CriterionView, number, view_for
from spillover_harness.evaluate.reproducibility import describe as describe_reproducibility
from spillover_harness.evaluate.stability import describe as describe_stability
from spillover_harness.names import unsafe_chars
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.report.cache import cache_section
from spillover_harness.report.memory import memory_section
from spillover_harness.report.plots import write_plots
from spillover_harness.report.status_report_check import status_report_section
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import (
    AdaptiveRound,
    LaneFileError,
    MemoryLane,
    StageDir,
    StageFile,
    StageProvenance,
)
from spillover_harness.results.verdict import (
    CRITERIA,
    CellEvidence,
    CellSummary,
    Verdict,
    unexercised_note,
)
from spillover_harness.sim.config import parse_spillover_env

SIM_DISCLAIMER = (
    "**These figures come from the embedded simulator, not from the platform.** "
    "They show what the thresholds would do under the simulator's model of spillover; "
    "they do not show that the platform passed. Only the `minikube` and `dev` stages "
    "validate the real mcp-host."
)

SIMULATED_PLATFORM_DISCLAIMER = (
    "**This cluster stage ran on a simulated platform: the mcp-host processes are the "
    "embedded simulator** (profile `simulated_platform: true`, e.g. `local`, the local "
    "test cluster's real node). The operator, the policy, the WRC pass-through, the pods "
    "and every collector are real; the agent, its LLM and the spillover itself are the "
    "simulator's model. The decision is the simulator's: it does not validate the "
    "platform, and `apply-decision` and the Stage 2 gate refuse it as they refuse stage "
    "`sim`'s."
)

# What a simulated decision would take to be applied: never a bypass flag.
SIMULATED_NOT_APPLIED = (
    "**Not a decision to apply as it stands:** it is the simulator's answer (stage "
    "`{stage}`), and `apply-decision` refuses it. What it would take: run the cluster "
    "stage on the platform (`spillover-harness run --stage minikube --profile minikube "
    "--out results/minikube`, then `--stage dev`; docs/harness.md) and apply that "
    "stage's verdict."
)


def faults_note(faults: Sequence[str]) -> str:
    """The line a faulted stage's report opens with."""
    return (
        f"**Faults injected into the simulator: {', '.join(f'`{f}`' for f in faults)}.** "
        "This stage tests that the harness's checks catch a broken mcp-host; its decision "
        "is never one to apply (`apply-decision` refuses it)."
    )


# Where a reader of a simulated verdict sees how robust it is (docs/simulator.md §7):
# `make sensitivity` writes results/sensitivity next to `make demo`'s results/sim.
SENSITIVITY_LINK = (
    "How much this answer depends on the simulator's model of the agent: "
    "[the sensitivity study](../sensitivity/sensitivity.md) "
    "(`make sensitivity`, or `spillover-harness sensitivity --out results/sensitivity`)."
)

STAGE_DESCRIPTIONS = {
    "sim": "the embedded simulator (no cluster)",
    "minikube": "Stage 1: a local Minikube profile",
    "dev": "Stage 2: the shared dev cluster",
}

# The packaged matrices that show something rather than decide the shipped default,
# and the make target that runs each.
DEMO_MATRICES = {"memory-budget": "make memory", "strategies": "make compare"}

# Figures the simulator computes from its model rather than measures (stage sim).
MODELLED = "modelled"
MODELLED_MEMORY = (
    "_Modelled, not measured: the simulator's model of the mcp-host's memory "
    "(docs/simulator.md), not a container's working set._"
)

MAX_NOTES = 50  # distinct notes printed; the rest are counted
MAX_PARAMETERS = 40  # simulator parameters listed in the provenance block

# Every criterion this evaluator judges, by key: each renders its own cells.
CRITERION_VIEWS: dict[str, CriterionView] = {c.key: c for c in ALL_CRITERIA}

_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "❔ inconclusive"}


@dataclass(frozen=True)
class ReportPaths:
    report_md: Path
    verdict_json: Path
    plots: list[Path]


# -- formatting helpers ----------------------------------------------------------------


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell: no row break, no column break, and no
    control or format character (U+202E would reverse what follows) shown raw."""
    escaped = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    if unsafe_chars(escaped):
        escaped = "".join(f"<U+{ord(c):04X}>" if unsafe_chars(c) else c for c in escaped)
    return escaped


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = [_row(*header), "|" + "|".join("---" for _ in header) + "|"]
    lines.extend(_row(*r) for r in rows)
    return lines


def _fence(text: str) -> str:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


# -- per-criterion presentation --------------------------------------------------------


def criterion_keys(verdict: Verdict) -> list[str]:
    """The criteria the verdict judged, in its order (the five of CRITERIA for a verdict
    of this evaluator; whatever a configuration holds otherwise)."""
    keys: dict[str, None] = {}
    for cv in verdict.configs.values():
        keys.update(dict.fromkeys(cv.criteria))
    return list(keys) or list(CRITERIA)


# Rates where higher is better: a pass whose interval reaches far below the baseline is weak.
_RATE_CRITERIA = ("success_rate", "summary_quality")


def noise_mark(key: str, ev: CellEvidence, *, simulated: bool = False) -> str:
    """What the cell's p-value and interval say about its status (evaluate.noise), and
    the literal reading where an opt-in rule gave the status and disagrees. On the
    simulator a fail is never called noise: its runs pair seed for seed, so a difference
    is the configuration's own effect under the model."""
    if ev.literal_status is not None and ev.literal_status != ev.status:
        return f" ({ev.rule.replace('_', '-')}; literal: {_STATUS[ev.literal_status]})"
    if ev.status == "fail" and simulated:
        return " (simulated: the configuration's own effect on the same seeds, not noise)"
    if ev.status == "fail" and within_noise(ev.p_value):
        return f" (within noise: p={ev.p_value:.2f})"
    if ev.status == "fail" and ev.p_value is not None:
        return f" (p={ev.p_value:.3f})"
    counts = _rate_counts(ev)
    if ev.status == "pass" and key in _RATE_CRITERIA and counts and weak_pass(*counts):
        return f" (weak: a drop of up to {drop_bound(*counts):.0%} is not ruled out)"
    return ""


def _rate_counts(ev: CellEvidence) -> tuple[int, int, int, int] | None:
    """(k, n) of both sides of a rate cell, from its figures."""
    if ev.value is None or ev.baseline_value is None or ev.n_baseline is None:
        return None
    return (round(ev.value * ev.n), ev.n, round(ev.baseline_value * ev.n_baseline),
            ev.n_baseline)  # fmt: skip


MAX_DECIDING = 6  # cells listed per configuration under the decision


def _deciding_cells(verdict: Verdict, matrix: Matrix) -> list[str]:
    """The cells that decide it, walked as the chain walks: a failing configuration's
    failing cells (with how far each could be noise), the one that passed, or the
    inconclusive one that stopped the chain; then where resampling flips the decision."""
    if not verdict.configs:
        return []
    bullets: list[str] = []
    for step in matrix.decision.chain:
        cv = verdict.configs.get(step.config)
        if cv is None:
            continue
        if cv.verdict == "pass":
            bullets.append(f"`{cv.name}` passes every criterion against `{verdict.baseline}`")
            note = unexercised_note(cv)
            if note is not None:
                bullets.append(f"**not exercised:** {note}")
            break
        word = "fails" if cv.verdict == "fail" else "is inconclusive"
        cells = [
            f"{key} {ev.label}{noise_mark(key, ev, simulated=verdict.stage == 'sim')}"
            for key, crit in cv.criteria.items()
            for ev in crit.cells
            if ev.status == cv.verdict
        ]
        if cv.consistency and not cells:
            cells = ["consistency checks broke (below)"]
        shown = "; ".join(cells[:MAX_DECIDING]) + ("; ..." if len(cells) > MAX_DECIDING else "")
        bullets.append(f"`{cv.name}` {word}: {shown}")
        if cv.verdict != "fail":
            break
    fresh = verdict.reproducibility
    if fresh is not None and fresh.cells:
        moving = "; ".join(c.label for c in fresh.cells)
        bullets.append(f"a fresh stage's runs most often move the decision through: {moving}")
    if fresh is not None and fresh.paired_cells:
        bullets.append(
            "drawn as the baseline's (their runs equal it seed for seed: the configuration "
            f"did not act there): {', '.join(fresh.paired_cells)}"
        )
    return ["**What decides it:**", "", *(f"- {b}" for b in bullets), ""]


def _round_figure(r: AdaptiveRound) -> str:
    if r.reproducibility is not None:
        return f"{r.reproducibility:.2f}"
    return "—" if r.stability is None else f"stability {r.stability:.1%}"


def _rounds_lead(rounds: Sequence[AdaptiveRound], matrix: Matrix, stage: str | None) -> list[str]:
    """What `run --until-stable` added, and why: one paragraph and a table per round."""
    if not rounds or stage is None:
        return []
    own = matrix.repetitions.for_stage(stage)
    added = sum((reps - own) * len(matrix.configurations) for reps in matrix.extension.values())
    lines = [
        f"**Repetitions added (`--until-stable`):** {added} run(s) beyond the matrix's {own} "
        f"repetition(s), in {len(rounds)} round(s), only to the cells whose fresh runs "
        "most often moved the decision:",
        "",
    ]
    rows = [
        [
            n,
            _round_figure(r),
            ", ".join(f"{cell} → {reps}" for cell, reps in r.cells.items()),
            r.why,
        ]
        for n, r in enumerate(rounds, 1)
    ]
    lines.extend(
        _table(["round", "reproduction probability before", "cells (repetitions in all)", "why"],
               rows)
    )  # fmt: skip
    lines.append("")
    return lines


def _criteria_section(
    verdict: Verdict, views: Mapping[str, CriterionView] = CRITERION_VIEWS
) -> list[str]:
    """A table per criterion; each criterion renders its own cells (evaluate.render)."""
    base = verdict.baseline
    simulated = verdict.stage == "sim"
    lines = ["## Criteria", ""]
    for index, key in enumerate(criterion_keys(verdict), start=1):
        view = view_for(key, views)
        lines.append(f"### {index}. {view.title} (`{key}`)")
        lines.append("")
        first = next(
            (cv.criteria[key] for cv in verdict.configs.values() if key in cv.criteria), None
        )
        if first is not None:
            lines.append(f"Rule: {first.rule}.")
            lines.extend(view.rule_notes(base, verdict.tolerance))
            lines.append("")
        rows: list[list[object]] = []
        for name, cv in verdict.configs.items():
            crit = cv.criteria.get(key)
            if crit is None:
                rows.append([name, "—", "—", "—", "—", "—", "—", "—", "—", "not judged"])
                continue
            if not crit.cells:
                rows.append(
                    [name, "—", "—", "—", "—", "—", "—", "—", _STATUS[crit.status], crit.reason]
                )
            for ev in crit.cells:
                text = view.cell_text(ev, base)
                n = f"{ev.n} / {ev.n_baseline}" if ev.n_baseline is not None else f"{ev.n}"
                errors = (
                    f"{ev.harness_errors} / {ev.harness_errors_baseline}"
                    if ev.harness_errors_baseline is not None
                    else f"{ev.harness_errors}"
                )
                rows.append(
                    [
                        name,
                        ev.label,
                        ev.size_class or "—",
                        text.value,
                        text.baseline_value,
                        text.limit,
                        n,
                        errors,
                        _STATUS[ev.status] + noise_mark(key, ev, simulated=simulated),
                        ev.reason,
                    ]
                )
        both = view.with_baseline
        header = [
            "configuration",
            "recipe / input",
            "size",
            "value",
            base,
            "limit",
            f"n (config / {base})" if both else "n",
            f"harness_error (config / {base})" if both else "harness_error",
            "status",
            "evidence",
        ]
        lines.extend(_table(header, rows))
        summary = "; ".join(
            f"{name}: {_STATUS[cv.criteria[key].status]}"
            for name, cv in verdict.configs.items()
            if key in cv.criteria
        )
        lines.extend(["", f"Result: {summary}.", ""])
    return lines


def _cells_section(verdict: Verdict, *, simulated: bool = False) -> list[str]:
    """`simulated`: durations and status report sizes are the simulator's (modelled)."""
    kind = f", {MODELLED}" if simulated else ""
    lines = [
        "## Per-cell results",
        "",
        "Medians over the valid runs (harness_error left out) that measured the figure."
        + (
            " Durations and status report sizes are modelled by the simulator, not measured."
            if simulated
            else ""
        ),
        "",
    ]
    header = [
        "recipe / input",
        "size",
        "configuration",
        "runs",
        "succeeded",
        "harness_error",
        "limit hits",
        "median input tokens",
        "median output tokens",
        "median iterations",
        f"median duration (s{kind})",
        f"median status report (bytes{kind})",
        "median persisted",
        "median reads",
        "quality ok",
    ]
    rows: list[list[object]] = []
    for s in verdict.cells:
        rows.append(_summary_row(s))
    lines.extend(_table(header, rows))
    lines.append("")
    return lines


def _summary_row(s: CellSummary) -> list[object]:
    hits = f"{s.limit_hits}" + (f" (+{s.limit_unknown} unmeasured)" if s.limit_unknown else "")
    quality = f"{s.quality_true}/{s.quality_known}" if s.quality_known else "not judged"
    return [
        f"{s.recipe}/{s.input}",
        s.size_class,
        s.config,
        s.runs,
        f"{s.succeeded}/{s.valid}",
        s.harness_errors,
        hits,
        number(s.median_input_tokens),
        number(s.median_output_tokens),
        number(s.median_iterations),
        number(s.median_duration_s),
        number(s.median_status_report_bytes),
        number(s.median_persisted),
        number(s.median_reads),
        quality,
    ]


def quality_below_baseline(verdict: Verdict, quality_recipes: Sequence[str]) -> list[str]:
    """A warning per configuration whose output quality, on a recipe that is not an
    acceptance criterion (e.g. code-review: only `acceptance.quality_recipes` are), is
    below the baseline's: the decision does not weigh it, the reader should."""
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for c in verdict.cells:
        if c.recipe in quality_recipes:
            continue
        good, known = totals.get((c.config, c.recipe), (0, 0))
        totals[(c.config, c.recipe)] = (good + c.quality_true, known + c.quality_known)
    base = verdict.baseline
    origin = "modelled by the simulator" if verdict.stage == "sim" else "measured"
    warnings = []
    for (config, recipe), (good, known) in totals.items():
        b_good, b_known = totals.get((base, recipe), (0, 0))
        if config == base or not known or not b_known:
            continue
        if good * b_known >= b_good * known:
            continue
        p = rate_lower_p(good, known, b_good, b_known)
        if verdict.stage == "sim":
            sure = "the configuration's own effect under the model (the runs pair seed for seed)"
        elif within_noise(p):
            sure = "a difference a configuration as good as the baseline shows often"
        else:
            sure = "unlikely to be noise alone"
        warnings.append(
            f"⚠ `{recipe}` output quality of `{config}` is {good}/{known} "
            f"({good / known:.0%}), below `{base}`'s {b_good}/{b_known} "
            f"({b_good / b_known:.0%}), {origin}; one-sided Fisher p = {p:.3f}: {sure}. "
            f"`{recipe}` quality is not an acceptance criterion "
            f"(acceptance.quality_recipes: {', '.join(quality_recipes) or 'none'}), so "
            "the decision does not weigh it."
        )
    return warnings


def _advisory_section(verdict: Verdict, quality_recipes: Sequence[str] = ()) -> list[str]:
    adv = verdict.advisory
    base = verdict.baseline
    lines = [
        "## Advisory statistics",
        "",
        "_Advisory only: these figures never change a status or the decision above._",
        "",
        f"Median input-token ratio (configuration / {base}) per cell with a "
        f"{adv.confidence:.0%} percentile bootstrap confidence interval "
        f"({adv.resamples:,} resamples, seed {adv.seed}). "
        + (
            "Runs of stage sim with the same cell and repetition met the same seeded agent, "
            "so where they pair the bootstrap is paired: the CI is that of the median "
            "per-pair ratio (method `paired`); otherwise each side is resampled on its own "
            "(method `independent`)."
            if verdict.stage == "sim"
            else "A cluster stage's runs are not seeded (a real model answers), so a "
            "repetition number pairs nothing: each side is resampled on its own (method "
            "`independent`)."
        ),
        "",
        f"Reading: `clear pass` / `clear fail` when the whole CI is on one side of the "
        f"limit; when the CI spans the limit, `close call` if the ratio is within "
        f"{CLOSE_CALL_BAND:.0%} of the limit, else `leans pass` / `leans fail` (the ratio "
        "is far from the limit, but the runs are too few or too spread for the CI to "
        f"clear it); `{TOO_FEW}` below {min_runs_for(adv.confidence)} values per side (or "
        "pairs), where no interval of a median at that confidence exists, even when every "
        "seeded pair is equal (exact for those seeds, but new repetitions are new seeds).",
        "",
    ]
    rows: list[list[object]] = []
    for t in adv.token_ratios:
        ratio = "n/a" if t.ratio is None else f"{t.ratio:.3f}"
        ci = "n/a" if t.ci is None else f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]"
        limit = f"{'<' if t.strict else '<='} {t.limit:.2f}"
        reading = t.reading
        per = "per configuration" if t.method == "paired" else "per side"
        if t.identical and t.reading != TOO_FEW:
            reading += ": every pair equal, exact for these seeds (new repetitions are new seeds)"
        elif t.identical:
            reading += ": every pair equal for these seeds, but new repetitions are new seeds"
        elif t.reading in ("close call", "leans pass", "leans fail"):
            reading += (
                f": ~{t.runs_to_resolve} run(s) {per} would likely settle it"
                if t.runs_to_resolve is not None
                else ": more runs would not settle it"
            )
        method = f"paired ({t.pairs} pairs)" if t.method == "paired" else "independent"
        rows.append(
            [
                t.config,
                f"{t.recipe}/{t.input}",
                t.size_class,
                ratio,
                method,
                ci,
                limit,
                f"{t.n} / {t.n_baseline}",
                reading,
            ]
        )
    header = [
        "configuration",
        "recipe / input",
        "size",
        "median ratio",
        "method",
        "CI",
        "limit",
        f"n (config / {base})",
        "reading",
    ]
    lines.extend(_table(header, rows))
    lines.append("")
    quality = quality_below_baseline(verdict, quality_recipes)
    if quality:
        lines.append("Quality outside the criteria:")
        lines.append("")
        lines.extend(f"- {w}" for w in quality)
        lines.append("")
    if adv.hints:
        lines.append("Hints:")
        lines.append("")
        lines.extend(f"- {h}" for h in adv.hints)
        lines.append("")
    return lines


def _notes_section(verdict: Verdict, records: Sequence[RunRecord]) -> list[str]:
    seen: dict[str, list[RunRecord]] = {}
    total = 0
    for r in records:
        if r.stage != verdict.stage:
            continue
        for note in r.notes:
            total += 1
            seen.setdefault(note, []).append(r)
    if not seen:
        return []
    lines = [
        "## Notes from the runs",
        "",
        f"{total} note(s), {len(seen)} distinct, printed as the harness recorded them.",
        "",
    ]
    for note, runs in list(seen.items())[:MAX_NOTES]:
        who = ", ".join(f"`{r.run_id}`" for r in runs[:3])
        more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
        lines.append(f"{len(runs)} run(s) ({who}{more}):")
        lines.append("")
        fence = _fence(note)
        lines.extend([f"{fence}text", note, fence, ""])
    if len(seen) > MAX_NOTES:
        lines.append(
            f"{len(seen) - MAX_NOTES} more distinct note(s) not shown; see the records file."
        )
        lines.append("")
    return lines


def _pods_section(verdict: Verdict, records: Sequence[RunRecord]) -> list[str]:
    """Per configuration, the mcp-host pods that served its runs and the values in
    effect there (cluster stages)."""
    served: dict[str, dict[tuple[str, str], tuple[dict[str, str | None], int]]] = {}
    for r in records:
        if r.stage != verdict.stage or not r.mcp_host_pods:
            continue
        for pod in r.mcp_host_pods:
            by = served.setdefault(r.config, {})
            values, runs = by.get((pod.name, pod.uid), (pod.values, 0))
            by[(pod.name, pod.uid)] = (values, runs + 1)
    if not served:
        return []
    rows: list[list[object]] = []
    for config, pods in served.items():
        for (name, uid), (values, runs) in pods.items():
            shown = ", ".join(
                f"{k.removeprefix('CLERUM_WORKFLOW_TOOL_SPILLOVER_')}={'unset' if v is None else v}"
                for k, v in values.items()
            )
            rows.append([config, f"`{name}`", f"`{uid}`", shown, runs])
    return [
        "## mcp-host pods that served the runs",
        "",
        "Read on each pod (env, valueFrom, envFrom as Kubernetes resolves them) before the "
        "configuration's runs and after each run; every one carried its configuration.",
        "",
        *_table(["configuration", "pod", "UID", "values in effect", "runs"], rows),
        "",
    ]


def _consistency_section(verdict: Verdict) -> list[str]:
    broken = [(name, cv.consistency) for name, cv in verdict.configs.items() if cv.consistency]
    if not broken:
        return []
    lines = [
        "## Consistency checks that broke",
        "",
        "The platform did not do what the configuration says in these runs, so the "
        "configuration cannot pass:",
        "",
    ]
    for name, items in broken:
        lines.extend(f"- `{name}`: {item}" for item in items[:MAX_NOTES])
    lines.append("")
    return lines


def _in_effect(env: Mapping[str, str]) -> str:
    """What an mcp-host with these variables runs with (the platform's defaults and
    bounds, sim.config), e.g. `spillover on, threshold 131072, budget 16777216`."""
    config, warnings = parse_spillover_env(env)
    if not config.enabled:
        said = "spillover off"
    else:
        said = f"spillover on, threshold {config.threshold}, budget {config.budget}"
    if warnings:
        said += f" ({len(warnings)} invalid value(s) replaced by the default)"
    return said


def _env_section(verdict: Verdict, matrix: Matrix) -> list[str]:
    """Each configuration's env as the matrix sets it and what that means, so a name
    (`off`, `32KiB`) can be checked against what it ran with."""
    envs = verdict.config_env or {c.name: dict(c.env) for c in matrix.configurations}
    rows: list[list[object]] = []
    for name, env in envs.items():
        role = "baseline" if name == verdict.baseline else ""
        try:
            config = matrix.configuration(name)
        except (KeyError, ValueError):
            config = None
        if config is not None and config.strategy == "handoff" and config.handoff is not None:
            h = config.handoff
            set_text = "none (strategy handoff)"
            effect = (
                f"handoff cache: threshold_tokens {h.threshold_tokens}, max_entries "
                f"{h.max_entries}, preview_chars {h.preview_chars}"
            )
        else:
            set_text = (
                ", ".join(f"`{k}={v}`" for k, v in env.items()) or "none (every variable unset)"
            )
            effect = _in_effect(env)
        rows.append([name, role or "—", set_text, effect])
    return [
        "### What each configuration sets",
        "",
        *_table(["configuration", "role", "spillover variables set", "in effect"], rows),
        "",
    ]


@functools.cache
def _shipped_matrix_name() -> str:
    return load_matrix().name


def _title(verdict: Verdict, matrix: Matrix | None = None) -> str:
    """The first line: the decision, and whether the stage was incomplete. A matrix
    other than the shipped one is named in it: its decision is about that matrix."""
    title = f"# Spillover validation: decision `{verdict.decision}`"
    if matrix is not None and matrix.name != _shipped_matrix_name():
        demo = " (a demo)" if matrix.name in DEMO_MATRICES else ""
        title = (
            f"# Spillover validation of matrix `{matrix.name}`{demo}: decision "
            f"`{verdict.decision}` for this matrix, not the shipped default"
        )
    inc = verdict.incomplete
    if inc is None:
        return title
    missing = f"{inc.missing} of {inc.expected} runs missing"
    if inc.judged:
        return f"{title}, judged on incomplete data ({missing})"
    return f"{title} (incomplete: {missing})"


def matrix_scope(matrix: Matrix) -> str | None:
    """What a matrix other than the shipped one is (`a demo (`make memory`)`, `not the
    shipped matrix`); None for the shipped matrix, whose decision is the default's."""
    if matrix.name == _shipped_matrix_name():
        return None
    target = DEMO_MATRICES.get(matrix.name)
    return f"a demo (`{target}`)" if target else "not the shipped matrix"


def _other_matrix_note(matrix: Matrix) -> list[str]:
    """Under the title of a matrix other than the shipped one: what its decision is
    about, so it is never read as the decision for the shipped default."""
    shipped = _shipped_matrix_name()
    what = matrix_scope(matrix)
    if what is None:
        return []
    description = " ".join(matrix.description.split())[:400].rstrip(".")  # one quoted line
    about = f": {description}" if description else ""
    return [
        f"> **Not the decision for the shipped default.** Matrix `{matrix.name}` is {what}"
        f"{about}. Its decision is what this matrix's own decision chain gives for "
        f"its own configurations and inputs; the shipped default is decided by the "
        f"`{shipped}` matrix (`make demo` on the simulator, then `make validate-minikube` "
        "and `make validate-dev`).",
        "",
    ]


def _provenance_lines(provenance: StageProvenance | None, *, simulator: bool) -> list[str]:
    """What made the stage (stage.json's `provenance`): one line, and on the simulator
    the parameter values in effect in a details block."""
    if provenance is None:
        return ["**Provenance:** not recorded (a stage.json without `provenance`).", ""]
    commit = (
        f"commit `{provenance.harness_commit}`"
        if provenance.harness_commit
        else "commit unknown (the harness ran from no git checkout)"
    )
    if provenance.harness_dirty:
        commit += (
            f" **with uncommitted changes to the harness** (diff "
            f"`{provenance.harness_diff_sha256}`)"
        )
    parts = [f"spillover-harness {provenance.harness_version or 'unknown'}, {commit}"]
    if provenance.seed is not None:
        parts.append(f"seed {provenance.seed}")
    if provenance.profile is not None:
        profile = f"cluster profile `{provenance.profile}`"
        if provenance.profile_sha256:
            profile += f" (content `{provenance.profile_sha256}`)"
        parts.append(profile)
    gate = provenance.stage1_gate
    if gate is not None:
        if gate.status == "overridden":
            why = f": {gate.reason}" if gate.reason else ""
            decided = f" (Stage 1 decided `{gate.stage1_decision}`)" if gate.stage1_decision else ""
            parts.append(f"**Stage 1 gate overridden with `{gate.flag}`**{decided}{why}")
        else:
            parts.append(f"Stage 1 gate passed (Stage 1 decided `{gate.stage1_decision}`)")
    params = provenance.simulator_parameters
    lines = [f"**Provenance:** {'; '.join(parts)}.", ""]
    if simulator and params:
        rows = [
            [group, name, value]
            for group, values in params.items()
            for name, value in values.items()
        ]
        lines.extend(
            [
                "<details>",
                "<summary>The simulator's parameter values in effect</summary>",
                "",
                *_table(["part", "parameter", "value"], rows[:MAX_PARAMETERS]),
                "",
                "</details>",
                "",
            ]
        )
    elif simulator:
        lines.extend(["The simulator's parameter values were not recorded.", ""])
    return lines


def _incomplete_section(verdict: Verdict) -> list[str]:
    inc = verdict.incomplete
    if inc is None:
        return []
    if inc.judged:
        lead = (
            f"**Judged on incomplete data:** {inc.missing} of the {inc.expected} runs the "
            "stage plans are not recorded; the criteria judged the runs that are "
            "(asked for with allow-incomplete)."
        )
    else:
        lead = (
            f"**The stage is incomplete:** {inc.missing} of the {inc.expected} runs it plans "
            "are not recorded, so no configuration is judged. Record them (resume the stage) "
            "or judge what is there on purpose (allow-incomplete)."
        )
    rows = [
        [
            c.config,
            f"{c.recipe}/{c.input}",
            f"{c.recorded} / {c.expected}",
            ", ".join(str(r) for r in c.missing_repetitions),
        ]
        for c in inc.cells
    ]
    lines = ["## Missing runs", "", lead, ""]
    lines.extend(
        _table(
            ["configuration", "recipe / input", "recorded / planned", "missing repetitions"], rows
        )
    )
    lines.append("")
    return lines


# -- the report ------------------------------------------------------------------------


def render_markdown(
    verdict: Verdict,
    records: Sequence[RunRecord],
    matrix: Matrix,
    *,
    plot_links: Sequence[str] = (),
    stage_notes: Sequence[str] = (),
    apply_hint: str | None = None,
    simulated_platform: bool = False,
    faults: Sequence[str] = (),
    views: Mapping[str, CriterionView] = CRITERION_VIEWS,
    memory_lane: MemoryLane | None = None,
    rounds: Sequence[AdaptiveRound] = (),
    provenance: StageProvenance | None = None,
    lane_problem: str | None = None,
) -> str:
    """report.md's text. `plot_links` are image paths relative to the report;
    `stage_notes` are lines shown under the stage (cluster stages: the mcp-host
    version validated, a Stage 1 override); `apply_hint` is the command that applies
    a decision (shown only when a platform stage decided: a simulated one says what it
    would take instead, never a bypass flag); `simulated_platform`: a cluster stage
    whose mcp-host was the simulator (profile `local`), disclaimed like sim; `faults`:
    the simulator faults the stage ran with (a test of the checks, never applied);
    `provenance`: stage.json's (None: not recorded, and the report says so)."""
    base = verdict.baseline
    stage = verdict.stage
    simulated = stage == "sim" or simulated_platform
    lines: list[str] = [_title(verdict, matrix), ""]
    # The disclaimer first: a reader of a simulated stage learns what it is before
    # reading its decision.
    if stage == "sim":
        lines.extend([f"> {SIM_DISCLAIMER}", ">", f"> {SENSITIVITY_LINK}", ""])
    elif simulated_platform:
        lines.extend([f"> {SIMULATED_PLATFORM_DISCLAIMER}", ""])
    if faults:
        lines.extend([f"> {faults_note(faults)}", ""])
    if provenance is not None and provenance.harness_dirty:
        lines.extend([
            "> **Made from a modified checkout:** the harness had uncommitted changes (diff "
            f"`{provenance.harness_diff_sha256}`); the commit named below does not reproduce "
            "these figures alone.",
            "",
        ])  # fmt: skip
    lines.extend(_other_matrix_note(matrix))
    lines.extend([f"**Decision: `{verdict.decision}`.** {verdict.decision_reason}.", ""])
    # the cells that would move it are listed under "What decides it"
    fresh = describe_reproducibility(verdict.decision, stage, verdict.reproducibility, cells=False)
    lines.extend([f"**Reproducibility:** {fresh}.", ""])
    lines.extend([f"**Stability:** {describe_stability(verdict.decision, verdict.stability)}.", ""])
    lines.extend(_deciding_cells(verdict, matrix))
    lines.extend(_rounds_lead(rounds, matrix, stage))
    if verdict.rules:
        chosen = ", ".join(f"`{k}` by {v.replace('_', '-')}" for k, v in verdict.rules.items())
        literal = verdict.literal_decision
        both = (
            f"the literal rule decides `{literal}` too"
            if literal == verdict.decision
            else f"**the literal rule decides `{literal}`**: the two readings disagree"
        )
        lines.extend(
            [f"**Rules:** {chosen} (the matrix's acceptance.rules, reference.md §5.4); {both}.", ""]
        )
    if verdict.decided and verdict.incomplete is None:
        if faults:
            pass  # said above: never applied
        elif simulated:
            lines.extend([SIMULATED_NOT_APPLIED.format(stage=stage), ""])
        elif apply_hint is not None:
            lines.extend(
                [
                    f"**To apply it:** `{apply_hint}` (`--dry-run` shows the change first; "
                    "`--gitops FILE` edits a policy manifest instead of the cluster).",
                    "",
                ]
            )
    if stage is None:
        lines.append("**Stage:** none (no record to evaluate).")
    else:
        lines.append(f"**Stage:** `{stage}`: {STAGE_DESCRIPTIONS.get(stage, stage)}.")
    lines.append("")
    for note in stage_notes:
        lines.extend([f"- {note}"])
    if stage_notes:
        lines.append("")
    lines.extend(_provenance_lines(provenance, simulator=stage == "sim"))
    errors = ", ".join(f"{name} {n}" for name, n in verdict.harness_errors.items())
    lines.extend(
        [
            f"Matrix `{verdict.matrix_name}`, every configuration judged against `{base}`. "
            f"{verdict.records_evaluated:,} record(s) evaluated; harness_error runs "
            f"(left out of every criterion): {errors}; "
            f"{verdict.ignored_total:,} record(s) ignored.",
            "",
        ]
    )
    lines.extend(_incomplete_section(verdict))
    lines.extend(["## Configurations", ""])
    if not verdict.configs:
        lines.extend(["No configuration was judged: the stage is incomplete.", ""])
    keys = criterion_keys(verdict)
    header = ["configuration", "verdict", *keys, "runs", "harness_error"]
    rows: list[list[object]] = []
    for name, cv in verdict.configs.items():
        rows.append(
            [
                name,
                _STATUS[cv.verdict],
                *(_STATUS[cv.criteria[k].status] if k in cv.criteria else "—" for k in keys),
                cv.runs,
                cv.harness_errors,
            ]
        )
    lines.extend(_table(header, rows))
    chain = (
        " → ".join(f"`{s.config}` passes: `{s.default}`" for s in matrix.decision.chain)
        + f" → otherwise `{matrix.decision.fallback}`"
    )
    lines.extend(
        [
            "",
            f"Decision chain: {chain}. An inconclusive configuration stops the chain.",
            "",
        ]
    )
    lines.extend(_env_section(verdict, matrix))
    if verdict.runs_needed and verdict.configs:
        lines.extend(["## Runs needed", ""])
        need_rows = []
        for need in verdict.runs_needed:
            ids = ", ".join(need.rerun_ids[:5]) + (" ..." if len(need.rerun_ids) > 5 else "")
            need_rows.append(
                [
                    need.config,
                    f"{need.recipe}/{need.input}",
                    need.runs,
                    ", ".join(need.criteria),
                    need.reason,
                    ids or "—",
                ]
            )
        lines.extend(
            _table(
                ["configuration", "recipe / input", "runs", "criteria", "why", "runs to redo"],
                need_rows,
            )
        )
        lines.append("")
    if verdict.configs:
        lines.extend(
            ["<details>", "<summary>The criteria, cell by cell (every figure and its noise)"
             "</summary>", ""]
        )  # fmt: skip
        lines.extend(_criteria_section(verdict, views))
        lines.extend(["</details>", ""])
    lines.extend(_consistency_section(verdict))
    lines.extend(_pods_section(verdict, records))
    memory = memory_section(
        records, matrix, stage, memory_lane, check=verdict.memory, lane_problem=lane_problem
    )
    if memory and stage == "sim":  # the simulator's model of memory: say so at the heading
        memory = [f"{memory[0]} ({MODELLED})", "", MODELLED_MEMORY, *memory[1:]]
    lines.extend(memory)
    lines.extend(status_report_section(verdict.status_report, simulated=simulated))
    lines.extend(_cells_section(verdict, simulated=simulated))
    lines.extend(cache_section(records, matrix))
    if verdict.configs:
        lines.extend(_advisory_section(verdict, matrix.acceptance.quality_recipes))
    if verdict.warnings:
        lines.extend(["## Warnings", ""])
        lines.extend(f"- {w}" for w in verdict.warnings)
        lines.append("")
    if verdict.ignored:
        lines.extend(["## Ignored records", ""])
        lines.extend(f"- {count} record(s): {why}" for why, count in verdict.ignored.items())
        lines.append("")
    lines.extend(_notes_section(verdict, records))
    if plot_links:
        lines.extend(["## Plots", ""])
        if stage == "sim":
            lines.extend(["Simulator figures (see the note at the top).", ""])
        for link in plot_links:
            name = Path(link).stem.replace("_", " ")
            lines.extend([f"![{name}]({link})", ""])
    return "\n".join(lines).rstrip("\n") + "\n"


def write_report(
    verdict: Verdict,
    records: Sequence[RunRecord],
    matrix: Matrix,
    out_dir: Path,
    *,
    stage: StageFile | None,
    records_dir: Path,
    stage_notes: Sequence[str] = (),
) -> ReportPaths:
    """Write report.md, verdict.json and plots/*.png under `out_dir`, each atomically,
    with the permissions the umask gives (as runs.jsonl has).

    `stage` is the stage.json beside the records (read by the caller, None when there
    is none): its faults and simulated platform are shown as `run` shows them, whatever
    the directory the report goes to. The apply command is named only when `out_dir`
    is `records_dir`: `apply-decision` applies a verdict beside its records, never a
    copy of the report elsewhere."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(records, matrix, verdict.stage, out_dir / "plots", verdict=verdict)
    links = [p.relative_to(out_dir).as_posix() for p in plots]
    directory = StageDir(out_dir)
    report_md = directory.report_file
    verdict_json = directory.write_verdict(verdict)
    beside_records = out_dir.resolve() == records_dir.resolve()
    try:
        lane, lane_problem = StageDir(records_dir).read_lane(), None
    except LaneFileError as exc:  # shown in the memory section, never fails the report
        lane, lane_problem = None, str(exc)
    text = render_markdown(
        verdict,
        records,
        matrix,
        plot_links=links,
        stage_notes=stage_notes,
        apply_hint=apply_command(out_dir) if beside_records else None,
        simulated_platform=stage is not None and stage.simulated_platform,
        faults=stage.driver.faults if stage is not None else (),
        memory_lane=lane,
        lane_problem=lane_problem,
        rounds=stage.rounds if stage is not None else (),
        provenance=stage.provenance if stage is not None else None,
    )
    atomic_write_bytes(report_md, text.encode("utf-8"))
    return ReportPaths(report_md=report_md, verdict_json=verdict_json, plots=plots)
